#!/usr/bin/env bash
# Install the Debian packages ectier needs to build, test and run, when they
# are missing.  Safe to run again: it installs nothing when all are present.
#
#   scripts/install-deps.sh            build + test dependencies
#   scripts/install-deps.sh --fuzz     also clang (libFuzzer)
#
# Needs root (or sudo) only when something is missing.
set -euo pipefail

pkgs=(gcc make cmake pkg-config libc6-dev
      libcjson-dev libssl-dev
      libzmq3-dev libucx-dev ucx-utils libmsgpack-dev
      python3 python3-zmq python3-msgpack procps iproute2
      python3-pytest python3-torch python3-pip python3-venv g++)
if [ "${1:-}" = "--fuzz" ]; then
    pkgs+=(clang libclang-rt-14-dev)
fi

missing=()
for p in "${pkgs[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install ${missing[*]}" >&2; exit 1; }
    sudo=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"

#!/usr/bin/env bash
# Build ectier with CUDA on the lent GPU machine, then run the GPU tests and
# the CUDA benchmark there.
#
# That machine has cmake, gcc, nvcc and pkg-config, but no libcjson, no
# OpenSSL headers and no package archive to fetch them from.  So first, on a
# machine with apt (Debian 12 here), download the packages into the
# repository's git-ignored .device/debs/:
#
#     mkdir -p .device/debs
#     (cd .device/debs && apt-get download libcjson1 libcjson-dev libssl-dev libssl3)
#
# and carry them to the GPU machine along with the working tree (with the
# device tool: carry [".device/debs"]; the four packages are ~4.5 MB).  This script
# unpacks them with dpkg -x into .device/prefix/, points pkg-config, CMake's
# FindOpenSSL and the run-time search path at that prefix, and configures
# with -DECT_WITH_CUDA=ON and -DECT_WITH_P2P=OFF, or ON when the ZeroMQ and
# msgpack-c packages are there too (the P2P benchmarks then run on that
# machine's cores; ~1.4 MB more):
#
#     (cd .device/debs && apt-get download libzmq5 libzmq3-dev libmsgpackc2 \
#         libmsgpack-dev libsodium23 libpgm-5.3-0 libnorm1)
#
# (libzmq5's other run-time needs, libbsd0 and libgssapi-krb5-2, are on the
# GPU machine already.)
#
# `ectier bench xport` times the seed's way (its rows against one UCX get
# per block) with ucx_perftest, which that machine lacks.  Debian's runs
# there from a directory of its own (the build needs none of it): download
#
#     mkdir -p .device/ucx
#     (cd .device/ucx && apt-get download ucx-utils libucx0 libibverbs1 \
#         librdmacm1 libnuma1 ibverbs-providers)
#
# carry .device/ucx as well, and on the GPU machine, after a build:
#
#     p=/tmp/ucxp; for d in .device/ucx/*.deb; do dpkg -x "$d" $p; done
#     PATH=$p/usr/bin:$PATH LD_LIBRARY_PATH=$p/usr/lib/x86_64-linux-gnu \
#         build-gpu/ectier bench xport
#
#   scripts/device-build.sh               configure, build, run the GPU tests and bench
#   scripts/device-build.sh --build-only  configure and build only (needs no GPU)
#
# Environment: BUILD (build directory, default build-gpu), JOBS (default
# nproc), TARGET (with --build-only: build only this CMake target, e.g.
# ectier_cli, the ectier tool, in a fraction of the time), OUT (if set,
# build.log, test-cuda.log, bench-cuda.log and nvidia-smi.txt are written
# there too).  Exits non-zero if the build, a test or the benchmark failed.
set -euo pipefail

build_only=0
case "${1:-}" in
--build-only) build_only=1 ;;
"") ;;
-h | --help)
    awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"
    exit 0
    ;;
*)
    echo "device-build: unknown argument '$1' (try --help)" >&2
    exit 2
    ;;
esac

if [ -n "${TARGET:-}" ] && [ "$build_only" -eq 0 ]; then
    echo "device-build: TARGET is for --build-only (the tests need every target)" >&2
    exit 2
fi

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${BUILD:-build-gpu}
jobs=${JOBS:-$(nproc)}
debs="$root/.device/debs"
prefix="$root/.device/prefix"
out=${OUT:-}
if [ -n "$out" ]; then mkdir -p "$out"; fi

# Log to stdout and, with OUT set, to $OUT/<name>.
log() {
    if [ -n "$out" ]; then tee "$out/$1"; else cat; fi
}

# ---- the packages ------------------------------------------------------------
missing=()
for pkg in libcjson1 libcjson-dev libssl-dev libssl3; do
    compgen -G "$debs/${pkg}_*.deb" >/dev/null || missing+=("$pkg")
done
if [ ${#missing[@]} -ne 0 ]; then
    cat >&2 <<EOF
device-build: missing Debian packages in $debs: ${missing[*]}
Fetch them on a machine with apt, from the repository root:
    mkdir -p .device/debs
    (cd .device/debs && apt-get download libcjson1 libcjson-dev libssl-dev libssl3)
then carry .device/debs to the GPU machine with the working tree.
EOF
    exit 2
fi

# Unpack once per set of packages and place (the .pc files name the
# prefix's absolute path, so a prefix carried from elsewhere is redone).
stamp="$prefix/.debs"
want="$prefix $(cd "$debs" && ls ./*.deb | sort | tr '\n' ' ')"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    rm -rf "$prefix"
    mkdir -p "$prefix"
    for deb in "$debs"/*.deb; do
        dpkg -x "$deb" "$prefix"
    done
    # The .pc files name /usr; make them name the prefix.
    find "$prefix" -name '*.pc' -exec \
        sed -i -E "s#^(prefix|exec_prefix|libdir|includedir)=/usr#\\1=$prefix/usr#" {} +
    echo "$want" >"$stamp"
fi
libdir=$(dirname "$(find "$prefix/usr/lib" -name 'libcjson.so' | head -n 1)")
p2p=OFF
if [ -f "$libdir/pkgconfig/libzmq.pc" ] && [ -f "$libdir/pkgconfig/msgpack.pc" ]; then
    p2p=ON
    # libzmq.pc names its static dependencies' .pc files, which are not
    # carried; a shared link needs none of them.
    sed -i -E '/^Requires.private:/d' "$libdir/pkgconfig/libzmq.pc"
    # msgpack.pc puts its library in ${exec_prefix}/lib, not the multiarch
    # directory it is really in (a system build finds it there anyway).
    sed -i -E "s#^libdir=.*#libdir=$libdir#" "$libdir/pkgconfig/msgpack.pc"
fi
[ -f "$libdir/libcrypto.so" ] || { echo "device-build: no libcrypto.so under $prefix" >&2; exit 2; }
multiarch_inc="$prefix/usr/include/$(basename "$libdir")"

# ---- configure and build -------------------------------------------------------
# CMakeLists.txt looks in /usr/local/cuda/bin; elsewhere, take nvcc from PATH.
if [ -z "${CUDACXX:-}" ] && [ ! -x /usr/local/cuda/bin/nvcc ]; then
    if command -v nvcc >/dev/null; then
        CUDACXX=$(command -v nvcc)
        export CUDACXX
    else
        echo "device-build: no nvcc in /usr/local/cuda/bin or on PATH (set CUDACXX)" >&2
        exit 2
    fi
fi
# PKG_CONFIG_LIBDIR (not _PATH): only the prefix's .pc files are seen, so a
# build here proves the same thing a build on the GPU machine needs.  The
# prefix goes in as DT_RPATH (--disable-new-dtags), not DT_RUNPATH: only
# the former also serves the libraries' own dependencies (libzmq's
# libsodium, libpgm, libnorm).
export PKG_CONFIG_LIBDIR="$libdir/pkgconfig"
export PKG_CONFIG_PATH="$libdir/pkgconfig"
{
    cmake -S . -B "$build" \
        -DCMAKE_BUILD_TYPE=Release \
        -DECT_WITH_P2P="$p2p" -DECT_WITH_CUDA=ON \
        -DOPENSSL_ROOT_DIR="$prefix/usr" \
        -DOPENSSL_INCLUDE_DIR="$prefix/usr/include" \
        -DOPENSSL_CRYPTO_LIBRARY="$libdir/libcrypto.so" \
        -DCMAKE_C_FLAGS="-I$multiarch_inc" \
        -DCMAKE_BUILD_RPATH="$libdir" \
        -DCMAKE_EXE_LINKER_FLAGS="-Wl,--disable-new-dtags" \
        -DCMAKE_SHARED_LINKER_FLAGS="-Wl,--disable-new-dtags"
    cmake --build "$build" -j "$jobs" ${TARGET:+--target "$TARGET"}
} 2>&1 | log build.log
[ "$build_only" -eq 1 ] && exit 0

# ---- run -------------------------------------------------------------------------
if command -v nvidia-smi >/dev/null; then
    nvidia-smi 2>&1 | log nvidia-smi.txt || true
fi
rc=0
tests/run-tests.sh "$build" test_cuda 2>&1 | log test-cuda.log || rc=1
"$build/ectier" bench cuda 2>&1 | log bench-cuda.log || rc=1
exit "$rc"

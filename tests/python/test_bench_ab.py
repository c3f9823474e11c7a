"""scripts/bench-ab.py, the fair comparison of builds on a benchmark, run
against stand-in executables that print `bench --json` lines whose figures we
choose and that log the order they were run in."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(os.path.dirname(os.path.dirname(HERE)), "scripts", "bench-ab.py")


def fake_build(tmp_path, label: str, ratios: list[float], exit_code: int = 0) -> str:
    """An executable that answers its n-th `bench --json ...` with the n-th of
    ratios (as the figure 'x: row'), a figure without a ceiling, and a line
    that is not JSON; it appends its label and arguments to order.log."""
    path = tmp_path / f"build-{label}"
    count = tmp_path / f"count-{label}"
    log = tmp_path / "order.log"
    path.write_text(
        f"""#!{sys.executable}
import json, sys
n = int(open({str(count)!r}).read()) if __import__("os").path.exists({str(count)!r}) else 0
open({str(count)!r}, "w").write(str(n + 1))
open({str(log)!r}, "a").write({label!r} + " " + " ".join(sys.argv[1:]) + "\\n")
r = {ratios!r}[n % {len(ratios)}]
print("== bench x: not json", file=sys.stderr)
print("{{not json")
print(json.dumps({{"bench": "x", "name": "row", "value": r * 10, "unit": "GB/s",
                  "ceiling": 10, "ratio": r, "target": 0.9}}))
print(json.dumps({{"bench": "x", "name": "latency", "value": 100 + n, "unit": "us",
                  "ceiling": None, "ratio": None, "target": None}}))
sys.exit({exit_code})
"""
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def run(args, **kw):
    cmd = [sys.executable, SCRIPT] + args
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def row(stdout: str, name: str) -> str:
    lines = [line for line in stdout.splitlines() if line.startswith(name)]
    assert len(lines) == 1, stdout
    return lines[0]


def test_medians_ranges_and_differences_per_build(tmp_path):
    a = fake_build(tmp_path, "a", [0.5, 0.9, 0.6, 0.7])
    b = fake_build(tmp_path, "b", [0.8, 0.8, 0.4, 0.9])
    p = run(["--runs", "4", f"old={a}", f"new={b}", "--", "xport", "--fast"])
    assert p.returncode == 0, p.stderr
    line = row(p.stdout, "x: row")
    # old: median of 0.5 0.9 0.6 0.7 = 0.65; new: of 0.8 0.8 0.4 0.9 = 0.8.
    assert "0.65 (0.50-0.90)" in line and "0.80 (0.40-0.90)" in line and line.endswith("+0.15")
    assert "ratio" in line
    # No ceiling: the value itself (100..103, median 101.5), with its unit.
    lat = row(p.stdout, "x: latency")
    assert "101.5 (100-103)" in lat and " us " in lat
    # Every run got the benchmark's own arguments after `bench --json`.
    log = (tmp_path / "order.log").read_text().splitlines()
    assert len(log) == 8 and all(l.split(" ", 1)[1] == "bench --json xport --fast" for l in log)


def test_each_build_takes_each_place_as_often(tmp_path):
    builds = [fake_build(tmp_path, k, [0.5]) for k in "abcd"]
    p = run(["--runs", "8"] + [f"{k}={b}" for k, b in zip("abcd", builds)] + ["--", "copy"])
    assert p.returncode == 0, p.stderr
    order = [l.split()[0] for l in (tmp_path / "order.log").read_text().splitlines()]
    rounds = [order[i : i + 4] for i in range(0, 32, 4)]
    assert all(sorted(r) == list("abcd") for r in rounds)
    for place in range(4):
        assert sorted(r[place] for r in rounds) == sorted("abcd" * 2)
    assert "orders: a b c d | b c d a | c d a b | d a b c | d c b a" in p.stdout


def test_a_failing_run_is_reported_and_the_rest_kept(tmp_path):
    good = fake_build(tmp_path, "good", [0.7])
    bad = fake_build(tmp_path, "bad", [0.1], exit_code=3)
    out = tmp_path / "runs"
    p = run(["--runs", "2", "--out", str(out), f"good={good}", f"bad={bad}", "--", "step"])
    assert p.returncode == 1
    assert "bad run 1 (exit 3" in p.stderr and "bad run 2 (exit 3" in p.stderr
    assert "0.70 (0.70-0.70)" in row(p.stdout, "x: row")
    # Every run's output is kept, the failed ones too.
    assert sorted(os.listdir(out)) == sorted(
        f"{k}-{r}.{e}" for k in ("good", "bad") for r in (1, 2) for e in ("jsonl", "txt")
    )
    assert '"ratio": 0.1' in (out / "bad-1.jsonl").read_text()


def test_bad_arguments_exit_2(tmp_path):
    exe = fake_build(tmp_path, "a", [0.5])
    for args in (
        [f"a={exe}"],  # no "--"
        ["--", "xport"],  # no build
        [f"a={exe}", f"a={exe}", "--", "xport"],  # a label twice
        [f"{exe}", "--", "xport"],  # no label
        [f"a={tmp_path / 'missing'}", "--", "xport"],
        ["--runs", "0", f"a={exe}", "--", "xport"],
    ):
        p = run(args)
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        assert p.stderr.strip(), args
    assert not (tmp_path / "order.log").exists()

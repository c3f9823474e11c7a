#!/usr/bin/env python3
"""Compare builds of ectier on the same benchmarks, fairly.

    scripts/bench-ab.py [--runs N] [--out DIR] LABEL=EXECUTABLE... -- BENCH_ARGS...

Runs `EXECUTABLE bench --json BENCH_ARGS` N times (default 6) for every
build and prints, for every figure, each build's median over its runs (the
ratio to the figure's own ceiling where it has one, else the value) with its
range, and each build's median less the first build's.

Why a script: on a shared or virtual machine one run of a benchmark can be
much slower than the next for reasons of the machine (on the project's VM the
same figure of the same binary moves by 0.2 of its ceiling between runs), and
the place of a run in the sequence matters too (the first after another
process exits can be slower).  So each round runs every build once, and the
order is rotated round by round and reversed every other cycle, so that each
build takes each place as often as the others; the ratios are each taken to a
ceiling measured in the same run, which takes out most of the machine's
phases.  Compare medians, and trust a difference only where it is larger than
the ranges' overlap.

With --out DIR each run's JSON lines go to DIR/LABEL-RUN.jsonl and the rest of
its output to DIR/LABEL-RUN.txt.  Exit status: 0; 1 when a run failed or gave
no figure (it says which); 2 on bad arguments.  Uses only the standard library
(the GPU host's Python has nothing else).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def parse_args(argv):
    if "--" not in argv:
        print(
            "bench-ab: usage: bench-ab.py [--runs N] [--out DIR] LABEL=EXECUTABLE..."
            " -- BENCH_ARGS...",
            file=sys.stderr,
        )
        sys.exit(2)
    cut = argv.index("--")
    p = argparse.ArgumentParser(prog="bench-ab.py", add_help=True)
    p.add_argument("--runs", type=int, default=6, help="runs of each build (default 6)")
    p.add_argument("--out", help="keep every run's output in this directory")
    p.add_argument("builds", nargs="+", metavar="LABEL=EXECUTABLE")
    args = p.parse_args(argv[:cut])
    args.bench_args = argv[cut + 1 :]
    if args.runs < 1:
        p.error("--runs must be at least 1")
    builds = []
    for spec in args.builds:
        label, sep, exe = spec.partition("=")
        if not sep or not label or not exe:
            p.error(f"'{spec}' is not LABEL=EXECUTABLE")
        if any(label == b[0] for b in builds):
            p.error(f"label '{label}' given twice")
        if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
            p.error(f"'{exe}' is not an executable file")
        builds.append((label, exe))
    args.builds = builds
    return args


def orders(labels, runs):
    """Round r runs every build once: rotated by r, reversed every other cycle."""
    k = len(labels)
    for r in range(runs):
        order = labels[r % k :] + labels[: r % k]
        if (r // k) % 2 == 1:
            order.reverse()
        yield order


def figures(stdout):
    """(bench: name) -> (number, what) from `bench --json` lines: the ratio
    where the figure has one, else its value and unit."""
    got = {}
    for line in stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            o = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(o, dict) or "name" not in o or "value" not in o:
            continue
        key = f"{o.get('bench', '?')}: {o['name']}"
        base, n = key, 2
        while key in got:  # the same name twice in one run
            key, n = f"{base} #{n}", n + 1
        if isinstance(o.get("ratio"), (int, float)):
            got[key] = (float(o["ratio"]), "ratio")
        elif isinstance(o["value"], (int, float)):
            got[key] = (float(o["value"]), o.get("unit") or "")
    return got


def fmt(v, what, sign=""):
    """Ratios to two decimals, values to four significant digits."""
    return f"{v:{sign}.2f}" if what == "ratio" else f"{v:{sign}.4g}"


def main(argv):
    args = parse_args(argv)
    labels = [b[0] for b in args.builds]
    exe_of = dict(args.builds)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
    results = {label: [] for label in labels}  # label -> [figures of a run]
    failed = []
    plan = list(orders(labels, args.runs))
    for r, order in enumerate(plan):
        for label in order:
            cmd = [exe_of[label], "bench", "--json"] + args.bench_args
            t0 = time.monotonic()
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            took = time.monotonic() - t0
            if args.out:
                base = os.path.join(args.out, f"{label}-{r + 1}")
                with open(base + ".jsonl", "w") as f:
                    f.write(proc.stdout)
                with open(base + ".txt", "w") as f:
                    f.write(proc.stderr)
            figs = figures(proc.stdout)
            print(
                f"bench-ab: round {r + 1}/{args.runs} {label}: {len(figs)} figures "
                f"in {took:.1f} s, exit {proc.returncode}",
                file=sys.stderr,
            )
            if proc.returncode != 0 or not figs:
                failed.append(f"{label} run {r + 1} (exit {proc.returncode}, {len(figs)} figures)")
                continue
            results[label].append(figs)
    print(
        f"bench-ab: {args.runs} run(s) of each of {len(labels)} build(s) of "
        f"`bench {' '.join(args.bench_args)}`; orders: "
        + " | ".join(" ".join(o) for o in plan)
    )
    for label in labels:
        print(f"  {label} = {exe_of[label]}")
    keys = []
    for label in labels:
        for figs in results[label]:
            keys.extend(k for k in figs if k not in keys)
    width = max([len(k) for k in keys] + [10])
    head = "".join(f"  {label:>22}" for label in labels)
    print(f"{'figure (median of the runs, range)':<{width}}  {'of':<6}{head}  vs {labels[0]}")
    for key in keys:
        cells, medians, what = [], [], ""
        for label in labels:
            vals = [figs[key][0] for figs in results[label] if key in figs]
            what = what or next((figs[key][1] for figs in results[label] if key in figs), "")
            if not vals:
                cells.append(f"{'-':>22}")
                medians.append(None)
                continue
            m = statistics.median(vals)
            medians.append(m)
            span = f"{fmt(min(vals), what)}-{fmt(max(vals), what)}"
            cells.append(f"{fmt(m, what)} ({span})".rjust(22))
        deltas = [
            "-" if m is None or medians[0] is None else fmt(m - medians[0], what, "+")
            for m in medians[1:]
        ]
        shown = "".join(c if c.isprintable() else "?" for c in key)
        cols = "".join(f"  {c}" for c in cells)
        print(f"{shown:<{width}}  {what[:6]:<6}{cols}  " + " ".join(deltas))
    if failed:
        print("bench-ab: failed: " + "; ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

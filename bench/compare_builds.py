#!/usr/bin/env python3
"""Step time of two builds of zero, interleaved in one run (bench_engine, old, new, old, ...).

    bench/compare_builds.py --old OLD_BUILD_DIR --new NEW_BUILD_DIR [--rounds 8] [--np 2]
                            [-- bench_engine options, default --overlap 0 --steps 4]

Each round runs OLD_BUILD_DIR/bench/bench_engine and NEW_BUILD_DIR/bench/bench_engine once, in
alternating order (old first in even rounds, new first in odd ones), so drift in the shared
machine's speed reaches both builds alike. Per configuration it prints the median over rounds
of each build's median step time, their ratio new/old with the spread of the per-round ratios,
and whether the model-state bytes per rank are identical. Used for issue 11's "no change in
behaviour" proof (docs/benchmarks.md).
"""
import argparse
import os
import statistics
import subprocess
import sys


def run(build, np, bench_args):
    binary = os.path.join(build, "bench", "bench_engine")
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
    env.pop("OPENBLAS_CORETYPE", None)
    command = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(np),
               "-x", "OMP_WAIT_POLICY", binary] + bench_args
    out = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 10 and cells[1].replace(".", "").isdigit():
            rows[cells[0]] = {"ms": float(cells[1]), "state_mib": cells[3],
                              "parts": tuple(cells[4:8])}
    if not rows:
        sys.exit(f"no result table from {binary}:\n{out}")
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--old", required=True)
    parser.add_argument("--new", required=True)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("bench_args", nargs="*")
    args = parser.parse_args()
    bench_args = args.bench_args or ["--overlap", "0", "--steps", "4"]

    results = {"old": [], "new": []}
    for r in range(args.rounds):
        order = ["old", "new"] if r % 2 == 0 else ["new", "old"]
        for which in order:
            results[which].append(run(getattr(args, which), args.np, bench_args))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)

    print(f"{args.rounds} rounds, {args.np} ranks, bench_engine {' '.join(bench_args)}\n")
    print("| configuration | old ms | new ms | new/old | per-round new/old (min-max) | "
          "model-state MiB/rank old, new | identical |")
    print("|---|---|---|---|---|---|---|")
    for name in results["old"][0]:
        old = [rows[name]["ms"] for rows in results["old"]]
        new = [rows[name]["ms"] for rows in results["new"]]
        ratios = [n / o for n, o in zip(new, old)]
        same = all(rows[name]["parts"] == results["old"][0][name]["parts"]
                   for rows in results["old"] + results["new"])
        print(f"| {name} | {statistics.median(old):.0f} | {statistics.median(new):.0f} | "
              f"{statistics.median(new) / statistics.median(old):.3f} | "
              f"{min(ratios):.3f}-{max(ratios):.3f} | {results['old'][0][name]['state_mib']}, "
              f"{results['new'][0][name]['state_mib']} | {'yes' if same else 'NO'} |")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""How far the autotune's step times sit from the bench's, by the length of the autotune's graphs, on logged
sweeps (the autotune's DEBUG step lines and the same run's bench rows, read by steplog.py).

For each run, size and algorithm: the autotune's time per operation over the bench's (graphs of ten), and
the number of operations the autotune's graph held. That number is not logged; it is recomputed from the
rule of the run's code (collectives/autotune_gpu.c: ops = clamp(1 + target / pred, min, 8)), with pred the
model's prediction, which the bench prints beside each row (--model 1). Prints:
  1. per algorithm and graph length, the median ratio (1.00: the autotune reads what the bench reads);
  2. the plan's all-reduce time (4 replays of each candidate's graph, the autotune's own step times) under
     other targets, per run, to price a longer graph.
    graph_length_bias.py lab_allreduce_steps_and_rows.txt"""
import collections
import re
import statistics
import sys

from steplog import parse

# the run's rule: (target µs, least operations); the most is 8 in every run
RULE = {"call5_lab": (150, 4), "call5_device": (150, 4), "call3_v4x3": (150, 4), "call3_v8x3": (150, 8),
        "call3_v2x3": (150, 2)}


def ops_of(pred, target, least, most=8):
    return most if target / pred >= most else max(least, 1 + int(target / pred))


def runs_of(path):
    """The runs of the rules above, each with its code's name and rank count."""
    runs = []
    for r in parse(path):
        code = r["name"].split()[0]
        if code in RULE:
            r["code"], r["ranks"] = code, int(re.search(r"(\d+) ranks", r["name"]).group(1))
            runs.append(r)
    return runs


def main():
    runs = runs_of(sys.argv[1])
    print("1. autotune / bench, median (n), per algorithm and autotune graph length; lab runs")
    for name in sorted({r["code"] for r in runs if "device" not in r["code"]}):
        target, least = RULE[name]
        by = collections.defaultdict(list)
        for r in (r for r in runs if r["code"] == name):
            for kind, size, times, _, _ in r["steps"]:
                for algo, t in times.items():
                    if kind == "all_reduce" and algo in r["bench"].get(size, {}):
                        pred = r["pred"][size][algo]
                        by[(algo, ops_of(pred, target, least))].append(t / r["bench"][size][algo])
        print(f"  {name} (graphs of {least} to 8, about {target} µs)")
        for algo in sorted({a for a, _ in by}):
            cells = [f"{n}: {statistics.median(v):.3f} ({len(v)})" for (a, n), v in sorted(by.items()) if a == algo]
            print(f"    {algo:16s} " + "  ".join(cells))
    print("\n2. the plan's all-reduce operations, ms (4 replays per candidate), under targets of 150/400/1000 µs "
          "and graphs of 8 throughout")
    for r in runs:
        if not r["code"].startswith("call5"):
            continue
        cost = []
        for target, least in ((150, 4), (400, 4), (1000, 4), (1e9, 8)):
            cost.append(sum(4 * ops_of(r["pred"].get(size, {}).get(a, t), target, least) * t
                            for kind, size, times, _, _ in r["steps"] if kind == "all_reduce"
                            for a, t in times.items()) / 1e3)
        print(f"  {r['code']:13s} {r['ranks']:2d} ranks: " + " / ".join(f"{c:7.1f}" for c in cost))


if __name__ == "__main__":
    main()

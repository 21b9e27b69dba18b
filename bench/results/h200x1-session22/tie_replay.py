#!/usr/bin/env python3
"""Replays the autotune's decision with other tie thresholds on logged sweeps: for every all-reduce size of
every run, the autotune's own step times (DEBUG lines) give the choice under a tie of t (the model's choice
stands when within t of the fastest), and the same run's bench rows give that choice's time against the
best forced algorithm. Prints, per t, how many rows land above 1.10x and which.
    tie_replay.py lab_allreduce_steps_and_rows.txt   (lab_sweep.sh logs work too)"""
import re
import sys

SZ = {"KiB": 1024, "MiB": 1 << 20}


def parse(path):
    runs, cur = [], None
    for line in open(path, errors="replace"):
        if line.startswith("== "):
            cur = {"name": line.split(":")[0][3:], "steps": {}, "bench": {}}
            runs.append(cur)
            continue
        if cur is None:
            continue
        m = re.search(r"autotune step \d+ of \d+: all_reduce (\d+) (KiB|MiB): (.*) -> (\w+) \(the model: (\w+)\)", line)
        if m:
            times = {a: float(t) for a, t in re.findall(r"(\w+) ([\d.]+) us", m.group(3))}
            cur["steps"][int(m.group(1)) * SZ[m.group(2)]] = (times, m.group(5))
            continue
        m = re.match(r"\s+(\d+)\s+\d+\s+bfloat16\s+sum\s+(\S+)\s+\|\s+([\d.]+)", line)
        if m:
            cur["bench"].setdefault(int(m.group(1)), {})[m.group(2)] = float(m.group(3))
    return runs


def choose(times, model, tie):
    fastest = min(times, key=times.get)
    return model if model in times and times[model] <= (1 + tie) * times[fastest] else fastest


def main():
    rows = {}
    for path in sys.argv[1:]:
        for run in parse(path):
            for size, (times, model) in run["steps"].items():
                forced = {a: t for a, t in run["bench"].get(size, {}).items() if not a.startswith("auto")}
                if not forced:
                    continue
                best = min(forced, key=forced.get)
                for tie in (0.0, 0.01, 0.03, 0.05):
                    c = choose(times, model, tie)
                    if c in forced:
                        rows.setdefault(tie, []).append((forced[c] / forced[best], run["name"], size, c, best))
    for tie, r in sorted(rows.items()):
        bad = sorted((x for x in r if x[0] > 1.10), reverse=True)
        print(f"tie {tie:.2f}: {len(r)} rows, {len(bad)} above 1.10x, mean auto/best {sum(x[0] for x in r) / len(r):.4f}")
        for x in bad:
            print("   %.3f  %s  %d B  %s (best %s)" % x)


if __name__ == "__main__":
    main()

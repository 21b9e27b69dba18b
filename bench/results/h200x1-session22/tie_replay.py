#!/usr/bin/env python3
"""Replays the autotune's decision with other tie thresholds on logged sweeps: for every all-reduce size of
every run, the autotune's own step times (DEBUG lines) give the choice under a tie of t (the model's choice
stands when within t of the fastest), and the same run's bench rows give that choice's time against the
best forced algorithm. Prints, per t, how many rows land above 1.10x and which.
    tie_replay.py lab_allreduce_steps_and_rows.txt   (lab_sweep.sh logs work too)"""
import sys

from steplog import parse, winner


def main():
    rows = {}
    for path in sys.argv[1:]:
        for run in parse(path):
            for kind, size, times, _, model in run["steps"]:
                forced = run["bench"].get(size, {})
                if kind != "all_reduce" or not forced:
                    continue
                best = min(forced, key=forced.get)
                for tie in (0.0, 0.01, 0.03, 0.05):
                    c = winner(times, model, tie)
                    if c in forced:
                        rows.setdefault(tie, []).append((forced[c] / forced[best], run["name"], size, c, best))
    for tie, r in sorted(rows.items()):
        bad = sorted((x for x in r if x[0] > 1.10), reverse=True)
        print(f"tie {tie:.2f}: {len(r)} rows, {len(bad)} above 1.10x, mean auto/best {sum(x[0] for x in r) / len(r):.4f}")
        for x in bad:
            print("   %.3f  %s  %d B  %s (best %s)" % x)


if __name__ == "__main__":
    main()

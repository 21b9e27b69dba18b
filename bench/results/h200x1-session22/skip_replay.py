#!/usr/bin/env python3
"""Replays a skip rule for the autotune over logged steps (every op, every run of the session:
autotune_steps_all_ops.txt): at each size, a candidate other than the model's choice that the slowest rank
read at more than FACTOR times the fastest at half the size is not measured (collectives/autotune.c,
symmem_autotune_skips; one skipped there has no reading, so it is measured at the next size). For each
factor it prints the share of the measuring time left out (estimated: four replays of a graph of the run's
length per candidate) and every size whose choice would change (the winner, tie rule included, from the logged times with and
without the skips), with the new choice's logged time over the old one's.
    skip_replay.py autotune_steps_all_ops.txt"""
import sys

from steplog import parse, winner

# the least operations per graph in each run's code (call 1: graphs of one); the most is 8, about 150 us
LEAST = {"call1": 1, "call3_v2x3": 2, "call3_v4x3": 4, "call3_v8x3": 8, "call5": 4}


def ops(t, least):
    if least == 1:
        return 1
    return 8 if 150 / t >= 8 else max(least, 1 + int(150 / t))


def replay(runs, factor):
    total = saved = 0.0
    changes = []
    for run in runs:
        least = next(v for k, v in LEAST.items() if run["name"].startswith(k))
        last = {}
        for kind, size, times, _, model in run["steps"]:
            kept = dict(times)
            prev = last.get(kind)
            if prev and prev[0] * 2 == size:
                fastest = min(prev[1].values())
                kept = {a: t for a, t in times.items() if a == model or prev[1].get(a, 0) <= factor * fastest}
            cost = {a: 4 * ops(t, least) * t for a, t in times.items()}
            total += sum(cost.values())
            saved += sum(c for a, c in cost.items() if a not in kept)
            # against the same replay without skips: the logged choice itself came from unrounded times
            old, new = winner(times, model), winner(kept, model)
            if new != old:
                changes.append((times[new] / times[old], run["name"], kind, size, old, new))
            last[kind] = (size, kept)  # a skipped candidate has no reading here: measured at the next size
    return saved / total, changes


def main():
    runs = parse(sys.argv[1])
    print(f"{len(runs)} runs, {sum(len(r['steps']) for r in runs)} steps")
    for factor in (1.5, 2.0, 3.0):
        share, changes = replay(runs, factor)
        print(f"factor {factor}: {100 * share:.0f}% of the measuring time left out; {len(changes)} choices change")
        for c in sorted(changes, reverse=True):
            print("   %.3f  %s  %s %d B: %s -> %s" % c)


if __name__ == "__main__":
    main()

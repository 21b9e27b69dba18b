#!/usr/bin/env python3
"""The autotune's readings against the bench's, from the logs of bench/lab_sweep.sh run with
SYMMEM_LOG_LEVEL=DEBUG (lab_host_numa.log, lab_device.log).

In each run (a line "== PLACEMENT, N ranks: command"), the autotune logs one DEBUG line per step at init
("autotune step 8 of 39: all_reduce 128 KiB: twoshot_pull 76.9 us x8, copy_engine skipped, ... -> twoshot_push
(the model: twoshot_push)": the slowest rank's time per operation and the operations its graph held), and the
bench then prints every forced algorithm's all-reduce row at the same sizes (graphs of LAB_N operations). Prints:
  1. per run, the candidates measured and skipped;
  2. per algorithm and autotune graph length, the median of autotune / bench (1.00: the autotune reads what the
     bench reads), over every all-reduce step of every run given;
  3. every all-reduce step whose choice the bench's times would have made otherwise (the same rule: the
     fastest of the step's measured candidates, the model's choice within the tie), with the bench's time of
     the autotune's choice over that of the bench's choice: these are the choices the readings flipped.

    python3 bench/autotune_vs_bench.py OUT/lab_host_numa.log OUT/lab_device.log
"""
import collections
import re
import statistics
import sys

SIZE = {"B": 1, "KiB": 1024, "MiB": 1 << 20}
STEP = re.compile(r"autotune step \d+ of \d+: (\w+) (\d+) (B|KiB|MiB): (.*) -> (\w+) \(the model: (\w+)\)")
READ = re.compile(r"(\w+) ([\d.]+) us x(\d+)")
# "  1024  512  bfloat16  sum  oneshot_push |  7.05 ..." (the bench's nccl-tests row; auto rows are "auto:ALGO")
ROW = re.compile(r"\s+(\d+)\s+\d+\s+bfloat16\s+sum\s+(\S+)\s+\|\s+([\d.]+)")
TIE = 0.03  # collectives/autotune.c, symmem_autotune_cfg_default


def parse(paths):
    """[{name, steps: [(kind, bytes, {algo: (us, ops)}, skipped, chosen, model)], bench: {bytes: {algo: us}}}]"""
    runs = []
    for path in paths:
        cur = None
        for line in open(path, errors="replace"):
            if line.startswith("== "):
                cur = {"name": line[3:].split(":")[0].strip(), "steps": [], "bench": {}}
                runs.append(cur)
                continue
            if cur is None:
                continue
            m = STEP.search(line)
            if m:
                reads = {a: (float(t), int(k)) for a, t, k in READ.findall(m.group(4))}
                skipped = re.findall(r"(\w+) skipped", m.group(4))
                size = int(m.group(2)) * SIZE[m.group(3)]
                cur["steps"].append((m.group(1), size, reads, skipped, m.group(5), m.group(6)))
                continue
            m = ROW.match(line)
            if m and not m.group(2).startswith("auto"):
                cur["bench"].setdefault(int(m.group(1)), {})[m.group(2)] = float(m.group(3))
    return runs


def winner(times, model):
    """The autotune's rule (symmem_autotune_winner): the fastest, unless the model's choice is within TIE."""
    fastest = min(times, key=times.get)
    return model if model in times and times[model] <= (1 + TIE) * times[fastest] else fastest


def main(paths):
    runs = parse(paths)
    ratios = collections.defaultdict(list)
    flips = []
    print(f"{len(runs)} runs, {sum(len(r['steps']) for r in runs)} autotune steps\n")
    print("1. candidates measured / skipped, per run")
    for r in runs:
        measured = sum(len(s[2]) for s in r["steps"])
        skipped = sum(len(s[3]) for s in r["steps"])
        print(f"  {r['name']:28s} {len(r['steps']):3d} steps, {measured:4d} measured, {skipped:3d} skipped")
        for kind, size, reads, _, chosen, model in r["steps"]:
            bench = r["bench"].get(size, {})
            if kind != "all_reduce" or not bench:
                continue
            for algo, (us, ops) in reads.items():
                if algo in bench:
                    ratios[(algo, ops)].append(us / bench[algo])
            common = {a: bench[a] for a in reads if a in bench}
            if chosen in common and common:
                by_bench = winner(common, model)
                if by_bench != chosen:
                    flips.append((common[chosen] / common[by_bench], r["name"], size, chosen, by_bench))
    print("\n2. autotune / bench, median (count), per algorithm and autotune graph length (all-reduce)")
    for algo in sorted({a for a, _ in ratios}):
        cells = [f"x{k}: {statistics.median(v):.3f} ({len(v)})" for (a, k), v in sorted(ratios.items()) if a == algo]
        print(f"  {algo:16s} " + "  ".join(cells))
    print("\n3. all-reduce choices the bench's times make otherwise (bench time of the autotune's choice / of the "
          "bench's)")
    for f in sorted(flips, reverse=True):
        print("  %.3f  %s, %d B: autotune %s, bench %s" % f)
    if not flips:
        print("  none")


if __name__ == "__main__":
    if sys.argv[1:2] in (["-h"], ["--help"]):
        print(__doc__)
        sys.exit(0)
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])

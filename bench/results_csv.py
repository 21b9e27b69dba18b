#!/usr/bin/env python3
"""The figures of a results folder as CSV, read from the benches' own text output.

Each bench prints a table for people (nccl-tests columns, `#` comment lines); this reads those tables back
and writes one CSV row per measured row, so that a results folder's figures.csv is derived from its raw
output rather than typed from it. Kinds of input (found from the first row that matches, or --kind):

  bench     symmem-bench rows: size count type redop algo | time algbw busbw #wrong | nccl ... | ratio
            [| model floor] (lab_sweep.sh logs and run_gpu.sh logs included)
  fused     symmem-fused-bench rows: hidden tokens bytes algo | fused sym-3k sym-2k nccl-3k nccl-2k | ...
  ab        bench/ab_bench.sh rows: size algo old-us new-us new/old rounds
  torch_ar  bench/torch_allreduce_bench.py rows: size one_shot two_shot
  torch_ops bench/torch_ops_bench.py rows: method host-us graph-us [host Rx floor (kind)]
  md        markdown tables (lab_summary.md and the like): every table whose header is the first one's; a cell
            "7.44 (oneshot_push)" becomes two columns, the number and the name in brackets

Every row carries `source` (the file's name) and `run`: the last line before it that starts with "== ",
"=== " or "## " (lab_sweep.sh and ab_bench.sh print one per run; in markdown only "== "), empty if none. symmem-bench rows also carry what
the table's header says: op, ranks, placement (host_numa for the PCIe lab, else device), ops per graph.

  results_csv.py [--kind K] FILE... > figures.csv
  results_csv.py --self-test
"""
import argparse
import csv
import io
import os
import re
import sys
import tempfile

NUM = r"[\d.]+"
BENCH_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(\S+)\s+\|\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+\|"
                       r"\s+(\S+)\s+\S+\s+\S+\s+(\S+)\s+\|\s+(\S+)(?:\s+\|\s+(\S+)\s+(\S+))?\s*$")
BENCH_HEAD = re.compile(r"^# symmem-bench \S+: (\w+), (\d+) ranks")
BENCH_TIMING = re.compile(r"^# timing: .*?(\d+) ops per graph")
BENCH_TABLE = re.compile(r"^# algorithm table: topology \[([^\]]*)\]")
FUSED_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\S+)\s+\|" + r"\s+(\S+)" * 5 + r"\s+\|" + r"\s+(\S+)" * 4 +
                       r"\s+\|\s+(\d+)\s*$")
FUSED_HEAD = re.compile(r"^# symmem-fused-bench: \w+, (\d+) ranks")
AB_ROW = re.compile(r"^\s*(\d+ (?:B|KiB|MiB|GiB))\s+(\S+)\s+(" + NUM + r")\s+(" + NUM + r")\s+(" + NUM +
                    r")\s+([\d. ]+)\|([\d. ]+)$")
AB_HEAD = re.compile(r"^# symmem-bench [^,]*, (\d+) ranks")
TORCH_AR_HEAD = re.compile(r"one_shot us\s+two_shot us")
TORCH_AR_ROW = re.compile(r"^\s*(\d+)\s+(" + NUM + r"|-)\s+(" + NUM + r"|-)\s*$")
TORCH_OPS_HEAD = re.compile(r"^# (\d+) B \(.*\), autograd mode (\w+)")
TORCH_OPS_ROW = re.compile(r"^(\S.*?)\s{2,}(" + NUM + r")\s+(" + NUM + r"|-)(?:\s+host (" + NUM +
                           r")x floor \((\w+)\))?\s*$")
MD_ROW = re.compile(r"^\|(.*)\|\s*$")
MD_RULE = re.compile(r"^\|(\s*:?-+:?\s*\|)+\s*$")
CHOICE = re.compile(r"^(" + NUM + r") \((\S+)\)$")
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}

COLUMNS = {
    "bench": ["source", "run", "op", "ranks", "placement", "ops_per_graph", "bytes", "dtype", "redop", "algo",
              "us", "busbw_gbs", "wrong", "nccl_us", "ratio", "model_us", "floor_us"],
    "fused": ["source", "run", "ranks", "hidden", "tokens", "bytes", "algo", "fused_us", "sym3k_us", "sym2k_us",
              "nccl3k_us", "nccl2k_us", "fused_over_sym3k", "fused_over_sym2k", "fused_over_nccl3k",
              "fused_over_nccl2k", "wrong"],
    "ab": ["source", "run", "ranks", "bytes", "algo", "old_us", "new_us", "new_over_old", "old_rounds", "new_rounds"],
    "torch_ar": ["source", "run", "bytes", "one_shot_us", "two_shot_us"],
    "torch_ops": ["source", "run", "bytes", "autograd", "method", "host_us", "graph_us", "host_over_floor", "floor"],
}


def blank(v):
    """The benches print '-' or 'N/A' where a column has no figure: an empty cell."""
    return "" if v in ("-", "N/A", None) else v


LABEL = re.compile(r"^(?:={2,}|##) (.*)")
# lab_sweep.sh's "== host_numa, 8 ranks: /path/symmem-bench -N 8 ...": the command is the same for every row of a
# run and stands in the folder's README, so the label keeps what tells the runs apart
LABEL_COMMAND = re.compile(r"^(.*?): \S*symmem-[\w-]+ .*$")


def label(line):
    m = LABEL.match(line)
    if not m:
        return None
    text = m.group(1).strip()
    c = LABEL_COMMAND.match(text)
    return c.group(1) if c else text


def read_bench(name, lines):
    rows, run, op, ranks, place, ops = [], "", "", "", "", ""
    for line in lines:
        run = label(line) or run
        m = BENCH_HEAD.match(line)
        if m:
            op, ranks, place, ops = m.group(1), m.group(2), "", ""
        m = BENCH_TIMING.match(line)
        if m:
            ops = m.group(1)
        m = BENCH_TABLE.match(line)
        if m:
            place = "host_numa" if "host_numa" in m.group(1) else "device"
        m = BENCH_ROW.match(line)
        if m:
            g = [blank(x) for x in m.groups()]
            rows.append([name, run, op, ranks, place, ops, g[0], g[2], g[3], g[4], g[5], g[7], g[8], g[9],
                         g[11], g[12], g[13]])
    return rows


def read_fused(name, lines):
    rows, run, ranks = [], "", ""
    for line in lines:
        run = label(line) or run
        m = FUSED_HEAD.match(line)
        if m:
            ranks = m.group(1)
        m = FUSED_ROW.match(line)
        if m:
            rows.append([name, run, ranks] + [blank(x) for x in m.groups()])
    return rows


def read_ab(name, lines):
    rows, run, ranks = [], "", ""
    for line in lines:
        run = label(line) or run
        m = AB_HEAD.match(line)
        if m:
            ranks = m.group(1)
        m = AB_ROW.match(line)
        if m:
            n, unit = m.group(1).split()
            rows.append([name, run, ranks, int(n) * UNITS[unit], m.group(2), m.group(3), m.group(4), m.group(5),
                         " ".join(m.group(6).split()), " ".join(m.group(7).split())])
    return rows


def read_torch_ar(name, lines):
    rows, run, on = [], "", False
    for line in lines:
        run = label(line) or run
        if TORCH_AR_HEAD.search(line):
            on = True
            continue
        m = TORCH_AR_ROW.match(line) if on else None
        if m:
            rows.append([name, run, m.group(1), blank(m.group(2)), blank(m.group(3))])
        elif on and not line.startswith("#") and line.strip():
            on = False
    return rows


def read_torch_ops(name, lines):
    rows, run, size, mode = [], "", None, ""
    for line in lines:
        run = label(line) or run
        m = TORCH_OPS_HEAD.match(line)
        if m:
            size, mode = m.group(1), m.group(2)
            continue
        m = TORCH_OPS_ROW.match(line) if size else None
        if m and not line.startswith("method"):
            rows.append([name, run, size, mode, m.group(1).strip(), m.group(2), blank(m.group(3)),
                         blank(m.group(4)), blank(m.group(5))])
    return rows


def split_cells(line):
    return [c.strip() for c in MD_ROW.match(line).group(1).split("|")]


def read_md(files):
    """Every markdown table whose header equals the first table's header, as one CSV."""
    header, rows = None, []
    for name, lines in files:
        run = ""
        for i, line in enumerate(lines):
            run = line.lstrip("=").strip() if line.startswith("== ") else run  # "## " is a heading here
            if not (MD_ROW.match(line) and i + 1 < len(lines) and MD_RULE.match(lines[i + 1])):
                continue
            head = split_cells(line)
            if header is None:
                header = head
            if head != header:
                continue
            for body in lines[i + 2:]:
                if not MD_ROW.match(body):
                    break
                rows.append((name, run, split_cells(body)))
    if header is None:
        return None, []
    # a column whose every cell reads "number (name)" becomes two: the number, and the name in brackets
    pairs = [all(j < len(r) and CHOICE.match(r[j]) for _, _, r in rows) and rows for j in range(len(header))]
    cols = ["source", "run"]
    for j, h in enumerate(header):
        cols += [h, h + " choice"] if pairs[j] else [h]
    out = []
    for name, run, r in rows:
        row = [name, run]
        for j in range(len(header)):
            cell = r[j] if j < len(r) else ""
            row += list(CHOICE.match(cell).groups()) if pairs[j] else [cell]
        out.append(row)
    return cols, out


READERS = {"bench": read_bench, "fused": read_fused, "ab": read_ab, "torch_ar": read_torch_ar,
           "torch_ops": read_torch_ops}


def detect(lines):
    for line in lines:
        if BENCH_ROW.match(line):
            return "bench"
        if FUSED_ROW.match(line):
            return "fused"
        if AB_ROW.match(line):
            return "ab"
        if TORCH_AR_HEAD.search(line):
            return "torch_ar"
        if TORCH_OPS_HEAD.match(line):
            return "torch_ops"
    if any(MD_ROW.match(a) and MD_RULE.match(b) for a, b in zip(lines, lines[1:])):
        return "md"
    return None


def convert(paths, kind=None):
    """(columns, rows) of the given files; raises ValueError naming a file that holds no rows of the kind."""
    files = []
    for p in paths:
        with open(p, errors="replace") as f:
            files.append((os.path.basename(p), f.read().splitlines()))
    if kind is None:
        found = {n: detect(lines) for n, lines in files}
        kinds = set(found.values())
        if None in kinds:
            raise ValueError(f"{[n for n, k in found.items() if k is None][0]}: no table this tool reads")
        if len(kinds) > 1:
            raise ValueError(f"the files hold different kinds of table ({', '.join(sorted(kinds))}): "
                             "convert each kind on its own, or name one with --kind")
        kind = kinds.pop()
    if kind == "md":
        cols, rows = read_md(files)
        if not rows:
            raise ValueError("no markdown table found")
        return cols, rows
    rows = []
    for name, lines in files:
        got = READERS[kind](name, lines)
        if not got:
            raise ValueError(f"{name}: no {kind} rows")
        rows += got
    return COLUMNS[kind], rows


def write_csv(cols, rows, out):
    w = csv.writer(out, lineterminator="\n")
    w.writerow(cols)
    w.writerows(rows)


def self_test():
    samples = {
        "bench.txt": """== host_numa, 2 ranks: symmem-bench -N 2 --placement host_numa
# symmem-bench 0.1.0: all_reduce, 2 ranks (one process each) on 1 GPU(s), bfloat16 sum
# timing: CUDA-graph replays, 10 ops per graph, median of 5, slowest rank; warm-up 2
# algorithm table: topology [n2.rpd2.sm90x132.nvlink.4b95f515.host_numa.v0.1.0], built-in table
        1024          512  bfloat16    sum auto:oneshot_push |       7.44    0.14    0.14       0 |          -       -       -       - |      - |       4.13       2.17
     4194304      2097152  bfloat16    sum      twoshot_pull |     234.01   17.92   17.92       0 |     300.00   13.98   13.98       0 |   0.78
# geometric mean ratio: 0.536 over 9 sizes
""",
        "fused.txt": """=== N=8 n=1
## build new round 1
# symmem-fused-bench: all_reduce_add_rmsnorm, 8 ranks (threads of one process) on 1 GPU(s), bfloat16, eps 1e-06
   4096      1      8192 auto:oneshot_push |     8.40    11.44     9.86        -        - |   0.73   0.85      -      - |      0
""",
        "ab.txt": """# symmem-bench all-reduce bf16 sum, 8 ranks in one process on one GPU, CUDA-graph replays
    size                     algo (old / new)    old us    new us  new/old   old rounds | new rounds
   1 MiB                 auto:twoshot_lamport     34.13     31.07    0.910   34.06 34.20 | 31.08 31.07
""",
        "torch.txt": """# torch 2.11.0+cu130 symmetric memory, bf16 sum, 2 ranks
#   size (B)  one_shot us  two_shot us
        1024         6.26         6.24
     4194304        30.64        20.00
""",
        "ops.txt": """# 16384 B (8192 bf16), autograd mode grad
method                                  host us/call  graph us/op
torch.add(x, x, out=y) (floor: out)             9.68            -
torch.ops.symmem.all_reduce_out                10.87         4.62   host 1.13x floor (out)
""",
        "lab.md": """## Runs
| ranks | size | auto (choice) | auto/best |
|---|---|---|---|
| 2 | 1 KiB | 7.44 (oneshot_push) | 1.03 |
| 8 | 2 MiB | 1237.50 (copy_engine) | 1.18 |

| other | table |
|---|---|
| x | y |
""",
        "prose.txt": "nothing here\n",
    }
    fails = []
    with tempfile.TemporaryDirectory() as d:
        for n, text in samples.items():
            with open(os.path.join(d, n), "w") as f:
                f.write(text)
        p = lambda *ns: [os.path.join(d, n) for n in ns]  # noqa: E731
        cols, rows = convert(p("bench.txt"))
        want0 = ["bench.txt", "host_numa, 2 ranks", "all_reduce", "2",
                 "host_numa", "10", "1024", "bfloat16", "sum", "auto:oneshot_push", "7.44", "0.14", "0", "", "",
                 "4.13", "2.17"]
        if len(rows) != 2 or rows[0] != want0 or rows[1][13:15] != ["300.00", "0.78"] or rows[1][15:] != ["", ""]:
            fails.append(f"bench: {rows}")
        _, rows = convert(p("fused.txt"))
        if rows != [["fused.txt", "build new round 1", "8", "4096", "1", "8192", "auto:oneshot_push", "8.40", "11.44",
                     "9.86", "", "", "0.73", "0.85", "", "", "0"]]:
            fails.append(f"fused: {rows}")
        _, rows = convert(p("ab.txt"))
        if rows != [["ab.txt", "", "8", 1 << 20, "auto:twoshot_lamport", "34.13", "31.07", "0.910", "34.06 34.20",
                     "31.08 31.07"]]:
            fails.append(f"ab: {rows}")
        _, rows = convert(p("torch.txt"))
        if [r[2:] for r in rows] != [["1024", "6.26", "6.24"], ["4194304", "30.64", "20.00"]]:
            fails.append(f"torch_ar: {rows}")
        _, rows = convert(p("ops.txt"))
        if [r[2:] for r in rows] != [["16384", "grad", "torch.add(x, x, out=y) (floor: out)", "9.68", "", "", ""],
                                     ["16384", "grad", "torch.ops.symmem.all_reduce_out", "10.87", "4.62", "1.13",
                                      "out"]]:
            fails.append(f"torch_ops: {rows}")
        cols, rows = convert(p("lab.md"))
        if cols != ["source", "run", "ranks", "size", "auto (choice)", "auto (choice) choice", "auto/best"] or \
                rows[1][2:] != ["8", "2 MiB", "1237.50", "copy_engine", "1.18"] or len(rows) != 2:
            fails.append(f"md: {cols} {rows}")
        for bad, why in ((p("prose.txt"), "no table"), (p("bench.txt", "fused.txt"), "different kinds")):
            try:
                convert(bad)
                fails.append(f"{bad}: accepted")
            except ValueError as e:
                if why not in str(e):
                    fails.append(f"{bad}: {e}")
        try:
            convert(p("fused.txt"), kind="bench")
            fails.append("a file without rows of the named kind was accepted")
        except ValueError as e:
            if "no bench rows" not in str(e):
                fails.append(str(e))
        buf = io.StringIO()
        write_csv(*convert(p("bench.txt")), buf)
        back = list(csv.reader(io.StringIO(buf.getvalue())))
        if back[0] != COLUMNS["bench"] or back[1][9] != "auto:oneshot_push" or len(back) != 3:
            fails.append(f"csv: {back}")
    for f in fails:
        print("self-test:", f)
    print(f"results_csv self-test: {len(fails)} failure(s)")
    return 1 if fails else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*")
    ap.add_argument("--kind", choices=sorted(COLUMNS) + ["md"])
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    if not args.files:
        ap.error("name at least one file")
    try:
        cols, rows = convert(args.files, args.kind)
    except (OSError, ValueError) as e:
        print(f"results_csv: {e}", file=sys.stderr)
        return 1
    try:
        write_csv(cols, rows, sys.stdout)
    except BrokenPipeError:  # a reader such as head that stopped early
        sys.stderr.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

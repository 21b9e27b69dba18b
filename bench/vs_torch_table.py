#!/usr/bin/env python3
"""symmem AUTO over the faster of PyTorch's two symmetric-memory kernels, as one table from op_sweep runs.

Reads the CSVs of bench/op_sweep.py --torch (or bench/op_sweep.sh's sweep<TAG>.csv), each file one repeat, and
prints a markdown table: a row per (ranks, placement), a column per size, each cell the range of AUTO /
min(torch one-shot, torch two-shot) over the forms (in place, symmetric input, ordinary input) and the files;
a cell over --bound in bold, "-" where torch was not timed (op_sweep.py --torch-max) or a time is missing.
Then the cells over the bound, worst first, each with the form and file where its worst ratio is, and the
out-of-bounds values (#wrong) of every row read. This is the comparison the large-message work is judged by:
every cell at or under 1.00, over at least two repeats.

  vs_torch_table.py [--bound 1.0] [--forms inplace,sym,ord] CSV...
"""
import argparse
import csv
import sys

FORMS = ("inplace", "sym", "ord")


def size_name(b):
    """Bytes as the benches name them: 12K, 1M, 1536K, 100."""
    for unit, mult in (("M", 1 << 20), ("K", 1 << 10)):
        if b >= mult and b % mult == 0:
            return f"{b // mult}{unit}"
    return str(b)


def _num(row, key):
    """A time from a CSV cell: positive float, else None (empty, '-1.000': not timed or refused)."""
    try:
        v = float(row.get(key) or "")
    except ValueError:
        return None
    return v if v > 0 else None


def ratios(files, forms):
    """{(ranks, placement, bytes): [(ratio, form, file), ...]} over every row of `files` whose form is in
    `forms`, with AUTO's time and at least one torch time; and the sum of #wrong over every row read."""
    cells, wrong = {}, 0
    for path in files:
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                wrong += int(row.get("wrong") or 0)
                if row.get("form") not in forms:
                    continue
                key = (int(row["ranks"]), row.get("placement", "default"), int(row["bytes"]))
                cells.setdefault(key, [])
                auto = _num(row, "auto_us")
                torch_t = [t for t in (_num(row, "torch_one_shot_us"), _num(row, "torch_two_shot_us")) if t]
                if auto and torch_t:
                    cells[key].append((auto / min(torch_t), row["form"], path))
    return cells, wrong


def table(cells, bound):
    """The markdown table's lines and the cells over `bound` as (worst ratio, ranks, placement, bytes, form,
    file), worst first."""
    sizes = sorted({k[2] for k in cells})
    groups = sorted({k[:2] for k in cells})
    several = len({p for _, p in groups}) > 1
    lines = ["| ranks | " + " | ".join(size_name(s) for s in sizes) + " |",
             "|---|" + "---|" * len(sizes)]
    over = []
    for ranks, placement in groups:
        row = []
        for s in sizes:
            got = cells.get((ranks, placement, s), [])
            if not got:
                row.append("-")
                continue
            lo, hi = min(q for q, _, _ in got), max(q for q, _, _ in got)
            text = f"{lo:.2f}" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}-{hi:.2f}"
            if hi > bound:
                worst = max(got)
                over.append((worst[0], ranks, placement, s, worst[1], worst[2]))
                text = f"**{text}**"
            row.append(text)
        name = f"{ranks} ({placement})" if several else str(ranks)
        lines.append(f"| {name} | " + " | ".join(row) + " |")
    return lines, sorted(over, reverse=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", nargs="+", help="op_sweep.py --torch CSVs, one repeat each")
    ap.add_argument("--bound", type=float, default=1.0, help="a cell over this ratio is a loss (default 1.0)")
    ap.add_argument("--forms", default=",".join(FORMS), help="forms to take (default inplace,sym,ord)")
    args = ap.parse_args(argv)
    forms = {f for f in args.forms.split(",") if f}
    if not forms <= set(FORMS):
        ap.error(f"--forms: {sorted(forms - set(FORMS))}: use {', '.join(FORMS)}")
    try:
        cells, wrong = ratios(args.csv, forms)
    except (OSError, KeyError, ValueError) as e:
        print(f"vs_torch_table.py: cannot read the CSVs: {e}", file=sys.stderr)
        return 2
    if not any(cells.values()):
        print("vs_torch_table.py: no row of those forms with AUTO's and torch's times in the CSVs", file=sys.stderr)
        return 2
    lines, over = table(cells, args.bound)
    print(f"symmem AUTO / the faster of torch's one-shot and two-shot, over {len(args.csv)} file(s) and the forms "
          f"{','.join(f for f in FORMS if f in forms)}:")
    print("\n".join(lines))
    timed = sum(1 for v in cells.values() if v)
    print(f"\ncells over {args.bound:.2f}: {len(over)} of {timed}")
    for q, ranks, placement, s, form, path in over:
        print(f"  {ranks} ranks ({placement}), {size_name(s)}: {q:.2f} ({form}, {path})")
    print(f"out of bounds values (#wrong): {wrong}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

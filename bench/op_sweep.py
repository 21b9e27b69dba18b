#!/usr/bin/env python3
"""The call users make, side by side: torch.ops.symmem.all_reduce_out(x, "sum", group, y) with AUTO, x an
ordinary tensor ("ord") or one from symmem.torch.empty ("sym"), y ordinary, and ("inplace")
torch.ops.symmem.all_reduce_(x) on a symmetric x (the form of torch's two-shot), beside every algorithm forced
on the same tensors (the library's entry point with the algorithm named: the same kernels the op launches)
and, with --torch, PyTorch's own symmetric-memory kernels (one-shot into an ordinary output, two-shot in
place, on a buffer of torch's symmetric memory) and, for an out-of-place call, torch the way SGLang's and vLLM's
symmetric-memory communicators call it for a tensor of the model (its copy into their symmetric buffer, the
two-shot in place there, the copy out: "t-dropin"). bf16 sum; CUDA graphs of -n operations (a model's step),
median of -R replays, the slowest rank; sizes between powers of two as a model issues them (hidden x tokens).

Per size and form it prints AUTO's time, the best forced algorithm, AUTO/best and, with --torch, the faster of
torch's two kernels, symmem/torch, the drop-ins' torch sequence and symmem/that; then verdict lines per form
(the worst ratio and where). Every AUTO result is
checked against a float64 reference of fresh random data on every rank (#wrong; any makes the exit status 1).
--csv writes every number.

Ranks are processes (gloo for setup and timing); more ranks than GPUs need MPS (bench/torch_ops_bench.py's
usage). The tuning file is the library's as configured (SYMMEM_TUNE_FILE): point it at a fresh file to time
what a first init measures.

--torch-max SIZE: torch's kernels only up to SIZE (their columns empty above): on ranks that share a GPU they
can fail to complete at the larger sizes (8 co-located ranks on one H100 at 4 MiB, bench/NOTES.md, "The fixed
cost of a two-shot"), and a run that waits on them loses every row after.

--buffers K: the operations of a graph cycle through K sets of buffers (inputs, outputs, torch's symmetric
buffer; every implementation alike), as a model's layers reduce tensors of their own. With one set (the
default) every operation of a graph finds the last one's data in the L2 where ranks x size fits it (H100 and
H200: 50 MB); K sets of more than the L2 together time each operation on data from HBM instead.

Usage: op_sweep.py --nranks 8 [--sizes 1K,...] [--forms ord,sym,inplace] [--torch] [-n 50] [-R 7] [--csv FILE]
                   [--buffers K] [--torch-max SIZE]
                   [--declare]   (the sizes declared first with SymmemCommunicator.tune, as a drop-in does)
"""
import argparse
import csv
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_symm_util as tsu  # noqa: E402  (sets the no-multicast environment first)

DEFAULT_SIZES = ("1K,2K,4K,8K,12K,16K,32K,48K,64K,96K,112K,128K,256K,384K,512K,1M,1536K,2M,4M")


def worker(rank, world, port, args):
    import torch
    import torch.distributed as dist

    dev, name = tsu.init_rank(rank, world, port)
    import symmem
    import symmem.torch as st
    from symmem.torch import _ops

    comm = st.SymmemCommunicator(dist.group.WORLD, dev)
    if comm.disabled:
        raise RuntimeError(f"SymmemCommunicator disabled: {comm.disabled_reason}")
    sizes = [s for s in args.sizes if s <= comm.max_size]
    if args.declare:
        comm.tune(sizes, symmetric_input="sym" in args.forms)
    dt = torch.bfloat16
    maxn = max(sizes) // 2
    K = args.buffers
    x_ord = torch.empty(K * maxn, dtype=dt, device=dev)
    y = torch.empty(K * maxn, dtype=dt, device=dev)
    x_sym = st.empty(K * maxn, dtype=dt, group=comm) if {"sym", "inplace"} & set(args.forms) else None
    tsym = None
    if args.torch:
        import torch.distributed._symmetric_memory as symm_mem

        try:
            tsym = symm_mem.empty(K * maxn, dtype=dt, device=dev)
            symm_mem.rendezvous(tsym, name)
        except RuntimeError as e:
            if rank == 0:
                print(f"# PyTorch symmetric memory unavailable ({str(e).splitlines()[0]}): no torch columns")
            tsym = None
    stream = torch.cuda.Stream(device=dev)
    # the exact algorithms: a lossy one (the compressed wire) is no candidate for AUTO, so never "the best"
    lossy = {a for w, a in _ops.WIRES.items() if w != "none"}
    algos = [] if "all" in args.skip_algos else [a for a in symmem.algo_names()[1:]
                                                 if a not in args.skip_algos and a not in lossy]
    ar_out = torch.ops.symmem.all_reduce_out.default
    ar_ = torch.ops.symmem.all_reduce_.default

    def auto(x, out):
        if out is x:
            ar_(x, "sum", comm.group_name)
        else:
            ar_out(x, "sum", comm.group_name, out)
    rows = []

    def timed(fn):
        try:
            return tsu.graph_us(fn, stream, args.n, args.R)
        except Exception as e:  # noqa: BLE001 - an algorithm refused at this size (workspace, islands): "-"
            # refused by the library's host call before any capture or barrier, the same on every rank
            torch.cuda.synchronize()
            return -1.0, str(e).splitlines()[0][:100]

    def check_auto(x, out, mine, ref):
        """AUTO once on this rank's input `mine` against `ref` (inputs_and_sum): how many elements of this
        rank's result are wrong."""
        x.copy_(mine)
        torch.cuda.synchronize()
        auto(x, out)
        torch.cuda.synchronize()
        return wrong_count(out, ref, world)

    for size in sizes:
        n = size // 2
        mine, ref = inputs_and_sum(size, n, world, rank, dt, dev)  # every form reduces the same data
        for form in args.forms:
            xs = buffer_sets(x_ord if form == "ord" else x_sym, K, maxn, n)
            outs = xs if form == "inplace" else buffer_sets(y, K, maxn, n)
            wrong = tsu.total(check_auto(xs[0], outs[0], mine, ref))
            for x in xs:
                x.zero_()  # in place, the replays keep summing: from zeros the values stay finite
            t_auto = timed(cycling(auto, xs, outs))
            forced = {}
            for a in algos:
                fn = (lambda x, out, a=a: comm.comm.all_reduce(x.data_ptr(), out.data_ptr(), n, symmem.BFLOAT16,
                                                               symmem.OP_SUM, algo=a, stream=stream.cuda_stream))
                forced[a] = timed(cycling(fn, xs, outs))
            t1 = t2 = t3 = None
            if tsym is not None and size <= args.torch_max:
                tss = buffer_sets(tsym, K, maxn, n)
                for ts in tss:
                    ts.zero_()
                t1 = timed(cycling(lambda ts, out: torch.ops.symm_mem.one_shot_all_reduce_out(ts, "sum", name, out),
                                   tss, outs))
                for ts in tss:
                    ts.zero_()
                t2 = timed(cycling(lambda ts: torch.ops.symm_mem.two_shot_all_reduce_(ts, "sum", name), tss))
                if form != "inplace":
                    def dropin(x, ts, out):
                        ts.copy_(x)
                        torch.ops.symm_mem.two_shot_all_reduce_(ts, "sum", name)
                        out.copy_(ts)
                    t3 = timed(cycling(dropin, xs, tss, outs))
            rows.append((size, form, t_auto, forced, t1, t2, wrong, t3))
            if rank == 0:
                report(rows[-1], args)
    if rank == 0:
        summarize(rows, args, world)
    dist.barrier()
    comm.close()
    dist.destroy_process_group()
    if sum(r[6] for r in rows):  # every rank holds every row's count (tsu.total): the run fails on all
        raise SystemExit(1)


def buffer_sets(base, k, stride, n):
    """K views of n elements of `base`, the k-th from element k * stride on: one set of buffers per operation
    of a graph (--buffers). The same offsets on every rank, so views of a symmetric buffer stay symmetric."""
    return [base[i * stride:i * stride + n] for i in range(k)]


def cycling(f, *sets):
    """A call of no arguments that calls f on the k-th element of every sequence of `sets` at its k-th call,
    k counting on over the calls and wrapping at the sets' length: captured n times into a graph, operation j
    works on set j mod K."""
    calls = [0]

    def call():
        k = calls[0] % len(sets[0])
        calls[0] += 1
        return f(*(s[k] for s in sets))
    return call


def inputs_and_sum(size, n, world, rank, dt, dev):
    """Fresh random data for one size: every rank's input (float64 normal, seeded by size and rank, rounded to
    dt), as each rank can regenerate it, and their sum in float64; generated where `dev` is (the GPU in a run:
    16 ranks of 4 MiB would cost the host seconds a row). Returns (this rank's input in dt, the sum)."""
    import torch

    g = torch.Generator(device=dev)
    mine, ref = None, torch.zeros(n, dtype=torch.float64, device=dev)
    for r in range(world):
        g.manual_seed(size * 131 + r)
        v = torch.randn(n, generator=g, dtype=torch.float64, device=dev).to(dt)
        ref += v.double()
        if r == rank:
            mine = v
    return mine, ref


def wrong_count(out, ref, world):
    """Elements of `out` farther from the float64 sum `ref` than bf16 rounding of the result and fp32
    accumulation over `world` inputs allow."""
    tol = 2 ** -7 * (ref.abs() + 1e-3) + 1e-2 * world ** 0.5 * 2 ** -8
    return int(((out.double() - ref).abs() > tol).sum())


def _t(v):
    return v if isinstance(v, float) else -1.0


def _best(forced):
    ok = {a: _t(v) for a, v in forced.items() if _t(v) > 0}
    if not ok:
        return None, -1.0
    a = min(ok, key=ok.get)
    return a, ok[a]


def report(row, args):
    size, form, t_auto, forced, t1, t2, wrong, t3 = row
    best_a, best = _best(forced)
    ta = _t(t_auto)
    cells = f"{size:>9d} {form:>7s} {ta:9.2f} {best_a or '-':>16s} {best:9.2f} {ta / best if best > 0 else -1:7.2f}"
    if args.torch:
        tb = min([v for v in (_t(t1), _t(t2)) if v > 0] or [-1.0])
        cells += f" {_t(t1):9.2f} {_t(t2):9.2f} {ta / tb if tb > 0 else -1:8.2f}"
        td = _t(t3)
        cells += f" {td:9.2f} {ta / td if td > 0 else -1:8.2f}" if t3 is not None else f" {'-':>9s} {'-':>8s}"
    print(cells + f" {wrong:7d}", flush=True)


def _verdict(form, what, rows, bound):
    """One verdict line: over rows of (symmem's time, the other's, bytes) where both were timed, the worst ratio,
    where, and how many sizes are over `bound`."""
    ratios = [(a / b, size) for a, b, size in rows if a > 0 and b > 0]
    if ratios:
        worst, at = max(ratios)
        print(f"# verdict {form}: {what} worst {worst:.2f} at {at} B, "
              f"{sum(1 for q, _ in ratios if q > bound)} of {len(ratios)} sizes over {bound:.2f}", flush=True)


def summarize(rows, args, world):
    print(f"# {world} ranks, placement {os.environ.get('SYMMEM_PLACEMENT', 'default')}, graphs of {args.n}, "
          f"median of {args.R} replays, slowest rank"
          + (f", {args.buffers} buffer sets a graph" if args.buffers > 1 else ""), flush=True)
    for form in args.forms:
        fr = [r for r in rows if r[1] == form]
        _verdict(form, "AUTO/best forced", [(_t(r[2]), _best(r[3])[1], r[0]) for r in fr], 1.10)
        if args.torch:
            _verdict(form, "symmem AUTO / best torch",
                     [(_t(r[2]), min([v for v in (_t(r[4]), _t(r[5])) if v > 0] or [-1.0]), r[0]) for r in fr], 1.0)
            _verdict(form, "symmem AUTO / torch as the drop-ins call it",
                     [(_t(r[2]), _t(r[7]), r[0]) for r in fr if r[7] is not None], 1.0)
    wrong = sum(r[6] for r in rows)
    print(f"# out of bounds values: {wrong} {'OK' if wrong == 0 else 'FAILED'}", flush=True)
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.writer(f)
            algos = sorted({a for r in rows for a in r[3]})
            w.writerow(["ranks", "placement", "bytes", "form", "auto_us"] + [f"{a}_us" for a in algos]
                       + ["torch_one_shot_us", "torch_two_shot_us", "wrong", "torch_dropin_us", "buffers"])
            for size, form, ta, forced, t1, t2, wr, t3 in rows:
                w.writerow([world, os.environ.get("SYMMEM_PLACEMENT", "default"), size, form, f"{_t(ta):.3f}"]
                           + [f"{_t(forced.get(a)):.3f}" for a in algos]
                           + [f"{_t(t):.3f}" if t is not None else "" for t in (t1, t2)] + [wr]
                           + [f"{_t(t3):.3f}" if t3 is not None else "", args.buffers])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nranks", type=int, default=2)
    ap.add_argument("--sizes", default=DEFAULT_SIZES, help="comma-separated message sizes (bytes; K/M suffixes)")
    ap.add_argument("--forms", default="ord,sym",
                    help="input forms: ord (an ordinary tensor), sym (symmetric), inplace (symmetric, all_reduce_)")
    ap.add_argument("--torch", action="store_true", help="PyTorch's one-shot and two-shot kernels beside")
    ap.add_argument("--torch-max", default="",
                    help="torch's kernels only up to this size (bytes; K/M suffixes; default: every size)")
    ap.add_argument("--declare", action="store_true", help="declare the sizes first (SymmemCommunicator.tune)")
    ap.add_argument("--skip-algos", default="",
                    help="algorithms not forced (comma-separated names; all: none forced, AUTO alone)")
    ap.add_argument("-n", type=int, default=50, help="operations per graph")
    ap.add_argument("-R", type=int, default=7, help="timed replays (median)")
    ap.add_argument("--buffers", type=int, default=1,
                    help="buffer sets the operations of a graph cycle through (1: every operation on the same)")
    ap.add_argument("--csv", default="", help="write every number to this CSV file (rank 0)")
    args = ap.parse_args()
    args.sizes = sorted({tsu.parse_size(s) for s in args.sizes.split(",") if s})
    try:
        args.torch_max = tsu.parse_size(args.torch_max) if args.torch_max else float("inf")
    except ValueError:
        ap.error(f"--torch-max: {args.torch_max!r} is no size (bytes, or with a K/M suffix)")
    args.forms = [f for f in args.forms.split(",") if f]
    args.skip_algos = {a for a in args.skip_algos.split(",") if a}
    if args.buffers < 1:
        ap.error("--buffers: at least 1")
    bad = [f for f in args.forms if f not in ("ord", "sym", "inplace")]
    if bad or not args.forms:
        ap.error(f"--forms: {bad or 'none given'}: use ord, sym, inplace")
    refused = tsu.gpus_refuse(args.nranks)
    if refused:
        print(refused[1], file=sys.stderr)
        return refused[0]
    hdr = f"#{'bytes':>8s} {'form':>7s} {'auto us':>9s} {'best forced':>16s} {'us':>9s} {'auto/b':>7s}"
    if args.torch:
        hdr += f" {'t1shot us':>9s} {'t2shot us':>9s} {'sm/torch':>8s} {'t-dropin':>9s} {'sm/tdrop':>8s}"
    print(hdr + f" {'#wrong':>7s}", flush=True)
    return tsu.run_ranks(worker, args.nranks, args)


if __name__ == "__main__":
    sys.exit(main())

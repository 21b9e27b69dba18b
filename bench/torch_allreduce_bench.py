#!/usr/bin/env python3
"""PyTorch's own symmetric-memory all-reduce, timed the way symmem-bench times symmem and NCCL.

torch.ops.symm_mem.one_shot_all_reduce_out and two_shot_all_reduce_ (the CUDA backend's kernels; NVLink
multicast stays off: TORCH_SYMM_MEM_DISABLE_MULTICAST=1, and the multimem ops are never called) on one
symmetric buffer per rank, one process per GPU spawned here, a gloo group on localhost for the rendezvous
and the gather of timings. Per size and op: one eager call checked against the exact sum (inputs are small
integers, exact in bf16), then a CUDA graph of -n ops, -w warm-up replays, -R timed replays (CUDA events
around each replay, after a barrier and one untimed replay that aligns the ranks); a rank's time is its
median replay / n, the slowest rank's time is reported -- the same method and defaults as symmem-bench
(bench/NOTES.md, "Method").

Usage: python3 bench/torch_allreduce_bench.py [--nranks 2] [-b 1K] [-e 64M] [-f 4] [-n 20] [-w 5] [-R 15]
Prints one row per size: bytes, one_shot us, two_shot us (or "-" where torch refused the size or failed).
"""
import argparse
import sys

import torch_symm_util as tsu


def worker(rank, world, port, args):
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    dev, name = tsu.init_rank(rank, world, port)
    dt = torch.bfloat16
    max_count = args.max_bytes // 2
    buf = symm_mem.empty(max_count, dtype=dt, device=dev)
    symm_mem.rendezvous(buf, name)
    out = torch.empty(max_count, dtype=dt, device=dev)
    stream = torch.cuda.Stream(device=dev)

    def ops(count):
        t, o = buf[:count], out[:count]
        return {
            "one_shot": lambda: torch.ops.symm_mem.one_shot_all_reduce_out(t, "sum", name, o),
            "two_shot": lambda: torch.ops.symm_mem.two_shot_all_reduce_(t, "sum", name),
        }, t, o

    def fill(t, count):
        # small integers per rank and position: their sum over ranks is exact in bf16
        idx = torch.arange(count, device=dev, dtype=torch.int64)
        t.copy_(((idx * 7 + rank * 3) % 17).to(dt))

    def expected(count):
        idx = torch.arange(count, device=dev, dtype=torch.int64)
        return sum(((idx * 7 + r * 3) % 17) for r in range(world)).to(dt)

    def time_op(name_, fn, t, o, count):
        fill(t, count)
        torch.cuda.synchronize()
        dist.barrier()
        fn()
        torch.cuda.synchronize()
        got = o if name_ == "one_shot" else t
        ok = tsu.slowest(0.0 if torch.equal(got, expected(count)) else 1.0) == 0.0
        fill(t, count)  # in-place two-shot keeps doubling: start from small values, never NaN-prone
        torch.cuda.synchronize()
        return tsu.graph_us(fn, stream, args.n, args.R, warm=args.w), ok

    size = args.min_bytes
    while size <= args.max_bytes:
        count = size // 2
        fns, t, o = ops(count)
        row = [size]
        for op in ("one_shot", "two_shot"):
            try:
                us, ok = time_op(op, fns[op], t, o, count)
                row.append(f"{us:.2f}" + ("" if ok else " WRONG"))
            except Exception as exc:  # torch refuses some sizes (e.g. two-shot alignment): say so, go on
                if rank == 0:
                    print(f"# {op} at {size} B: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}", flush=True)
                row.append("-")
                torch.cuda.synchronize()
        if rank == 0:
            print(f"{row[0]:>12d} {row[1]:>12s} {row[2]:>12s}", flush=True)
        size *= args.f
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nranks", type=int, default=2)
    ap.add_argument("-b", dest="min_bytes", type=tsu.parse_size, default=tsu.parse_size("1K"))
    ap.add_argument("-e", dest="max_bytes", type=tsu.parse_size, default=tsu.parse_size("64M"))
    ap.add_argument("-f", type=int, default=4)
    ap.add_argument("-n", type=int, default=20)
    ap.add_argument("-w", type=int, default=5)
    ap.add_argument("-R", type=int, default=15)
    args = ap.parse_args()
    refused = tsu.gpus_refuse(args.nranks)
    if refused:
        print(refused[1], file=sys.stderr)
        return refused[0]
    import torch

    print(f"# torch {torch.__version__} symmetric memory (CUDA backend, no multicast), bf16 sum, {args.nranks} ranks;"
          f" CUDA-graph replays, {args.n} ops per graph, median of {args.R}, slowest rank; warm-up {args.w}")
    print(f"#{'size (B)':>11s} {'one_shot us':>12s} {'two_shot us':>12s}")
    return tsu.run_ranks(worker, args.nranks, args)


if __name__ == "__main__":
    sys.exit(main())

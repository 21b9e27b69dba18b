#!/usr/bin/env python3
"""Allocation cost of PyTorch symmetric memory, for comparison with symmem-alloc-bench.

Times torch.distributed._symmetric_memory.empty(size) + rendezvous(tensor, group) across N ranks (one
process per GPU, spawned here; a gloo process group on localhost only carries the rendezvous and the
timing gather), for 2 MiB ... 4 GiB. Per repetition every rank waits at a barrier, times its own call
(with a CUDA synchronize after), and the slowest rank's time counts; the median over repetitions is
reported. Writes {"<bytes>": milliseconds, ...} to --out, which `symmem-alloc-bench --torch-json FILE`
turns into a ratio column. NVLink multicast stays off (TORCH_SYMM_MEM_DISABLE_MULTICAST=1).

Usage: python3 bench/torch_alloc_bench.py [--nranks 2] [--min-mib 2] [--max-mib 4096] [--reps 5] --out FILE
"""
import argparse
import json
import statistics
import sys
import time

import torch_symm_util as tsu


def worker(rank, world, port, args, queue):
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    dev, name = tsu.init_rank(rank, world, port)

    def one(size):
        dist.barrier()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        t = symm_mem.empty(size, dtype=torch.uint8, device=dev)
        h = symm_mem.rendezvous(t, name)
        torch.cuda.synchronize()
        ms = (time.perf_counter() - t0) * 1e3
        slowest = torch.tensor([ms], dtype=torch.float64)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        del h, t
        torch.cuda.synchronize()
        return slowest.item()

    one(2 << 20)  # warm-up: first use initialises the allocator and the store exchange
    results = {}
    size = args.min_mib << 20
    while size <= args.max_mib << 20:
        reps = args.reps if size <= (256 << 20) else min(args.reps, 3)
        results[str(size)] = statistics.median(one(size) for _ in range(reps))
        if rank == 0:
            print(f"  {size:>11d} {results[str(size)]:12.3f}", flush=True)
        size *= 2
    if rank == 0:
        queue.put(results)
    dist.barrier()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nranks", type=int, default=2)
    p.add_argument("--min-mib", type=int, default=2)
    p.add_argument("--max-mib", type=int, default=4096)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError as e:
        print(f"torch_alloc_bench: PyTorch not available ({e}); nothing measured")
        return 77
    if not torch.cuda.is_available():
        print("torch_alloc_bench: no CUDA device; nothing measured")
        return 77
    print(f"# torch {torch.__version__}: symm_mem.empty + rendezvous, {args.nranks} ranks, median of {args.reps}, "
          "slowest rank")
    print(f"# {'size(B)':>11s} {'torch(ms)':>12s}")
    queue = mp.get_context("spawn").Queue()
    procs = tsu.spawn_ranks(worker, args.nranks, args, queue)
    results = None
    try:
        results = queue.get(timeout=600)
    except Exception as e:  # a rank died: report it below
        print(f"torch_alloc_bench: no results ({e})")
    for pr in procs:
        pr.join(timeout=60)
        if pr.is_alive():
            pr.kill()
    if results is None or any(pr.exitcode not in (0, None) for pr in procs):
        print(f"torch_alloc_bench: FAILED (exit codes {[pr.exitcode for pr in procs]})")
        return 1
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    print(f"# wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

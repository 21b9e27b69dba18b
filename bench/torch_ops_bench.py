#!/usr/bin/env python3
"""Host cost of an eager call and device time per op in a replayed CUDA graph: torch.ops.symmem.all_reduce
(and SymmemCommunicator.all_reduce, which SGLang calls) next to torch.add (the floors: one small kernel,
with out= for the ops that write into a given tensor, without for those that allocate their result),
torch.ops.symm_mem one-shot and two-shot (PyTorch's symmetric-memory kernels, CUDA backend, no multicast),
and NCCL where every rank has its own GPU. Same tensors, same GPU, one run.

  host us/call  wall time of -N back-to-back eager calls / N (no synchronisation inside the loop, so this
                is what the CPU spends per call while the GPU keeps up); median of -B rounds, slowest rank.
                A round times every row in turn, and the ratio to the floor is the median of the rounds'
                ratios, so a slow stretch of the shared host lands on all rows of a round alike
  graph us/op   a CUDA graph of -n calls, median replay time / n (CUDA events; a barrier and one untimed
                replay align the ranks first, as symmem-bench and torch_allreduce_bench.py do), slowest rank

--modes runs the host column under each autograd mode given (default: all three), since frameworks call
collectives under different ones and the dispatcher's per-call work depends on it: "grad" (the default
mode), "no_grad" (SGLang's event loop unless SGLANG_ENABLE_TORCH_INFERENCE_MODE), "inference"
(torch.inference_mode: vLLM's workers). Graph times do not depend on the mode (measured in the first).
The row "eligibility check" is SymmemCommunicator.should_torch_symm_mem_allreduce alone, the Python the
communicator runs before the op; "check + all_reduce" is the pair SGLang's GroupCoordinator calls, on the
communicator and on SGLang's drop-in (symmem.integrations.sglang, with its own communicator);
"torch.empty_like" and "torch.ops.symmem.barrier" split the out-of-place op's cost into the allocation and
the op machinery without a tensor (host column only), and "empty_like + all_reduce_out" is the out-of-place
op with the allocation made by torch from Python. The communicator's plain eager all_reduce calls the library
through a compiled entry where one is built (the header says which): symmem._fast_torch where it was built for
this torch, else symmem._fast; "communicator via symmem._fast" is the same communicator through the portable
entry where the other is in use, and "communicator via the op" the same with every call through
torch.ops.symmem, as SYMMEM_TORCH_FAST_CALL=off has it.

Ranks are processes (gloo for setup and timings). More ranks than GPUs need MPS (spinning kernels of
several processes must run at once):
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
  mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d
  python3 bench/torch_ops_bench.py --nranks 2
  echo quit | nvidia-cuda-mps-control
Usage: torch_ops_bench.py [--nranks 2] [--sizes 16K,256K,1M] [--modes grad,no_grad,inference] [-N 300] [-B 7]
                          [-n 20] [-R 15]
"""
import argparse
import copy
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_symm_util as tsu  # noqa: E402  (sets the no-multicast environment first)


def worker(rank, world, port, args):
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    dev, name = tsu.init_rank(rank, world, port)
    import symmem
    import symmem.torch as st

    comm = st.SymmemCommunicator(dist.group.WORLD, dev)
    if comm.disabled:
        raise RuntimeError("SymmemCommunicator disabled (see the warning above)")
    # the same communicator with every call through the op (what SYMMEM_TORCH_FAST_CALL=off gives), so the
    # compiled entry and the op are compared in one run
    comm_op = copy.copy(comm)
    comm_op._fast, comm_op._entry = False, None
    # and, where the communicator takes symmem._fast_torch (built for this torch), the same communicator through
    # the portable symmem._fast, so that the two entries are compared in one run too
    from symmem.torch import _comm as comm_mod

    comm_portable = None
    if comm._entry is not None and comm_mod.fast_entry() != comm_mod._fast_path:
        comm_portable = copy.copy(comm)
        comm_portable._entry, comm_portable._checked = comm_mod._new_entry(
            comm._handle, comm._dev_index, comm.max_size, None, "portable", portable=True)
    if rank == 0:
        print(f"# compiled entry: {st.fast_entry() if comm._entry is not None else 'not in use (calls go to the op)'}",
              flush=True)
    # SGLang's drop-in as `--enable-torch-symm-mem` builds it (its own communicator and workspace), so the
    # rows below show what SGLang's GroupCoordinator pays per call on top of the op
    os.environ.update(SYMMEM_SGLANG_GROUPS="all", SYMMEM_SGLANG_MODE="replace")
    from symmem.integrations.sglang import SymmemTorchSymmMemCommunicator

    sgl = SymmemTorchSymmMemCommunicator(dist.group.WORLD, dev)
    if sgl.disabled:
        raise RuntimeError("SGLang's drop-in disabled (see the warning above)")
    sgl_wrapped = type(sgl).__new__(type(sgl))  # the same state without the direct bindings
    sgl_wrapped.__dict__.update({k: v for k, v in sgl.__dict__.items() if k not in sgl.__dict__.get("_direct", ())})
    sgl_wrapped.__dict__.pop("_direct", None)
    nccl = None
    if torch.cuda.device_count() >= world:
        nccl = dist.new_group(backend="nccl")
    dt = torch.bfloat16
    max_count = max(args.sizes) // 2
    sym = symm_mem.empty(max_count, dtype=dt, device=dev)
    try:  # PyTorch's own symmetric memory refuses ranks that share a GPU ("overlapping devices")
        symm_mem.rendezvous(sym, name)
    except RuntimeError as e:
        if rank == 0:
            print(f"# PyTorch symmetric memory unavailable here ({str(e).splitlines()[0]}): its rows are left out",
                  flush=True)
        sym = None
    stream = torch.cuda.Stream(device=dev)
    if rank == 0:
        print(f"# torch {torch.__version__}, {world} ranks on {torch.cuda.device_count()} GPU(s), bf16 sum, "
              f"op library: {st.op_library() or 'none (ctypes ops)'}", flush=True)

    def entry_alone(x, y):
        """The library call alone through the compiled entry, its integers computed once but the current stream's:
        what the communicator's Python adds is the difference to its out= row. No row without the entry."""
        if comm._entry is None:
            return []
        fast, raw, d = comm_mod._fast_module.all_reduce, torch._C._cuda_getCurrentRawStream, dev.index
        h, xp, yp, n = comm._handle, x.data_ptr(), y.data_ptr(), x.numel()
        return [("compiled entry alone (out=y)", lambda: fast(h, xp, yp, n, symmem.BFLOAT16, symmem.OP_SUM, raw(d)),
                 "out")]

    def methods(count):
        x = torch.randn(count, device=dev).to(dt)
        y = torch.empty_like(x)
        s, so = (sym[:count] if sym is not None else x), torch.empty_like(x)
        ar = torch.ops.symmem.all_reduce.default
        ar_out = torch.ops.symmem.all_reduce_out.default
        g = comm.group_name
        m = [
            # (label, call, the floor it is compared with: "out" writes into y, "new" allocates its result)
            ("torch.add(x, x, out=y) (floor: out)", lambda: torch.add(x, x, out=y), None),
            ("torch.add(x, x) (floor: new)", lambda: torch.add(x, x), None),
            ("torch.ops.symmem.all_reduce", lambda: ar(x, "sum", g), "new"),
            ("torch.ops.symmem.all_reduce_out", lambda: ar_out(x, "sum", g, y), "out"),
            ("SymmemCommunicator.all_reduce", lambda: comm.all_reduce(x), "new"),
            ("SymmemCommunicator.all_reduce(out=y)", lambda: comm.all_reduce(x, out=y), "out"),
            ("communicator via the op", lambda: comm_op.all_reduce(x), "new"),
            *entry_alone(x, y),
            ("communicator via the op (out=y)", lambda: comm_op.all_reduce(x, out=y), "out"),
            *([("communicator via symmem._fast", lambda: comm_portable.all_reduce(x), "new"),
               ("communicator via symmem._fast (out=y)", lambda: comm_portable.all_reduce(x, out=y), "out")]
              if comm_portable is not None else []),
            ("eligibility check (Python)", lambda: comm.should_torch_symm_mem_allreduce(x), "none"),
            # what SGLang's GroupCoordinator runs per all-reduce: the check, then the call
            ("communicator: check + all_reduce", lambda: comm.should_torch_symm_mem_allreduce(x) and comm.all_reduce(x),
             "new"),
            ("SGLang drop-in: check + all_reduce", lambda: sgl.should_torch_symm_mem_allreduce(x) and sgl.all_reduce(x),
             "new"),
            # the same through the drop-in class's own methods, the path a stand-in communicator takes (a wrapper
            # frame, and the check asked again of the communicator)
            ("SGLang drop-in, wrapper methods", lambda: sgl_wrapped.should_torch_symm_mem_allreduce(x)
             and sgl_wrapped.all_reduce(x), "new"),
            # the parts of the out-of-place op: an allocation through the dispatcher, and our op machinery
            # with no tensor (boxed call, stable ABI, registry, the C call, a one-block kernel launch)
            ("torch.empty_like(x) (allocation)", lambda: torch.empty_like(x), "none"),
            ("empty_like + ops.symmem.all_reduce_out", lambda: ar_out(x, "sum", g, torch.empty_like(x)), "new"),
            ("torch.ops.symmem.barrier (no tensor)", lambda: torch.ops.symmem.barrier.default(g), "none"),
        ]
        if sym is not None:
            m += [
                ("symm_mem.one_shot_all_reduce_out",
                 lambda: torch.ops.symm_mem.one_shot_all_reduce_out(s, "sum", name, so), "out"),
                ("symm_mem.two_shot_all_reduce_", lambda: torch.ops.symm_mem.two_shot_all_reduce_(s, "sum", name),
                 "out"),
            ]
        if nccl is not None:
            m.append(("nccl all_reduce", lambda: dist.all_reduce(x, group=nccl), "out"))
        return m, s

    def host_rounds(fns):
        """Per-call host microseconds of every fn, round by round: each round times -N calls of each fn in
        turn, so the drift of a shared host (the other rank's process, MPS, frequency) falls on every row
        alike instead of on whichever row ran during it."""
        per = [[] for _ in fns]
        for _ in range(args.B):
            for i, fn in enumerate(fns):
                torch.cuda.synchronize()
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(args.N):
                    fn()
                per[i].append((time.perf_counter() - t0) * 1e6 / args.N)
        torch.cuda.synchronize()
        return per

    def graph_us(fn):
        return tsu.graph_us(fn, stream, args.n, args.R)

    def ratio_of(per, a, b):
        """The median over rounds of a's host time over b's (each round's drift cancels), slowest rank."""
        if a not in per or b not in per:
            return None
        return tsu.slowest(statistics.median(x / y for x, y in zip(per[a], per[b])))

    def verdict(per, floors):
        """The lines the host-cost goals are read from: the communicator against torch.add (each in its own
        form, out= and new) and against PyTorch's one-shot op."""
        rows = [("SymmemCommunicator.all_reduce(out=y)", "torch.add(x, x, out=y) (floor: out)", 1.10),
                ("SymmemCommunicator.all_reduce", "torch.add(x, x) (floor: new)", 1.10),
                ("SymmemCommunicator.all_reduce(out=y)", "symm_mem.one_shot_all_reduce_out", 1.00)]
        for a, b, goal in rows:
            r = ratio_of(per, a, b)
            if r is not None and rank == 0:
                print(f"# verdict: {a} / {b} = {r:.2f} (goal <= {goal:.2f}): {'ok' if r <= goal else 'MISS'}",
                      flush=True)

    mode_ctx = {"grad": torch.enable_grad, "no_grad": torch.no_grad, "inference": torch.inference_mode}
    for size in args.sizes:
        count = size // 2
        graph = {}
        for mode in args.modes:
            with mode_ctx[mode]():
                ms, s = methods(count)
                if rank == 0:
                    print(f"\n# {size} B ({count} bf16), autograd mode {mode}\n"
                          f"{'method':<38s} {'host us/call':>13s} {'graph us/op':>12s}", flush=True)
                runnable, refused = [], {}
                for label, fn, vs in ms:
                    s.fill_(0.0)  # two-shot in place keeps summing: start from zeros, never overflows
                    try:
                        fn()
                        torch.cuda.synchronize()
                        if vs != "none" and label not in graph:
                            graph[label] = graph_us(fn)
                        runnable.append((label, fn, vs))
                    except Exception as exc:  # noqa: BLE001 - a method torch refuses at this size: say so, go on
                        torch.cuda.synchronize()
                        refused[label] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:80]}"
                s.fill_(0.0)
                per = dict(zip((m[0] for m in runnable), host_rounds([m[1] for m in runnable])))
                floors = {("out" if "out=" in label else "new"): per[label] for label, _, vs in runnable
                          if vs is None}
                for label, _, vs in ms:
                    if label in refused:
                        cells = f"{'-':>13s} {'-':>12s}   {refused[label]}"
                    else:
                        h = tsu.slowest(statistics.median(per[label]))
                        gr = graph.get(label)
                        cells = f"{h:13.2f} {gr:12.2f}" if gr is not None else f"{h:13.2f} {'-':>12s}"
                        if vs in floors:  # the median of the rounds' ratios: each round's drift cancels
                            ratio = tsu.slowest(statistics.median(a / b for a, b in zip(per[label], floors[vs])))
                            cells += f"   host {ratio:.2f}x floor ({vs})"
                    if rank == 0:
                        print(f"{label:<38s} {cells}", flush=True)
                verdict(per, floors)
    if args.fused_tokens:
        fused_section(rank, comm, dev, dt, args, host_rounds, graph_us)
    dist.barrier()
    sgl.close()
    comm.close()
    dist.destroy_process_group()


def fused_section(rank, comm, dev, dt, args, host_rounds, graph_us):
    """The fused all-reduce + residual add + RMSNorm (SymmemCommunicator.all_reduce_add_rmsnorm) beside what it
    replaces in a framework's eager step: the all-reduce, residual.add_ and torch's rms_norm."""
    import torch
    import torch.nn.functional as F

    h = args.hidden
    w = torch.randn(h, device=dev).to(dt)
    for tokens in args.fused_tokens:
        if tokens * h * 2 > comm.max_size:
            if rank == 0:
                print(f"\n# fused: {tokens} tokens x {h} is over the communicator's {comm.max_size} bytes: skipped")
            continue
        x = torch.randn(tokens, h, device=dev).to(dt)
        res = torch.randn(tokens, h, device=dev).to(dt)
        with torch.inference_mode():
            rows = [
                ("add_ + rms_norm (floor: fused)", lambda: F.rms_norm(res.add_(x), (h,), w, 1e-6)),
                ("all_reduce + add_ + rms_norm", lambda: F.rms_norm(res.add_(comm.all_reduce(x)), (h,), w, 1e-6)),
                ("SymmemCommunicator.all_reduce_add_rmsnorm", lambda: comm.all_reduce_add_rmsnorm(x, res, w, 1e-6)),
            ]
            for _, fn in rows:
                fn()
            torch.cuda.synchronize()
            per = host_rounds([fn for _, fn in rows])
            if rank == 0:
                print(f"\n# fused: {tokens} tokens x hidden {h} bf16 ({tokens * h * 2} B), inference mode\n"
                      f"{'method':<44s} {'host us/call':>13s}", flush=True)
            base = per[0]
            for (label, _), p in zip(rows, per):
                hmed = tsu.slowest(statistics.median(p))
                r = tsu.slowest(statistics.median(a / b for a, b in zip(p, base)))
                if rank == 0:
                    print(f"{label:<44s} {hmed:13.2f}   host {r:.2f}x floor", flush=True)
            r = tsu.slowest(statistics.median(a / b for a, b in zip(per[2], per[0])))
            if rank == 0:
                print(f"# verdict: fused / (add_ + rms_norm) = {r:.2f} (goal <= 1.00): {'ok' if r <= 1.0 else 'MISS'}",
                      flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nranks", type=int, default=2)
    ap.add_argument("--sizes", default="16K,256K,1M", help="comma-separated message sizes (bytes; K/M suffixes)")
    ap.add_argument("--modes", default="grad,no_grad,inference",
                    help="autograd modes of the host column, comma-separated: grad, no_grad, inference")
    ap.add_argument("-N", type=int, default=300, help="eager calls per row and round")
    ap.add_argument("-B", type=int, default=7, help="rounds of the host column (median)")
    ap.add_argument("-n", type=int, default=20, help="ops per graph")
    ap.add_argument("-R", type=int, default=15, help="timed replays (median)")
    ap.add_argument("--fused-tokens", default="", help="token counts of the fused section (e.g. 1,64; empty: none)")
    ap.add_argument("--hidden", type=int, default=7168, help="the fused section's row width")
    args = ap.parse_args()
    args.sizes = [tsu.parse_size(s) for s in args.sizes.split(",")]
    args.modes = [m for m in args.modes.split(",") if m]
    args.fused_tokens = [int(t) for t in args.fused_tokens.split(",") if t]
    bad = [m for m in args.modes if m not in ("grad", "no_grad", "inference")]
    if bad or not args.modes:
        ap.error(f"--modes: {bad or 'none given'}: use grad, no_grad, inference")
    refused = tsu.gpus_refuse(args.nranks)
    if refused:
        print(refused[1], file=sys.stderr)
        return refused[0]
    return tsu.run_ranks(worker, args.nranks, args)


if __name__ == "__main__":
    sys.exit(main())

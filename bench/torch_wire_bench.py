#!/usr/bin/env python3
"""The compressed wire (wire="int8") beside the exact algorithms, through torch.ops.symmem with ordinary
tensors, timed the way symmem-bench times (CUDA-graph replays, median, slowest rank), and its error.

One process per rank (a gloo group on localhost; several ranks on one GPU need MPS, as torch_ops_bench.py
says), one SymmemCommunicator each, bf16 sum, input and output ordinary torch tensors (cudaMalloc memory:
what a framework's activations are). Per size (default 4 MiB to 64 MiB, x2):
  auto       torch.ops.symmem.all_reduce_out(x, "sum", group, out): the library's exact choice
  <algo>     each exact algorithm forced (--exact), the same C call on the same tensors (symmem.Comm.all_reduce
             with algo=...: the op's dispatcher cost is not in a graph's time)
  wire       torch.ops.symmem.all_reduce_out(x, "sum", group, out, "int8")
  best exact the fastest of auto and the forced ones; speedup = best exact / wire
Every timed call's result is checked first: the exact ones against the sum of small integers (exact in bf16),
the wire against its bound. The group size is the run's SYMMEM_WIRE_GROUP (one per communicator:
bench/wire_sweep.sh runs one process set per group). SYMMEM_WIRE_MIN_BYTES is set to 0 here, so every size
takes the wire.

--errors 1 (default) adds the error table: per data kind (docs/collectives.md, "Compressed wire": normal;
heavy-tailed, about 4 outliers of magnitude 50..150 per 7168 values; the TP forward shape, rows of 7168
channels with one channel in 512 twenty times larger, each rank N(0, 1/n)), inputs made on the GPU from a
seed per rank (every rank regenerates every rank's input to form the float64 sum), the wire's and the exact
algorithm's (auto) mean relative error (sum |err| / sum |exact|), max relative error (max |err| / max |exact|),
max |err| / W (W: the sum over ranks of each rank's largest |input| within G - 1 elements, the bound's
scale) and the share of the bound used, max |err| / (c W + a), which must stay at most 1.

The workspace is raised (SYMMEM_WORKSPACE_BYTES, unless set) so that the largest size is within the op's
message limit. Prints one markdown table per run; --markdown FILE appends it to FILE.

Usage: torch_wire_bench.py [--nranks 8] [-b 4M] [-e 64M] [-f 2] [-n 8] [-R 5] [-w 1] [--errors 1]
                           [--quantizations 2|3] [--markdown F]
                           [--exact twoshot_pull,twoshot_push,staged,twoshot_lamport,copy_engine|all]
"""
import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_symm_util as tsu  # noqa: E402  (sets the no-multicast environment first)

ROW = 7168
DEFAULT_EXACT = "twoshot_pull,twoshot_push,staged,twoshot_lamport,copy_engine"


def workspace_for(max_bytes, nranks):
    """The smallest power-of-two workspace whose two-shot message limit (symmem_comm_max_message_bytes: a data
    half over n + 1 slots, plan.c's layout) takes max_bytes."""
    ws = 64 << 20
    while True:
        lam = 4096
        while lam <= ws // 16:
            lam *= 2
        lam += 16 << 10
        flags, hdrs = 256 * 16 * 8, 3 * 256 * 16 * 16
        data_off = (flags + hdrs + 3 * lam + 4095) // 4096 * 4096
        half = (ws - data_off) // 2 // 4096 * 4096
        if half // (16 * (nranks + 1)) * 16 * nranks >= max_bytes:
            return ws
        ws *= 2


def bound_c(dtype_bf16, quantizations):
    u = 1.0 / 256 if dtype_bf16 else 1.0 / 2048
    return quantizations / 254.0 + u + 2e-4  # collectives/wire.h, symmem_wire_bound_c


def make_input(kind, rank, n, count, seed, dev):
    """Rank `rank`'s input of the kind as float32 on the GPU (rounded to bf16 by the caller)."""
    import torch

    g = torch.Generator(device=dev)
    g.manual_seed(seed * 1000003 + rank)
    x = torch.randn(count, generator=g, device=dev)
    if kind == "heavy-tailed":
        hit = torch.rand(count, generator=g, device=dev) < 4.0 / ROW
        mag = 50.0 + 100.0 * torch.rand(count, generator=g, device=dev)
        sign = torch.where(torch.rand(count, generator=g, device=dev) < 0.5, -1.0, 1.0)
        x = torch.where(hit, mag * sign, x)
    elif kind == "tp-forward":
        gc = torch.Generator(device=dev)
        gc.manual_seed(seed)  # the same outlier channels on every rank
        scale = torch.where(torch.rand(ROW, generator=gc, device=dev) < 1.0 / 512, 20.0, 1.0)
        x = (x.view(-1, ROW) * scale / math.sqrt(n)).reshape(-1)
    return x


def window_max(a, group):
    """max |a[j]| over |j - i| < group, for every i (max_pool1d with padding)."""
    import torch

    return torch.nn.functional.max_pool1d(a.abs().view(1, 1, -1), 2 * group - 1, stride=1,
                                          padding=group - 1).view(-1)


def error_row(kind, dev, comm, count, n, rank, group, quantizations, seed):
    """The wire's and the exact path's error figures for one data kind (every rank computes them; the figures are
    the same on every rank: results are bitwise identical)."""
    import torch

    dt = torch.bfloat16
    x = make_input(kind, rank, n, count, seed, dev).to(dt)
    wire, exact = torch.empty_like(x), torch.empty_like(x)
    torch.ops.symmem.all_reduce_out(x, "sum", comm.group_name, wire, "int8")
    torch.ops.symmem.all_reduce_out(x, "sum", comm.group_name, exact)
    ref = torch.zeros(count, dtype=torch.float64, device=dev)
    w = torch.zeros(count, dtype=torch.float32, device=dev)
    for r in range(n):
        xr = make_input(kind, r, n, count, seed, dev).to(dt).float()
        ref += xr.double()
        w += window_max(xr, group)
    torch.cuda.synchronize()
    c, a = bound_c(True, quantizations), 3.1554436208840472e-30
    out = {}
    for name, y in (("wire", wire), ("exact", exact)):
        err = (y.double() - ref).abs()
        out[name] = (err.sum().item() / ref.abs().sum().item(), err.max().item() / ref.abs().max().item(),
                     (err / w.double().clamp_min(1e-30)).max().item(), (err / (c * w.double() + a)).max().item(),
                     int((~torch.isfinite(y)).sum().item()))
    return out


def island_count(dev):
    """How many islands the library's wire schedule follows (collectives/init.c): SYMMEM_ISLANDS' list, else the
    ranks' GPUs' NUMA nodes (unknown ones together), gathered over the group."""
    import torch
    import torch.distributed as dist

    env = os.environ.get("SYMMEM_ISLANDS", "").strip()
    if env:
        return env.count(",") + 1
    p = torch.cuda.get_device_properties(dev)
    node = -1
    try:
        bdf = f"{p.pci_domain_id:04x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0"
        with open(f"/sys/bus/pci/devices/{bdf}/numa_node") as f:
            node = int(f.read().strip())
    except (OSError, ValueError, AttributeError):
        pass
    nodes = [None] * dist.get_world_size()
    dist.all_gather_object(nodes, max(node, -1))
    return len(set(nodes))


def worker(rank, world, port, args):
    import torch
    import torch.distributed as dist

    dev, _ = tsu.init_rank(rank, world, port)
    import symmem
    import symmem.torch as st

    comm = st.SymmemCommunicator(dist.group.WORLD, dev)
    if comm.disabled:
        raise RuntimeError(f"SymmemCommunicator disabled: {comm.disabled_reason}")
    if comm.max_size < args.max_bytes:
        raise RuntimeError(f"the op takes at most {comm.max_size} bytes here: raise SYMMEM_WORKSPACE_BYTES")
    group = int(os.environ.get("SYMMEM_WIRE_GROUP", "32"))
    exact = [a for a in args.exact if a != "auto"]
    stream = torch.cuda.Stream(device=dev)
    dt = torch.bfloat16
    max_count = args.max_bytes // 2
    x_all = torch.empty(max_count, dtype=dt, device=dev)
    out_all = torch.empty(max_count, dtype=dt, device=dev)
    g = comm.group_name
    c_comm = comm.comm
    stream_ptr = stream.cuda_stream
    placement = os.environ.get("SYMMEM_PLACEMENT", "auto")
    rows = []

    def fns(count):
        x, o = x_all[:count], out_all[:count]
        f = {"auto": lambda: torch.ops.symmem.all_reduce_out(x, "sum", g, o)}
        for a in exact:
            f[a] = (lambda a=a: c_comm.all_reduce(x.data_ptr(), o.data_ptr(), count, symmem.BFLOAT16,
                                                  algo=a, stream=torch.cuda.current_stream(dev).cuda_stream))
        f["wire"] = lambda: torch.ops.symmem.all_reduce_out(x, "sum", g, o, "int8")
        return f, x, o

    def check(name, fn, x, o, count):
        idx = torch.arange(count, device=dev, dtype=torch.int64)
        x.copy_(((idx * 7 + rank * 3) % 17 - 8).to(dt))
        o.fill_(float("nan"))
        torch.cuda.synchronize()
        dist.barrier()
        with torch.cuda.stream(stream):
            fn()
        torch.cuda.synchronize()
        want = sum(((idx * 7 + r * 3) % 17 - 8) for r in range(world)).to(torch.float64)
        if name != "wire":
            return torch.equal(o.double(), want)
        # the bound's scale: every rank's group maximum is at most 8
        return bool(((o.double() - want).abs() <= bound_c(True, 3) * 8 * world).all().item())

    size = args.min_bytes
    while size <= args.max_bytes:
        count = size // 2
        f, x, o = fns(count)
        nops = args.n if size <= (16 << 20) else max(2, args.n * (16 << 20) // size)
        us = {}
        for name, fn in f.items():
            try:
                ok = tsu.slowest(0.0 if check(name, fn, x, o, count) else 1.0) == 0.0
                t = tsu.graph_us(fn, stream, nops, args.R, warm=args.w)
                us[name] = (t, ok)
            except Exception as exc:  # noqa: BLE001 - an algorithm that refuses the size: say so, go on
                torch.cuda.synchronize()
                if rank == 0:
                    print(f"# {name} at {size} B: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}", flush=True)
        exact_ok = {k: v for k, v in us.items() if k != "wire" and v[1]}
        best = min(exact_ok, key=lambda k: exact_ok[k][0]) if exact_ok else None
        rows.append((size, us, best))
        if rank == 0:
            cells = " ".join(f"{k}={v[0]:.1f}{'' if v[1] else ' WRONG'}" for k, v in us.items())
            print(f"# {size} B: {cells}", flush=True)
        size *= args.f

    errors = []
    if args.quantizations is None:  # the bound's: one more quantization with several islands
        args.quantizations = 3 if island_count(dev) > 1 else 2
    if args.errors:
        for kind in ("normal", "heavy-tailed", "tp-forward"):
            count = args.max_bytes // 2 if kind != "tp-forward" else (args.max_bytes // 2) // ROW * ROW
            errors.append((kind, count, error_row(kind, dev, comm, count, world, rank, group, args.quantizations,
                                                  0x5eed)))

    if rank == 0:
        lines = [f"\n### {world} ranks, placement {placement}, bf16 sum, ordinary tensors, wire int8 G={group} "
                 f"({torch.cuda.get_device_name(dev)}, torch {torch.__version__})\n",
                 "| size | auto us | best exact | best exact us | wire us | speedup | busbw exact GB/s | "
                 "busbw wire GB/s |",
                 "|---|---|---|---|---|---|---|---|"]
        for size, us, best in rows:
            w = us.get("wire")
            bw = lambda t: size / t / 1e3 * 2 * (world - 1) / world  # noqa: E731  nccl-tests' busbw, GB/s
            if best is None or w is None:
                lines.append(f"| {size >> 20} MiB | - | - | - | - | - | - | - |")
                continue
            auto = us.get("auto")
            lines.append(f"| {size >> 20} MiB | {auto[0]:.1f} | {best} | {us[best][0]:.1f} | {w[0]:.1f}"
                         f"{'' if w[1] else ' WRONG'} | {us[best][0] / w[0]:.2f}x | {bw(us[best][0]):.1f} | "
                         f"{bw(w[0]):.1f} |")
        if errors:
            lines += ["", f"Errors at {args.max_bytes >> 20} MiB ({world} ranks; c = "
                      f"{bound_c(True, args.quantizations):.4f}, {args.quantizations} quantizations):", "",
                      "| data | count | wire mean rel | wire max rel | wire max err/W | bound used | exact mean rel | "
                      "exact max rel |", "|---|---|---|---|---|---|---|---|"]
            for kind, count, e in errors:
                wv, xv = e["wire"], e["exact"]
                lines.append(f"| {kind} | {count} | {wv[0]:.2e} | {wv[1]:.2e} | {wv[2]:.5f} | {wv[3]:.2f}"
                             f"{' EXCEEDED' if wv[3] > 1 or wv[4] else ''} | {xv[0]:.2e} | {xv[1]:.2e} |")
        text = "\n".join(lines)
        print(text, flush=True)
        if args.markdown:
            with open(args.markdown, "a") as fh:
                fh.write(text + "\n")
    dist.barrier()
    comm.close()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nranks", type=int, default=8)
    ap.add_argument("-b", dest="min_bytes", type=tsu.parse_size, default=tsu.parse_size("4M"))
    ap.add_argument("-e", dest="max_bytes", type=tsu.parse_size, default=tsu.parse_size("64M"))
    ap.add_argument("-f", type=int, default=2)
    ap.add_argument("-n", type=int, default=8, help="ops per graph up to 16 MiB (fewer above, at least 2)")
    ap.add_argument("-w", type=int, default=1)
    ap.add_argument("-R", type=int, default=5)
    ap.add_argument("--errors", type=int, default=1)
    ap.add_argument("--quantizations", type=int, default=None,
                    help="the bound's: 2 with one island, 3 with several (default: from SYMMEM_ISLANDS, else the "
                         "ranks' GPUs' NUMA nodes, as the library splits them)")
    ap.add_argument("--exact", default=DEFAULT_EXACT, help="exact algorithms forced beside auto, or 'all'")
    ap.add_argument("--markdown", default=None)
    args = ap.parse_args()
    if args.exact == "all":
        import symmem

        args.exact = [a for a in symmem.algo_names()[1:] if a not in ("invalid_algo", "wire_int8")]
    else:
        args.exact = [a for a in args.exact.split(",") if a]
    refused = tsu.gpus_refuse(args.nranks)
    if refused:
        print(refused[1], file=sys.stderr)
        return refused[0]
    # every size takes the wire; the workspace takes the largest size in the op's limit
    os.environ["SYMMEM_WIRE_MIN_BYTES"] = "0"
    os.environ.setdefault("SYMMEM_WORKSPACE_BYTES", str(workspace_for(args.max_bytes, args.nranks)))
    print(f"# torch_wire_bench: {args.nranks} ranks, SYMMEM_PLACEMENT={os.environ.get('SYMMEM_PLACEMENT', 'auto')}, "
          f"SYMMEM_WORKSPACE_BYTES={os.environ['SYMMEM_WORKSPACE_BYTES']}, "
          f"SYMMEM_WIRE_GROUP={os.environ.get('SYMMEM_WIRE_GROUP', '32')}, exact: auto,{','.join(args.exact)}",
          flush=True)
    return tsu.run_ranks(worker, args.nranks, args)


if __name__ == "__main__":
    sys.exit(main())

"""Shared by the PyTorch benchmarks (torch_alloc_bench.py, torch_allreduce_bench.py, torch_ops_bench.py,
torch_fused_bench.py): an environment without NVLink multicast, the per-rank setup (device, gloo group on
localhost, the CUDA symmetric-memory backend), spawning one process per rank, sizes, and the one timing
method they share (CUDA events over CUDA-graph replays, median, slowest rank)."""
import os
import socket
import warnings

# Set before torch is imported anywhere (and inherited by the spawned ranks): never NVLink multicast.
for _k, _v in {"TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NCCL_NVLS_ENABLE": "0", "NVSHMEM_DISABLE_NVLS": "1"}.items():
    os.environ[_k] = _v
# PyTorch's symmetric memory refuses ranks that share a GPU unless told they may (the one-GPU machine runs
# every rank there): its kernels are then timed beside symmem's in the same run.
os.environ.setdefault("TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES", "1")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def init_rank(rank, world, port):
    """In a spawned rank: pick its GPU, join the gloo group, select torch's CUDA symmetric-memory backend.
    Returns (device, group name)."""
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    dev = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    name = dist.group.WORLD.group_name
    if hasattr(symm_mem, "set_backend"):
        try:
            symm_mem.set_backend("CUDA")
        except Exception:  # a torch without the switch keeps its default
            pass
    if hasattr(symm_mem, "enable_symm_mem_for_group"):  # needed by older torch, deprecated (a no-op) since
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            try:
                symm_mem.enable_symm_mem_for_group(name)
            except Exception:
                pass
    return dev, name


def spawn_ranks(target, nranks, *extra):
    """Start target(rank, nranks, port, *extra) in one spawned process per rank; returns the processes."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    port = free_port()
    procs = [ctx.Process(target=target, args=(r, nranks, port) + extra) for r in range(nranks)]
    for p in procs:
        p.start()
    return procs


def run_ranks(target, nranks, *extra):
    """spawn_ranks, then wait for every rank: 0 when all exited with 0, else 1."""
    procs = spawn_ranks(target, nranks, *extra)
    for p in procs:
        p.join()
    return 0 if all(p.exitcode == 0 for p in procs) else 1


def gpus_refuse(nranks):
    """Why nranks ranks cannot run here, as (exit code, message), or None: no GPU (77, the skip code: nothing
    measured), more ranks than GPUs without MPS (2; several ranks on one GPU run as processes under MPS only)."""
    import torch

    ngpu = torch.cuda.device_count()
    if ngpu < 1:
        return 77, "no CUDA device; nothing measured"
    if nranks > ngpu and not os.environ.get("CUDA_MPS_PIPE_DIRECTORY"):
        return 2, f"{nranks} ranks on {ngpu} GPU(s) need MPS (see the usage in this file's docstring)"
    return None


def parse_size(s):
    """'16K', '1M', '4096' -> bytes."""
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(s[-1].lower(), 1)
    return int(float(s[:-1] if mult != 1 else s) * mult)


def slowest(v):
    """The largest of every rank's v (the gloo group): a collective's time is its slowest rank's."""
    import torch
    import torch.distributed as dist

    t = torch.tensor([float(v)], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def total(v):
    """The sum of every rank's integer v (the gloo group)."""
    import torch
    import torch.distributed as dist

    t = torch.tensor([int(v)], dtype=torch.int64)
    dist.all_reduce(t)
    return int(t.item())


def graph_us(fn, stream, n, replays, warm=0):
    """Microseconds per call of fn inside a CUDA graph of n calls: one call on `stream` first (lazy
    initialisation outside capture), the capture, `warm` untimed replays, then `replays` timed ones, each
    after a barrier and an untimed replay that aligns the ranks (as symmem-bench does). The median over the
    timed replays, the slowest rank's."""
    import statistics

    import torch
    import torch.distributed as dist

    with torch.cuda.stream(stream):
        fn()
    torch.cuda.synchronize()
    dist.barrier()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(n):
            fn()
    torch.cuda.synchronize()
    dist.barrier()
    with torch.cuda.stream(stream):
        for _ in range(warm):
            graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        dist.barrier()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(stream):
            graph.replay()
            a.record()
            graph.replay()
            b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / n)
    del graph
    return slowest(statistics.median(times))

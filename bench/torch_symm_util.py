"""Shared by the PyTorch comparison benchmarks (torch_alloc_bench.py, torch_allreduce_bench.py): an
environment without NVLink multicast, the per-rank setup (device, gloo group on localhost, the CUDA
symmetric-memory backend) and spawning one process per rank."""
import os
import socket
import warnings

# Set before torch is imported anywhere (and inherited by the spawned ranks): never NVLink multicast.
for _k, _v in {"TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NCCL_NVLS_ENABLE": "0", "NVSHMEM_DISABLE_NVLS": "1"}.items():
    os.environ[_k] = _v


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

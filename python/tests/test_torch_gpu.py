"""SymmemCommunicator under PyTorch on 2 GPUs, as SGLang drives it: a gloo CPU group, eager calls and a
captured CUDA graph replayed with fresh inputs, checked against a float64 reference. Exits 77 (skipped)
without torch or with fewer than 2 GPUs."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
for k, v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ[k] = v

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as tmp
except ImportError:
    print("torch not installed: skipped")
    sys.exit(77)


def reference(shape, dtype, world, seed):
    parts = []
    for r in range(world):
        g = torch.Generator().manual_seed(seed * 100 + r)
        parts.append(torch.randn(shape, generator=g, dtype=torch.float64).to(dtype))
    return parts, sum(p.to(torch.float64) for p in parts)


def check(out, ref, dtype):
    tol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
    err = ((out.double().cpu() - ref).norm() / ref.norm()).item()
    assert err < tol, f"relative error {err} >= {tol} for {dtype}"


def worker(rank, world, init_file, q):
    try:
        torch.cuda.set_device(rank)
        dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
        from symmem.torch_comm import SymmemCommunicator
        comm = SymmemCommunicator(dist.group.WORLD, torch.device("cuda", rank))
        assert not comm.disabled, "communicator disabled"
        seed = 1
        for dtype in (torch.bfloat16, torch.float16, torch.float32):
            for n in (1, 7, 1000, 6144, 57344, 1 << 20):
                parts, ref = reference((n,), dtype, world, seed)
                seed += 1
                x = parts[rank].cuda()
                if not comm.should_torch_symm_mem_allreduce(x):
                    continue
                y = comm.all_reduce(x)
                torch.cuda.synchronize()
                check(y, ref, dtype)
                # Bitwise-identical results on every rank (gloo gathers the bytes).
                mine = y.cpu().view(torch.uint8)
                gathered = [torch.empty_like(mine) for _ in range(world)]
                dist.all_gather(gathered, mine)
                assert all(torch.equal(gathered[0], t) for t in gathered), "ranks differ bitwise"
        # CUDA graph: capture once, replay with new inputs copied into the captured input tensor.
        n, dtype = 8192, torch.bfloat16
        static_in = torch.zeros(n, dtype=dtype, device="cuda")
        static_out = torch.empty_like(static_in)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            comm.all_reduce(static_in, out=static_out)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            comm.all_reduce(static_in, out=static_out)
        for it in range(20):
            parts, ref = reference((n,), dtype, world, 1000 + it)
            static_in.copy_(parts[rank])
            g.replay()
            torch.cuda.synchronize()
            check(static_out, ref, dtype)
        comm.close()
        dist.destroy_process_group()
        q.put((rank, "ok"))
    except Exception as e:  # noqa: BLE001
        import traceback
        q.put((rank, traceback.format_exc()))


def main():
    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        print("fewer than 2 GPUs: skipped")
        return 77
    world = 2
    ctx = tmp.get_context("spawn")
    q = ctx.Queue()
    with tempfile.TemporaryDirectory() as d:
        procs = [ctx.Process(target=worker, args=(r, world, os.path.join(d, "init"), q)) for r in range(world)]
        for p in procs:
            p.start()
        results = dict(q.get(timeout=300) for _ in range(world))
        for p in procs:
            p.join(60)
    bad = {r: v for r, v in results.items() if v != "ok"}
    for r, v in bad.items():
        print(f"rank {r} failed:\n{v}")
    print("SymmemCommunicator: eager bf16/fp16/fp32 and 20 graph replays checked" if not bad else "FAILED")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

"""Drive co-located (or one-per-GPU) ranks like a tensor-parallel model: per layer a GEMM on every rank, then
an all-reduce of tokens x hidden bf16 through SymmemCommunicator, many layers in a row, eager and in a
CUDA graph; every result checked against a float64 reference. Used to reproduce and test co-residency
(several ranks' spinning kernels plus other work on one GPU).

    python3 bench/tp_layers.py -n 5 --tokens 64 --hidden 4096 --layers 20 [--graph] [--algo twoshot_push]

Exit code 0: every layer of every rank matched; 1: a mismatch or an error (printed per rank).
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_symm_util  # noqa: E402  (sets the no-multicast environment first)


def worker(rank, world, port, args, q):
    import torch
    import torch.distributed as dist
    try:
        dev = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(dev)
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
        from symmem.torch_comm import SymmemCommunicator
        comm = SymmemCommunicator(dist.group.WORLD, dev)
        assert not comm.disabled, "communicator disabled"
        g = torch.Generator(device="cpu").manual_seed(1234 + rank)
        w = (torch.randn(args.hidden, args.hidden, generator=g) / args.hidden ** 0.5).to(dev, torch.bfloat16)
        algo = args.algo
        t0 = time.time()

        def layer(x, out):
            h = x @ w if not args.no_gemm else x * 1.5  # the GEMM every rank runs before its all-reduce
            if algo:
                stream = torch.cuda.current_stream().cuda_stream
                comm.comm.all_reduce(h.data_ptr(), out.data_ptr(), h.numel(), 2, 0, algo, stream=stream)
            else:
                comm.all_reduce(h, out=out)
            return h

        xs = [torch.randn(args.tokens, args.hidden, generator=torch.Generator().manual_seed(7 * l + 100 * rank))
              .to(dev, torch.bfloat16) for l in range(args.layers)]
        outs = [torch.empty_like(x) for x in xs]
        hs = [None] * args.layers
        if args.graph:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for l in range(args.layers):
                    hs[l] = layer(xs[l], outs[l])
            torch.cuda.current_stream().wait_stream(s)
            torch.cuda.synchronize()
            gr = torch.cuda.CUDAGraph()
            with torch.cuda.graph(gr):
                for l in range(args.layers):
                    hs[l] = layer(xs[l], outs[l])
            for _ in range(args.replays):
                gr.replay()
        else:
            for _ in range(args.replays):
                for l in range(args.layers):
                    hs[l] = layer(xs[l], outs[l])
        torch.cuda.synchronize()
        comm.comm.check_async_error()
        # Reference: every rank's h (bf16, as summed by the kernel) gathered over gloo, summed in float64.
        bad = 0
        for l in range(args.layers):
            mine = hs[l].float().cpu()
            parts = [torch.empty_like(mine) for _ in range(world)]
            dist.all_gather(parts, mine)
            ref = sum(p.double() for p in parts)
            err = ((outs[l].double().cpu() - ref).norm() / ref.norm()).item()
            if not err < 1.6e-2:
                bad += 1
        q.put((rank, "ok" if bad == 0 else f"{bad} of {args.layers} layers wrong", time.time() - t0))
        comm.close()
        dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001
        q.put((rank, f"{type(e).__name__}: {str(e)[:600]}", 0.0))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--layers", type=int, default=20)
    ap.add_argument("--replays", type=int, default=3)
    ap.add_argument("--graph", action="store_true")
    ap.add_argument("--algo", default="")
    ap.add_argument("--no-gemm", action="store_true", help="an elementwise kernel instead of the GEMM")
    ap.add_argument("--timeout", type=float, default=120.0)
    args = ap.parse_args()
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = torch_symm_util.free_port()
    procs = [ctx.Process(target=worker, args=(r, args.n, port, args, q)) for r in range(args.n)]
    for p in procs:
        p.start()
    res = {}
    try:
        for _ in range(args.n):
            r, msg, dt = q.get(timeout=args.timeout)
            res[r] = (msg, dt)
    except Exception:  # noqa: BLE001
        pass
    for p in procs:
        p.join(5)
        if p.is_alive():
            p.kill()
    ok = len(res) == args.n and all(m == "ok" for m, _ in res.values())
    tag = f"n={args.n} tokens={args.tokens} hidden={args.hidden} layers={args.layers} graph={args.graph} " \
          f"algo={args.algo or 'auto'} gemm={not args.no_gemm} MAX_BLOCKS={os.environ.get('SYMMEM_MAX_BLOCKS', '0')}"
    print(("OK   " if ok else "FAIL ") + tag)
    for r in sorted(res):
        if res[r][0] != "ok":
            print(f"   rank {r}: {res[r][0]}")
    if len(res) < args.n:
        print(f"   {args.n - len(res)} rank(s) gave no answer within {args.timeout} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

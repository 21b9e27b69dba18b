"""Where N ranks spend their time, from process start to a checked tensor-parallel forward: every rank reports
each phase the moment it ends (so a rank that stalls is seen stalling, by phase), the library's own init
breakdown comes from its INFO log ("communicator ready ...; init X ms: bootstrap mesh, facts, links,
collectives" and "collectives ready ...; kernels loaded, agreed, workspace, probe"), and a rank still running
at the deadline dumps its Python stacks (faulthandler) before it is killed. The forward is the one that
reported nothing at 16 ranks: ranks as processes (under MPS when they share a GPU), a gloo group,
SymmemCommunicator, per layer a tokens x hidden GEMM and the all-reduce of its output, eager and then in a
CUDA graph, every layer checked against a float64 sum of every rank's GEMM output.

    python3 bench/tp_phases.py -n 16 [--layers 8] [--tokens 64] [--hidden 4096] [--deadline 240]

Prints, as they happen, the moment every rank has finished a phase (first / last rank); at the end a table
of the phases (when the last rank finished each, and which rank that was; the longest a rank spent in it),
the library's init steps (max over ranks), and every rank's error. Exit code 0: every rank finished every
phase and every layer matched, within the deadline; 1 otherwise. SYMMEM_TORCH_ERROR_HANDLING=raise in the
ranks, so a collective's error reaches the rank's report instead of aborting the process.
"""
import argparse
import glob
import os
import re
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_symm_util  # noqa: E402  (sets the no-multicast environment first)

PHASES = ("started", "torch imported", "CUDA context", "cuBLAS", "gloo group", "symmem communicator",
          "first all-reduce", "weights", "eager layers", "eager check", "graph captured", "graph replays",
          "graph check", "closed")


def mps_enabled(device):
    """CU_DEVICE_ATTRIBUTE_MPS_ENABLED of the device (the driver API, initialised by torch by now)."""
    import ctypes
    try:
        cu = ctypes.CDLL("libcuda.so.1")
        v = ctypes.c_int(0)
        return cu.cuDeviceGetAttribute(ctypes.byref(v), 133, device) == 0 and v.value == 1
    except OSError:
        return False


def worker(rank, world, port, args, q, t0):
    import faulthandler
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the parent asks at the deadline

    def mark(phase, note=""):
        q.put(("phase", rank, phase, time.time() - t0, note))

    mark("started")
    try:
        import torch
        import torch.distributed as dist
        mark("torch imported")
        ndev = torch.cuda.device_count()
        assert ndev > 0, "no CUDA device"
        dev = torch.device("cuda", rank % ndev)
        torch.cuda.set_device(dev)
        torch.zeros(1, device=dev)
        torch.cuda.synchronize()
        mark("CUDA context", f"{ndev} GPU(s), MPS {'on' if mps_enabled(dev.index) else 'off'}")
        a = torch.ones(64, 64, device=dev, dtype=torch.bfloat16)
        (a @ a).sum().item()
        mark("cuBLAS")
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
        dist.barrier()
        mark("gloo group")
        from symmem.torch import SymmemCommunicator
        comm = SymmemCommunicator(dist.group.WORLD, dev)
        assert not comm.disabled, "communicator disabled (its warning says why)"
        mark("symmem communicator")
        x = torch.full((args.tokens, args.hidden), float(rank + 1), device=dev, dtype=torch.bfloat16)
        y = comm.all_reduce(x)
        torch.cuda.synchronize()
        want = world * (world + 1) / 2
        assert torch.all(y.float() == want).item(), f"first all-reduce: {y.float().flatten()[0].item()} != {want}"
        mark("first all-reduce")
        g = torch.Generator().manual_seed(1234 + rank)
        ws = [(torch.randn(args.hidden, args.hidden, generator=g) / args.hidden ** 0.5).to(dev, torch.bfloat16)
              for _ in range(args.layers)]
        xs = [torch.randn(args.tokens, args.hidden, generator=torch.Generator().manual_seed(7 * l + 100 * rank))
              .to(dev, torch.bfloat16) for l in range(args.layers)]
        outs = [torch.empty_like(v) for v in xs]
        hs = [None] * args.layers
        torch.cuda.synchronize()
        mark("weights")

        def forward():
            for l in range(args.layers):
                hs[l] = xs[l] @ ws[l]
                comm.all_reduce(hs[l], out=outs[l])

        def check(what):
            bad = []
            for l in range(args.layers):
                mine = hs[l].float().cpu()
                parts = [torch.empty_like(mine) for _ in range(world)]
                dist.all_gather(parts, mine)
                ref = sum(p.double() for p in parts)
                err = ((outs[l].double().cpu() - ref).norm() / ref.norm()).item()
                if not err < 1.6e-2:
                    bad.append(f"layer {l}: relative error {err:.3g}")
            assert not bad, f"{what}: " + "; ".join(bad)

        s = torch.cuda.Stream(dev)  # a side stream, as frameworks run (graphs cannot capture the default one)
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            forward()
            s.synchronize()
            mark("eager layers")
            check("eager")
            mark("eager check")
            for o in outs:
                o.zero_()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=s):
                forward()
            mark("graph captured")
            for _ in range(args.replays):
                graph.replay()
            s.synchronize()
            mark("graph replays")
            check("graph")
            mark("graph check")
        dist.barrier()
        del graph
        comm.close()
        dist.destroy_process_group()
        mark("closed")
        q.put(("done", rank, None, time.time() - t0, ""))
    except BaseException:  # noqa: BLE001 - reported with the rank
        import traceback
        q.put(("error", rank, None, time.time() - t0, traceback.format_exc()))


def library_steps(log_dir):
    """Max over ranks of each step of the library's init, from its INFO lines."""
    steps = {}
    pat = re.compile(r"(?:init |; )(\d+) ms: (.*)$")
    for path in glob.glob(os.path.join(log_dir, "symmem-*.log")):
        with open(path, errors="replace") as f:
            for line in f:
                if "communicator ready" not in line and "collectives ready" not in line:
                    continue
                m = pat.search(line.rstrip())
                if not m:
                    continue
                label = "init" if "communicator ready" in line else "collectives"
                steps[label] = max(steps.get(label, 0), int(m.group(1)))
                for part in m.group(2).split(", "):
                    pm = re.match(r"([a-zA-Z ]+?) (\d+)", part)
                    if pm:
                        key = f"{label}: {pm.group(1)}"
                        steps[key] = max(steps.get(key, 0), int(pm.group(2)))
    return steps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--replays", type=int, default=3)
    ap.add_argument("--deadline", type=float, default=240.0, help="seconds for the whole run")
    args = ap.parse_args()
    log_dir = tempfile.mkdtemp(prefix="tp_phases-")
    os.environ.setdefault("SYMMEM_LOG_LEVEL", "INFO")
    os.environ["SYMMEM_LOG_FILE"] = os.path.join(log_dir, "symmem-%p.log")
    os.environ["SYMMEM_TORCH_ERROR_HANDLING"] = "raise"
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = torch_symm_util.free_port()
    t0 = time.time()
    procs = [ctx.Process(target=worker, args=(r, args.n, port, args, q, t0)) for r in range(args.n)]
    for p in procs:
        p.start()
    at = {}        # (rank, phase) -> seconds since start
    notes = {}
    errors, done = {}, set()
    reached = {}   # phase -> ranks that finished it
    while len(done) + len(errors) < args.n and time.time() - t0 < args.deadline:
        try:
            kind, rank, phase, t, note = q.get(timeout=min(5.0, max(0.1, args.deadline - (time.time() - t0))))
        except Exception:  # noqa: BLE001 - queue.Empty: check the deadline
            continue
        if kind == "phase":
            at[(rank, phase)] = t
            if note:
                notes.setdefault(phase, note)
            reached.setdefault(phase, set()).add(rank)
            if len(reached[phase]) == args.n:
                first = min(at[(r, phase)] for r in range(args.n))
                print(f"+{t:7.1f} s  all {args.n} ranks: {phase:20s} (first +{first:.1f} s, last rank {rank})"
                      f"{'  ' + notes[phase] if phase in notes else ''}", flush=True)
        elif kind == "done":
            done.add(rank)
        else:
            errors[rank] = note
            print(f"+{t:7.1f} s  rank {rank} failed:\n{note}", flush=True)
    stuck = [r for r in range(args.n) if r not in done and r not in errors]
    if stuck:
        print(f"deadline of {args.deadline:.0f} s passed; ranks still running, by their last finished phase:")
        for r in stuck:
            last = max((p for p in PHASES if (r, p) in at), key=lambda p: at[(r, p)], default="(none)")
            nxt = PHASES[PHASES.index(last) + 1] if last in PHASES and last != PHASES[-1] else "?"
            print(f"  rank {r}: finished '{last}' at +{at.get((r, last), 0):.1f} s, inside '{nxt}'")
        for r in stuck:  # Python stacks of every thread, on the rank's stderr
            if procs[r].is_alive():
                os.kill(procs[r].pid, signal.SIGUSR1)
        time.sleep(3)
    for p in procs:
        p.join(10 if not stuck else 1)
        if p.is_alive():
            p.kill()
    print(f"\nphase                 last rank done   slowest rank   longest in phase (rank)")
    prev = None
    for ph in PHASES:
        ts = {r: at[(r, ph)] for r in range(args.n) if (r, ph) in at}
        if not ts:
            print(f"{ph:21s} {'-':>10s}")
            continue
        r_last = max(ts, key=ts.get)
        spans = {r: ts[r] - at[(r, prev)] for r in ts if prev and (r, prev) in at}
        r_long = max(spans, key=spans.get) if spans else r_last
        span = spans.get(r_long, ts[r_last])
        print(f"{ph:21s} {ts[r_last]:9.1f} s   {r_last:5d}          {span:7.1f} s ({r_long}){'' if len(ts) == args.n else f'  only {len(ts)} ranks'}")
        prev = ph
    steps = library_steps(log_dir)
    if steps:
        print("\nlibrary init steps (ms, max over ranks): " + ", ".join(f"{k} {v}" for k, v in steps.items()))
    print(f"(library logs: {log_dir})")
    ok = len(done) == args.n and not errors
    print(("OK   " if ok else "FAIL ") + f"n={args.n} tokens={args.tokens} hidden={args.hidden} layers={args.layers} "
          f"eager and graph: {len(done)} of {args.n} ranks passed in {time.time() - t0:.1f} s"
          + (f", {len(errors)} failed (ranks {sorted(errors)})" if errors else "")
          + (f", {len(stuck)} still running at the deadline (ranks {stuck})" if stuck else ""))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""torch.ops.symmem and SymmemCommunicator on real GPUs. One GPU is enough: ranks are threads of this process
(symmem_comm_init_all, several ranks per GPU) and, under MPS (SYMMEM_TEST_MPS=1, which
scripts/test_python.sh --gpu sets after starting it) or with one GPU per rank, processes with a gloo group.

Checked per rank: eager out of place / in place / out=, every dtype x reduce op, odd sizes, against an exact
emulation (fp32 accumulation in rank order, as symmem documents) and a float64 reference; reduce-scatter,
all-gather, barrier; bitwise-equal results on every rank; a CUDA graph of many ops replayed with fresh
inputs; torch.compile(fullgraph=True) running; symmetric tensors (empty, the MemPool) read in place and
through peers; the C++ argument errors; a forced timeout reaching the caller through the watchdog.
Skipped without a GPU."""
import os
import tempfile
import threading
import time
import traceback

import pytest

torch = pytest.importorskip("torch")

import symmem  # noqa: E402
import symmem.torch as st  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")

DTYPES = (torch.bfloat16, torch.float16, torch.float32)
OPS = ("sum", "max", "min")
COUNTS = (1, 7, 1000, 6144, 57343, 262147)
TIMEOUT_MS = 60000


@pytest.fixture(autouse=True, scope="module")
def _errors_fail_tests_not_the_run():
    """A collective that times out must fail its test, not abort pytest (the watchdog's default), here and
    in spawned ranks."""
    prev_env = os.environ.get("SYMMEM_TORCH_ERROR_HANDLING")
    os.environ["SYMMEM_TORCH_ERROR_HANDLING"] = "raise"
    prev = st.set_error_handling("raise")
    yield
    st.set_error_handling(prev)
    if prev_env is None:
        os.environ.pop("SYMMEM_TORCH_ERROR_HANDLING", None)
    else:
        os.environ["SYMMEM_TORCH_ERROR_HANDLING"] = prev_env


# ---------------------------------------------------------------------------------------------------------
# Harness: run body(rank, comm, ctx) on every rank, as threads or as processes.
# ---------------------------------------------------------------------------------------------------------
class ThreadCtx:
    def __init__(self, n):
        self.n = n
        self._bar = threading.Barrier(n, timeout=300)
        self._slots = [None] * n

    def barrier(self):
        self._bar.wait()

    def gather(self, rank, obj):
        self._slots[rank] = obj
        self._bar.wait()
        out = list(self._slots)
        self._bar.wait()
        return out


def run_threads(nranks, body, timeout_ms=TIMEOUT_MS, **kw):
    ndev = torch.cuda.device_count()
    comms = st.communicators_in_process(nranks, devices=[r % ndev for r in range(nranks)], timeout_ms=timeout_ms)
    ctx = ThreadCtx(nranks)
    errors = [None] * nranks

    def main(rank):
        comm = comms[rank]
        try:
            torch.cuda.set_device(comm.device)
            with torch.cuda.stream(torch.cuda.Stream(comm.device)):
                body(rank, comm, ctx, **kw)
            torch.cuda.synchronize(comm.device)
        except BaseException:  # noqa: BLE001 - reported below, with the rank
            errors[rank] = traceback.format_exc()
            ctx._bar.abort()

    threads = [threading.Thread(target=main, args=(r,), name=f"rank{r}") for r in range(nranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    for c in comms:
        c.close()
    bad = {r: e for r, e in enumerate(errors) if e}
    assert not bad, "\n".join(f"rank {r}:\n{e}" for r, e in bad.items())


class ProcCtx:
    def __init__(self, n):
        self.n = n

    def barrier(self):
        import torch.distributed as dist
        dist.barrier()

    def gather(self, rank, obj):
        import torch.distributed as dist
        out = [None] * self.n
        dist.all_gather_object(out, obj)
        return out


def _proc_main(rank, nranks, init_file, body_name, q):
    import torch.distributed as dist
    os.environ["NCCL_CUMEM_ENABLE"] = "1"  # NCCL registers cuMem memory only on its cuMem path
    try:
        ndev = torch.cuda.device_count()
        dev = torch.device("cuda", rank % ndev)
        torch.cuda.set_device(dev)
        dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=nranks)
        comm = st.SymmemCommunicator(dist.group.WORLD, dev)
        assert not comm.disabled, "communicator disabled (see the warning above)"
        assert comm.group_name == dist.group.WORLD.group_name
        globals()[body_name](rank, comm, ProcCtx(nranks))
        torch.cuda.synchronize()
        comm.close()
        dist.destroy_process_group()
        q.put((rank, "ok"))
    except BaseException:  # noqa: BLE001
        q.put((rank, traceback.format_exc()))


def multiprocess_ok(nranks):
    return torch.cuda.device_count() >= nranks or os.environ.get("SYMMEM_TEST_MPS") == "1"


def run_processes(nranks, body):
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    with tempfile.TemporaryDirectory() as d:
        procs = [ctx.Process(target=_proc_main, args=(r, nranks, os.path.join(d, "init"), body.__name__, q))
                 for r in range(nranks)]
        for p in procs:
            p.start()
        results = {}
        try:
            for _ in range(nranks):
                r, v = q.get(timeout=600)
                results[r] = v
        finally:
            for p in procs:
                p.join(60)
                if p.is_alive():
                    p.kill()
    bad = {r: v for r, v in results.items() if v != "ok"}
    assert len(results) == nranks and not bad, "\n".join(f"rank {r}:\n{v}" for r, v in bad.items())


# ---------------------------------------------------------------------------------------------------------
# References.
# ---------------------------------------------------------------------------------------------------------
def parts_for(shape, dtype, world, seed):
    out = []
    for r in range(world):
        g = torch.Generator().manual_seed(seed * 1000 + r)
        out.append(torch.randn(shape, generator=g, dtype=torch.float64).to(dtype))
    return out


def exact(parts, op):
    """What symmem computes: fp32 accumulation in rank order 0..n-1, one rounding to the dtype."""
    acc = parts[0].float()
    for p in parts[1:]:
        acc = acc + p.float() if op == "sum" else (torch.maximum(acc, p.float()) if op == "max"
                                                   else torch.minimum(acc, p.float()))
    return acc.to(parts[0].dtype)


def check(got, parts, op, what):
    got = got.cpu()
    want = exact(parts, op)
    assert torch.equal(got, want), f"{what}: {(got.float() - want.float()).abs().max().item()} max abs difference"
    if op == "sum":  # and close to the float64 sum
        ref = sum(p.double() for p in parts)
        tol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[got.dtype]
        err = ((got.double() - ref).norm() / ref.norm().clamp_min(1e-30)).item()
        assert err < tol, f"{what}: relative error {err} against float64"


def same_on_every_rank(rank, ctx, t, what):
    mine = t.cpu().contiguous().view(torch.uint8)
    allb = ctx.gather(rank, mine)
    assert all(torch.equal(b, allb[0]) for b in allb), f"{what}: ranks differ bitwise"


# ---------------------------------------------------------------------------------------------------------
# Bodies (module level, so that spawned processes find them by name).
# ---------------------------------------------------------------------------------------------------------
def body_eager(rank, comm, ctx):
    n, dev = comm.world_size, comm.device
    seed = 1
    for dtype in DTYPES:
        for op in OPS:
            for count in COUNTS:
                if count * torch.empty((), dtype=dtype).element_size() > comm.max_size:
                    continue
                seed += 1
                parts = parts_for((count,), dtype, n, seed)
                x = parts[rank].to(dev)
                what = f"all_reduce {dtype} {op} count {count} ({n} ranks)"
                y = comm.all_reduce(x, op=op)                       # out of place
                assert y is not None and y.data_ptr() != x.data_ptr()
                check(y, parts, op, what)
                check(x, [parts[rank]], "sum", what + ": input changed")
                same_on_every_rank(rank, ctx, y, what)
                o = torch.empty_like(x)
                assert comm.all_reduce(x, out=o, op=op) is o         # out=
                check(o, parts, op, what + " out=")
                assert comm.all_reduce(x, out=x, op=op) is x         # in place
                check(x, parts, op, what + " in place")
                z = torch.ops.symmem.all_reduce(parts[rank].to(dev).view(1, count), op, comm.group_name)
                check(z.view(count), parts, op, what + " torch.ops 2-D")
    # reduce-scatter and all-gather along dim 0, odd row lengths
    for dtype in DTYPES:
        for rows, cols in ((1, 1), (3, 7), (64, 1000)):
            seed += 1
            parts = parts_for((n * rows, cols), dtype, n, seed)
            x = parts[rank].to(dev)
            for op in OPS:
                rs = comm.reduce_scatter(x, op=op)
                assert rs.shape == (rows, cols)
                check(rs, [p[rank * rows:(rank + 1) * rows] for p in parts], op, f"reduce_scatter {dtype} {op}")
            mine = parts[rank][:rows]
            ag = comm.all_gather(mine.to(dev))
            want = torch.cat([p[:rows] for p in parts])
            assert torch.equal(ag.cpu(), want), f"all_gather {dtype} {rows}x{cols}"
            same_on_every_rank(rank, ctx, ag, "all_gather")
    comm.barrier()
    assert comm.all_reduce(torch.ones(4, dtype=torch.int32, device=dev)) is None  # not eligible: None


def body_errors(rank, comm, ctx):
    dev, g = comm.device, comm.group_name
    ops = torch.ops.symmem
    cases = [
        (lambda: ops.all_reduce(torch.ones(4, dtype=torch.int32, device=dev), "sum", g), "dtype int32"),
        (lambda: ops.all_reduce(torch.ones(4, device=dev), "avg", g), "reduce_op 'avg'"),
        (lambda: ops.all_reduce(torch.ones(4, 4, device=dev).t(), "sum", g), "not contiguous"),
        (lambda: ops.all_reduce(torch.ones(comm.max_size // 4 + 1, device=dev), "sum", g), "larger than"),
        (lambda: ops.all_reduce_out(torch.ones(4, device=dev), "sum", g, torch.ones(5, device=dev)), "shape"),
        (lambda: ops.all_gather_out(torch.ones(4, device=dev), g, torch.ones(4, device=dev)), "world_size"),
        (lambda: ops.all_reduce(torch.ones(4, device=dev), "sum", g + "-nope"), "not registered"),
    ]
    for call, match in cases:
        with pytest.raises(RuntimeError, match=match) as e:
            call()
        if "not registered" not in match:
            assert f"rank {comm.rank} of {comm.world_size}" in str(e.value), str(e.value)
    ctx.barrier()


def body_graph(rank, comm, ctx):
    """One graph of many ops (out of place, in place, out=, reduce-scatter, all-gather, barrier), replayed
    with fresh inputs copied into the captured ones."""
    n, dev = comm.world_size, comm.device
    dtype, count, k = torch.bfloat16, 6144 + 3, 6
    ins = [torch.zeros(count, dtype=dtype, device=dev) for _ in range(k)]
    outs = [torch.empty_like(t) for t in ins]
    rs_in = torch.zeros(n * 64, 5, dtype=dtype, device=dev)
    s = torch.cuda.current_stream(dev)

    def step():
        res = []
        for i in range(k):
            if i % 3 == 0:
                res.append(comm.all_reduce(ins[i]))
            elif i % 3 == 1:
                res.append(comm.all_reduce(ins[i], out=outs[i]))
            else:
                res.append(comm.all_reduce(ins[i], out=ins[i]))
        rs = comm.reduce_scatter(rs_in)
        ag = comm.all_gather(rs)
        comm.barrier()
        return res, rs, ag

    step()  # warm up outside capture
    torch.cuda.synchronize(dev)
    ctx.barrier()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s, capture_error_mode="thread_local"):
        res, rs, ag = step()
    for it in range(5):
        parts = [parts_for((count,), dtype, n, 100 + 10 * it + i) for i in range(k)]
        rs_parts = parts_for((n * 64, 5), dtype, n, 900 + it)
        for i in range(k):
            ins[i].copy_(parts[i][rank])
        rs_in.copy_(rs_parts[rank])
        g.replay()
        for i in range(k):
            check(res[i], parts[i], "sum", f"graph replay {it} op {i}")
        check(rs, [p[rank * 64:(rank + 1) * 64] for p in rs_parts], "sum", f"graph replay {it} reduce_scatter")
        want_ag = torch.cat([exact([p[r * 64:(r + 1) * 64] for p in rs_parts], "sum") for r in range(n)])
        assert torch.equal(ag.cpu(), want_ag), f"graph replay {it} all_gather"
        same_on_every_rank(rank, ctx, res[0], f"graph replay {it}")
    del g


def body_compile(rank, comm, ctx):
    dev = comm.device
    f = torch.compile(lambda t: comm.all_reduce(t * 2) + 1, fullgraph=True)
    g = torch.compile(lambda t, o: comm.all_reduce(t, out=o) * 3, fullgraph=True)
    for it, count in enumerate((1000, 4096, 1000)):  # the third call reuses the first compilation
        parts = parts_for((count,), torch.float32, comm.world_size, 500 + it)
        y = f(parts[rank].to(dev))
        want = exact([p * 2 for p in parts], "sum") + 1
        assert torch.equal(y.cpu(), want), f"compiled f, call {it}"
        o = torch.empty(count, device=dev)
        z = g(parts[rank].to(dev), o)
        assert torch.equal(z.cpu(), exact(parts, "sum") * 3) and torch.equal(o.cpu(), exact(parts, "sum"))
    ctx.barrier()


def body_symmetric(rank, comm, ctx):
    n, dev = comm.world_size, comm.device
    dtype, count = torch.bfloat16, 8192 + 1
    x = st.empty(count, dtype=dtype, group=comm)
    assert x.shape == (count,) and x.dtype == dtype and x.device == dev and st.is_symmetric(x)
    assert not st.is_symmetric(torch.empty(count, dtype=dtype, device=dev))
    x.fill_(rank + 1)
    torch.cuda.synchronize(dev)
    ctx.barrier()
    for peer in range(n):  # peers' memory, mapped here
        v = st.peer_tensor(x, peer)
        assert torch.equal(v.cpu(), torch.full((count,), peer + 1, dtype=dtype)), f"peer {peer} view"
    ctx.barrier()
    parts = parts_for((count,), dtype, n, 77)
    x.copy_(parts[rank])
    y = st.empty(count, dtype=dtype, group=comm)
    comm.all_reduce(x, out=y)        # symmetric in and out: zero copy both ways
    check(y, parts, "sum", "symmetric in, symmetric out")
    comm.all_reduce(x, out=x)
    check(x, parts, "sum", "symmetric in place")
    m = st.empty(4, 33, dtype=torch.float32, group=comm)
    assert m.shape == (4, 33) and m.is_contiguous()
    # The MemPool: tensors allocated inside are symmetric and take the same path.
    if st.op_library() is None:
        return
    pool = st.get_mem_pool(comm)
    assert st.get_mem_pool(comm) is pool
    with torch.cuda.use_mem_pool(pool):
        a = torch.empty(count, dtype=dtype, device=dev)
    assert st.is_symmetric(a)
    a.copy_(parts[rank])
    b = comm.all_reduce(a)
    check(b, parts, "sum", "pool tensor")
    comm.all_reduce(a, out=a)
    check(a, parts, "sum", "pool tensor in place")
    torch.cuda.synchronize(dev)
    ctx.barrier()
    del a, b


def body_timeout(rank, comm, ctx):
    """Rank 1 skips a call: rank 0's kernel times out on the device (in an eager call, then in a graph
    replay), the watchdog reports it, and rank 0's next call raises."""
    dev = comm.device
    x = torch.ones(4096, dtype=torch.bfloat16, device=dev)
    comm.all_reduce(x)
    s = torch.cuda.current_stream(dev)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s, capture_error_mode="thread_local"):
        y = comm.all_reduce(x)
    torch.cuda.synchronize(dev)
    ctx.barrier()
    if rank == 0:
        g.replay()                     # rank 1 never replays
        torch.cuda.synchronize(dev)    # returns once the kernel has timed out
        deadline = time.monotonic() + 60
        while comm._error is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert comm._error is not None, "the watchdog did not report the timeout"
        assert comm._error.name in ("SYMMEM_TIMEOUT", "SYMMEM_PEER_FAILURE"), comm._error
        with pytest.raises(symmem.SymmemError, match="failed earlier"):
            comm.all_reduce(x)
        with pytest.raises(RuntimeError):  # the C API refuses too, through the op
            torch.ops.symmem.all_reduce(x, "sum", comm.group_name)
        # every kernel that starts after the failure leaves NaN (docs/collectives.md, "After an error")
        g.replay()
        torch.cuda.synchronize(dev)
        assert torch.isnan(y.float()).all(), "outputs after an error are not NaN"
    ctx.barrier()
    del g


def body_nccl(rank, comm, ctx):
    """A symmetric tensor registered with the NCCL communicator of a ProcessGroupNCCL (one GPU per rank)."""
    import torch.distributed as dist
    dev, n = comm.device, comm.world_size
    pg = dist.new_group(backend="nccl")
    warm = torch.ones(8, device=dev)
    dist.all_reduce(warm, group=pg)  # NCCL makes its communicator lazily
    torch.cuda.synchronize(dev)
    x = st.empty(1 << 16, dtype=torch.float32, group=comm)
    parts = parts_for((1 << 16,), torch.float32, n, 321)
    x.copy_(parts[rank])
    reg = st.register_with_nccl(x, pg)
    dist.all_reduce(x, group=pg)
    torch.cuda.synchronize(dev)
    assert torch.allclose(x.cpu().double(), sum(p.double() for p in parts), rtol=1e-5, atol=1e-5)
    reg.deregister()
    reg.deregister()  # idempotent
    ctx.barrier()


# ---------------------------------------------------------------------------------------------------------
# The tests.
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("nranks", [2, 3, 4])
def test_threads_eager(nranks):
    run_threads(nranks, body_eager)


@pytest.mark.parametrize("nranks", [2, 4])
def test_threads_errors(nranks):
    run_threads(nranks, body_errors)


@pytest.mark.parametrize("nranks", [2, 4])
def test_threads_graph(nranks):
    run_threads(nranks, body_graph)


@pytest.mark.parametrize("nranks", [2, 4])
def test_threads_symmetric(nranks):
    run_threads(nranks, body_symmetric)


def test_threads_compile():
    run_threads(2, body_compile)


def test_threads_timeout_reaches_the_caller():
    run_threads(2, body_timeout, timeout_ms=3000)


@pytest.mark.parametrize("nranks", [2, 4])
@pytest.mark.parametrize("body", [body_eager, body_graph, body_compile, body_symmetric],
                         ids=["eager", "graph", "compile", "symmetric"])
def test_processes(nranks, body):
    if not multiprocess_ok(nranks):
        pytest.skip(f"{nranks} processes need {nranks} GPUs or MPS (SYMMEM_TEST_MPS=1)")
    run_processes(nranks, body)


def test_processes_nccl_registration():
    if torch.cuda.device_count() < 2:
        pytest.skip("NCCL needs one GPU per rank: 2 GPUs")
    run_processes(2, body_nccl)

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

import rank_harness  # noqa: E402
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
def graph_registration_on():
    """SYMMEM_GRAPH_REGISTER as the library reads it (its table's default and values)."""
    from symmem import _settings
    return _settings.flag("SYMMEM_GRAPH_REGISTER")


def _in_turn(ctx, rank, fn):
    """fn() on one rank after another, in rank order. For CUDA-graph captures of thread ranks:
    torch.cuda.graph synchronizes the device on entry, and a device-wide synchronize from one thread
    invalidates the capture another thread of the process has open on that device
    (cudaErrorStreamCaptureInvalidated), so ranks that are threads sharing a GPU must not capture at the same
    time. Their captures need no peer: graph registration is off where ranks share a process."""
    out = None
    for r in range(ctx.n):
        if r == rank:
            out = fn()
        ctx.barrier()
    return out


class ThreadCtx:
    def __init__(self, n):
        self.n = n
        self._bar = threading.Barrier(n, timeout=300)
        self._slots = [None] * n

    def barrier(self):
        self._bar.wait()

    def one_at_a_time(self, rank, fn):
        return _in_turn(self, rank, fn)

    def gather(self, rank, obj):
        self._slots[rank] = obj
        self._bar.wait()
        out = list(self._slots)
        self._bar.wait()
        return out


def run_threads(nranks, body, timeout_ms=TIMEOUT_MS, **kw):
    if os.environ.get("CUDA_MODULE_LOADING") != "EAGER":
        # A PyTorch kernel loaded lazily while a peer thread's collective waits waits with it (docs/collectives.md,
        # "Lazy loading"): these tests hung that way. scripts/test_python.sh --gpu sets it.
        pytest.skip("ranks as threads need CUDA_MODULE_LOADING=EAGER (PyTorch's kernels load lazily)")
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

    threads = [threading.Thread(target=main, args=(r,), name=f"rank{r}", daemon=True) for r in range(nranks)]
    for t in threads:
        t.start()
    end = time.monotonic() + rank_harness.deadline_s()
    for t in threads:
        t.join(max(0.0, end - time.monotonic()))
    stuck = [r for r, t in enumerate(threads) if t.is_alive()]
    if stuck:
        # the communicators stay open: closing one under a rank still inside a collective is not allowed
        pytest.fail(f"ranks {stuck} (threads rank<r>) gave no result within {rank_harness.deadline_s():.0f} s; "
                    f"every thread's Python stack:\n{rank_harness.dump_threads()}")
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

    def one_at_a_time(self, rank, fn):
        """Together, as frameworks capture, with graph registration (on unless SYMMEM_GRAPH_REGISTER is false):
        an all-reduce captured on ordinary memory then maps the peers' buffers at capture, which every rank's
        capture must reach; in turn, as thread ranks capture, with it off."""
        if graph_registration_on():
            out = fn()
            self.barrier()
            return out
        return _in_turn(self, rank, fn)

    def gather(self, rank, obj):
        import torch.distributed as dist
        out = [None] * self.n
        dist.all_gather_object(out, obj)
        return out


def _proc_main(rank, nranks, init_file, body_name, q, stack_dir):
    rank_harness.child_setup(stack_dir, rank)
    import torch.distributed as dist
    # The host references are torch CPU ops, and torch gives every process one thread per core: 16 ranks on
    # a 16-core host are 256 spinning threads, and the references then take minutes (every rank was found
    # in exact() at the deadline). A share of the cores per rank, as torchrun's OMP_NUM_THREADS=1 does.
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // nranks))
    os.environ["NCCL_CUMEM_ENABLE"] = "1"  # NCCL registers cuMem memory only on its cuMem path
    try:
        ndev = torch.cuda.device_count()
        dev = torch.device("cuda", rank % ndev)
        torch.cuda.set_device(dev)
        dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=nranks)
        comm = st.SymmemCommunicator(dist.group.WORLD, dev)
        assert not comm.disabled, "communicator disabled (see the warning above)"
        assert comm.group_name == dist.group.WORLD.group_name
        # a side stream, as for thread ranks and as frameworks run: CUDA graphs cannot capture the default one
        with torch.cuda.stream(torch.cuda.Stream(dev)):
            globals()[body_name](rank, comm, ProcCtx(nranks))
        torch.cuda.synchronize()
        comm.close()
        dist.destroy_process_group()
        q.put((rank, "ok"))
    except BaseException:  # noqa: BLE001
        q.put((rank, traceback.format_exc()))


def multiprocess_ok(nranks):
    return torch.cuda.device_count() >= nranks or os.environ.get("SYMMEM_TEST_MPS") == "1"


def run_processes(nranks, body, deadline=None):
    """body in nranks spawned processes; a rank that raises, dies or hangs fails the test with its traceback,
    exit status or stacks (rank_harness)."""
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    with tempfile.TemporaryDirectory() as d:
        procs = [ctx.Process(target=_proc_main, args=(r, nranks, os.path.join(d, "init"), body.__name__, q, d))
                 for r in range(nranks)]
        for p in procs:
            p.start()
        try:
            got, errors = rank_harness.collect(procs, q, rank_harness.deadline_s(deadline or 120), d)
        finally:
            rank_harness.stop(procs, grace=60)
    errors += [f"rank {r}:\n{item[1]}" for r, item in sorted(got.items()) if item[1] != "ok"]
    assert not errors, "\n".join(errors)


# ---------------------------------------------------------------------------------------------------------
# References.
# ---------------------------------------------------------------------------------------------------------
# Host copies, with ranks as threads of one process: a synchronous copy waits for its stream inside the
# driver, and while it waits (this rank's collective waiting for a peer thread) it may hold a process-wide
# resource of the driver (the pageable-copy staging path) that the peer thread needs to launch its part; the
# two then wait for each other until the timeout. So every host copy here first waits for its own stream
# outside the driver and then copies with nothing pending. docs/collectives.md ("Blocking host calls") states the
# rule for applications.
def host(t):
    if t.is_cuda:
        torch.cuda.current_stream(t.device).synchronize()
    return t.cpu()


def to_dev(t, dev):
    torch.cuda.current_stream(dev).synchronize()
    return t.to(dev)


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
    got = host(got)
    want = exact(parts, op)
    assert torch.equal(got, want), f"{what}: {(got.float() - want.float()).abs().max().item()} max abs difference"
    if op == "sum":  # and close to the float64 sum
        ref = sum(p.double() for p in parts)
        tol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[got.dtype]
        err = ((got.double() - ref).norm() / ref.norm().clamp_min(1e-30)).item()
        assert err < tol, f"{what}: relative error {err} against float64"


def same_on_every_rank(rank, ctx, t, what):
    mine = host(t).contiguous().view(torch.uint8)
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
                x = to_dev(parts[rank], dev)
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
                z = torch.ops.symmem.all_reduce(to_dev(parts[rank], dev).view(1, count), op, comm.group_name)
                check(z.view(count), parts, op, what + " torch.ops 2-D")
    # reduce-scatter and all-gather along dim 0, odd row lengths
    for dtype in DTYPES:
        for rows, cols in ((1, 1), (3, 7), (64, 1000)):
            seed += 1
            parts = parts_for((n * rows, cols), dtype, n, seed)
            x = to_dev(parts[rank], dev)
            for op in OPS:
                rs = comm.reduce_scatter(x, op=op)
                assert rs.shape == (rows, cols)
                check(rs, [p[rank * rows:(rank + 1) * rows] for p in parts], op, f"reduce_scatter {dtype} {op}")
            mine = parts[rank][:rows]
            ag = comm.all_gather(to_dev(mine, dev))
            want = torch.cat([p[:rows] for p in parts])
            assert torch.equal(host(ag), want), f"all_gather {dtype} {rows}x{cols}"
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

    def capture():
        with torch.cuda.graph(g, stream=s, capture_error_mode="thread_local"):
            return step()
    res, rs, ag = ctx.one_at_a_time(rank, capture)
    # With graph registration (on unless SYMMEM_GRAPH_REGISTER is false) processes map each other's ordinary
    # buffers at capture: the captured all-reduces read and store them in place; thread ranks never do
    # (docs/collectives.md, "CUDA graphs").
    mapped = comm.comm.graph_mappings
    if (isinstance(ctx, ProcCtx) and graph_registration_on()
            and os.environ.get("SYMMEM_PLACEMENT", "auto") in ("auto", "device")):
        assert mapped > 0, "no peer buffer was mapped for the graph's all-reduces on ordinary tensors"
    elif isinstance(ctx, ThreadCtx) or not graph_registration_on():
        assert mapped == 0, f"{mapped} peer allocations mapped where graph registration is off"
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
        assert torch.equal(host(ag), want_ag), f"graph replay {it} all_gather"
        same_on_every_rank(rank, ctx, res[0], f"graph replay {it}")
    del g


def body_compile(rank, comm, ctx):
    dev = comm.device
    f = torch.compile(lambda t: comm.all_reduce(t * 2) + 1, fullgraph=True)
    g = torch.compile(lambda t, o: comm.all_reduce(t, out=o) * 3, fullgraph=True)
    for it, count in enumerate((1000, 4096, 1000)):  # the third call reuses the first compilation
        parts = parts_for((count,), torch.float32, comm.world_size, 500 + it)
        y = f(to_dev(parts[rank], dev))
        want = exact([p * 2 for p in parts], "sum") + 1
        assert torch.equal(host(y), want), f"compiled f, call {it}"
        o = torch.empty(count, device=dev)
        z = g(to_dev(parts[rank], dev), o)
        assert torch.equal(host(z), exact(parts, "sum") * 3) and torch.equal(host(o), exact(parts, "sum"))
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
        assert torch.equal(host(v), torch.full((count,), peer + 1, dtype=dtype)), f"peer {peer} view"
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
    # The MemPool: tensors allocated inside are symmetric and take the same path. Ranks that are threads on
    # one GPU are refused (the caching allocator's lock of that GPU would make their allocations wait for
    # each other).
    if st.op_library() is None:
        return
    if comm._colocated:
        with pytest.raises(RuntimeError, match="shares cuda"):
            st.get_mem_pool(comm)
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

    def capture():
        with torch.cuda.graph(g, stream=s, capture_error_mode="thread_local"):
            y = comm.all_reduce(x)
        torch.cuda.synchronize(dev)
        return y
    y = ctx.one_at_a_time(rank, capture)
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
    assert torch.allclose(host(x).double(), sum(p.double() for p in parts), rtol=1e-5, atol=1e-5)
    reg.deregister()
    reg.deregister()  # idempotent
    ctx.barrier()


# ---------------------------------------------------------------------------------------------------------
# all_reduce_add_rmsnorm: residual += sum over ranks of x; out = rmsnorm(residual) * weight.
# ---------------------------------------------------------------------------------------------------------
# (tokens, hidden): odd widths (the element path), the served models' 4096 and 7168, the 16384 limit, and
# token counts on both sides of the one-shot / two-shot crossover at 3 and 4 ranks.
RMS_CASES = ((1, 1), (1, 4096), (2, 7), (3, 4097), (17, 7168), (64, 4096), (128, 7168), (257, 4095), (5, 16383),
             (33, 16384), (257, 7168))
RMS_EPS = (1e-6, 1e-5, 0.25)
_ULP = {torch.float32: 2.0 ** -24, torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}
_SUBNORMAL = {torch.float32: 0.0, torch.float16: 2.0 ** -24, torch.bfloat16: 0.0}
_REL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def rms_inputs(shape, dtype, world, seed):
    """Per-rank x (different on every rank) and the residual and weight every rank shares (tensor
    parallelism replicates them), as CPU tensors."""
    xs = parts_for(shape, dtype, world, seed)
    g = torch.Generator().manual_seed(seed * 1000 + 999)
    residual = (torch.randn(shape, generator=g, dtype=torch.float64) * 2).to(dtype)
    weight = (torch.rand(shape[-1], generator=g, dtype=torch.float64) + 0.5).to(dtype)
    return xs, residual, weight


def rms_reference(xs, residual, weight, eps):
    """(residual symmem must return, exactly; the float64 norm of that residual; the float64 residual and
    norm of the whole sequence). symmem.h: h = fp32 sum in rank order rounded to the dtype, residual =
    round(residual + h) in fp32, the norm from that stored residual."""
    dtype = residual.dtype
    h = exact(xs, "sum")
    res = (residual.float() + h.float()).to(dtype)

    def norm(r):
        r = r.double()
        return r * weight.double() / torch.sqrt((r * r).mean(dim=-1, keepdim=True) + eps)

    res64 = residual.double() + sum(x.double() for x in xs)
    return res, norm(res), res64, norm(res64)


def check_rms(out, res, xs, residual, weight, eps, what):
    out, res = host(out), host(res)
    dtype = out.dtype
    want_res, want_out, res64, out64 = rms_reference(xs, residual, weight, eps)
    assert torch.equal(res, want_res), (f"{what}: residual differs from round(residual + round(sum x)): "
                                        f"{(res.double() - want_res.double()).abs().max().item()} max abs")
    bound = (_ULP[dtype] + 2.0 ** -15) * want_out.abs() + _SUBNORMAL[dtype] + 1e-30
    err = (out.double() - want_out).abs()
    bad = err > bound
    assert not bad.any(), (f"{what}: {int(bad.sum())} outputs off the float64 norm of the residual by more than the "
                           f"output rounding; worst {err.max().item()} at {bad.nonzero()[0].tolist()}")
    for got, ref, name in ((res, res64, "residual"), (out, out64, "out")):  # the whole sequence in float64
        rel = ((got.double() - ref).norm() / ref.norm().clamp_min(1e-30)).item()
        assert rel < _REL[dtype], f"{what}: {name} relative error {rel} against the float64 sequence"


def _rms_call(comm, form, x, r, w, eps):
    """One call in `form`; returns the output tensor."""
    if form == "functional":
        out = comm.all_reduce_add_rmsnorm(x, r, w, eps)
    elif form == "out":
        out = comm.all_reduce_add_rmsnorm(x, r, w, eps, out=torch.empty_like(x))
    elif form == "inplace":
        out = comm.all_reduce_add_rmsnorm(x, r, w, eps, out=x)
        assert out is x
    else:  # the op itself, by group name
        out = torch.ops.symmem.all_reduce_add_rmsnorm(x, r, w, eps, comm.group_name)
    assert out is not None, f"{form}: not eligible"
    return out


def body_rmsnorm(rank, comm, ctx):
    n, dev = comm.world_size, comm.device
    forms = ("functional", "out", "inplace", "op")
    seed = 3000
    k = 0
    for dtype in DTYPES:
        for tokens, hidden in RMS_CASES:
            if tokens * hidden * torch.empty((), dtype=dtype).element_size() > comm.max_size:
                continue
            seed += 1
            eps = RMS_EPS[k % len(RMS_EPS)]
            form = forms[k % len(forms)]
            k += 1
            xs, residual, weight = rms_inputs((tokens, hidden), dtype, n, seed)
            what = f"all_reduce_add_rmsnorm {form} {dtype} {tokens}x{hidden} eps {eps} ({n} ranks)"
            x, r, w = to_dev(xs[rank], dev), to_dev(residual, dev), to_dev(weight, dev)
            out = _rms_call(comm, form, x, r, w, eps)
            check_rms(out, r, xs, residual, weight, eps, what)
            if form != "inplace":
                assert torch.equal(host(x), xs[rank]), f"{what}: input changed"
            assert torch.equal(host(w), weight), f"{what}: weight changed"
            same_on_every_rank(rank, ctx, out, what + ": out")
            same_on_every_rank(rank, ctx, r, what + ": residual")
    # Element-aligned pointers off 16 bytes (the element path of the kernel), 3-D input.
    for dtype in DTYPES:
        tokens, hidden = 9, 4096
        xs, residual, weight = rms_inputs((tokens, hidden), dtype, n, seed + 50)
        base = torch.empty(3 * tokens * hidden + 3, dtype=dtype, device=dev)
        x = base[1:1 + tokens * hidden].view(tokens, hidden)
        r = base[2 + tokens * hidden:2 + 2 * tokens * hidden].view(3, 3, hidden)
        x.copy_(xs[rank])
        r.copy_(residual.view(3, 3, hidden))
        out = comm.all_reduce_add_rmsnorm(x.view(3, 3, hidden), r, to_dev(weight, dev), 1e-6)
        assert out.shape == (3, 3, hidden)
        check_rms(out.view(tokens, hidden), r.view(tokens, hidden), xs, residual, weight, 1e-6,
                  f"unaligned {dtype} ({n} ranks)")
    # Every token count from 1 to 257 at one width.
    dtype, hidden = torch.bfloat16, 4096
    for tokens in range(1, 258):
        if tokens * hidden * 2 > comm.max_size:
            break
        xs, residual, weight = rms_inputs((tokens, hidden), dtype, n, 5000 + tokens)
        r = to_dev(residual, dev)
        out = comm.all_reduce_add_rmsnorm(to_dev(xs[rank], dev), r, to_dev(weight, dev), 1e-6)
        check_rms(out, r, xs, residual, weight, 1e-6, f"tokens {tokens} x {hidden} ({n} ranks)")
    same_on_every_rank(rank, ctx, out, "tokens 257")
    # Zero tokens: nothing to do, nothing written.
    z = torch.empty(0, hidden, dtype=dtype, device=dev)
    assert comm.all_reduce_add_rmsnorm(z, torch.empty_like(z), torch.ones(hidden, dtype=dtype, device=dev),
                                       1e-6).shape == (0, hidden)
    ctx.barrier()


def body_rmsnorm_graph(rank, comm, ctx):
    """A graph of a decoder layer's two ends (fused calls in every form, a plain all-reduce between them),
    replayed with fresh inputs copied into the captured ones; every replay checked, ranks bitwise equal."""
    n, dev = comm.world_size, comm.device
    dtype, hidden, tokens = torch.bfloat16, 7168, 5
    shape = (tokens, hidden)
    xa, xb, xc = (torch.zeros(shape, dtype=dtype, device=dev) for _ in range(3))
    plain = torch.zeros(1000, dtype=dtype, device=dev)
    r = torch.zeros(shape, dtype=dtype, device=dev)
    w = torch.zeros(hidden, dtype=dtype, device=dev)
    out_b = torch.empty_like(xb)
    s = torch.cuda.current_stream(dev)
    eps = 1e-5

    def step():
        ya = comm.all_reduce_add_rmsnorm(xa, r, w, eps)
        res_a = r.clone()
        p = comm.all_reduce(plain)
        comm.all_reduce_add_rmsnorm(xb, r, w, eps, out=out_b)
        res_b = r.clone()
        comm.all_reduce_add_rmsnorm(xc, r, w, eps, out=xc)
        return ya, res_a, p, res_b

    step()
    torch.cuda.synchronize(dev)
    ctx.barrier()
    g = torch.cuda.CUDAGraph()

    def capture():
        with torch.cuda.graph(g, stream=s, capture_error_mode="thread_local"):
            return step()
    ya, res_a, p, res_b = ctx.one_at_a_time(rank, capture)
    for it in range(4):
        a, res0, wt = rms_inputs(shape, dtype, n, 700 + 10 * it)
        b = parts_for(shape, dtype, n, 701 + 10 * it)
        c = parts_for(shape, dtype, n, 702 + 10 * it)
        pp = parts_for((1000,), dtype, n, 703 + 10 * it)
        xa.copy_(a[rank]), xb.copy_(b[rank]), xc.copy_(c[rank]), plain.copy_(pp[rank])
        r.copy_(res0), w.copy_(wt)
        g.replay()
        what = f"graph replay {it} ({n} ranks)"
        check_rms(ya, res_a, a, res0, wt, eps, what + " call 1")
        check(p, pp, "sum", what + " plain all_reduce")
        check_rms(out_b, res_b, b, host(res_a), wt, eps, what + " call 2 (out=)")
        check_rms(xc, r, c, host(res_b), wt, eps, what + " call 3 (in place)")
        for t, name in ((ya, "out 1"), (xc, "out 3"), (r, "residual")):
            same_on_every_rank(rank, ctx, t, f"{what} {name}")
    del g


def body_rmsnorm_compile(rank, comm, ctx):
    """torch.compile(fullgraph=True) of a layer's end runs the op and writes the residual back into the
    caller's tensor: bitwise what the eager calls give."""
    n, dev = comm.world_size, comm.device

    def layer_end(x, residual, w1, w2):
        h = comm.all_reduce_add_rmsnorm(x * 0.5, residual, w1, 1e-6)
        return comm.all_reduce_add_rmsnorm(h + 1, residual, w2, 1e-6)

    f = torch.compile(layer_end, fullgraph=True)
    for it, tokens in enumerate((3, 64, 3)):
        xs, residual, w1 = rms_inputs((tokens, 4096), torch.bfloat16, n, 900 + it)
        w2 = (w1.float() * 0.75).to(torch.bfloat16)
        x = to_dev(xs[rank], dev)
        r_eager, r_comp = to_dev(residual, dev), to_dev(residual, dev)
        want = layer_end(x, r_eager, to_dev(w1, dev), to_dev(w2, dev))
        got = f(x, r_comp, to_dev(w1, dev), to_dev(w2, dev))
        assert torch.equal(got, want), f"compiled call {it}: output differs from eager"
        assert torch.equal(r_comp, r_eager), f"compiled call {it}: residual not written back as in eager"
        assert not torch.equal(host(r_comp), residual), f"compiled call {it}: residual unchanged"
    ctx.barrier()


def body_rmsnorm_errors(rank, comm, ctx):
    dev, g = comm.device, comm.group_name
    ops = torch.ops.symmem
    x = torch.ones(4, 64, dtype=torch.bfloat16, device=dev)
    r, w = torch.ones_like(x), torch.ones(64, dtype=torch.bfloat16, device=dev)
    wide = torch.ones(2, 16385, dtype=torch.bfloat16, device=dev)
    cases = [
        (lambda: ops.all_reduce_add_rmsnorm(x, r[:3], w, 1e-6, g), "residual has shape \\[3, 64\\]"),
        (lambda: ops.all_reduce_add_rmsnorm(x, r, w[:63], 1e-6, g), "weight has shape \\[63\\]"),
        (lambda: ops.all_reduce_add_rmsnorm(x, r.float(), w, 1e-6, g), "residual has dtype float32"),
        (lambda: ops.all_reduce_add_rmsnorm(wide, torch.ones_like(wide), torch.ones(16385, dtype=torch.bfloat16,
                                            device=dev), 1e-6, g), "1 <= hidden <= 16384"),
        (lambda: ops.all_reduce_add_rmsnorm_out(x, r, w, 1e-6, g, r), "out overlaps residual"),
        (lambda: ops.all_reduce_add_rmsnorm_out(x, r, w, 1e-6, g, x), "use all_reduce_add_rmsnorm_"),
        (lambda: ops.all_reduce_add_rmsnorm(x, x, w, 1e-6, g), "residual overlaps input"),
        (lambda: ops.all_reduce_add_rmsnorm(x, r, w, -1.0, g), "eps -1 must be finite"),
        (lambda: ops.all_reduce_add_rmsnorm(x, r.t().contiguous().t(), w, 1e-6, g), "not contiguous"),
        (lambda: ops.all_reduce_add_rmsnorm(x, r, host(w), 1e-6, g), "weight is not a CUDA tensor"),
        (lambda: ops.all_reduce_add_rmsnorm(x, r, w, 1e-6, g + "-nope"), "not registered"),
    ]
    before = r.clone()
    for call, match in cases:
        with pytest.raises(RuntimeError, match=match) as e:
            call()
        if "not registered" not in match:
            assert f"rank {comm.rank} of {comm.world_size}" in str(e.value), str(e.value)
    torch.cuda.synchronize(dev)
    assert torch.equal(r, before), "a refused call wrote the residual"
    ctx.barrier()
    out = comm.all_reduce_add_rmsnorm(x, r, w, 1e-6)  # the communicator is still usable
    torch.cuda.synchronize(dev)
    assert torch.equal(host(r), torch.full((4, 64), 1.0 + comm.world_size, dtype=torch.bfloat16))
    assert torch.allclose(host(out.float()), torch.ones(4, 64), atol=1e-2)
    ctx.barrier()


# ---------------------------------------------------------------------------------------------------------
# The tests.
# ---------------------------------------------------------------------------------------------------------
def test_threads_link_class_and_preferred_cap():
    """A CUDA communicator's link class and the size cap a framework gets (symmem_comm_link_class,
    symmem_comm_preferred_max_bytes): the same on every rank, and the library's bound for that link class
    within the workspace's limit. Ranks are threads of this process (one thread makes the local init_all)."""
    ndev = torch.cuda.device_count()
    comms = symmem.Comm.init_all(2, devices=[r % ndev for r in range(2)], timeout_ms=TIMEOUT_MS)
    try:
        links = {c.link_class for c in comms}
        assert len(links) == 1 and links <= {symmem.LINK_NVLINK, symmem.LINK_PCIE, symmem.LINK_HOST}, links
        link = links.pop()
        if ndev == 1:
            assert link == symmem.LINK_NVLINK, "ranks that share a GPU count as NVLink"
        bound = symmem.link_preferred_max_bytes(link)
        for c in comms:
            assert c.max_message_bytes > 0
            want = c.max_message_bytes if bound is None else min(c.max_message_bytes, bound)
            assert c.preferred_max_bytes == want, (symmem.LINK_NAMES[link], c.preferred_max_bytes, want)
    finally:
        for c in comms:
            c.destroy()


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


def skip_compile_on_shared_gpu(nranks):
    # Compiled code brings kernels of its own that the process loads, and may benchmark, on their first
    # run: both wait for what runs on the device, so a thread rank doing it while a co-located thread's
    # collective waits for it can hang until the timeout (two thread ranks on one H200 did; docs/collectives.md,
    # "Lazy loading"). test_processes[compile-*] runs compiled code with a process per rank, under MPS.
    if torch.cuda.device_count() < nranks:
        pytest.skip(f"torch.compile with {nranks} thread ranks needs {nranks} GPUs (ranks sharing a GPU: "
                    "test_processes[compile-*])")


def test_threads_compile():
    skip_compile_on_shared_gpu(2)
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


@pytest.mark.parametrize("register", ["0", "1"], ids=["copy", "mapped"])
def test_processes_graph_registration(register, monkeypatch):
    """body_graph with graph registration set explicitly either way (the spawned ranks inherit it): the graph's
    all-reduces on ordinary tensors copy through the workspace, or map the peers' tensors at capture."""
    if not multiprocess_ok(2):
        pytest.skip("2 processes need 2 GPUs or MPS (SYMMEM_TEST_MPS=1)")
    monkeypatch.setenv("SYMMEM_GRAPH_REGISTER", register)
    run_processes(2, body_graph)


def test_processes_nccl_registration():
    if torch.cuda.device_count() < 2:
        pytest.skip("NCCL needs one GPU per rank: 2 GPUs")
    run_processes(2, body_nccl)


@pytest.mark.parametrize("nranks", [2, 3, 4])
def test_threads_rmsnorm(nranks):
    run_threads(nranks, body_rmsnorm)


@pytest.mark.parametrize("nranks", [2, 4])
def test_threads_rmsnorm_graph(nranks):
    run_threads(nranks, body_rmsnorm_graph)


def test_threads_rmsnorm_compile():
    skip_compile_on_shared_gpu(2)
    run_threads(2, body_rmsnorm_compile)


@pytest.mark.parametrize("nranks", [2, 4])
def test_threads_rmsnorm_errors(nranks):
    run_threads(nranks, body_rmsnorm_errors)


@pytest.mark.parametrize("nranks", [2, 4])
@pytest.mark.parametrize("body", [body_rmsnorm, body_rmsnorm_graph, body_rmsnorm_compile],
                         ids=["eager", "graph", "compile"])
def test_processes_rmsnorm(nranks, body):
    if not multiprocess_ok(nranks):
        pytest.skip(f"{nranks} processes need {nranks} GPUs or MPS (SYMMEM_TEST_MPS=1)")
    run_processes(nranks, body)


def test_threads_rmsnorm_through_the_ctypes_ops(tmp_path):
    """The same checks with the ops defined in Python over the ctypes binding (SYMMEM_TORCH_OPS=python),
    in a child process (the op set is chosen at import). Its ranks are threads: it runs with the other
    thread tests (its name says so), outside MPS and with eager module loading."""
    if os.environ.get("SYMMEM_TORCH_OPS") == "python":
        pytest.skip("already the ctypes ops")
    if os.environ.get("CUDA_MODULE_LOADING") != "EAGER":
        pytest.skip("ranks as threads need CUDA_MODULE_LOADING=EAGER (PyTorch's kernels load lazily)")
    import subprocess
    import sys
    env = dict(os.environ, SYMMEM_TORCH_OPS="python")
    here = os.path.abspath(__file__)
    tests = [f"{here}::{name}[2]" for name in ("test_threads_rmsnorm", "test_threads_rmsnorm_graph",
                                                "test_threads_rmsnorm_errors")]
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-x", *tests],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    assert "3 passed" in r.stdout.splitlines()[-1], r.stdout[-2000:]


# ---------------------------------------------------------------------------------------------------------
# 16 ranks (SYMMEM_MAX_RANKS; hosts with 16 PCIe GPUs), as processes sharing the GPU under MPS. One spawn of
# 16 ranks runs every check (sixteen Python processes start in tens of seconds), and ranks compare digests of
# their outputs, not the outputs: gathering whole tensors over gloo costs n^2 host traffic.
# ---------------------------------------------------------------------------------------------------------
SIXTEEN = 16


def _digest(t):
    import ctypes
    import hashlib
    t = host(t).contiguous()
    return hashlib.sha256(ctypes.string_at(t.data_ptr(), t.numel() * t.element_size())).hexdigest()


def _same_digest_on_every_rank(rank, ctx, t, what):
    d = ctx.gather(rank, _digest(t))
    differ = [r for r in range(len(d)) if d[r] != d[0]]
    assert not differ, f"{what}: ranks {differ} differ bitwise from rank 0"


def body_sixteen(rank, comm, ctx):
    """Eager all-reduce (every dtype x op, odd sizes, out of place, out=, in place) against the exact
    emulation and float64; reduce-scatter and all-gather; the fused all-reduce + RMSNorm; a tensor-parallel
    forward (per layer a GEMM, then the all-reduce of its output) eager and in a replayed CUDA graph; every
    output bitwise equal on every rank."""
    n, dev = comm.world_size, comm.device
    assert n == SIXTEEN, n
    seed = 16000
    for dtype in DTYPES:
        for op in OPS:
            for count in (7, 6147, 65537):
                seed += 1
                parts = parts_for((count,), dtype, n, seed)
                what = f"all_reduce {dtype} {op} count {count} ({n} ranks)"
                x = to_dev(parts[rank], dev)
                y = comm.all_reduce(x, op=op)
                check(y, parts, op, what)
                _same_digest_on_every_rank(rank, ctx, y, what)
                o = torch.empty_like(x)
                assert comm.all_reduce(x, out=o, op=op) is o
                check(o, parts, op, what + " out=")
                assert comm.all_reduce(x, out=x, op=op) is x
                check(x, parts, op, what + " in place")
    for dtype in DTYPES:
        for rows, cols in ((1, 7), (64, 100)):
            seed += 1
            parts = parts_for((n * rows, cols), dtype, n, seed)
            x = to_dev(parts[rank], dev)
            rs = comm.reduce_scatter(x)
            check(rs, [p[rank * rows:(rank + 1) * rows] for p in parts], "sum", f"reduce_scatter {dtype} {rows}x{cols}")
            ag = comm.all_gather(to_dev(parts[rank][:rows], dev))
            assert torch.equal(host(ag), torch.cat([p[:rows] for p in parts])), f"all_gather {dtype} {rows}x{cols}"
            _same_digest_on_every_rank(rank, ctx, ag, f"all_gather {dtype}")
    for tokens, hidden in ((3, 4097), (17, 7168)):
        seed += 1
        xs, residual, weight = rms_inputs((tokens, hidden), torch.bfloat16, n, seed)
        r = to_dev(residual, dev)
        out = comm.all_reduce_add_rmsnorm(to_dev(xs[rank], dev), r, to_dev(weight, dev), 1e-6)
        check_rms(out, r, xs, residual, weight, 1e-6, f"all_reduce_add_rmsnorm {tokens}x{hidden} ({n} ranks)")
        _same_digest_on_every_rank(rank, ctx, out, f"all_reduce_add_rmsnorm {tokens}x{hidden}")
    _tp_forward(rank, comm, ctx, layers=4, tokens=16, hidden=1024)
    ctx.barrier()


def _tp_forward(rank, comm, ctx, layers, tokens, hidden):
    """The tensor-parallel forward that once reported nothing at 16 ranks (bench/tp_phases.py measures its
    phases): h = x @ W then the all-reduce of h, per layer, eager and then captured and replayed; each
    layer's output against the float64 sum of every rank's h (gathered whole: small) and bitwise equal."""
    n, dev = comm.world_size, comm.device
    g = torch.Generator().manual_seed(4242 + rank)
    ws = [(torch.randn(hidden, hidden, generator=g) / hidden ** 0.5).to(dev, torch.bfloat16) for _ in range(layers)]
    xs = [torch.randn(tokens, hidden, generator=g).to(dev, torch.bfloat16) for _ in range(layers)]
    hs = [torch.empty(tokens, hidden, dtype=torch.bfloat16, device=dev) for _ in range(layers)]
    outs = [torch.empty_like(h) for h in hs]

    def forward():
        for k in range(layers):
            torch.matmul(xs[k], ws[k], out=hs[k])
            comm.all_reduce(hs[k], out=outs[k])

    # Every rank's first GEMM (cuBLAS's handle, workspace and kernels) before any rank's first all-reduce
    # of the forward, then all start together, as a framework's warm-up does and bench/tp_phases.py does.
    for k in range(layers):
        torch.matmul(xs[k], ws[k], out=hs[k])
    torch.cuda.current_stream(dev).synchronize()
    ctx.barrier()

    def verify(what):
        for k in range(layers):
            mine = host(hs[k])
            every = ctx.gather(rank, mine)  # 16 x 32 KiB per layer: small enough to gather whole
            ref = sum(p.double() for p in every)
            got = host(outs[k]).double()
            err = ((got - ref).norm() / ref.norm()).item()
            assert err < 1.6e-2, f"{what}: layer {k}: relative error {err} against float64 ({n} ranks)"
            assert torch.equal(host(outs[k]), exact(every, "sum")), f"{what}: layer {k}: not the rank-order fp32 sum"
            _same_digest_on_every_rank(rank, ctx, outs[k], f"{what}: layer {k}")

    forward()
    verify("tp forward, eager")
    s = torch.cuda.current_stream(dev)
    graph = torch.cuda.CUDAGraph()

    def capture():
        with torch.cuda.graph(graph, stream=s, capture_error_mode="thread_local"):
            forward()
    ctx.one_at_a_time(rank, capture)
    for it in range(3):
        for k in range(layers):
            xs[k].copy_(torch.randn(tokens, hidden, generator=g).to(torch.bfloat16))
            outs[k].zero_()
        graph.replay()
        verify(f"tp forward, graph replay {it}")
    del graph


def test_processes_sixteen_ranks():
    """At the library's defaults. Where the ranks share a GPU and run GEMMs between collectives, a rank's
    GEMM, whose blocks each take a whole SM in clusters of 8, can start only while the other ranks'
    collective blocks, waiting for its data, leave some GPC 8 idle SMs: the default SYMMEM_CLUSTER_ROOM
    keeps them (docs/collectives.md, "Residency")."""
    if not multiprocess_ok(SIXTEEN):
        pytest.skip(f"{SIXTEEN} processes need {SIXTEEN} GPUs or MPS (SYMMEM_TEST_MPS=1)")
    run_processes(SIXTEEN, body_sixteen)


# The cluster room's bound itself: five co-located ranks at SYMMEM_GRID_SHARE=100 hold the whole pool the room
# leaves them (on a GPU of 132 SMs in 8 GPCs: 75 blocks, 15 a rank), so exactly (8 - 1) x 8 + 1 = 57 SMs stay
# idle, the fewest with which some GPC still has the 8 that the forward's GEMM clusters need wherever the
# collective blocks land. A room rule that left fewer would time out here; the default share (75) never
# reaches the bound.
ROOM_BOUND_RANKS = 5


def body_room_bound(rank, comm, ctx):
    """The tensor-parallel forward (a GEMM, then the all-reduce of its output, per layer), eager and in a
    replayed graph, with the collectives holding the whole pool."""
    _tp_forward(rank, comm, ctx, layers=4, tokens=16, hidden=1024)
    ctx.barrier()


def test_processes_tp_forward_at_the_cluster_room_bound(monkeypatch):
    if not multiprocess_ok(ROOM_BOUND_RANKS):
        pytest.skip(f"{ROOM_BOUND_RANKS} processes need {ROOM_BOUND_RANKS} GPUs or MPS (SYMMEM_TEST_MPS=1)")
    monkeypatch.setenv("SYMMEM_GRID_SHARE", "100")
    run_processes(ROOM_BOUND_RANKS, body_room_bound)


def test_example_under_torchrun(tmp_path):
    """examples/torch_allreduce.py as a user runs it: torchrun, two ranks (a GPU each, or one GPU under MPS),
    an all-reduce and the fused all-reduce + add + RMSNorm, checked by the example itself."""
    if not multiprocess_ok(2):
        pytest.skip("2 processes need 2 GPUs or MPS (SYMMEM_TEST_MPS=1)")
    import subprocess
    import sys
    from pathlib import Path
    example = Path(__file__).resolve().parents[2] / "examples" / "torch_allreduce.py"
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                        str(example)], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
    for rank in (0, 1):
        assert f"rank {rank}: all-reduce and fused all-reduce + add + RMSNorm on cuda:" in r.stdout, r.stdout

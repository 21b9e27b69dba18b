"""What the SGLang and vLLM drop-ins share (python/symmem/integrations/_common.py, _imphook.py), on CPU with
real gloo process groups in real processes: the rank agreement, the same-host check, the size cap, errors
that must disable rather than raise, and the post-import hook. Needs torch (any recent version); no GPU.

Also home of two helpers the framework tests use: run_ranks (N forked ranks over a gloo FileStore) and
scan_attribute_reads (which attributes a framework's source reads on its communicator)."""
import ast
import contextlib
import logging
import multiprocessing as mp
import os
import sys
import tempfile
import textwrap
import traceback
import warnings
from datetime import timedelta
from pathlib import Path

import pytest

for _k, _v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ[_k] = _v

try:
    import torch  # noqa: F401
    import torch.distributed as dist
except ImportError:  # pragma: no cover - the integration venvs always have torch
    torch = None

import rank_harness  # noqa: E402
from symmem.integrations import _common, _imphook  # noqa: E402


# ----------------------------------------------------------------------------------------------- helpers
def _rank_entry(fn, rank, world, store, q, args, stack_dir=None):
    rank_harness.child_setup(stack_dir, rank)
    try:
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                                timeout=timedelta(seconds=60))
        # init_process_group returns on one rank before the other has finished gloo's connection handshake;
        # a body that makes no collective (a broken all_gather_object) would then let that rank exit and
        # close the socket under its peer's handshake ("Connection closed by peer"). The barriers keep every
        # rank in the group until all have joined it and all have finished the body.
        dist.barrier()
        result = fn(rank, world, *args)
        dist.barrier()
        dist.destroy_process_group()
        q.put((rank, True, result))
    except BaseException:  # noqa: BLE001 - reported to the parent
        q.put((rank, False, traceback.format_exc()))


def run_ranks(fn, world=2, *args, timeout=120, context="fork"):
    """Run fn(rank, world, *args) in `world` processes joined by a gloo group; returns the results by rank.
    A rank that raises fails the test with its traceback, one that dies with its exit status, one that hangs
    after `timeout` s with its Python stacks (rank_harness)."""
    ctx = mp.get_context(context)
    q = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        procs = [ctx.Process(target=_rank_entry, args=(fn, r, world, store, q, args, tmp)) for r in range(world)]
        for p in procs:
            p.start()
        try:
            got, errors = rank_harness.collect(procs, q, rank_harness.deadline_s(timeout), tmp)
        finally:
            rank_harness.stop(procs)
        errors += [f"rank {r}:\n{value}" for r, (_, ok, value) in sorted(got.items()) if not ok]
        if errors:
            raise AssertionError("\n".join(errors))
        return [got[r][2] for r in range(world)]


class LogCapture(logging.Handler):
    """Records of one logger (and its children) at every level, for asserting what was said once."""

    def __init__(self, name):
        super().__init__(logging.DEBUG)
        self.records = []
        self.logger = logging.getLogger(name)

    def __enter__(self):
        self.old_level = self.logger.level
        self.logger.setLevel(logging.DEBUG)
        self.logger.addHandler(self)
        return self

    def __exit__(self, *exc):
        self.logger.removeHandler(self)
        self.logger.setLevel(self.old_level)

    def emit(self, record):
        self.records.append((record.levelno, record.getMessage()))

    def at_least(self, level):
        return [m for lv, m in self.records if lv >= level]


def _is_holder(node, holder, names, returns):
    if isinstance(node, ast.Attribute) and node.attr == holder:
        return True
    if isinstance(node, ast.Name) and node.id in names:
        return True
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in returns


def _functions(tree):
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _scan_tree(tree, holder):
    """Attribute reads on the communicator in one module. The communicator is `<anything>.<holder>`, a
    local name assigned from it, a parameter of a module-level function that some call passes it to, or
    the result of a module-level function that returns it; iterated to a fixed point."""
    funcs = _functions(tree)
    top = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    params = {name: [a.arg for a in f.args.posonlyargs + f.args.args] for name, f in top.items()}
    tracked = {id(f): set() for f in funcs}
    returns = set()
    changed = True
    while changed:
        changed = False
        for f in funcs:
            names = tracked[id(f)]
            before = (len(names), len(returns))
            for node in ast.walk(f):
                if isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    if _is_holder(node.value, holder, names, returns):
                        names.update(t.id for t in targets if isinstance(t, ast.Name))
                elif isinstance(node, ast.Return) and node.value is not None:
                    if _is_holder(node.value, holder, names, returns) and f.name in top:
                        returns.add(f.name)
                elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in top:
                    callee = top[node.func.id]
                    passed = [params[callee.name][i] for i, a in enumerate(node.args)
                              if i < len(params[callee.name]) and _is_holder(a, holder, names, returns)]
                    passed += [k.arg for k in node.keywords if k.arg and _is_holder(k.value, holder, names, returns)]
                    new = set(passed) - tracked[id(callee)]
                    if new:
                        tracked[id(callee)].update(new)
                        changed = True
            if (len(names), len(returns)) != before:
                changed = True
    reads = {}
    for f in [tree] + funcs:
        names = tracked.get(id(f), set())
        for node in ast.walk(f):
            attr = None
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and \
                    _is_holder(node.value, holder, names, returns):
                attr = node.attr
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" \
                    and len(node.args) >= 2 and _is_holder(node.args[0], holder, names, returns) \
                    and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
                attr = node.args[1].value
            if attr:
                reads.setdefault(attr, set()).add(getattr(node, "lineno", 0))
    return reads


def scan_attribute_reads(root, holder, skip=()):
    """{attribute: ['file:line', ...]} for every attribute the Python files under `root` read on the object
    they keep in `<x>.<holder>` (e.g. GroupCoordinator.torch_symm_mem_comm). Files whose path ends with
    one of `skip` (the replaced class's own module) are left out."""
    found = {}
    for path in sorted(Path(root).rglob("*.py")):
        if any(str(path).endswith(s) for s in skip):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if holder not in text:  # the tracking is per module: a module that never names the holder reads nothing
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # invalid escapes in the framework's docstrings
                tree = ast.parse(text, str(path))
        except SyntaxError:
            continue
        for attr, lines in _scan_tree(tree, holder).items():
            found.setdefault(attr, []).extend(f"{path.relative_to(root)}:{n}" for n in sorted(lines))
    return found


# ------------------------------------------------------------------------------------ GPU scenario
# Per element: |out - ref| <= RTOL * |ref| + RTOL * 2^-12 * max|ref|. The reference sums the rounded inputs
# in float64; symmem accumulates in fp32 and rounds once, so the result is within one rounding (half an
# ulp, 2^-8 relative for bf16) of it; the absolute term covers fp32 accumulation of many ranks.
GPU_RTOL = {"float32": 2.0 ** -20, "float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}


def gpu_ranks_and_devices():
    """(world, device index of each rank): SYMMEM_TEST_GPU_RANKS ranks (default 2), spread over the GPUs
    round robin, so one GPU holds them all (co-located; MPS lets their kernels run at once)."""
    import torch

    n = torch.cuda.device_count()
    world = int(os.environ.get("SYMMEM_TEST_GPU_RANKS", "2"))
    return world, [r % n for r in range(world)]


def _inputs(numel, dtype, world, seed):
    import torch

    parts = [torch.randn(numel, generator=torch.Generator().manual_seed(seed * 131 + r), dtype=torch.float64)
             .to(dtype) for r in range(world)]
    return parts, sum(p.to(torch.float64) for p in parts)


def _check(out, ref, what, parts=None, fallback=False, chain=1):
    """out against the float64 reference: within GPU_RTOL (the rounding to the dtype), plus, given the ranks'
    inputs `parts`, the error bound of the additions, (world - 1) roundings per reduce of partial sums no
    larger than the sum of the inputs' magnitudes (scaled by world per earlier reduce of a `chain`). The
    additions round in fp32 where symmem computed the sum (it accumulates in fp32, then rounds once to the
    dtype), in the dtype itself where the framework's fallback (gloo here) did, so that one's error grows
    with the rank count."""
    rtol = GPU_RTOL[str(out.dtype).replace("torch.", "")]
    got = out.detach().double().cpu().reshape(-1)
    ref = ref.reshape(-1)
    bound = rtol * ref.abs() + rtol * 2.0 ** -12 * ref.abs().max()
    if parts is not None:
        world = len(parts)
        magnitude = sum(p.double().abs().reshape(-1) for p in parts) * world ** (chain - 1)
        u = torch.finfo(out.dtype if fallback else torch.float32).eps / 2  # the unit roundoff
        bound = bound + (world - 1) * chain * u * magnitude
    bad = (got - ref).abs() > bound
    if bool(bad.any()):
        i = int(bad.nonzero()[0])
        raise AssertionError(f"{what}: {int(bad.sum())} of {got.numel()} elements wrong ({out.dtype}); "
                             f"first at {i}: {got[i].item()!r}, expected {ref[i].item()!r}")


def _same_on_every_rank(out, what):
    """The ranks' results, bit for bit (symmem reduces in rank order with fp32 accumulation)."""
    import torch

    mine = out.detach().cpu().contiguous().view(torch.uint8)
    parts = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, mine)
    if not all(torch.equal(parts[0], p) for p in parts):
        raise AssertionError(f"{what}: ranks differ bitwise")


class CudaGraphs:
    """Captures fn() (a chain of all-reduces) into a CUDA graph on `stream`; replay() reruns it."""

    device = "cuda"

    def sync(self):
        import torch

        torch.cuda.synchronize()

    def capture(self, fn, stream):
        import torch

        with torch.cuda.stream(stream):  # warm-up on the capture stream (allocator, first-use work)
            fn()
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=stream):
            outs = fn()
        return g.replay, outs


class EagerGraphs:
    """The CPU stand-in for CudaGraphs (to check gpu_scenario itself here): replay reruns fn and copies
    into the tensors the "capture" returned, which is what a replay does to a graph's outputs."""

    device = "cpu"

    def sync(self):
        pass

    def capture(self, fn, stream):
        outs = fn()

        def replay():
            for o, n in zip(outs, fn()):
                o.copy_(n)
        return replay, outs


def gpu_scenario(rank, world, reduce, capture, eligible, max_bytes, steps=60, graphs=6, seed=7,
                 runner=None):
    """Drive `reduce(x) -> y` (the framework's all-reduce) against a float64 reference: eager over dtypes
    and sizes (one above the cap, which must leave symmem), then `graphs` CUDA graphs, each capturing a
    different chain of all-reduces, replayed in a random order (the same on every rank) interleaved with
    eager calls, with fresh inputs each time. `capture()` is the framework's graph-capture context manager
    yielding the stream to capture on; `eligible(x)` says whether symmem takes x. Returns counts."""
    import random

    runner = runner or CudaGraphs()
    dev = runner.device
    stats = {"eager": 0, "eager_symmem": 0, "replays": 0, "graph_ops": 0, "eager_between": 0}
    sizes = [1, 7, 1000, 6144, 8 * 6144, 57344, 1 << 18]
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        es = torch.tensor([], dtype=dtype).element_size()
        for n in sizes + [max_bytes // es, max_bytes // es + 1]:
            if n * es > (64 << 20) or n < 1:
                continue
            seed += 1
            parts, ref = _inputs(n, dtype, world, seed)
            x = parts[rank].to(dev)
            took = eligible(x)
            if took != (n * es <= max_bytes):
                raise AssertionError(f"eligibility of {n} x {dtype}: {took}, cap {max_bytes} bytes")
            y = reduce(x)
            runner.sync()
            _check(y, ref, f"eager {n} x {dtype}", parts, fallback=not took)
            if took:
                _same_on_every_rank(y, f"eager {n} x {dtype}")
            stats["eager"] += 1
            stats["eager_symmem"] += int(took)

    # Graphs: graph i holds i % 3 + 1 chained all-reduces of its own size and dtype.
    rng = random.Random(seed)  # same seed on every rank: the same order of collectives everywhere
    plan, captured = [], []
    for i in range(graphs):
        dtype = (torch.bfloat16, torch.float16, torch.float32)[i % 3]
        es = torch.tensor([], dtype=dtype).element_size()
        plan.append((max(1, min(rng.choice(sizes[1:]), max_bytes // es)), dtype, i % 3 + 1))
    with capture() as stream:
        for n, dtype, depth in plan:
            x = torch.zeros(n, dtype=dtype, device=dev)

            def chain(x=x, depth=depth):
                outs, y = [], x
                for _ in range(depth):
                    y = reduce(y)
                    outs.append(y)
                return outs
            replay, outs = runner.capture(chain, stream)
            captured.append((replay, x, outs))
    runner.sync()
    for step in range(steps):
        if rng.random() < 0.3:  # an eager call between replays
            parts, ref = _inputs(rng.choice(sizes[:5]), torch.bfloat16, world, 10_000 + step)
            _check(reduce(parts[rank].to(dev)), ref, f"step {step}: eager", parts)
            stats["eager_between"] += 1
            continue
        i = rng.randrange(len(captured))
        replay, x, outs = captured[i]
        n, dtype, depth = plan[i]
        parts, ref = _inputs(n, dtype, world, 20_000 + step)
        x.copy_(parts[rank])
        replay()
        runner.sync()
        for k, y in enumerate(outs):  # the k-th reduce of the chain: world**k times the first sum
            _check(y, ref * world ** k, f"step {step}: graph {i}, reduce {k + 1} of {depth}", parts, chain=k + 1)
        _same_on_every_rank(outs[-1], f"step {step}: graph {i}")
        stats["replays"] += 1
        stats["graph_ops"] += depth
    return stats


def reduce_or_gloo(comm, check=None):
    """A framework's all-reduce over a drop-in: with `check`, ask it first (SGLang, and this package's
    direct path) and call only when eligible; without, call and take None as "not eligible" (vLLM's
    dispatch). Gloo stands in for the framework's next backend."""
    def reduce(x):
        if check is None or check(x):
            y = comm.all_reduce(x)
            if y is not None:
                return y
            assert check is None, "eligible, yet all_reduce declined"
        y = x.clone()
        dist.all_reduce(y)
        return y
    return reduce


@contextlib.contextmanager
def side_stream_capture():
    """gpu_scenario's capture(): graphs captured on a fresh side stream."""
    import torch

    yield torch.cuda.Stream()


def _scenario_dry_run_body(rank, world, broken):
    """gpu_scenario on CPU with gloo as the all-reduce: checks the scenario's own bookkeeping. Up to the cap
    (96 KiB) gloo stands in for symmem as symmem computes (a sum in fp32, one rounding to the dtype); above
    it, for the framework's fallback (a sum in the dtype)."""
    import contextlib

    cap = 96 << 10

    def reduce(x):
        y = x.to(torch.float32, copy=True) if x.numel() * x.element_size() <= cap else x.clone()
        dist.all_reduce(y)
        y = y.to(x.dtype)
        if broken and rank == 1 and y.numel() == 6144:
            y[0] += 1  # a wrong element on one rank: the reference check must catch it
        return y
    return gpu_scenario(rank, world, reduce, lambda: contextlib.nullcontext(None),
                        lambda x: x.numel() * x.element_size() <= cap, cap, runner=EagerGraphs())


# ----------------------------------------------------------------------------------------------- fakes
class FakeInner:
    """Stands in for symmem's SymmemCommunicator where the test is about the agreement, not the GPU."""
    made = []
    fail_on_rank = None
    max_by_rank = {}

    def __init__(self, group, device, max_size=None):
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self.disabled = self.rank == FakeInner.fail_on_rank
        if self.disabled:
            logging.getLogger("symmem").warning("symmem communicator disabled: SYMMEM_TIMEOUT: rank 1 never came")
        self.max_size = FakeInner.max_by_rank.get(self.rank, 4 << 20)
        # what SymmemCommunicator takes from the library on a PCIe machine
        import symmem

        self.link_class = symmem.LINK_PCIE
        self.preferred_max_size = min(self.max_size, symmem.link_preferred_max_bytes(symmem.LINK_PCIE))
        self.closed = False
        FakeInner.made.append(self)

    def should_torch_symm_mem_allreduce(self, x):
        return True

    should_use_symm_mem = should_torch_symm_mem_allreduce

    def all_reduce(self, x, *, out=None):
        return x

    def close(self):
        self.closed = True


def _plan(**kw):
    base = dict(framework="Test", env_prefix="SYMMEM_TEST", log=logging.getLogger("symmem.integrations.test"),
                mode="replace")
    base.update(kw)
    return _common.Plan(**base)


def _pretend_cuda(monkey_facts=True):
    """Make this rank look like a CUDA rank to step 2 and hand out FakeInner (CPU machine)."""
    _common.load_inner_class = lambda: FakeInner
    if monkey_facts:
        real = _common._local_facts

        def facts(device, plan, world_size):
            f = real(torch.device("cpu"), plan, world_size)
            f["why"] = ""
            if plan.mode == "fallback" and plan.stock_probe:
                f["stock"] = plan.stock_probe(device, world_size) is None
            return f
        _common._local_facts = facts


# ------------------------------------------------------------------------------------------ rank bodies
def _cpu_device_body(rank, world):
    with LogCapture("symmem.integrations.test") as cap:
        out = _common.negotiate(dist.group.WORLD, torch.device("cpu"), _plan())
    return out.backend, out.reason, cap.at_least(logging.INFO), out.world_size


def _hosts_body(rank, world):
    _pretend_cuda()
    if rank == 1:
        _common.host_key = lambda: "another-boot-id|net:[1]"
    out = _common.negotiate(dist.group.WORLD, torch.device("cuda", 0), _plan())
    return out.backend, out.reason, len(FakeInner.made)


def _agreement_body(rank, world, fail_on_rank, max_by_rank, max_bytes):
    _pretend_cuda()
    FakeInner.fail_on_rank, FakeInner.max_by_rank = fail_on_rank, max_by_rank
    with LogCapture("symmem.integrations.test") as cap:
        out = _common.negotiate(dist.group.WORLD, torch.device("cuda", 0), _plan(max_bytes=max_bytes))
    inner_closed = [m.closed for m in FakeInner.made]
    return out.backend, out.max_size, out.reason, inner_closed, cap.at_least(logging.WARNING)


def _gloo_error_body(rank, world):
    def broken(*a, **k):
        raise RuntimeError("[gloo] connection closed by peer")
    dist.all_gather_object = broken
    out = _common.negotiate(dist.group.WORLD, torch.device("cuda", 0), _plan())
    return out.backend, out.reason


class FakeStock:
    def __init__(self, up):
        self.disabled = not up
        self.max_size = 1 << 20
        self.buffer = object()


def _stock_body(rank, world, up_by_rank):
    _pretend_cuda()
    FakeInner.fail_on_rank, FakeInner.max_by_rank = None, {}
    built = []

    def build():
        s = FakeStock(up_by_rank[rank])
        built.append(s)
        return s
    plan = _plan(mode="fallback", stock_probe=lambda d, w: None, stock_build=build)
    out = _common.negotiate(dist.group.WORLD, torch.device("cuda", 0), plan)
    return out.backend, [s.disabled for s in built], [s.buffer is None for s in built], len(FakeInner.made)


def _veto_body(rank, world):
    calls = []
    real = dist.all_gather_object
    dist.all_gather_object = lambda *a, **k: calls.append(1) or real(*a, **k)
    outs = [_common.negotiate(dist.group.WORLD, torch.device("cuda", 0), _plan(veto="group 'pp' is not selected")),
            _common.negotiate(dist.group.WORLD, torch.device("cuda", 0), _plan(mode="off"))]
    return [(o.backend, o.reason) for o in outs], len(calls)


def _out_of_step_body(rank, world):
    return (_common._gather(dist.group.WORLD, world, rank, "symmem-cap" if rank else "symmem-facts"),
            _common._gather(dist.group.WORLD, world, rank * 10, "symmem-cap"))


def _dropin_reason_body(rank, world):
    """Both drop-ins on a CPU device: disabled, each with the reason negotiate gave, as an attribute."""
    from symmem.integrations import sglang, vllm

    os.environ.pop("SYMMEM_SGLANG_GROUPS", None)
    s = sglang.SymmemTorchSymmMemCommunicator(dist.group.WORLD, torch.device("cpu"))
    v = vllm.SymmemSymmMemCommunicator(dist.group.WORLD, torch.device("cpu"))
    return s.disabled, s.disabled_reason, v.disabled, v.disabled_reason


def _world1_body(rank, world):
    with LogCapture("symmem.integrations.test") as cap:
        out = _common.negotiate(dist.group.WORLD, torch.device("cuda", 0), _plan())
    return out.backend, out.reason, cap.at_least(logging.WARNING)


# ----------------------------------------------------------------------------------------------- tests
@pytest.mark.skipif(torch is None, reason="torch is not installed")
class TestNegotiation:
    def test_cpu_device_disables_every_rank_with_one_reason(self):
        res = run_ranks(_cpu_device_body, 2)
        for backend, reason, said, world in res:
            assert (backend, world) == ("off", 2)
            assert "rank 0: device cpu is not a CUDA device" in reason
        assert len(res[0][2]) == 1, res[0][2]       # rank 0 says it once
        assert "disabled" in res[0][2][0]
        assert res[1][2] == []                      # the others only at DEBUG

    def test_drop_ins_say_why_they_are_disabled(self):
        for s_off, s_reason, v_off, v_reason in run_ranks(_dropin_reason_body, 2):
            assert s_off and v_off
            # the world group has no SGLang name, so it is not the default "tp"
            assert s_reason == "group '?' is not in SYMMEM_SGLANG_GROUPS (tp)"
            assert "rank 0: device cpu is not a CUDA device" in v_reason

    def test_world_size_one(self):
        backend, reason, warnings = run_ranks(_world1_body, 1)[0]
        assert (backend, reason, warnings) == ("off", "world size 1", [])

    def test_group_spanning_hosts_never_builds_a_communicator(self):
        for backend, reason, made in run_ranks(_hosts_body, 2):
            assert backend == "off"
            assert "spans hosts (ranks 1" in reason
            assert made == 0, "a communicator was built although the group spans hosts"

    def test_one_rank_failing_disables_all_and_names_it(self):
        res = run_ranks(_agreement_body, 2, 1, {}, None)
        for backend, max_size, reason, closed, _ in res:
            assert (backend, max_size) == ("off", 0)
            assert "rank 1: symmem init failed: symmem communicator disabled: SYMMEM_TIMEOUT" in reason
        assert res[0][3] == [True], "rank 0's communicator must be closed when rank 1 failed"
        assert len(res[0][4]) == 1

    def test_ranks_agree_on_the_smallest_cap(self):
        # PCIe: the library's bound (512 KiB) within each rank's workspace limit, the smallest over ranks.
        res = run_ranks(_agreement_body, 2, None, {0: 4 << 20, 1: 256 << 10}, None)
        assert [r[:2] for r in res] == [("symmem", 256 << 10)] * 2
        res = run_ranks(_agreement_body, 2, None, {0: 4 << 20, 1: 4 << 20}, None)
        assert [r[:2] for r in res] == [("symmem", 512 << 10)] * 2
        # An explicit cap beats the link default, never the library's own limit.
        res = run_ranks(_agreement_body, 2, None, {0: 4 << 20, 1: 2 << 20}, 3 << 20)
        assert [r[:2] for r in res] == [("symmem", 2 << 20)] * 2
        res = run_ranks(_agreement_body, 2, None, {}, 0)
        assert [r[0] for r in res] == ["off"] * 2
        assert "SYMMEM_TEST_MAX_BYTES" in res[0][2]

    def test_gloo_error_disables_without_raising(self):
        for backend, reason in run_ranks(_gloo_error_body, 2):
            assert backend == "off"
            assert "all_gather_object failed" in reason

    def test_fallback_keeps_torch_only_where_it_came_up_everywhere(self):
        res = run_ranks(_stock_body, 2, {0: True, 1: True})
        assert res == [("torch", [False], [False], 0)] * 2
        res = run_ranks(_stock_body, 2, {0: True, 1: False})
        assert [r[0] for r in res] == ["symmem", "symmem"]
        assert res[0][1:3] == ([True], [True]), "rank 0's torch communicator must be switched off"
        assert [r[3] for r in res] == [1, 1]

    def test_gpu_scenario_dry_run_on_cpu(self):
        stats = run_ranks(_scenario_dry_run_body, 2, False)
        assert stats[0] == stats[1]
        assert stats[0]["replays"] > 20
        assert stats[0]["eager_symmem"] > 10
        with pytest.raises(AssertionError, match="1 of 6144 elements wrong"):
            run_ranks(_scenario_dry_run_body, 2, True)

    def test_gpu_scenario_fallback_bound_at_sixteen_ranks(self):
        """Sizes above the cap go to the framework's fallback (gloo), which sums in the dtype: at 16 ranks its
        bf16 error is several times symmem's bound, and the scenario must hold it to the bound of such a sum,
        not fail the framework for it (nor loosen the bound of what symmem computed)."""
        stats = run_ranks(_scenario_dry_run_body, 16, False, timeout=300)
        assert len({str(s) for s in stats}) == 1
        assert stats[0]["eager"] > stats[0]["eager_symmem"]  # the fallback ran

    def test_ranks_out_of_step_read_nothing(self):
        assert run_ranks(_out_of_step_body, 2) == [(None, [0, 10]), (None, [0, 10])]

    def test_consistent_vetoes_make_no_collective(self):
        outs, gathers = run_ranks(_veto_body, 2)[0]
        assert outs == [("off", "group 'pp' is not selected"), ("off", "SYMMEM_TEST_MODE=off")]
        assert gathers == 0


def _symmem_location(q):
    try:
        import symmem
        q.put((0, os.path.dirname(os.path.abspath(symmem.__file__))))
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        q.put((0, f"{type(e).__name__}: {e}"))


class TestSpawnedRanks:
    def test_a_spawned_rank_imports_the_symmem_the_tests_imported_first(self):
        """GPU rank processes are spawned (CUDA is not fork-safe) and start from their parent's sys.path. The
        GPU tests import symmem first and these helpers later (pytest collects test_torch_gpu.py before the
        test_integrations_gpu files): importing the helpers must not put another symmem (the source tree's,
        which has no libsymmem beside it) ahead of the one already imported, or every rank dies at import."""
        import subprocess
        import sys
        here = os.path.dirname(os.path.abspath(__file__))
        code = textwrap.dedent(f"""
            import multiprocessing as mp, os, sys
            sys.path.insert(0, {here!r})
            import symmem
            first = os.path.dirname(os.path.abspath(symmem.__file__))
            import rank_harness, test_integrations_common as t
            ctx = mp.get_context("spawn")
            q = ctx.Queue()
            p = ctx.Process(target=t._symmem_location, args=(q,))
            p.start()
            got, errors = rank_harness.collect([p], q, 120, None, what="spawned process")
            rank_harness.stop([p])
            print("RESULT", first, "|", got[0][1] if 0 in got else errors)
        """)
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                           cwd=tempfile.gettempdir())
        line = [x for x in r.stdout.splitlines() if x.startswith("RESULT ")]
        assert line, r.stdout[-2000:] + r.stderr[-3000:]
        first, child = line[-1][len("RESULT "):].split(" | ", 1)
        assert child == first, r.stderr[-3000:]


def _host_comm_body(rank, world):
    """symmem's own communicator over the group's gloo allgather, as SymmemCommunicator makes it (its
    bootstrap: the unique id through all_gather_object, then the library's socket mesh), on the host backend:
    init, a symmetric allocation every rank writes, every peer's part read back, teardown."""
    import ctypes

    import symmem

    def allgather(data):
        out = [None] * world
        dist.all_gather_object(out, data)
        return out
    comm = symmem.Comm(world, rank, allgather=allgather, backend=symmem.BACKEND_HOST, timeout_ms=60000)
    size = comm.size
    buf = comm.alloc(65536)
    ctypes.memset(buf.ptr, rank + 1, buf.size)
    dist.barrier()
    seen = [ctypes.string_at(buf.peer_ptr(p), buf.size) == bytes([p + 1]) * buf.size for p in range(world)]
    dist.barrier()  # nobody frees its part while a peer may still read it
    buf.free()
    comm.destroy()
    return size, seen


# Sixteen ranks (SYMMEM_MAX_RANKS; hosts with 16 PCIe GPUs): the drop-ins' negotiation and symmem's own
# bootstrap at the largest world size, in forked processes over gloo (a few seconds per test on two cores).
SIXTEEN = 16


@pytest.mark.skipif(torch is None, reason="torch is not installed")
class TestSixteenRanks:
    def test_every_rank_serves_and_agrees_on_the_smallest_cap(self):
        caps = {r: 4 << 20 for r in range(SIXTEEN)}
        caps[13] = 256 << 10
        res = run_ranks(_agreement_body, SIXTEEN, None, caps, None, timeout=180)
        assert [r[:2] for r in res] == [("symmem", 256 << 10)] * SIXTEEN
        assert [r[3] for r in res] == [[False]] * SIXTEEN, "a serving rank's communicator was closed"

    def test_one_rank_failing_disables_all_sixteen_and_names_it(self):
        res = run_ranks(_agreement_body, SIXTEEN, 11, {}, None, timeout=180)
        for rank, (backend, max_size, reason, closed, _) in enumerate(res):
            assert (backend, max_size) == ("off", 0), f"rank {rank}"
            assert "rank 11: symmem init failed: symmem communicator disabled: SYMMEM_TIMEOUT" in reason
            assert closed == [True], f"rank {rank}'s communicator must be closed when rank 11 failed"
        assert len(res[0][4]) == 1, "rank 0 says it once"
        assert [len(r[4]) for r in res[1:]] == [0] * (SIXTEEN - 1), "the other ranks stay quiet"

    def test_fallback_keeps_torch_only_where_all_sixteen_have_it(self):
        up = {r: r != 7 for r in range(SIXTEEN)}
        res = run_ranks(_stock_body, SIXTEEN, up, timeout=180)
        assert [r[0] for r in res] == ["symmem"] * SIXTEEN
        assert [r[3] for r in res] == [1] * SIXTEEN
        res = run_ranks(_stock_body, SIXTEEN, {r: True for r in range(SIXTEEN)}, timeout=180)
        assert res == [("torch", [False], [False], 0)] * SIXTEEN

    def test_ranks_out_of_step_read_nothing(self):
        want = (None, [10 * r for r in range(SIXTEEN)])
        assert run_ranks(_out_of_step_body, SIXTEEN, timeout=180) == [want] * SIXTEEN

    def test_host_backend_communicator_over_gloo(self):
        for size, seen in run_ranks(_host_comm_body, SIXTEEN, timeout=180):
            assert (size, seen) == (SIXTEEN, [True] * SIXTEEN)


class TestHelpers:
    def test_parse_bytes(self):
        for text, value in (("65536", 65536), ("512K", 512 << 10), ("512KiB", 512 << 10), ("4m", 4 << 20),
                            ("1G", 1 << 30), ("0x1000", 4096), ("0", 0)):
            assert _common.parse_bytes(text) == value, text
        for bad in ("", "K", "1.5M", "-1", "ten"):
            with pytest.raises(ValueError):
                _common.parse_bytes(bad)

    def test_env_mode_and_bytes(self):
        log = logging.getLogger("symmem.integrations.test")
        os.environ["SYMMEM_TEST_MODE"] = "Replace"
        assert _common.env_mode("SYMMEM_TEST_MODE") == "replace"
        os.environ["SYMMEM_TEST_MODE"] = "bogus"
        with LogCapture("symmem.integrations") as cap:
            assert _common.env_mode("SYMMEM_TEST_MODE") == "fallback"
        assert any("bogus" in m for m in cap.at_least(logging.WARNING))
        del os.environ["SYMMEM_TEST_MODE"]
        os.environ["SYMMEM_TEST_MAX_BYTES"] = "lots"
        with LogCapture("symmem.integrations.test") as cap:
            assert _common.env_bytes("SYMMEM_TEST_MAX_BYTES", log) is None
        assert len(cap.at_least(logging.WARNING)) == 1
        os.environ["SYMMEM_TEST_MAX_BYTES"] = "96K"
        assert _common.env_bytes("SYMMEM_TEST_MAX_BYTES", log) == 96 << 10
        del os.environ["SYMMEM_TEST_MAX_BYTES"]

    def test_group_label(self):
        class G:
            def __init__(self, desc):
                self.group_desc = desc
        assert _common.group_label(G("tp:cpu")) == "tp"
        assert _common.group_label(G("moe_ep:cpu")) == "moe_ep"
        assert _common.group_label(G("undefined")) == ""
        assert _common.group_label(object()) == ""

    def test_host_key_is_stable_and_names_the_network_namespace(self):
        key = _common.host_key()
        assert key == _common.host_key()
        if os.path.exists("/proc/self/ns/net"):
            assert os.readlink("/proc/self/ns/net") in key

    def test_scanner_follows_names_parameters_and_returns(self):
        src = textwrap.dedent('''
            def helper(comm, n):
                return comm.buffer[:n]
            def pick(group):
                comm = group.holder
                if comm is None or comm.disabled:
                    return None
                return comm
            def user(group):
                c = pick(group)
                helper(c, 3)
                x = getattr(c, "dtype", None)
                return group.holder.world_size + c.max_size
            class K:
                def m(self):
                    h = self.holder
                    h.all_reduce(1)
                    self.other.not_this = 1
        ''')
        reads = _scan_tree(ast.parse(src), "holder")
        assert set(reads) == {"buffer", "disabled", "dtype", "world_size", "max_size", "all_reduce"}


class TestPostImportHook:
    def setup_method(self):
        self.tmp = tempfile.TemporaryDirectory()
        sys.path.insert(0, self.tmp.name)

    def teardown_method(self):
        sys.path.remove(self.tmp.name)
        self.tmp.cleanup()

    def _module(self, name, body):
        Path(self.tmp.name, f"{name}.py").write_text(textwrap.dedent(body))

    def test_callback_runs_after_the_code_and_before_the_importer(self):
        self._module("symmem_hook_a", "VALUE = 1\ndef f():\n    return 'original'\n")
        seen = []

        def patch(module):
            seen.append(module.VALUE)
            module.f = lambda: "patched"
        _imphook.when_imported("symmem_hook_a", patch)
        assert _imphook.pending("symmem_hook_a")
        from symmem_hook_a import f  # noqa: E402 - the importer's binding must already be the patch
        assert (seen, f()) == ([1], "patched")
        assert not _imphook.pending("symmem_hook_a")
        import symmem_hook_a
        assert "VALUE = 1" in __import__("inspect").getsource(symmem_hook_a)  # loader still works

    def test_already_imported_runs_now_and_failures_stay_contained(self):
        self._module("symmem_hook_b", "X = 2\n")
        import symmem_hook_b  # noqa: F401
        seen = []
        _imphook.when_imported("symmem_hook_b", lambda m: seen.append(m.X))
        assert seen == [2]
        self._module("symmem_hook_c", "Y = 3\n")

        def boom(module):
            raise RuntimeError("patch failed")
        with LogCapture("symmem.integrations") as cap:
            _imphook.when_imported("symmem_hook_c", boom)
            import symmem_hook_c
        assert symmem_hook_c.Y == 3
        assert any("post-import hook for symmem_hook_c failed" in m for m in cap.at_least(logging.WARNING))

    def test_one_finder_shared_with_a_copy_loaded_by_path(self):
        import importlib.util
        spec = importlib.util.spec_from_file_location("_symmem_imphook_copy", _imphook.__file__)
        copy = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(copy)
        self._module("symmem_hook_d", "Z = 4\n")
        seen = []
        copy.when_imported("symmem_hook_d", lambda m: seen.append("copy"))
        _imphook.when_imported("symmem_hook_d", lambda m: seen.append("package"))
        assert sum(1 for f in sys.meta_path if getattr(f, _imphook._MARK, False)) == 1
        import symmem_hook_d  # noqa: F401
        assert seen == ["copy", "package"]


def _symmem_inner(max_size):
    """symmem's real SymmemCommunicator with no GPU behind it: its checks run, its ops run their fakes."""
    from symmem.torch import _comm

    inner = _comm.SymmemCommunicator.__new__(_comm.SymmemCommunicator)
    inner.__dict__.update(disabled=False, group=None, world_size=2, rank=0, device=torch.device("cuda", 0),
                          max_size=max_size, comm=None, group_name="fake-direct")
    inner._init_state()
    return inner


@pytest.mark.skipif(torch is None, reason="torch is not installed")
class TestDropInsServeDirectly:
    """Where symmem serves the group, the frameworks' per-call checks run once (host cost of every eager
    all-reduce): SGLang's methods are the inner communicator's own, vLLM keeps its micro-batch guard, and in
    both the inner enforces the agreed cap, which is smaller than its own here."""
    CAP = 512 << 10

    def _drop_in(self, cls, **extra):
        ours = cls.__new__(cls)
        ours.__dict__.update(disabled=True, backend="off", _stock=None, _inner=None, device=torch.device("cuda", 0),
                             group=None, rank=0, **extra)
        inner = _symmem_inner(64 << 20)
        ours._adopt(_common.Outcome(backend="symmem", inner=inner, max_size=self.CAP, world_size=2))
        return ours, inner

    def _serves(self, ours, should):
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode():
            at_cap = torch.empty(self.CAP // 2, device="cuda", dtype=torch.bfloat16)
            past = torch.empty(self.CAP // 2 + 1, device="cuda", dtype=torch.bfloat16)
            f64 = torch.empty(8, device="cuda", dtype=torch.float64)
            rows = torch.empty(4, 1024, device="cuda", dtype=torch.bfloat16)
            got = {
                "eligible": [getattr(ours, should)(t) for t in (at_cap, past, f64)],
                "past the cap": ours.all_reduce(past),
                "new": tuple(ours.all_reduce(at_cap).shape),
                "in place": ours.all_reduce(at_cap, out=at_cap) is at_cap,
                "fused": ours.should_all_reduce_add_rmsnorm(rows),
                "fused past the cap": ours.should_all_reduce_add_rmsnorm(past.view(1, -1)),
            }
        return got, at_cap

    def _expect(self, got):
        assert got == {"eligible": [True, False, False], "past the cap": None, "new": (self.CAP // 2,),
                       "in place": True, "fused": True, "fused past the cap": False}

    def _closed(self, ours, should, t):
        ours.close()
        assert (getattr(ours, should)(t), ours.all_reduce(t)) == (False, None)

    def test_sglang_calls_reach_the_communicator_without_a_wrapper(self):
        from symmem.integrations import sglang

        ours, inner = self._drop_in(sglang.SymmemTorchSymmMemCommunicator)
        got, t = self._serves(ours, "should_torch_symm_mem_allreduce")
        self._expect(got)
        assert inner.max_size == self.CAP
        for name in ("should_torch_symm_mem_allreduce", "all_reduce", "all_reduce_add_rmsnorm"):
            assert getattr(ours, name).__self__ is inner, name
        self._closed(ours, "should_torch_symm_mem_allreduce", t)

    def _vllm_drop_in(self, registry):
        """vLLM's drop-in, with `registry` as vLLM's table of micro-batch threads (None: no such table)."""
        from symmem.integrations import vllm

        real = vllm._ubatch_threads
        vllm._ubatch_threads = lambda: registry
        try:
            ours, inner = self._drop_in(vllm.SymmemSymmMemCommunicator, _ubatch=None)
        finally:
            vllm._ubatch_threads = real
        got, t = self._serves(ours, "should_use_symm_mem")
        self._expect(got)
        return ours, inner, t

    def test_vllm_keeps_its_micro_batch_guard(self):
        threads = {}  # vLLM's registry of micro-batch threads: non-empty while DBO runs
        ours, inner, t = self._vllm_drop_in(threads)
        assert inner.max_size == self.CAP
        threads[1] = object()
        assert (ours.should_use_symm_mem(t), ours.all_reduce(t)) == (False, None)
        threads.clear()
        assert ours.should_use_symm_mem(t)
        self._closed(ours, "should_use_symm_mem", t)

    def test_vllm_without_micro_batches_is_direct(self):
        ours, inner, t = self._vllm_drop_in(None)
        assert ours.all_reduce.__self__ is inner
        self._closed(ours, "should_use_symm_mem", t)


def _drop_in_gpu_body(rank, world, devices, framework):
    """One rank of a drop-in (SGLang's or vLLM's class, without the framework: replace mode) that symmem
    serves on the GPU, driven as the framework does (ask, then call; over the cap, gloo stands in for the
    next backend) through gpu_scenario."""
    torch.cuda.set_device(devices[rank])
    env = "SYMMEM_" + framework.upper()
    os.environ.update({f"{env}_MODE": "replace", f"{env}_GROUPS": "all", f"{env}_MAX_BYTES": "512K"})
    if framework == "sglang":
        from symmem.integrations.sglang import SymmemTorchSymmMemCommunicator as cls
        should = "should_torch_symm_mem_allreduce"
    else:
        from symmem.integrations.vllm import SymmemSymmMemCommunicator as cls
        should = "should_use_symm_mem"
    comm = cls(dist.group.WORLD, torch.device("cuda", devices[rank]))
    assert comm.backend == "symmem" and not comm.disabled, f"symmem does not serve the group: {comm.backend}"
    check = getattr(comm, should)

    stats = gpu_scenario(rank, world, reduce_or_gloo(comm, check), side_stream_capture, check, comm.max_size)
    dist.barrier()
    direct = getattr(comm.all_reduce, "__self__", None) is comm._inner
    comm.close()
    return dict(stats, max_size=comm.max_size, direct=direct)


@pytest.mark.skipif(torch is None or not torch.cuda.is_available(), reason="needs CUDA")
class TestDropInsOnGPU:
    """The drop-ins' direct path on a GPU, without SGLang or vLLM installed (their own GPU tests,
    test_integrations_gpu_*.py, need the frameworks): eager calls over dtypes and sizes across the agreed cap
    and replayed CUDA graphs, against a float64 reference and bitwise equal across ranks."""

    def _run(self, framework):
        world, devices = gpu_ranks_and_devices()
        res = run_ranks(_drop_in_gpu_body, world, devices, framework, context="spawn", timeout=580)
        print(f"\n{framework} drop-in over symmem, {world} ranks on GPUs {devices}: {res[0]}")
        assert all(r["eager_symmem"] > 0 and r["replays"] > 0 and r["max_size"] == 512 << 10
                   for r in res), res
        return res

    def test_sglang_drop_in(self):
        assert all(r["direct"] for r in self._run("sglang"))

    def test_vllm_drop_in(self):
        self._run("vllm")

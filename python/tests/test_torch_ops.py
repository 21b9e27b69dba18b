"""torch.ops.symmem on a machine without a GPU: schemas, the op library in use, fakes under FakeTensorMode
with "cuda" fake tensors, make_fx / torch._dynamo.export / torch.compile(fullgraph=True) keeping the ops in
one graph (through SymmemCommunicator too), argument errors, and the watchdog's error handling."""
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

import symmem  # noqa: E402
import symmem.torch as st  # noqa: E402
from symmem.torch import _comm, _ops  # noqa: E402

OPS = ("all_reduce", "all_reduce_", "all_reduce_out", "reduce_scatter_out", "all_gather_out", "barrier")
RMSNORM_OPS = ("all_reduce_add_rmsnorm", "all_reduce_add_rmsnorm_out", "all_reduce_add_rmsnorm_")


def test_schemas():
    assert set(_ops.SCHEMAS) == set(OPS + RMSNORM_OPS)
    for name in OPS + RMSNORM_OPS:
        schema = str(getattr(torch.ops.symmem, name).default._schema)
        assert schema == "symmem::" + _ops.SCHEMAS[name], schema


def test_op_library_in_use():
    want = os.environ.get("SYMMEM_EXPECT_OP_LIBRARY")
    if want is None:
        pytest.skip("SYMMEM_EXPECT_OP_LIBRARY not set (scripts/test_python.sh sets it)")
    lib = st.op_library()
    if want == "1":
        assert lib is not None, "the op library was not built or not found: symmem.torch uses the ctypes ops"
        assert os.path.dirname(lib) == os.path.dirname(symmem.library_path()), lib
    else:
        assert lib is None


@pytest.fixture
def fake():
    with FakeTensorMode() as mode:
        yield mode


@pytest.fixture
def host_group():
    """A registered 2-rank group (host backend, no GPU): the fakes then know its world size."""
    comms = symmem.Comm.init_all(2, backend=symmem.BACKEND_HOST)
    name = "test-host-2"
    assert _ops.register_group(name, comms[0])
    assert not _ops.register_group(name, comms[1]), "a taken name was registered twice"
    yield name
    _ops.unregister_group(name)
    for c in comms:
        c.destroy()


def cuda(*shape, dtype=torch.bfloat16):
    return torch.empty(*shape, device="cuda", dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_fakes(fake, host_group, dtype):
    g = host_group
    x = cuda(6, 10, dtype=dtype)
    y = torch.ops.symmem.all_reduce(x, "sum", g)
    assert y.shape == x.shape and y.dtype == dtype and y.device.type == "cuda" and y.is_contiguous()
    assert torch.ops.symmem.all_reduce_(x, "max", g) is None
    out = torch.empty_like(x)
    assert torch.ops.symmem.all_reduce_out(x, "min", g, out) is None
    torch.ops.symmem.reduce_scatter_out(x, "sum", g, cuda(3, 10, dtype=dtype))
    torch.ops.symmem.all_gather_out(x, g, cuda(12, 10, dtype=dtype))
    assert torch.ops.symmem.barrier(g) is None


@pytest.mark.parametrize("call,match", [
    (lambda g: torch.ops.symmem.all_reduce(cuda(4, dtype=torch.float64), "sum", g), "has dtype float64"),
    (lambda g: torch.ops.symmem.all_reduce(cuda(4), "prod", g), "reduce_op 'prod'"),
    (lambda g: torch.ops.symmem.all_reduce(cuda(4, 4).t(), "sum", g), "not contiguous"),
    (lambda g: torch.ops.symmem.all_reduce(torch.empty(4), "sum", g), "not a CUDA tensor"),
    (lambda g: torch.ops.symmem.all_reduce_out(cuda(4), "sum", g, cuda(5)), r"out has shape \[5\]"),
    (lambda g: torch.ops.symmem.all_reduce_out(cuda(4), "sum", g, cuda(4, dtype=torch.float32)), "out has dtype"),
    (lambda g: torch.ops.symmem.reduce_scatter_out(cuda(6, 2), "sum", g, cuda(2, 2)), "world_size"),
    (lambda g: torch.ops.symmem.reduce_scatter_out(cuda(5), "sum", g, cuda(2)), "cannot be split"),
    (lambda g: torch.ops.symmem.all_gather_out(cuda(3, 2), g, cuda(3, 2)), r"input.shape\[0\] \* world_size"),
    (lambda g: torch.ops.symmem.all_gather_out(cuda(3, 2), g, cuda(6, 3)), "other dims equal"),
])
def test_fake_argument_errors(fake, host_group, call, match):
    with pytest.raises(RuntimeError, match=match):
        call(host_group)


def test_unregistered_group_is_an_error():
    # barrier has no tensor argument, so it runs its real kernel here: the registry lookup fails first.
    with pytest.raises(RuntimeError, match="group 'no-such-group' is not registered"):
        torch.ops.symmem.barrier("no-such-group")


def _program(g):
    def f(x, o):
        y = torch.ops.symmem.all_reduce(x * 2, "sum", g)
        torch.ops.symmem.all_reduce_(y, "max", g)
        torch.ops.symmem.all_reduce_out(y, "min", g, o)
        z = torch.empty(2 * o.shape[0], *o.shape[1:], device=o.device, dtype=o.dtype)
        torch.ops.symmem.all_gather_out(o, g, z)
        torch.ops.symmem.reduce_scatter_out(z, "sum", g, o)
        torch.ops.symmem.barrier(g)
        return o + 1
    return f


def _targets(gm):
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]


def _count(gm, name):
    return sum(1 for t in _targets(gm) if t in (f"symmem.{name}", f"symmem.{name}.default"))


def test_make_fx(fake, host_group):
    f = _program(host_group)
    gm = make_fx(f, tracing_mode="fake")(cuda(8, 16), cuda(8, 16))
    for name in OPS:
        assert _count(gm, name) == 1, (name, _targets(gm))


def test_dynamo_export(host_group):
    with FakeTensorMode():
        x, o = cuda(8, 16), cuda(8, 16)
    ex = torch._dynamo.export(_program(host_group))(x, o)
    for name in OPS:
        assert _count(ex.graph_module, name) == 1, (name, _targets(ex.graph_module))


def test_compile_fullgraph_functionalized(host_group):
    """torch.compile(fullgraph=True) through AOTAutograd: the mutating ops are functionalized (which needs
    them to return nothing), nothing is dropped, the barrier stays (it is marked side-effecting)."""
    from torch._dynamo.backends.common import aot_autograd

    graphs = []

    def capture(gm, inputs):
        graphs.append(gm)
        return gm

    torch._dynamo.reset()
    f = torch.compile(_program(host_group), fullgraph=True, backend=aot_autograd(fw_compiler=capture))
    with FakeTensorMode():
        r = f(cuda(8, 16), cuda(8, 16))
    assert r.shape == (8, 16)
    code = graphs[0].code
    for name in OPS:
        assert f"symmem.{name}.default" in code, (name, code)


class _TracedCommunicator(_comm.SymmemCommunicator):
    """A SymmemCommunicator as an enabled one looks from Python, with no GPU behind it: what Dynamo
    traces through is the real class's code."""

    def __init__(self, name, world_size=2):
        self.disabled = False
        self.group = None
        self.world_size, self.rank = world_size, 0
        self.device = torch.device("cuda", 0)
        self.max_size = 1 << 20
        self.comm = None
        self.group_name = name
        self._init_state()


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_compile_through_the_communicator(host_group, dynamic):
    """dynamic: symbolic sizes, as torch.compile uses after a second shape; the eligibility check must trace
    with them (Tensor.nbytes, for one, cannot: it needs a concrete numel)."""
    comm = _TracedCommunicator(host_group)
    graphs = []

    def backend(gm, inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    f = torch.compile(lambda t: comm.all_reduce(t * 2) + 1, fullgraph=True, backend=backend, dynamic=dynamic)
    g = torch.compile(lambda t, o: comm.all_reduce(t, out=o) * 3 + comm.reduce_scatter(t).sum(), fullgraph=True,
                      backend=backend, dynamic=dynamic)
    with FakeTensorMode():
        x = cuda(64, 32)
        assert f(x).shape == x.shape
        assert g(x, torch.empty_like(x)).shape == x.shape
    assert _count(graphs[0], "all_reduce") == 1
    assert _count(graphs[1], "all_reduce_out") == 1 and _count(graphs[1], "reduce_scatter_out") == 1


def test_communicator_eligibility(fake):
    comm = _TracedCommunicator("elig")
    assert comm.should_torch_symm_mem_allreduce(cuda(1024))
    assert comm.should_use_symm_mem(cuda(1024, dtype=torch.float32))
    assert not comm.should_torch_symm_mem_allreduce(cuda(1024, dtype=torch.int32))
    assert not comm.should_torch_symm_mem_allreduce(cuda(64, 64).t())
    assert not comm.should_torch_symm_mem_allreduce(cuda((1 << 19) + 1))  # 1 MiB + 2 bytes
    assert comm.all_reduce(cuda(16, dtype=torch.float64)) is None      # vLLM's "not eligible"
    comm.disabled = True
    assert not comm.should_torch_symm_mem_allreduce(cuda(8))


def test_constructor_never_raises(caplog):
    class NotAGroup:
        pass

    c = st.SymmemCommunicator(NotAGroup(), "cuda:0")
    assert c.disabled and c.comm is None
    assert "disabled" in caplog.text
    assert c.disabled_reason and c.disabled_reason in caplog.text and c.disabled_reason in repr(c)
    c.close()
    c.close()  # idempotent


def test_disabled_reason_carries_the_allgather_cause(monkeypatch):
    """The CPU group's all_gather_object fails (torch without numpy raises this): the communicator disables
    itself and disabled_reason names that cause in its first line, not only "the allgather failed"."""
    import torch.distributed as dist

    def all_gather_object(out, obj, group=None):
        raise RuntimeError("Numpy is not available")

    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 2)
    monkeypatch.setattr(dist, "get_rank", lambda group=None: 0)
    monkeypatch.setattr(dist, "all_gather_object", all_gather_object)
    c = st.SymmemCommunicator(object(), torch.device("cuda", 0))
    assert c.disabled and c.comm is None
    first = c.disabled_reason.splitlines()[0]
    assert "the allgather callback raised RuntimeError: Numpy is not available on rank 0 of 2" in first, first


def test_disabled_reason_of_a_one_rank_group(monkeypatch):
    import torch.distributed as dist

    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 1)
    monkeypatch.setattr(dist, "get_rank", lambda group=None: 0)
    c = st.SymmemCommunicator(object(), torch.device("cuda", 0))
    assert c.disabled and c.disabled_reason == "world size 1"


CPU_CALLS = {
    "all_reduce": lambda g, t: torch.ops.symmem.all_reduce(t(4), "sum", g),
    "all_reduce_": lambda g, t: torch.ops.symmem.all_reduce_(t(4), "sum", g),
    "all_reduce_out": lambda g, t: torch.ops.symmem.all_reduce_out(t(4), "sum", g, t(4)),
    "reduce_scatter_out": lambda g, t: torch.ops.symmem.reduce_scatter_out(t(4), "sum", g, t(2)),
    "all_gather_out": lambda g, t: torch.ops.symmem.all_gather_out(t(2), g, t(4)),
    "all_reduce_add_rmsnorm": lambda g, t: torch.ops.symmem.all_reduce_add_rmsnorm(t(2, 4), t(2, 4), t(4), 1e-6, g),
    "all_reduce_add_rmsnorm_out": lambda g, t: torch.ops.symmem.all_reduce_add_rmsnorm_out(t(2, 4), t(2, 4), t(4),
                                                                                           1e-6, g, t(2, 4)),
    "all_reduce_add_rmsnorm_": lambda g, t: torch.ops.symmem.all_reduce_add_rmsnorm_(t(2, 4), t(2, 4), t(4), 1e-6, g),
}


@pytest.mark.parametrize("op", sorted(CPU_CALLS))
def test_cpu_tensors_raise_naming_the_op_and_group(host_group, op):
    """A CPU tensor gets a RuntimeError naming the op and the group (as a meta tensor does through the fakes),
    not the dispatcher's NotImplementedError listing every backend."""
    with pytest.raises(RuntimeError) as info:
        CPU_CALLS[op](host_group, lambda *shape: torch.zeros(*shape, dtype=torch.bfloat16))
    assert not isinstance(info.value, NotImplementedError), str(info.value)[:300]
    first = str(info.value).splitlines()[0]
    assert f"symmem::{op} (group '{host_group}'" in first and "is not a CUDA tensor" in first, first


def test_mem_pool_refused_for_ranks_sharing_a_gpu_in_one_process():
    """Ranks that are threads on one GPU would deadlock in the caching allocator's per-GPU lock (the pool's
    allocation is collective): get_mem_pool says so instead, before touching the op library."""
    c = _comm.SymmemCommunicator.__new__(_comm.SymmemCommunicator)
    c.group_name, c.rank, c.world_size, c.device, c.comm, c.disabled = "coloc", 0, 3, torch.device("cuda", 0), None, False
    c._init_state()
    assert c._colocated == ()
    c._colocated = (1, 2)
    with pytest.raises(RuntimeError, match=r"rank 0 shares cuda:0 with rank\(s\) 1, 2 of this process"):
        st.get_mem_pool(c)
    assert c._pool is None
    from symmem.torch import _memory
    assert _memory._allocator_releases_lock("expandable_segments:True,release_lock_on_cudamalloc:True")
    assert not _memory._allocator_releases_lock("release_lock_on_cudamalloc:False")
    assert not _memory._allocator_releases_lock("expandable_segments:True")


def test_communicators_in_process_mark_ranks_that_share_a_gpu(monkeypatch):
    """communicators_in_process fills _colocated: the other ranks of this process on the same device."""
    class FakeComm:
        def __init__(self, rank, device):
            self.size, self.rank, self.device, self.max_message_bytes = 4, rank, device, 1 << 20
            self.preferred_max_bytes, self.link_class = 1 << 20, symmem.LINK_NVLINK

    made = {}

    def init_all(nranks, devices=None, timeout_ms=0):
        made["devices"] = devices
        return [FakeComm(r, d) for r, d in enumerate(devices)]

    class NoWatchdog:
        def add(self, c):
            pass

    monkeypatch.setattr(symmem.Comm, "init_all", staticmethod(init_all))
    monkeypatch.setattr(_ops, "register_group", lambda name, comm: True)
    monkeypatch.setattr(_comm, "watchdog", lambda: NoWatchdog())
    comms = st.communicators_in_process(4, devices=[0, 1, 0, 0])
    assert made["devices"] == [0, 1, 0, 0]
    assert [c._colocated for c in comms] == [(2, 3), (), (0, 3), (0, 2)]
    for c in comms:
        _comm._live.discard(c)


def test_torch_comm_alias():
    from symmem.torch_comm import SymmemCommunicator
    assert SymmemCommunicator is st.SymmemCommunicator


# ---------------------------------------------------------------------------------------------------------
# all_reduce_add_rmsnorm: fakes, argument errors, tracing, functionalization, the communicator's method.
# ---------------------------------------------------------------------------------------------------------
def test_rmsnorm_limit_matches_the_header():
    header = Path(__file__).resolve().parents[2] / "include" / "symmem" / "symmem.h"
    if not header.is_file():
        pytest.skip(f"{header} not found (tests run outside the source tree)")
    m = re.search(r"#define SYMMEM_RMSNORM_MAX_HIDDEN (\d+)", header.read_text())
    assert m and int(m.group(1)) == symmem.RMSNORM_MAX_HIDDEN


def _rms_args(tokens=5, hidden=4096, dtype=torch.bfloat16):
    return cuda(tokens, hidden, dtype=dtype), cuda(tokens, hidden, dtype=dtype), cuda(hidden, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("shape", [(1, 1), (7, 4097), (257, 16384), (0, 64), (2, 3, 7168), (4096,)])
def test_rmsnorm_fakes(fake, host_group, dtype, shape):
    g = host_group
    x, r, w = cuda(*shape, dtype=dtype), cuda(*shape, dtype=dtype), cuda(shape[-1], dtype=dtype)
    y = torch.ops.symmem.all_reduce_add_rmsnorm(x, r, w, 1e-6, g)
    assert y.shape == x.shape and y.dtype == dtype and y.device.type == "cuda" and y.is_contiguous()
    assert not torch._C._is_alias_of(y, x) and not torch._C._is_alias_of(y, r)
    assert torch.ops.symmem.all_reduce_add_rmsnorm_out(x, r, w, 1e-5, g, torch.empty_like(x)) is None
    assert torch.ops.symmem.all_reduce_add_rmsnorm_(x, r, w, 0.0, g) is None


def test_rmsnorm_fakes_accept_disjoint_parts_of_one_buffer(fake, host_group):
    """The checks reject overlap, not a shared storage: out and residual as two halves of one tensor, and
    input, residual and weight as three parts of one; the same buffer's overlapping halves are refused."""
    buf = cuda(2, 6, 32)
    x, w = cuda(6, 32), cuda(32)
    assert torch.ops.symmem.all_reduce_add_rmsnorm_out(x, buf[0], w, 1e-6, host_group, buf[1]) is None
    both = cuda(7, 32)
    y = torch.ops.symmem.all_reduce_add_rmsnorm(both[:3], both[3:6], both[6], 1e-6, host_group)
    assert (y.shape, y.dtype) == ((3, 32), both.dtype)
    flat = cuda(11, 32)
    with pytest.raises(RuntimeError, match="out overlaps residual"):
        torch.ops.symmem.all_reduce_add_rmsnorm_out(x, flat[:6], w, 1e-6, host_group, flat[5:])


def _rms(op, x, r, w, g, eps=1e-6, out=None):
    if op == "out":
        return torch.ops.symmem.all_reduce_add_rmsnorm_out(x, r, w, eps, g, torch.empty_like(x) if out is None else out)
    if op == "inplace":
        return torch.ops.symmem.all_reduce_add_rmsnorm_(x, r, w, eps, g)
    return torch.ops.symmem.all_reduce_add_rmsnorm(x, r, w, eps, g)


BF = torch.bfloat16
RMS_ERRORS = [
    # (what, make(x, r, w) -> (x, r, w, eps, out), what the message says)
    ("residual shape", lambda x, r, w: (x, cuda(5, 4095), w, 1e-6, None), "residual has shape \\[5, 4095\\]"),
    ("residual rows", lambda x, r, w: (x, cuda(4, 4096), w, 1e-6, None), "residual has shape \\[4, 4096\\]"),
    ("out shape", lambda x, r, w: (x, r, w, 1e-6, cuda(5, 4097)), "out has shape \\[5, 4097\\]"),
    ("weight shape", lambda x, r, w: (x, r, cuda(4097), 1e-6, None), "weight has shape \\[4097\\]: it must be \\[4096\\]"),
    ("weight 2-D", lambda x, r, w: (x, r, cuda(1, 4096), 1e-6, None), "weight has shape \\[1, 4096\\]"),
    ("residual dtype", lambda x, r, w: (x, cuda(5, 4096, dtype=torch.float16), w, 1e-6, None),
     "residual has dtype float16 but input has dtype bfloat16"),
    ("weight dtype", lambda x, r, w: (x, r, cuda(4096, dtype=torch.float32), 1e-6, None), "weight has dtype"),
    ("out dtype", lambda x, r, w: (x, r, w, 1e-6, cuda(5, 4096, dtype=torch.float32)), "out has dtype"),
    ("input dtype", lambda x, r, w: (cuda(5, 4096, dtype=torch.float64), r, w, 1e-6, None), "input has dtype float64"),
    ("hidden too wide", lambda x, r, w: (cuda(2, 16385), cuda(2, 16385), cuda(16385), 1e-6, None),
     "1 <= hidden <= 16384"),
    ("hidden 0", lambda x, r, w: (cuda(2, 0), cuda(2, 0), cuda(0), 1e-6, None), "1 <= hidden <= 16384"),
    ("0-d input", lambda x, r, w: (cuda(()), cuda(()), cuda(1), 1e-6, None), "it must be \\[tokens, hidden\\]"),
    ("eps negative", lambda x, r, w: (x, r, w, -1e-6, None), "eps -1e-06 must be finite"),
    ("eps nan", lambda x, r, w: (x, r, w, float("nan"), None), "eps nan must be finite"),
    ("eps inf as float32", lambda x, r, w: (x, r, w, 1e39, None), "finite \\(as a float32\\)"),
    ("residual not contiguous", lambda x, r, w: (x, cuda(4096, 5).t(), w, 1e-6, None), "residual is not contiguous"),
    ("weight on the CPU", lambda x, r, w: (x, r, torch.empty(4096, dtype=BF), 1e-6, None), "weight is not a CUDA tensor"),
    ("residual is input", lambda x, r, w: (x, x, w, 1e-6, None), "residual overlaps input"),
    ("residual overlaps input", lambda x, r, w: (lambda b: (b[:5], b[3:8], w, 1e-6, None))(cuda(8, 4096)),
     "residual overlaps input"),
    ("weight in residual", lambda x, r, w: (x, r, r[1], 1e-6, None), "weight overlaps a tensor the op writes"),
]


# Every error case in every form, except out= cases outside the out form (the other forms have no out).
RMS_ERROR_CASES = [(op, *e) for e in RMS_ERRORS for op in ("functional", "out", "inplace")
                   if op == "out" or not e[0].startswith("out ")]


@pytest.mark.parametrize("op,what,make,match", RMS_ERROR_CASES, ids=[f"{c[1]}-{c[0]}" for c in RMS_ERROR_CASES])
def test_rmsnorm_fake_argument_errors(fake, host_group, op, what, make, match):
    x, r, w, eps, out = make(*_rms_args())
    with pytest.raises(RuntimeError, match=match) as e:
        _rms(op, x, r, w, host_group, eps=eps, out=out)
    assert "symmem::all_reduce_add_rmsnorm" in str(e.value) and f"group '{host_group}'" in str(e.value)


@pytest.mark.parametrize("call,match", [
    (lambda x, r, w, g: torch.ops.symmem.all_reduce_add_rmsnorm_out(x, r, w, 1e-6, g, r), "out overlaps residual"),
    (lambda x, r, w, g: torch.ops.symmem.all_reduce_add_rmsnorm_out(x, r, w, 1e-6, g, x), "use all_reduce_add_rmsnorm_"),
    (lambda x, r, w, g: (lambda b: torch.ops.symmem.all_reduce_add_rmsnorm_(b[:5], b[4:9], w, 1e-6, g))(cuda(9, 4096)),
     "residual overlaps input"),
    (lambda x, r, w, g: torch.ops.symmem.all_reduce_add_rmsnorm_(x, r, x[0], 1e-6, g), "weight overlaps"),
    (lambda x, r, w, g: (lambda b: torch.ops.symmem.all_reduce_add_rmsnorm_out(x, b[:5], w, 1e-6, g, b[3:8]))(
        cuda(8, 4096)), "out overlaps residual"),
])
def test_rmsnorm_fake_aliasing_errors(fake, host_group, call, match):
    with pytest.raises(RuntimeError, match=match):
        call(*_rms_args(), host_group)


def test_rmsnorm_weight_may_be_input_when_input_is_only_read(fake, host_group):
    """The weight may be a row of the input where the op only reads the input (out of place, out=), and the
    result is the input's shape; the in-place form, which writes the input, refuses it."""
    x, r, _ = _rms_args()
    y = torch.ops.symmem.all_reduce_add_rmsnorm(x, r, x[0], 1e-6, host_group)
    assert (y.shape, y.dtype) == (x.shape, x.dtype)
    assert torch.ops.symmem.all_reduce_add_rmsnorm_out(x, r, x[0], 1e-6, host_group, torch.empty_like(x)) is None
    with pytest.raises(RuntimeError, match="weight overlaps"):
        torch.ops.symmem.all_reduce_add_rmsnorm_(x, r, x[0], 1e-6, host_group)


def _rms_program(g):
    def f(x, r, w, o):
        y = torch.ops.symmem.all_reduce_add_rmsnorm(x * 2, r, w, 1e-6, g)
        torch.ops.symmem.all_reduce_add_rmsnorm_out(y, r, w, 1e-5, g, o)
        z = o + 1
        torch.ops.symmem.all_reduce_add_rmsnorm_(z, r, w, 1e-6, g)
        return z * 3, r + 0
    return f


def test_rmsnorm_make_fx(fake, host_group):
    gm = make_fx(_rms_program(host_group), tracing_mode="fake")(*_rms_args(), cuda(5, 4096))
    for name in RMSNORM_OPS:
        assert _count(gm, name) == 1, (name, _targets(gm))


def test_rmsnorm_dynamo_export(host_group):
    with FakeTensorMode():
        args = (*_rms_args(), cuda(5, 4096))
    ex = torch._dynamo.export(_rms_program(host_group))(*args)
    for name in RMSNORM_OPS:
        assert _count(ex.graph_module, name) == 1, (name, _targets(ex.graph_module))


def test_rmsnorm_compile_fullgraph_functionalized(host_group):
    """Through AOTAutograd with a symbolic token count: each form is functionalized (auto_functionalized),
    and the graph returns the final residual and out besides the user's two outputs, for AOTAutograd to write
    back into the caller's tensors."""
    from torch._dynamo.backends.common import aot_autograd

    graphs = []

    def capture(gm, inputs):
        graphs.append(gm)
        return gm

    torch._dynamo.reset()
    prog = _rms_program(host_group)

    def f(x, r, w, o):
        z, r2 = prog(x, r, w, o)
        return z, r2

    c = torch.compile(f, fullgraph=True, backend=aot_autograd(fw_compiler=capture), dynamic=True)
    with FakeTensorMode():
        z, r2 = c(*_rms_args(tokens=7), cuda(7, 4096))
    assert z.shape == (7, 4096) and r2.shape == (7, 4096)
    code = graphs[0].code
    for name in RMSNORM_OPS:
        assert f"symmem.{name}.default" in code, (name, code)
    assert "auto_functionalized" in code, code
    outputs = graphs[0].graph.output_node().args[0]
    assert len(outputs) == 4, f"the mutated residual and out are not among the outputs:\n{code}"


def test_rmsnorm_through_the_communicator(host_group):
    comm = _TracedCommunicator(host_group)
    graphs = []

    def backend(gm, inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()

    def layer(x, r, w):
        y = comm.all_reduce_add_rmsnorm(x, r, w, 1e-6)
        o = torch.empty_like(x)
        comm.all_reduce_add_rmsnorm(y * 2, r, w, 1e-6, out=o)
        comm.all_reduce_add_rmsnorm(o, r, w, 1e-6, out=o)
        return o

    f = torch.compile(layer, fullgraph=True, backend=backend)
    with FakeTensorMode():
        assert f(*_rms_args(tokens=8)).shape == (8, 4096)
    gm = graphs[0]
    assert [_count(gm, n) for n in RMSNORM_OPS] == [1, 1, 1], _targets(gm)


def test_rmsnorm_communicator_eligibility(fake):
    comm = _TracedCommunicator("elig-rms")  # max_size 1 MiB
    x, r, w = _rms_args(tokens=64)       # 512 KiB
    assert comm.should_all_reduce_add_rmsnorm(x)
    assert not comm.should_all_reduce_add_rmsnorm(cuda(129, 4096))              # 1 MiB + one row
    assert not comm.should_all_reduce_add_rmsnorm(cuda(2, 16385))               # past the row limit
    assert not comm.should_all_reduce_add_rmsnorm(cuda(8, 64, dtype=torch.int32))
    assert not comm.should_all_reduce_add_rmsnorm(cuda(64, 8).t())
    assert not comm.should_all_reduce_add_rmsnorm(cuda(8, 0))
    assert comm.all_reduce_add_rmsnorm(cuda(2, 16385), cuda(2, 16385), cuda(16385), 1e-6) is None
    comm.disabled = True
    assert not comm.should_all_reduce_add_rmsnorm(x)
    assert comm.all_reduce_add_rmsnorm(x, r, w, 1e-6) is None


def test_rmsnorm_communicator_raises_on_mismatched_residual(fake, host_group):
    comm = _TracedCommunicator(host_group)
    x, _, w = _rms_args()
    with pytest.raises(RuntimeError, match="residual has shape"):
        comm.all_reduce_add_rmsnorm(x, cuda(4, 4096), w, 1e-6)


def test_ctypes_ops_define_the_same_schemas_and_fakes(tmp_path):
    """Without the op library (SYMMEM_TORCH_OPS=python) the ops are defined in Python: the same schemas,
    the same fakes and errors."""
    code = textwrap.dedent("""
        import torch, symmem, symmem.torch as st
        from symmem.torch import _ops
        from torch._subclasses.fake_tensor import FakeTensorMode
        assert st.op_library() is None
        for name, schema in _ops.SCHEMAS.items():
            got = str(getattr(torch.ops.symmem, name).default._schema)
            assert got == "symmem::" + schema, got
        comms = symmem.Comm.init_all(2, backend=symmem.BACKEND_HOST)
        assert _ops.register_group("g", comms[0])
        with FakeTensorMode():
            x = torch.empty(3, 7, device="cuda", dtype=torch.float16)
            y = torch.ops.symmem.all_reduce_add_rmsnorm(x, torch.empty_like(x), torch.empty(7, device="cuda",
                                                        dtype=torch.float16), 1e-6, "g")
            assert y.shape == (3, 7)
            try:
                torch.ops.symmem.all_reduce_add_rmsnorm_out(x, x, x[0], 1e-6, "g", x)
            except RuntimeError as e:
                assert "rank 0 of 2" in str(e) and "overlaps input" in str(e), e
            else:
                raise AssertionError("no error")
        try:
            torch.ops.symmem.all_reduce(torch.zeros(4), "sum", "g")
        except NotImplementedError as e:
            raise AssertionError("the dispatcher's error for a CPU tensor") from e
        except RuntimeError as e:
            assert "symmem::all_reduce (group 'g', rank 0 of 2): input is not a CUDA tensor" in str(e), e
        else:
            raise AssertionError("a CPU tensor was accepted")
        print("ok")
    """)
    env = dict(os.environ, SYMMEM_TORCH_OPS="python")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), (r.stdout, r.stderr)


# ---------------------------------------------------------------------------------------------------------
# Watchdog: the C call it polls is replaced by one that reports a timeout (the GPU tests force a real one).
# ---------------------------------------------------------------------------------------------------------
class _FailingLib:
    def __init__(self, real):
        self._real = real

    def symmem_comm_get_async_error(self, handle):
        return 6  # SYMMEM_TIMEOUT

    def symmem_last_error(self):
        return b"rank 0: all_reduce #7 timed out waiting for rank 1"

    def __getattr__(self, name):
        return getattr(self._real, name)


@pytest.fixture
def failing_comm(monkeypatch):
    comm = _TracedCommunicator("wd")
    comm._handle_for_watchdog = lambda: 1234
    monkeypatch.setattr(symmem._lib, "_c", _FailingLib(symmem._lib._c))
    wd = st.watchdog()
    with wd.lock:
        wd.comms[id(comm)] = __import__("weakref").ref(comm)
    yield comm
    with wd.lock:
        wd.comms.pop(id(comm), None)


def test_watchdog_raise_policy(failing_comm, fake, caplog):
    prev = st.set_error_handling("raise")
    try:
        found = st.watchdog().poll_once()
    finally:
        st.set_error_handling(prev)
    assert [c for c, _ in found] == [failing_comm]
    assert "timed out waiting for rank 1" in caplog.text and "SYMMEM_TORCH_ERROR_HANDLING=raise" in caplog.text
    with pytest.raises(symmem.SymmemError, match="failed earlier.*SYMMEM_TIMEOUT.*rank 1") as e:
        failing_comm.all_reduce(cuda(16))
    assert isinstance(e.value, RuntimeError)
    with pytest.raises(symmem.SymmemError):
        failing_comm.barrier()
    assert st.watchdog().poll_once() == [], "an error is reported once"


def test_watchdog_handler(failing_comm):
    seen = []
    prev = st.set_error_handling(lambda comm, err: seen.append((comm, err.name)))
    try:
        st.watchdog().poll_once()
    finally:
        st.set_error_handling(prev)
    assert seen == [(failing_comm, "SYMMEM_TIMEOUT")]
    with pytest.raises(ValueError):
        st.set_error_handling("ignore")


def test_watchdog_aborts_by_default(tmp_path):
    """The default handling, in a child process: the thread (not a poll call) finds the error, logs it and
    aborts the process."""
    code = textwrap.dedent("""
        import time, weakref, symmem, symmem.torch as st
        from symmem.torch import _comm
        class Lib:
            def __init__(self, real): self.real = real
            def symmem_comm_get_async_error(self, h): return 6
            def symmem_last_error(self): return b"rank 0: all_reduce #3 timed out waiting for rank 1"
            def __getattr__(self, n): return getattr(self.real, n)
        symmem._lib._c = Lib(symmem._lib._c)
        c = _comm.SymmemCommunicator.__new__(_comm.SymmemCommunicator)
        c.group_name, c.rank, c.world_size, c.device, c.comm = "wd", 0, 2, "cuda:0", None
        c._init_state()
        c._handle_for_watchdog = lambda: 1
        st.watchdog().add(c)
        time.sleep(20)
        print("not aborted")
    """)
    env = dict(os.environ, SYMMEM_TORCH_WATCHDOG_MS="20")
    env.pop("SYMMEM_TORCH_ERROR_HANDLING", None)
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == -6, (r.returncode, r.stdout, r.stderr)  # SIGABRT
    assert "timed out waiting for rank 1" in r.stderr and "Aborting the process" in r.stderr, r.stderr
    assert "not aborted" not in r.stdout

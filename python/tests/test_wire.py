"""The compressed wire through Python, on a machine without a GPU: the ops' `wire` argument (schema default,
fakes, traces, unknown values refused), SymmemCommunicator's `wire` (its default, a bad value staying exact,
the argument reaching the traced op), and the drop-ins' SYMMEM_<FRAMEWORK>_WIRE (parsed, handed to the
communicator, agreed by every rank, lifting the link's size cap). The kernel itself: tests/coll/coll_wire.c."""
import logging

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

import symmem  # noqa: E402
from symmem.integrations import _common  # noqa: E402
from symmem.torch import _comm, _ops  # noqa: E402
from test_integrations_common import FakeInner, LogCapture, _plan, run_ranks  # noqa: E402

ALL_REDUCES = ("all_reduce", "all_reduce_", "all_reduce_out")


@pytest.fixture
def host_group():
    comms = symmem.Comm.init_all(2, backend=symmem.BACKEND_HOST)
    name = "test-wire-2"
    assert _ops.register_group(name, comms[0])
    yield name
    _ops.unregister_group(name)
    for c in comms:
        c.destroy()


def cuda(*shape, dtype=torch.bfloat16):
    return torch.empty(*shape, device="cuda", dtype=dtype)


def test_the_all_reduces_take_a_wire_that_defaults_to_exact():
    for name in ALL_REDUCES:
        schema = getattr(torch.ops.symmem, name).default._schema
        wire = [a for a in schema.arguments if a.name == "wire"]
        assert len(wire) == 1 and wire[0].default_value == "none", str(schema)
        assert schema.arguments[-1].name == "wire", "the new argument comes last (old calls keep their meaning)"
    assert set(_ops.WIRES) == {"none", "int8"}
    assert symmem.algo(_ops.WIRES["int8"]) == symmem._lib.constant("SYMMEM_ALGO_WIRE_INT8")


def test_fakes_accept_int8_and_refuse_an_unknown_wire(host_group):
    g = host_group
    with FakeTensorMode():
        x = cuda(4, 64)
        assert torch.ops.symmem.all_reduce(x, "sum", g, "int8").shape == x.shape
        assert torch.ops.symmem.all_reduce_(x, "sum", g, wire="int8") is None
        assert torch.ops.symmem.all_reduce_out(x, "sum", g, torch.empty_like(x), "none") is None
        for call in (lambda: torch.ops.symmem.all_reduce(x, "sum", g, "fp4"),
                     lambda: torch.ops.symmem.all_reduce_(x, "sum", g, "INT8"),
                     lambda: torch.ops.symmem.all_reduce_out(x, "sum", g, torch.empty_like(x), "")):
            with pytest.raises(RuntimeError, match=r"wire '.*' is not known: use \"none\" \(exact\) or \"int8\""):
                call()


def test_make_fx_keeps_the_wire_in_the_graph(host_group):
    g = host_group

    def f(x):
        return torch.ops.symmem.all_reduce(x, "sum", g, "int8")

    with FakeTensorMode():
        gm = make_fx(f, tracing_mode="fake")(cuda(8, 16))
    calls = [n for n in gm.graph.nodes if n.op == "call_function" and "all_reduce" in str(n.target)]
    assert len(calls) == 1 and "int8" in calls[0].args, calls[0].args


class _Traced(_comm.SymmemCommunicator):
    """An enabled communicator as Python sees it, no GPU behind it (as test_torch_ops.py's)."""

    def __init__(self, name, wire=None):
        self.wire = _comm._wire_setting(wire)
        self.disabled = False
        self.group = None
        self.world_size, self.rank = 2, 0
        self.device = torch.device("cuda", 0)
        self.max_size = 1 << 20
        self.comm = None
        self.group_name = name
        self._init_state()


def _traced_wire(comm, **kw):
    with FakeTensorMode():
        gm = make_fx(lambda t: comm.all_reduce(t, **kw), tracing_mode="fake")(cuda(8, 16))
    (node,) = [n for n in gm.graph.nodes if n.op == "call_function" and "all_reduce" in str(n.target)]
    # the wire is the op's fourth argument; a trace leaves out one equal to its default
    return node.kwargs.get("wire", node.args[3] if len(node.args) > 3 else "none")


def test_the_communicators_wire_reaches_the_op_and_a_call_may_override_it(host_group):
    assert _comm.SymmemCommunicator.__new__(_comm.SymmemCommunicator).wire == "none"  # without __init__ too
    assert _traced_wire(_Traced(host_group)) == "none"
    assert _traced_wire(_Traced(host_group, "int8")) == "int8"
    assert _traced_wire(_Traced(host_group, "int8"), wire="none") == "none"
    assert _traced_wire(_Traced(host_group), wire="int8") == "int8"


def test_a_bad_wire_setting_warns_and_stays_exact(caplog):
    with caplog.at_level(logging.WARNING, logger="symmem"):
        assert _comm._wire_setting("fp8") == "none"
    assert "wire='fp8' is not one of none, int8" in caplog.text
    assert _comm._wire_setting(None) == "none" and _comm._wire_setting("int8") == "int8"


def test_the_drop_ins_read_their_wire_setting(monkeypatch):
    log = logging.getLogger("symmem.integrations.test")
    for value, want in (("", {}), ("none", {}), ("0", {}), ("int8", {"wire": "int8"}), (" INT8 ", {"wire": "int8"})):
        monkeypatch.setenv("SYMMEM_TEST_WIRE", value)
        assert _common.wire_kwargs("SYMMEM_TEST_WIRE", log) == want, value
    monkeypatch.setenv("SYMMEM_TEST_WIRE", "fp4")
    with LogCapture("symmem.integrations.test") as cap:
        assert _common.wire_kwargs("SYMMEM_TEST_WIRE", log) == {}
    assert any("SYMMEM_TEST_WIRE='fp4' is not one of none|int8" in m for m in cap.at_least(logging.WARNING))


class WireInner(FakeInner):
    """FakeInner that takes the wire keyword, as symmem's SymmemCommunicator does."""

    def __init__(self, group, device, max_size=None, wire=None):
        super().__init__(group, device, max_size)
        self.wire = wire


def _wire_body(rank, world, wires, max_bytes):
    _common.load_inner_class = lambda: WireInner
    real = _common._local_facts

    def facts(device, plan, world_size):
        f = real(torch.device("cpu"), plan, world_size)
        f["why"] = ""
        return f
    _common._local_facts = facts
    FakeInner.made, FakeInner.fail_on_rank, FakeInner.max_by_rank = [], None, {}
    kw = {"wire": wires[rank]} if wires[rank] != "none" else {}
    with LogCapture("symmem.integrations.test") as cap:
        out = _common.negotiate(dist.group.WORLD, torch.device("cuda", 0), _plan(inner_kwargs=kw, max_bytes=max_bytes))
    return (out.backend, out.max_size, out.reason, [m.wire for m in FakeInner.made], cap.at_least(logging.INFO))


def test_negotiation_hands_the_wire_over_and_lifts_the_link_cap():
    # the fake's workspace takes 4 MiB; PCIe's bound (512 KiB) would hand larger messages to NCCL
    res = run_ranks(_wire_body, 2, ["int8", "int8"], None)
    for backend, max_size, _, wires, _ in res:
        assert (backend, max_size, wires) == ("symmem", 4 << 20, ["int8"])
    logs = res[0][4]
    assert any("int8 wire (lossy)" in m and "SYMMEM_TEST_WIRE" in m and "up to 4 MiB" in m for m in logs), logs
    # an explicit cap still wins
    res = run_ranks(_wire_body, 2, ["int8", "int8"], 1 << 20)
    assert [r[:2] for r in res] == [("symmem", 1 << 20)] * 2
    # exact: the link's bound as before
    res = run_ranks(_wire_body, 2, ["none", "none"], None)
    assert [r[:2] for r in res] == [("symmem", 512 << 10)] * 2 and res[0][3] == [None]



def test_ranks_that_differ_in_wire_keep_symmem_off():
    res = run_ranks(_wire_body, 2, ["int8", "none"], None)
    for backend, _, reason, wires, _ in res:
        assert backend == "off" and wires == [], (backend, wires)
        assert "the ranks differ in SYMMEM_TEST_WIRE (rank 0: int8, rank 1: none)" in reason

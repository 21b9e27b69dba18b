"""The communicator's compiled entry (symmem._fast, python/csrc/fast.c), without a GPU: which calls take it and
which go to the op, what it passes to the library, out's version counter, that it holds no reference it should
not, and that a destroyed communicator, a stale handle and a freed buffer end in a clear error from the library,
never a crash."""
import os
import sys

import pytest

torch = pytest.importorskip("torch")
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.overrides import TorchFunctionMode  # noqa: E402

import symmem  # noqa: E402
from symmem import SymmemError, _lib  # noqa: E402
from symmem.torch import _comm, _ops  # noqa: E402


def _built_entry():
    """Whether _fast.abi3.so is in one of the places the loader looks (an installed wheel: build_wheel.sh
    requires it; a build folder: where CMake found Python's headers)."""
    return any(p.is_file() for p in _ops._native("_fast.abi3.so"))


needs_entry = pytest.mark.skipif(not _built_entry(), reason="this build has no symmem._fast (no Python headers)")


@needs_entry
def test_the_built_entry_loads_and_calls_this_libsymmem():
    path, mod = _ops.compiled_entry()
    assert path is not None and mod is not None, "the build has _fast.abi3.so but it did not load"
    assert callable(mod.all_reduce) and callable(mod.checked_all_reduce) and isinstance(mod.Entry, type)
    assert _comm.fast_entry() == (_ops.torch_entry()[0] or path)
    assert symmem.torch.fast_entry() == _comm.fast_entry()


@needs_entry
def test_the_entry_checks_its_arguments():
    entry = _ops.compiled_entry()[1].all_reduce
    with pytest.raises(TypeError, match="takes 7 arguments"):
        entry(1, 2)
    with pytest.raises(OverflowError):
        entry(1, 16, 16, -1, symmem.BFLOAT16, symmem.OP_SUM, 0)
    with pytest.raises(TypeError):
        entry(1, None, 16, 4, symmem.BFLOAT16, symmem.OP_SUM, 0)


@needs_entry
def test_destroyed_stale_and_freed_end_in_the_library_s_errors():
    entry = _ops.compiled_entry()[1].all_reduce
    comms = symmem.Comm.init_all(2, backend=symmem.BACKEND_HOST, timeout_ms=20000)
    with symmem.group():
        bufs = [c.alloc(4096) for c in comms]
    live, ptr = comms[0].handle, bufs[0].ptr
    # a live communicator and a live buffer reach the library's own checks (the host backend has no kernels)
    with pytest.raises(RuntimeError, match="SYMMEM_UNSUPPORTED: .*need the CUDA backend"):
        entry(live, ptr, ptr, 16, symmem.BFLOAT16, symmem.OP_SUM, 0)
    # a freed buffer: out of the communicator's index, and the call still ends in an error, not a crash
    with symmem.group():
        for b in bufs:
            b.free()
    assert not _lib.lib().symmem_buffer_lookup(live, ptr)
    with pytest.raises(RuntimeError, match="SYMMEM_"):
        entry(live, ptr, ptr, 16, symmem.BFLOAT16, symmem.OP_SUM, 0)
    for c in comms:
        c.destroy()
    # the handle of a destroyed communicator, one that never was, and 0
    for handle in (live, 0x5EED0000, 1):
        with pytest.raises(RuntimeError, match="SYMMEM_INVALID_ARGUMENT: .*not a live communicator"):
            entry(handle, ptr, ptr, 16, symmem.BFLOAT16, symmem.OP_SUM, 0)
    with pytest.raises(RuntimeError, match="handle is 0"):
        entry(0, ptr, ptr, 16, symmem.BFLOAT16, symmem.OP_SUM, 0)


def _hooks(stream=0x5717EA):
    """The entry's torch callables with a stand-in for the current stream (this host has no GPU)."""
    return _comm._entry_hooks()[:3] + (lambda device: stream,) + _comm._entry_hooks()[4:]


_TYPES = (torch.Tensor, torch.nn.Parameter)  # symmem._fast.Entry's tensor_types


def _dtypes():
    return tuple((dt, size, code) for dt, (size, code) in _comm._DTYPE_INFO.items())


def _built_torch_entry():
    """symmem._fast_torch's module where one was built for this torch and this Python, else None."""
    import importlib.machinery

    for path in _ops._native("_fast_torch" + importlib.machinery.EXTENSION_SUFFIXES[0]):
        if path.is_file():
            mod = _ops._load_module("symmem._fast_torch", path)
            if tuple(mod.built_against) == (torch.__version__, torch.version.git_version or ""):
                return mod
    return None


# The two checked entries: symmem._fast's (every torch) and symmem._fast_torch's (torch's C++ API, where built for
# this torch). Each test below runs on both; where the C++ one was not built its runs are skipped, visibly.
ENTRIES = ["fast", "fast_torch"]


def _entry_module(kind):
    if not _built_entry():
        pytest.skip("this build has no symmem._fast (no Python headers)")
    if kind == "fast":
        return _ops.compiled_entry()[1]
    mod = _built_torch_entry()
    if mod is None:
        # scripts/test_python.sh sets it where the source build must have made one
        assert os.environ.get("SYMMEM_EXPECT_TORCH_ENTRY") != "1", "no symmem._fast_torch built for this torch"
        pytest.skip("this build has no symmem._fast_torch for this torch")
    return mod


def _make_entry(kind, mod, handle, label="lbl", learning=None, call=None, stream=0x5717EA, max_bytes=1 << 20):
    """An Entry of either module on 'device -1' (CPU tensors); the C++ one reads no stream for a device below 0."""
    if kind == "fast":
        return mod.Entry(handle, -1, max_bytes, learning, label, _TYPES, _dtypes(), _hooks(stream), call=call)
    return mod.Entry(handle, -1, max_bytes, learning, label, call=call)


def test_the_torch_entry_loads_where_it_was_built_for_this_torch(monkeypatch):
    """A symmem._fast_torch built for this torch and Python is what communicators take; one built for another
    torch (here: this torch pretending to be another release) is refused and they take symmem._fast."""
    built = _built_torch_entry()
    if built is None:
        pytest.skip("this build has no symmem._fast_torch for this torch")
    path, mod = _ops.torch_entry()
    assert mod is built, "a symmem._fast_torch built for this torch did not load"
    assert _comm.fast_entry() == path
    monkeypatch.setattr(torch, "__version__", "0.0.0+elsewhere")
    assert _ops._load_fast_torch() == (None, None)


@pytest.mark.parametrize("kind", ENTRIES)
def test_the_checked_entry_checks_its_arguments(kind):
    mod = _entry_module(kind)
    e = _make_entry(kind, mod, 1)
    x = torch.ones(4)
    with pytest.raises(TypeError, match=r"takes \(Entry, input, out, op\)"):
        mod.checked_all_reduce(e, x, None)
    with pytest.raises(TypeError, match=r"takes \(Entry, input, out, op\)"):
        mod.checked_all_reduce(object(), x, None, symmem.OP_SUM)
    with pytest.raises(TypeError):
        mod.checked_all_reduce(e, x, None, "sum")
    with pytest.raises(TypeError, match="learning a set or None"):
        _make_entry(kind, mod, 1, learning=[])
    if kind == "fast":
        with pytest.raises(TypeError, match="dtypes must be 3"):
            mod.Entry(1, -1, 1 << 20, None, "lbl", _TYPES, _dtypes()[:2], _hooks())
        with pytest.raises(TypeError, match="hook 4 is not callable"):
            mod.Entry(1, -1, 1 << 20, None, "lbl", _TYPES, _dtypes(), _hooks()[:4] + (None, _hooks()[5]))


@pytest.mark.parametrize("kind", ENTRIES)
def test_the_checked_entry_reaches_the_library_s_errors(kind):
    """A live communicator, a destroyed one and one that never was, through the tensors' entry: the library's
    own checks answer, prefixed with the communicator's label, and nothing leaks on the error path."""
    mod = _entry_module(kind)
    comms = symmem.Comm.init_all(2, backend=symmem.BACKEND_HOST, timeout_ms=20000)
    x, y = torch.ones(64, dtype=torch.bfloat16), torch.empty(64, dtype=torch.bfloat16)
    live = _make_entry(kind, mod, comms[0].handle, "symmem::all_reduce (group 'g', rank 0 of 2)", stream=0)
    with pytest.raises(RuntimeError, match=r"^symmem::all_reduce \(group 'g', rank 0 of 2\): SYMMEM_UNSUPPORTED: "
                                           r".*need the CUDA backend"):
        mod.checked_all_reduce(live, x, y, symmem.OP_SUM)
    handle = comms[0].handle
    for c in comms:
        c.destroy()
    refs = sys.getrefcount(x), sys.getrefcount(y)
    for h in (handle, 0x5EED0000):
        gone = _make_entry(kind, mod, h, stream=0)
        for out in (y, None, x):
            with pytest.raises(RuntimeError, match="^lbl: SYMMEM_INVALID_ARGUMENT: .*not a live communicator"):
                mod.checked_all_reduce(gone, x, out, symmem.OP_SUM)
    del out
    assert (sys.getrefcount(x), sys.getrefcount(y)) == refs


class _Sub(torch.Tensor):
    pass


# ---- the communicator's routing, with an entry that records its library calls and recording ops ----------------
class _Recorder:
    def __init__(self, fail=None):
        self.calls, self.fail = [], fail

    def __call__(self, *args):
        self.calls.append(args)
        if self.fail:
            raise RuntimeError(self.fail)


@pytest.fixture(params=ENTRIES)
def routed(request, monkeypatch):
    """A communicator on 'device -1' (CPU tensors pass its eligibility) whose entry (either kind) calls a recorder
    with the library call's integers instead of the library, and whose ops record their calls."""
    kind = request.param
    mod = _entry_module(kind)
    rec = _Recorder()
    monkeypatch.setattr(_comm, "_new_entry", lambda handle, device, max_bytes, learning, label: (
        _make_entry(kind, mod, handle, label, learning, rec, max_bytes=max_bytes), mod.checked_all_reduce))
    c = _comm.SymmemCommunicator.__new__(_comm.SymmemCommunicator)
    c.group_name, c.rank, c.world_size, c.comm, c.disabled = "fastgrp", 1, 4, None, False
    c.group = None
    c.device = torch.device("cpu")
    c._init_state()
    c.max_size, c._handle, c._dev_index = 1 << 20, 0xC0FFEE, -1
    c._fast = True
    c._refresh_entry()
    c.calls, c.stream, c.kind, c.mod = rec.calls, (0x5717EA if kind == "fast" else 0), kind, mod
    ops = []
    monkeypatch.setattr(_comm, "_AR_OUT", lambda *a: ops.append(("out", a)))
    monkeypatch.setattr(_comm, "_AR_", lambda *a: ops.append(("inplace", a)))
    monkeypatch.setattr(_comm, "_AR", lambda *a: ops.append(("new", a)) or torch.empty_like(a[0]))
    return c, ops


def test_plain_eager_calls_take_the_entry(routed):
    c, ops = routed
    x, y = torch.ones(3, 7, dtype=torch.bfloat16), torch.empty(3, 7, dtype=torch.bfloat16)
    v = y._version
    assert c.all_reduce(x, out=y) is y
    assert c.calls == [(0xC0FFEE, x.data_ptr(), y.data_ptr(), 21, symmem.BFLOAT16, symmem.OP_SUM, c.stream)]
    assert y._version == v + 1, "out's version counter is bumped as for any in-place op"
    vx = x._version
    r = c.all_reduce(x)
    assert r is not None and r.shape == x.shape and r.dtype == x.dtype and r._version == 0
    assert c.all_reduce(x, out=x) is x and x._version == vx + 1
    assert c.all_reduce(x.float(), op="max") is not None
    assert c.all_reduce(x, op="min", out=y) is y
    new, inplace, maxed, mined = c.calls[1:]
    assert new[1] == x.data_ptr() and new[2] == r.data_ptr() and new[3] == 21
    assert inplace[1] == inplace[2] == x.data_ptr()
    assert maxed[4] == symmem.FLOAT32 and maxed[5] == symmem.OP_MAX and mined[5] == symmem.OP_MIN
    assert ops == []
    with torch.inference_mode():
        z = torch.ones(5, dtype=torch.float16)
        c.all_reduce(z, out=z)
    assert c.calls[-1][3:5] == (5, symmem.FLOAT16)
    assert ops == []


def test_ineligible_tensors_are_declined_as_before(routed):
    """What the communicator's Python declines (None) the entry declines, without a library call or an op."""
    c, ops = routed
    # a small cap, so that no tensor here is large enough for torch to fill it on its thread pool: test files that
    # fork ranks later (test_integrations_common.py) hang in their children when this process started OpenMP
    c.max_size = 1024
    c._refresh_entry()
    for why, t in [("float64", torch.ones(4, dtype=torch.float64)), ("int32", torch.ones(4, dtype=torch.int32)),
                   ("not contiguous", torch.ones(8)[::2]), ("above max_size", torch.ones(257))]:
        assert c.all_reduce(t) is None, why
        assert c.all_reduce(t, out=t) is None, why
    assert c.calls == [] and ops == []
    assert c.all_reduce(torch.ones(256)) is not None  # exactly max_size
    assert len(c.calls) == 1


def test_what_the_entry_does_not_take_goes_to_the_op(routed):
    c, ops = routed
    x = torch.ones(8, dtype=torch.bfloat16)
    cases = [
        ("a compressed wire", lambda: c.all_reduce(x, out=torch.empty_like(x), wire="int8")),
        ("an unknown op", lambda: c.all_reduce(x, out=torch.empty_like(x), op="avg")),
        ("out of another dtype", lambda: c.all_reduce(x, out=torch.empty(8))),
        ("out of another shape", lambda: c.all_reduce(x, out=torch.empty(2, 4, dtype=torch.bfloat16))),
        ("out not contiguous", lambda: c.all_reduce(x, out=torch.empty(16, dtype=torch.bfloat16)[::2])),
        ("out a subclass", lambda: c.all_reduce(x, out=torch.empty_like(x).as_subclass(_Sub))),
    ]
    for why, call in cases:
        before = len(ops)
        call()
        assert len(ops) == before + 1, why
    w = torch.ones(8, dtype=torch.bfloat16, requires_grad=True)
    c.all_reduce(w, out=torch.empty_like(x))  # autograd would have to record it
    assert len(ops) == len(cases) + 1
    c.all_reduce(x, out=torch.empty_like(x).requires_grad_())  # an out that requires grad: the op's error
    assert len(ops) == len(cases) + 2
    with torch.no_grad():
        c.all_reduce(w, out=torch.empty_like(x))  # nothing to record
    assert len(ops) == len(cases) + 2 and len(c.calls) == 1

    class Watching(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with Watching():
        c.all_reduce(x, out=torch.empty_like(x))
    assert len(ops) == len(cases) + 3 and len(c.calls) == 1


def test_fake_tensors_go_to_the_op(routed):
    c, ops = routed
    with FakeTensorMode():
        x = torch.empty(8, dtype=torch.bfloat16)
        c.all_reduce(x, out=torch.empty_like(x))
    assert c.calls == [] and len(ops) == 1


def test_sizes_being_learned_go_to_the_op_first(routed, monkeypatch):
    """While the communicator learns sizes for AUTO, a size it has not measured takes the Python path (which
    measures it), and every later call of that size the entry; once the budget is spent every size does."""
    c, ops = routed
    learned = []

    def learn(nbytes, inp):  # what _learn does to the state, without the measurement
        learned.append(nbytes)
        c._learn_left -= 1
        c._learned.add(nbytes)
        if c._learn_left == 0:
            c._refresh_entry()

    monkeypatch.setattr(c, "_learn", learn)
    c._learn_left = 2
    c._refresh_entry()
    x, y = torch.ones(16, dtype=torch.bfloat16), torch.ones(24, dtype=torch.bfloat16)
    c.all_reduce(x, out=x)
    assert learned == [32] and len(ops) == 1 and c.calls == []
    c.all_reduce(x, out=x)
    assert len(ops) == 1 and len(c.calls) == 1
    c.all_reduce(y, out=y)  # the second size spends the budget
    assert learned == [32, 48] and len(ops) == 2
    c.all_reduce(torch.ones(40, dtype=torch.bfloat16))  # a third: no longer learned, straight to the entry
    assert learned == [32, 48] and len(ops) == 2 and len(c.calls) == 2


def test_a_library_error_names_the_group_and_rank(routed):
    c, _ = routed
    rec = _Recorder(fail="SYMMEM_INVALID_ARGUMENT: symmem_all_reduce: not a live communicator")
    c._entry = _make_entry(c.kind, c.mod, c._handle, "symmem::all_reduce (group 'fastgrp', rank 1 of 4)", call=rec)
    x, y = torch.ones(4), torch.empty(4)
    refs = sys.getrefcount(x), sys.getrefcount(y)
    with pytest.raises(RuntimeError, match="not a live communicator"):
        c.all_reduce(x, out=y)
    with pytest.raises(RuntimeError, match="not a live communicator"):
        c.all_reduce(x)
    assert (sys.getrefcount(x), sys.getrefcount(y)) == refs


def test_the_entry_keeps_no_reference(routed):
    """Every outcome (a result, in place, a new tensor, declined, sent to the op) leaves the tensors' reference
    counts as they were: a leak here would keep every activation of a model alive."""
    c, ops = routed
    x, y = torch.ones(64, dtype=torch.bfloat16), torch.empty(64, dtype=torch.bfloat16)
    odd = torch.empty(64, dtype=torch.float16)
    refs = [sys.getrefcount(t) for t in (x, y, odd)]
    for _ in range(100):
        c.all_reduce(x, out=y)
        c.all_reduce(x, out=x)
        c.all_reduce(x)
        c.all_reduce(x, out=odd)          # to the op
        c.all_reduce(odd.double())        # declined
    ops_seen = len(ops)
    ops.clear()  # the recording ops hold their arguments
    assert [sys.getrefcount(t) for t in (x, y, odd)] == refs
    assert len(c.calls) == 300 and ops_seen == 100


def test_failure_closing_and_the_wire_drop_the_entry(routed, monkeypatch):
    c, ops = routed
    x = torch.ones(4)
    c.wire = "int8"
    assert c._entry is None
    c.all_reduce(x, out=x)
    assert c.calls == [] and len(ops) == 1 and ops[0][1][-1] == "int8"
    c.wire = "none"
    assert c._entry is not None
    c.all_reduce(x, out=x)
    assert len(c.calls) == 1
    c._set_async_error(SymmemError(symmem.SYMMEM_ERR_TIMEOUT if hasattr(symmem, "SYMMEM_ERR_TIMEOUT") else 1,
                                   "a peer timed out"))
    assert c._entry is None
    with pytest.raises(SymmemError, match="failed earlier"):
        c.all_reduce(x, out=x)
    assert len(c.calls) == 1


def test_a_closed_communicator_takes_nothing(routed, monkeypatch):
    c, ops = routed
    monkeypatch.setattr(_comm, "watchdog", lambda: type("W", (), {"lock": _NoLock(), "remove": lambda s, x: None})())
    c.close()
    assert c._entry is None and c.disabled
    assert c.all_reduce(torch.ones(4), out=torch.empty(4)) is None
    assert ops == [] and c.calls == []


class _NoLock:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def test_the_setting_turns_the_entry_off(monkeypatch):
    monkeypatch.setenv("SYMMEM_TORCH_FAST_CALL", "off")
    assert not _comm._fast_call_setting()
    monkeypatch.setenv("SYMMEM_TORCH_FAST_CALL", "on")
    assert _comm._fast_call_setting()
    monkeypatch.delenv("SYMMEM_TORCH_FAST_CALL")
    assert _comm._fast_call_setting()


def test_the_version_bump_of_this_torch():
    t = torch.zeros(2)
    v = t._version
    assert _comm._bump is not None, "this torch's _increment_version does not take a tuple: the entry would be off"
    _comm._bump((t,))
    assert t._version == v + 1

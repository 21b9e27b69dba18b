"""The communicator's compiled entry (symmem._fast, python/csrc/fast.c), without a GPU: which calls take it and
which go to the op, what it passes to the library, out's version counter, and that a destroyed communicator, a
stale handle and a freed buffer end in a clear error from the library, never a crash."""
import pytest

torch = pytest.importorskip("torch")
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.overrides import TorchFunctionMode  # noqa: E402

import symmem  # noqa: E402
from symmem import _lib  # noqa: E402
from symmem.torch import _comm, _ops  # noqa: E402


def _built_entry():
    """Whether _fast.abi3.so is in one of the places the loader looks (an installed wheel: build_wheel.sh
    requires it; a build folder: where CMake found Python's headers)."""
    return any(p.is_file() for p in _ops._native("_fast.abi3.so"))


needs_entry = pytest.mark.skipif(not _built_entry(), reason="this build has no symmem._fast (no Python headers)")


@needs_entry
def test_the_built_entry_loads_and_calls_this_libsymmem():
    path, entry = _ops.compiled_entry()
    assert path is not None and callable(entry), "the build has _fast.abi3.so but it did not load"
    assert _comm.fast_entry() == path
    assert symmem.torch.fast_entry() == path


@needs_entry
def test_the_entry_checks_its_arguments():
    _, entry = _ops.compiled_entry()
    with pytest.raises(TypeError, match="takes 7 arguments"):
        entry(1, 2)
    with pytest.raises(OverflowError):
        entry(1, 16, 16, -1, symmem.BFLOAT16, symmem.OP_SUM, 0)
    with pytest.raises(TypeError):
        entry(1, None, 16, 4, symmem.BFLOAT16, symmem.OP_SUM, 0)


@needs_entry
def test_destroyed_stale_and_freed_end_in_the_library_s_errors():
    _, entry = _ops.compiled_entry()
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


# ---- the communicator's routing, with a recording entry and recording ops ------------------------------------
class _Recorder:
    def __init__(self, fail=None):
        self.calls, self.fail = [], fail

    def __call__(self, *args):
        self.calls.append(args)
        if self.fail:
            raise RuntimeError(self.fail)


@pytest.fixture
def routed(monkeypatch):
    """A communicator on 'device -1' (CPU tensors pass its eligibility) whose entry and ops record their calls."""
    c = _comm.SymmemCommunicator.__new__(_comm.SymmemCommunicator)
    c.group_name, c.rank, c.world_size, c.comm, c.disabled = "fastgrp", 1, 4, None, False
    c.group = None
    c.device = torch.device("cpu")
    c._init_state()
    c.max_size, c._handle, c._dev_index = 1 << 20, 0xC0FFEE, -1
    c._fast = _Recorder()
    ops = []
    monkeypatch.setattr(_comm, "_raw_stream", lambda device: 0x5717EA)
    monkeypatch.setattr(_comm, "_AR_OUT", lambda *a: ops.append(("out", a)))
    monkeypatch.setattr(_comm, "_AR_", lambda *a: ops.append(("inplace", a)))
    monkeypatch.setattr(_comm, "_AR", lambda *a: ops.append(("new", a)) or torch.empty_like(a[0]))
    return c, ops


def test_plain_eager_calls_take_the_entry(routed):
    c, ops = routed
    x, y = torch.ones(3, 7, dtype=torch.bfloat16), torch.empty(3, 7, dtype=torch.bfloat16)
    v = y._version
    assert c.all_reduce(x, out=y) is y
    assert c._fast.calls == [(0xC0FFEE, x.data_ptr(), y.data_ptr(), 21, symmem.BFLOAT16, symmem.OP_SUM, 0x5717EA)]
    assert y._version == v + 1, "out's version counter is bumped as for any in-place op"
    assert c.all_reduce(x) is not None and c.all_reduce(x, out=x) is x
    assert c.all_reduce(x.float(), op="max") is not None
    new, inplace, maxed = c._fast.calls[1:]
    assert new[1] == x.data_ptr() and new[2] != x.data_ptr() and new[3] == 21
    assert inplace[1] == inplace[2] == x.data_ptr()
    assert maxed[4] == symmem.FLOAT32 and maxed[5] == symmem.OP_MAX
    assert ops == []
    with torch.inference_mode():
        z = torch.ones(5, dtype=torch.float16)
        c.all_reduce(z, out=z)
    assert c._fast.calls[-1][3:5] == (5, symmem.FLOAT16)
    assert ops == []


def test_what_the_entry_does_not_take_goes_to_the_op(routed):
    c, ops = routed
    x = torch.ones(8, dtype=torch.bfloat16)
    cases = [
        ("a compressed wire", lambda: c.all_reduce(x, out=torch.empty_like(x), wire="int8")),
        ("an unknown op", lambda: c.all_reduce(x, out=torch.empty_like(x), op="avg")),
        ("out of another dtype", lambda: c.all_reduce(x, out=torch.empty(8))),
        ("out of another shape", lambda: c.all_reduce(x, out=torch.empty(2, 4, dtype=torch.bfloat16))),
        ("out not contiguous", lambda: c.all_reduce(x, out=torch.empty(16, dtype=torch.bfloat16)[::2])),
    ]
    for why, call in cases:
        before = len(ops)
        call()
        assert len(ops) == before + 1, why
    w = torch.ones(8, dtype=torch.bfloat16, requires_grad=True)
    c.all_reduce(w, out=torch.empty_like(x))  # autograd would have to record it
    assert len(ops) == len(cases) + 1
    with torch.no_grad():
        c.all_reduce(w, out=torch.empty_like(x))  # nothing to record
    assert len(ops) == len(cases) + 1 and len(c._fast.calls) == 1

    class Watching(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with Watching():
        c.all_reduce(x, out=torch.empty_like(x))
    assert len(ops) == len(cases) + 2 and len(c._fast.calls) == 1


def test_fake_tensors_go_to_the_op(routed):
    c, ops = routed
    with FakeTensorMode():
        x = torch.empty(8, dtype=torch.bfloat16)
        c.all_reduce(x, out=torch.empty_like(x))
    assert c._fast.calls == [] and len(ops) == 1


def test_a_library_error_names_the_group_and_rank(routed):
    c, _ = routed
    c._fast = _Recorder(fail="SYMMEM_INVALID_ARGUMENT: symmem_all_reduce: not a live communicator")
    with pytest.raises(RuntimeError, match=r"symmem::all_reduce \(group 'fastgrp', rank 1 of 4\): "
                                           r"SYMMEM_INVALID_ARGUMENT: .*not a live communicator"):
        c.all_reduce(torch.ones(4), out=torch.empty(4))


def test_a_closed_communicator_takes_nothing(routed, monkeypatch):
    c, ops = routed
    monkeypatch.setattr(_comm, "watchdog", lambda: type("W", (), {"lock": _NoLock(), "remove": lambda s, x: None})())
    c.close()
    assert c._fast is None and c.disabled
    assert c.all_reduce(torch.ones(4), out=torch.empty(4)) is None
    assert ops == []


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

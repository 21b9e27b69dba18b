"""What the communicator learns for AUTO, without a GPU: which calls may measure a new size (plain eager ones
only), how many sizes it learns, and the tuning calls' argument checks."""
import logging

import pytest

torch = pytest.importorskip("torch")
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402
from torch.overrides import TorchFunctionMode  # noqa: E402

import symmem  # noqa: E402
from symmem.torch import _comm  # noqa: E402


def test_plain_eager_calls_may_measure():
    assert _comm._eager_ok(torch.ones(4))


def test_autograd_measures_nothing():
    x = torch.ones(4, requires_grad=True)
    assert not _comm._eager_ok(x)
    with torch.no_grad():
        assert _comm._eager_ok(x)  # nothing to record
    with torch.inference_mode():
        assert _comm._eager_ok(torch.ones(4))


def test_fake_tensors_measure_nothing():
    with FakeTensorMode():
        x = torch.empty(4)
        assert not _comm._eager_ok(x)


def test_tracing_and_modes_measure_nothing():
    seen = []

    def f(x):
        seen.append(_comm._eager_ok(x))
        return x + 1

    make_fx(f)(torch.ones(4))
    assert seen == [False]

    class Watching(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with Watching():
        assert not _comm._eager_ok(torch.ones(4))


def test_tensor_subclasses_measure_nothing():
    class Sub(torch.Tensor):
        pass

    x = torch.ones(4).as_subclass(Sub)
    assert not _comm._eager_ok(x)


@pytest.mark.parametrize("text,want", [("", 32), ("0", 0), ("5", 5), ("-3", 32), ("many", 32)])
def test_learn_budget(monkeypatch, caplog, text, want):
    monkeypatch.setenv("SYMMEM_TORCH_LEARN_SIZES", text)
    with caplog.at_level(logging.WARNING, logger="symmem"):
        assert _comm._learn_budget() == want
    assert ("SYMMEM_TORCH_LEARN_SIZES" in caplog.text) == (text in ("-3", "many"))


def test_disabled_communicator_takes_nothing():
    c = _comm.SymmemCommunicator.__new__(_comm.SymmemCommunicator)
    c.disabled, c.comm, c.max_size, c.group_name = True, None, 0, None
    c._init_state()
    c.tune([1024])  # a no-op, not an error
    assert c.all_reduce(torch.ones(4)) is None
    assert not c.should_torch_symm_mem_allreduce(torch.ones(4))


def test_tune_sizes_checks_its_forms():
    comms = symmem.Comm.init_all(2, backend=symmem.BACKEND_HOST)
    try:
        with pytest.raises(ValueError, match="FORM"):
            comms[0].tune_sizes([1024], forms=(7,))
        with pytest.raises(OverflowError, match="sizes"):
            comms[0].tune_sizes([-1])
        comms[0].tune_sizes([1024, 4096], forms=(symmem.FORM_ORDINARY, symmem.FORM_SYMMETRIC_INPUT))  # host: no-op
        with pytest.raises(symmem.SymmemError, match="0 to 64"):
            comms[0].tune_sizes(list(range(1, 70)))
    finally:
        for c in comms:
            c.destroy()

"""GPU: SGLang's own parallel_state driving all-reduce through symmem. The ranks (SYMMEM_TEST_GPU_RANKS,
default 2) share the machine's GPUs round robin, so one GPU holds them all (start MPS for speed; without it
the driver time-slices them: correct, slower). Each rank builds the tp group the way `--enable-torch-symm-mem`
does (load_plugins, set_torch_symm_mem_all_reduce, init_model_parallel_group over gloo; no NCCL, which
refuses two ranks on one GPU), checks that symmem serves it, then runs gpu_scenario: eager calls over
dtypes and sizes, and CUDA graphs captured under GroupCoordinator.graph_capture() replayed in random order
between eager calls, all against a float64 reference and bitwise equal across ranks.
Skipped without CUDA or without SGLang."""
import contextlib
import importlib.util
import os

import pytest

from test_integrations_common import gpu_ranks_and_devices, gpu_scenario, run_ranks

try:
    import torch
    HAVE = torch.cuda.is_available() and importlib.util.find_spec("sglang") is not None
except ImportError:
    HAVE = False


def _body(rank, world, devices):
    import torch.distributed as dist

    torch.cuda.set_device(devices[rank])
    if len(set(devices)) == 1:
        os.environ["SGLANG_ONE_VISIBLE_DEVICE_PER_PROCESS"] = "1"  # GroupCoordinator then takes cuda:0
    from sglang.srt.plugins import load_plugins

    load_plugins()
    import sglang.srt.distributed.parallel_state as ps

    ps.set_torch_symm_mem_all_reduce(True)
    gc = ps.init_model_parallel_group([list(range(world))], devices[rank], "gloo", use_pynccl=False,
                                      use_custom_allreduce=False, use_mscclpp=False, group_name="tp")
    comm = gc.torch_symm_mem_comm
    from symmem.integrations.sglang import SymmemTorchSymmMemCommunicator

    assert type(comm) is SymmemTorchSymmMemCommunicator, type(comm)
    assert comm.backend == "symmem" and not comm.disabled, f"symmem does not serve tp: backend {comm.backend}"

    def eligible(x):
        return gc._resolve_outplace_all_reduce_method(x) == "torch_symm_mem"

    @contextlib.contextmanager
    def capture():
        with gc.graph_capture() as ctx:
            yield ctx.stream

    stats = gpu_scenario(rank, world, gc.all_reduce, capture, eligible, comm.max_size)
    # The in-place path (SGLang's fallback when there is no pynccl) goes through symmem too.
    x = torch.full((4096,), float(rank + 1), dtype=torch.bfloat16, device="cuda")
    gc._all_reduce_in_place(x)
    torch.cuda.synchronize()
    assert torch.all(x == world * (world + 1) / 2), x[:4]
    dist.barrier()
    return dict(stats, max_size=comm.max_size)


@pytest.mark.skipif(not HAVE, reason="needs CUDA and SGLang")
class TestSGLangOnGPU:
    def test_parallel_state_all_reduce_through_symmem(self):
        world, devices = gpu_ranks_and_devices()
        res = run_ranks(_body, world, devices, context="spawn", timeout=580)
        print(f"\nSGLang tp group over symmem, {world} ranks on GPUs {devices}: {res[0]}")
        assert all(r["eager_symmem"] > 0 and r["replays"] > 0 for r in res)

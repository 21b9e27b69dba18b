"""GPU: vLLM's SymmMemCommunicator, as vLLM's plugin loader leaves it, driving all-reduce through symmem
with co-located ranks (see test_integrations_gpu_sglang.py). vLLM's GroupCoordinator cannot be built here:
its CudaCommunicator always creates a pynccl communicator, and NCCL refuses two ranks on one GPU. So the
communicator comes from the class vLLM's cuda_communicator imports, and the all-reduces go through
CudaCommunicator.all_reduce itself (vLLM's dispatch code, on an instance holding only our communicator)
where vllm.distributed.device_communicators.cuda_communicator imports, else through the communicator.
Skipped without CUDA or without vLLM."""
import importlib.util

import pytest

from test_integrations_common import (gpu_ranks_and_devices, gpu_scenario, reduce_or_gloo, run_ranks,
                                      side_stream_capture)

try:
    import torch
    HAVE = torch.cuda.is_available() and importlib.util.find_spec("vllm") is not None
except ImportError:
    HAVE = False


def _dispatcher(comm, device_group):
    """vLLM's CudaCommunicator.all_reduce bound to an instance whose only backend is `comm`."""
    try:
        from vllm.distributed.device_communicators.cuda_communicator import CudaCommunicator
    except Exception as e:  # noqa: BLE001 - its import chain (fastapi, ...) is missing: say so
        return None, f"{type(e).__name__}: {e}"
    cc = CudaCommunicator.__new__(CudaCommunicator)
    cc.__dict__.update(fi_ar_comm=None, pynccl_comm=None, qr_comm=None, fi_pcie_ipc_ar_comm=None,
                       aiter_ar_comm=None, use_aiter_allreduce=False, ca_comm=None, symm_mem_comm=comm,
                       device_group=device_group)
    return cc.all_reduce, ""


def _body(rank, world, devices):
    import torch.distributed as dist

    torch.cuda.set_device(devices[rank])
    import vllm.plugins

    vllm.plugins.load_general_plugins()
    from vllm.distributed.device_communicators.symm_mem import SymmMemCommunicator
    from symmem.integrations.vllm import SymmemSymmMemCommunicator

    assert SymmMemCommunicator is SymmemSymmMemCommunicator, SymmMemCommunicator
    cpu_group = dist.new_group(list(range(world)), backend="gloo", group_desc="tp:cpu")
    comm = SymmMemCommunicator(group=cpu_group, device=torch.device("cuda", devices[rank]))
    assert comm.backend == "symmem" and not comm.disabled, f"symmem does not serve tp: backend {comm.backend}"
    reduce, why = _dispatcher(comm, dist.group.WORLD)
    if reduce is None:
        reduce = reduce_or_gloo(comm)  # None from all_reduce: vLLM's next backend, as its dispatch would take it
    stats = gpu_scenario(rank, world, reduce, side_stream_capture, comm.should_use_symm_mem, comm.max_size)
    dist.barrier()
    return dict(stats, max_size=comm.max_size, dispatch="CudaCommunicator.all_reduce" if not why else
                f"the communicator (cuda_communicator does not import: {why})")


@pytest.mark.skipif(not HAVE, reason="needs CUDA and vLLM")
class TestVLLMOnGPU:
    def test_symm_mem_communicator_through_symmem(self):
        world, devices = gpu_ranks_and_devices()
        res = run_ranks(_body, world, devices, context="spawn", timeout=580)
        print(f"\nvLLM SymmMemCommunicator over symmem, {world} ranks on GPUs {devices}: {res[0]}")
        assert all(r["eager_symmem"] > 0 and r["replays"] > 0 for r in res)

"""PyTorch integration: an all-reduce communicator with the interface SGLang's GroupCoordinator expects of
its torch-symmetric-memory communicator (and vLLM's SymmMemCommunicator), backed by symmem, so it also
runs on PCIe machines without NVLink multicast.

    comm = SymmemCommunicator(cpu_group, device)      # the gloo CPU group, as SGLang passes it
    if not comm.disabled and comm.should_torch_symm_mem_allreduce(x):
        y = comm.all_reduce(x)                        # stream-ordered, CUDA-graph capturable

Construction never raises for an unsupported setup: it sets `disabled` and logs why, as SGLang expects.
"""
import logging

import torch
import torch.distributed as dist

from . import BFLOAT16, FLOAT16, FLOAT32, OP_SUM, Comm, SymmemError

log = logging.getLogger("symmem")

_DTYPES = {torch.bfloat16: BFLOAT16, torch.float16: FLOAT16, torch.float32: FLOAT32}


class SymmemCommunicator:
    def __init__(self, group, device, max_size=None):
        self.disabled = True
        self.group = group
        self.world_size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.device = torch.device(device) if not isinstance(device, torch.device) else device
        self.max_size = 0
        self.comm = None
        if self.world_size < 2:
            log.info("symmem communicator disabled: world size %d", self.world_size)
            return
        if self.device.type != "cuda":
            log.info("symmem communicator disabled: device %s is not CUDA", self.device)
            return

        def allgather(data):
            out = [None] * self.world_size
            dist.all_gather_object(out, data, group=group)
            return out

        try:
            index = self.device.index if self.device.index is not None else torch.cuda.current_device()
            self.comm = Comm(self.world_size, self.rank, allgather=allgather, device=index)
        except SymmemError as e:
            log.warning("symmem communicator disabled: %s", e)
            return
        limit = self.comm.max_message_bytes
        self.max_size = limit if max_size is None else min(max_size, limit)
        self.disabled = False

    def should_torch_symm_mem_allreduce(self, inp):
        if self.disabled or inp.dtype not in _DTYPES or not inp.is_cuda or not inp.is_contiguous():
            return False
        return inp.numel() * inp.element_size() <= self.max_size

    should_use_symm_mem = should_torch_symm_mem_allreduce  # vLLM's name

    def all_reduce(self, inp, *, out=None):
        """Sum over the group into `out` (a new tensor if None). Returns None when `inp` is not eligible
        (vLLM's convention); SGLang checks eligibility first."""
        if not self.should_torch_symm_mem_allreduce(inp):
            return None
        if out is None:
            out = torch.empty_like(inp)
        stream = torch.cuda.current_stream(inp.device).cuda_stream
        self.comm.all_reduce(inp.data_ptr(), out.data_ptr(), inp.numel(), _DTYPES[inp.dtype], OP_SUM, stream=stream)
        return out

    def close(self):
        if self.comm is not None:
            self.comm.destroy()
            self.comm = None
        self.disabled = True

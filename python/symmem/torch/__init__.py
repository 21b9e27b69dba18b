"""symmem for PyTorch.

- torch.ops.symmem.* custom ops (registered on import), with fakes, so make_fx, Dynamo and torch.compile
  keep them in the graph; CUDA kernels stream-ordered on the current stream, CUDA-graph capturable:
      all_reduce(Tensor input, str reduce_op, str group_name) -> Tensor
      all_reduce_(Tensor(a!) input, str reduce_op, str group_name) -> ()
      all_reduce_out(Tensor input, str reduce_op, str group_name, Tensor(a!) out) -> ()
      reduce_scatter_out(Tensor input, str reduce_op, str group_name, Tensor(a!) out) -> ()
      all_gather_out(Tensor input, str group_name, Tensor(a!) out) -> ()
      barrier(str group_name) -> ()
      all_reduce_add_rmsnorm(Tensor input, Tensor(a!) residual, Tensor weight, float eps, str group_name) -> Tensor
      all_reduce_add_rmsnorm_out(..., Tensor(b!) out) -> (), all_reduce_add_rmsnorm_(Tensor(a!) input, ...) -> ()
        (residual += all_reduce(input) in place, then RMSNorm of residual times weight, per row of the last dim)
  (the mutating forms return nothing: torch.compile cannot functionalize a custom op whose output aliases
  an input). reduce_op is "sum", "max" or "min"; dtypes bfloat16, float16, float32; inputs contiguous, on the group's
  device, at most the communicator's max_message_bytes (SymmemCommunicator.max_size, which may be lower,
  is what its should_* methods take); reduce-scatter and all-gather split dim 0.
- SymmemCommunicator(group, device, max_size=None): SGLang's / vLLM's communicator interface; it registers
  its communicator under `group_name`, the string the ops take. Its plain eager all_reduce calls the library
  through a compiled entry where one is built (fast_entry() says which; SYMMEM_TORCH_FAST_CALL=off sends every
  call through the op): symmem._fast_torch, built by a source install for that torch and Python, else
  symmem._fast.
- empty(*size, dtype=..., group=...), get_mem_pool(group): symmetric tensors (zero copy in the collectives);
  register_with_nccl(tensor, nccl_group): the same memory registered with a ProcessGroupNCCL's NCCL.
- A watchdog (symmem.torch._watchdog) that logs an asynchronous error and by default aborts the process
  (SYMMEM_TORCH_ERROR_HANDLING=abort|raise, set_error_handling()).
"""
try:
    import torch as _torch  # noqa: F401 - what every module below needs, checked once with the fix in the message
except ModuleNotFoundError as _e:
    if _e.name != "torch":
        raise
    raise ModuleNotFoundError("symmem.torch needs PyTorch (>= 2.10), which this Python cannot import: "
                              "pip install \"symmem[torch]\" (or install torch first; `python -m "
                              "symmem.integrations status` shows what is in place)", name="torch") from None

from ._ops import SCHEMAS, op_library
from ._comm import SymmemCommunicator, communicators_in_process, fast_entry, live_communicators
from ._memory import NcclRegistration, empty, get_mem_pool, is_symmetric, peer_tensor, register_with_nccl
from ._watchdog import set_error_handling, watchdog

__all__ = ["SymmemCommunicator", "communicators_in_process", "live_communicators", "empty", "get_mem_pool",
           "is_symmetric", "peer_tensor", "register_with_nccl", "NcclRegistration", "set_error_handling",
           "watchdog", "op_library", "fast_entry", "SCHEMAS"]

"""Shared by the Python tests. They test the installed package: run pytest from outside the source tree
(scripts/test_python.sh does), so that `import symmem` finds what pip installed."""
import os

# NVLink multicast stays off in this process and every child (it can take a shared host's GPUs down).
for _k, _v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ[_k] = _v

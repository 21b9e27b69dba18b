"""symmem as a drop-in for the frameworks' symmetric-memory all-reduce.

- `symmem.integrations.sglang.register`: entry point of group `sglang.srt.plugins` (SGLang >= 0.5.23):
  replaces `TorchSymmMemCommunicator`, which SGLang builds under `--enable-torch-symm-mem`.
- `symmem.integrations.vllm.register`: entry point of group `vllm.general_plugins`: replaces vLLM's
  `SymmMemCommunicator` (VLLM_ALLREDUCE_USE_SYMM_MEM=1, the default).
- `python -m symmem.integrations install-pth`: the same for SGLang versions without plugins, through a
  `.pth` file (`uninstall-pth` removes it; `status` shows what is in place).

Nothing here imports torch or a framework at import time; the communicators decide at construction, once
per group, with every rank of the group agreeing (see _common.py).
"""

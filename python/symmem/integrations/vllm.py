"""symmem behind vLLM's symmetric-memory all-reduce (VLLM_ALLREDUCE_USE_SYMM_MEM=1, vLLM's default).

vLLM's CudaCommunicator builds `SymmMemCommunicator(group=cpu_group, device=device)` for the "tp" group,
importing the class from `vllm.distributed.device_communicators.symm_mem` inside its __init__, and then
calls `should_use_symm_mem(x)` and `all_reduce(x)` (None when ineligible). `register()` (the
`vllm.general_plugins` entry point, run in every vLLM process before distributed init) rebinds that module
attribute to `SymmemSymmMemCommunicator`, at once if the module is loaded, else right after it loads.

Behaviour beyond SGLang's drop-in:
  - VLLM_BATCH_INVARIANT=1: disabled, as vLLM's own class is (symmem reduces every element in rank order
    with fp32 accumulation, which would qualify, but that has not been checked across sizes on a GPU yet).
  - DBO / micro-batching (parallel_config.enable_dbo or ubatch_size > 1) issues all-reduces from two
    threads on two streams per micro-batch. One symmem communicator must not run two operations at once,
    so it is refused: disabled at init when the config asks for micro-batching, and any call made from a
    micro-batch thread is declined (it goes to the next backend, pynccl) should the config not say so.
  - force_multimem is accepted and ignored (symmem never uses multicast); max_size_override caps the size.

Environment: SYMMEM_VLLM_MODE (fallback|replace|off, as SYMMEM_SGLANG_MODE), SYMMEM_VLLM_MAX_BYTES,
SYMMEM_VLLM_FUSE_RMSNORM (1: symmem's fused all-reduce + residual add + RMSNorm through a compilation pass,
vllm_fusion.py; default 0), SYMMEM_VLLM_WIRE (none, the default, or int8: the compressed wire where symmem
serves the group, lossy; as SYMMEM_SGLANG_WIRE).
"""
import logging

from . import _common, vllm_fusion
from ._imphook import when_imported

TARGET_MODULE = "vllm.distributed.device_communicators.symm_mem"
TARGET_CLASS = "SymmMemCommunicator"
ENV = "SYMMEM_VLLM"

# A child of vLLM's "vllm" logger, so the line shows with vLLM's handler, format and VLLM_LOGGING_LEVEL.
log = logging.getLogger("vllm.plugins.symmem")
# vLLM's own class, kept before it is replaced (in a dict: _install rebinds module globals).
_stock = {}
_registered = False


def mode():
    return _common.env_mode(f"{ENV}_MODE")


def _batch_invariant():
    try:
        import vllm.envs as envs

        return bool(envs.VLLM_BATCH_INVARIANT)
    except Exception:  # noqa: BLE001
        import os

        return os.environ.get("VLLM_BATCH_INVARIANT", "0").strip() not in ("", "0")


def _ubatching_configured():
    try:
        from vllm.config import get_current_vllm_config_or_none

        config = get_current_vllm_config_or_none()
        return bool(config is not None and config.parallel_config.use_ubatching)
    except Exception:  # noqa: BLE001 - no config in this process: the per-call check still applies
        return False


def _ubatch_threads():
    """vLLM's registry of micro-batch threads (non-empty while DBO runs), or None."""
    try:
        from vllm.v1.worker import ubatching

        return ubatching._THREAD_ID_TO_CONTEXT
    except Exception:  # noqa: BLE001
        return None


def _stock_probe(device, world_size):
    """None when vLLM's own class would come up here (a listed capability and world size, multicast)."""
    import torch

    if _stock.get("class") is None:
        return "vLLM's class was not captured"
    from vllm.distributed.device_communicators.all_reduce_utils import SYMM_MEM_ALL_REDUCE_MAX_SIZES

    major, minor = torch.cuda.get_device_capability(device)
    if world_size not in SYMM_MEM_ALL_REDUCE_MAX_SIZES.get(f"{major}.{minor}", {}):
        return f"sm_{major}{minor} at world size {world_size} is not in vLLM's table"
    return _common.multicast_missing(device)


class SymmemSymmMemCommunicator(_common.DropIn):
    """Drop-in for vLLM's SymmMemCommunicator. `backend`: "symmem", "torch" (vLLM's own class, in fallback
    mode where it works) or "off"."""

    STOCK_METHODS = ("should_use_symm_mem", "all_reduce")
    SHOULD = "should_use_symm_mem"

    def __init__(self, group, device, force_multimem=None, max_size_override=None):
        self._init_fields(group)
        self.force_multimem = force_multimem
        self._ubatch = None
        try:
            self.device = _common.as_device(device)
            veto = None
            if _batch_invariant():
                veto = "VLLM_BATCH_INVARIANT is set"
            elif _ubatching_configured():
                veto = ("DBO / micro-batching is configured: its two streams per micro-batch would run one "
                        "symmem communicator from two streams at once")
            max_bytes = max_size_override if max_size_override is not None else _common.env_bytes(
                f"{ENV}_MAX_BYTES", log)

            def stock_build():
                return _stock["class"](group, device, force_multimem=force_multimem,
                                    max_size_override=max_size_override)

            plan = _common.Plan(framework="vLLM", env_prefix=ENV, log=log, mode=mode(), veto=veto,
                                max_bytes=max_bytes, stock_probe=_stock_probe,
                                stock_build=stock_build if _stock.get("class") else None,
                                inner_kwargs=_common.wire_kwargs(f"{ENV}_WIRE", log))
            if plan.mode == "off" and _stock.get("class") is not None:
                self._adopt_stock(stock_build())
                return
            self._adopt(_common.negotiate(group, self.device, plan))
        except Exception as e:  # noqa: BLE001 - vLLM has no try/except around us
            self._disabled_reason = f"{type(e).__name__}: {e}"
            log.warning("symmem: vLLM communicator disabled: %s", self._disabled_reason)
            self.disabled = True

    def _bind_directly(self):
        # vLLM's micro-batch threads turn symmem off per call (should_use_symm_mem), so where vLLM has that
        # registry the wrappers stay; the inner still enforces the cap, which spares them the check.
        self._ubatch = _ubatch_threads()
        return self._ubatch is None

    def _declines(self):
        return bool(self._ubatch)

    def should_use_symm_mem(self, inp):
        if self.disabled or self._ubatch:
            return False
        return (self._capped or inp.numel() * inp.element_size() <= self.max_size) and self._inner_should(inp)

    def all_reduce(self, inp, *, out=None):
        """Sum over the group; None when `inp` is not eligible (vLLM then takes the next backend)."""
        if self._capped:  # the inner checks eligibility and the agreed cap itself, None when not eligible
            return None if self.disabled or self._ubatch else self._inner_all_reduce(inp, out=out)
        if not self.should_use_symm_mem(inp):
            return None
        return self._inner_all_reduce(inp, out=out)


symmem_backed = _common.symmem_backed


def _install(module):
    """Capture vLLM's class and put ours in its place, here and in modules that imported it by name."""
    import sys

    original = getattr(module, TARGET_CLASS, None)
    if original is None or original is SymmemSymmMemCommunicator:
        return
    _stock["class"] = original
    setattr(module, TARGET_CLASS, SymmemSymmMemCommunicator)
    for other in list(sys.modules.values()):
        if other is None or other is module or not hasattr(other, "__dict__"):
            continue
        try:
            for key, value in list(vars(other).items()):
                if value is original:
                    setattr(other, key, SymmemSymmMemCommunicator)
        except Exception:  # noqa: BLE001 - modules with odd __dict__s keep their binding
            continue


def register():
    """The `vllm.general_plugins` entry point. vLLM calls it in every process without a try/except and
    possibly more than once: it never raises and does its work once. It imports nothing of vLLM."""
    global _registered
    try:
        if _registered:
            return
        _registered = True
        if mode() == "off":
            log.info("symmem: %s_MODE=off: vLLM's SymmMemCommunicator is left as it is", ENV)
            return
        when_imported(TARGET_MODULE, _install)
        if vllm_fusion.enabled():
            vllm_fusion.install()
    except Exception as e:  # noqa: BLE001
        log.warning("symmem: could not register the vLLM plugin: %s: %s", type(e).__name__, e)

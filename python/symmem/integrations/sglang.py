"""symmem behind SGLang's `--enable-torch-symm-mem`.

SGLang's GroupCoordinator builds `TorchSymmMemCommunicator(group=cpu_group, device=device)` for every group
of world size > 1 when the flag is on, and dispatches on `disabled`, `should_torch_symm_mem_allreduce(x)` and
`all_reduce(x)` / `all_reduce(x, out=x)`. `register()` (the `sglang.srt.plugins` entry point) replaces that
class with `SymmemTorchSymmMemCommunicator` through SGLang's HookRegistry (a class REPLACE, so the method
string stays "torch_symm_mem" and the dispatch is unchanged). For SGLang versions without plugins,
`python -m symmem.integrations install-pth` does the same from a `.pth` file (see _autopatch.py).

Environment:
  SYMMEM_SGLANG_MODE       fallback (default): torch's class where it works (NVLink multicast present),
                           symmem where it would disable itself; replace: symmem always; off: SGLang's own.
  SYMMEM_SGLANG_GROUPS     SGLang group names that get symmem, comma-separated, or "all" (default "tp").
                           Each costs SYMMEM_WORKSPACE_BYTES (64 MiB) of GPU memory per rank.
  SYMMEM_SGLANG_MAX_BYTES  largest message (bytes, K/M/G) symmem takes; default by link class (_common).
  SYMMEM_SGLANG_FUSE_RMSNORM  1: symmem's fused all-reduce + residual add + RMSNorm at SGLang's layer
                           boundaries, where symmem serves the group (sglang_fusion.py); default 0.
  SYMMEM_SGLANG_WIRE       none (default): exact all-reduces; int8: the compressed wire where symmem serves
                           the group, for sum of bf16/fp16 from SYMMEM_WIRE_MIN_BYTES (1 MiB) on: lossy, within
                           the bound of docs/collectives.md ("Compressed wire"); the size cap becomes the largest
                           message the workspace takes (SYMMEM_WORKSPACE_BYTES) unless MAX_BYTES sets one.
                           Every rank must set the same (ranks that differ keep symmem off).
"""
import logging

from . import _common, sglang_fusion
from ._imphook import when_imported

TARGET_MODULE = "sglang.srt.distributed.device_communicators.torch_symm_mem"
TARGET_CLASS = "TorchSymmMemCommunicator"
TARGET = f"{TARGET_MODULE}.{TARGET_CLASS}"
INKLING_MODULE = "sglang.srt.models.inkling_common.kernels.comm"
ENV = "SYMMEM_SGLANG"

log = logging.getLogger("symmem.integrations.sglang")
# SGLang's own class, kept before it is replaced. In a dict, not a module global: the HookRegistry
# rebinds every module global that still refers to the replaced class.
_stock = {}
_registered = False


def mode():
    return _common.env_mode(f"{ENV}_MODE")


def selected_groups():
    """The group names that get symmem ({'*'} for all)."""
    from symmem import _settings  # empty is the default, tp

    text = _settings.value(f"{ENV}_GROUPS", log).strip()
    names = {g.strip() for g in text.split(",") if g.strip()}
    return {"*"} if "all" in names or "*" in names else names


def _stock_probe(device, world_size):
    """None when SGLang's own class would come up on this rank (its conditions: a listed compute
    capability and world size, and multicast), else why not. Asks without allocating anything."""
    import torch

    if _stock.get("class") is None:
        return "SGLang's class was not captured"
    from sglang.srt.distributed.device_communicators.all_reduce_utils import TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES

    major = torch.cuda.get_device_capability(device)[0]
    if world_size not in TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES.get(major, {}):
        return f"sm_{major}x at world size {world_size} is not in SGLang's table"
    return _common.multicast_missing(device)


class SymmemTorchSymmMemCommunicator(_common.DropIn):
    """Drop-in for SGLang's TorchSymmMemCommunicator. `backend` says who serves the group: "symmem",
    "torch" (SGLang's own class, in fallback mode where it works) or "off"."""

    STOCK_ATTRS = ("buffer",) + _common.DropIn.STOCK_ATTRS
    STOCK_METHODS = ("should_torch_symm_mem_allreduce", "all_reduce")

    def __init__(self, group, device):
        self._init_fields(group)
        self.buffer = None  # torch's multicast buffer; None unless torch's class serves the group
        try:
            self.device = _common.as_device(device)
            name = _common.group_label(group)
            groups = selected_groups()
            veto = None
            if "*" not in groups and name not in groups:
                veto = f"group '{name or '?'}' is not in {ENV}_GROUPS ({','.join(sorted(groups))})"
            plan = _common.Plan(framework="SGLang", env_prefix=ENV, log=log, mode=mode(), veto=veto,
                                max_bytes=_common.env_bytes(f"{ENV}_MAX_BYTES", log), stock_probe=_stock_probe,
                                stock_build=(lambda: _stock["class"](group, device)) if _stock.get("class") else None,
                                inner_kwargs=_common.wire_kwargs(f"{ENV}_WIRE", log))
            if plan.mode == "off" and _stock.get("class") is not None:
                self._adopt_stock(_stock["class"](group, device))
                return
            self._adopt(_common.negotiate(group, self.device, plan))
        except Exception as e:  # noqa: BLE001 - GroupCoordinator has no try/except around us
            self._disabled_reason = f"{type(e).__name__}: {e}"
            log.warning("symmem: SGLang communicator disabled: %s", self._disabled_reason)
            self.disabled = True

    def _serving(self):
        if sglang_fusion.enabled() and self.rank == 0:
            log.info("symmem: SGLang group '%s': fused all-reduce + residual add + RMSNorm at SGLang's layer "
                     "boundaries up to %s (%s=1)", _common.group_label(self.group) or "?",
                     _common.human(self.max_size), sglang_fusion.ENV)

    def should_torch_symm_mem_allreduce(self, inp):
        """Same answer on every rank for the same tensor shape and dtype (the cap is agreed at init)."""
        if self.disabled or inp.device != self.device:
            return False
        return inp.numel() * inp.element_size() <= self.max_size and self._inner_should(inp)

    def all_reduce(self, inp, *, out=None):
        """Sum over the group, out of place (a new tensor) or into `out` (in place when out is inp).
        Stream-ordered on the current stream and CUDA-graph capturable. None when `inp` is not eligible."""
        if self.disabled or inp.numel() * inp.element_size() > self.max_size:
            return None
        return self._inner_all_reduce(inp, out=out)


symmem_backed = _common.symmem_backed


def _capture_stock(module):
    cls = getattr(module, TARGET_CLASS, None)
    if cls is not None and cls is not SymmemTorchSymmMemCommunicator:
        _stock["class"] = cls


def _replace_in(module):
    """Capture SGLang's class, then put ours in its place (the .pth path, where no HookRegistry runs)."""
    _capture_stock(module)
    setattr(module, TARGET_CLASS, SymmemTorchSymmMemCommunicator)


def _guard_inkling(module):
    """Inkling's model code (SGLang's srt/models/inkling_common) drives torch's multicast kernels on the
    communicator's `buffer` when the communicator is enabled at world size 4/6/8. symmem has no multicast
    buffer, so where symmem serves the group those paths are sent to their own NCCL-style fallbacks: the
    buffer getters say "none", the fusion predicates say False, and symm_mem_all_reduce goes through the
    group's all_reduce (which dispatches to symmem in turn)."""
    import functools

    def tp_comm(group):
        return getattr(group, "torch_symm_mem_comm", None)

    def guard(name, group_arg, answer):
        original = getattr(module, name, None)
        if original is None or getattr(original, "_symmem_guard", False):
            return

        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            group = kwargs.get("group", args[group_arg] if len(args) > group_arg else None)
            if symmem_backed(tp_comm(group)):
                return answer(*args, **kwargs)
            return original(*args, **kwargs)

        wrapper._symmem_guard = True
        setattr(module, name, wrapper)

    def reduce_via_group(input, group, *, output=None, input_is_ar_buffer=False, num_sms=32, shared=None):
        del input_is_ar_buffer, num_sms
        if shared is not None:
            input = input + shared
        result = group.all_reduce(input)
        if output is None:
            return result
        output.copy_(result)
        return output

    guard("ensure_inkling_ar_resources", 0, lambda *a, **k: None)
    guard("get_ar_buffer", 0, lambda *a, **k: None)
    guard("_symm_mem_comm", 0, lambda *a, **k: None)
    guard("ar_sconv_norm_fusable", 0, lambda *a, **k: False)
    guard("scattered_ar_sconv_fusable", 0, lambda *a, **k: False)
    guard("fullwidth_ar_sconv_fusable", 0, lambda *a, **k: False)
    guard("symm_mem_all_reduce", 1, reduce_via_group)


def install_import_hooks(replace):
    """Capture (and, with replace=True, replace) SGLang's class when its module is imported, and guard
    Inkling's multicast paths when that module is. Cheap: nothing is imported here."""
    when_imported(TARGET_MODULE, _replace_in if replace else _capture_stock)
    when_imported(INKLING_MODULE, _guard_inkling)


def register():
    """The `sglang.srt.plugins` entry point: a REPLACE hook of TorchSymmMemCommunicator. Idempotent; never
    raises (SGLang logs a plugin's exception, but a half-registered plugin would be worse than none)."""
    global _registered
    try:
        if _registered:
            return
        if mode() == "off":
            log.info("symmem: %s_MODE=off: SGLang's TorchSymmMemCommunicator is left as it is", ENV)
            return
        from sglang.srt.plugins.hook_registry import HookRegistry, HookType

        install_import_hooks(replace=False)
        HookRegistry.register(TARGET, SymmemTorchSymmMemCommunicator, HookType.REPLACE)
        if sglang_fusion.enabled():
            sglang_fusion.install()
        _registered = True
    except Exception as e:  # noqa: BLE001
        log.warning("symmem: could not register the SGLang plugin: %s: %s", type(e).__name__, e)

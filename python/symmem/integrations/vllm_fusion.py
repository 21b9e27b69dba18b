"""symmem's fused all-reduce + residual add + RMSNorm in vLLM's compiled graphs (SYMMEM_VLLM_FUSE_RMSNORM=1,
off by default).

Where vLLM 0.33.0 fuses: only in torch.compile'd models, through Inductor post-grad passes that
`vllm/compilation/passes/pass_manager.py: PostGradPassManager.configure` lists. Its AllReduceFusionPass
(`fusion/allreduce_rms_fusion.py`, `pass_config.fuse_allreduce_rms`, on by default only on SM90/SM100 with
FlashInfer) rewrites `vllm.all_reduce` + `vllm_ir.fused_add_rms_norm` into FlashInfer's TRT-LLM kernel.
There is no hook for another kernel there, and vLLM's `post_grad_custom_post_pass` needs a pass object in
the config, which `vllm serve` cannot pass.

So, in each vLLM process, PostGradPassManager.configure is wrapped (the one function rebound; vLLM's code is
unchanged): after vLLM's own configuration, where symmem serves this process's TP group, it inserts
_vllm_pass.SymmemAllReduceRMSNormPass ahead of vLLM's fusion passes (so symmem's kernel, when asked for,
wins over FlashInfer's for the same pattern, and the norm + quant fusions after it see what is left), and
chains a step after vLLM's FixFunctionalizationPass that turns symmem's functionalized call back into an
in-place one, as vLLM does for its own fused kernels. The pass rewrites each all-reduce of the TP group
followed by fused_add_rms_norm into torch.ops.symmem_vllm.fused_all_reduce_add_rms_norm, which decides per
call, from the shape alone (the same on every rank): symmem's fused kernel within the all-reduce's agreed
size cap, else vLLM's own all-reduce and fused_add_rms_norm, the sequence the pattern replaced.

Not covered: eager mode (--enforce-eager: no passes run), and Gemma's (1 + w) norms, whose pattern vLLM
writes with an fp32 weight; both keep vLLM's unfused path.
"""
import functools
import logging

from . import _common

# A child of vLLM's "vllm" logger, as vllm.py's.
log = logging.getLogger("vllm.plugins.symmem")

ENV = "SYMMEM_VLLM_FUSE_RMSNORM"
PASS_MANAGER_MODULE = "vllm.compilation.passes.pass_manager"
_MARK = "_symmem_fusion"
# vLLM's passes that canonicalise the graph for its fusions; symmem's pass goes right after them.
CANONICALISING = ("NoOpEliminationPass", "AddRMSNormFusionPass", "RocmAiterTritonAddRMSNormPadFusionPass")


def enabled():
    return _common.env_flag(ENV, "the fusion")


def served_tp_group():
    """(vLLM's TP GroupCoordinator, its symmem-backed communicator) in this process, or None."""
    try:
        from vllm.distributed import parallel_state

        tp = parallel_state._TP
    except Exception:  # noqa: BLE001 - no vLLM distributed state here
        return None
    comm = getattr(getattr(tp, "device_communicator", None), "symm_mem_comm", None)
    return (tp, comm) if _common.symmem_backed(comm) else None


def add_passes(manager, config):
    """Insert symmem's pass into a configured PostGradPassManager (where symmem serves the TP group)."""
    served = served_tp_group()
    if served is None:
        log.debug("symmem: vLLM's TP group is not served by symmem here: no fusion pass")
        return False
    from . import _vllm_pass

    tp, comm = served
    fusion = _vllm_pass.SymmemAllReduceRMSNormPass(config, tp.unique_name)
    at = 0
    while at < len(manager.passes) and type(manager.passes[at]).__name__ in CANONICALISING:
        at += 1
    manager.passes.insert(at, fusion)
    manager.fix_functionalization = _vllm_pass.InPlaceAfter(config, manager.fix_functionalization)
    if getattr(comm, "rank", 0) == 0:
        log.info("symmem: vLLM group '%s': all-reduce + fused_add_rms_norm in compiled graphs go to symmem's fused "
                 "kernel up to %d bytes, vLLM's sequence above (%s=1)", tp.unique_name, comm.max_size, ENV)
    return True


def wrap_pass_manager(module):
    cls = module.PostGradPassManager
    original = cls.configure
    if getattr(original, _MARK, False):
        return

    @functools.wraps(original)
    def configure(self, config):
        original(self, config)
        try:
            add_passes(self, config)
        except Exception as e:  # noqa: BLE001 - never break vLLM's compilation: it keeps its own passes
            log.warning("symmem: fused all-reduce + RMSNorm pass not added: %s: %s", type(e).__name__, e)

    setattr(configure, _MARK, True)
    cls.configure = configure


def install():
    """Called from the vLLM plugin's register() when SYMMEM_VLLM_FUSE_RMSNORM=1; imports nothing of vLLM."""
    from ._imphook import when_imported

    when_imported(PASS_MANAGER_MODULE, wrap_pass_manager)

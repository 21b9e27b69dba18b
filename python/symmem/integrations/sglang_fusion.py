"""symmem's fused all-reduce + residual add + RMSNorm inside SGLang (SYMMEM_SGLANG_FUSE_RMSNORM=1, off by
default).

Where SGLang 0.5.23 fuses: its layer boundaries (srt/layers/layer_boundary) try, at every attention input
and FFN input, the fused kernels that complete the previous stage's all-reduce together with the residual
add and the input norm. For an RMSNorm (or GemmaRMSNorm) those are
`fusions/allreduce.py: fused_attn_input` (the MoE / MLP output's sum, at the next layer's attention input)
and `fused_ffn_input` (the attention output's sum), bound into each boundary when the model is built. Both
ask `residual/add_norm.py: flashinfer_ar_fusion_applies(batch_size)`, which is true only on SM90/SM100 with
FlashInfer and `--flashinfer-allreduce-fusion-backend` (which SGLang rejects on other GPUs), and then run
`norm.forward_with_allreduce_fusion(x, residual)` -> `layernorm._forward_with_allreduce_fusion` ->
`flashinfer_comm_fusion.flashinfer_allreduce_residual_rmsnorm(...)`, which returns (norm, residual), or
(None, None) to decline (SGLang then all-reduces and norms unfused, on a copy of the residual).

So three module functions are wrapped, each falling through to SGLang's own wherever symmem does not serve
the group or the call:
  - fused_attn_input / fused_ffn_input: take the batch when the group they complete (the MoE output's
    group, the attention-TP group) is served by symmem and the call is eligible; the rest of the path is
    SGLang's (forward_with_allreduce_fusion passes the norm's weight, Gemma's 1 + w included, and epsilon);
  - flashinfer_allreduce_residual_rmsnorm: symmem's kernel for such a call, the original otherwise. The
    candidates decide everything first, weight included, because SGLang's kernel is a custom op whose
    fake always returns tensors: under torch.compile a traced call cannot decline, so a call that
    reaches the kernel seam must be one symmem takes (or one SGLang's own gate sent there);
  - flashinfer_preserves_residual: False where symmem serves the attention-TP group. symmem updates the
    residual in place (SGLang's unfused norm does too); FlashInfer's kernel returns a new one, which lets
    SGLang keep an EAGLE capture without a copy. False only costs that copy.
Eligible: SGLang's own conditions for the fusion that are not about FlashInfer (no DP attention, no CuTe DSL
fusion, no post-residual addition or fused quantisation, tokens >= 1), a 2-D contiguous input whose rows
are at most symmem.RMSNORM_MAX_HIDDEN wide, and at most the message size the group agreed for symmem's
all-reduce (so a batch symmem would not all-reduce is not fused either: it takes SGLang's unfused path and
the next backend). Every input of that decision is the same on every rank, so ranks never split.

The functions are looked up by SGLang when a boundary is built (the candidates) or when it runs (the
kernel), so rebinding the module attributes right after the modules load is enough; nothing of SGLang's
source is changed.
"""
import functools
import logging

from . import _common

log = logging.getLogger("symmem.integrations.sglang")

ENV = "SYMMEM_SGLANG_FUSE_RMSNORM"
BOUNDARY_MODULE = "sglang.srt.layers.layer_boundary.fusions.allreduce"
KERNEL_MODULE = "sglang.srt.layers.flashinfer_comm_fusion"
KERNEL = "flashinfer_allreduce_residual_rmsnorm"
_MARK = "_symmem_fusion"


def enabled():
    return _common.env_flag(ENV, "the fusion")


def _symmem_comm(coordinator):
    """The symmem-backed communicator of an SGLang GroupCoordinator, else None."""
    comm = getattr(coordinator, "torch_symm_mem_comm", None)
    return comm if _common.symmem_backed(comm) else None


def _takes(comm, x, residual):
    """Whether symmem's fused kernel takes this call (the tensors SGLang hands the fusion)."""
    return (comm is not None and x.dim() == 2 and x.shape[0] > 0 and residual is not None
            and residual.shape == x.shape and residual.dtype == x.dtype and residual.is_contiguous()
            and residual.device == x.device and comm.should_all_reduce_add_rmsnorm(x))


_norms = []  # SGLang's (GemmaRMSNorm, RMSNorm), once wrap_boundary has run: nothing imported at call time


def _norm_weight(norm):
    """The weight SGLang's forward_with_allreduce_fusion hands the kernel for this norm (Gemma: 1 + w, kept
    in gemma_weight), or None for a norm whose fusion method is not SGLang's own RMSNorm / GemmaRMSNorm one
    (a subclass that overrides it keeps SGLang's path) or that normalises part of the row only."""
    if getattr(norm, "variance_size_override", None) is not None:  # a norm over part of the row
        return None
    method = getattr(type(norm), "forward_with_allreduce_fusion", None)
    for cls, attr in zip(_norms, ("gemma_weight", "weight")):
        if method is getattr(cls, "forward_with_allreduce_fusion", object()):
            return getattr(norm, attr, None)
    return None


def _weight_ok(weight, x):
    return (weight is not None and weight.dim() == 1 and weight.shape[0] == x.shape[-1] and weight.dtype == x.dtype
            and weight.is_contiguous() and weight.device == x.device)


def _global_vetoes(add_norm):
    """SGLang's own reasons not to fuse at a boundary that are not about FlashInfer."""
    return add_norm.is_dp_attention_enabled() or add_norm.uses_cutedsl_ar_fusion()


def _wrap(module, name, make):
    original = getattr(module, name, None)
    if original is None or getattr(original, _MARK, False):
        return False
    wrapper = functools.wraps(original)(make(original))
    setattr(wrapper, _MARK, True)
    setattr(module, name, wrapper)
    return True


def wrap_boundary(module):
    """fusions/allreduce.py: the two candidates and the residual certificate."""
    from sglang.srt.layers import layernorm as ln
    from sglang.srt.layers.layer_boundary.residual import add_norm
    from sglang.srt.runtime_context import get_parallel

    _norms[:] = [ln.GemmaRMSNorm, ln.RMSNorm]

    def attn_input(original):
        def fused_attn_input(plan, owed, residual, forward_batch, post_residual_addition, *, fuses_quant,
                             keep_bf16):
            if (not fuses_quant and post_residual_addition is None and isinstance(owed, module.UnreducedOutput)
                    and owed.group is not None and owed.group is module.post_experts_reduction_group()
                    and not _global_vetoes(add_norm) and _takes(_symmem_comm(owed.group), owed.partial, residual)
                    and _weight_ok(_norm_weight(plan.norm), owed.partial)):
                return plan.norm.forward_with_allreduce_fusion(owed.partial, residual, use_attn_tp_group=False)
            return original(plan, owed, residual, forward_batch, post_residual_addition, fuses_quant=fuses_quant,
                            keep_bf16=keep_bf16)
        return fused_attn_input

    def ffn_input(original):
        def fused_ffn_input(plan, hidden_states, residual, forward_batch):
            if (not _global_vetoes(add_norm)
                    and _takes(_symmem_comm(get_parallel().attn_tp_group), hidden_states, residual)
                    and _weight_ok(_norm_weight(plan.norm), hidden_states)):
                return plan.norm.forward_with_allreduce_fusion(hidden_states, residual, use_attn_tp_group=True)
            return original(plan, hidden_states, residual, forward_batch)
        return fused_ffn_input

    def preserves(original):
        def flashinfer_preserves_residual(value, forward_batch):
            if _symmem_comm(get_parallel().attn_tp_group) is not None:
                return False
            return original(value, forward_batch)
        return flashinfer_preserves_residual

    done = [_wrap(module, "fused_attn_input", attn_input), _wrap(module, "fused_ffn_input", ffn_input),
            _wrap(module, "flashinfer_preserves_residual", preserves)]
    if all(done):
        log.debug("symmem: SGLang's all-reduce + RMSNorm fusion candidates wrapped")


def wrap_kernel(module):
    """flashinfer_comm_fusion.py: the kernel _forward_with_allreduce_fusion calls."""
    def kernel(original):
        def flashinfer_allreduce_residual_rmsnorm(input_tensor, residual, weight, eps=1e-6, max_token_num=2048,
                                                  use_oneshot=None, trigger_completion_at_end=False, fp32_acc=True,
                                                  use_attn_tp_group=True):
            comm = _symmem_comm(module.resolve_fusion_group(use_attn_tp_group=use_attn_tp_group)[2])
            if _takes(comm, input_tensor, residual) and _weight_ok(weight, input_tensor):
                return comm.all_reduce_add_rmsnorm(input_tensor, residual, weight, eps), residual
            return original(input_tensor, residual, weight, eps=eps, max_token_num=max_token_num,
                            use_oneshot=use_oneshot, trigger_completion_at_end=trigger_completion_at_end,
                            fp32_acc=fp32_acc, use_attn_tp_group=use_attn_tp_group)
        return flashinfer_allreduce_residual_rmsnorm

    _wrap(module, KERNEL, kernel)


def install():
    """Wrap the functions when (or, if already, now that) their modules are imported. Called from the
    SGLang plugin's register() when SYMMEM_SGLANG_FUSE_RMSNORM=1."""
    from ._imphook import when_imported

    when_imported(BOUNDARY_MODULE, wrap_boundary)
    when_imported(KERNEL_MODULE, wrap_kernel)

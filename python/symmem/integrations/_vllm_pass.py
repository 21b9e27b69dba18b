"""The vLLM compilation pass behind SYMMEM_VLLM_FUSE_RMSNORM (see vllm_fusion.py), and the op it emits.
Imported only inside a vLLM process that compiles a model with symmem serving its TP group."""
import operator

import torch
import torch._inductor.pattern_matcher as pm
from torch._higher_order_ops.auto_functionalize import auto_functionalized

import vllm.ir.ops
from vllm.compilation.passes.inductor_pass import InductorPass, enable_fake_mode
from vllm.compilation.passes.vllm_inductor_pass import VllmInductorPass, VllmPatternMatcherPass
from vllm.distributed import parallel_state

from . import _common

# ---------------------------------------------------------------------------------------------------------
# The op: what the pattern becomes. It decides per call, from shapes and the agreed cap only (the same on
# every rank of the group), between symmem's fused kernel and the sequence the pattern replaced.
# ---------------------------------------------------------------------------------------------------------
_lib = torch.library.Library("symmem_vllm", "FRAGMENT")
_lib.define("fused_all_reduce_add_rms_norm(Tensor input, Tensor(a!) residual, Tensor weight, float eps, "
            "str group_name) -> Tensor")
OP = torch.ops.symmem_vllm.fused_all_reduce_add_rms_norm.default


def _group(name):
    ref = parallel_state._groups.get(name)
    group = ref() if ref is not None else None
    if group is None:
        raise RuntimeError(f"symmem_vllm::fused_all_reduce_add_rms_norm: vLLM group '{name}' does not exist (any "
                           f"more) in this process")
    return group


def _symmem_comm(group):
    comm = getattr(getattr(group, "device_communicator", None), "symm_mem_comm", None)
    return comm if _common.symmem_backed(comm) else None


def _symmem_takes(comm, x, residual, weight):
    return (comm is not None and x.dim() == 2 and residual.shape == x.shape and residual.dtype == x.dtype
            and residual.is_contiguous() and weight is not None and weight.dim() == 1
            and weight.shape[0] == x.shape[-1] and weight.dtype == x.dtype and weight.is_contiguous()
            and comm.should_all_reduce_add_rmsnorm(x))


def _add_rms_norm(h, residual, weight, eps):
    """vLLM's fused_add_rms_norm of an all-reduced h: residual += h in place, returns the norm."""
    kernel = getattr(torch.ops._C, "fused_add_rms_norm", None)  # vLLM's CUDA kernel, in place on both
    if kernel is not None:
        kernel(h, residual, weight, eps)
        return h
    out, updated = vllm.ir.ops.fused_add_rms_norm(h, residual, weight, eps)
    residual.copy_(updated)
    return out


@torch.library.impl(_lib, "fused_all_reduce_add_rms_norm", "CUDA")
def _fused_all_reduce_add_rms_norm(input, residual, weight, eps, group_name):
    group = _group(group_name)
    comm = _symmem_comm(group)
    if _symmem_takes(comm, input, residual, weight):
        return comm.all_reduce_add_rmsnorm(input, residual, weight, eps)
    return _add_rms_norm(group._all_reduce_out_place(input), residual, weight, eps)


@torch.library.register_fake("symmem_vllm::fused_all_reduce_add_rms_norm", lib=_lib)
def _fused_all_reduce_add_rms_norm_fake(input, residual, weight, eps, group_name):
    if tuple(residual.shape) != tuple(input.shape):
        raise RuntimeError(f"symmem_vllm::fused_all_reduce_add_rms_norm: residual has shape {list(residual.shape)} "
                           f"but input has shape {list(input.shape)}")
    return torch.empty_like(input)


# ---------------------------------------------------------------------------------------------------------
# The pass.
# ---------------------------------------------------------------------------------------------------------
def _norm_of(match):
    return next(n for n in match.nodes if n.target == torch.ops.vllm_ir.fused_add_rms_norm.default)


def _same_dtypes(match):
    """The norm's input and weight have one dtype (vLLM's Gemma norms pass an fp32 1 + w: not this kernel's)."""
    norm = _norm_of(match)
    x, weight = norm.args[0], norm.args[2]
    return (isinstance(x, torch.fx.Node) and isinstance(weight, torch.fx.Node)
            and x.meta["val"].dtype == weight.meta["val"].dtype)


def _patterns(name, eps):
    """(pattern, replacement) pairs for one group and epsilon: with the updated residual, and without it
    (the last norm of a graph)."""
    def pattern(residual, input, weight):
        reduced = torch.ops.vllm.all_reduce.default(input, name)
        out, updated = vllm.ir.ops.fused_add_rms_norm(reduced, residual, weight, eps)
        return out, updated

    def replacement(residual, input, weight):
        fused = auto_functionalized(OP, input=input, residual=residual, weight=weight, eps=eps, group_name=name)
        return fused[0], fused[1]

    def pattern_out(residual, input, weight):
        return pattern(residual, input, weight)[0]

    def replacement_out(residual, input, weight):
        return replacement(residual, input, weight)[0]

    return (pattern, replacement), (pattern_out, replacement_out)


class SymmemAllReduceRMSNormPass(VllmPatternMatcherPass):
    """all_reduce(input) over `group_name` followed by fused_add_rms_norm(., residual, weight, eps)
    -> fused_all_reduce_add_rms_norm(input, residual, weight, eps), for the norm epsilons the model uses (the
    pattern matcher matches constants exactly)."""

    def __init__(self, config, group_name):
        super().__init__(config)
        self.group_name = group_name
        eps = {1e-5, 1e-6}
        hf = getattr(getattr(config, "model_config", None), "hf_text_config", None)
        for key in ("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon"):
            value = getattr(hf, key, None)
            if isinstance(value, float):
                eps.add(value)
        self.epsilons = sorted(eps)
        self.patterns = pm.PatternMatcherPass(pass_name="symmem_all_reduce_rms_norm_pass")
        self._register()

    @enable_fake_mode
    def _register(self):
        dtype = self.model_dtype if isinstance(self.model_dtype, torch.dtype) else torch.bfloat16
        device = self.device or "cuda"
        inputs = [torch.empty(5, 16, dtype=dtype, device=device), torch.empty(5, 16, dtype=dtype, device=device),
                  torch.empty(16, dtype=dtype, device=device)]
        for eps in self.epsilons:
            for search, replace in _patterns(self.group_name, eps):
                pm.register_replacement(search, replace, inputs, pm.fwd_only, self.patterns,
                                        extra_check=_same_dtypes)
            # The matcher remembers patterns by their graph, epsilon aside: forget them between epsilons.
            torch._inductor.pattern_matcher._seen_patterns.clear()

    def is_applicable_for_range(self, compile_range):
        return True  # the op chooses per call; no compile range needs to split at the cap

    @VllmInductorPass.time_and_log
    def __call__(self, graph):
        self.matched_count = self.patterns.apply(graph)

    def uuid(self):
        return InductorPass.hash_source(self, f"{self.group_name} {self.epsilons}")


class InPlaceAfter(VllmInductorPass):
    """vLLM's FixFunctionalizationPass, then the same for symmem's op: the functionalized call (which
    Inductor would otherwise run on a copy of the residual when the residual is a graph input, as it is
    after every attention split) becomes a call that updates the residual in place, as vLLM turns its own
    fused_add_rms_norm and FlashInfer's kernel back into in-place calls. A residual that something still
    reads after the call keeps the copy."""

    def __init__(self, config, inner):
        super().__init__(config)
        self.inner = inner

    def __call__(self, graph):
        self.inner(graph)
        order = {n: i for i, n in enumerate(graph.nodes)}
        for node in list(graph.nodes):
            if node.op == "call_function" and node.target is auto_functionalized and node.args[0] is OP:
                self._in_place(graph, node, order)

    @staticmethod
    def _in_place(graph, node, order):
        residual = node.kwargs["residual"]
        if any(u is not node and order.get(u, -1) > order[node] for u in residual.users):
            return
        with graph.inserting_before(node):
            call = graph.call_function(OP, kwargs=dict(node.kwargs))
        val = node.meta.get("val")
        if val is not None:
            call.meta["val"] = val[0]
        for user in list(node.users):
            if user.op == "call_function" and user.target is operator.getitem:
                user.replace_all_uses_with(call if user.args[1] == 0 else residual)
                graph.erase_node(user)
        if not node.users:
            graph.erase_node(node)

    def uuid(self):
        return InductorPass.hash_source(self, self.inner.uuid())

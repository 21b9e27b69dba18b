"""The SGLang drop-in against the installed SGLang (scripts/test_integrations.sh pins sglang==0.5.23), on CPU:
the entry point, SGLang's own load_plugins replacing the class, every attribute SGLang's srt/ reads on the
communicator, construction that disables instead of raising, SGLang's own GroupCoordinator over gloo
instantiating symmem's class, the .pth fallback and the guard of Inkling's multicast paths.
Skipped where SGLang is not installed."""
import importlib.util
import json
import logging
import os
import subprocess
import sys
import tempfile
import textwrap

import pytest

from test_integrations_common import FakeInner, LogCapture, run_ranks, scan_attribute_reads

HAVE_SGLANG = importlib.util.find_spec("sglang") is not None
if HAVE_SGLANG:
    import torch
    import torch.distributed as dist

    from symmem.integrations import _common, sglang as integ

TARGET_FILE = "distributed/device_communicators/torch_symm_mem.py"
# What SGLang 0.5.23 is known to read (INTEGRATION.md): the scan must find at least these, so that a
# scanner that silently finds nothing cannot pass.
KNOWN_READS = {"disabled", "should_torch_symm_mem_allreduce", "all_reduce", "buffer", "dtype", "group", "max_size",
               "world_size"}


def _python(code, **env):
    """Run code in a fresh interpreter (SGLang loads plugins once per process) and parse its last line."""
    full = dict(os.environ, **env)
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full, capture_output=True, text=True,
                       timeout=300)
    if p.returncode != 0:
        raise AssertionError(f"child failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


LOAD_PLUGINS = """
    import json, sys
    from sglang.srt.plugins import load_plugins
    load_plugins()
    import sglang.srt.distributed.device_communicators.torch_symm_mem as m
    import symmem.integrations.sglang as s
    cls = m.TorchSymmMemCommunicator
    stock = s._stock.get("class")
    print(json.dumps({"cls": f"{cls.__module__}.{cls.__qualname__}",
                      "stock": stock and f"{stock.__module__}.{stock.__qualname__}"}))
"""
OURS = "symmem.integrations.sglang.SymmemTorchSymmMemCommunicator"
SGLANGS = "sglang.srt.distributed.device_communicators.torch_symm_mem.TorchSymmMemCommunicator"


def _construct_body(rank, world, device):
    os.environ["SYMMEM_SGLANG_GROUPS"] = "all"  # the WORLD group has no SGLang name; tp alone is the default
    with LogCapture("symmem.integrations.sglang") as cap:
        c = integ.SymmemTorchSymmMemCommunicator(group=dist.group.WORLD, device=device)
    x = torch.ones(8)
    return (c.disabled, c.backend, c.world_size, c.should_torch_symm_mem_allreduce(x), c.all_reduce(x),
            cap.at_least(logging.INFO))


def _group_coordinator_body(rank, world):
    from sglang.srt.plugins import load_plugins

    load_plugins()  # what every SGLang scheduler process does first
    import sglang.srt.distributed.parallel_state as ps

    ps.set_torch_symm_mem_all_reduce(True)  # what --enable-torch-symm-mem sets
    made = {}
    real_gather = dist.all_gather_object
    for name in ("tp", "pp"):
        calls = []
        dist.all_gather_object = lambda *a, **k: calls.append(1) or real_gather(*a, **k)
        try:
            gc = ps.init_model_parallel_group([[0, 1]], rank, "gloo", use_pynccl=False, use_custom_allreduce=False,
                                              use_mscclpp=False, group_name=name)
        finally:
            dist.all_gather_object = real_gather
        comm = gc.torch_symm_mem_comm
        y = gc.all_reduce(torch.full((16,), float(rank + 1)))  # still reduces (gloo), nothing broke
        made[name] = (f"{type(comm).__module__}.{type(comm).__qualname__}", comm.disabled, comm.backend,
                      len(calls), y.tolist())
    return made


def _attribute_body(rank, world, attrs):
    """Which scanned attributes are missing on our class in each of its states."""
    c = integ.SymmemTorchSymmMemCommunicator(dist.group.WORLD, torch.device("cpu"))
    states = {"disabled": c}
    on = integ.SymmemTorchSymmMemCommunicator(dist.group.WORLD, torch.device("cpu"))
    on._adopt(_common.Outcome(backend="symmem", inner=FakeInner(dist.group.WORLD, "cpu"), max_size=1 << 20,
                              world_size=world, rank=rank))
    states["symmem"] = on
    stock_cls = integ._stock.get("class")
    if stock_cls is not None:  # SGLang's own class on CPU (it disables itself early, with few attributes)
        s = integ.SymmemTorchSymmMemCommunicator(dist.group.WORLD, torch.device("cpu"))
        s._adopt_stock(stock_cls(dist.group.WORLD, torch.device("cpu")))
        states["torch"] = s
    return {k: sorted(a for a in attrs if not hasattr(v, a)) for k, v in states.items()}


@pytest.mark.skipif(not HAVE_SGLANG, reason="SGLang is not installed")
class TestSGLangPlugin:
    def test_entry_point_is_declared_and_loads_register(self):
        from importlib import metadata

        eps = [ep for ep in metadata.entry_points(group="sglang.srt.plugins") if ep.name == "symmem"]
        assert len(eps) == 1, "no single 'symmem' entry point in group sglang.srt.plugins"
        assert eps[0].value == "symmem.integrations.sglang:register"
        assert eps[0].load() is integ.register

    def test_load_plugins_replaces_the_class(self):
        got = _python(LOAD_PLUGINS)
        assert got == {"cls": OURS, "stock": SGLANGS}

    def test_mode_off_and_sglangs_whitelist_leave_the_class(self):
        assert _python(LOAD_PLUGINS, SYMMEM_SGLANG_MODE="off")["cls"] == SGLANGS
        assert _python(LOAD_PLUGINS, SGLANG_PLUGINS="some-other-plugin")["cls"] == SGLANGS

    def test_register_is_idempotent_and_survives_a_broken_sglang(self):
        got = _python("""
            import json, sys
            import symmem.integrations.sglang as s
            from sglang.srt.plugins.hook_registry import HookRegistry
            s.register(); s.register()
            n = len(HookRegistry._hooks[s.TARGET])
            s._registered = False
            sys.modules["sglang.srt.plugins.hook_registry"] = None   # an SGLang without HookRegistry
            s.register()                                             # logs, does not raise
            print(json.dumps({"hooks": n}))
        """)
        assert got == {"hooks": 1}

    def test_every_attribute_sglang_reads_exists(self):
        root = importlib.util.find_spec("sglang.srt").submodule_search_locations[0]
        reads = scan_attribute_reads(root, "torch_symm_mem_comm", skip=(TARGET_FILE,))
        assert KNOWN_READS <= set(reads), f"scan found {sorted(reads)}, expected at least {KNOWN_READS}"
        missing = run_ranks(_attribute_body, 2, sorted(reads))[0]
        for state, attrs in missing.items():
            assert attrs == [], f"{state}: SGLang reads {attrs} ({[reads[a][:2] for a in attrs]})"

    def test_construction_disables_without_raising(self):
        for device in ("cpu", torch.device("cpu"), 0):
            res = run_ranks(_construct_body, 2, device)
            for disabled, backend, world, eligible, result, said in res:
                assert (disabled, backend, world, eligible, result) == (True, "off", 2, False, None)
            want = "not a CUDA device" if device != 0 else "CUDA is not available"
            assert len(res[0][5]) == 1, res[0][5]
            assert want in res[0][5][0]
        disabled, backend, world, _, _, said = run_ranks(_construct_body, 1, "cpu")[0]
        assert (disabled, backend, world) == (True, "off", 1)
        assert "world size 1" in said[0]

    def test_sixteen_ranks_disable_together_without_raising(self):
        # 16 ranks (SYMMEM_MAX_RANKS), as on a 16-GPU host: one gather, one reason, rank 0 says it
        res = run_ranks(_construct_body, 16, "cpu", timeout=180)
        for disabled, backend, world, eligible, result, said in res:
            assert (disabled, backend, world, eligible, result) == (True, "off", 16, False, None)
        assert len(res[0][5]) == 1, res[0][5]
        assert "not a CUDA device" in res[0][5][0]

    def test_group_coordinator_instantiates_symmem(self):
        res = run_ranks(_group_coordinator_body, 2, context="spawn", timeout=300)
        for made in res:
            tp_cls, tp_disabled, tp_backend, tp_gathers, tp_sum = made["tp"]
            assert tp_cls == OURS
            assert (tp_disabled, tp_backend) == (True, "off")  # a CPU device, here
            assert tp_gathers == 1, "tp: one gather of facts, then off for every rank"
            assert tp_sum == [3.0] * 16
            pp_cls, pp_disabled, _, pp_gathers, _ = made["pp"]
            assert (pp_cls, pp_disabled, pp_gathers) == (OURS, True, 0)

    def test_symmem_dispatch_and_cap(self):
        c = integ.SymmemTorchSymmMemCommunicator.__new__(integ.SymmemTorchSymmMemCommunicator)
        c.__dict__.update(disabled=True, backend="off", device=torch.device("cpu"), _stock=None, _inner=None)

        class Inner:
            calls = []

            def should_torch_symm_mem_allreduce(self, x):
                return x.dtype == torch.bfloat16

            def all_reduce(self, x, *, out=None):
                Inner.calls.append(out is x)
                return x if out is None else out

            def close(self):
                Inner.calls.append("closed")
        c._adopt(_common.Outcome(backend="symmem", inner=Inner(), max_size=1024, world_size=2))
        small, big = torch.zeros(512, dtype=torch.bfloat16), torch.zeros(513, dtype=torch.bfloat16)
        assert c.should_torch_symm_mem_allreduce(small)
        assert not c.should_torch_symm_mem_allreduce(big)
        assert not c.should_torch_symm_mem_allreduce(torch.zeros(8))        # the inner's dtype rule
        assert c.all_reduce(big) is None
        assert c.all_reduce(small, out=small) is small                        # in place
        c.close()
        assert not c.should_torch_symm_mem_allreduce(small)
        assert Inner.calls == [True, "closed"]

    def test_pth_fallback_replaces_without_loading_symmem_at_start(self):
        with tempfile.TemporaryDirectory() as site_dir:
            subprocess.run([sys.executable, "-m", "symmem.integrations", "install-pth", "--dir", site_dir],
                           check=True, capture_output=True)
            assert os.path.exists(os.path.join(site_dir, "symmem-sglang.pth"))
            got = _python(f"""
                import json, site, sys
                site.addsitedir({site_dir!r})            # runs the .pth as interpreter start would
                early = sorted(m for m in sys.modules if m == "symmem" or m.startswith("symmem."))
                import sglang.srt.distributed.parallel_state  # noqa - as SGLang does, no plugins here
                import sglang.srt.distributed.device_communicators.torch_symm_mem as m
                import symmem.integrations.sglang as s
                cls, stock = m.TorchSymmMemCommunicator, s._stock.get("class")
                print(json.dumps({{"early": early, "cls": f"{{cls.__module__}}.{{cls.__qualname__}}",
                                   "stock": f"{{stock.__module__}}.{{stock.__qualname__}}"}}))
            """, SGLANG_PLUGINS="none")
            assert got == {"early": [], "cls": OURS, "stock": SGLANGS}
            subprocess.run([sys.executable, "-m", "symmem.integrations", "uninstall-pth", "--dir", site_dir],
                           check=True, capture_output=True)
            assert not os.path.exists(os.path.join(site_dir, "symmem-sglang.pth"))

    def test_inkling_multicast_paths_are_guarded_where_symmem_serves(self):
        if importlib.util.find_spec(integ.INKLING_MODULE) is None:
            pytest.skip("this SGLang has no Inkling model code")
        got = _python("""
            import json, types, torch
            import symmem.integrations.sglang as s
            from symmem.integrations import _common
            s.install_import_hooks(replace=False)
            import sglang.srt.models.inkling_common.kernels.comm as k
            ours = s.SymmemTorchSymmMemCommunicator.__new__(s.SymmemTorchSymmMemCommunicator)
            ours.__dict__.update(disabled=True, backend="off", _stock=None, _inner=None, device=torch.device("cpu"))
            class Inner:
                def should_torch_symm_mem_allreduce(self, x): return True
                def all_reduce(self, x, *, out=None): return x
            ours._adopt(_common.Outcome(backend="symmem", inner=Inner(), max_size=1 << 20, world_size=4))
            calls = []
            def all_reduce(t):
                calls.append(t.numel()); return t * 4
            group = types.SimpleNamespace(torch_symm_mem_comm=ours, world_size=4, all_reduce=all_reduce)
            x, shared, out = torch.ones(2, 8), torch.ones(2, 8), torch.empty(2, 8)
            res = {
                "guarded": sorted(n for n in dir(k) if getattr(getattr(k, n), "_symmem_guard", False)),
                "buffer": k.get_ar_buffer(group, 2, 8, torch.bfloat16),
                "mm_comm": k._symm_mem_comm(group, x, 16),
                "fusable": [k.ar_sconv_norm_fusable(group, None, 2, 8, torch.bfloat16),
                            k.scattered_ar_sconv_fusable(group, None, 2, 8, torch.bfloat16),
                            k.fullwidth_ar_sconv_fusable(group, None, 2, 8, torch.bfloat16)],
                "ensure": k.ensure_inkling_ar_resources(group),
                "ar": k.symm_mem_all_reduce(x, group).tolist()[0][0],
                "ar_shared_out": k.symm_mem_all_reduce(x, group, output=out, shared=shared) is out and out[0][0].item(),
                "calls": calls,
            }
            print(json.dumps(res))
        """)
        assert got["guarded"] == sorted(["ensure_inkling_ar_resources", "get_ar_buffer", "_symm_mem_comm",
                                         "ar_sconv_norm_fusable", "scattered_ar_sconv_fusable",
                                         "fullwidth_ar_sconv_fusable", "symm_mem_all_reduce"])
        assert (got["buffer"], got["mm_comm"], got["fusable"], got["ensure"]) == (None, None, [False] * 3, None)
        assert (got["ar"], got["ar_shared_out"], got["calls"]) == (4.0, 8.0, [16, 16])


FUSION = """
    import json, os, types, torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx
    from sglang.srt.plugins import load_plugins
    import sglang.srt.layers.layer_boundary.fusions.allreduce as a   # imported before the plugin loads
    load_plugins()
    import sglang.srt.layers.flashinfer_comm_fusion as f
    import sglang.srt.layers.layernorm as ln
    from sglang.srt.layers.layer_boundary.output import UnreducedOutput
    from sglang.srt.runtime_context import get_context, get_parallel
    import symmem.integrations.sglang as s
    from symmem.integrations import _common
    from symmem.torch import _comm

    names = ("fused_attn_input", "fused_ffn_input", "flashinfer_preserves_residual")
    res = {"wrapped": [n for n in names if getattr(getattr(a, n), "_symmem_fusion", False)]
                      + (["kernel"] if getattr(f.flashinfer_allreduce_residual_rmsnorm, "_symmem_fusion", False) else [])}

    # symmem serving a 2-rank TP group (no GPU: fake CUDA tensors, the ops' fakes)
    inner = _comm.SymmemCommunicator.__new__(_comm.SymmemCommunicator)
    inner.__dict__.update(disabled=False, group=None, world_size=2, rank=0, device=torch.device("cuda", 0),
                          max_size=64 << 20, comm=None, group_name="fake-tp")
    inner._init_state()
    ours = s.SymmemTorchSymmMemCommunicator.__new__(s.SymmemTorchSymmMemCommunicator)
    ours.__dict__.update(disabled=True, backend="off", _stock=None, _inner=None, device=torch.device("cuda", 0),
                         group=None, rank=0)
    ours._adopt(_common.Outcome(backend="symmem", inner=inner, max_size=512 << 10, world_size=2))
    tp = types.SimpleNamespace(torch_symm_mem_comm=ours, world_size=2, rank_in_group=0)
    unserved = types.SimpleNamespace(torch_symm_mem_comm=None, world_size=2, rank_in_group=0)
    get_context().override_server_args(tp_size=2).install()

    def ops(fn, *args):
        # the collective and norm kernels a call runs, from its graph
        gm = make_fx(fn, tracing_mode="fake")(*args)
        return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"
                and ("reduce" in str(n.target) or "norm" in str(n.target))]

    with FakeTensorMode():
        norm = ln.RMSNorm(4096, eps=1e-5)
        norm.weight = torch.nn.Parameter(torch.empty(4096, device="cuda", dtype=torch.bfloat16), requires_grad=False)
        gemma = ln.GemmaRMSNorm(4096)
        gemma.weight = torch.nn.Parameter(torch.empty(4096, device="cuda", dtype=torch.bfloat16), requires_grad=False)
        gemma.gemma_weight = torch.empty(4096, device="cuda", dtype=torch.bfloat16)
        fp32norm = ln.RMSNorm(4096)
        fp32norm.weight = torch.nn.Parameter(torch.empty(4096, device="cuda"), requires_grad=False)
        partnorm = ln.RMSNorm(4096, var_hidden_size=2048)
        partnorm.weight = torch.nn.Parameter(torch.empty(4096, device="cuda", dtype=torch.bfloat16),
                                             requires_grad=False)
        plan, gplan = types.SimpleNamespace(norm=norm), types.SimpleNamespace(norm=gemma)
        x, r = (torch.empty(8, 4096, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        big = torch.empty(129, 4096, device="cuda", dtype=torch.bfloat16)
        with get_parallel().override(attn_tp_size=2, attn_tp_rank=0, attn_tp_group=tp, tp_group=tp, tp_size=2,
                                     moe_ep_size=1, moe_tp_size=2, moe_tp_group=tp):
            ffn = a.fused_ffn_input(plan, x, r, None)
            attn = a.fused_attn_input(plan, UnreducedOutput(partial=x, group=tp), r, None, None, fuses_quant=False,
                                      keep_bf16=False)
            kernel = f.flashinfer_allreduce_residual_rmsnorm(x, r, norm.weight, 1e-5, use_attn_tp_group=True)
            res["taken"] = {k: v is not None and v[1] is r and tuple(v[0].shape) == (8, 4096)
                            for k, v in (("ffn", ffn), ("attn", attn), ("kernel", kernel))}
            res["graphs"] = None if not all(res["taken"].values()) else {
                "ffn": ops(lambda x, r: a.fused_ffn_input(plan, x, r, None)[0], x, r),
                "gemma": ops(lambda x, r: a.fused_ffn_input(gplan, x, r, None)[0], x, r),
                "attn": ops(lambda x, r: a.fused_attn_input(plan, UnreducedOutput(partial=x, group=tp), r, None,
                                                            None, fuses_quant=False, keep_bf16=False)[0], x, r),
            }
            graphs = []
            compiled = None if res["graphs"] is None else torch.compile(lambda x, r: a.fused_ffn_input(plan, x, r, None)[0] * 2, fullgraph=True,
                                     backend=lambda gm, inputs: graphs.append(gm) or gm.forward)
            if compiled is not None:  # Dynamo through the wrappers and SGLang's path: one graph, symmem's op in it
                compiled(x, r)
                res["compiled"] = [str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"]
            res["kernel fp32 weight"] = ops(lambda x, r: f.flashinfer_allreduce_residual_rmsnorm(x, r, r[0].float(),
                                                                                               1e-5)[0], x, r)
            res["declined"] = {
                "past the cap": a.fused_ffn_input(plan, big, torch.empty_like(big), None),
                "fp32 residual": a.fused_ffn_input(plan, x, r.float(), None),
                "post_residual_addition": a.fused_attn_input(plan, UnreducedOutput(partial=x, group=tp), r, None, r,
                                                             fuses_quant=False, keep_bf16=False),
                "quant": a.fused_attn_input(plan, UnreducedOutput(partial=x, group=tp), r, None, None,
                                            fuses_quant=True, keep_bf16=False),
                "fp32 norm weight": a.fused_ffn_input(types.SimpleNamespace(norm=fp32norm), x, r, None),
                "partial-row norm": a.fused_ffn_input(types.SimpleNamespace(norm=partnorm), x, r, None),
            }
            res["declined"] = {k: v is not None for k, v in res["declined"].items()}
            res["preserves"] = a.flashinfer_preserves_residual(r, None)
        with get_parallel().override(attn_tp_size=2, attn_tp_rank=0, attn_tp_group=unserved, tp_group=unserved,
                                     tp_size=2, moe_ep_size=1, moe_tp_size=2, moe_tp_group=unserved):
            res["unserved"] = [a.fused_ffn_input(plan, x, r, None) is not None,
                               a.fused_attn_input(plan, UnreducedOutput(partial=x, group=unserved), r, None, None,
                                                  fuses_quant=False, keep_bf16=False) is not None,
                               a.flashinfer_preserves_residual(r, None)]
            res["unserved kernel"] = ops(lambda x, r: f.flashinfer_allreduce_residual_rmsnorm(x, r, norm.weight,
                                                                                            1e-5)[0], x, r)
    print(json.dumps(res))
"""


@pytest.mark.skipif(not HAVE_SGLANG, reason="SGLang is not installed")
class TestSGLangFusion:
    """SYMMEM_SGLANG_FUSE_RMSNORM: SGLang's own RMSNorm / GemmaRMSNorm fusion path, its layer-boundary
    candidates and its kernel seam, running symmem's op where symmem serves the group (fake CUDA tensors:
    the graphs show which kernel runs), and SGLang's code everywhere else."""

    def test_off_by_default(self):
        got = _python(FUSION)
        assert got["wrapped"] == []
        assert got["taken"] == {"ffn": False, "attn": False, "kernel": False}
        assert got["graphs"] is None
        assert got["unserved"] == [False, False, False]

    def test_on_takes_the_batches_symmem_serves(self):
        got = _python(FUSION, SYMMEM_SGLANG_FUSE_RMSNORM="1")
        assert got["wrapped"] == ["fused_attn_input", "fused_ffn_input", "flashinfer_preserves_residual",
                                  "kernel"]
        assert got["taken"] == {"ffn": True, "attn": True, "kernel": True}
        ours = ["symmem.all_reduce_add_rmsnorm.default"]
        assert got["graphs"] == {"ffn": ours, "gemma": ours, "attn": ours}
        assert got["compiled"] == ours + ["<built-in function mul>"]
        assert got["declined"] == {k: False for k in got["declined"]}, got["declined"]
        assert not got["preserves"], "symmem updates the residual in place: no preservation certificate"
        assert got["unserved"] == [False, False, False]
        sglangs = ["sglang.flashinfer_allreduce_residual_rmsnorm.default"]
        assert got["kernel fp32 weight"] == sglangs, "a weight symmem does not take goes to SGLang's kernel"
        assert got["unserved kernel"] == sglangs

    def test_bad_setting_keeps_it_off(self):
        got = _python(FUSION, SYMMEM_SGLANG_FUSE_RMSNORM="maybe")
        assert got["wrapped"] == []

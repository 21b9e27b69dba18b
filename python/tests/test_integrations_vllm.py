"""The vLLM drop-in against the installed vLLM (scripts/test_integrations.sh pins vllm==0.33.0), on CPU: the
entry point, vLLM's own load_general_plugins rebinding SymmMemCommunicator (before and after the module is
imported), register() idempotent and never raising, every attribute vLLM reads on the communicator,
construction that disables instead of raising, VLLM_BATCH_INVARIANT and DBO refused.
Skipped where vLLM is not installed."""
import importlib.util
import json
import logging
import os
import subprocess
import sys
import textwrap
import threading

import pytest

from test_integrations_common import FakeInner, LogCapture, run_ranks, scan_attribute_reads

HAVE_VLLM = importlib.util.find_spec("vllm") is not None
if HAVE_VLLM:
    import torch
    import torch.distributed as dist

    from symmem.integrations import _common, vllm as integ

TARGET_FILE = "distributed/device_communicators/symm_mem.py"
KNOWN_READS = {"disabled", "should_use_symm_mem", "all_reduce"}
OURS = "symmem.integrations.vllm.SymmemSymmMemCommunicator"
VLLMS = "vllm.distributed.device_communicators.symm_mem.SymmMemCommunicator"


def _python(code, **env):
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=dict(os.environ, **env),
                       capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise AssertionError(f"child failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def _name(cls):
    return cls and f"{cls.__module__}.{cls.__qualname__}"


def _construct_body(rank, world, device, env):
    os.environ.update(env)
    calls = []
    real = dist.all_gather_object
    dist.all_gather_object = lambda *a, **k: calls.append(1) or real(*a, **k)
    with LogCapture("vllm.plugins.symmem") as cap:
        c = integ.SymmemSymmMemCommunicator(dist.group.WORLD, device)
    dist.all_gather_object = real
    x = torch.ones(8, dtype=torch.bfloat16)
    return (c.disabled, c.backend, c.world_size, c.should_use_symm_mem(x), c.all_reduce(x),
            cap.at_least(logging.INFO), len(calls))


def _dbo_body(rank, world):
    from vllm.config import DeviceConfig, ParallelConfig, VllmConfig, set_current_vllm_config

    config = VllmConfig(parallel_config=ParallelConfig(enable_dbo=True, all2all_backend="deepep_low_latency"),
                        device_config=DeviceConfig(device="cpu"))
    calls = []
    real = dist.all_gather_object
    dist.all_gather_object = lambda *a, **k: calls.append(1) or real(*a, **k)
    with set_current_vllm_config(config), LogCapture("vllm.plugins.symmem") as cap:
        c = integ.SymmemSymmMemCommunicator(dist.group.WORLD, torch.device("cuda", 0))
    dist.all_gather_object = real
    return c.disabled, len(calls), cap.at_least(logging.INFO)


def _attribute_body(rank, world, attrs):
    states = {"disabled": integ.SymmemSymmMemCommunicator(dist.group.WORLD, torch.device("cpu"))}
    on = integ.SymmemSymmMemCommunicator(dist.group.WORLD, torch.device("cpu"))
    on._adopt(_common.Outcome(backend="symmem", inner=FakeInner(dist.group.WORLD, "cpu"), max_size=1 << 20,
                              world_size=world, rank=rank))
    states["symmem"] = on
    return {k: sorted(a for a in attrs if not hasattr(v, a)) for k, v in states.items()}


@pytest.mark.skipif(not HAVE_VLLM, reason="vLLM is not installed")
class TestVLLMPlugin:
    def test_entry_point_is_declared_and_loads_register(self):
        from importlib import metadata

        eps = [ep for ep in metadata.entry_points(group="vllm.general_plugins") if ep.name == "symmem"]
        assert len(eps) == 1, "no single 'symmem' entry point in group vllm.general_plugins"
        assert eps[0].value == "symmem.integrations.vllm:register"
        assert eps[0].load() is integ.register

    def test_load_general_plugins_rebinds_the_class(self):
        code = """
            import json, sys
            {before}
            import vllm.plugins
            vllm.plugins.load_general_plugins()
            loaded_early = "vllm.distributed.device_communicators.symm_mem" in sys.modules
            from vllm.distributed.device_communicators.symm_mem import SymmMemCommunicator as cls
            import vllm.distributed.device_communicators.symm_mem as m
            import symmem.integrations.vllm as s
            name = lambda c: c and f"{{c.__module__}}.{{c.__qualname__}}"
            print(json.dumps({{"early": loaded_early, "cls": name(cls), "attr": name(m.SymmMemCommunicator),
                              "stock": name(s._stock.get("class")), "stale": name(getattr(sys.modules.get("t"), "C", None))}}))
        """
        # Plugins load before vLLM imports the module (the normal order): register imports nothing of vLLM.
        got = _python(code.format(before=""))
        assert got == {"early": False, "cls": OURS, "attr": OURS, "stock": VLLMS, "stale": None}
        # Module already imported, and bound by name in another module: both rebound at once.
        before = ("import types; t = types.ModuleType('t'); sys.modules['t'] = t; "
                  "from vllm.distributed.device_communicators.symm_mem import SymmMemCommunicator as C; t.C = C")
        got = _python(code.format(before=before))
        assert got == {"early": True, "cls": OURS, "attr": OURS, "stock": VLLMS, "stale": OURS}
        # Off: vLLM's own class stays.
        got = _python(code.format(before=""), SYMMEM_VLLM_MODE="off")
        assert (got["cls"], got["stock"]) == (VLLMS, None)

    def test_register_is_idempotent_and_never_raises(self):
        got = _python("""
            import json
            import symmem.integrations.vllm as s
            from symmem.integrations import _imphook
            s.register(); s.register()
            finder = next(f for f in __import__("sys").meta_path if getattr(f, _imphook._MARK, False))
            n = len(finder.callbacks[s.TARGET_MODULE])
            s._registered = False
            def broken(*a, **k): raise RuntimeError("no hooks today")
            s.when_imported = broken
            s.register()                      # logs, returns
            print(json.dumps({"callbacks": n, "registered": s._registered}))
        """)
        assert got == {"callbacks": 1, "registered": True}

    def test_every_attribute_vllm_reads_exists(self):
        root = importlib.util.find_spec("vllm").submodule_search_locations[0]
        reads = scan_attribute_reads(root, "symm_mem_comm", skip=(TARGET_FILE,))
        assert KNOWN_READS <= set(reads), f"scan found {sorted(reads)}, expected at least {KNOWN_READS}"
        for state, attrs in run_ranks(_attribute_body, 2, sorted(reads))[0].items():
            assert attrs == [], f"{state}: vLLM reads {attrs} ({[reads[a][:2] for a in attrs]})"

    def test_construction_disables_without_raising(self):
        res = run_ranks(_construct_body, 2, "cpu", {})
        for disabled, backend, world, eligible, result, said, gathers in res:
            assert (disabled, backend, world, eligible, result, gathers) == (True, "off", 2, False, None, 1)
        assert len(res[0][5]) == 1
        assert "not a CUDA device" in res[0][5][0]
        res = run_ranks(_construct_body, 1, 0, {})[0]
        assert res[:3] + (res[6],) == (True, "off", 1, 0)

    def test_sixteen_ranks_disable_together_without_raising(self):
        # 16 ranks (SYMMEM_MAX_RANKS), as on a 16-GPU host: one gather, one reason, rank 0 says it
        res = run_ranks(_construct_body, 16, "cpu", {}, timeout=180)
        for disabled, backend, world, eligible, result, said, gathers in res:
            assert (disabled, backend, world, eligible, result, gathers) == (True, "off", 16, False, None, 1)
        assert len(res[0][5]) == 1
        assert "not a CUDA device" in res[0][5][0]

    def test_batch_invariant_is_honoured_before_any_collective(self):
        res = run_ranks(_construct_body, 2, torch.device("cuda", 0), {"VLLM_BATCH_INVARIANT": "1"})
        for disabled, backend, _, _, _, _, gathers in res:
            assert (disabled, backend, gathers) == (True, "off", 0)
        assert len(res[0][5]) == 1
        assert "VLLM_BATCH_INVARIANT" in res[0][5][0]

    def test_dbo_is_refused_at_init(self):
        res = run_ranks(_dbo_body, 2, timeout=300)
        for disabled, gathers, _ in res:
            assert (disabled, gathers) == (True, 0)
        assert "DBO" in res[0][2][0]

    def test_calls_from_a_micro_batch_thread_are_declined(self):
        from vllm.v1.worker import ubatching

        c = integ.SymmemSymmMemCommunicator.__new__(integ.SymmemSymmMemCommunicator)
        c.__dict__.update(disabled=True, backend="off", _stock=None, _inner=None, _ubatch=None)

        class Inner:
            def should_use_symm_mem(self, x):
                return True

            def all_reduce(self, x, *, out=None):
                return x + 1
        c._adopt(_common.Outcome(backend="symmem", inner=Inner(), max_size=64, world_size=2))
        x = torch.zeros(16)
        assert c.should_use_symm_mem(x)
        assert c.all_reduce(x).tolist() == [1.0] * 16
        assert c.all_reduce(torch.zeros(17)) is None          # above the cap: None, vLLM's convention
        ubatching._THREAD_ID_TO_CONTEXT[threading.get_ident()] = 0
        try:
            assert not c.should_use_symm_mem(x)
            assert c.all_reduce(x) is None
        finally:
            del ubatching._THREAD_ID_TO_CONTEXT[threading.get_ident()]
        assert c.should_use_symm_mem(x)

    def test_max_size_override_and_force_multimem_are_accepted(self):
        c = integ.SymmemSymmMemCommunicator(None, "cpu", force_multimem=True, max_size_override=4096)
        assert c.disabled  # no group: disabled with a reason, never an exception
        assert c.force_multimem


FUSION = """
    import json, types, torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx
    from vllm.plugins import load_general_plugins
    load_general_plugins()
    import vllm.ir.ops
    from vllm.compilation.passes import pass_manager
    from vllm.distributed import parallel_state
    from vllm.config import DeviceConfig, VllmConfig
    import symmem.integrations.vllm as v
    from symmem.integrations import _common
    from symmem.torch import _comm

    res = {"wrapped": getattr(pass_manager.PostGradPassManager.configure, "_symmem_fusion", False)}
    # symmem serving a 2-rank TP group (no GPU: fake CUDA tensors and the ops' fakes)
    inner = _comm.SymmemCommunicator.__new__(_comm.SymmemCommunicator)
    inner.__dict__.update(disabled=False, group=None, world_size=2, rank=0, device=torch.device("cuda", 0),
                          max_size=64 << 20, comm=None, group_name="fake-tp")
    inner._init_state()
    ours = v.SymmemSymmMemCommunicator.__new__(v.SymmemSymmMemCommunicator)
    ours.__dict__.update(disabled=True, backend="off", _stock=None, _inner=None, _ubatch=None,
                         device=torch.device("cuda", 0), group=None, rank=0)
    ours._adopt(_common.Outcome(backend="symmem", inner=inner, max_size=512 << 10, world_size=2))
    # what vLLM's all-reduce gives when both ranks hold the same tensor
    tp = types.SimpleNamespace(unique_name="tp:0", device_communicator=types.SimpleNamespace(symm_mem_comm=ours),
                               _all_reduce_out_place=lambda x: x * 2)
    if SERVED:
        parallel_state._TP = tp
    parallel_state._groups["tp:0"] = lambda: tp
    manager = pass_manager.PostGradPassManager()
    manager.configure(VllmConfig(device_config=DeviceConfig(device="cpu")))
    res["passes"] = [type(p).__name__ for p in manager.passes]
    res["fix"] = type(manager.fix_functionalization).__name__

    def layer(x1, x2, residual, w, w32):
        def step(x, group, weight, eps):
            return vllm.ir.ops.fused_add_rms_norm(torch.ops.vllm.all_reduce.default(x, group), residual, weight, eps)
        out, residual = step(x1, "tp:0", w, 1e-6)
        out, residual = step(out * 2 + x2, "tp:0", w, 1e-5)
        out, residual = step(out, "pp:0", w, 1e-6)         # another group: not symmem's
        out, residual = step(out, "tp:0", w32, 1e-6)       # an fp32 weight (vLLM's Gemma form): not this kernel
        out, residual = step(out, "tp:0", w, 1e-6)         # the last norm: the residual is not returned
        return out

    def ops(gm):
        names = []
        for n in gm.graph.nodes:
            if n.op == "call_function":
                target = n.args[0] if "auto_functionalized" in str(n.target) else n.target
                if "all_reduce" in str(target) or "rms_norm" in str(target):
                    names.append(("functional " if target is not n.target else "") + str(target))
        return names

    with FakeTensorMode():
        x = torch.empty(8, 4096, device="cuda", dtype=torch.bfloat16)
        w = torch.empty(4096, device="cuda", dtype=torch.bfloat16)
        w32 = torch.empty(4096, device="cuda", dtype=torch.float32)
        args = (x, x.clone(), x.clone(), w, w32)
        gm = make_fx(layer, tracing_mode="fake")(*args)
        fusion = [p for p in manager.passes if type(p).__name__ == "SymmemAllReduceRMSNormPass"]
        if fusion:
            fusion[0](gm.graph)
            gm.recompile()
            res["matched"] = fusion[0].matched_count
            res["rewritten"] = ops(gm)
            manager.fix_functionalization.inner = lambda graph: None   # vLLM's own step: not this test's
            manager.fix_functionalization(gm.graph)
            gm.graph.lint()
            gm.recompile()
            res["in_place"] = ops(gm)
            res["runs"] = tuple(gm(*args).shape) == (8, 4096)
            from symmem.integrations import _vllm_pass as vp

            def decide(x):
                return vp._fused_all_reduce_add_rms_norm(x, torch.empty_like(x), w, 1e-6, "tp:0")
            res["decisions"] = [ops(make_fx(decide, tracing_mode="fake")(t)) for t in
                                (x, torch.empty(129, 4096, device="cuda", dtype=torch.bfloat16))]
    if fusion:
        # vLLM's sequence where symmem does not take the call, on real CPU tensors
        from symmem.integrations import _vllm_pass as vp
        g = torch.Generator().manual_seed(1)
        xc, rc = torch.randn(3, 64, generator=g), torch.randn(3, 64, generator=g)
        wc = torch.rand(64, generator=g) + 0.5
        r_in = rc.clone()
        out = vp._fused_all_reduce_add_rms_norm(xc, rc, wc, 1e-6, "tp:0")
        want_r = r_in + 2 * xc
        want = want_r * wc / torch.sqrt((want_r * want_r).mean(-1, keepdim=True) + 1e-6)
        res["fallback"] = [torch.allclose(rc, want_r), torch.allclose(out, want, rtol=1e-5, atol=1e-5)]
    print(json.dumps(res))
"""


@pytest.mark.skipif(not HAVE_VLLM, reason="vLLM is not installed")
class TestVLLMFusion:
    """SYMMEM_VLLM_FUSE_RMSNORM: vLLM's PostGradPassManager gets symmem's pass where symmem serves the TP
    group; the pass rewrites vLLM's all-reduce + fused_add_rms_norm of that group (and nothing else) into the
    dispatching op, made in place after functionalization; the op picks symmem's kernel within the cap and
    vLLM's sequence beyond it."""

    def run_child(self, served, **env):
        return _python(FUSION.replace("SERVED", str(served)), **env)

    def test_off_by_default(self):
        got = self.run_child(True)
        assert not got["wrapped"]
        assert "SymmemAllReduceRMSNormPass" not in got["passes"]
        assert got["fix"] != "InPlaceAfter"

    def test_not_served_adds_no_pass(self):
        got = self.run_child(False, SYMMEM_VLLM_FUSE_RMSNORM="1")
        assert got["wrapped"]
        assert "SymmemAllReduceRMSNormPass" not in got["passes"]

    def test_on_rewrites_the_tp_groups_pattern(self):
        got = self.run_child(True, SYMMEM_VLLM_FUSE_RMSNORM="1")
        assert got["wrapped"]
        assert got["passes"][:2] == ["NoOpEliminationPass", "SymmemAllReduceRMSNormPass"]
        assert got["fix"] == "InPlaceAfter"
        assert got["matched"] == 3
        ours, ar, norm = ("symmem_vllm.fused_all_reduce_add_rms_norm.default", "vllm.all_reduce.default",
                          "vllm_ir.fused_add_rms_norm.default")
        assert got["rewritten"] == ["functional " + ours] * 2 + [ar, norm, ar, norm, "functional " + ours]
        assert got["in_place"] == [ours] * 2 + [ar, norm, ar, norm, ours]
        assert got["runs"], "the rewritten graph does not run"
        assert got["decisions"][0] == ["symmem.all_reduce_add_rmsnorm.default"]
        assert got["decisions"][1] == [norm], "past the cap: vLLM's all-reduce (here x * 2) and its norm"
        assert got["fallback"] == [True, True]

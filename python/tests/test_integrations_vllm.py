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
import unittest

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


@unittest.skipUnless(HAVE_VLLM, "vLLM is not installed")
class VLLMPlugin(unittest.TestCase):
    def test_entry_point_is_declared_and_loads_register(self):
        from importlib import metadata

        eps = [ep for ep in metadata.entry_points(group="vllm.general_plugins") if ep.name == "symmem"]
        self.assertEqual(len(eps), 1, "no single 'symmem' entry point in group vllm.general_plugins")
        self.assertEqual(eps[0].value, "symmem.integrations.vllm:register")
        self.assertIs(eps[0].load(), integ.register)

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
        self.assertEqual(got, {"early": False, "cls": OURS, "attr": OURS, "stock": VLLMS, "stale": None})
        # Module already imported, and bound by name in another module: both rebound at once.
        before = ("import types; t = types.ModuleType('t'); sys.modules['t'] = t; "
                  "from vllm.distributed.device_communicators.symm_mem import SymmMemCommunicator as C; t.C = C")
        got = _python(code.format(before=before))
        self.assertEqual(got, {"early": True, "cls": OURS, "attr": OURS, "stock": VLLMS, "stale": OURS})
        # Off: vLLM's own class stays.
        got = _python(code.format(before=""), SYMMEM_VLLM_MODE="off")
        self.assertEqual((got["cls"], got["stock"]), (VLLMS, None))

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
        self.assertEqual(got, {"callbacks": 1, "registered": True})

    def test_every_attribute_vllm_reads_exists(self):
        root = importlib.util.find_spec("vllm").submodule_search_locations[0]
        reads = scan_attribute_reads(root, "symm_mem_comm", skip=(TARGET_FILE,))
        self.assertTrue(KNOWN_READS <= set(reads), f"scan found {sorted(reads)}, expected at least {KNOWN_READS}")
        for state, attrs in run_ranks(_attribute_body, 2, sorted(reads))[0].items():
            self.assertEqual(attrs, [], f"{state}: vLLM reads {attrs} ({[reads[a][:2] for a in attrs]})")

    def test_construction_disables_without_raising(self):
        res = run_ranks(_construct_body, 2, "cpu", {})
        for disabled, backend, world, eligible, result, said, gathers in res:
            self.assertEqual((disabled, backend, world, eligible, result, gathers), (True, "off", 2, False, None, 1))
        self.assertEqual(len(res[0][5]), 1)
        self.assertIn("not a CUDA device", res[0][5][0])
        res = run_ranks(_construct_body, 1, 0, {})[0]
        self.assertEqual(res[:3] + (res[6],), (True, "off", 1, 0))

    def test_batch_invariant_is_honoured_before_any_collective(self):
        res = run_ranks(_construct_body, 2, torch.device("cuda", 0), {"VLLM_BATCH_INVARIANT": "1"})
        for disabled, backend, _, _, _, _, gathers in res:
            self.assertEqual((disabled, backend, gathers), (True, "off", 0))
        self.assertEqual(len(res[0][5]), 1)
        self.assertIn("VLLM_BATCH_INVARIANT", res[0][5][0])

    def test_dbo_is_refused_at_init(self):
        res = run_ranks(_dbo_body, 2, timeout=300)
        for disabled, gathers, _ in res:
            self.assertEqual((disabled, gathers), (True, 0))
        self.assertIn("DBO", res[0][2][0])

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
        self.assertTrue(c.should_use_symm_mem(x))
        self.assertEqual(c.all_reduce(x).tolist(), [1.0] * 16)
        self.assertIsNone(c.all_reduce(torch.zeros(17)))          # above the cap: None, vLLM's convention
        ubatching._THREAD_ID_TO_CONTEXT[threading.get_ident()] = 0
        try:
            self.assertFalse(c.should_use_symm_mem(x))
            self.assertIsNone(c.all_reduce(x))
        finally:
            del ubatching._THREAD_ID_TO_CONTEXT[threading.get_ident()]
        self.assertTrue(c.should_use_symm_mem(x))

    def test_max_size_override_and_force_multimem_are_accepted(self):
        c = integ.SymmemSymmMemCommunicator(None, "cpu", force_multimem=True, max_size_override=4096)
        self.assertTrue(c.disabled)  # no group: disabled with a reason, never an exception
        self.assertTrue(c.force_multimem)


if __name__ == "__main__":
    unittest.main()

"""Shared by the Python tests. They test the installed package: run pytest from outside the source tree
(scripts/test_python.sh does), so that `import symmem` finds what pip installed."""
import atexit
import os
import shutil
import tempfile

# NVLink multicast stays off in this process and every child (it can take a shared host's GPUs down).
for _k, _v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ[_k] = _v

# The tests' communicators measure the topology and autotune the algorithm table at their first init, in the
# tests' conditions (ranks as threads, other tests' work on the GPU): a cache folder of the session's own
# (inherited by every spawned rank) keeps those tables out of the one the user's programs load
# (~/.cache/symmem). One the caller set is kept.
if not os.environ.get("SYMMEM_TOPO_CACHE_DIR"):
    _cache = tempfile.mkdtemp(prefix="symmem-test-cache-")
    os.environ["SYMMEM_TOPO_CACHE_DIR"] = _cache
    atexit.register(shutil.rmtree, _cache, ignore_errors=True)

_config = None


def pytest_configure(config):
    global _config
    _config = config


def pytest_runtest_logreport(report):
    """With SYMMEM_TEST_REPORT_NOW=1 (scripts/test_python.sh --gpu sets it) a failure's report is printed
    the moment the test fails, not only in the summary at the end: a GPU run stopped by its time limit keeps
    the reasons of the failures before it."""
    if report.failed and os.environ.get("SYMMEM_TEST_REPORT_NOW") == "1" and _config is not None:
        tr = _config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None:
            # a spawned rank that fails before it can report writes its traceback to stderr only
            err = "".join(text for name, text in report.sections if "stderr" in name)
            err = f"\n--- its stderr (last 3000 characters):\n{err[-3000:]}" if err else ""
            tr.write_line(f"\n--- {report.nodeid} failed ({report.when}):\n{report.longreprtext[-6000:]}{err}\n---")

"""The installed package: found without any environment variable from any folder, with its libsymmem
inside it, the plugin entry points declared, and never the source tree by accident."""
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

import symmem

SOURCE_PACKAGE = Path(__file__).resolve().parent.parent / "symmem"


def test_not_the_source_tree():
    here = Path(symmem.__file__).resolve().parent
    if os.environ.get("SYMMEM_TEST_SOURCE_TREE") == "1":
        pytest.skip("SYMMEM_TEST_SOURCE_TREE=1: testing python/ in place")
    assert here != SOURCE_PACKAGE, f"imported the source tree {here}: run pytest from outside it, after pip install"


def test_library_inside_the_package():
    if os.environ.get("SYMMEM_LIBRARY") or os.environ.get("SYMMEM_TEST_SOURCE_TREE") == "1":
        pytest.skip("SYMMEM_LIBRARY or the source tree chooses the library")
    lib = Path(symmem.library_path()).resolve()
    assert lib.parent == Path(symmem.__file__).resolve().parent, lib
    assert lib.name == "libsymmem.so.0"


def test_import_from_anywhere_without_environment(tmp_path):
    if os.environ.get("SYMMEM_TEST_SOURCE_TREE") == "1":
        pytest.skip("not installed")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYMMEM_") and k != "PYTHONPATH"}
    code = "import symmem, sys; print(symmem.version(), symmem.library_path())"
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("(0, 1, 0)"), r.stdout


def test_metadata_and_entry_points():
    if os.environ.get("SYMMEM_TEST_SOURCE_TREE") == "1":
        pytest.skip("not installed")
    dist = metadata.distribution("symmem")
    assert dist.version == "0.1.0"
    eps = dist.entry_points
    assert {(e.group, e.name, e.value) for e in eps} >= {
        ("sglang.srt.plugins", "symmem", "symmem.integrations.sglang:register"),
        ("vllm.general_plugins", "symmem", "symmem.integrations.vllm:register"),
    }
    assert any(str(f).startswith("symmem/torch/") for f in dist.files), "subpackages missing from the wheel"
    # the op schemas' one list, which symmem.torch reads at import
    assert "symmem/torch/schemas.def" in {str(f) for f in dist.files}, "symmem/torch/schemas.def missing from the wheel"
    assert "torch" in " ".join(dist.requires or []), "torch extra missing"
    meta = dist.metadata
    assert meta["License-Expression"] == "BSD-3-Clause", meta["License-Expression"]
    assert meta.get("License") is None, "the whole license text as License:"
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL") or [])
    assert {"Homepage", "Documentation", "Issues"} <= set(urls), urls
    assert ("console_scripts", "symmem-topo", "symmem._tools:topo") in {(e.group, e.name, e.value) for e in eps}
    assert ("console_scripts", "symmem-bench", "symmem._tools:bench") in {(e.group, e.name, e.value) for e in eps}


def test_build_info_and_tools():
    """What the build recorded, and the tools it shipped, run through their console scripts."""
    if os.environ.get("SYMMEM_TEST_SOURCE_TREE") == "1":
        pytest.skip("not installed")
    from symmem import _tools
    from symmem.integrations.__main__ import build_info

    info = build_info()
    assert info.get("version") == "0.1.0" and info.get("origin") and info.get("cuda"), info
    for name in info.get("tools", []):
        exe = _tools.tool_path(name)
        assert exe, f"{name} is listed in _build_info.json but not installed"
        script = Path(sys.executable).parent / name
        r = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and r.stdout.startswith(f"usage: {name}"), (r.returncode, r.stdout, r.stderr)


def test_nccl_from_the_nvidia_wheel(monkeypatch, tmp_path):
    """symmem-bench's NCCL: the nvidia-nccl wheel's libnccl.so.2 when that package is importable."""
    from symmem import _tools

    lib = tmp_path / "nvidia" / "nccl" / "lib"
    lib.mkdir(parents=True)
    (lib / "libnccl.so.2").write_bytes(b"")
    for pkg in (tmp_path / "nvidia", tmp_path / "nvidia" / "nccl"):  # regular packages: found before any other
        (pkg / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    for m in [m for m in sys.modules if m == "nvidia" or m.startswith("nvidia.")]:
        monkeypatch.delitem(sys.modules, m)
    assert _tools.nccl_from_wheel() == str(lib / "libnccl.so.2")


def test_status_shows_effective_values(tmp_path):
    """`python -m symmem.integrations` with no argument: the status, exit 0, defaults spelled out."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYMMEM_SGLANG") and not k.startswith("SYMMEM_VLLM")}
    env["SYMMEM_VLLM_MAX_BYTES"] = "1M"
    r = subprocess.run([sys.executable, "-m", "symmem.integrations"], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "SYMMEM_SGLANG_MODE=fallback  (default" in out, out
    assert "SYMMEM_SGLANG_GROUPS=tp  (default" in out, out
    assert "SYMMEM_VLLM_MAX_BYTES=1 MiB  (environment" in out, out
    assert re.search(r"^SYMMEM_SGLANG_MAX_BYTES=(by link: nvlink .*pcie 512 KiB|.*for this machine's worst link)", out,
                     re.M), out
    assert not [ln for ln in out.splitlines() if ln.endswith("=")], "an empty value"
    for line in ("sglang: ", "vllm: ", "GPUs: ", "op library: ", "libsymmem: "):
        assert line in out or (line == "op library: " and "torch: not importable" in out), (line, out)

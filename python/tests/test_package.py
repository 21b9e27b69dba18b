"""The installed package: found without any environment variable from any folder, with its libsymmem
inside it, the plugin entry points declared, and never the source tree by accident."""
import os
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
    assert "torch" in " ".join(dist.requires or []), "torch extra missing"

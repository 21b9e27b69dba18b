"""What a new user meets first, on any machine (no GPU needed): the package's version, the command line's
answer to a wrong command, the message of `import symmem.torch` without torch, install-pth where SGLang is
absent, and the Python package's SYMMEM_* variables read with the table's rule (base/param.h)."""
import logging
import os
import subprocess
import sys
from importlib import metadata

import pytest

import symmem
from symmem import _settings


def _python(*args, env=None, cwd=None):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120, cwd=cwd,
                          env=env or dict(os.environ))


def test_version_is_the_library_s_and_the_distribution_s():
    assert symmem.__version__ == "%d.%d.%d" % symmem.version()
    if os.environ.get("SYMMEM_TEST_SOURCE_TREE") != "1":
        assert symmem.__version__ == metadata.version("symmem")


def test_unknown_command_is_named():
    r = _python("-m", "symmem", "bogus")
    assert r.returncode == 2
    assert "python -m symmem: unknown command 'bogus'" in r.stderr, r.stderr
    assert "usage: python -m symmem" in r.stderr
    r = _python("-m", "symmem")
    assert r.returncode == 2 and "no command given" in r.stderr, r.stderr
    r = _python("-m", "symmem", "version")
    assert r.returncode == 0 and r.stdout.startswith(f"symmem {symmem.__version__} ("), r.stdout


def test_symmem_torch_without_torch_names_the_fix():
    # torch made unimportable in a fresh interpreter (None in sys.modules stops its import)
    code = ("import sys; sys.modules['torch'] = None\n"
            "try:\n    import symmem.torch\nexcept ModuleNotFoundError as e:\n"
            "    print(e.name); print(e)\nelse:\n    print('imported')")
    r = _python("-c", code)
    assert r.returncode == 0, r.stderr
    name, message = r.stdout.splitlines()[:2]
    assert name == "torch"
    assert 'pip install "symmem[torch]"' in message and "symmem.torch needs PyTorch" in message, message


def test_install_pth_refuses_where_sglang_is_absent(tmp_path):
    r = _python("-m", "symmem.integrations", "install-pth", "--dir", str(tmp_path))
    assert r.returncode == 1
    assert "SGLang is not installed in" in r.stderr and "--force" in r.stderr, r.stderr
    assert not (tmp_path / "symmem-sglang.pth").exists()
    r = _python("-m", "symmem.integrations", "install-pth", "--dir", str(tmp_path), "--force")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "symmem-sglang.pth").read_text().startswith("import ")


# The Python package's rows of the table, a refused value of each, and the default the reader must then use.
REFUSED = {
    "SYMMEM_TORCH_OPS": "fast",
    "SYMMEM_TORCH_FAST_CALL": "yes",
    "SYMMEM_TORCH_ERROR_HANDLING": "ignore",
    "SYMMEM_TORCH_WATCHDOG_MS": "-1",
    "SYMMEM_SGLANG_MODE": "bogus",
    "SYMMEM_SGLANG_MAX_BYTES": "lots",
    "SYMMEM_SGLANG_FUSE_RMSNORM": "maybe",
    "SYMMEM_VLLM_MODE": "sometimes",
    "SYMMEM_VLLM_MAX_BYTES": "-4K",
    "SYMMEM_VLLM_FUSE_RMSNORM": "2",
    "SYMMEM_TORCH_LEARN_SIZES": "-3",
    "SYMMEM_SGLANG_WIRE": "int4",
    "SYMMEM_VLLM_WIRE": "fp8",
}


def test_every_python_variable_is_a_row_of_the_table():
    rows = {p["name"]: p for p in _settings.params()}
    python_rows = {n for n, p in rows.items() if p["reader"] == "python"}
    assert set(REFUSED) | {"SYMMEM_LIBRARY", "SYMMEM_TORCH_LIBRARY", "SYMMEM_SGLANG_GROUPS"} == python_rows


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_refused_value_warns_with_the_valid_values_and_gives_the_default(name, monkeypatch, caplog):
    monkeypatch.setenv(name, REFUSED[name])
    dflt = _settings.default(name)
    with caplog.at_level(logging.WARNING):
        assert _settings.value(name) == dflt
    why = _settings.check(name, REFUSED[name])
    assert why and why.startswith("not ")
    want = f"{name}={REFUSED[name]} is {why}; using the default {dflt if dflt else '(empty)'}"
    assert want in caplog.text, caplog.text
    monkeypatch.setenv(name, "")  # empty: the default, no warning
    caplog.clear()
    assert _settings.value(name) == dflt and not caplog.text


def test_the_integrations_readers_follow_the_table(monkeypatch, caplog):
    from symmem.integrations import _common

    log = logging.getLogger("symmem.integrations.test")
    monkeypatch.setenv("SYMMEM_SGLANG_MODE", "Replace")
    assert _common.env_mode("SYMMEM_SGLANG_MODE") == "replace"
    monkeypatch.setenv("SYMMEM_SGLANG_MODE", "bogus")
    with caplog.at_level(logging.WARNING):
        assert _common.env_mode("SYMMEM_SGLANG_MODE") == "fallback"
    assert "SYMMEM_SGLANG_MODE=bogus is not one of fallback, replace, off; using the default fallback" in caplog.text
    monkeypatch.setenv("SYMMEM_VLLM_FUSE_RMSNORM", "yes")
    assert _common.env_flag("SYMMEM_VLLM_FUSE_RMSNORM", "the fusion") is True
    monkeypatch.setenv("SYMMEM_VLLM_FUSE_RMSNORM", "maybe")
    assert _common.env_flag("SYMMEM_VLLM_FUSE_RMSNORM", "the fusion") is False
    monkeypatch.setenv("SYMMEM_SGLANG_MAX_BYTES", "96K")
    assert _common.env_bytes("SYMMEM_SGLANG_MAX_BYTES", log) == 96 << 10
    monkeypatch.setenv("SYMMEM_SGLANG_MAX_BYTES", "lots")
    assert _common.env_bytes("SYMMEM_SGLANG_MAX_BYTES", log) is None
    monkeypatch.setenv("SYMMEM_SGLANG_WIRE", "INT8")
    assert _common.env_wire("SYMMEM_SGLANG_WIRE", log) == "int8"
    monkeypatch.setenv("SYMMEM_VLLM_WIRE", "fp8")
    assert _common.env_wire("SYMMEM_VLLM_WIRE", log) == "none"
    monkeypatch.setenv("SYMMEM_SGLANG_GROUPS", "")
    from symmem.integrations import sglang

    assert sglang.selected_groups() == {"tp"}  # empty: the default


def test_the_watchdog_settings_follow_the_table(monkeypatch):
    pytest.importorskip("torch")
    from symmem.torch import _watchdog

    monkeypatch.setenv("SYMMEM_TORCH_WATCHDOG_MS", "-1")
    assert _watchdog._env_period_ms() == 100
    monkeypatch.setenv("SYMMEM_TORCH_WATCHDOG_MS", "0")
    assert _watchdog._env_period_ms() == 0
    monkeypatch.setenv("SYMMEM_TORCH_ERROR_HANDLING", "Raise")
    assert _watchdog._env_policy() == "raise"
    monkeypatch.setenv("SYMMEM_TORCH_ERROR_HANDLING", "ignore")
    assert _watchdog._env_policy() == "abort"

"""The `.pth` fallback for SGLang versions without `sglang.srt.plugins`.

`python -m symmem.integrations install-pth` writes `symmem-sglang.pth` into site-packages; its one line
loads this file by path at every interpreter start. Loading by path (not `import symmem...`) matters:
importing the symmem package would load libsymmem into every Python process of the environment. This file
only registers a post-import hook (standard library, a few microseconds); the symmem package is imported
the moment SGLang imports its torch_symm_mem module, and not before.

It replaces the class whether or not SGLang also loads the entry-point plugin: both put the same class in
place, so the REPLACE hook then finds nothing to change. SYMMEM_SGLANG_MODE=off disables both.
"""
import os

TARGET_MODULE = "sglang.srt.distributed.device_communicators.torch_symm_mem"
INKLING_MODULE = "sglang.srt.models.inkling_common.kernels.comm"


def _load_imphook():
    if __package__:
        from . import _imphook
        return _imphook
    import importlib.util
    import sys

    name = "_symmem_imphook"
    if name in sys.modules:
        return sys.modules[name]
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_imphook.py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[name] = module
    return module


def _on_target(module):
    from symmem.integrations import sglang

    sglang._replace_in(module)


def _on_inkling(module):
    from symmem.integrations import sglang

    sglang._guard_inkling(module)


def install():
    if os.environ.get("SYMMEM_SGLANG_MODE", "").strip().lower() == "off":
        return
    hooks = _load_imphook()
    hooks.when_imported(TARGET_MODULE, _on_target)
    hooks.when_imported(INKLING_MODULE, _on_inkling)


try:
    install()
except Exception:  # noqa: BLE001 - a .pth line that raises prints a traceback at every interpreter start
    pass

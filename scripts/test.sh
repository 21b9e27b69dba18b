#!/usr/bin/env bash
# Install what the tests need (Debian/Ubuntu with the CUDA toolkit), build, run the tests.
# Without a GPU the GPU tests report "skipped" (exit 77), never "passed".
#   SYMMEM_BUILD_DIR, SYMMEM_CUDA_ARCHS: see scripts/build_common.sh (the build folder is run.sh's too)
#   SYMMEM_TEST_LABEL  ctest label to run: cpu, gpu or all (default all)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/build_common.sh

need_pkgs=()
[ -f /usr/include/numa.h ] || need_pkgs+=(libnuma-dev)
command -v cmake >/dev/null || need_pkgs+=(cmake)
command -v ninja >/dev/null || need_pkgs+=(ninja-build)
command -v g++ >/dev/null || need_pkgs+=(g++)
command -v pkg-config >/dev/null || need_pkgs+=(pkg-config)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  echo "installing: ${need_pkgs[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi
symmem_find_nvcc
symmem_configure
symmem_build
label=${SYMMEM_TEST_LABEL:-all}
sel=(); [ "$label" = all ] || sel=(-L "^$label\$")
(cd "$build" && ctest --output-on-failure "${sel[@]}")
# ASan+UBSan build of the CPU tests and the fuzz-corpus replay.
./scripts/sanitize.sh
# The Python package: the binary wheel (scripts/build_wheel.sh) and `pip install .`, installed into fresh
# venvs and tested from outside the source tree, no CUDA toolkit reachable where the wheel is tested.
[ "$label" = gpu ] || ./scripts/test_python.sh
# The SGLang and vLLM drop-ins against the pinned frameworks from PyPI (one venv each), from that wheel.
if [ "$label" != gpu ]; then
  SYMMEM_TEST_WHEEL=$(ls -t "${SYMMEM_PY_DIR:-build-python}"/dist/symmem-*manylinux*.whl | head -1) \
    ./scripts/test_integrations.sh
fi

#!/usr/bin/env bash
# usage: scripts/test.sh     (-h: this text)
#
# Every test of symmem, as CI runs it (.ci/run): installs what the tests need (Debian/Ubuntu: libnuma-dev,
# cmake, ninja-build, g++, pkg-config through apt; the CUDA toolkit 12.2+ must be installed), builds build/
# (the dev configuration of scripts/build_common.sh, shared with run.sh), then runs, by SYMMEM_TEST_LABEL:
#   cpu   the quick CPU check: the ctests labelled cpu (unit, topology, architecture, docs, the tools), about
#         35 s once built. The same as `cd build && ctest -L cpu -j$(nproc)` after a build.
#   gpu   the ctests labelled gpu (on a GPU machine; scripts/gpu_check.sh runs them with MPS where needed)
#   all   (default) every ctest (GPU tests report "skipped", exit 77, without a GPU, never "passed"), then
#         the stages after it: scripts/sanitize.sh (ASan + UBSan build of the CPU tests, build-san/),
#         scripts/test_python.sh (the wheel and `pip install .` in fresh venvs, build-wheel/ and
#         build-python/) and scripts/test_integrations.sh (SGLang and vLLM from PyPI, one venv each,
#         build-integ/).
# Cost of `all` on a CPU machine: 25 minutes and more, and disk: build/ ~1 GB, build-san/ ~1 GB, build-wheel/
# ~2 GB, build-python/ ~6 GB, build-integ/ 10-11 GB per framework (SYMMEM_TEST_SKIP_INTEGRATIONS=1 skips that
# stage; where fewer than ~13 GB are free for a framework's install, or ~9 GB for the torch venv of the
# Python stage, the install removes the other venvs and caches first, saying so). Later runs reuse every
# folder and venv. `cpu` costs the first build (a few minutes) and 35 s.
#   SYMMEM_TEST_LABEL   cpu, gpu or all (default all)
#   SYMMEM_BUILD_DIR, SYMMEM_CUDA_ARCHS: the build folder and its architectures (scripts/run.sh --help)
set -euo pipefail
source "$(dirname "$0")/build_common.sh"
symmem_help "$0" "$@"
cd "$(dirname "$0")/.."
label=${SYMMEM_TEST_LABEL:-all}
case $label in
  cpu | gpu | all) ;;
  *) echo "test.sh: SYMMEM_TEST_LABEL=$label: use cpu, gpu or all (-h for help)" >&2; exit 2 ;;
esac
build=$(symmem_dir dev)
# A first run of `all` fills ~32 GB (above): the log says what it started with, so a run that stops on
# "No space left on device" tells whether the disk was short from the start.
[ "$label" = all ] && echo "disk: $(df -Pk . | awk 'NR == 2 {printf "%.1f GiB free on %s", $4 / 1048576, $6}')"

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
symmem_configure dev
symmem_build "$build"
# The CPU tests run in parallel (those that must not are marked RUN_SERIAL); GPU tests one at a time, as
# they share the GPUs.
sel=(); [ "$label" = all ] || sel=(-L "^$label\$")
[ "$label" = cpu ] && sel+=(-j "$(nproc)")
(cd "$build" && ctest --output-on-failure "${sel[@]}")
[ "$label" = all ] || exit 0
# ASan+UBSan build of the CPU tests and the fuzz-corpus replay.
./scripts/sanitize.sh
# The Python package: the binary wheel (scripts/build_wheel.sh) and `pip install .`, installed into fresh
# venvs and tested from outside the source tree, no CUDA toolkit reachable where the wheel is tested.
./scripts/test_python.sh
# The SGLang and vLLM drop-ins against the pinned frameworks from PyPI (one venv each), from that wheel.
SYMMEM_TEST_WHEEL=$(ls -t "${SYMMEM_PY_DIR:-build-python}"/dist/symmem-*manylinux*.whl | head -1) \
  ./scripts/test_integrations.sh

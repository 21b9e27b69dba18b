#!/usr/bin/env bash
# Install what the tests need (Debian/Ubuntu with the CUDA toolkit), build, run the tests.
# Without a GPU the GPU tests report "skipped" (exit 77), never "passed".
#   SYMMEM_BUILD_DIR   build folder (default build-test)
#   SYMMEM_CUDA_ARCHS  CUDA architectures (default: the library's default list, 80;90;100;120)
#   SYMMEM_TEST_LABEL  ctest label to run: cpu, gpu or all (default all)
set -euo pipefail
cd "$(dirname "$0")/.."
# NVLink multicast stays off everywhere (it can take a shared host's GPUs out of service).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

need_pkgs=()
[ -f /usr/include/numa.h ] || need_pkgs+=(libnuma-dev)
command -v cmake >/dev/null || need_pkgs+=(cmake)
command -v ninja >/dev/null || need_pkgs+=(ninja-build)
command -v g++ >/dev/null || need_pkgs+=(g++)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  echo "installing: ${need_pkgs[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi
if ! command -v nvcc >/dev/null; then
  for d in /usr/local/cuda/bin /usr/local/cuda-13.0/bin /usr/local/cuda-12/bin; do
    [ -x "$d/nvcc" ] && export PATH="$d:$PATH" && break
  done
fi
command -v nvcc >/dev/null || { echo "error: nvcc not found: install the CUDA toolkit (12.2 or newer)"; exit 1; }

build=${SYMMEM_BUILD_DIR:-build-test}
archs=()
[ -n "${SYMMEM_CUDA_ARCHS:-}" ] && archs=(-DCMAKE_CUDA_ARCHITECTURES="$SYMMEM_CUDA_ARCHS")
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${archs[@]}"
cmake --build "$build" -j "$(nproc)"
label=${SYMMEM_TEST_LABEL:-all}
sel=(); [ "$label" = all ] || sel=(-L "^$label\$")
cd "$build"
ctest --output-on-failure "${sel[@]}"
"$OLDPWD/scripts/sanitize.sh" # ASan+UBSan build of the CPU tests and fuzz-corpus replay ($OLDPWD: the repository root)

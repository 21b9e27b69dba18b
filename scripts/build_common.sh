# Sourced by run.sh and test.sh: the one build folder both commands use, so that whichever runs second
# reuses what the first compiled.
#   SYMMEM_BUILD_DIR   build folder (default build)
#   SYMMEM_CUDA_ARCHS  CUDA architectures, e.g. 90 or native (default: the library's list 80;90;100;120;
#                      a folder configured before keeps the architectures it was given)

# NVLink multicast stays off everywhere (it can take a shared host's GPUs out of service).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
build=${SYMMEM_BUILD_DIR:-build}

symmem_find_nvcc() {
  if ! command -v nvcc >/dev/null; then
    for d in /usr/local/cuda/bin /usr/local/cuda-13.0/bin /usr/local/cuda-12/bin; do
      [ -x "$d/nvcc" ] && export PATH="$d:$PATH" && break
    done
  fi
  command -v nvcc >/dev/null || { echo "error: nvcc not found: install the CUDA toolkit (12.2 or newer)"; exit 1; }
}

# The same settings from both commands (RelWithDebInfo, tests on), so neither rebuilds what the other
# built. An existing folder keeps its generator and, unless SYMMEM_CUDA_ARCHS says otherwise, its
# architectures.
symmem_configure() {
  local args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DSYMMEM_BUILD_TESTS=ON)
  [ -f "$build/CMakeCache.txt" ] || args+=(-G Ninja)
  [ -n "${SYMMEM_CUDA_ARCHS:-}" ] && args+=(-DCMAKE_CUDA_ARCHITECTURES="$SYMMEM_CUDA_ARCHS")
  cmake -S . -B "$build" "${args[@]}"
}

symmem_build() { cmake --build "$build" -j "$(nproc)"; }

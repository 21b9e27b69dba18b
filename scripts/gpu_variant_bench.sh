#!/usr/bin/env bash
# On a GPU machine: build symmem-bench with extra CUDA compile definitions (a kernel variant) in its own
# build folder and run it, so variants are compared in one session on the same GPUs.
#   usage: scripts/gpu_variant_bench.sh OUTFILE "DEFINES" [symmem-bench args...]
#   e.g.   scripts/gpu_variant_bench.sh out/v1.txt "-DSYMMEM_SOME_KNOB=1" -a oneshot_pull -b 1M -e 64M -f 4
# DEFINES go to both the C and the CUDA compiler; the knob is whatever the experiment's code reads with
# #ifndef (bench/NOTES.md, session 3, used two such knobs, removed with the code they tested).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/gpu_variant_bench.sh OUTFILE DEFINES [bench args]}
defs=${2-}
shift 2
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
tag=$(printf '%s' "$defs" | tr -c 'A-Za-z0-9_=' '_')
build=build-variant-${tag:-default}
mkdir -p "$(dirname "$out")"
{
  echo "== variant: ${defs:-<none>}   bench: $*"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=native -DSYMMEM_WERROR=OFF \
    -DCMAKE_C_FLAGS="$defs" -DCMAKE_CUDA_FLAGS="$defs" > /dev/null &&
    cmake --build "$build" -j "$(nproc)" --target symmem-bench > /dev/null &&
    timeout 200 "$build/bench/symmem-bench" "$@"
  echo "   rc=$?"
} >> "$out" 2>&1

#!/usr/bin/env bash
# On a GPU machine: build for the local GPUs and run every GPU test (label gpu), then the topology probe
# and NCCL's own topology dump for comparison. Logs go to OUTDIR (default ./gpu-logs).
#   usage: scripts/gpu_check.sh [OUTDIR] [ctest -R regex]
set -uo pipefail
cd "$(dirname "$0")/.."
OUTDIR=${1:-gpu-logs}
mkdir -p "$OUTDIR"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
build=${SYMMEM_BUILD_DIR:-build-gpu}
t0=$SECONDS
{
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,pci.bus_id --format=csv,noheader
  nvidia-smi topo -m
} > "$OUTDIR/machine.txt" 2>&1
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=native \
  > "$OUTDIR/configure.log" 2>&1 || { cat "$OUTDIR/configure.log"; exit 1; }
cmake --build "$build" -j "$(nproc)" > "$OUTDIR/build.log" 2>&1 || { grep -E "error|FAILED" -A5 "$OUTDIR/build.log" | head -60; exit 1; }
echo "build: $((SECONDS - t0)) s"
sel=(-L gpu)
[ -n "${2:-}" ] && sel=(-R "$2")
(cd "$build" && ctest "${sel[@]}" --output-on-failure --timeout "${CTEST_TIMEOUT_S:-420}") > "$OUTDIR/ctest_gpu.log" 2>&1
rc=$?
grep -E "Test +#|tests passed|Skipped|Failed|\*\*\*" "$OUTDIR/ctest_gpu.log" | tail -40
echo "ctest rc=$rc after $((SECONDS - t0)) s"
exit $rc

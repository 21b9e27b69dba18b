#!/usr/bin/env bash
# Build symmem and run what it does on all local GPUs: the topology probe (symmem-topo) and the
# all-reduce benchmark against NCCL on the same GPUs (symmem-bench). Without a GPU it says so and runs
# what can run there: the probe's PCI/NUMA report.
#   SYMMEM_BUILD_DIR, SYMMEM_CUDA_ARCHS: see scripts/build_common.sh (the build folder is test.sh's too)
#   extra arguments go to symmem-bench (e.g. -b 1K -e 64M --algo all)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/build_common.sh
symmem_find_nvcc
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  ngpu=$(nvidia-smi -L | wc -l)
else
  ngpu=0
fi
symmem_configure >/dev/null
symmem_build
echo "== symmem-topo"
"$build/topology/symmem-topo" || true
if [ "$ngpu" -eq 0 ]; then
  echo "No GPU found on this machine: symmem-bench needs GPUs, so only the probe's PCI/NUMA report ran."
  exit 0
fi
if [ "$ngpu" -lt 2 ]; then
  echo "One GPU: running the benchmark with 2 ranks on it (a correctness exercise, not a performance figure)."
  exec "$build/bench/symmem-bench" --nranks 2 --inprocess "$@"
fi
echo "== symmem-bench: all-reduce on $ngpu GPUs, symmem vs NCCL"
exec "$build/bench/symmem-bench" --nranks "$ngpu" "$@"

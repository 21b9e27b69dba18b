#!/usr/bin/env bash
# usage: scripts/run.sh [symmem-bench options]     (-h: this text)
#
# What symmem does on this machine's GPUs: the topology probe (symmem-topo) and the all-reduce benchmark
# against NCCL on the same GPUs (symmem-bench). It says first whether there are GPUs, then builds only what
# it runs, in build/ (the dev configuration of scripts/build_common.sh, shared with test.sh):
#   - GPUs: symmem-topo and symmem-bench; the bench runs on all of them (two ranks on one GPU: a
#     correctness exercise, not a performance figure). Extra arguments go to symmem-bench, which takes
#     nccl-tests' options (e.g. -b 1K -e 64M -f 2; --algo all for every algorithm; symmem-bench --help).
#   - no GPU: symmem-topo only; it shows this machine's PCI/NUMA report, then the report of a captured
#     8-GPU PCIe server (two sockets, no NVLink: tests/topo/fixtures/pcie-2socket-8gpu), which is what
#     symmem sees and chooses on such a box.
# Cost: the first build compiles for a few minutes (about 6 on 2 cores with every architecture;
# SYMMEM_CUDA_ARCHS=native or 90 is shorter); later runs build only what changed. build/ takes ~1 GB.
#   SYMMEM_BUILD_DIR   the build folder (default build)
#   SYMMEM_CUDA_ARCHS  CUDA architectures, e.g. 90 or native (default: the library's 80;90;100;120; a
#                      folder configured before keeps its own unless this is set)
set -euo pipefail
source "$(dirname "$0")/build_common.sh"
symmem_help "$0" "$@"
cd "$(dirname "$0")/.."
build=$(symmem_dir dev)

ngpu=0
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  ngpu=$(nvidia-smi -L | grep -c '^GPU' || true)
fi
if [ "$ngpu" -eq 0 ]; then
  echo "run.sh: no GPU on this machine (nvidia-smi $(command -v nvidia-smi >/dev/null && echo "lists none" ||
    echo "is not installed")): symmem-bench needs GPUs, so this run builds symmem-topo alone and shows the"
  echo "  probe's report of this machine, then of a captured 8-GPU PCIe server. ./scripts/test.sh checks the"
  echo "  rest without a GPU (SYMMEM_TEST_LABEL=cpu for the quick check)."
  targets=(symmem-topo)
else
  echo "run.sh: $ngpu GPU(s): building symmem-topo and symmem-bench, then the probe and the benchmark"
  targets=(symmem-topo symmem-bench)
fi
symmem_find_nvcc
symmem_configure dev
symmem_build "$build" "${targets[@]}"

echo "== symmem-topo: this machine"
"$build/tools/symmem-topo" || true
if [ "$ngpu" -eq 0 ]; then
  fixture=tests/topo/fixtures/pcie-2socket-8gpu
  echo
  echo "== symmem-topo --sysfs-root $fixture: a captured 8-GPU PCIe server (8x RTX PRO 6000, two sockets)"
  "$build/tools/symmem-topo" --sysfs-root "$fixture"
  echo
  echo "No GPU here: nothing was measured. On a GPU machine this command runs symmem-bench on every GPU."
  exit 0
fi
if [ "$ngpu" -lt 2 ]; then
  echo "== symmem-bench: one GPU, two ranks on it (a correctness exercise, not a performance figure)"
  exec "$build/bench/symmem-bench" --nranks 2 --inprocess "$@"
fi
echo "== symmem-bench: all-reduce on $ngpu GPUs, symmem vs NCCL"
exec "$build/bench/symmem-bench" --nranks "$ngpu" "$@"

#!/usr/bin/env bash
# On a GPU machine: build for the local GPUs and run every GPU test (label gpu), logs in OUTDIR (default
# ./gpu-logs). On a machine with fewer GPUs than a test has ranks, ranks share a GPU:
#  - ranks that are threads of one process (ctest label inproc) run concurrently as they are;
#  - ranks that are processes run concurrently only under MPS (without it they take turns and kernels that
#    wait for each other stall until the timeout), so this script starts an MPS daemon for them and stops
#    it afterwards, when it finds one GPU and no MPS running. In-process tests run outside MPS: under MPS
#    the streams of one process may share fewer hardware queues than it has ranks (docs/collectives.md,
#    "Residency").
#   usage: scripts/gpu_check.sh [OUTDIR] [ctest -R regex]
#   SYMMEM_BUILD_DIR (default build-gpu), CTEST_TIMEOUT_S (default 420; for tests without a TIMEOUT of
#   their own, tests/coll sets one per test), SYMMEM_GPU_MPS=0|1 (default: 1 on
#   one GPU) overrides the MPS decision, SYMMEM_TEST_GPU_PART=all|inproc|procs (default all) runs only the
#   in-process tests or only the others, CTEST_JOBS (default 1) runs that many in-process tests at once
#   (each process's ranks stay together; processes take turns on the GPU). Tests of several processes
#   always run one at a time: under MPS two of them at once could want more SMs than the GPU has.
set -uo pipefail
cd "$(dirname "$0")/.."
OUTDIR=${1:-gpu-logs}
part=${SYMMEM_TEST_GPU_PART:-all}
case $part in all|inproc|procs) ;; *) echo "SYMMEM_TEST_GPU_PART=$part: use all, inproc or procs"; exit 2 ;; esac
mkdir -p "$OUTDIR"
rm -f "$OUTDIR"/ctest_*.log # the summary below reads this run's logs only
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
build=${SYMMEM_BUILD_DIR:-build-gpu}
t0=$SECONDS
{
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,pci.bus_id --format=csv,noheader
  nvidia-smi topo -m
} > "$OUTDIR/machine.txt" 2>&1
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
# Warnings are errors in CI (scripts/test.sh); the GPU machine's compilers may warn about more, which must
# not cost a GPU run (SYMMEM_WERROR=ON to keep them errors here too).
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=native \
  -DSYMMEM_WERROR=${SYMMEM_WERROR:-OFF} \
  > "$OUTDIR/configure.log" 2>&1 || { cat "$OUTDIR/configure.log"; exit 1; }
cmake --build "$build" -j "$(nproc)" > "$OUTDIR/build.log" 2>&1 || { grep -E "error|FAILED" -A5 "$OUTDIR/build.log" | head -60; exit 1; }
echo "build: $((SECONDS - t0)) s, $ngpu GPU(s)"

mps=${SYMMEM_GPU_MPS:-$([ "$ngpu" -eq 1 ] && echo 1 || echo 0)}
source scripts/mps.sh
trap symmem_mps_stop EXIT

run_ctest() { # label selection..., log name
  local log=$1; shift
  (cd "$build" && ctest "$@" --output-on-failure --timeout "${CTEST_TIMEOUT_S:-420}") > "$OUTDIR/$log" 2>&1
}
rc=0
sel=(-L gpu) # every GPU test, or those the regex names
[ -n "${2:-}" ] && sel+=(-R "$2")
# In-process tests first and outside MPS, the others under MPS (on one GPU); a regex selects within both.
if [ "$part" != procs ]; then
  run_ctest ctest_inproc.log "${sel[@]}" -L inproc -j "${CTEST_JOBS:-1}" || rc=$?
fi
if [ "$part" != inproc ]; then
  if [ "$mps" = 1 ] && ! symmem_mps_start; then
    echo "the tests with a process per rank need MPS on one GPU: not run" | tee "$OUTDIR/ctest_gpu.log"
    rc=1
  else
    run_ctest ctest_gpu.log "${sel[@]}" -LE inproc || rc=$?
  fi
fi
symmem_mps_stop
cat "$OUTDIR"/ctest_*.log | grep -E "Test +#|tests passed|Skipped|Failed|\*\*\*" | tail -80
echo "ctest rc=$rc after $((SECONDS - t0)) s"
exit $rc

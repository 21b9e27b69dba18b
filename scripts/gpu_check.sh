#!/usr/bin/env bash
# The GPU machine's checks, the one script for them: build for the local GPUs, run every GPU test of the
# library (ctest label gpu) and the Python package's GPU stage (scripts/test_python.sh --gpu), logs in OUTDIR
# (default ./gpu-logs). The benchmarks have their own script, bench/run_gpu.sh.
#
#   usage: scripts/gpu_check.sh [OUTDIR] [ctest -R regex]     (-h: this text)
#   SYMMEM_TEST_GPU_PART   which parts, comma-separated (default all), run in this order:
#       inproc          the ctests whose ranks are threads of one process (label inproc), outside MPS
#       procs           the other GPU ctests, a process per rank (under MPS on one GPU)
#       python-threads  the Python GPU tests with ranks as threads (test_python.sh --gpu, its part threads)
#       python-procs    the Python GPU tests with a process per rank (its part procs)
#     and the groups ctest (inproc,procs), python (python-threads,python-procs), all (every part).
#
# On a machine with fewer GPUs than a test has ranks, ranks share a GPU:
#  - ranks that are threads of one process (ctest label inproc) run concurrently as they are;
#  - ranks that are processes run concurrently only under MPS (without it they take turns and kernels that
#    wait for each other stall until the timeout), so this script starts an MPS daemon for them and stops
#    it afterwards, when it finds one GPU and no MPS running. In-process tests run outside MPS: under MPS
#    the streams of one process may share fewer hardware queues than it has ranks (docs/collectives.md,
#    "Residency"). The Python stage does the same for its own two runs (scripts/mps.sh).
#   SYMMEM_BUILD_DIR (default build-gpu), CTEST_TIMEOUT_S (default 420; for tests without a TIMEOUT of
#   their own, tests/coll sets one per test), SYMMEM_GPU_MPS=0|1 (default: 1 on one GPU) overrides the MPS
#   decision for the ctests, CTEST_JOBS (default 1) runs that many in-process tests at once (each process's
#   ranks stay together; processes take turns on the GPU). Tests of several processes always run one at a
#   time: under MPS two of them at once could want more SMs than the GPU has. The Python stage's own
#   settings (pytest arguments, the wheelhouse it installs pytest from) are scripts/test_python.sh's.
set -uo pipefail
source "$(dirname "$0")/build_common.sh"
symmem_help "$0" "$@"
cd "$(dirname "$0")/.."
OUTDIR=${1:-gpu-logs}
parts=" "
IFS=, read -r -a asked <<< "${SYMMEM_TEST_GPU_PART:-all}"
for p in "${asked[@]}"; do
  case $p in
    all) parts+="inproc procs python-threads python-procs " ;;
    ctest) parts+="inproc procs " ;;
    python) parts+="python-threads python-procs " ;;
    inproc|procs|python-threads|python-procs) parts+="$p " ;;
    *) echo "SYMMEM_TEST_GPU_PART=${SYMMEM_TEST_GPU_PART}: $p is not a part (all, ctest, python, inproc, procs," \
         "python-threads, python-procs)"; exit 2 ;;
  esac
done
want() { [[ $parts == *" $1 "* ]]; }
mkdir -p "$OUTDIR"
rm -f "$OUTDIR"/ctest_*.log "$OUTDIR"/python_gpu.log # the summary below reads this run's logs only
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
build=$(symmem_dir gpu)
t0=$SECONDS
{
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,pci.bus_id --format=csv,noheader
  nvidia-smi topo -m
} > "$OUTDIR/machine.txt" 2>&1
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if want inproc || want procs; then
  # the gpu configuration of scripts/build_common.sh (native architectures; warnings are errors only with
  # SYMMEM_WERROR=ON: the GPU machine's compilers may warn about more than CI's, which must not cost a GPU run)
  symmem_configure gpu "$build" > "$OUTDIR/configure.log" 2>&1 || { cat "$OUTDIR/configure.log"; exit 1; }
  symmem_build "$build" > "$OUTDIR/build.log" 2>&1 ||
    { grep -E "error|FAILED" -A5 "$OUTDIR/build.log" | head -60; exit 1; }
  echo "build: $((SECONDS - t0)) s, $ngpu GPU(s)"
fi

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
if want inproc; then
  run_ctest ctest_inproc.log "${sel[@]}" -L inproc -j "${CTEST_JOBS:-1}" || rc=$?
fi
if want procs; then
  if [ "$mps" = 1 ] && ! symmem_mps_start; then
    echo "the tests with a process per rank need MPS on one GPU: not run" | tee "$OUTDIR/ctest_gpu.log"
    rc=1
  else
    run_ctest ctest_gpu.log "${sel[@]}" -LE inproc || rc=$?
  fi
fi
symmem_mps_stop # the Python stage starts its own after its in-process run
if ls "$OUTDIR"/ctest_*.log >/dev/null 2>&1; then
  cat "$OUTDIR"/ctest_*.log | grep -E "Test +#|tests passed|Skipped|Failed|\*\*\*" | tail -80
  echo "ctest rc=$rc after $((SECONDS - t0)) s"
fi
py_part=""
if want python-threads && want python-procs; then py_part=all
elif want python-threads; then py_part=threads
elif want python-procs; then py_part=procs
fi
if [ -n "$py_part" ]; then
  py_rc=0
  SYMMEM_TEST_GPU_PART=$py_part ./scripts/test_python.sh --gpu > "$OUTDIR/python_gpu.log" 2>&1 || py_rc=$?
  grep -E "^== test_python|passed|failed|error" "$OUTDIR/python_gpu.log" | tail -20
  echo "python ($py_part) rc=$py_rc after $((SECONDS - t0)) s"
  [ "$py_rc" = 0 ] || rc=$py_rc
fi
exit $rc

#!/usr/bin/env bash
# The GPU machine's benchmarks, after a build with the tools: symmem against NCCL in the same run (every
# algorithm, auto, eager, copy-in, fp32 max, PDL off), PyTorch's own symmetric-memory all-reduce, the torch
# op as frameworks call it beside the forced algorithms and torch's kernels, the eager host cost, the other
# collectives, the fused all-reduce + add + RMSNorm, 4 and 8 ranks in one process (correctness), the
# allocation cost against PyTorch and, last, an algorithm-table tuning pass (symmem-bench --tune; the table
# lands in OUTDIR/symmem-tune.txt). The checks (every GPU test) are scripts/gpu_check.sh's.
# Logs go to OUTDIR; SUMMARY.txt lists every step with its exit code and time. Total under ~6 minutes on
# 2x H200: each step has its own time limit, and steps that would start after SYMMEM_RUN_BUDGET_S
# (330 s) are skipped and listed as such. bench/NOTES.md says how to read the tables.
#
# Usage: bench/run_gpu.sh OUTDIR [BUILD_DIR]
#   BUILD_DIR: default $SYMMEM_BUILD_DIR, else the first of build build-gpu build-bench build-* that has
#   bench/symmem-bench (scripts/gpu_check.sh builds build-gpu).
#   SYMMEM_RUN_ONLY: a regular expression (grep -E) on the step names: only the steps it matches run, the
#   others are listed as not selected (e.g. SYMMEM_RUN_ONLY='^vs_torch' SYMMEM_RUN_BUDGET_S=900 for the
#   comparison with PyTorch's kernels alone).
set -u
source "$(dirname "$0")/../scripts/build_common.sh" # --help; NVLink multicast off
symmem_help "$0" "$@"
OUT=${1:?usage: bench/run_gpu.sh OUTDIR [BUILD_DIR]}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
BUILD=${2:-${SYMMEM_BUILD_DIR:-}}
if [ -z "$BUILD" ]; then
  for d in "$ROOT"/build "$ROOT"/build-gpu "$ROOT"/build-bench "$ROOT"/build-*; do
    if [ -x "$d/bench/symmem-bench" ]; then BUILD=$d; break; fi
  done
fi
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
SUMMARY=$OUT/SUMMARY.txt
: > "$SUMMARY"
if [ -z "$BUILD" ] || [ ! -x "$BUILD/bench/symmem-bench" ]; then
  echo "run_gpu.sh: no build with bench/symmem-bench found (pass BUILD_DIR)" | tee -a "$SUMMARY"
  exit 1
fi
# NVLink multicast stays off everywhere (it can take a shared host's GPUs out of service).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
BENCH=$BUILD/bench/symmem-bench
FAILED=0
SKIPPED=0
DEADLINE=${SYMMEM_RUN_BUDGET_S:-330} # seconds: steps that would start later are skipped

# step NAME LIMIT_S CMD...: run with a time limit, log to OUT/NAME.log, record rc and seconds.
step() {
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS rc
  echo "== $name: $*" | tee -a "$SUMMARY"
  if [ -n "${SYMMEM_RUN_ONLY:-}" ] && ! grep -qE -- "$SYMMEM_RUN_ONLY" <<< "$name"; then
    echo "   not selected (SYMMEM_RUN_ONLY)" | tee -a "$SUMMARY"
    return 0
  fi
  if [ "$SECONDS" -ge "$DEADLINE" ]; then
    echo "   skipped: past the ${DEADLINE}s budget" | tee -a "$SUMMARY"
    SKIPPED=$((SKIPPED + 1))
    return 0
  fi
  if [ $((SECONDS + limit)) -gt $((DEADLINE + 30)) ]; then limit=$((DEADLINE + 30 - SECONDS)); fi
  timeout --kill-after=10 "$limit" "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  printf '   rc=%d  %ds  (%s.log)\n' "$rc" $((SECONDS - t0)) "$name" | tee -a "$SUMMARY"
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ]; then FAILED=$((FAILED + 1)); fi
  return 0
}

{
  echo "build: $BUILD"
  echo "date: $(date -u +%FT%TZ)  host: $(hostname)"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader 2>&1
  nvidia-smi topo -m 2>&1
} > "$OUT/machine.txt"

# 1. symmem vs NCCL, 2 ranks (one process per GPU), bf16 sum, graph timing.
step bench_all_algos 60 "$BENCH" --algo all -b 1K -e 64M -f 4
# programmatic dependent launch off: what PDL saves per call (bench/NOTES.md, "Measurements")
step bench_all_algos_nopdl 60 env SYMMEM_PDL=0 "$BENCH" --algo all -b 1K -e 64M -f 4
step bench_auto 60 "$BENCH" -b 1K -e 256M -f 2
# PyTorch's own symmetric-memory all-reduce (one_shot / two_shot), same GPUs, same timing method
step torch_allreduce 90 python3 "$HERE/torch_allreduce_bench.py" --nranks 2 -b 1K -e 64M -f 4
# the call frameworks make: the torch op with ordinary and symmetric tensors at sizes between powers of two,
# graphs of 50, beside every forced algorithm and PyTorch's kernels (a fresh table, measured at its init); the
# eager host cost against torch.add, torch's one-shot op and add_ + rms_norm (bench/NOTES.md, "One H100, the
# call users make"). The package from this tree, over this build's library.
# op_sweep.sh: a process per rank, under MPS where ranks outnumber the GPUs; each run's table fresh.
PYSTEP=(env PYTHONPATH="$ROOT/python" SYMMEM_LIBRARY="$BUILD/libsymmem.so")
step op_sweep 150 "${PYSTEP[@]}" SWEEP_PLACEMENTS=device SWEEP_ARGS="-n 50 -R 5" SWEEP_STEP_S=140 \
  "$HERE/op_sweep.sh" "$OUT/op_sweep" 2
step host_cost 90 "${PYSTEP[@]}" python3 "$HERE/torch_ops_bench.py" --nranks 2 --sizes 16K,112K --modes no_grad \
  --fused-tokens 1,64
step bench_eager 30 "$BENCH" -G 0 -b 1K -e 16M -f 16
step bench_copyin 40 "$BENCH" -R 0 --algo all -b 1K -e 16M -f 16
step bench_fp32_max 30 "$BENCH" -d float -o max -b 4K -e 4M -f 32
step bench_reduce_scatter 30 "$BENCH" --coll reduce_scatter -b 4K -e 64M -f 16
step bench_all_gather 30 "$BENCH" --coll all_gather -b 4K -e 64M -f 16
step bench_barrier 20 "$BENCH" --coll barrier
# the fused all-reduce + residual add + RMSNorm against the unfused sequences (hidden 4096/7168 x 1..128 tokens)
step bench_fused 60 "$BUILD/bench/symmem-fused-bench" -a all

# AUTO against PyTorch's one-shot and two-shot at 2, 4 and 8 ranks (co-located under MPS where the GPUs are
# fewer), the three forms, the sizes of a model's all-reduces and powers of two to 64 MiB; vs_torch/vs_torch.md is
# the table (bench/vs_torch_table.py). Torch's kernels stop at 2 MiB where 8 ranks share fewer GPUs: above,
# co-located, they did not complete (bench/NOTES.md, "The fixed cost of a two-shot"). About 5 minutes on one
# GPU: past the default budget, so SYMMEM_RUN_ONLY='^vs_torch' SYMMEM_RUN_BUDGET_S=900 runs it alone.
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
step vs_torch 600 "${PYSTEP[@]}" SWEEP_PLACEMENTS=device SWEEP_STEP_S=240 SWEEP_BUDGET_S=560 \
  SWEEP_TORCH_MAX="$([ "${ngpu:-0}" -lt 8 ] && echo 8:2M)" \
  SWEEP_ARGS="--forms inplace,sym,ord --skip-algos all -n 50 -R 7 --sizes 12K,48K,96K,112K,384K,1M,2M,4M,8M,16M,32M,64M" \
  "$HERE/op_sweep.sh" "$OUT/vs_torch" 2 4 8

# 2. 4 and 8 ranks placed on the available GPUs (threads of one process): correctness, every algorithm.
step bench_inproc4 40 "$BENCH" -g 4 --algo all -b 1K -e 4M -f 16 -n 5 -G 3 -w 1
step bench_inproc8 40 "$BENCH" -g 8 --algo all -b 1K -e 4M -f 16 -n 5 -G 3 -w 1

# 3. Allocation cost: symmem alloc+map vs torch symm_mem.empty + rendezvous, 2 MiB .. 4 GiB.
step torch_alloc 100 python3 "$HERE/torch_alloc_bench.py" --nranks 2 --out "$OUT/torch_alloc.json"
if [ -s "$OUT/torch_alloc.json" ]; then
  step alloc 60 "$BUILD/bench/symmem-alloc-bench" -N 2 --torch-json "$OUT/torch_alloc.json"
else
  step alloc 60 "$BUILD/bench/symmem-alloc-bench" -N 2
fi

# 4. Tuning (bench/NOTES.md, "Tuning"): all-reduce bf16 sum 1 KiB..64 MiB, every algorithm per size, the
#    table written to OUT, auto re-measured with it; then a plain run that loads it at init. Last, so the
#    steps above keep their time; raise SYMMEM_RUN_BUDGET_S (e.g. 480) when they are skipped for time.
step bench_tune 120 "$BENCH" --tune "$OUT/symmem-tune.txt" -b 1K -e 64M -f 2
if [ -s "$OUT/symmem-tune.txt" ]; then
  step bench_tuned 60 env SYMMEM_TUNE_FILE="$OUT/symmem-tune.txt" "$BENCH" -b 1K -e 256M -f 4
fi

echo "== done: $FAILED step(s) failed, $SKIPPED skipped for time; total ${SECONDS}s" | tee -a "$SUMMARY"
[ "$FAILED" -eq 0 ]

#!/usr/bin/env bash
# The compressed wire's table (docs/collectives.md, "Compressed wire"): bench/torch_wire_bench.py for each
# placement (host_numa: the PCIe lab, every rank on one GPU, every peer access over its PCIe link to pinned host
# memory; device: the same ranks in HBM), rank count and group size, into one markdown summary: per size the
# wire (torch op, wire="int8", ordinary tensors) beside auto and the best exact algorithm forced in the same
# run, the speedup, and the error table per data kind. Ranks are processes, under MPS when they share a GPU.
#
# Usage: bench/wire_sweep.sh OUTDIR BUILD_DIR [RANKS...]     RANKS default: 2 4 8
# Knobs (environment): WIRE_PLACEMENTS ("host_numa device"), WIRE_GROUPS (32 64), WIRE_MINB (4M), WIRE_MAXB
#   (64M), WIRE_N (8 ops per graph up to 16 MiB, fewer above), WIRE_R (5 timed replays), WIRE_STEP_S (240 s per
#   run), WIRE_BUDGET_S (540 s: runs that would start later are skipped and listed), WIRE_MPS (1: start MPS on
#   one GPU; 0: never).
# Estimate on one H200: the 8 lab ranks' 64 MiB operations take ~20 ms each, a run at 8 lab ranks ~60 s with its
# error table; 2 and 4 ranks and the device placement less. The defaults fit in about 8 minutes; WIRE_GROUPS=32
# halves it.
# Files in OUTDIR: wire_<placement>.log (every run's output), wire_summary.md (machine, runs, tables).
set -u
source "$(dirname "$0")/../scripts/build_common.sh"
symmem_help "$0" "$@"
OUT=${1:?usage: bench/wire_sweep.sh OUTDIR BUILD_DIR [RANKS...]}
BUILD=${2:?usage: bench/wire_sweep.sh OUTDIR BUILD_DIR [RANKS...]}
shift 2
RANKS=${*:-2 4 8}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
PLACEMENTS=${WIRE_PLACEMENTS:-host_numa device}
GROUPS_=${WIRE_GROUPS:-32 64}
STEP_S=${WIRE_STEP_S:-240}
DEADLINE=${WIRE_BUDGET_S:-540}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
BUILD=$(cd "$BUILD" && pwd)
SUMMARY=$OUT/wire_summary.md
# The package from this tree, the libraries from the build (the op library where the build made one).
export PYTHONPATH=$ROOT/python${PYTHONPATH:+:$PYTHONPATH} SYMMEM_LIBRARY=$BUILD/libsymmem.so
[ -f "$BUILD/python/csrc/libsymmem_torch.so" ] && export SYMMEM_TORCH_LIBRARY=$BUILD/python/csrc/libsymmem_torch.so
# NVLink multicast stays off everywhere (it can take a shared host's GPUs out of service).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# The algorithms at the grid they have without GEMMs beside them (as bench/lab_sweep.sh); warnings only.
export SYMMEM_CLUSTER_ROOM=${SYMMEM_CLUSTER_ROOM:-0} SYMMEM_LOG_LEVEL=${SYMMEM_LOG_LEVEL:-WARN}

ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
source "$ROOT/scripts/mps.sh"
trap symmem_mps_stop EXIT
if [ "${WIRE_MPS:-1}" = 1 ] && [ "$ngpu" -eq 1 ] && ! symmem_mps_start; then
  echo "wire_sweep.sh: MPS is not usable here; ranks that share the GPU would time out" | tee "$SUMMARY"
  exit 1
fi

{
  echo "# Compressed-wire sweep ($(date -u +%FT%TZ), $(hostname))"
  echo
  echo '```'
  nvidia-smi --query-gpu=index,name,driver_version,pcie.link.gen.current,pcie.link.width.current,memory.total \
    --format=csv,noheader 2>&1
  echo "build: $BUILD  ranks: $RANKS  placements: $PLACEMENTS  groups: $GROUPS_"
  echo "sizes: ${WIRE_MINB:-4M}..${WIRE_MAXB:-64M}"
  echo "MPS: ${CUDA_MPS_PIPE_DIRECTORY:-not used}  op library: ${SYMMEM_TORCH_LIBRARY:-none (ctypes ops)}"
  echo '```'
  echo
  echo "## Runs"
} > "$SUMMARY"

TABLES=$(mktemp)
FAILED=0
SKIPPED=0
for p in $PLACEMENTS; do
  LOG=$OUT/wire_$p.log
  : > "$LOG"
  for g in $GROUPS_; do
    for n in $RANKS; do
      if [ "$SECONDS" -ge "$DEADLINE" ]; then
        echo "- $p, G $g, $n ranks: skipped, past the ${DEADLINE}s budget" | tee -a "$SUMMARY"
        SKIPPED=$((SKIPPED + 1))
        continue
      fi
      limit=$STEP_S
      if [ $((SECONDS + limit)) -gt $((DEADLINE + 30)) ]; then limit=$((DEADLINE + 30 - SECONDS)); fi
      cmd=(python3 "$HERE/torch_wire_bench.py" --nranks "$n" -b "${WIRE_MINB:-4M}" -e "${WIRE_MAXB:-64M}"
           -n "${WIRE_N:-8}" -R "${WIRE_R:-5}" --markdown "$TABLES")
      t0=$SECONDS
      echo "== $p, G $g, $n ranks: ${cmd[*]}" >> "$LOG"
      SYMMEM_PLACEMENT=$p SYMMEM_WIRE_GROUP=$g timeout --kill-after=10 "$limit" "${cmd[@]}" >> "$LOG" 2>&1
      rc=$?
      echo "- $p, G $g, $n ranks: rc=$rc, $((SECONDS - t0)) s" | tee -a "$SUMMARY"
      if [ "$rc" -ne 0 ]; then FAILED=$((FAILED + 1)); fi
    done
  done
done
{
  echo
  echo "## Tables (µs per op, slowest rank; speedup = best exact / wire)"
  cat "$TABLES"
  echo
  echo "overall: $FAILED run(s) exited non-zero, $SKIPPED skipped for time; ${SECONDS}s"
} >> "$SUMMARY"
rm -f "$TABLES"
tail -n 40 "$SUMMARY"
[ "$FAILED" -eq 0 ]

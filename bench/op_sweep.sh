#!/usr/bin/env bash
# op_sweep.py at several rank counts and placements, a process per rank (under MPS where ranks share a GPU),
# each (ranks, placement) with a fresh tuning file, so that each run's first init measures its table as a
# user's first init would; the library's defaults otherwise (residency rules included). PyTorch's kernels
# are timed beside on device placement (--torch), where its symmetric memory lives.
#
# Usage: bench/op_sweep.sh OUTDIR [RANKS...]            RANKS default: 2 4 8
# Knobs (environment): SWEEP_PLACEMENTS ("host_numa device"), SWEEP_ARGS (extra op_sweep.py arguments, e.g.
#   "-n 50 -R 5 --declare"), SWEEP_STEP_S (240 s per run), SWEEP_BUDGET_S (540 s: runs that would start later
#   are skipped and listed), SWEEP_TAG (a suffix of the log names, for repeats), SWEEP_TORCH=0 (no torch columns:
#   at 8 co-located device ranks they take most of a run, which then ends at SWEEP_STEP_S before 4 MiB),
#   SWEEP_TORCH_MAX ("RANKS:SIZE ...", e.g. "8:2M": torch's kernels at that rank count only up to SIZE, op_sweep.py
#   --torch-max; 8 co-located ranks on one H100 did not complete them at 4 MiB).
# Files in OUTDIR: sweep<TAG>.log (every run's table and verdicts, the autotune's INFO line), sweep<TAG>.csv
# (every number of every run), tune<TAG>.txt (the tables the runs measured), vs_torch<TAG>.md (where torch was
# timed: AUTO over its faster kernel, bench/vs_torch_table.py).
# Without a GPU it says so and exits 77; it exits 1 where a run did not exit 0 (out-of-bounds values, an error,
# SWEEP_STEP_S reached).
set -u
source "$(dirname "$0")/../scripts/build_common.sh"
symmem_help "$0" "$@"
OUT=${1:?usage: bench/op_sweep.sh OUTDIR [RANKS...]}
shift
RANKS=${*:-2 4 8}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
TAG=${SWEEP_TAG:-}
LOG=$OUT/sweep$TAG.log
CSV=$OUT/sweep$TAG.csv
: > "$LOG"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "op_sweep.sh: no GPU found: nothing measured" | tee -a "$LOG"
  exit 77
fi
export SYMMEM_TUNE_FILE=$OUT/tune$TAG.txt SYMMEM_AUTOTUNE=auto
rm -f "$SYMMEM_TUNE_FILE" "$SYMMEM_TUNE_FILE.lock"
export SYMMEM_LOG_LEVEL=${SYMMEM_LOG_LEVEL:-INFO} SYMMEM_LOG_SUBSYS=${SYMMEM_LOG_SUBSYS:-COLL}
ngpu=$(nvidia-smi -L | grep -c '^GPU')
source "$ROOT/scripts/mps.sh"
trap symmem_mps_stop EXIT
started=0
failed=0
deadline=${SWEEP_BUDGET_S:-540}
t0=$SECONDS
rm -f "$CSV"
for placement in ${SWEEP_PLACEMENTS:-host_numa device}; do
  for n in $RANKS; do
    if [ $((SECONDS - t0)) -ge "$deadline" ]; then
      echo "# skipped: $n ranks, $placement (past the ${deadline}s budget)" | tee -a "$LOG"
      continue
    fi
    if [ "$n" -gt "$ngpu" ] && [ "$started" -eq 0 ]; then
      symmem_mps_start || { echo "op_sweep.sh: MPS did not start" | tee -a "$LOG"; exit 1; }
      started=1
    fi
    extra=()
    if [ "$placement" = device ] && [ "${SWEEP_TORCH:-1}" != 0 ]; then
      extra+=(--torch)
      for pair in ${SWEEP_TORCH_MAX:-}; do
        [ "${pair%%:*}" = "$n" ] && extra+=(--torch-max "${pair#*:}")
      done
    fi
    echo "## $n ranks, placement $placement" | tee -a "$LOG"
    s0=$SECONDS
    SYMMEM_PLACEMENT=$placement timeout --kill-after=10 "${SWEEP_STEP_S:-240}" \
      python3 "$HERE/op_sweep.py" --nranks "$n" --csv "$OUT/.run.csv" "${extra[@]}" ${SWEEP_ARGS:-} >> "$LOG" 2>&1
    rc=$?
    echo "# rc=$rc in $((SECONDS - s0)) s" | tee -a "$LOG"
    [ "$rc" -ne 0 ] && failed=1
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
      # ranks killed inside their kernels can leave the MPS server unusable for the next run ("busy or
      # unavailable"): start it afresh
      sleep 2
      if [ "$started" -eq 1 ]; then symmem_mps_stop; symmem_mps_start || exit 1; fi
    fi
    if [ -f "$OUT/.run.csv" ]; then
      if [ -f "$CSV" ]; then tail -n +2 "$OUT/.run.csv" >> "$CSV"; else cp "$OUT/.run.csv" "$CSV"; fi
      rm -f "$OUT/.run.csv"
    fi
  done
done
grep -E "^# (verdict|out of bounds|rc=|skipped)|^## " "$LOG"
# AUTO over torch's faster kernel, a cell per (ranks, size), where torch was timed
if [ -f "$CSV" ] && python3 "$HERE/vs_torch_table.py" "$CSV" > "$OUT/vs_torch$TAG.md" 2>/dev/null; then
  cat "$OUT/vs_torch$TAG.md"
else
  rm -f "$OUT/vs_torch$TAG.md"
fi
exit "$failed"

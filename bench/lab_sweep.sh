#!/usr/bin/env bash
# The PCIe lab sweep on one GPU (docs/collectives.md, "The PCIe lab"): for each placement
# (host_numa: the lab, every peer access over the GPU's own PCIe link to pinned host memory; device: the
# same ranks in HBM) and each rank count, one symmem-bench run with every rank a process (under MPS when
# ranks share a GPU): at its init the communicator autotunes (SYMMEM_AUTOTUNE=auto, a fresh tuning file),
# then every algorithm forced and auto side by side at every power of two from 1 KiB to LAB_MAXB, bf16 sum,
# CUDA-graph timing, with the cost model's prediction beside each row (--model 1). The summary collects
# each run's markdown rows (auto and its choice, the best forced algorithm, auto/best, the model's table
# alone, the model's prediction, the floor), its pass/fail line for auto <= 1.10x best, and which rows above
# 1.10x ran another algorithm than the best (a choice to fix) or the best one itself (a timing's spread).
#
# Usage: bench/lab_sweep.sh OUTDIR BUILD_DIR [RANKS...]      RANKS default: 2 4 8 (e.g. 2 4 8 12 16)
# Knobs (environment): LAB_PLACEMENTS ("host_numa device"), LAB_MAXB (4M), LAB_N (10 ops per graph),
#   LAB_R (5 timed replays), LAB_W (2 warm-up ops), LAB_STEP_S (180 s per run), LAB_BUDGET_S (330 s: runs
#   that would start later are skipped and listed), LAB_MPS (1: start MPS on one GPU; 0: never).
# Estimate on one H200 (bench/NOTES.md, "The PCIe lab"): ranks 2 4 8 at the defaults about 1 minute (8 lab
# ranks ~20 s, most of it 4 MiB one-shot pushes through the shared link); 12 and 16 add about 1.5 minutes.
# Halve LAB_N and LAB_R to halve it.
# Files in OUTDIR (few: a device call returns at most 8): lab_<placement>.log (every run's output and the
# library's INFO lines of the autotune, appended), lab_tune.txt (the tables the autotune saved),
# lab_summary.md (machine, the runs with exit codes and seconds, the tables, pass/fail).
set -u
source "$(dirname "$0")/../scripts/build_common.sh" # --help; NVLink multicast off
symmem_help "$0" "$@"
OUT=${1:?usage: bench/lab_sweep.sh OUTDIR BUILD_DIR [RANKS...]}
BUILD=${2:?usage: bench/lab_sweep.sh OUTDIR BUILD_DIR [RANKS...]}
shift 2
RANKS=${*:-2 4 8}
PLACEMENTS=${LAB_PLACEMENTS:-host_numa device}
MAXB=${LAB_MAXB:-4M}
NOPS=${LAB_N:-10}
REPLAYS=${LAB_R:-5}
WARM=${LAB_W:-2}
STEP_S=${LAB_STEP_S:-180}
DEADLINE=${LAB_BUDGET_S:-330}
BENCH=$BUILD/bench/symmem-bench
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
SUMMARY=$OUT/lab_summary.md
if [ ! -x "$BENCH" ]; then
  echo "lab_sweep.sh: $BENCH not found (build with -DSYMMEM_BUILD_TOOLS=ON)" | tee "$SUMMARY"
  exit 1
fi
# NVLink multicast stays off everywhere (it can take a shared host's GPUs out of service).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# A fresh table: every (ranks, placement) key is measured once, at the first init of its run.
export SYMMEM_TUNE_FILE=$OUT/lab_tune.txt SYMMEM_AUTOTUNE=auto
rm -f "$SYMMEM_TUNE_FILE" "$SYMMEM_TUNE_FILE.lock"
# The lab measures the algorithms at the grid they have without GEMMs beside them: no cluster room.
export SYMMEM_CLUSTER_ROOM=${SYMMEM_CLUSTER_ROOM:-0}
# The autotune's decisions and the probe's figures, not the per-call traces.
export SYMMEM_LOG_LEVEL=${SYMMEM_LOG_LEVEL:-INFO} SYMMEM_LOG_SUBSYS=${SYMMEM_LOG_SUBSYS:-COLL}

ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
source "$(dirname "$0")/../scripts/mps.sh"
trap symmem_mps_stop EXIT
# Ranks that are processes on one GPU run their kernels at the same time only under MPS (without it they
# take turns, and kernels that wait for each other stall until the timeout).
if [ "${LAB_MPS:-1}" = 1 ] && [ "$ngpu" -eq 1 ] && ! symmem_mps_start; then
  echo "lab_sweep.sh: MPS is not usable here; ranks that share the GPU would time out" | tee "$SUMMARY"
  exit 1
fi

{
  echo "# PCIe lab sweep ($(date -u +%FT%TZ), $(hostname))"
  echo
  echo '```'
  nvidia-smi --query-gpu=index,name,driver_version,pcie.link.gen.current,pcie.link.width.current,memory.total \
    --format=csv,noheader 2>&1
  echo "build: $BUILD  ranks: $RANKS  placements: $PLACEMENTS  sizes: 1K..$MAXB x2  -n $NOPS -R $REPLAYS -w $WARM"
  echo "MPS: ${CUDA_MPS_PIPE_DIRECTORY:-not used}"
  echo '```'
  echo
} > "$SUMMARY"

TABLE=$(mktemp)
FAILED=0
SKIPPED=0
echo "## Runs" >> "$SUMMARY"
for p in $PLACEMENTS; do
  LOG=$OUT/lab_$p.log
  : > "$LOG"
  for n in $RANKS; do
    if [ "$SECONDS" -ge "$DEADLINE" ]; then
      echo "- $p, $n ranks: skipped, past the ${DEADLINE}s budget" | tee -a "$SUMMARY"
      SKIPPED=$((SKIPPED + 1))
      continue
    fi
    limit=$STEP_S
    if [ $((SECONDS + limit)) -gt $((DEADLINE + 30)) ]; then limit=$((DEADLINE + 30 - SECONDS)); fi
    cmd=("$BENCH" --nranks "$n" --placement "$p" --algo all -b 1K -e "$MAXB" -f 2 -n "$NOPS" -G "$REPLAYS" -w "$WARM" --model 1)
    t0=$SECONDS
    echo "== $p, $n ranks: ${cmd[*]}" >> "$LOG"
    timeout --kill-after=10 "$limit" "${cmd[@]}" >> "$LOG" 2>&1
    rc=$?
    echo "- $p, $n ranks: rc=$rc, $((SECONDS - t0)) s" | tee -a "$SUMMARY"
    if [ "$rc" -ne 0 ]; then FAILED=$((FAILED + 1)); fi
    # this run's markdown rows and its pass/fail line (the log holds every run: take the ones after its marker)
    awk -v mark="== $p, $n ranks:" 'index($0, mark) == 1 {on = 1; next} /^== / {on = 0} on && (/^\| / || /^# AUTO <=/)' \
      "$LOG" >> "$TABLE"
  done
done

{
  echo
  echo "## auto (after the init's autotune) against the best forced algorithm, bf16 sum, µs per op (slowest rank)"
  echo
  echo "| ranks | memory | size | auto (choice) | best forced | auto/best | model table alone (choice) | model/best | model for best | floor | best/floor |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|"
  grep '^| ' "$TABLE"
  echo
  grep '^# AUTO <=' "$TABLE" | sed 's/^# /- /'
  # A row above 1.10x is a wrong choice only where auto ran another algorithm than the best; where it ran
  # the same one, the ratio is that kernel's spread between two timings (processes sharing one GPU).
  awk -F'|' 'function trim(x) { gsub(/^ +| +$/, "", x); return x }
    /^\| / {
      ratio = ($6 + 0 > 0) ? ($5 + 0) / ($6 + 0) : 0; if (ratio <= 1.10) next  # the times, not the rounded column
      a = $5; b = $6; sub(/.*\(/, "", a); sub(/\).*/, "", a); sub(/.*\(/, "", b); sub(/\).*/, "", b)
      row = sprintf("%s ranks, %s, %s (%.3fx)", trim($2), trim($3), trim($4), ratio)
      if (a == b) same = same (same ? "; " : "") row " " a
      else other = other (other ? "; " : "") row " " a " vs " b
    } END {
      print "- above 1.10x with another algorithm than the best (the choice): " (other ? other : "none")
      print "- above 1.10x with the best algorithm itself (its spread): " (same ? same : "none")
    }' "$TABLE"
  echo
  npass=$(grep -c '^# AUTO <=.*PASS' "$TABLE")
  nfail=$(grep -c '^# AUTO <=.*FAIL' "$TABLE")
  echo "overall: $npass run(s) pass, $nfail fail; $FAILED run(s) exited non-zero, $SKIPPED skipped for time; ${SECONDS}s"
  echo
  echo "## Tables the autotune saved ($SYMMEM_TUNE_FILE)"
  echo
  echo '```'
  cat "$SYMMEM_TUNE_FILE" 2>/dev/null || echo "(none saved)"
  echo '```'
} >> "$SUMMARY"
rm -f "$TABLE"
tail -n 20 "$SUMMARY"
[ "$FAILED" -eq 0 ] && ! grep -q '^- AUTO <=.*FAIL' "$SUMMARY"

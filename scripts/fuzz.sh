#!/usr/bin/env bash
# usage: scripts/fuzz.sh [SECONDS_PER_TARGET [TARGET...]]     (-h: this text)
#
# Fuzz every libFuzzer target for a bounded time (needs clang): the unique-id parser, the size and integer
# parameters, the tune file, gpus.json, whole sysfs trees, and the bootstrap message decoder. Default 60 s
# per target, every target (unique_id params tune topo_json topo_sysfs bootmsg).
#   SYMMEM_FUZZ_MERGE=1   afterwards merge inputs with new coverage into tests/fuzz/corpus/<target>
#                         (review and commit them: they become part of the regression replay)
# Uses the sanitizer build (the san configuration of scripts/build_common.sh, build-san/, scripts/sanitize.sh's
# folder). Crashes are kept under build-san/fuzz-crashes/<target>/; a crash makes the script fail. Add a fixed
# crash's input to the corpus.
set -euo pipefail
source "$(dirname "$0")/build_common.sh"
symmem_help "$0" "$@"
cd "$(dirname "$0")/.."
export SYMMEM_LOG_LEVEL=NONE
secs=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(unique_id params tune topo_json topo_sysfs bootmsg)
build=$(symmem_dir san)
command -v clang >/dev/null || { echo "fuzz: needs clang (libFuzzer)"; exit 1; }
symmem_find_nvcc
symmem_configure san "$build"
symmem_build "$build" $(printf 'fuzz_%s ' "${targets[@]}")
export ASAN_OPTIONS="detect_leaks=1:protect_shadow_gap=0" UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
status=0
for t in "${targets[@]}"; do
  work="$build/fuzz-work/$t" crashes="$build/fuzz-crashes/$t"
  mkdir -p "$work" "$crashes"
  cp -n tests/fuzz/corpus/"$t"/* "$work"/ 2>/dev/null || true
  log="$build/fuzz-work/$t.log"
  if "$build/tests/fuzz/fuzz_$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
       -artifact_prefix="$crashes/" "$work" >"$log" 2>&1; then
    verdict=ok
  else
    verdict="CRASH (see $log and $crashes)"
    status=1
  fi
  runs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' || echo "?")
  cov=$(grep -Eo 'cov: [0-9]+' "$log" | tail -1 | grep -Eo '[0-9]+' || echo "?")
  echo "fuzz_$t: $runs inputs in ${secs} s, coverage $cov, corpus $(ls "$work" | wc -l) inputs: $verdict"
  if [ "${SYMMEM_FUZZ_MERGE:-0}" = 1 ] && [ "$verdict" = ok ]; then
    "$build/tests/fuzz/fuzz_$t" -merge=1 tests/fuzz/corpus/"$t" "$work" >>"$log" 2>&1
    echo "fuzz_$t: merged into tests/fuzz/corpus/$t ($(ls tests/fuzz/corpus/"$t" | wc -l) inputs)"
  fi
done
exit $status

#!/usr/bin/env bash
# usage: scripts/sanitize.sh     (-h: this text)
#
# The sanitizer and fuzz-replay stage of the tests (scripts/test.sh calls it last; it also runs alone).
# Builds the library, the CPU tests and the fuzz targets with AddressSanitizer + UndefinedBehaviorSanitizer
# (the san configuration of scripts/build_common.sh: clang with libFuzzer, gcc without it if clang is
# missing; one CUDA architecture) in build-san/, runs the CPU tests, which include the replay of every
# committed fuzz corpus, and fails on any test failure and on any sanitizer report, also one from a child
# process whose exit a test tolerated (reports go to files, checked at the end).
# Cost: its own build (a few minutes the first time, ~1 GB in build-san/) and about a minute of tests.
#   SYMMEM_SAN_BUILD_DIR    build folder (default build-san)
#   SYMMEM_SKIP_SANITIZE=1  skip the stage (says so)
#   SYMMEM_TEST_LABEL=gpu   (scripts/test.sh's GPU-only runs) skips it too: it is a CPU stage
set -euo pipefail
source "$(dirname "$0")/build_common.sh"
symmem_help "$0" "$@"
cd "$(dirname "$0")/.."
if [ "${SYMMEM_SKIP_SANITIZE:-0}" = 1 ] || [ "${SYMMEM_TEST_LABEL:-all}" = gpu ]; then
  echo "sanitize: skipped (SYMMEM_SKIP_SANITIZE=1 or SYMMEM_TEST_LABEL=gpu)"
  exit 0
fi
symmem_find_nvcc
start=$(date +%s)
build=$(symmem_dir san)
if command -v clang >/dev/null && command -v clang++ >/dev/null; then
  what="clang $(clang -dumpversion), libFuzzer targets"
else
  what="gcc $(gcc -dumpversion) (no clang: fuzz targets built with the replay driver)"
fi
symmem_configure san "$build"
symmem_build "$build"

logs="$PWD/$build/sanitizer-logs"
rm -rf "$logs" && mkdir -p "$logs" && chmod 1777 "$logs" # the attack test's children run as another user
export ASAN_OPTIONS="log_path=$logs/asan:detect_leaks=1:protect_shadow_gap=0"
export UBSAN_OPTIONS="log_path=$logs/ubsan:print_stacktrace=1:halt_on_error=1"
status=0
# Python loads libsymmem.so into an uninstrumented interpreter: that test runs in the plain build only.
(cd "$build" && ctest -L cpu -LE python -j "$(nproc)" --output-on-failure | tee ctest.log | grep -v '^vm:') || status=1
reports=$(find "$logs" -type f | sort)
if [ -n "$reports" ]; then
  echo "sanitize: sanitizer reports:"
  for f in $reports; do echo "== $f"; cat "$f"; done
  status=1
fi
ntests=$(grep -Eo 'tests passed, [0-9]+ tests failed out of [0-9]+' "$build/ctest.log" | grep -Eo '[0-9]+$' || echo 0)
ninputs=$(find tests/fuzz/corpus -type f | wc -l)
ntargets=$(find tests/fuzz/corpus -mindepth 1 -maxdepth 1 -type d | wc -l)
echo "sanitize: ASan+UBSan ($what): $ntests CPU tests incl. fuzz replay of $ninputs inputs over $ntargets corpora;" \
     "$(echo "$reports" | grep -c . || true) sanitizer reports; $(( $(date +%s) - start )) s;" \
     "$([ $status = 0 ] && echo passed || echo FAILED)"
exit $status

#!/usr/bin/env bash
# `python -m symmem info` prints what symmem-info prints: the Python listing is the library's table read
# through the C API (symmem_param_get), formatted the same way, not a copy of it. Run with a value from the
# environment, a malformed one and the defaults, in an environment with no other SYMMEM_* variable.
#   check_info_python.sh PYTHON SYMMEM_INFO LIBSYMMEM PYTHON_DIR
set -u
py=${1:?usage: check_info_python.sh PYTHON SYMMEM_INFO LIBSYMMEM PYTHON_DIR}
info=${2:?} lib=${3:?} pydir=${4:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unset_args=()
while IFS= read -r v; do unset_args+=(-u "$v"); done < <(env | sed -n 's/^\(SYMMEM_[A-Za-z0-9_]*\)=.*/\1/p')
# SYMMEM_LIBRARY (which libsymmem Python loads) is in both environments: the table lists it too.
set_env=(SYMMEM_TIMEOUT_MS=1234 SYMMEM_WORKSPACE_BYTES=lots SYMMEM_LOG_LEVEL=NONE SYMMEM_GRID_SHARE=200
         SYMMEM_SGLANG_MODE=bogus SYMMEM_LIBRARY="$lib")
env "${unset_args[@]}" "${set_env[@]}" "$info" > "$tmp/c.txt" || { echo "FAIL: symmem-info exited $?"; exit 1; }
env "${unset_args[@]}" "${set_env[@]}" PYTHONPATH="$pydir" "$py" -m symmem info > "$tmp/py.txt" ||
  { echo "FAIL: python -m symmem info exited $?"; exit 1; }
if ! cmp -s "$tmp/c.txt" "$tmp/py.txt"; then
  diff -u "$tmp/c.txt" "$tmp/py.txt" | head -40
  echo "FAIL: python -m symmem info differs from symmem-info (- symmem-info, + python)"
  exit 1
fi
# and the listing is not empty of what the test set
grep -q '^SYMMEM_TIMEOUT_MS=1234$' "$tmp/py.txt" || { echo "FAIL: the environment's value is not listed"; exit 1; }
grep -q '^    REFUSED: bogus is not one of fallback, replace, off; the default "fallback" is used$' "$tmp/py.txt" ||
  { echo "FAIL: a refused value of the Python package is not marked"; exit 1; }
echo "python -m symmem info = symmem-info ($(grep -c '^SYMMEM_' "$tmp/py.txt") parameters)"

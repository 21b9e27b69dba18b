#!/usr/bin/env bash
# Host-side writes into device memory in the collective tests and the benchmarks (bench/, tests/coll/) go
# through the harness's cc_rank_memset / cc_rank_upload, which run on the rank's stream and wait. A bare
# cudaMemset, or a cudaMemcpy into the device, runs on the legacy default stream, which the ranks'
# non-blocking streams do not wait for: a large one can still be running when the first collective starts
# and overwrite its input (harness/harness.h says more). A line that means the legacy stream says so in a
# comment containing "legacy stream:". Prints every violation as file:line and exits 1 if there is any.
#   check_streams.sh ROOT          check the tree at ROOT
#   check_streams.sh --self-test   a clean synthetic tree passes, each kind of violation fails
set -u
DIRS=(bench tests/coll)

check_tree() {
  local root=$1 bad=0 f
  for d in "${DIRS[@]}"; do
    [ -d "$root/$d" ] || continue
    while IFS= read -r -d '' f; do
      # a statement is joined up to its ';' so that a cudaMemcpy's direction on a later line is seen
      awk -v file="${f#"$root"/}" '
        function flush() {
          if (stmt != "" && stmt !~ /legacy stream:/) {
            if (stmt ~ /cudaMemset(2D)?[[:space:]]*\(/ ||
                (stmt ~ /cudaMemcpy[[:space:]]*\(/ && stmt ~ /cudaMemcpy(HostToDevice|Default)/))
              { printf "%s:%d: host-side write on the legacy stream (use cc_rank_memset / cc_rank_upload)\n", file, start; bad = 1 }
          }
          stmt = ""
        }
        {
          if (stmt == "" && $0 !~ /cudaMem(set|cpy)/) next
          if (stmt == "") start = NR
          stmt = stmt " " $0
          if ($0 ~ /;/) flush()
        }
        END { flush(); exit bad }' "$f" || bad=1
    done < <(find "$root/$d" -type f \( -name '*.c' -o -name '*.cu' -o -name '*.cpp' \) -print0)
  done
  return $bad
}

self_test() {
  local t rc=0
  t=$(mktemp -d)
  mkdir -p "$t/clean/bench" "$t/memset/tests/coll" "$t/upload/bench" "$t/updefault/tests/coll"
  cat > "$t/clean/bench/a.c" <<'C'
void f(void) {
    cc_rank_memset(R, p, 0, n);
    cudaMemcpy(h, d, n,
               cudaMemcpyDeviceToHost);
    cudaMemset(d, 0, n); /* legacy stream: checks the whole context */
}
C
  printf 'void f(void) { cudaMemset(d, 0, n); }\n' > "$t/memset/tests/coll/a.c"
  printf 'void f(void) {\n    cudaMemcpy(d, h, n,\n               cudaMemcpyHostToDevice);\n}\n' > "$t/upload/bench/a.c"
  printf 'void f(void) { cudaMemcpy(d, h, n, cudaMemcpyDefault); }\n' > "$t/updefault/tests/coll/a.c"
  check_tree "$t/clean" >/dev/null || { echo "self-test: the clean tree was flagged"; rc=1; }
  for bad in memset upload updefault; do
    check_tree "$t/$bad" >/dev/null && { echo "self-test: the $bad violation was not flagged"; rc=1; }
  done
  rm -rf "$t"
  [ $rc = 0 ] && echo "check_streams self-test: passed"
  return $rc
}

if [ "${1:-}" = --self-test ]; then self_test; exit $?; fi
check_tree "${1:?usage: check_streams.sh ROOT | --self-test}"

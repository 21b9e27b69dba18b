#!/usr/bin/env bash
# The global symbols the libraries define (house rule 10: export only symmem_*): every global symbol that
# libsymmem.so exports or that a symmem static archive defines must start with symmem_, so that linking symmem
# next to another library never picks the wrong json_parse (or makes a duplicate). Prints each one that does
# not, with its count per library, and exits 1 if there is any.
#   check_symbols.sh NM LIBRARY...           check each library (.so: its dynamic symbols; .a: every member's)
#   check_symbols.sh --self-test NM CC AR    check archives made here: a clean one passes, a leaky one fails
set -u

# The defined global symbols of one library, one per line.
globals() {
  local nm=$1 lib=$2
  case "$lib" in
    *.a) "$nm" -g --defined-only "$lib" 2>/dev/null | awk 'NF >= 3 { print $3 }' ;;
    *) "$nm" -D --defined-only "$lib" 2>/dev/null | awk 'NF >= 3 { print $3 }' ;;
  esac
}

check() {
  local nm=$1 lib bad=0 all stray n
  shift
  for lib in "$@"; do
    [ -f "$lib" ] || { echo "$lib: no such library"; bad=1; continue; }
    all=$(globals "$nm" "$lib")
    [ -n "$all" ] || { echo "$lib: no global symbols found ($nm failed?)"; bad=1; continue; }
    stray=$(echo "$all" | grep -v '^symmem_' | sort -u)
    if [ -n "$stray" ]; then
      n=$(echo "$stray" | wc -l)
      echo "$lib: $n global symbol(s) without the symmem_ prefix:"
      echo "$stray" | head -40 | sed 's/^/  /'
      [ "$n" -le 40 ] || echo "  ... and $((n - 40)) more"
      bad=1
    else
      echo "$lib: $(echo "$all" | sort -u | wc -l) global symbols, all symmem_*"
    fi
  done
  return $bad
}

tmp=""
trap '[ -z "$tmp" ] || rm -rf "$tmp"' EXIT

self_test() {
  local nm=$1 cc=$2 ar=$3
  tmp=$(mktemp -d /tmp/symmem-check-symbols-XXXXXX)
  printf 'int symmem_api(void) { return 1; }\nstatic int helper(void) { return 2; }\nint symmem_more(void) { return helper(); }\n' >"$tmp/clean.c"
  printf 'int symmem_api(void) { return 1; }\nint json_parse(void) { return 2; }\n' >"$tmp/leaky.c"
  for t in clean leaky; do
    "$cc" -c -o "$tmp/$t.o" "$tmp/$t.c" && "$ar" rcs "$tmp/lib$t.a" "$tmp/$t.o" || { echo "self-test: cannot build $t"; return 1; }
  done
  check "$nm" "$tmp/libclean.a" >/dev/null || { echo "self-test: a clean archive was reported"; return 1; }
  local out
  out=$(check "$nm" "$tmp/libleaky.a") && { echo "self-test: an archive defining json_parse passed"; return 1; }
  echo "$out" | grep -q '^  json_parse$' || { echo "self-test: json_parse not named: $out"; return 1; }
  echo "self-test passed"
}

if [ "${1:-}" = --self-test ]; then
  self_test "$2" "$3" "$4"
else
  nm=$1
  shift
  check "$nm" "$@"
fi

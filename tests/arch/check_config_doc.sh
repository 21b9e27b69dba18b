#!/usr/bin/env bash
# docs/configuration.md is generated from the parameter table (base/param.h) by `symmem-info --markdown`:
# this fails while the committed file differs from what the table generates, and says how to regenerate it.
# It also checks symmem-info's listing of the values in effect (every parameter once; a value from the
# environment, a default, and each refused value marked with its reason and the default used), and that
# the comparison does report a stale file.
#   check_config_doc.sh SYMMEM_INFO DOC
set -u
info=${1:?usage: check_config_doc.sh SYMMEM_INFO DOC}
doc=${2:?usage: check_config_doc.sh SYMMEM_INFO DOC}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0 listing_fails=0
fail() { echo "FAIL: $*"; fails=1; }
listing_fail() { fail "$@"; listing_fails=1; }

# The listing in a clean environment (no SYMMEM_* but the ones set here).
unset_args=()
while IFS= read -r v; do unset_args+=(-u "$v"); done < <(env | sed -n 's/^\(SYMMEM_[A-Za-z0-9_]*\)=.*/\1/p')
clean() { env "${unset_args[@]}" "$@"; }

clean "$info" --markdown > "$tmp/generated.md" || fail "symmem-info --markdown exited $?"
same() { cmp -s "$1" "$tmp/generated.md"; }
if ! same "$doc"; then
  diff -u "$doc" "$tmp/generated.md" | head -60
  fail "$doc is not what the parameter table generates (the diff above: - committed, + generated). The table
      (base/param.h) is the source: regenerate the file with \`cmake --build build --target configuration_doc\`
      (it runs symmem-info --markdown > docs/configuration.md) and commit it"
fi
# the comparison must see a stale file: one row less, one word changed
grep -v '^| `SYMMEM_TIMEOUT_MS`' "$tmp/generated.md" > "$tmp/stale1.md"
sed 's/bootstrap and collective timeout/bootstrap timeout/' "$tmp/generated.md" > "$tmp/stale2.md"
for s in stale1 stale2; do same "$tmp/$s.md" && fail "the comparison passed a stale file ($s)"; done

clean SYMMEM_TIMEOUT_MS=1234 SYMMEM_WORKSPACE_BYTES=lots "$info" > "$tmp/listing.txt" 2> "$tmp/stderr.txt" ||
  listing_fail "symmem-info exited $?"
rows=$(grep -c '^| `SYMMEM_' "$tmp/generated.md")
names=$(grep -c '^SYMMEM_[A-Z0-9_]*=' "$tmp/listing.txt")
[ "$rows" -gt 0 ] && [ "$rows" = "$names" ] || listing_fail "the listing has $names parameters, the table $rows"
entry() { awk -v head="$1" '$0 == head {on = 1} on && $0 == "" {exit} on' "$tmp/listing.txt"; }
for v in $(sed -n 's/^| `\(SYMMEM_[A-Z0-9_]*\)`.*/\1/p' "$tmp/generated.md"); do
  [ "$(grep -c "^$v=" "$tmp/listing.txt")" = 1 ] || listing_fail "$v is not listed exactly once"
done
entry SYMMEM_TIMEOUT_MS=1234 | grep -q '(int: 1..2147483647; default "30000"; value from: environment)' ||
  listing_fail "SYMMEM_TIMEOUT_MS=1234 from the environment is not shown as such"
entry SYMMEM_WORKSPACE_BYTES=lots | grep -q 'REFUSED: lots is not a size (like 4096, 64K, 32M, 1G); the default "64M" is used' ||
  listing_fail "a malformed SYMMEM_WORKSPACE_BYTES is not shown as such"
entry SYMMEM_LOG_LEVEL=WARN | grep -q '(string: NONE, WARN, INFO, DEBUG, TRACE; default "WARN"; value from: default)' ||
  listing_fail "SYMMEM_LOG_LEVEL is not shown with its default"

# Each refused value, one run each: marked with its reason and the default used instead, and warned about.
while IFS='|' read -r var value reason; do
  clean "$var=$value" "$info" > "$tmp/one.txt" 2> "$tmp/one-stderr.txt" || listing_fail "symmem-info with $var=$value exited $?"
  awk -v head="$var=$value" '$0 == head {on = 1} on && $0 == "" {exit} on' "$tmp/one.txt" | tr '\n' ' ' |
    tr -s ' ' | grep -qF "REFUSED: $value is $reason" ||
    { cp "$tmp/one.txt" "$tmp/listing.txt"; listing_fail "$var=$value is not marked as refused ($reason)"; }
  grep -qF "$var=$value is ${reason%%; the default*}" "$tmp/one-stderr.txt" || listing_fail "$var=$value: no warning on stderr"
done <<'CASES'
SYMMEM_ALGO|fastest|not one of auto, oneshot_pull
SYMMEM_PLACEMENT|gpu|not one of auto, device, host_numa, host; the default "auto" is used
SYMMEM_TIMEOUT_MS|-5|not in 1..2147483647; the default "30000" is used
SYMMEM_GRID_SHARE|200|not in 1..100; the default "75" is used
SYMMEM_ERROR_POLL_MS|9223372036854775807|not in 1..60000; the default "10" is used
SYMMEM_MAX_BLOCKS|-3|not in 0..2147483647; the default "0" is used
SYMMEM_PDL|maybe|not 0 or 1 (nor false/true, no/yes, off/on); the default "1" is used
SYMMEM_AUTOTUNE|sometimes|not one of auto, off, force, 0, 1; the default "auto" is used
SYMMEM_ON_ERROR|panic|not one of report, abort; the default "report" is used
SYMMEM_BACKEND|gpu|not one of cuda, host; the default "cuda" is used
CASES
# An empty value is the default, and the listing says so (it turns nothing off).
clean SYMMEM_LOG_SUBSYS= "$info" > "$tmp/one.txt" 2>&1
awk '$0 == "SYMMEM_LOG_SUBSYS=" {on = 1} on && $0 == "" {exit} on' "$tmp/one.txt" | tr '\n' ' ' | tr -s ' ' |
  grep -qF 'value from: environment, empty: the default is used' ||
  listing_fail "an empty SYMMEM_LOG_SUBSYS is not shown as the default"
if [ $fails != 0 ]; then
  if [ $listing_fails != 0 ]; then
    echo "--- symmem-info's listing:"; cat "$tmp/listing.txt"; cat "$tmp/stderr.txt"
  fi
  exit 1
fi
echo "docs/configuration.md matches the parameter table ($rows parameters); symmem-info lists each once with its source"

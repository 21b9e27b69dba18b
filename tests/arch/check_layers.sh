#!/usr/bin/env bash
# The include direction between the library's folders (house rule 16, "arrows point down"):
#   base <- boot <- topology <- alloc <- collectives <- comm
# A file of one folder includes only "symmem/..." (the public headers) and headers of its own folder or of a
# folder before it; a public header (include/symmem/) includes only public headers, and so does a tool
# (tools/: one main() over the public API, never a layer's internals). Prints every violation as file:line
# and exits 1 if there is any.
#   check_layers.sh ROOT          check the tree at ROOT
#   check_layers.sh --self-test   check synthetic trees: one clean, one per kind of violation (each must fail)
set -u
LAYERS=(base boot topology alloc collectives comm)

rank_of() { # folder name -> its position in LAYERS, or -1
  local i
  for i in "${!LAYERS[@]}"; do [ "${LAYERS[$i]}" = "$1" ] && { echo "$i"; return; }; done
  echo -1
}

# public_only ROOT DIR WHAT: every quoted include of the files under ROOT/DIR is a public header (symmem/...).
public_only() {
  local root=$1 dir=$2 what=$3 bad=0 f line inc
  [ -d "$root/$dir" ] || return 0
  while IFS= read -r -d '' f; do
    while IFS=: read -r line inc; do
      case "$inc" in symmem/*) ;; *) echo "${f#"$root"/}:$line: $what includes \"$inc\", which is not public (symmem/...)"; bad=1 ;; esac
    done < <(grep -n -o -E '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[^"]+"' "$f" | sed -E 's/^([0-9]+):.*"([^"]+)"/\1:\2/')
  done < <(find "$root/$dir" -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print0)
  return $bad
}

check_tree() {
  local root=$1 bad=0 f line inc top mine theirs
  for layer in "${LAYERS[@]}"; do
    [ -d "$root/$layer" ] || continue
    mine=$(rank_of "$layer")
    while IFS= read -r -d '' f; do
      while IFS=: read -r line inc; do
        top=${inc%%/*}
        if [ "$top" = symmem ] && [ "$inc" != symmem ]; then continue; fi
        theirs=$(rank_of "$top")
        if [ "$inc" = "$top" ] || [ "$theirs" -lt 0 ]; then
          echo "${f#"$root"/}:$line: includes \"$inc\", which is neither public (symmem/...) nor a library folder's"
          bad=1
        elif [ "$theirs" -gt "$mine" ]; then
          echo "${f#"$root"/}:$line: $layer/ includes \"$inc\" of $top/, a layer above it"
          bad=1
        fi
      done < <(grep -n -o -E '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[^"]+"' "$f" | sed -E 's/^([0-9]+):.*"([^"]+)"/\1:\2/')
    done < <(find "$root/$layer" -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print0)
  done
  public_only "$root" include/symmem "a public header" || bad=1
  public_only "$root" tools "a tool" || bad=1
  return $bad
}

self_test() {
  local tmp fails=0
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  mk() { mkdir -p "$(dirname "$1")"; printf '%s\n' "$2" > "$1"; }
  # clean: every arrow points down or sideways
  mk "$tmp/ok/base/a.h" '#include "symmem/symmem.h"'
  mk "$tmp/ok/boot/m.c" $'#include "base/a.h"\n#include "boot/m.h"'
  mk "$tmp/ok/alloc/b.c" $'#include "base/a.h"\n#include "boot/m.h"\n#include "topology/t.h"\n#include "alloc/b.h"'
  mk "$tmp/ok/comm/c.c" $'#include "collectives/coll.h"\n#include <stdio.h>'
  mk "$tmp/ok/include/symmem/symmem.h" '#include "symmem/topo.h"'
  mk "$tmp/ok/tools/symmem_info.c" $'#include "symmem/symmem.h"\n#include <stdio.h>'
  check_tree "$tmp/ok" >/dev/null || { echo "self-test: a clean tree was reported"; fails=1; }
  # each of these must be reported
  mk "$tmp/up/base/a.c" '#include "alloc/alloc.h"'
  mk "$tmp/up2/collectives/k.cu" '  #  include "comm/watch.h"'
  mk "$tmp/up3/topology/t.c" '#include "collectives/coll.h"'
  mk "$tmp/boot_up/base/log.c" '#include "boot/comm_state.h"'
  mk "$tmp/boot_up2/boot/mesh.c" '#include "topology/topo.h"'
  mk "$tmp/foreign/alloc/b.c" '#include "coll_common.h"'
  mk "$tmp/tests/alloc/b.c" '#include "tests/test_util.h"'
  mk "$tmp/public/include/symmem/symmem.h" '#include "base/status.h"'
  mk "$tmp/tool/tools/symmem_topo.c" '#include "topology/topo_internal.h"'
  for t in up up2 up3 boot_up boot_up2 foreign tests public tool; do
    if check_tree "$tmp/$t" >/dev/null; then echo "self-test: violation '$t' was not reported"; fails=1; fi
  done
  [ $fails = 0 ] && echo "self-test: the checker reports every kind of violation and passes a clean tree"
  return $fails
}

if [ "${1:-}" = --self-test ]; then self_test; exit $?; fi
root=${1:?usage: check_layers.sh ROOT | --self-test}
if check_tree "$root"; then
  echo "include direction: ${LAYERS[*]} (each folder includes only itself, the ones before it and symmem/; tools/ only symmem/): OK"
  exit 0
fi
echo "include direction violated (see above): move the code to the layer that owns it, or invert the call"
exit 1

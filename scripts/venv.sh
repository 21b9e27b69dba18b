# Sourced by the scripts that make Python virtual environments (test_python.sh, test_integrations.sh,
# build_wheel.sh): the one way they are made, reused and refreshed.
#
#   symmem_venv DIR [--python PY] [--over] [--fresh] [--pin TEXT] [--check CODE] [-- PIP_ARGS...]
#     DIR        the venv; reused when it exists (and, with --pin, was made with the same TEXT)
#     --python   the interpreter to make it with (default $PYTHON, else python3)
#     --over     the venv sees PY's own packages (torch on the GPU machine), also where PY itself lives in a
#                venv: --system-site-packages alone would show only the base interpreter's packages, so a .pth
#                file adds PY's site directories after the venv's own
#     --fresh    made anew even when it exists
#     --pin TEXT made anew when it was made with another TEXT (a framework's pin, say); kept in DIR/.symmem-pin
#     --check    Python code that succeeds when PIP_ARGS are in place already (default: they are installed
#                only into a venv made now)
#     PIP_ARGS   what pip installs (no cache: the venv is the cache, a second copy of large wheels only fills
#                the disk). A failed install removes a venv made now, so the next run starts clean.
#   Prints one line: what it did, in how many seconds, and the venv's size.
#
#   symmem_free_gib PATH
#     free space of the file system holding PATH, in whole GiB
#   symmem_make_room PATH NEED_GIB WHAT [CACHE...]
#     before an install of WHAT that needs NEED_GIB free on PATH's file system: while less is free, removes
#     the CACHEs (folders the scripts rebuild when missing: venvs, torch's headers), in the order given and
#     each with a message, instead of letting pip fail midway with "No space left on device". Where that is
#     still short it says so (returns 0: the install then tells whether it fits).

symmem_venv() {
  local dir=$1
  shift
  local py=${PYTHON:-python3} over=0 fresh=0 pin="" check="" made=0 t0=$SECONDS
  while [ $# -gt 0 ]; do
    case $1 in
      --python) py=$2; shift 2 ;;
      --over) over=1; shift ;;
      --fresh) fresh=1; shift ;;
      --pin) pin=$2; shift 2 ;;
      --check) check=$2; shift 2 ;;
      --) shift; break ;;
      *) echo "symmem_venv: unknown argument $1" >&2; return 2 ;;
    esac
  done
  if [ "$fresh" = 1 ] || { [ -n "$pin" ] && [ "$(cat "$dir/.symmem-pin" 2>/dev/null)" != "$pin" ]; }; then
    rm -rf "$dir"
  fi
  if [ ! -x "$dir/bin/python" ]; then
    if [ "$over" = 1 ]; then
      "$py" -m venv --system-site-packages "$dir" || return 1
      local site
      site=$("$dir/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
      "$py" -c 'import site; print("\n".join(site.getsitepackages()))' > "$site/_symmem_parent_site.pth"
    else
      "$py" -m venv "$dir" || return 1
    fi
    made=1
  fi
  if [ $# -gt 0 ] && { [ "$made" = 1 ] || { [ -n "$check" ] && ! "$dir/bin/python" -c "$check" 2>/dev/null; }; }; then
    if ! "$dir/bin/python" -m pip install -q --disable-pip-version-check --no-cache-dir "$@"; then
      echo "error: pip install $* into $dir failed" >&2
      [ "$made" = 1 ] && rm -rf "$dir"
      return 1
    fi
  fi
  [ -n "$pin" ] && echo "$pin" > "$dir/.symmem-pin"
  echo "venv $dir: $([ "$made" = 1 ] && echo made || echo reused)$([ $# -gt 0 ] && echo ", pip install $*")" \
    "($((SECONDS - t0)) s, $(du -sh "$dir" 2>/dev/null | cut -f1))"
}

symmem_free_gib() { df -Pk "$1" | awk 'NR == 2 {print int($4 / 1048576)}'; }

symmem_make_room() {
  local path=$1 need=$2 what=$3 victim
  shift 3
  for victim in "$@"; do
    [ "$(symmem_free_gib "$path")" -ge "$need" ] && break
    [ -d "$victim" ] || continue
    echo "disk: $(symmem_free_gib "$path") GiB free < $need GiB for $what: removing the cache $victim ($(du -sh "$victim" | cut -f1))"
    rm -rf "$victim"
  done
  local left; left=$(symmem_free_gib "$path")
  [ "$left" -ge "$need" ] ||
    echo "warning: only $left GiB free on $(df -P "$path" | awk 'NR == 2 {print $6}') for $what (~$need GiB); it may fail" >&2
  return 0
}

#!/usr/bin/env bash
# usage: scripts/venv_over_system.sh PYTHON VENV
# A venv at VENV over the interpreter PYTHON that sees PYTHON's own packages (torch on the GPU machine), also
# where PYTHON itself lives in a venv: --system-site-packages alone would show only the base interpreter's
# packages, so a .pth file adds PYTHON's site directories after the new venv's own. Does nothing if VENV exists.
set -euo pipefail
py=$1 venv=$2
[ -x "$venv/bin/python" ] && exit 0
"$py" -m venv --system-site-packages "$venv"
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$py" -c 'import site; print("\n".join(site.getsitepackages()))' > "$site/_symmem_parent_site.pth"

#!/usr/bin/env bash
# Tests of the SGLang and vLLM drop-ins (python/symmem/integrations) against the real, pinned packages:
# one venv per framework, this repository's Python package linked into each, then the integration tests.
#
#   scripts/test_integrations.sh                CPU tests, venvs from PyPI (what scripts/test.sh runs)
#   scripts/test_integrations.sh --gpu WHEELS   GPU tests on a machine without internet: one venv over the
#                                               system's torch, the frameworks and their few imported
#                                               dependencies from the wheels in WHEELS (see README)
#
#   SYMMEM_TEST_INTEG_DIR         where the venvs live (default build-integ: git-ignored, reused while the pins hold)
#   SYMMEM_TEST_INTEG_FRAMEWORKS  which frameworks (default "sglang vllm")
#   SYMMEM_TEST_SKIP_INTEGRATIONS 1: skip, saying so (a full install is ~11 GB per framework)
# The library comes from SYMMEM_LIBRARY, else the first build*/libsymmem.so of this tree.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
# NVLink multicast stays off everywhere (it can take a shared host's GPUs out of service).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

declare -A PIN=([sglang]="sglang==0.5.23" [vllm]="vllm==0.33.0")
dir=${SYMMEM_TEST_INTEG_DIR:-build-integ}
frameworks=${SYMMEM_TEST_INTEG_FRAMEWORKS:-sglang vllm}
gpu_wheels=""
if [ "${1:-}" = "--gpu" ]; then
  gpu_wheels=${2:?"usage: $0 --gpu WHEEL_DIR"}
  gpu_wheels=$(cd "$gpu_wheels" && pwd)
fi

if [ "${SYMMEM_TEST_SKIP_INTEGRATIONS:-0}" = 1 ]; then
  echo "integration tests: skipped (SYMMEM_TEST_SKIP_INTEGRATIONS=1)"
  exit 0
fi
if [ -z "${SYMMEM_LIBRARY:-}" ] && ! ls build*/libsymmem.so >/dev/null 2>&1; then
  echo "error: no libsymmem.so: build first (./scripts/test.sh builds it) or set SYMMEM_LIBRARY" >&2
  exit 1
fi
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

# Link python/ into a venv (a .pth) and declare the entry points as a dist-info named symmem, taken from
# the root pyproject.toml when it declares them, else the declaration it is meant to carry. The package is
# used from the source tree, so nothing is built here.
link_package() {
  local py=$1
  "$py" - "$root" <<'EOF'
import os, sys, sysconfig
root = sys.argv[1]
site = sysconfig.get_paths()["purelib"]
groups = {"sglang.srt.plugins": {"symmem": "symmem.integrations.sglang:register"},
          "vllm.general_plugins": {"symmem": "symmem.integrations.vllm:register"}}
pyproject = os.path.join(root, "pyproject.toml")
if os.path.exists(pyproject):
    import tomllib
    with open(pyproject, "rb") as f:
        declared = tomllib.load(f).get("project", {}).get("entry-points", {})
    if any(g in declared for g in groups):
        groups = {g: dict(declared[g]) for g in groups if g in declared}
        print("entry points from pyproject.toml:", groups)
with open(os.path.join(site, "symmem-source.pth"), "w") as f:
    f.write(os.path.join(root, "python") + "\n")
info = os.path.join(site, "symmem-0.0.0+source.dist-info")
os.makedirs(info, exist_ok=True)
with open(os.path.join(info, "METADATA"), "w") as f:
    f.write("Metadata-Version: 2.1\nName: symmem\nVersion: 0.0.0+source\n")
with open(os.path.join(info, "entry_points.txt"), "w") as f:
    for group, eps in groups.items():
        f.write(f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) + "\n")
EOF
}

run_tests() {
  local py=$1; shift
  (cd "$root/python/tests" && "$py" -m unittest -v "$@")
}

if [ -n "$gpu_wheels" ]; then
  venv="$dir/venv-gpu"
  [ -x "$venv/bin/python" ] || python3 -m venv --system-site-packages "$venv"
  "$venv/bin/pip" install -q --no-index --no-deps --disable-pip-version-check "$gpu_wheels"/*.whl
  link_package "$venv/bin/python"
  run_tests "$venv/bin/python" test_integrations_gpu_sglang test_integrations_gpu_vllm
  exit 0
fi

status=0
for fw in $frameworks; do
  pin=${PIN[$fw]:?"unknown framework $fw"}
  venv="$dir/venv-$fw"
  t0=$SECONDS
  if [ "$(cat "$venv/.symmem-pin" 2>/dev/null)" != "$pin" ]; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    echo "installing $pin into $venv (several GB from PyPI)"
    "$venv/bin/pip" install -q --disable-pip-version-check "$pin"
    echo "$pin" > "$venv/.symmem-pin"
  fi
  link_package "$venv/bin/python"
  echo "== $fw ($pin): venv ready in $((SECONDS - t0)) s"
  mods=(test_integrations_$fw)
  [ "$fw" = sglang ] && mods=(test_integrations_common "${mods[@]}")
  run_tests "$venv/bin/python" "${mods[@]}" || status=1
done
exit $status

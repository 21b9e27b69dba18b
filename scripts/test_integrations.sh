#!/usr/bin/env bash
# usage: scripts/test_integrations.sh [--gpu WHEELS | --make-gpu-wheels DIR [--check]]     (-h: this text)
#
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
#   SYMMEM_TEST_SKIP_INTEGRATIONS 1: skip, saying so (a full install is 10-11 GB per framework)
#   SYMMEM_TEST_WHEEL             a binary wheel (scripts/build_wheel.sh; scripts/test.sh passes the one
#                                 test_python.sh built): installed into each venv and tested there with no
#                                 CUDA toolkit on PATH. Without it this repository's python/ is linked in, and
#                                 the library comes from SYMMEM_LIBRARY, else the first build*/libsymmem.so.
#
# Cost: each framework's venv is 10-11 GB and its first install takes minutes (PyPI); the venvs are reused
# while the pins hold. An install needs ~13 GB free (SYMMEM_TEST_INTEG_NEED_GIB): when the disk is short,
# the caches this step does not need are removed first, with a message (see make_room).
set -euo pipefail
source "$(dirname "$0")/build_common.sh" # also keeps NVLink multicast off
symmem_help "$0" "$@"
source "$(dirname "$0")/venv.sh"
cd "$(dirname "$0")/.."
root=$PWD

declare -A PIN=([sglang]="sglang==0.5.23" [vllm]="vllm==0.33.0")
dir=${SYMMEM_TEST_INTEG_DIR:-build-integ}
frameworks=${SYMMEM_TEST_INTEG_FRAMEWORKS:-sglang vllm}
# What SGLang's parallel_state + plugins and vLLM's symm_mem + cuda_communicator import beyond torch
# (found by importing them in a venv holding torch 2.11 and the two frameworks only; versions as PyPI
# resolved the pins). Two sets, each under the 64 MiB a GPU call carries: WHEELS/sglang (installable on
# its own) and WHEELS/vllm (needs the first set installed before it, in the same venv).
# SYMMEM_TEST_GPU_PYTHON (e.g. 3.12) fetches wheels for another CPython.
GPU_DEPS_SGLANG="numpy==2.3.5 orjson==3.13.0 psutil==7.2.2 pybase64==1.5.1 requests==2.34.2 urllib3==2.8.0 idna==3.20
  certifi==2026.10.19.post1 packaging==26.4 pillow==13.0.0 starlette==1.10.0 anyio==4.16.0 msgspec==0.23.0
  pydantic==2.14.4 pydantic_core==2.50.5 typing-inspection==0.4.5 annotated-types==0.8.0 pyzmq==27.3.0
  tqdm==4.70.1 ipython==9.18.1 traitlets==5.16.1 Pygments==2.21.0 aiohttp==3.14.5 multidict==7.2.1
  attrs==26.1.0 yarl==1.25.1 propcache==0.5.4 aiohappyeyeballs==2.7.1 aiosignal==1.4.0 frozenlist==1.8.0
  apache-tvm-ffi==0.1.11"
GPU_DEPS_VLLM="regex==2026.11.19 cbor2==6.3.0 transformers==5.20.2 huggingface_hub==2.4.0 httpx2==2.16.2 httpcore2==2.16.2
  h11==0.16.0 PyYAML==6.0.4 truststore==0.10.5 safetensors==0.8.0 tokenizers==0.23.3 oss-harmony==0.0.11
  openai==3.57.0 sniffio==1.3.1 cachetools==8.0.2 cloudpickle==3.1.3 uvloop==0.23.0 py-cpuinfo==9.0.0
  prometheus_client==0.26.0 xgrammar==0.2.8 fastapi==0.136.3 annotated-doc==0.0.7
  partial-json-parser==0.2.1.1.post7 llguidance==1.7.6"

gpu_wheels="" make_wheels="" check_wheels=""
case "${1:-}" in
  --gpu) gpu_wheels=${2:?"usage: $0 --gpu WHEEL_DIR"}; gpu_wheels=$(cd "$gpu_wheels" && pwd) ;;
  --make-gpu-wheels) make_wheels=${2:?"usage: $0 --make-gpu-wheels WHEEL_DIR [--check]"}
                     [ "${3:-}" = --check ] && check_wheels=1 ;;
esac

# Python-only copy of a framework wheel (its .py and small data files, tagged py3-none-any): the GPU
# tests use its Python side only, and the full wheels (39 and 336 MB) exceed what a GPU call carries.
# A compiled module that a framework imports unconditionally on CUDA gets a stand-in .py instead (vLLM
# 0.33's platforms/cuda.py imports vllm._C_stable_libtorch, 88 MB, to register its ops): the tests call
# none of those ops, and a call would fail loudly with torch.ops' own error, not pass.
repack() {
  python3 - "$1" "$2" <<'PY'
import base64, csv, hashlib, io, os, sys, zipfile
src, out_dir = sys.argv[1], sys.argv[2]
dist, ver = os.path.basename(src).split("-")[:2]
info = f"{dist}-{ver}.dist-info"
out = os.path.join(out_dir, f"{dist}-{ver}-py3-none-any.whl")
keep = (".py", ".json", ".yaml", ".txt", ".jinja")
record = []
with zipfile.ZipFile(src) as zin, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zout:
    def put(name, data):
        zout.writestr(name, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append([name, f"sha256={digest}", len(data)])
    for item in zin.infolist():
        n = item.filename
        if n.endswith("/") or n in (f"{info}/RECORD", f"{info}/WHEEL"):
            continue
        data_ok = n.endswith(".py") or ("/configs/" not in n and "/third_party/" not in n and item.file_size < 1 << 20)
        # sglang.kernels.jit checks at import that its include/ and csrc/ folders exist (sources, small)
        jit = n.startswith("sglang/kernels/jit/") and item.file_size < 1 << 20
        if n.startswith(info + "/") or (n.endswith(keep) and data_ok) or jit:
            put(n, zin.read(item))
    names = set(zin.namelist())
    for mod in ("vllm/_C_stable_libtorch",):
        if f"{mod}.abi3.so" in names:
            put(f"{mod}.py", b'"""Stand-in for the compiled module, written by symmem\'s scripts/test_integrations.sh: the '
                b'Python-only\nrepack has no compiled ops, and symmem\'s GPU tests call none."""\n')
    put(f"{info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: symmem-repack\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerows(record + [[f"{info}/RECORD", "", ""]])
    zout.writestr(f"{info}/RECORD", text.getvalue())
print(f"{os.path.basename(out)}: {os.path.getsize(out) / 2**20:.1f} MiB (full wheel {os.path.getsize(src) / 2**20:.1f} MiB)")
PY
}


if [ "${SYMMEM_TEST_SKIP_INTEGRATIONS:-0}" = 1 ]; then
  echo "integration tests: skipped (SYMMEM_TEST_SKIP_INTEGRATIONS=1)"
  exit 0
fi
if [ -n "${SYMMEM_TEST_WHEEL:-}" ]; then
  SYMMEM_TEST_WHEEL=$(readlink -f "$SYMMEM_TEST_WHEEL")
  [ -f "$SYMMEM_TEST_WHEEL" ] || { echo "error: SYMMEM_TEST_WHEEL=$SYMMEM_TEST_WHEEL is not a file" >&2; exit 1; }
elif [ -z "${SYMMEM_LIBRARY:-}" ] && ! ls build*/libsymmem.so >/dev/null 2>&1; then
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

# The package under test: SYMMEM_TEST_WHEEL installed (the source link removed), else python/ linked in.
install_package() {
  local py=$1
  if [ -z "${SYMMEM_TEST_WHEEL:-}" ]; then
    link_package "$py"
    return
  fi
  local site
  site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  rm -rf "$site/symmem-source.pth" "$site"/symmem-0.0.0+source.dist-info
  "$py" -m pip install -q --disable-pip-version-check --no-deps --force-reinstall "$SYMMEM_TEST_WHEEL"
  echo "installed $(basename "$SYMMEM_TEST_WHEEL")"
}

# pytest in the venv: from the wheelhouse that scripts/test_python.sh --wheelhouse fills (a machine without
# internet), else from PyPI.
need_pytest() {
  local py=$1
  "$py" -c "import pytest" 2>/dev/null && return 0
  "$py" -m pip install -q --disable-pip-version-check --no-index \
    --find-links "$root/${SYMMEM_PY_DIR:-build-python}/wheelhouse" pytest 2>/dev/null ||
    "$py" -m pip install -q --disable-pip-version-check pytest
}

# Runs pytest on the given test files or node ids of python/tests. With SYMMEM_TEST_WHEEL the tests run with no
# CUDA toolkit on PATH and no CUDA_HOME / CUDA_PATH / CUDACXX: the wheel needs only the driver.
run_tests() {
  local py=$1; shift
  need_pytest "$py"
  if [ -n "${SYMMEM_TEST_WHEEL:-}" ]; then
    (cd "$root/python/tests" && env -u CUDA_HOME -u CUDA_PATH -u CUDACXX -u LD_LIBRARY_PATH \
      PATH="$(dirname "$py"):/usr/bin:/bin" sh -c '! command -v nvcc >/dev/null || { echo "nvcc on PATH"; exit 1; }
        exec "$0" -m pytest -v -p no:cacheprovider "$@"' "$py" "$@")
  else
    (cd "$root/python/tests" && "$py" -m pytest -v -p no:cacheprovider "$@")
  fi
}

if [ -n "$make_wheels" ]; then
  mkdir -p "$make_wheels"/sglang "$make_wheels"/vllm && make_wheels=$(cd "$make_wheels" && pwd)
  plat=()
  [ -n "${SYMMEM_TEST_GPU_PYTHON:-}" ] && plat=(--python-version "$SYMMEM_TEST_GPU_PYTHON" --only-binary=:all:
    --platform manylinux_2_39_x86_64 --platform manylinux_2_35_x86_64 --platform manylinux_2_34_x86_64
    --platform manylinux_2_31_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
  for fw in sglang vllm; do
    tmp=$(mktemp -d)
    python3 -m pip download -q --no-deps --disable-pip-version-check -d "$tmp" "${PIN[$fw]}"
    repack "$tmp"/*.whl "$make_wheels/$fw"
    rm -rf "$tmp"
    deps=GPU_DEPS_${fw^^}
    # shellcheck disable=SC2086
    python3 -m pip download -q --no-deps --disable-pip-version-check "${plat[@]}" -d "$make_wheels/$fw" ${!deps}
    echo "$make_wheels/$fw: $(ls "$make_wheels/$fw" | wc -l) wheels, $(du -sm "$make_wheels/$fw" | cut -f1) MiB"
    ls -l "$make_wheels/$fw" | awk 'NR > 1 {printf "  %6.1f MiB  %s\n", $5 / 1048576, $9}'
  done
  if [ -n "$check_wheels" ]; then
    venv="$dir/venv-wheelcheck"
    symmem_venv "$venv" --python python3 --fresh -- torch==2.11.0
    for fw in sglang vllm; do
      "$venv/bin/pip" install -q --no-index --no-deps --disable-pip-version-check "$make_wheels/$fw"/*.whl
    done
    link_package "$venv/bin/python"
    "$venv/bin/python" -c "
import sglang.srt.distributed.parallel_state, sglang.srt.plugins
import vllm.plugins, vllm.distributed.device_communicators.symm_mem, vllm.v1.worker.ubatching
import vllm.distributed.device_communicators.cuda_communicator
import vllm.platforms.cuda  # what a GPU resolves vllm's platform to: it imports the stand-in for _C_stable_libtorch
print('the GPU tests import everything they need from these wheels over torch 2.11')"
    run_tests "$venv/bin/python" test_integrations_gpu_sglang.py test_integrations_gpu_vllm.py
    run_tests "$venv/bin/python" test_integrations_common.py::TestNegotiation::test_gpu_scenario_dry_run_on_cpu
    rm -rf "$venv"
  fi
  exit 0
fi

if [ -n "$gpu_wheels" ]; then
  venv="$dir/venv-gpu"
  symmem_venv "$venv" --python python3 --over
  "$venv/bin/pip" install -q --no-index --no-deps --disable-pip-version-check "$gpu_wheels"/*.whl
  link_package "$venv/bin/python"
  mods=()
  for fw in $frameworks; do mods+=("test_integrations_gpu_$fw.py"); done
  run_tests "$venv/bin/python" "${mods[@]}"
  exit 0
fi

# A framework's venv is 10-11 GB, and pip holds every wheel it downloads until the whole install ends: one
# install of SGLang needs more than 12 GiB free. Torch and its CUDA libraries (~6 GB of the venv) go in
# first, on their own, and the framework after them, so the peak is the venv plus the framework's own
# downloads (SGLang 0.5.23: 12 GB at the most, 2 GB left of 14). The venvs here, the torch venv of
# test_python.sh and the torch headers that build_wheel.sh keeps are caches (rebuilt when missing), so when
# the disk is short the ones this step does not need are removed first (symmem_make_room), with a message,
# instead of failing midway.
NEED_GIB=${SYMMEM_TEST_INTEG_NEED_GIB:-13}
make_room() {
  local keep=$1 victim victims=()
  for victim in "$dir"/venv-* "$(realpath -m "${SYMMEM_PY_DIR:-build-python}")/venv-torch" \
      "$(realpath -m "${SYMMEM_BUILD_WHEEL_CACHE:-build-wheel}")"/torch-*; do
    [ "$victim" != "$keep" ] && victims+=("$victim")
  done
  symmem_make_room "$dir" "$NEED_GIB" "an install of $pin (SYMMEM_TEST_SKIP_INTEGRATIONS=1 skips this step)" \
    "${victims[@]}"
}

# The torch requirement that PIN itself declares (torch==2.14.1, say), printed by the venv's Python from
# the package's metadata (no download of the package); nothing when it declares none.
torch_requirement() {
  "$1" -m pip install -q --disable-pip-version-check --no-cache-dir --dry-run --no-deps --ignore-installed \
      --report - "$2" | "$1" -c '
import json, sys
from pip._vendor.packaging.requirements import Requirement
for item in json.load(sys.stdin)["install"]:
    for text in item["metadata"].get("requires_dist", []):
        req = Requirement(text)
        if req.name.lower() == "torch" and (req.marker is None or req.marker.evaluate({"extra": ""})):
            print(f"torch{req.specifier}")
            sys.exit(0)'
}

# Installs PIN into the venv DIR made now: its torch first (see NEED_GIB), then PIN, which finds that torch
# in place. A failed install removes the venv, so the next run starts clean.
install_framework() {
  local venv=$1 pin=$2 py="$1/bin/python" torch_req
  symmem_venv "$venv" --python python3 --fresh || return 1
  # pip < 22.2 has no --report: then PIN goes in with one install (a higher peak, see NEED_GIB)
  torch_req=$(torch_requirement "$py" "$pin") ||
    { torch_req=""; echo "note: $("$py" -m pip --version | cut -d' ' -f1-2) read no torch requirement of $pin: one install"; }
  local step
  for step in $torch_req "$pin"; do # an empty torch_req is no step
    "$py" -m pip install -q --disable-pip-version-check --no-cache-dir "$step" || { rm -rf "$venv"; return 1; }
  done
  echo "$pin" > "$venv/.symmem-pin"
  echo "venv $venv: pip install ${torch_req:+$torch_req, then }$pin ($(du -sh "$venv" | cut -f1))"
}

status=0
for fw in $frameworks; do
  pin=${PIN[$fw]:?"unknown framework $fw"}
  venv="$dir/venv-$fw"
  t0=$SECONDS
  if [ "$(cat "$venv/.symmem-pin" 2>/dev/null)" != "$pin" ]; then
    rm -rf "$venv"
    make_room "$venv"
    echo "installing $pin into $venv (several GB from PyPI; $(symmem_free_gib "$dir") GiB free)"
    install_framework "$venv" "$pin" ||
      { echo "error: installing $pin failed ($(symmem_free_gib "$dir") GiB free now)" >&2; exit 1; }
  fi
  install_package "$venv/bin/python"
  echo "== $fw ($pin): venv ready in $((SECONDS - t0)) s"
  mods=(test_integrations_$fw.py)
  [ "$fw" = sglang ] && mods=(test_integrations_common.py "${mods[@]}")
  run_tests "$venv/bin/python" "${mods[@]}" || status=1
done
exit $status

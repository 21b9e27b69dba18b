#!/usr/bin/env bash
# usage: scripts/build.sh [CONFIG [TARGET...]]     (-h: this text)
#
# Configures and builds one of symmem's CMake configurations in a folder of its own (the one recipe every
# script uses, scripts/build_common.sh), so that no two of them rebuild each other's objects:
#   dev      build/          RelWithDebInfo with the tests: run.sh, test.sh, `cd build && ctest -L cpu`
#   release  build-release/  Release without tests: `cmake --install build-release --prefix DIR` installs it
#                            (headers, libsymmem, symmem::symmem CMake package, symmem.pc, the tools)
#   gpu      build-gpu/      the GPU machine's (native architectures): scripts/gpu_check.sh
#   san      build-san/      ASan + UBSan (clang): scripts/sanitize.sh, scripts/fuzz.sh
# CONFIG defaults to dev; TARGETs (e.g. symmem symmem-topo test_core) build only those. A first build takes
# a few minutes (about 6 on 2 cores with every architecture; SYMMEM_CUDA_ARCHS=90 or native is shorter).
#   SYMMEM_CUDA_ARCHS  dev's CUDA architectures (default: the library's 80;90;100;120)
#   SYMMEM_BUILD_DIR   dev's (and gpu's) folder
set -euo pipefail
source "$(dirname "$0")/build_common.sh"
symmem_help "$0" "$@"
cd "$(dirname "$0")/.."
config=${1:-dev}
[ $# -gt 0 ] && shift
case $config in
  dev | release | gpu | san) ;;
  *) echo "build.sh: no configuration '$config' (dev, release, gpu, san; -h for help)" >&2; exit 2 ;;
esac
symmem_find_nvcc
dir=$(symmem_dir "$config")
symmem_configure "$config" "$dir"
symmem_build "$dir" "$@"

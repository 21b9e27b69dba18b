#!/usr/bin/env bash
# What a user of an installed symmem does, on a machine without a GPU: install into a fresh prefix, then
#  1. a static consumer linked with `pkg-config --static --libs symmem` (libsymmem.a alone in its prefix);
#  2. a CMake consumer of the shared library configured with the CUDA toolkit hidden;
#  3. a CMake consumer of symmem::symmem_static (COMPONENTS static);
# and run each (a host-backend allocation). Also checks the installed package files themselves.
#   usage: test_package.sh BUILD_DIR LIBDIR C_COMPILER CMAKE_GENERATOR
set -euo pipefail
build=$1 libdir=$2 cc=$3 generator=$4
here=$(cd "$(dirname "$0")" && pwd)
command -v pkg-config >/dev/null || { echo "pkg-config not found (apt-get install pkg-config): skipped"; exit 77; }
command -v readelf >/dev/null || { echo "readelf not found (apt-get install binutils): skipped"; exit 77; }
tmp=$(mktemp -d /tmp/symmem-package-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
cfg=$tmp/prefix/$libdir/cmake/symmem
grep -q "libnuma" "$cfg"/symmem*Targets.cmake && fail "the CMake package names a libnuma path of the build machine"
n=$(grep -o 'INTERFACE_INCLUDE_DIRECTORIES "[^"]*"' "$cfg/symmemTargets.cmake" | tr ';' '\n' | grep -c include)
[ "$n" = 1 ] || fail "symmem::symmem lists its include directory $n times"

echo "== static consumer: pkg-config --static"
mkdir -p "$tmp/static/$libdir"
cp -r "$tmp/prefix/include" "$tmp/static/"
cp -r "$tmp/prefix/$libdir/pkgconfig" "$tmp/prefix/$libdir/libsymmem.a" "$tmp/static/$libdir/"
flags=$(PKG_CONFIG_PATH="$tmp/static/$libdir/pkgconfig" pkg-config --static --cflags --libs symmem)
echo "pkg-config --static --cflags --libs symmem: $flags"
# shellcheck disable=SC2086 # the flags are words
"$cc" -o "$tmp/consumer-static" "$here/consumer.c" $flags
readelf -d "$tmp/consumer-static" | grep -q "libsymmem" && fail "the static consumer needs libsymmem.so"
"$tmp/consumer-static"

echo "== CMake consumer of the shared library, CUDA toolkit hidden"
cmake -S "$here/consumer" -B "$tmp/shared" -G "$generator" -DCMAKE_C_COMPILER="$cc" \
  -DCMAKE_PREFIX_PATH="$tmp/prefix" -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=TRUE >"$tmp/shared.log" 2>&1 ||
  { cat "$tmp/shared.log"; fail "configuring a consumer of symmem::symmem without the CUDA toolkit"; }
cmake --build "$tmp/shared" >/dev/null || fail "building the consumer of symmem::symmem"
readelf -d "$tmp/shared/consumer" | grep -q "libsymmem.so.0" || fail "the shared consumer does not link libsymmem.so"
"$tmp/shared/consumer"

echo "== CMake consumer of symmem::symmem_static"
cmake -S "$here/consumer" -B "$tmp/static-cmake" -G "$generator" -DCMAKE_C_COMPILER="$cc" -DSYMMEM_STATIC=ON \
  -DCMAKE_PREFIX_PATH="$tmp/prefix" >"$tmp/static-cmake.log" 2>&1 ||
  { cat "$tmp/static-cmake.log"; fail "configuring a consumer of symmem::symmem_static"; }
cmake --build "$tmp/static-cmake" >/dev/null || fail "building the consumer of symmem::symmem_static"
readelf -d "$tmp/static-cmake/consumer" | grep -q "libsymmem" && fail "the static CMake consumer needs libsymmem.so"
"$tmp/static-cmake/consumer"
echo "package test passed"

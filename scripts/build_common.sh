# Sourced by every script that builds symmem (run.sh, test.sh, build.sh, sanitize.sh, fuzz.sh, gpu_check.sh,
# bench/ab_bench.sh): the one recipe for its CMake configurations, each in a folder of its own, so that no
# two configurations rebuild each other's objects.
#
#   config     folder (default)   what                                                   used by
#   dev        build              RelWithDebInfo, tests; SYMMEM_CUDA_ARCHS or the         run.sh, test.sh, the
#                                 library's 80;90;100;120 (a folder keeps its own)        quick CPU check
#   release    build-release      Release, no tests: what `cmake --install` installs     users (README)
#   gpu        build-gpu          RelWithDebInfo, tests, this machine's GPUs (native),    gpu_check.sh
#                                 warnings not errors unless SYMMEM_WERROR=ON
#   san        build-san          Debug, ASan + UBSan, sm_90 only, no benchmarks; clang   sanitize.sh, fuzz.sh
#                                 with the libFuzzer targets where clang is, else gcc
#   bench      (given)            RelWithDebInfo, symmem-bench only, native (AB_ARCH),    bench/ab_bench.sh
#                                 warnings not errors
#
#   symmem_dir CONFIG                 the folder of CONFIG (SYMMEM_BUILD_DIR moves dev's and gpu's,
#                                     SYMMEM_SAN_BUILD_DIR san's)
#   symmem_configure CONFIG [DIR [SOURCE]]   configure DIR (default symmem_dir CONFIG) from SOURCE (default .)
#   symmem_build DIR [TARGET...]      build those targets (default all), saying first what and where, with
#                                     SYMMEM_JOBS jobs (default: the core count)
#   symmem_find_nvcc                  put the CUDA toolkit's nvcc on PATH, or stop with what to install
#   symmem_help SCRIPT [ARGS...]      -h/--help as the first argument: print SCRIPT's leading comment, exit 0
# Compiler launcher: ccache where it is installed.

# NVLink multicast stays off everywhere (it can take a shared host's GPUs out of service).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

symmem_help() {
  local script=$1
  shift
  case "${1:-}" in
    -h | --help)
      # the comment block after the shebang, without its '# '
      awk 'NR == 1 && /^#!/ {next} /^#/ {sub(/^# ?/, ""); print; next} {exit}' "$script"
      exit 0
      ;;
  esac
}

symmem_find_nvcc() {
  if ! command -v nvcc >/dev/null; then
    local d
    for d in /usr/local/cuda/bin /usr/local/cuda-13.0/bin /usr/local/cuda-12/bin; do
      [ -x "$d/nvcc" ] && export PATH="$d:$PATH" && break
    done
  fi
  command -v nvcc >/dev/null || { echo "error: nvcc not found: install the CUDA toolkit (12.2 or newer)"; exit 1; }
}

symmem_dir() {
  case $1 in
    dev) echo "${SYMMEM_BUILD_DIR:-build}" ;;
    release) echo build-release ;;
    gpu) echo "${SYMMEM_BUILD_DIR:-build-gpu}" ;;
    san) echo "${SYMMEM_SAN_BUILD_DIR:-build-san}" ;;
    bench) echo build-bench ;;
    *) echo "symmem_dir: no configuration '$1' (dev, release, gpu, san, bench)" >&2; return 2 ;;
  esac
}

# The CMake arguments of CONFIG into the array cfg_args.
symmem_config_args() {
  cfg_args=()
  case $1 in
    dev)
      cfg_args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DSYMMEM_BUILD_TESTS=ON)
      [ -n "${SYMMEM_CUDA_ARCHS:-}" ] && cfg_args+=(-DCMAKE_CUDA_ARCHITECTURES="$SYMMEM_CUDA_ARCHS")
      ;;
    release) cfg_args=(-DCMAKE_BUILD_TYPE=Release -DSYMMEM_BUILD_TESTS=OFF) ;;
    gpu)
      # Warnings are errors in CI (test.sh); the GPU machine's compilers may warn about more, which must not
      # cost a GPU run.
      cfg_args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DSYMMEM_BUILD_TESTS=ON -DCMAKE_CUDA_ARCHITECTURES=native
        -DSYMMEM_WERROR="${SYMMEM_WERROR:-OFF}")
      ;;
    san)
      cfg_args=(-DCMAKE_BUILD_TYPE=Debug -DCMAKE_CUDA_ARCHITECTURES=90 -DSYMMEM_SANITIZE=address,undefined
        -DSYMMEM_BUILD_BENCH=OFF)
      if command -v clang >/dev/null && command -v clang++ >/dev/null; then
        cfg_args+=(-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_CUDA_HOST_COMPILER=clang++
          -DSYMMEM_BUILD_FUZZERS=ON)
      else
        cfg_args+=(-DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++ -DSYMMEM_BUILD_FUZZERS=OFF)
      fi
      ;;
    bench)
      cfg_args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES="${AB_ARCH:-native}"
        -DSYMMEM_BUILD_TESTS=OFF -DSYMMEM_BUILD_TOOLS=OFF -DSYMMEM_BUILD_BENCH=ON -DSYMMEM_BUILD_TORCH=OFF
        -DSYMMEM_WERROR=OFF)
      ;;
    *) echo "symmem_configure: no configuration '$1' (dev, release, gpu, san, bench)" >&2; return 2 ;;
  esac
  if command -v ccache >/dev/null; then
    cfg_args+=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
      -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  fi
}

# An existing folder keeps its generator and, where the configuration leaves them open (dev without
# SYMMEM_CUDA_ARCHS), its architectures; its output is kept out of the way (configure.log in the folder).
symmem_configure() {
  local config=$1 dir=${2:-} src=${3:-.}
  [ -n "$dir" ] || dir=$(symmem_dir "$config") || return 2
  symmem_config_args "$config" || return 2
  [ -f "$dir/CMakeCache.txt" ] || cfg_args+=(-G Ninja)
  mkdir -p "$dir"
  if ! cmake -S "$src" -B "$dir" "${cfg_args[@]}" > "$dir/configure.log" 2>&1; then
    cat "$dir/configure.log"
    echo "error: configuring $dir ($config) failed (above; $dir/configure.log)"
    return 1
  fi
  # what the configuration says about this machine: symmem's own notes and CMake's warnings, one line each
  awk '/^-- symmem:/ {print "  " substr($0, 4); next}
       /^CMake Warning/ {w = 1; line = ""; next}
       w && (/^Call Stack/ || NF == 0) {if (line != "") print "  warning:" line; w = 0; next}
       w {sub(/^ +/, " "); line = line $0}' "$dir/configure.log"
}

# Says what it builds and how long a first build takes, then lets Ninja show its progress ([n/N] lines).
symmem_build() {
  local dir=$1
  shift
  local what="${*:-everything}" t0=$SECONDS targets=()
  [ $# -gt 0 ] && targets=(--target "$@")
  echo "== building $what in $dir (a first build compiles ~200 files, CUDA kernels included: about 6 minutes" \
    "on 2 cores; then only what changed)"
  cmake --build "$dir" -j "${SYMMEM_JOBS:-$(nproc)}" ${targets[@]+"${targets[@]}"} ||
    { echo "error: the build in $dir failed (above)"; return 1; }
  echo "== built $what in $dir in $((SECONDS - t0)) s"
}

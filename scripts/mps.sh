# Sourced by the GPU scripts (gpu_check.sh, test_python.sh --gpu): the one MPS control daemon their rank
# processes share when several ranks run on one GPU (processes that share a GPU run concurrently only under
# MPS; without it they take turns and kernels that wait for each other stall until the timeout).
#
#   symmem_mps_start   use the MPS daemon already running on this machine, whatever its pipe directory, or
#                      start one (pipes in $SYMMEM_MPS_DIR, default /tmp/symmem-mps); then check that a CUDA
#                      client gets a context within SYMMEM_MPS_READY_S (default 60) seconds. Returns 1 with
#                      the reason when it does not. Exports CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_LOG_DIRECTORY.
#   symmem_mps_stop    quit the daemon if symmem_mps_start started it, and wait until its server is gone.
#
# Why one daemon: a daemon left running by a run cut short (it is its own session, so it outlives the run)
# keeps its server, and a second daemon with other pipes adds a second server. Both work, but the two share
# the GPU by time slices and the old one may still hold clients of the cut run; reusing the one daemon keeps
# every rank of every script in one server. The probe turns an MPS setup that gives no context into an
# error before any test starts, instead of a wait inside CUDA's initialisation in every rank.
symmem_mps_started=0

symmem_mps_running_dir() { # the pipe directory of a running control daemon, or nothing
  local pid env dir
  # the process name is longer than the 15 characters pgrep matches by name: match the command line
  pid=$(pgrep -f '^nvidia-cuda-mps-control' | head -1) || return 0
  [ -n "$pid" ] || return 0
  env=$(tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep '^CUDA_MPS_PIPE_DIRECTORY=' || true)
  dir=${env#CUDA_MPS_PIPE_DIRECTORY=}
  echo "${dir:-/tmp/nvidia-mps}"
}

# A CUDA client that creates a context and leaves: under MPS that is what starts the server.
symmem_mps_probe() {
  python3 - <<'PY'
import ctypes, sys
cu = ctypes.CDLL("libcuda.so.1")
dev, ctx = ctypes.c_int(), ctypes.c_void_p()
for what, rc in (("cuInit", cu.cuInit(0)), ("cuDeviceGet", cu.cuDeviceGet(ctypes.byref(dev), 0)),
                 ("cuDevicePrimaryCtxRetain", cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))):
    if rc != 0:
        sys.exit(f"{what} returned CUDA error {rc}")
cu.cuDevicePrimaryCtxRelease(dev)
PY
}

symmem_mps_start() {
  command -v nvidia-cuda-mps-control >/dev/null || { echo "MPS: nvidia-cuda-mps-control not found"; return 1; }
  local dir
  dir=$(symmem_mps_running_dir)
  if [ -n "$dir" ]; then
    export CUDA_MPS_PIPE_DIRECTORY=$dir
    echo "MPS: using the daemon already running (pipes in $dir)"
  else
    export CUDA_MPS_PIPE_DIRECTORY=${SYMMEM_MPS_DIR:-/tmp/symmem-mps}
    export CUDA_MPS_LOG_DIRECTORY=${CUDA_MPS_LOG_DIRECTORY:-$CUDA_MPS_PIPE_DIRECTORY-log}
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    nvidia-cuda-mps-control -d || { echo "MPS: the control daemon did not start"; return 1; }
    symmem_mps_started=1
    echo "MPS: daemon started (pipes in $CUDA_MPS_PIPE_DIRECTORY)"
  fi
  if command -v python3 >/dev/null && ! timeout "${SYMMEM_MPS_READY_S:-60}" bash -c "$(declare -f symmem_mps_probe); symmem_mps_probe"; then
    echo "MPS: a CUDA client got no context within ${SYMMEM_MPS_READY_S:-60} s under the daemon with pipes in" \
      "$CUDA_MPS_PIPE_DIRECTORY (another MPS server holding the GPU? running: $(pgrep -a nvidia-cuda-mps | tr '\n' ';'))"
    return 1
  fi
}

symmem_mps_stop() {
  if [ "$symmem_mps_started" = 1 ]; then
    echo quit | nvidia-cuda-mps-control || true
    symmem_mps_started=0
    local i
    for i in $(seq 50); do pgrep -f '^nvidia-cuda-mps-server' >/dev/null || break; sleep 0.2; done
  fi
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
}

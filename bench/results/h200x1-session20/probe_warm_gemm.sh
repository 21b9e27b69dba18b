# warm GEMM next to a spinner on every SM: default carveout, then max shared memory, then 90 blocks
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvcc -O2 -arch=sm_90 -o /tmp/mps_probe bench/results/h200x1-session20/mps_probe.cu -lcublas || exit 1
source scripts/mps.sh
symmem_mps_start || exit 1
for cfg in "132 -1" "132 100" "264 -1" "90 -1"; do
  set -- $cfg
  /tmp/mps_probe probe2 "b$1c$2" & pp=$!; sleep 1
  /tmp/mps_probe spin 6 $1 $2 & sp=$!
  wait $pp; wait $sp
done 2>&1
symmem_mps_stop

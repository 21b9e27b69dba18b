# MPS first-use probe: alone, then next to a 90-block spinner (both under MPS), then with EAGER loading
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvcc -O2 -arch=sm_90 -o /tmp/mps_probe bench/results/h200x1-session20/mps_probe.cu -lcublas || exit 1
source scripts/mps.sh
symmem_mps_start || exit 1
{
/tmp/mps_probe probe alone
/tmp/mps_probe spin 8 90 & sp=$!; sleep 1.5
/tmp/mps_probe probe spinning
wait $sp
/tmp/mps_probe spin 8 90 & sp=$!; sleep 1.5
CUDA_MODULE_LOADING=EAGER /tmp/mps_probe probe spin+eager
wait $sp
/tmp/mps_probe spin 8 132 & sp=$!; sleep 1.5
/tmp/mps_probe probe spin132
wait $sp
} 2>&1
symmem_mps_stop

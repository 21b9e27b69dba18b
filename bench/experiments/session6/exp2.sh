#!/usr/bin/env bash
# Session 6, run 2: where does the cost of a second block go? Builds of symmem-bench with experiment
# macros (kernels.cu, removed afterwards), built in parallel, then timed interleaved, twice:
#   base, NOCHECK (SYMMEM_LAMPORT_CHECK switch compiled out), IDLE_BLOCKS (only block 0 moves data),
#   EMPTY=1 (kernel = griddepcontrol only: launch floor), EMPTY=2 (state protocol only), CLUSTER (grids
#   of 2..8 blocks launched as one cluster).
# Each with SYMMEM_MIN_BLOCK_THREADS 256 / 64 / 32 (blocks per size: 1,1,4,16 / 1,4,16,64 / 2,8,32,128).
set -uo pipefail
cd "$(dirname "$0")/../../.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PATH=/usr/local/cuda/bin:$PATH
o=${1:?outdir}; mkdir -p "$o"
declare -A V=([base]="" [nocheck]="-DSYMMEM_EXP_NOCHECK=1" [idle]="-DSYMMEM_EXP_IDLE_BLOCKS=1"
              [empty1]="-DSYMMEM_EXP_EMPTY=1" [empty2]="-DSYMMEM_EXP_EMPTY=2" [cluster]="-DSYMMEM_EXP_CLUSTER=1")
order=(base nocheck idle empty1 empty2 cluster)
for v in "${order[@]}"; do
  ( cmake -S . -B build-x-$v -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=native \
      -DCMAKE_C_FLAGS="${V[$v]}" -DCMAKE_CUDA_FLAGS="${V[$v]}" > "$o/build-$v.log" 2>&1 &&
    cmake --build build-x-$v -j 6 --target symmem-bench >> "$o/build-$v.log" 2>&1 || echo "BUILD FAILED $v" ) &
done
wait
echo "built t=$SECONDS"
for rep in 1 2; do
  for v in "${order[@]}"; do
    for m in 256 64 32; do
      echo "== $v min=$m rep=$rep" >> "$o/times.txt"
      SYMMEM_MIN_BLOCK_THREADS=$m timeout 60 build-x-$v/bench/symmem-bench --nccl 0 -a oneshot_push -b 1K -e 64K -f 4 -R 25 -c 0 \
        2>&1 | grep -E "^ +[0-9]+ .*[|]" >> "$o/times.txt"
    done
  done
  echo "rep $rep t=$SECONDS"
done

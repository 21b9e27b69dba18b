#!/usr/bin/env bash
# Session 6, run 4: the Lamport check as its own instantiation (working tree) against commit 7ed72bc (the
# runtime switch, exp-base.tar.gz), and SYMMEM_MIN_BLOCK_THREADS 256/128/64 now that the state protocol
# left the data path; then the Lamport-check tests on the new tree.
set -uo pipefail
cd "$(dirname "$0")/../../.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PATH=/usr/local/cuda/bin:$PATH
o=${1:?outdir}; mkdir -p "$o"
mkdir -p /tmp/base && tar xzf exp-base.tar.gz -C /tmp/base
cfg="-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=native"
( cmake -S /tmp/base -B /tmp/base/b $cfg > "$o/build-base.log" 2>&1 && cmake --build /tmp/base/b -j 12 --target symmem-bench >> "$o/build-base.log" 2>&1 || echo "BUILD FAILED base" ) &
( cmake -S . -B build-gpu $cfg > "$o/build-new.log" 2>&1 && cmake --build build-gpu -j 20 >> "$o/build-new.log" 2>&1 || echo "BUILD FAILED new" ) &
wait
echo "built t=$SECONDS"
one() { # label binary env... -- args
  local l=$1 b=$2; shift 2
  echo "== $l" >> "$o/times.txt"
  env "$@" 2>&1 | grep -E "^ +[0-9]+ .*[|]|wrong|rror" >> "$o/times.txt"
}
A=(--nccl 0 -a oneshot_push -b 1K -e 1M -f 4 -R 25)
for rep in 1 2; do
  one "base m256 r$rep" x SYMMEM_MIN_BLOCK_THREADS=256 timeout 60 /tmp/base/b/bench/symmem-bench "${A[@]}"
  for m in 256 128 64; do
    one "new m$m r$rep" x SYMMEM_MIN_BLOCK_THREADS=$m timeout 60 build-gpu/bench/symmem-bench "${A[@]}"
  done
  one "base check r$rep" x SYMMEM_LAMPORT_CHECK=1 timeout 60 /tmp/base/b/bench/symmem-bench "${A[@]}"
  one "new check r$rep" x SYMMEM_LAMPORT_CHECK=1 timeout 60 build-gpu/bench/symmem-bench "${A[@]}"
  one "base lam2 r$rep" x timeout 60 /tmp/base/b/bench/symmem-bench --nccl 0 -a twoshot_lamport -b 256K -e 16M -f 4 -R 15
  one "new lam2 r$rep" x timeout 60 build-gpu/bench/symmem-bench --nccl 0 -a twoshot_lamport -b 256K -e 16M -f 4 -R 15
done
echo "bench t=$SECONDS"
(cd build-gpu && ctest -R "lamport|coll_sweep_inproc4$|test_gpu_streams" --output-on-failure --timeout 150) > "$o/ctest.log" 2>&1
echo "ctest rc=$? t=$SECONDS"
grep -E "Test +#|tests passed" "$o/ctest.log"

#!/usr/bin/env bash
# Session 6, run 3: the state protocol before griddepcontrol.wait (working tree) against HEAD before it
# (exp-base.tar.gz = git archive of commit ce0938b), same GPUs, interleaved;
# then the collective and streams GPU tests on the new tree.
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
B=( [0]=/tmp/base/b/bench/symmem-bench [1]=build-gpu/bench/symmem-bench )
name=(base new)
run() { # label args...
  local l=$1; shift
  for rep in 1 2; do for v in 0 1; do
    echo "== ${name[$v]} $l rep=$rep" >> "$o/times.txt"
    timeout 60 ${B[$v]} --nccl 0 "$@" 2>&1 | grep -E "^ +[0-9]+ .*[|]|wrong|rror" >> "$o/times.txt"
  done; done
}
run graph-push -a oneshot_push -b 1K -e 1M -f 4 -R 25
run eager-push -G 0 -a oneshot_push -b 1K -e 1M -f 4 -R 25
run graph-auto -b 4M -e 64M -f 4 -R 15
run graph-pull -a oneshot_pull,twoshot_push,twoshot_lamport -b 16K -e 1M -f 8 -R 25
run barrier -t barrier -b 1K -e 1K -R 25
echo "bench t=$SECONDS"
(cd build-gpu && ctest -R "test_gpu_streams|coll_sweep$|coll_sweep_inproc4$|coll_sweep_inproc8_2blocks|coll_graph$|coll_graph_inproc4|coll_graph_lamport_check|coll_b2b|coll_timeout|coll_mismatch$|coll_mismatch_lamport$|coll_special$" --output-on-failure --timeout 150) > "$o/ctest.log" 2>&1
echo "ctest rc=$? t=$SECONDS"
grep -E "Test +#|tests passed" "$o/ctest.log"

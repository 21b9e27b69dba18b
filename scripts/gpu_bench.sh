#!/usr/bin/env bash
# On the 2-GPU machine after scripts/gpu_check.sh built build-gpu: the benchmark side by side with NCCL
# (PDL on and off), PyTorch's own symmetric-memory all-reduce, a tuning pass and the tuned table, the
# other collectives, 4/8 ranks correctness, and the allocation cost against PyTorch. Output files go to
# OUTDIR.
set -uo pipefail
cd "$(dirname "$0")/.."
O=${1:?usage: scripts/gpu_bench.sh OUTDIR}
mkdir -p "$O"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
B=${SYMMEM_BUILD_DIR:-build-gpu}/bench
run() { local f=$1; shift; echo "== $*" >> "$O/$f"; timeout 150 "$@" >> "$O/$f" 2>&1; echo "   rc=$?" >> "$O/$f"; }
run bench_pdl.txt "$B/symmem-bench" -a all -b 1K -e 64M -f 4
run torch_allreduce.txt python3 bench/torch_allreduce_bench.py --nranks 2 -b 1K -e 64M -f 4
SYMMEM_PDL=0 run bench_nopdl.txt "$B/symmem-bench" -a all -b 1K -e 64M -f 4
run tune.txt "$B/symmem-bench" --tune "$O/symmem-tune.txt" -b 1K -e 64M -f 2
SYMMEM_TUNE_FILE="$O/symmem-tune.txt" run tuned.txt "$B/symmem-bench" -b 1K -e 256M -f 2
run other.txt "$B/symmem-bench" -t reduce_scatter -b 4K -e 64M -f 8
run other.txt "$B/symmem-bench" -t all_gather -b 4K -e 64M -f 8
run other.txt "$B/symmem-bench" -t barrier
run other.txt "$B/symmem-bench" -z 0 -b 1K -e 16M -f 8
run other.txt "$B/symmem-bench" --inprocess -N 4 -a all -b 1K -e 4M -f 16 -n 5 -R 3 -w 1
run other.txt "$B/symmem-bench" --inprocess -N 8 -a all -b 1K -e 4M -f 16 -n 5 -R 3 -w 1
run alloc.txt python3 bench/torch_alloc_bench.py --nranks 2 --out "$O/torch_alloc.json"
run alloc.txt "$B/symmem-alloc-bench" -N 2 --torch-json "$O/torch_alloc.json"

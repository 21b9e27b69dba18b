#!/usr/bin/env bash
# usage: bench/ab_bench.sh OLD [ROUNDS]  |  bench/ab_bench.sh --pack COMMIT     (-h: this text)
#
# A/B benchmark of two trees on one GPU machine: builds an old tree and this tree into two build folders
# (native arch, symmem-bench only), then runs symmem-bench (all-reduce, bf16 sum, auto, CUDA-graph
# replays) with AB_RANKS ranks (default 2) in one process, old and new interleaved (A B A B ...), and
# prints one table: per size the median over rounds of each build's time, the algorithm auto chose, and
# new/old.
#
#   bench/ab_bench.sh OLD [ROUNDS]
#     OLD: a commit (needs git and the repository here), a directory holding the old tree, or a tarball of
#          it (git archive). The device machine gets the working tree without .git, so make the tarball
#          first, where git is, into an ignored folder that travels with `carry`:
#            bench/ab_bench.sh --pack 31bb7b3      # writes build-ab/old.tar.gz
#          then, on the GPU machine (carry: build-ab):
#            bench/ab_bench.sh build-ab/old.tar.gz
#     ROUNDS: runs per build (default 3, at least 2).
#   Environment: AB_SIZES (default "1K 64K 1M 16M"), AB_ARGS (more symmem-bench arguments, e.g. "--algo all"
#   to time every algorithm; rows are then keyed by size and algorithm), AB_RANKS (ranks, threads of one
#   process, default 2), AB_DIR (build folders, default build-ab), AB_JOBS (build parallelism, default
#   nproc), AB_ARCH (CUDA architectures, default native), AB_REUSE=1 (measure again with the build
#   folders of an earlier run: no extraction, no build),
#   AB_BUILD_ONLY=1 (build and stop: to build while something else uses the GPU, then measure with
#   AB_REUSE=1).
#
# One GPU: the two ranks share it, so the times are the ranks' kernels interleaved on one device, not a
# 2-GPU figure; what matters is the ratio, measured the same way for both builds. Keep the total under
# ~4 minutes: two builds of the library and symmem-bench in parallel (~1.5-2 min on 16 cores), then
# ROUNDS x 2 invocations of symmem-bench (one per build and round for the default sizes), ~10 s each.
set -uo pipefail
source "$(dirname "$0")/../scripts/build_common.sh" # the build recipe; NVLink multicast off
symmem_help "$0" "$@"
cd "$(dirname "$0")/.."
# Both builds at the same grid: co-located ranks leave no cluster room here, as a tree from before the room
# (which ignores the variable) does not either.
export SYMMEM_CLUSTER_ROOM=${SYMMEM_CLUSTER_ROOM:-0}
export PATH=/usr/local/cuda/bin:$PATH
AB=${AB_DIR:-build-ab}
mkdir -p "$AB"

if [ "${1:-}" = --pack ]; then
  rev=${2:?usage: bench/ab_bench.sh --pack COMMIT}
  git archive --format=tar.gz -o "$AB/old.tar.gz" "$rev" -- . ':!bench/results' || exit 1
  echo "wrote $AB/old.tar.gz ($(git rev-parse --short "$rev")); on the GPU machine: bench/ab_bench.sh $AB/old.tar.gz"
  exit 0
fi
OLD=${1:?usage: bench/ab_bench.sh OLD_COMMIT|OLD_DIR|OLD_TARBALL [ROUNDS]  (or --pack COMMIT)}
ROUNDS=${2:-3}
[ "$ROUNDS" -ge 2 ] 2>/dev/null || { echo "ROUNDS must be at least 2"; exit 2; }
SIZES=${AB_SIZES:-1K 64K 1M 16M}
RANKS=${AB_RANKS:-2}
[ "$RANKS" -ge 2 ] 2>/dev/null && [ "$RANKS" -le 16 ] || { echo "AB_RANKS must be 2..16"; exit 2; }
JOBS=${AB_JOBS:-$(nproc)}
t_start=$(date +%s)

if [ "${AB_REUSE:-0}" = 1 ] && [ -x "$AB/build-old/bench/symmem-bench" ] && [ -x "$AB/build-new/bench/symmem-bench" ]; then
  echo "# AB_REUSE=1: the builds in $AB as they are"
else
  # ---- the old tree -------------------------------------------------------------------------------------
  src_old=$AB/old-src
  rm -rf "$src_old" && mkdir -p "$src_old"
  if [ -d "$OLD" ]; then
    cp -a "$OLD"/. "$src_old"/ || exit 1
  elif [ -f "$OLD" ]; then
    tar -xzf "$OLD" -C "$src_old" || exit 1
  elif git rev-parse --verify -q "$OLD^{commit}" > /dev/null; then
    git archive "$OLD" | tar -x -C "$src_old" || exit 1
  else
    echo "ab_bench: $OLD is neither a directory, a tarball nor a commit (no .git here? use --pack first)"
    exit 2
  fi
  rm -rf "$src_old"/build* # a copied tree's own build folders never count

  # ---- two builds in parallel ------------------------------------------------------------------------------
  # the bench configuration of scripts/build_common.sh (symmem-bench alone, AB_ARCH, warnings not errors: this
  # machine's compilers may warn about more than CI's), for both trees
  build() { # name source
    local b=$AB/build-$1
    { symmem_configure bench "$b" "$2" && SYMMEM_JOBS=$JOBS symmem_build "$b" symmem-bench; } > "$AB/build-$1.log" 2>&1 ||
      { echo "BUILD FAILED: $1 (see $AB/build-$1.log)"; grep -E "error|FAILED" -A3 "$AB/build-$1.log" | head -20; return 1; }
  }
  half=$(( JOBS > 1 ? JOBS / 2 : 1 ))
  JOBS=$half build old "$src_old" & p_old=$!
  JOBS=$half build new . & p_new=$!
  wait $p_old; rc_old=$?
  wait $p_new; rc_new=$?
  [ $rc_old = 0 ] && [ $rc_new = 0 ] || exit 1
fi
t_built=$(date +%s)
echo "# built old ($OLD) and new in $((t_built - t_start)) s"
[ "${AB_BUILD_ONLY:-0}" = 1 ] && exit 0

# ---- interleaved runs ------------------------------------------------------------------------------------
# Sizes in bytes; when they all lie on one x4 ladder from the smallest (1K 64K 1M 16M do), one invocation
# per build and round measures them all (-b MIN -e MAX -f 4; the sizes between are measured and left out
# of the table), else one invocation per size. Each build gets its own (empty) topology cache folder and no
# tuning file or SYMMEM_ALGO, so neither reads the other's figures and both use their built-in table.
bytes_of() { python3 -c "import sys; s=sys.argv[1].upper().rstrip('B').rstrip('I'); m={'K':1<<10,'M':1<<20,'G':1<<30}; print(int(s[:-1])*m[s[-1]] if s[-1] in m else int(s))" "$1"; }
SIZE_BYTES=$(for s in $SIZES; do bytes_of "$s"; done | sort -n | tr '\n' ' ')
read -r -a SB <<< "$SIZE_BYTES"
ladder=1
for b in "${SB[@]}"; do
  python3 -c "import math,sys; r=int(sys.argv[1])/int(sys.argv[2]); k=round(math.log(r,4)) if r>=1 else -1; sys.exit(0 if k>=0 and 4**k==r else 1)" "$b" "${SB[0]}" || ladder=0
done
if [ $ladder = 1 ]; then SPANS=("${SB[0]}:${SB[-1]}"); else SPANS=(); for b in "${SB[@]}"; do SPANS+=("$b:$b"); done; fi
for v in old new; do rm -rf "$AB/cache-$v" && mkdir -p "$AB/cache-$v"; done
# A tree from before symmem-bench took nccl-tests' options spells the rank count -N and an algorithm -a; the
# arguments are given in today's spelling and translated for such a build (its --help has no --nranks).
args_for() { # build
  local bin=$AB/build-$1/bench/symmem-bench
  if "$bin" --help 2>/dev/null | grep -q -- "--nranks"; then
    echo "--nranks $RANKS ${AB_ARGS:-}"
  else
    echo "-N $RANKS $(sed 's/--algo /-a /g; s/--coll /-t /g; s/-R 0/-z 0/g; s/-R 2/-z 1/g; s/-G \([1-9][0-9]*\)/-R \1/g' \
      <<< "${AB_ARGS:-}")"
  fi
}
run_one() { # build round
  local out=$AB/run-$1-$2.txt span
  : > "$out"
  for span in "${SPANS[@]}"; do
    # shellcheck disable=SC2046 # the arguments are words
    env -u SYMMEM_TUNE_FILE -u SYMMEM_ALGO SYMMEM_TOPO_CACHE_DIR="$AB/cache-$1" \
      timeout 150 "$AB/build-$1/bench/symmem-bench" --inprocess --nccl 0 -b "${span%%:*}" -e "${span##*:}" -f 4 \
      $(args_for "$1") >> "$out" 2>&1 || echo "# symmem-bench exited $? (build $1, sizes $span)" >> "$out"
  done
}
for r in $(seq 1 "$ROUNDS"); do
  run_one old "$r"
  run_one new "$r"
done
t_ran=$(date +%s)

# ---- the table -------------------------------------------------------------------------------------------
# Rows of symmem-bench: size count type redop algo | time algbw busbw #wrong | nccl ... | ratio
python3 - "$AB" "$ROUNDS" "$SIZE_BYTES" "$RANKS" <<'EOF'
import statistics, sys
ab, rounds, nranks = sys.argv[1], int(sys.argv[2]), int(sys.argv[4])
wanted = {int(x) for x in sys.argv[3].split()}
t = {}      # (build, size, algo-column key) -> [times]
label = {}  # (build, size, key) -> auto's label
wrong = {"old": 0, "new": 0}
errors = {"old": 0, "new": 0}
for build in ("old", "new"):
    for r in range(1, rounds + 1):
        for line in open(f"{ab}/run-{build}-{r}.txt"):
            if line.startswith("# symmem-bench exited"):
                errors[build] += 1
            f = line.split()
            if len(f) < 10 or line.startswith("#") or f[5] != "|" or not f[0].isdigit():
                continue
            size, algo = int(f[0]), f[4]
            if size not in wanted:
                continue
            key = "auto" if algo.startswith("auto") else algo
            try:
                us = float(f[6])
            except ValueError:  # unsupp / error
                continue
            t.setdefault((build, size, key), []).append(us)
            label[(build, size, key)] = algo
            if f[9].isdigit():
                wrong[build] += int(f[9])
keys = sorted({(s, k) for (_, s, k) in t})
def fmt_size(b):
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= div and b % div == 0:
            return f"{b // div} {unit}"
    return f"{b} B"
print(f"# symmem-bench all-reduce bf16 sum, {nranks} ranks in one process on one GPU, CUDA-graph replays; median of {rounds} "
      "rounds per build (each round's figure is itself the median of 10 replays, slowest rank)")
print(f"{'size':>8} {'algo (old / new)':>36} {'old us':>9} {'new us':>9} {'new/old':>8}   old rounds | new rounds")
ratios = []
for s, k in keys:
    o, n = t.get(("old", s, k), []), t.get(("new", s, k), [])
    mo = statistics.median(o) if o else float("nan")
    mn = statistics.median(n) if n else float("nan")
    ratio = mn / mo if o and n and mo > 0 else float("nan")
    if ratio == ratio:
        ratios.append(ratio)
    la, lb = label.get(("old", s, k), "-"), label.get(("new", s, k), "-")
    algo = la if la == lb else f"{la} / {lb}"
    print(f"{fmt_size(s):>8} {algo:>36} {mo:9.2f} {mn:9.2f} {ratio:8.3f}   "
          f"{' '.join(f'{x:.2f}' for x in o)} | {' '.join(f'{x:.2f}' for x in n)}")
if ratios:
    g = 1.0
    for x in ratios:
        g *= x
    print(f"# geometric mean new/old: {g ** (1 / len(ratios)):.3f} over {len(ratios)} rows; "
          f"#wrong old {wrong['old']} new {wrong['new']}; failed runs old {errors['old']} new {errors['new']}")
EOF
echo "# total $(( $(date +%s) - t_start )) s (builds $((t_built - t_start)) s, runs $((t_ran - t_built)) s); raw output in $AB/run-*.txt"

#!/usr/bin/env bash
# usage: bench/check_options.sh SYMMEM_BENCH     (-h: this text)
#
# symmem-bench's command line, no GPU needed (--dry-run prints what a command line runs and touches no GPU):
# nccl-tests' options read as nccl-tests reads them, symmem-bench's own long options, the short options that
# meant something else before refused with the replacement named, nccl-tests' options without a symmem
# meaning refused by name, and --help's exit statuses.
set -u
source "$(dirname "$0")/../scripts/build_common.sh"
symmem_help "$0" "$@"
bench=${1:?usage: check_options.sh SYMMEM_BENCH}
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# plan ARGS... : the dry run's "  key  value" lines
plan() { "$bench" --dry-run "$@" 2>&1; }
# want KEY VALUE ARGS...: the plan of ARGS has the line "  KEY  VALUE" (spaces between squeezed)
want() {
  local key=$1 value=$2; shift 2
  local got
  got=$(plan "$@" | sed -n "s/^  $key  *//p")
  [ "$got" = "$value" ] || fail "symmem-bench $* : $key is '$got', want '$value'"
}
# refused WORDS ARGS...: exit 2 and stderr contains WORDS
refused() {
  local words=$1; shift
  local out rc=0
  out=$("$bench" "$@" 2>&1 >/dev/null) || rc=$?
  [ "$rc" = 2 ] || fail "symmem-bench $* exited $rc, want 2 (usage)"
  grep -qF -- "$words" <<<"$out" || fail "symmem-bench $* : no '$words' in: $out"
}

# The issue's line: nccl-tests reads it as 1 rank (one thread, one GPU), 8 B .. 128 MiB doubling.
want sizes "8 B .. 128 MiB, x2 (25 sizes)" -b 8 -e 128M -f 2 -g 1
want ranks "1, threads of this process" -b 8 -e 128M -f 2 -g 1
want ranks "8, threads of this process" -g 8
want ranks "8, threads of this process" -t 2 -g 4
want ranks "4, threads of this process" -t 4
want ranks "one per GPU (two on one GPU), a process each"
want ranks "4, a process each" --nranks 4
# -i steps where -f is 1 (as nccl-tests), and -i alone means -f 1
want sizes "1 MiB .. 4 MiB, +1 MiB (4 sizes)" -b 1M -e 4M -i 1M
want sizes "1 MiB .. 4 MiB, +1 MiB (4 sizes)" -b 1M -e 4M -f 1
want sizes "1 MiB .. 4 MiB, x2 (3 sizes)" -b 1M -e 4M -f 2 -i 1M
want timing "CUDA graphs of 20 operations (-n), 10 timed launches (-G), 5 warm-up operations (-w)"
want timing "CUDA graphs of 7 operations (-n), 3 timed launches (-G), 2 warm-up operations (-w)" -n 7 -G 3 -w 2
want timing "eager launches: 10 timed batches (--replays) of 20 operations (-n), 5 warm-up operations (-w)" -G 0
want timing "eager launches, each waited for (-z 1): 4 timed batches (--replays) of 20 operations (-n), 5 warm-up operations (-w)" -z 1 --replays 4
want reported "per rank the median over launches; of those, the slowest rank's (-a 3)"
want reported "per rank the median over launches; of those, the mean (-a 1)" -a 1
want reported "per rank the median over launches; of those, rank 0's (-a 0)" -a 0
want check "off (-c)" -c 0
want check "on (-c)" -c 5
want buffers "cudaMalloc, copied in and out (-R 0)" -R 0
want buffers "symmetric (-R 2)" -R 2
want dtypes "float, half, bfloat16" -d all
want dtypes "float" -d float
want dtypes "half" --datatype half
want ops "sum, max, min" -o all
want ops "max" --op max
want cycles "3 (-N)" -N 3
want timeout "5 s (-T)" -T 5
want collective "reduce_scatter" --coll reduce_scatter
want algorithms "twoshot_pull, staged" --algo twoshot_pull,staged
want sizes "1 KiB .. 4 MiB, x4 (7 sizes)" --minbytes 1K --maxbytes 4M --stepfactor 4

# What meant something else before, and what symmem has no meaning for.
refused "the algorithm is --algo twoshot_pull" -a twoshot_pull
refused "the collective is --coll all_gather" -t all_gather
refused "-a takes an integer in 0..3" -a 4
refused "NCCL's local registration" -R 1
refused "nccl-tests' -m (agg_iters) has no counterpart" -m 2
refused "nccl-tests' -r (root) has no counterpart" -r 0
refused "a CUDA graph cannot: use -G 0" -z 1 -G 5
refused "symmem reduces with sum, max, min" -o prod
refused "symmem's collectives take float, half, bfloat16" -d int8
refused "either as -t/-g" -g 2 --nranks 2
refused "unknown option" --bogus
refused "--tune builds the table of one dtype and one op" --tune -d all

# --help: exit 0, the exit statuses named
out=$("$bench" --help) || fail "--help exited $?"
grep -q "77 no CUDA device" <<<"$out" || fail "--help does not name exit status 77"
grep -q "^  -g, --ngpus G" <<<"$out" || fail "--help does not list -g"

[ "$fails" = 0 ] || exit 1
echo "symmem-bench's options read as nccl-tests reads them; old meanings and foreign options refused with the fix"

#!/usr/bin/env bash
# usage: tests/arch/check_scripts.sh ROOT     (-h: this text)
#
# The scripts a user runs answer --help without side effects, and run.sh without a GPU says so first and
# builds only what it then runs. Every tool a script could start (cmake, ninja, nvcc, nvidia-smi, apt-get,
# sudo, pip, python, docker, git, ...) is replaced by a stub on PATH that records its call:
#   1. each executable script of scripts/ and bench/ (a shebang line; the sourced helpers have none) and each
#      bench/*.py with a main: `--help` exits 0, prints its usage, and records no call;
#   2. scripts/run.sh on a machine without a GPU (no nvidia-smi): its first line is the no-GPU verdict, the
#      one build it asks for is `--target symmem-topo`, and it then shows the captured 8-GPU PCIe server;
#      with two GPUs (a stub nvidia-smi) it builds symmem-topo and symmem-bench and runs the bench on both;
#   3. symmem_make_room (scripts/venv.sh, before the large pip installs of the test stages), under a stub df
#      whose free space grows as caches go: it removes caches in the order given only while the disk is
#      short, skips missing ones, keeps the rest, and warns (without failing) where it cannot make enough.
set -u
root=${1:?usage: check_scripts.sh ROOT}
if [ "$root" = -h ] || [ "$root" = --help ]; then sed -n '2,/^[^#]/{/^#/!q; s/^# \{0,1\}//; p}' "$0"; exit 0; fi
root=$(cd "$root" && pwd)
real_python=$(command -v python3)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

stubs=$tmp/stubs
mkdir -p "$stubs"
calls=$tmp/calls
for t in cmake ninja ctest nvcc nvidia-smi apt-get sudo pip pip3 python python3 uv docker git curl wget make gcc \
         g++ clang clang++ nvidia-cuda-mps-control unshare; do
  printf '#!/bin/sh\necho "%s $*" >> "%s"\nexit 1\n' "$t" "$calls" > "$stubs/$t"
  chmod +x "$stubs/$t"
done
# the tools' PATH: the stubs, then what a shell script needs (sed, awk, grep, ...), never /usr/local/cuda
stub_path="$stubs:/usr/bin:/bin"

# 1. --help
n=0
for f in "$root"/scripts/*.sh "$root"/bench/*.sh; do
  head -1 "$f" | grep -q '^#!' || continue
  rel=${f#"$root"/}
  [ -x "$f" ] || fail "$rel is not executable"
  : > "$calls"
  out=$(cd "$tmp" && PATH=$stub_path "$f" --help 2>&1)
  rc=$?
  [ "$rc" = 0 ] || fail "$rel --help exited $rc: $(head -3 <<<"$out")"
  grep -qi "usage" <<<"$out" || fail "$rel --help prints no usage: $(head -3 <<<"$out")"
  [ -s "$calls" ] && fail "$rel --help ran $(tr '\n' ';' < "$calls")"
  [ -z "$(ls -A "$tmp" | grep -v -e '^stubs$' -e '^calls$')" ] || fail "$rel --help wrote $(ls -A "$tmp")"
  n=$((n + 1))
done
for f in "$root"/bench/*.py; do
  grep -q '__main__' "$f" || continue
  rel=${f#"$root"/}
  : > "$calls"
  out=$(cd "$tmp" && PATH=$stub_path "$real_python" "$f" --help 2>&1)
  rc=$?
  [ "$rc" = 0 ] && [ -n "$out" ] || fail "$rel --help exited $rc: $(tail -3 <<<"$out")"
  [ -s "$calls" ] && fail "$rel --help ran $(tr '\n' ';' < "$calls")"
  n=$((n + 1))
done
[ "$n" -ge 15 ] || fail "only $n scripts found under $root/scripts and $root/bench"

# 2. run.sh: a build folder of stubs (cmake --build makes stub tools that say what they were asked)
fake_cmake() {
  cat > "$stubs/cmake" <<EOF
#!/bin/sh
echo "cmake \$*" >> "$calls"
if [ "\$1" = --build ]; then
  mkdir -p "\$2/tools" "\$2/bench"
  printf '#!/bin/sh\necho "symmem-topo \$*"\n' > "\$2/tools/symmem-topo"
  printf '#!/bin/sh\necho "symmem-bench \$*"\n' > "\$2/bench/symmem-bench"
  chmod +x "\$2/tools/symmem-topo" "\$2/bench/symmem-bench"
fi
exit 0
EOF
  printf '#!/bin/sh\nexit 0\n' > "$stubs/nvcc"
  chmod +x "$stubs/cmake" "$stubs/nvcc"
}
fake_cmake
rm -f "$stubs/nvidia-smi"
: > "$calls"
out=$(SYMMEM_BUILD_DIR=$tmp/b PATH=$stub_path "$root/scripts/run.sh" 2>&1)
rc=$?
[ "$rc" = 0 ] || fail "run.sh without a GPU exited $rc: $out"
head -1 <<<"$out" | grep -q "^run.sh: no GPU on this machine" || fail "run.sh's first line is not the no-GPU verdict: $(head -1 <<<"$out")"
builds=$(grep -c "^cmake --build" "$calls")
[ "$builds" = 1 ] && grep -q -- "^cmake --build $tmp/b .*--target symmem-topo$" "$calls" ||
  fail "run.sh without a GPU built something else than symmem-topo: $(grep '^cmake --build' "$calls")"
grep -q "^symmem-topo --sysfs-root tests/topo/fixtures/pcie-2socket-8gpu$" <<<"$out" ||
  fail "run.sh without a GPU does not show the captured 8-GPU report"
grep -q "^symmem-bench" <<<"$out" && fail "run.sh without a GPU ran symmem-bench"

printf '#!/bin/sh\necho "GPU 0: fake (UUID: a)"\necho "GPU 1: fake (UUID: b)"\n' > "$stubs/nvidia-smi"
chmod +x "$stubs/nvidia-smi"
: > "$calls"
out=$(SYMMEM_BUILD_DIR=$tmp/b PATH=$stub_path "$root/scripts/run.sh" -b 1K 2>&1)
grep -q -- "^cmake --build $tmp/b .*--target symmem-topo symmem-bench$" "$calls" ||
  fail "run.sh with GPUs built: $(grep '^cmake --build' "$calls")"
grep -q "^symmem-bench --nranks 2 -b 1K$" <<<"$out" || fail "run.sh with 2 GPUs did not run symmem-bench --nranks 2 -b 1K: $out"

# 3. symmem_make_room: free space is 2 GiB plus 4 GiB for each of the three caches under $room that is gone
room=$tmp/room
cat > "$stubs/df" <<EOF
#!/bin/sh
n=0; for d in a b c; do [ -d "$room/\$d" ] || n=\$((n + 1)); done
echo "Filesystem 1024-blocks Used Available Capacity Mounted"
echo "stub 100000000 0 \$(( (2 + 4 * n) * 1048576 )) 1% /stub"
EOF
chmod +x "$stubs/df"
make_room() { (PATH=$stub_path; source "$root/scripts/venv.sh"; symmem_make_room "$room" "$@") 2>&1; }
mkdir -p "$room"/a "$room"/b "$room"/c
out=$(make_room 9 "a test install" "$room/none" "$room/a" "$room/b" "$room/c")
rc=$?
[ "$rc" = 0 ] && [ ! -d "$room/a" ] && [ ! -d "$room/b" ] && [ -d "$room/c" ] ||
  fail "make_room 9 GiB from 2 free: rc $rc, left $(ls "$room"), said: $out"
[ "$(grep -c "removing the cache" <<<"$out")" = 2 ] && grep -q "for a test install" <<<"$out" ||
  fail "make_room did not say what it removed and why: $out"
grep -q "room/none" <<<"$out" && fail "make_room spoke of a missing cache: $out"
out=$(make_room 9 "a test install" "$room/c")
[ -d "$room/c" ] && [ -z "$out" ] || fail "make_room with 10 GiB free of 9 removed or said something: $out"
out=$(make_room 30 "a large install" "$room/c")
rc=$?
[ "$rc" = 0 ] && [ ! -d "$room/c" ] && grep -q "warning: only 14 GiB free .*a large install (~30 GiB)" <<<"$out" ||
  fail "make_room short of 30 GiB: rc $rc, said: $out"

[ "$fails" = 0 ] || exit 1
echo "$n scripts answer --help without side effects; run.sh says 'no GPU' first and builds only symmem-topo there; make_room removes caches only while the disk is short"

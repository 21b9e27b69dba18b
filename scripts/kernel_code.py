#!/usr/bin/env python3
"""The generated code of the library's kernels, per kernel, for comparing two trees without a GPU.

    scripts/kernel_code.py dump TREE OUT [--arch sm_90]   compile every library .cu of TREE to PTX and to a
                                                         cubin (ptxas -v), write OUT/<kernel>.ptx (normalised)
                                                         and OUT/resources.txt (registers, spills, stack)
    scripts/kernel_code.py diff OLD_OUT NEW_OUT          per kernel: same PTX, different PTX, added, removed;
                                                         resources that differ

Normalised PTX: comments, .loc/.file debug lines and the file-scope header dropped, anonymous-namespace
names, labels and local depots unnumbered, virtual registers renumbered in order of first use, so a kernel
that moved to another file (or within one) compares equal when its code is the same, and a changed one
shows only the instructions that changed (`diff OLD/<kernel>.ptx NEW/<kernel>.ptx`). Register names are kept (ptxas decides the
allocation; PTX virtual registers only renumber when the code changes). Exit 0 when both trees have the
same kernels with the same PTX and resources, 1 otherwise.
"""
import argparse
import collections
import os
import re
import subprocess
import sys

FLAGS = ["-O2", "-DNDEBUG", "-DSYMMEM_BUILDING", "-DSYMMEM_HAVE_NUMA=1", "-D_GNU_SOURCE", "--expt-relaxed-constexpr",
         "-std=c++17", "-Xcompiler=-fPIC,-fvisibility=hidden,-fno-exceptions,-fno-rtti,-fno-threadsafe-statics"]
LIB_DIRS = ("collectives", "topology", "alloc", "base", "core", "comm")


def sources(tree):
    out = []
    for d in LIB_DIRS:
        p = os.path.join(tree, d)
        if not os.path.isdir(p):
            continue
        for root, _, files in os.walk(p):
            out += [os.path.join(root, f) for f in sorted(files) if f.endswith(".cu")]
    return out


def functions(ptx):
    """Map name -> normalised text of every .entry and .func body in one PTX file."""
    funcs = {}
    # anonymous namespaces are mangled with the file's name and a hash of its path: not part of the code
    ptx = re.sub(r"\d+_GLOBAL__N__[0-9a-f]+_\d+_\w+?_[0-9a-f]{8}(?=\d)", "_anon_", ptx)
    # labels and local depots are numbered by the function's position in its file
    ptx = re.sub(r"\$L__BB\d+_", "$L__BB_", ptx)
    ptx = re.sub(r"__local_depot\d+", "__local_depot", ptx)
    lines = [l for l in ptx.splitlines() if not re.match(r"\s*(\.loc|\.file|//|\$L__info|\.section)", l)]
    text = "\n".join(lines)
    for m in re.finditer(r"^(?:\.visible |\.weak |\.extern )*\.(entry|func)\s+(?:\([^)]*\)\s*)?([\w$]+)", text, re.M):
        start = m.start()
        # body: from the header to the matching closing brace at column 0
        end = text.find("\n}\n", start)
        if end < 0:
            continue
        body = text[start:end + 2]
        if "{" not in body:  # a declaration only
            continue
        funcs[m.group(2)] = canonical("\n".join(l.rstrip() for l in body.splitlines() if l.strip()))
    return funcs


def canonical(body):
    """Virtual registers renumbered in order of first use (per class), their counts and the function-static
    shared variables' declarations (emitted in whichever function of the file uses them first) dropped: what
    remains differs only where instructions do."""
    lines = [re.sub(r"\s*// callseq \d+.*$", "", l) for l in body.splitlines()
             if not re.match(r"\s*\.reg\s", l) and not re.match(r"\s*\.shared\s.*\b_ZZ", l)]
    names = {}

    def rename(m):
        cls = m.group(1)
        key = m.group(0)
        if key not in names:
            names[key] = "%%%s%d" % (cls, sum(1 for k in names if re.match(r"%" + cls + r"\d", k)))
        return names[key]
    return re.sub(r"%(rd|rs|r|p|fd|f|h|hh)(\d+)\b", rename, "\n".join(lines))


def dump(tree, out, arch):
    os.makedirs(out, exist_ok=True)
    inc = ["-I" + os.path.join(tree, "include"), "-I" + tree]
    res = []
    for src in sources(tree):
        base = os.path.relpath(src, tree).replace("/", "_")
        ptx = os.path.join(out, base + ".ptx.raw")
        subprocess.run(["nvcc", "-arch=" + arch, "--ptx", *FLAGS, *inc, src, "-o", ptx], check=True)
        cub = subprocess.run(["nvcc", "-arch=" + arch, "-cubin", "-Xptxas=-v", *FLAGS, *inc, src, "-o",
                              os.path.join(out, base + ".cubin")], check=True, capture_output=True, text=True)
        fn = None
        for line in cub.stderr.splitlines():
            m = re.search(r"Compiling entry function '([^']+)'|Function properties for ([\w$]+)", line)
            if m:
                fn = re.sub(r"\d+_GLOBAL__N__[0-9a-f]+_\d+_\w+?_[0-9a-f]{8}(?=\d)", "_anon_", m.group(1) or m.group(2))
            m = re.search(r"Used (\d+) registers", line)
            if m and fn:
                res.append("%s regs=%s" % (fn, m.group(1)))
            m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
            if m and fn:
                res.append("%s stack=%s spill_st=%s spill_ld=%s" % (fn, *m.groups()))
        with open(ptx) as f:
            for name, body in functions(f.read()).items():
                with open(os.path.join(out, name + ".ptx"), "w") as g:
                    g.write(body + "\n")
        os.remove(ptx)
        os.remove(os.path.join(out, base + ".cubin"))
    with open(os.path.join(out, "resources.txt"), "w") as f:
        f.write("\n".join(sorted(set(res))) + "\n")


def opcodes(body):
    """The multiset of instruction opcodes (predicates, labels, braces and directives left out)."""
    ops = collections.Counter()
    for l in body.splitlines():
        t = l.strip()
        if not t or t.startswith((".", "$", "{", "}", "//", ")", "(")) or t.endswith(":"):
            continue
        t = re.sub(r"^@!?%p\d+\s+", "", t)
        ops[t.split()[0].rstrip(";")] += 1
    return ops


def demangle(names):
    try:
        r = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True)
        return dict(zip(names, r.stdout.splitlines()))
    except (OSError, subprocess.CalledProcessError):
        return {n: n for n in names}


def diff(old, new):
    ko = {f[:-4] for f in os.listdir(old) if f.endswith(".ptx")}
    kn = {f[:-4] for f in os.listdir(new) if f.endswith(".ptx")}
    dm = demangle(sorted(ko | kn))
    same, changed = [], []
    for k in sorted(ko & kn):
        a = open(os.path.join(old, k + ".ptx")).read()
        b = open(os.path.join(new, k + ".ptx")).read()
        (same if a == b else changed).append(k)
    print("kernels and functions: %d old, %d new; %d identical PTX, %d changed, %d added, %d removed"
          % (len(ko), len(kn), len(same), len(changed), len(kn - ko), len(ko - kn)))
    for k in changed:
        a = opcodes(open(os.path.join(old, k + ".ptx")).read())
        b = opcodes(open(os.path.join(new, k + ".ptx")).read())
        plus = sorted((b - a).elements())
        minus = sorted((a - b).elements())
        print("  changed: %s: %d -> %d instructions%s%s" % (dm[k], sum(a.values()), sum(b.values()),
              ("; + " + " ".join(plus)) if plus else "", ("; - " + " ".join(minus)) if minus else ""))
    for k in sorted(kn - ko):
        print("  added:   %s" % dm[k])
    for k in sorted(ko - kn):
        print("  removed: %s" % dm[k])
    ro = set(open(os.path.join(old, "resources.txt")).read().split("\n")) - {""}
    rn = set(open(os.path.join(new, "resources.txt")).read().split("\n")) - {""}
    only_o, only_n = sorted(ro - rn), sorted(rn - ro)
    print("resource lines (ptxas -v: registers, stack, spills): %d old, %d new, %d differ"
          % (len(ro), len(rn), len(only_o) + len(only_n)))
    for l in only_o:
        print("  old: %s" % l)
    for l in only_n:
        print("  new: %s" % l)
    return 0 if not changed and ko == kn and not only_o and not only_n else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("tree")
    d.add_argument("out")
    d.add_argument("--arch", default="sm_90")
    c = sub.add_parser("diff")
    c.add_argument("old")
    c.add_argument("new")
    a = ap.parse_args()
    if a.cmd == "dump":
        dump(a.tree, a.out, a.arch)
        return 0
    return diff(a.old, a.new)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The documentation's promises that a machine can check:

  links    every relative link in the tree's markdown files names a file or folder that exists, and a
           #fragment names a heading of the file it points into (GitHub's anchors);
  cites    in tracked text (docs, comments, scripts), a path into the tree names a file or folder that
           exists, and a citation of a section, FILE.md, "Heading" (or FILE.md ("Heading")), names the start
           of a heading of that file, or of a paragraph's bold title;
  history  tracked text says what is and why, not how the work went: no session numbers, and no issue or
           PR numbers of this project (an upstream project's, named before it or as name#N, may be cited);
  readme   the README stays the front door: at most 170 lines, the two commands within its first 40;
  c        the README's C example compiles (-std=c11 -Wall -Wextra -Werror, no undefined names);
  python   the README's Python example parses and every name it reads is defined, imported or a builtin.

  check_docs.py ROOT [--cc CC --cflags "FLAGS"]   all checks on the tree at ROOT (c only with --cc)
  check_docs.py --self-test                       each check finds what it must in synthetic inputs
Prints every failure as file:line: what, and exits 1 if there is any."""
import argparse
import ast
import builtins
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

SKIP_DIRS = {".git", "node_modules", "__pycache__"}
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")


def markdown_files(root):
    for dirpath, dirnames, filenames in os.walk(root):
        rel = Path(dirpath).relative_to(root)
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not (rel == Path(".") and d.startswith("build"))]
        for f in filenames:
            if f.endswith(".md"):
                yield Path(dirpath) / f


def anchors(path):
    """GitHub's anchors of a markdown file's headings."""
    out, seen, fenced = set(), {}, False
    for line in path.read_text(errors="replace").splitlines():
        if FENCE.match(line):
            fenced = not fenced
        if fenced or not line.startswith("#"):
            continue
        text = line.lstrip("#").strip().lower()
        slug = re.sub(r"[^\w\- ]", "", text).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def check_links(root):
    bad = []
    for md in sorted(markdown_files(root)):
        fenced = False
        for no, line in enumerate(md.read_text(errors="replace").splitlines(), 1):
            if FENCE.match(line):
                fenced = not fenced
            if fenced:
                continue
            line = re.sub(r"`[^`]*`", "", line)  # code spans are not links
            for m in LINK.finditer(line):
                target = m.group(1) or m.group(2)
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                    continue
                path, _, frag = target.partition("#")
                dest = md if not path else (md.parent / path)
                where = f"{md.relative_to(root)}:{no}"
                if not dest.exists():
                    bad.append(f"{where}: link to {target}: {path} does not exist")
                elif frag and dest.is_file() and dest.suffix == ".md" and frag not in anchors(dest):
                    bad.append(f"{where}: link to {target}: no heading #{frag} in {path or md.name}")
    return bad


def code_blocks(path, lang):
    """(first line number, text) of each fenced block of `lang` in a markdown file."""
    blocks, cur, start = [], None, 0
    for no, line in enumerate(path.read_text().splitlines(), 1):
        if cur is None and line.strip() == "```" + lang:
            cur, start = [], no + 1
        elif cur is not None and line.strip() == "```":
            blocks.append((start, "\n".join(cur) + "\n"))
            cur = None
        elif cur is not None:
            cur.append(line)
    return blocks


def check_readme_shape(readme):
    lines = readme.read_text().splitlines()
    bad = []
    if len(lines) > 170:
        bad.append(f"{readme.name}: {len(lines)} lines: the front door stays within 170 (move detail to docs/)")
    for cmd in ("./scripts/run.sh", "./scripts/test.sh"):
        if not any(cmd in ln for ln in lines[:40]):
            bad.append(f"{readme.name}: {cmd} is not in the first 40 lines")
    return bad


def check_c(readme, cc, cflags):
    bad = []
    blocks = code_blocks(readme, "c")
    if not blocks:
        return [f"{readme.name}: no C example"]
    for start, text in blocks:
        with tempfile.TemporaryDirectory() as d:
            src = Path(d) / "readme_example.c"
            src.write_text(text)
            cmd = [cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-fsyntax-only", *shlex.split(cflags), str(src)]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                bad.append(f"{readme.name}:{start}: the C example does not compile ({' '.join(cmd)}):\n{r.stderr}")
    return bad


def undefined_names(text):
    """Names a Python snippet reads that nothing in it defines, imports, or the builtins provide."""
    tree = ast.parse(text)
    defined = set(dir(builtins))
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            defined.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            defined |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.arg):
            defined.add(node.arg)
    return sorted({n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
                  - defined)


def check_python(readme):
    bad = []
    blocks = code_blocks(readme, "python")
    if not blocks:
        return [f"{readme.name}: no Python example"]
    for start, text in blocks:
        try:
            missing = undefined_names(text)
        except SyntaxError as e:
            bad.append(f"{readme.name}:{start + (e.lineno or 1) - 1}: the Python example does not parse: {e.msg}")
            continue
        if missing:
            bad.append(f"{readme.name}:{start}: the Python example reads undefined names: {', '.join(missing)}")
    return bad


# ---- tracked text: paths, section citations, history ------------------------------------------------------------

# the tree's top-level folders a path in prose or a comment starts with; a path into anything else (another
# project's tree, a build folder, /tmp) is not this tree's to check
TOP_DIRS = ("alloc", "base", "bench", "boot", "cmake", "collectives", "comm", "docs", "examples", "harness",
            "include", "python", "scripts", "tests", "tools", "topology")
TEXT_SUFFIXES = {".md", ".c", ".h", ".cu", ".cuh", ".cc", ".cpp", ".py", ".sh", ".txt", ".cmake", ".toml", ".in",
                 ".json", ".cfg", ".ini", ".yml", ".yaml"}
TEXT_NAMES = {"CMakeLists.txt", "README", "LICENSE"}
PATH_REF = re.compile(r"(?<![\w./@~$-])((?:" + "|".join(TOP_DIRS) + r")/[\w./+-]*[\w/])")
# FILE.md, "Heading" / FILE.md ("Heading") / FILE.md "Heading": the quoted text starts a heading of FILE.md
SECTION_REF = re.compile(r"([\w./-]*[\w-]\.md)\)?\s*(?:,|\(|:)?\s*[\"\u201c]([^\"\u201d]{2,160})[\"\u201d]")
COMMENT_LEAD = re.compile(r"^\s*(?:/\*+|\*+/?|//+|#+|--|;+)?\s?")
SESSION = re.compile(r"sessions? ?[0-9]", re.I)
OWN_ISSUE = re.compile(r"\b(issues?|PRs?|pull requests?) ?#?([0-9]+)", re.I)
# an issue or PR of one of these projects, named just before it ("flashinfer PR #4393"), is upstream's
UPSTREAM = {"sglang", "vllm", "nccl", "nccl-tests", "pytorch", "torch", "flashinfer", "b12x", "cutlass", "cuda",
            "triton", "ucx", "hwloc", "libuv", "mscclpp", "tensorrt-llm", "trt-llm", "nvshmem", "rtx6kpro", "cpython",
            "cmake", "ninja", "gloo", "github", "upstream"}


def tracked_files(root):
    """The tree's tracked text files (git ls-files; without git, every file outside .git and build folders)."""
    try:
        out = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True, check=True).stdout
        names = [n for n in out.decode(errors="replace").split("\0") if n]
    except (OSError, subprocess.CalledProcessError):
        names = []
        for dirpath, dirnames, filenames in os.walk(root):
            rel = Path(dirpath).relative_to(root)
            dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not (rel == Path(".") and d.startswith("build"))]
            names += [str(rel / f) for f in filenames]
    out = []
    for n in sorted(names):
        p = Path(root) / n
        if (p.suffix in TEXT_SUFFIXES or p.name in TEXT_NAMES) and p.is_file() and p.stat().st_size < (4 << 20):
            data = p.read_bytes()
            if b"\0" not in data[:8192]:
                out.append((n, data.decode(errors="replace")))
    return out


def joined(text):
    """The text with each line's indentation and comment lead (/*, *, //, #) taken off and the lines joined by
    spaces, so a citation wrapped over comment lines reads as one; and each line's start offset in it."""
    parts, starts, pos = [], [], 0
    for line in text.splitlines():
        starts.append(pos)
        part = COMMENT_LEAD.sub("", line, count=1).rstrip()
        parts.append(part)
        pos += len(part) + 1
    return " ".join(parts), starts


def line_of(starts, offset):
    lo, hi = 0, len(starts) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if starts[mid] <= offset:
            lo = mid
        else:
            hi = mid - 1
    return lo + 1


BOLD_LEAD = re.compile(r"^\s*(?:[-*]\s+)?\*\*(.+?)\*\*")


def headings(path):
    """The sections a markdown file offers to a citation, lower case: its headings, and the bold titles that
    open a paragraph or a list item ("**Block size.** A call uses...", "- **Lazy loading** (...)")."""
    out, fenced = [], False
    for line in path.read_text(errors="replace").splitlines():
        if FENCE.match(line):
            fenced = not fenced
        if fenced:
            continue
        if line.startswith("#"):
            out.append(norm(line.lstrip("#")))
        m = BOLD_LEAD.match(line)
        if m:
            out.append(norm(m.group(1)).rstrip(".:"))
    return out


def norm(text):
    return " ".join(re.sub(r"[`*_]", "", text).replace("\u2019", "'").split()).strip().lower()


C_LIKE = {".c", ".h", ".cu", ".cuh", ".cc", ".cpp"}
HASH_COMMENTS = {".py", ".sh", ".cmake", ".toml", ".in", ".cfg", ".ini", ".yml", ".yaml"}
PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_-]{2,}$")


def doc_text(name, text):
    """What of a file is prose a reader reads: all of a markdown or text file; of code, its comments (and a
    Python file's triple-quoted docstrings), everything else blanked to spaces with the newlines kept, so line
    numbers hold. A path or a quote inside a string literal is data (a test's input, a message), not a citation."""
    suffix = Path(name).suffix if Path(name).name != "CMakeLists.txt" else ".cmake"
    if suffix == ".json":
        return ""
    if suffix not in C_LIKE and suffix not in HASH_COMMENTS:
        return text
    out, i, n = [], 0, len(text)
    keep = lambda a, b: out.append(text[a:b])  # noqa: E731
    blank = lambda a, b: out.append(re.sub(r"[^\n]", " ", text[a:b]))  # noqa: E731
    while i < n:
        c = text[i]
        if suffix in C_LIKE and text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            keep(i, j)
        elif suffix in C_LIKE and text.startswith("//", i) or suffix in HASH_COMMENTS and c == "#":
            j = text.find("\n", i)
            j = n if j < 0 else j
            keep(i, j)
        elif suffix == ".py" and text.startswith(('"""', "'''"), i):
            j = text.find(text[i:i + 3], i + 3)
            j = n if j < 0 else j + 3
            keep(i, j)
        elif c in "\"'" and not (suffix == ".sh" and c == "'" and i > 0 and text[i - 1].isalnum()):
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            blank(i, j)
        else:
            j = i + 1
            while j < n and text[j] not in "\"'#/" :
                j += 1
            blank(i, j)
        i = max(j, i + 1)
    return "".join(out)


def checkable(root, ref, slash):
    """Whether a path found in text is one to hold to this tree: a file with a suffix, a folder written with its
    slash, or anything deeper than top/name whose first folder below the top exists here (include/linux/sched.h is
    the kernel's); not a placeholder (bench/results/DATE-MACHINE-SUBJECT) nor a build output (bench/symmem-bench)."""
    parts = ref.split("/")
    if any(PLACEHOLDER.match(p) for p in parts):
        return False
    if len(parts) == 2:
        return slash or "." in parts[1]
    return (Path(root) / parts[0] / parts[1]).is_dir()


def results_raw(name):
    """A results folder's raw output (bench/results/NAME/FILE other than its README): a record of what a run
    printed, whose paths and words are those of that day's machine, not citations."""
    parts = Path(name).parts
    return len(parts) > 3 and parts[:2] == ("bench", "results") and parts[-1] != "README.md"


def check_cites(root, files=None):
    bad, root = [], Path(root)
    heads = {}
    for name, text in files if files is not None else tracked_files(root):
        if results_raw(name):
            continue
        here = (root / name).parent
        flat, starts = joined(doc_text(name, text))
        missing = set()
        for m in PATH_REF.finditer(flat):
            ref = m.group(1).rstrip("/.")
            nxt = flat[m.end():m.end() + 1]
            if nxt and nxt in "*{<$[":
                continue  # a pattern or a placeholder (bench/torch_*.py, results/<run>/)
            if not checkable(root, ref, m.group(1).endswith("/")):
                continue
            if not (root / ref).exists():
                if not (here / ref).exists():
                    missing.add(ref)
                    bad.append(f"{name}:{line_of(starts, m.start())}: {ref} does not exist in the tree")
        for m in SECTION_REF.finditer(flat):
            target, quote = m.group(1), norm(m.group(2))
            if Path(target).stem in ("FILE", "NAME", "PATH"):
                continue  # FILE.md, "Heading": the form itself
            cands = [root / target, here / target]
            path = next((c for c in cands if c.is_file()), None)
            where = f"{name}:{line_of(starts, m.start())}"
            if path is None:
                if target not in missing:
                    bad.append(f'{where}: cites "{m.group(2)}" in {target}, which does not exist')
                continue
            key = path.resolve()
            if key not in heads:
                heads[key] = headings(path)
            if not any(h.startswith(quote.rstrip(".:")) for h in heads[key]):
                bad.append(f'{where}: cites "{m.group(2)}" in {target}, which has no heading that starts so')
    return bad


def check_history(root, files=None):
    bad = []
    for name, text in files if files is not None else tracked_files(root):
        for no, line in enumerate(text.splitlines(), 1):
            for m in SESSION.finditer(line):
                bad.append(f"{name}:{no}: '{m.group(0)}': name the machine, date and subject, not the session")
            for m in OWN_ISSUE.finditer(line):
                before = re.findall(r"([\w.-]+)\W*$", line[:m.start()])
                if before and before[0].lower() in UPSTREAM:
                    continue
                bad.append(f"{name}:{no}: '{m.group(0)}': say what is and why, not which issue of this project asked "
                           "for it (an upstream project's issue is cited with its name: sglang#34528)")
    return bad


def self_test():
    fails = []
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        (root / "docs").mkdir()
        (root / "docs" / "a.md").write_text("# Title\n\n## Two words\n")
        (root / "README.md").write_text("\n".join([
            "./scripts/run.sh ./scripts/test.sh",
            "[ok](docs/a.md) [ok](docs/a.md#two-words) [web](https://example.org) `[no](nowhere.md)`",
            "[missing](docs/b.md)", "[bad anchor](docs/a.md#three)",
            "```python", "import os", "print(os.sep, undefined_thing)", "```",
            "```c", "int f(void) { return undefined_c; }", "```"]) + "\n")
        links = check_links(root)
        if len(links) != 2 or "docs/b.md" not in links[0] or "#three" not in links[1]:
            fails.append(f"links: {links}")
        py = check_python(root / "README.md")
        if len(py) != 1 or "undefined_thing" not in py[0]:
            fails.append(f"python: {py}")
        if check_readme_shape(root / "README.md"):
            fails.append("shape: a short README with both commands was reported")
        (root / "README.md").write_text("x\n" * 171)
        if len(check_readme_shape(root / "README.md")) != 3:
            fails.append("shape: a long README without the commands passed")
        cc = os.environ.get("CC", "cc")
        if subprocess.run(["sh", "-c", f"command -v {shlex.quote(cc)}"], capture_output=True).returncode == 0:
            (root / "README.md").write_text("```c\nint f(void) { return undefined_c; }\n```\n")
            c = check_c(root / "README.md", cc, "")
            if len(c) != 1 or "undefined_c" not in c[0]:
                fails.append(f"c: {c}")
    fails += self_test_text()
    for f in fails:
        print("self-test:", f)
    return 1 if fails else 0


def self_test_text():
    """The cites and history checks on synthetic tracked files (the words the checks look for are built here
    from pieces, so this file itself passes them)."""
    fails = []
    ses, iss, pr = "ses" + "sion", "iss" + "ue", "P" + "R"
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        (root / "docs").mkdir()
        (root / "bench").mkdir()
        (root / "docs" / "a.md").write_text("# Title\n\n## Residency\n\n### The cost model: what it counts\n\n"
                                           "- **Lazy loading** (a list item)\n\n**Block size.** A paragraph.\n")
        (root / "bench" / "tool.py").write_text("x\n")
        good = {
            "collectives/x.c": "/* the rule (docs/a.md, \"Residency\"); bench/tool.py measures it, as bench/torch_*.py\n"
                               " * do (docs/a.md, \"The cost\n * model\"); see bench/results/<run>/ (docs/a.md, \"Lazy loading\";\n"
                               " * docs/a.md, \"Block size\") */\n",
            "docs/b.md": "[a](a.md) and docs/a.md (\"Title\"); sglang#34528, flashinfer PR #4393, vLLM " + iss + " 123;\n"
                         "include/linux/sched.h, bench/results/DATE-MACHINE-SUBJECT, alloc/free, bench/symmem-bench;\n"
                         "a 'test " + ses + " starts' line; /tmp/b/bench/nothing.c is another machine's\n",
        }
        files = list(good.items())
        got = check_cites(root, files) + check_history(root, files)
        if got:
            fails.append(f"good text reported: {got}")
        bad = {
            "collectives/y.c": "/* see bench/gone.py and docs/a.md, \"Conclusions\"; docs/none.md, \"Xy\";\n"
                               " * NOTES.md (\"Method\") */ puts(\"bench/in_a_string.c\");\n",
            "bench/NOTES.md": f"measured in {ses} 22, {ses}7 and {iss} 29 ({iss.capitalize()}s 27, 32), {pr} #5\n",
        }
        files = list(bad.items())
        cites, hist = check_cites(root, files), check_history(root, files)
        want_c = ["bench/gone.py does not exist", 'cites "Conclusions" in docs/a.md', "docs/none.md does not exist",
                  'cites "Method" in NOTES.md, which does not exist']
        for w in want_c:
            if not any(w in c for c in cites):
                fails.append(f"cites: expected '{w}' in {cites}")
        if len(cites) != 4:
            fails.append(f"cites: {cites}")
        if len(hist) != 5 or not all(h.startswith("bench/NOTES.md:1:") for h in hist):
            fails.append(f"history: {hist}")
        raw = [("bench/results/2099-01-01-h200-x/log.txt", f"{ses} 3 ran bench/gone.py\n")]
        if check_cites(root, raw) or len(check_history(root, raw)) != 1:
            fails.append("a results folder's raw output: its paths are not citations, its words still history")
    return fails


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", nargs="?")
    ap.add_argument("--cc")
    ap.add_argument("--cflags", default="")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    if not args.root:
        ap.error("ROOT is needed")
    root = Path(args.root).resolve()
    readme = root / "README.md"
    files = tracked_files(root)
    bad = (check_links(root) + check_readme_shape(readme) + check_python(readme) + check_cites(root, files) +
           check_history(root, files))
    if args.cc:
        bad += check_c(readme, args.cc, args.cflags)
    for b in bad:
        print(b)
    print(f"check_docs: {len(bad)} problem(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

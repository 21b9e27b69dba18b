#!/usr/bin/env python3
"""The documentation's promises that a machine can check:

  links    every relative link in the tree's markdown files names a file or folder that exists, and a
           #fragment names a heading of the file it points into (GitHub's anchors);
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
    for f in fails:
        print("self-test:", f)
    return 1 if fails else 0


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
    bad = check_links(root) + check_readme_shape(readme) + check_python(readme)
    if args.cc:
        bad += check_c(readme, args.cc, args.cflags)
    for b in bad:
        print(b)
    print(f"check_docs: {len(bad)} problem(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

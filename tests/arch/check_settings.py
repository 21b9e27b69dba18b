#!/usr/bin/env python3
"""Every SYMMEM_* environment variable that symmem's code reads is a row of the parameter table
(base/param.h, as `symmem-info --markdown` prints it into docs/configuration.md), and every row is read.

  check_settings.py SYMMEM_INFO ROOT     the tree at ROOT
  check_settings.py --self-test          synthetic trees: a clean one passes, each kind of fault fails

What counts as a read:
  - the library (base boot topology alloc collectives comm, python/csrc): SYMMEM_PARAM_<NAME> of the table's
    enum; a getenv of a SYMMEM_* name there is a fault (the library reads only through the table);
  - the Python package (python/symmem): the first argument of os.environ.get / os.getenv / os.environ[...] and
    of the package's readers (_settings.value / flag, _common.env_mode / env_flag / env_bytes), a string
    literal, a module constant (ENV = "SYMMEM_SGLANG") or an f-string of them. An argument that is a
    parameter of the function around the call is a helper's (the call sites are checked instead); anything
    else that cannot be resolved is a fault, since the check could not say which variable it is.
"""
import ast
import os
import re
import subprocess
import sys
import tempfile

LIB_DIRS = ("base", "boot", "topology", "alloc", "collectives", "comm", os.path.join("python", "csrc"))
PY_DIR = os.path.join("python", "symmem")
READERS = {"get", "getenv", "value", "flag", "env_mode", "env_flag", "env_bytes", "wire_kwargs", "env_wire"}
NOT_PARAMS = {"FIELD", "COUNT", "LIST", "ENUM_", "DEF_", "ALGO_NAME_"}


def table(info):
    """{name: reader} from symmem-info --markdown: the library's section, then the Python package's."""
    out = subprocess.run([info, "--markdown"], capture_output=True, text=True, check=True).stdout
    rows, reader = {}, None
    for line in out.splitlines():
        if line.startswith("## "):
            reader = "python" if "Python" in line else "library"
        m = re.match(r"^\| `(SYMMEM_[A-Z0-9_]+)` \|", line)
        if m:
            rows[m.group(1)] = reader
    return rows


def c_reads(root, faults):
    reads = set()
    for d in LIB_DIRS:
        for dirpath, _, files in os.walk(os.path.join(root, d)):
            for f in files:
                if not f.endswith((".c", ".h", ".cu", ".cuh", ".cpp")):
                    continue
                path = os.path.join(dirpath, f)
                text = open(path, encoding="utf-8", errors="replace").read()
                for m in re.finditer(r'\b(?:secure_)?getenv\s*\(\s*"(SYMMEM_[A-Z0-9_]*)', text):
                    faults.append(f"{os.path.relpath(path, root)}: getenv(\"{m.group(1)}\"): the library reads its "
                                  "variables through the parameter table (base/param.h)")
                for m in re.finditer(r"\bSYMMEM_PARAM_([A-Z0-9_]+)", text):
                    name = m.group(1)
                    if not any(name == n or name.startswith(n) for n in NOT_PARAMS):
                        reads.add("SYMMEM_" + name)
    return reads


def _constants(tree):
    """Module-level NAME = "string" assignments."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    out[t.id] = node.value.value
    return out


def _resolve(arg, consts, params):
    """The string `arg` stands for; "" for a helper's parameter; None when it cannot be told."""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.Name):
        if arg.id in params:
            return ""
        return consts.get(arg.id)
    if isinstance(arg, ast.Attribute) and arg.attr in consts:  # sglang.ENV
        return consts[arg.attr]
    if isinstance(arg, ast.JoinedStr):
        parts = []
        for v in arg.values:
            if isinstance(v, ast.Constant):
                parts.append(str(v.value))
            elif isinstance(v, ast.FormattedValue):
                r = _resolve(v.value, consts, params)
                if r is None or r == "":
                    return r
                parts.append(r)
            else:
                return None
        return "".join(parts)
    return None


def _is_reader(call):
    f = call.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
    if name not in READERS:
        return False
    if name == "get":  # only os.environ.get / environ.get
        v = f.value
        return (isinstance(v, ast.Attribute) and v.attr == "environ") or (isinstance(v, ast.Name) and v.id == "environ")
    if name == "getenv":
        return True
    if name in ("value", "flag"):  # _settings.value / table.value
        return isinstance(f, ast.Attribute)
    return True


class _Visitor(ast.NodeVisitor):
    def __init__(self, rel, consts, reads, faults):
        self.rel, self.consts, self.reads, self.faults = rel, consts, reads, faults
        self.params = [set()]

    def _func(self, node):
        a = node.args
        self.params.append({x.arg for x in a.args + a.kwonlyargs + a.posonlyargs} | self.params[-1])
        self.generic_visit(node)
        self.params.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _func

    def _arg(self, node, arg):
        name = _resolve(arg, self.consts, self.params[-1])
        if name is None:
            self.faults.append(f"{self.rel}:{node.lineno}: an environment read whose variable cannot be told "
                               f"({ast.unparse(arg)}): use a string or a module constant")
        elif name.startswith("SYMMEM_"):
            self.reads.setdefault(name, f"{self.rel}:{node.lineno}")

    def visit_Call(self, node):
        if _is_reader(node) and node.args:
            self._arg(node, node.args[0])
        self.generic_visit(node)

    def visit_Subscript(self, node):
        v = node.value
        if isinstance(v, ast.Attribute) and v.attr == "environ":
            self._arg(node, node.slice)
        self.generic_visit(node)


def py_reads(root, faults):
    reads, consts = {}, {}
    files = []
    for dirpath, _, names in os.walk(os.path.join(root, PY_DIR)):
        files += [os.path.join(dirpath, n) for n in names if n.endswith(".py")]
    trees = {p: ast.parse(open(p, encoding="utf-8").read(), p) for p in sorted(files)}
    for t in trees.values():  # module constants are shared by name (sglang.ENV in another module)
        for k, v in _constants(t).items():
            consts.setdefault(k, v)
    for p, t in trees.items():
        local = dict(consts)
        local.update(_constants(t))
        _Visitor(os.path.relpath(p, root), local, reads, faults).visit(t)
    return reads


def check(info, root):
    rows = table(info)
    faults = []
    if not rows:
        faults.append("symmem-info --markdown lists no parameter")
    lib = c_reads(root, faults)
    py = py_reads(root, faults)
    for name in sorted(lib - set(rows)):
        faults.append(f"the library reads {name}, which the table lacks")
    for name, where in sorted(py.items()):
        if name not in rows:
            faults.append(f"{where}: the Python package reads {name}, which the parameter table (base/param.h) lacks")
    for name, reader in sorted(rows.items()):
        if reader == "library" and name not in lib:
            faults.append(f"{name} is a library row of the table, but the library never reads it")
        if reader == "python" and name not in py:
            faults.append(f"{name} is a Python row of the table, but the Python package never reads it")
    return rows, lib, py, faults


def self_test():
    md = ("## The library\n| `SYMMEM_A` | int |\n| `SYMMEM_B` | int |\n"
          "## The Python package\n| `SYMMEM_P` | string |\n| `SYMMEM_Q` | string |\n")
    clean = {
        "base/x.c": "int f(void) { return symmem_param_int(SYMMEM_PARAM_A) + symmem_param_int(SYMMEM_PARAM_B) "
                    "+ SYMMEM_PARAM_FIELD_NAME + SYMMEM_PARAM_COUNT; }\n",
        "python/symmem/a.py": 'import os\nENV = "SYMMEM_Q"\n\ndef helper(name):\n    return os.environ.get(name)\n\n'
                              'x = os.environ.get("SYMMEM_P")\ny = helper(ENV)\nz = _settings.value(f"{ENV}")\n',
    }
    faults_of = {
        "an unknown variable read from Python": {"python/symmem/b.py": 'import os\nv = os.environ["SYMMEM_BOGUS"]\n'},
        "a getenv in the library": {"comm/y.c": 'const char *g(void) { return getenv("SYMMEM_A"); }\n'},
        "an unresolved read": {"python/symmem/c.py": 'import os\nv = os.environ.get(make_name())\n'},
        "a library row nobody reads": {"base/x.c": "int f(void) { return symmem_param_int(SYMMEM_PARAM_A); }\n"},
        "a variable the library reads that the table lacks": {"alloc/z.c": "int h(void) { return SYMMEM_PARAM_C; }\n"},
    }
    ok = True
    with tempfile.TemporaryDirectory() as d:
        info = os.path.join(d, "info")
        with open(info, "w") as f:
            f.write(f"#!/bin/sh\ncat <<'MD'\n{md}MD\n")
        os.chmod(info, 0o755)

        def tree(files, name):
            root = os.path.join(d, name)
            for rel, text in files.items():
                os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
                with open(os.path.join(root, rel), "w") as f:
                    f.write(text)
            return root

        _, _, _, faults = check(info, tree(clean, "clean"))
        if faults:
            print("FAIL: the clean tree has faults:", *faults, sep="\n  ")
            ok = False
        for what, files in faults_of.items():
            _, _, _, faults = check(info, tree({**clean, **files}, re.sub(r"\W", "_", what)))
            if not faults:
                print(f"FAIL: {what} passed")
                ok = False
    print("check_settings self-test:", "passed" if ok else "FAILED")
    return 0 if ok else 1


def main(argv):
    if argv[:1] == ["--self-test"]:
        return self_test()
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    rows, lib, py, faults = check(argv[0], argv[1])
    for f in faults:
        print("FAIL:", f)
    if faults:
        print("Add the variable to the table in base/param.h (name, type, default, valid values, reader, meaning), "
              "regenerate docs/configuration.md (cmake --build build --target configuration_doc), or stop reading it.")
        return 1
    print(f"every SYMMEM_* variable read is in the table: {len(rows)} rows, {len(lib)} read by the library, "
          f"{len(py)} by the Python package")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

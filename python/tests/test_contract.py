"""The package is a thin client of the C contract (include/symmem/symmem.h): every number it uses is the
loaded library's answer, the library's list of constants has every enumerator of the header, the size cap a
framework gets and the fused call's tensor rules are the library's, and no module of the package imports
itself back through another. No GPU and no torch needed."""
import ast
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import symmem
from symmem import _lib

ROOT = Path(__file__).resolve().parents[2]
HEADER = ROOT / "include" / "symmem" / "symmem.h"
PACKAGE = Path(symmem.__file__).resolve().parent

# A stand-in for ctypes.CDLL whose symmem_constant answers every real value plus 1000: the package built on it
# must show the shifted values, which it can only do by asking the library for each one.
_FAKE_LIBRARY = textwrap.dedent("""
    import ctypes, json, sys
    real = ctypes.CDLL(sys.argv[1])
    real.symmem_constant.restype = ctypes.c_char_p
    real.symmem_constant.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int64)]

    class Fn:
        def __init__(self, name):
            self.name = name
        def __call__(self, *args):
            if self.name == "symmem_constant":
                v = ctypes.c_int64(0)
                name = real.symmem_constant(args[0], ctypes.byref(v))
                if name is not None:
                    args[1]._obj.value = v.value + 1000
                return name
            if self.name == "symmem_status_name":
                return b"SYMMEM_FROM_THE_FAKE"
            return 0

    class Fake:
        _name = "fake"
        def __init__(self, *a, **k):
            pass
        def __getattr__(self, name):
            fn = Fn(name)
            setattr(self, name, fn)
            return fn

    ctypes.CDLL = Fake
    from symmem import _lib
    print(json.dumps({"constants": _lib.CONSTANTS, "FLOAT16": _lib.FLOAT16, "OP_MIN": _lib.OP_MIN,
                      "BACKEND_HOST": _lib.BACKEND_HOST, "LINK_PCIE": _lib.LINK_PCIE,
                      "RMSNORM_MAX_HIDDEN": _lib.RMSNORM_MAX_HIDDEN, "OK": _lib.OK,
                      "REDUCE_OPS": _lib.REDUCE_OPS, "error": _lib.SymmemError(6, "x").name}))
""")


def test_python_values_are_the_librarys_answers():
    """Run the package over a library that answers every constant 1000 higher: every value moves with it."""
    r = subprocess.run([sys.executable, "-c", _FAKE_LIBRARY, symmem.library_path()], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    real = _lib.CONSTANTS
    assert got["constants"] == {k: v + 1000 for k, v in real.items()}
    for name in ("FLOAT16", "OP_MIN", "BACKEND_HOST", "LINK_PCIE", "RMSNORM_MAX_HIDDEN", "OK"):
        assert got[name] == getattr(_lib, name) + 1000, name
    assert got["REDUCE_OPS"] == {k: v + 1000 for k, v in _lib.REDUCE_OPS.items()}
    assert got["error"] == "SYMMEM_FROM_THE_FAKE"


def _header_enumerators():
    """{name: value} of every enumerator symmem.h writes down, in its X-macro lists and its plain enums."""
    text = HEADER.read_text()
    found = {}
    lists = {"SYMMEM_STATUS_LIST": "SYMMEM_", "SYMMEM_DTYPE_LIST": "SYMMEM_", "SYMMEM_REDOP_LIST": "SYMMEM_OP_",
             "SYMMEM_ALGO_LIST": "SYMMEM_ALGO_", "SYMMEM_FORM_LIST": "SYMMEM_FORM_"}
    for macro, prefix in lists.items():
        body = re.search(rf"#define {macro}\(X\)(.*?)\n\n", text, re.S)
        assert body, macro
        for name, value in re.findall(r"X\((\w+),\s*(\d+)", body.group(1)):
            found[prefix + name] = int(value)
    for name, value in re.findall(r"^\s*(SYMMEM_[A-Z_]+)\s*=\s*(\d+),", text, re.M):
        found[name] = int(value)
    for name in ("SYMMEM_MAX_RANKS", "SYMMEM_UNIQUE_ID_BYTES", "SYMMEM_SIGNAL_BYTES", "SYMMEM_RMSNORM_MAX_HIDDEN"):
        found[name] = int(re.search(rf"#define {name} (\d+)", text).group(1))
    found["SYMMEM_OPTIONS_MAGIC"] = int(re.search(r"#define SYMMEM_OPTIONS_MAGIC (0x[0-9a-fA-F]+)u", text).group(1), 16)
    return found


def test_library_lists_every_constant_of_the_header():
    header = _header_enumerators()
    assert len(header) > 40, header
    missing = {k: v for k, v in header.items() if _lib.CONSTANTS.get(k) != v}
    assert not missing, f"symmem_constant (comm/binding.c) lacks or disagrees on: {missing}"
    assert _lib.CONSTANTS["SYMMEM_VERSION"] == symmem.version()[0] * 10000 + symmem.version()[1] * 100 + \
        symmem.version()[2]


# Names the package takes from the library; a module that binds one to a literal has copied it.
_CONTRACT_NAMES = re.compile(r"^(OK|INVALID_ARGUMENT|BACKEND_\w+|PLACEMENT_\w+|FLOAT32|FLOAT16|BFLOAT16|OP_\w+|ALGO_\w+|FORM_\w+"
                             r"|LINK_\w+|RMSNORM_MAX_HIDDEN|UNIQUE_ID_BYTES|OPTIONS_\w+|STATUS_NAMES|LINK_CAPS)$")


def _literal(node):
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, (ast.Tuple, ast.List, ast.Dict, ast.Set)):
        return any(_literal(n) for n in ast.iter_child_nodes(node) if isinstance(n, ast.expr))
    return False


def test_no_module_writes_down_a_value_of_the_contract():
    copies = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Assign) or not _literal(node.value):
                continue
            for target in node.targets:
                names = [t.id for t in ast.walk(target) if isinstance(t, ast.Name)]
                copies += [f"{path.relative_to(PACKAGE)}:{node.lineno}: {n}" for n in names if _CONTRACT_NAMES.match(n)]
    assert not copies, "values copied from symmem.h instead of asked of the library:\n" + "\n".join(copies)


def test_status_names_are_the_librarys():
    for value, name in ((0, "SYMMEM_OK"), (6, "SYMMEM_TIMEOUT"), (999, "SYMMEM_UNKNOWN_STATUS"),
                        (1 << 32, "SYMMEM_UNKNOWN_STATUS"), ("6", "SYMMEM_UNKNOWN_STATUS")):
        assert _lib.status_name(value) == name
    assert symmem.SymmemError(_lib.constant("SYMMEM_PEER_FAILURE"), "x").name == "SYMMEM_PEER_FAILURE"
    with pytest.raises(KeyError, match="SYMMEM_NO_SUCH"):
        _lib.constant("SYMMEM_NO_SUCH")


# ----------------------------------------------------------------------------------------- the size cap
def test_size_cap_by_link_is_the_librarys():
    assert symmem.link_preferred_max_bytes(symmem.LINK_NVLINK) is None
    assert symmem.link_preferred_max_bytes(symmem.LINK_SELF) is None
    assert symmem.link_preferred_max_bytes(symmem.LINK_PCIE) == 512 << 10
    assert symmem.link_preferred_max_bytes(symmem.LINK_HOST) == 256 << 10
    assert symmem.link_preferred_max_bytes(symmem.LINK_NONE) == 0
    assert symmem.link_preferred_max_bytes(77) == 0
    assert symmem.LINK_NAMES[symmem.LINK_PCIE] == "pcie" and symmem.LINK_NAMES[symmem.LINK_NVLINK] == "nvlink"


def test_host_backend_communicator_has_no_cap_and_no_link():
    comms = symmem.Comm.init_all(2, backend=symmem.BACKEND_HOST)
    try:
        assert [c.link_class for c in comms] == [symmem.LINK_NONE] * 2
        assert [c.preferred_max_bytes for c in comms] == [0, 0]
        assert comms[0].peer_link(1)[0] == symmem.LINK_NONE
        with pytest.raises(symmem.SymmemError, match="out of range"):
            comms[0].peer_link(2)
    finally:
        for c in comms:
            c.destroy()


# ------------------------------------------------------------------------------- the fused call's rules
def _desc(shape, dtype=None, storage=0, offset=0, name="bf16"):
    return _lib.TensorDesc.make(_lib.BFLOAT16 if dtype is None else dtype, name, shape, storage, offset)


def _check(inp, residual, weight, out=None, writes_input=False, eps=1e-6):
    return _lib.rmsnorm_check(inp, residual, weight, out, writes_input, eps)


def test_rmsnorm_rules_accept_and_count_rows():
    assert _check(_desc((2, 3, 64)), _desc((2, 3, 64), storage=1), _desc((64,), storage=2)) == (6, 64)
    # out may be input in place (writes_input); weight may be input when input is only read
    x = _desc((4, 64))
    assert _check(x, _desc((4, 64), storage=1), _desc((64,), offset=0), writes_input=False) == (4, 64)


@pytest.mark.parametrize("args,words", [
    (lambda: (_desc((5, 64)), _desc((4, 64), storage=1), _desc((64,), storage=2)),
     "residual has shape [4, 64] but input has shape [5, 64]: they must match"),
    (lambda: (_desc((5, 64)), _desc((5, 64), storage=1), _desc((63,), storage=2)),
     "weight has shape [63]: it must be [64], input's last dimension"),
    (lambda: (_desc((5, 64)), _desc((5, 64), _lib.FLOAT16, 1, name="torch.float16"), _desc((64,), storage=2)),
     "residual has dtype torch.float16 but input has dtype bf16: they must match"),
    (lambda: (_desc((2, 16385)), _desc((2, 16385), storage=1), _desc((16385,), storage=2)),
     "1 <= hidden <= 16384"),
    (lambda: (_desc(()), _desc((), storage=1), _desc((1,), storage=2)), "input has shape []: it must be [tokens"),
    (lambda: (_desc((5, 64)), _desc((5, 64), offset=128 * 4), _desc((64,), storage=2)),
     "residual overlaps input: pass separate tensors"),
    (lambda: (_desc((5, 64)), _desc((5, 64), storage=1), _desc((64,), storage=1, offset=64)),
     "weight overlaps a tensor the op writes"),
])
def test_rmsnorm_rules_reject_in_words(args, words):
    with pytest.raises(ValueError) as e:
        _check(*args())
    assert words in str(e.value), str(e.value)


def test_rmsnorm_rules_out_and_eps():
    x, r, w = _desc((5, 64)), _desc((5, 64), storage=1), _desc((64,), storage=2)
    with pytest.raises(ValueError, match="out overlaps residual"):
        _check(x, r, w, out=_desc((5, 64), storage=1))
    with pytest.raises(ValueError, match="use all_reduce_add_rmsnorm_"):
        _check(x, r, w, out=_desc((5, 64)))
    with pytest.raises(ValueError, match="weight overlaps"):
        _check(x, r, _desc((64,)), writes_input=True)
    for eps, words in ((-1e-6, "eps -1e-06 must be finite"), (float("nan"), "eps nan must be finite"),
                       (1e39, "finite (as a float32)")):
        with pytest.raises(ValueError) as e:
            _check(x, r, w, eps=eps)
        assert words in str(e.value), str(e.value)


# ----------------------------------------------------------------------------------------- import cycles
def _imports(path, module):
    """(base, name) of every import in `module` (at `path`), at any depth of its code: `from base import
    name`, or (name, None) for `import name`."""
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from ((a.name, None) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[:len(parts) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            yield from ((base, a.name) for a in node.names)


def _graph(root, name):
    """{module: the package's modules it imports}. A module's own packages are left out: Python has them
    initialised before the module runs, so importing them closes no cycle."""
    modules = {}
    for path in root.rglob("*.py"):
        parts = [name, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    graph = {}
    for m, path in modules.items():
        edges = set()
        for base, item in _imports(path, m):
            target = f"{base}.{item}" if item and f"{base}.{item}" in modules else base
            if target in modules and target != m and not m.startswith(target + "."):
                edges.add(target)
        graph[m] = sorted(edges)
    return graph


def _cycle(graph):
    """One import cycle as a list of modules, or None."""
    state = {}

    def visit(m, stack):
        state[m] = "open"
        for n in graph[m]:
            if state.get(n) == "open":
                return stack[stack.index(n):] + [n]
            if n not in state:
                found = visit(n, stack + [n])
                if found:
                    return found
        state[m] = "done"
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m, [m])
            if found:
                return found
    return None


def test_no_import_cycle_in_the_package():
    cycle = _cycle(_graph(PACKAGE, "symmem"))
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_cycle_finder_finds_a_cycle(tmp_path):
    pkg = tmp_path / "p"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from .sub import c\n")
    (pkg / "sub" / "c.py").write_text("from .. import a\n")
    assert _cycle(_graph(pkg, "p")) == ["p.a", "p.b", "p.sub.c", "p.a"]
    (pkg / "sub" / "c.py").write_text("import os\n")
    assert _cycle(_graph(pkg, "p")) is None

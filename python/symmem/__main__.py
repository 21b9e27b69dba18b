"""python -m symmem info

info    every SYMMEM_* parameter of the loaded libsymmem: its value in effect, meaning, type, default and where
        the value came from, from the library's one table (symmem_param_count / symmem_param_get); the same
        listing as the symmem-info tool prints (a test compares the two). docs/configuration.md is the table
        as markdown (symmem-info --markdown).
"""
import ctypes
import sys

from ._lib import lib, version

WRAP_COLUMNS = 100  # as symmem-info (tools/symmem_info.c): meanings wrapped to this width after the indent
FIELD_NAME, FIELD_TYPE, FIELD_DEFAULT, FIELD_VALUE, FIELD_SOURCE, FIELD_DOC = range(6)  # symmem_param_field_t

_c = lib()
_c.symmem_param_count.restype = ctypes.c_int
_c.symmem_param_count.argtypes = []
_c.symmem_param_get.restype = ctypes.c_char_p
_c.symmem_param_get.argtypes = [ctypes.c_int, ctypes.c_int]


def params():
    """Every parameter as a dict: name, type, default, value, source, doc."""
    keys = ("name", "type", "default", "value", "source", "doc")
    out = []
    for i in range(_c.symmem_param_count()):
        out.append({k: (_c.symmem_param_get(i, f) or b"").decode() for f, k in enumerate(keys)})
    return out


def wrapped(indent, text):
    """`text` after `indent`, wrapped at spaces so that no line passes WRAP_COLUMNS (a longer word gets a line
    of its own): the same lines as symmem-info's print_wrapped."""
    room, lines, line = WRAP_COLUMNS - len(indent), [], ""
    for word in (w for w in text.split(" ") if w):
        if line and len(line) + 1 + len(word) > room:
            lines.append(line)
            line = ""
        line = f"{line} {word}" if line else word
    lines.append(line)
    return "\n".join(indent + l if l else "" for l in lines)


def info():
    ps = params()
    major, minor, patch = version()
    out = [wrapped("", f"symmem {major}.{minor}.{patch}: {len(ps)} parameters. Each is read from the environment "
                       "once, at its first use; an option passed through the API beats the environment, which beats "
                       "the default.")]
    for p in ps:
        out += ["", f"{p['name']}={p['value']}", wrapped("    ", p["doc"]),
                f"    ({p['type']}; default \"{p['default']}\"; value from: {p['source']})"]
    return "\n".join(out) + "\n"


def main(argv):
    if argv == ["info"]:
        sys.stdout.write(info())
        return 0
    wanted = argv in (["-h"], ["--help"])
    (sys.stdout if wanted else sys.stderr).write(__doc__)
    return 0 if wanted else 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

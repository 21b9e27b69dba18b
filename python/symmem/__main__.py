"""usage: python -m symmem {info | version | --help}

info     every SYMMEM_* parameter of symmem (the library's and the Python package's): its value, meaning,
         type, valid values, default and where the value came from, a refused value marked with the reason,
         from the library's one table (symmem_param_count / symmem_param_get / symmem_param_check); the same
         listing as the symmem-info tool prints (a test compares the two). docs/configuration.md is the table
         as markdown (symmem-info --markdown).
version  this package's version and the libsymmem it loaded
See also: python -m symmem.integrations status (what is installed and in force: torch, the op library,
SGLang, vLLM, the GPUs).
"""
import sys

from . import _settings
from ._lib import version

WRAP_COLUMNS = 100  # as symmem-info (tools/symmem_info.c): meanings wrapped to this width after the indent


def params():
    """Every parameter as a dict: name, type, default, value, source, doc, valid, reader."""
    return _settings.params()


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
    py = sum(p["reader"] == "python" for p in ps)
    out = [wrapped("", f"symmem {major}.{minor}.{patch}: {len(ps)} parameters, {len(ps) - py} read by the library "
                       f"and {py} by the Python package. The library reads each once, at its first use; an option "
                       "passed through the API beats the environment, which beats the default. An empty value is "
                       "the default; a value outside a parameter's valid values is refused with a warning, and the "
                       "default is used.")]
    for p in ps:
        dflt = f'"{p["default"]}"' if p["default"] else "empty"
        out += ["", f"{p['name']}={p['value']}"]
        why = _settings.check(p["name"], p["value"])
        if why is not None:
            out.append(wrapped("    ", f"REFUSED: {p['value']} is {why}; the default {dflt} is used"))
        reader = " read by the Python package;" if p["reader"] == "python" else ""
        out += [wrapped("    ", p["doc"]),
                wrapped("    ", f"({p['type']}: {p['valid']}; default {dflt};{reader} value from: {p['source']})")]
    return "\n".join(out) + "\n"


def main(argv):
    if argv == ["info"]:
        sys.stdout.write(info())
        return 0
    if argv in (["version"], ["--version"]):
        from . import __version__, library_path

        print(f"symmem {__version__} ({library_path()})")
        return 0
    if argv in (["-h"], ["--help"]):
        sys.stdout.write(__doc__)
        return 0
    what = f"unknown command {argv[0]!r}" if argv and argv[0] not in ("info", "version") else \
        "no command given" if not argv else f"{argv[0]} takes no arguments (got {' '.join(argv[1:])})"
    sys.stderr.write(f"python -m symmem: {what}\n{__doc__}")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

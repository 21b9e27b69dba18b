"""The SYMMEM_* variables from the library's one table (base/param.h): what `python -m symmem info` and
symmem-info print, and how the Python package reads its own variables.

The rule is the library's, for every variable: an empty value is the default; a value outside the variable's
valid values is refused with a warning that names the variable, the value, the valid values and the default,
which is used instead (symmem_param_check says why, in the same words as the library's own warnings). The
Python package reads its variables (SYMMEM_TORCH_*, SYMMEM_SGLANG_*, SYMMEM_VLLM_*) here, when it uses them:
not cached, so a change takes effect at the next read. SYMMEM_LIBRARY is the one exception, read before any
library is loaded (it says which one to load).
"""
import ctypes
import logging
import os

from ._lib import constant, lib

log = logging.getLogger("symmem")

_c = lib()
_c.symmem_param_count.restype = ctypes.c_int
_c.symmem_param_count.argtypes = []
_c.symmem_param_get.restype = ctypes.c_char_p
_c.symmem_param_get.argtypes = [ctypes.c_int, ctypes.c_int]
_c.symmem_param_check.restype = ctypes.c_int
_c.symmem_param_check.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]

# symmem_param_field_t, by the library's own numbers
FIELDS = ("name", "type", "default", "value", "source", "doc", "valid", "reader")
_FIELD = {f: constant(f"SYMMEM_PARAM_FIELD_{f.upper()}") for f in FIELDS}


def _get(index, field):
    return (_c.symmem_param_get(index, _FIELD[field]) or b"").decode()


_INDEX = {_get(i, "name"): i for i in range(_c.symmem_param_count())}


def params():
    """Every parameter of the table as a dict of FIELDS (value and source as the library read them at its
    first use of a parameter)."""
    return [{f: _get(i, f) for f in FIELDS} for i in range(_c.symmem_param_count())]


def known(name):
    return name in _INDEX


def default(name):
    return _get(_INDEX[name], "default")


def check(name, value):
    """None when `name` takes `value` (empty included), else why not ("not one of fallback, replace, off")."""
    why = ctypes.create_string_buffer(256)
    rc = _c.symmem_param_check(_INDEX[name], value.encode(), why, len(why))
    if rc < 0:
        raise ValueError(f"{name}: not a parameter of the loaded libsymmem")
    return None if rc == 0 else why.value.decode()


def value(name, logger=None):
    """The value in effect of the table's variable `name`: the environment's when it is set, not empty and
    valid; else the default, with a warning on `logger` when a value was refused."""
    given = os.environ.get(name, "")
    if given == "":
        return default(name)
    why = check(name, given)
    if why is None:
        return given
    dflt = default(name)
    (logger or log).warning("%s=%s is %s; using the default %s", name, given, why, dflt if dflt else "(empty)")
    return dflt


def flag(name, logger=None):
    """A flag variable's value in effect as a bool (1, true, yes, on)."""
    return value(name, logger).lower() in ("1", "true", "yes", "on")

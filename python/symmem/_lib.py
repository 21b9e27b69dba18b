"""ctypes binding of libsymmem's C API (include/symmem/symmem.h).

The library is found through SYMMEM_LIBRARY (a path), then next to this package (where `pip install .` puts
it), then the build folders of a source checkout (python/ on PYTHONPATH), then the dynamic loader's search
path. Every number of the C API (statuses, dtypes, ops, links, limits) is the library's own, read at
import through symmem_constant: none is written down here. Only the standard library is used; the PyTorch
integration (ops, communicator, symmetric tensors) lives in symmem.torch.
"""
import ctypes
import operator
import os
from pathlib import Path


def _candidates():
    env = os.environ.get("SYMMEM_LIBRARY")
    if env:
        yield env
    here = Path(__file__).resolve().parent
    yield str(here / "libsymmem.so.0")
    yield str(here / "libsymmem.so")
    root = here.parent.parent
    for build in sorted(root.glob("build*")):
        yield str(build / "libsymmem.so")
    yield "libsymmem.so.0"
    yield "libsymmem.so"


# What provides a system library libsymmem needs, for the message when it is missing (the binary wheel
# carries libnuma itself; a source build links the system's).
_SYSTEM_PACKAGES = {"libnuma.so.1": "libnuma1 (Debian/Ubuntu) or numactl-libs (RHEL/Fedora)"}


def _load():
    """The library, or OSError whose first line is the cause: the error of the first library that exists
    but fails to load (a missing dependency such as libnuma.so.1), with what to install; or that none
    exists."""
    failures, missing = [], []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            continue
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            (failures if os.sep in path else missing).append((path, str(e)))
    if failures:
        path, cause = failures[0]
        hint = next((f"install {pkg}" for lib, pkg in _SYSTEM_PACKAGES.items() if lib in cause),
                    "install the library it names, or reinstall symmem (pip install --force-reinstall symmem)")
        tried = "; ".join(f"{p}: {e}" for p, e in failures[1:] + missing)
        raise OSError(f"{cause}: needed by {path}: {hint}" + (f". Also tried: {tried}" if tried else ""))
    raise OSError("libsymmem not found: reinstall symmem (the wheel carries it), or set SYMMEM_LIBRARY to a "
                  "libsymmem.so; in a source tree, build it first (./scripts/run.sh). Tried: "
                  + "; ".join(f"{p}: {e}" for p, e in missing))


_c = _load()
_c.symmem_constant.restype = ctypes.c_char_p
_c.symmem_constant.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int64)]
_c.symmem_status_name.restype = ctypes.c_char_p
_c.symmem_status_name.argtypes = [ctypes.c_int]


def _constants():
    """Every public constant of symmem.h, by name, as the loaded library was built with it."""
    out, value = {}, ctypes.c_int64(0)
    for index in range(4096):
        name = _c.symmem_constant(index, ctypes.byref(value))
        if name is None:
            return out
        out[name.decode()] = value.value
    raise RuntimeError("symmem_constant lists more than 4096 constants: the library is not the one this binding "
                       "was written for")


CONSTANTS = _constants()  # {"SYMMEM_BFLOAT16": 2, ...}: the one source of every value below


def constant(name):
    """The value of symmem.h's constant `name` ("SYMMEM_OP_MAX") in the loaded library; KeyError naming the
    library when it lacks the name (a libsymmem older than this package)."""
    try:
        return CONSTANTS[name]
    except KeyError:
        raise KeyError(f"{name} is not defined by the loaded libsymmem ({_c._name}): it is older than this "
                       f"package; reinstall symmem") from None


def status_name(status):
    """"SYMMEM_TIMEOUT" for that status, "SYMMEM_UNKNOWN_STATUS" for a value outside the enum."""
    try:
        value = c_arg("status", status, "int")
    except (TypeError, OverflowError):  # not a C int: outside the enum too, which the library names so
        value = -1
    return _c.symmem_status_name(value).decode()


OK = constant("SYMMEM_OK")
INVALID_ARGUMENT = constant("SYMMEM_INVALID_ARGUMENT")
BACKEND_DEFAULT, BACKEND_CUDA, BACKEND_HOST = (constant(f"SYMMEM_BACKEND_{n}") for n in ("DEFAULT", "CUDA", "HOST"))
PLACEMENT_DEFAULT, PLACEMENT_AUTO, PLACEMENT_DEVICE, PLACEMENT_HOST_NUMA = (
    constant(f"SYMMEM_PLACEMENT_{n}") for n in ("DEFAULT", "AUTO", "DEVICE", "HOST_NUMA"))
FLOAT32, FLOAT16, BFLOAT16 = (constant(f"SYMMEM_{n}") for n in ("FLOAT32", "FLOAT16", "BFLOAT16"))
OP_SUM, OP_MAX, OP_MIN = (constant(f"SYMMEM_OP_{n}") for n in ("SUM", "MAX", "MIN"))
ALGO_AUTO = constant("SYMMEM_ALGO_AUTO")
FORM_ORDINARY, FORM_SYMMETRIC_INPUT, FORM_SYMMETRIC_OUTPUT, FORM_SYMMETRIC = (
    constant(f"SYMMEM_FORM_{n}") for n in ("ORDINARY", "SYMMETRIC_INPUT", "SYMMETRIC_OUTPUT", "SYMMETRIC"))
LINK_SELF, LINK_NVLINK, LINK_PCIE, LINK_HOST, LINK_NONE = (
    constant(f"SYMMEM_LINK_{n}") for n in ("SELF", "NVLINK", "PCIE", "HOST", "NONE"))
RMSNORM_MAX_HIDDEN = constant("SYMMEM_RMSNORM_MAX_HIDDEN")
UNIQUE_ID_BYTES = constant("SYMMEM_UNIQUE_ID_BYTES")
OPTIONS_MAGIC = constant("SYMMEM_OPTIONS_MAGIC")
OPTIONS_VERSION = constant("SYMMEM_OPTIONS_VERSION")


def _named(prefix):
    """{value: lower-case name} of the constants SYMMEM_<prefix>*: {2: "pcie"} for "LINK_"."""
    return {v: k[len("SYMMEM_") + len(prefix):].lower() for k, v in CONSTANTS.items()
            if k.startswith("SYMMEM_" + prefix)}


REDUCE_OPS = {name: value for value, name in _named("OP_").items()}  # {"sum": 0, "max": 1, "min": 2}
LINK_NAMES = _named("LINK_")                                           # {1: "nvlink", 2: "pcie", ...}


class SymmemError(RuntimeError):
    """A failed symmem call: .status is the numeric status, .name its SYMMEM_* name (the library's)."""

    def __init__(self, status, detail):
        self.status = status
        self.name = status_name(status)
        super().__init__(f"{self.name}: {detail}")


_C_BITS = {"int": 8 * ctypes.sizeof(ctypes.c_int), "size_t": 8 * ctypes.sizeof(ctypes.c_size_t),
           "pointer": 8 * ctypes.sizeof(ctypes.c_void_p)}


def c_arg(name, value, ctype):
    """`value` as a Python int that fits C's `ctype` ("int", "size_t" or "pointer"), checked before it reaches
    ctypes, which would keep only its low bits without a word (alloc(2**64 + 4096) allocated 4096 bytes,
    peer_ptr(2**32) gave rank 0's pointer). A pointer may be None (NULL). TypeError for what is not an
    integer, OverflowError for one out of the type's range; both name the argument."""
    if ctype == "pointer" and value is None:
        return None
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, not {type(value).__name__}") from None
    bits = _C_BITS[ctype]
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if ctype == "int" else (0, (1 << bits) - 1)
    if not lo <= v <= hi:
        raise OverflowError(f"{name}={v} is out of range for a C {ctype} [{lo}, {hi}]")
    return v


class Options(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_size_t), ("magic", ctypes.c_uint32), ("version", ctypes.c_uint32),
        ("device", ctypes.c_int), ("timeout_ms", ctypes.c_int), ("backend", ctypes.c_int),
        ("placement", ctypes.c_int), ("numa_node", ctypes.c_int),
    ]

    @classmethod
    def make(cls, device=-1, timeout_ms=0, backend=BACKEND_DEFAULT, placement=PLACEMENT_DEFAULT, numa_node=-1):
        return cls(ctypes.sizeof(cls), OPTIONS_MAGIC, OPTIONS_VERSION, c_arg("device", device, "int"),
                   c_arg("timeout_ms", timeout_ms, "int"), c_arg("backend", backend, "int"),
                   c_arg("placement", placement, "int"), c_arg("numa_node", numa_node, "int"))


class UniqueId(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_ubyte * UNIQUE_ID_BYTES)]


ALLGATHER_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
BARRIER_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)


class Bootstrap(ctypes.Structure):
    _fields_ = [("allgather", ALLGATHER_FN), ("barrier", BARRIER_FN), ("ctx", ctypes.c_void_p)]


class TensorDesc(ctypes.Structure):
    """symmem_tensor_desc_t: a tensor's dtype, shape and place in its storage, for the library's rules."""
    _fields_ = [("dtype", ctypes.c_int), ("dtype_name", ctypes.c_char_p), ("ndim", ctypes.c_int),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("storage", ctypes.c_uint64), ("offset", ctypes.c_uint64)]

    @classmethod
    def make(cls, dtype, dtype_name, shape, storage, offset):
        dims = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        d = cls(dtype, dtype_name.encode(), len(shape), dims, storage, offset)
        d._keep = dims  # the shape array lives as long as the struct that points at it
        return d


_c.symmem_last_error.restype = ctypes.c_char_p
_c.symmem_buffer_ptr.restype = ctypes.c_void_p
_c.symmem_buffer_ptr.argtypes = [ctypes.c_void_p]
_c.symmem_buffer_peer_ptr.restype = ctypes.c_void_p
_c.symmem_buffer_peer_ptr.argtypes = [ctypes.c_void_p, ctypes.c_int]
_c.symmem_buffer_signal_ptr.restype = ctypes.c_void_p
_c.symmem_buffer_signal_ptr.argtypes = [ctypes.c_void_p, ctypes.c_int]
_c.symmem_buffer_size.restype = ctypes.c_size_t
_c.symmem_buffer_size.argtypes = [ctypes.c_void_p]
_c.symmem_comm_rank.argtypes = [ctypes.c_void_p]
_c.symmem_comm_size.argtypes = [ctypes.c_void_p]
_c.symmem_comm_device.argtypes = [ctypes.c_void_p]
_c.symmem_comm_destroy.argtypes = [ctypes.c_void_p]
_c.symmem_free.argtypes = [ctypes.c_void_p]
_c.symmem_alloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)]
_c.symmem_comm_init.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(UniqueId), ctypes.POINTER(Options),
                                ctypes.POINTER(ctypes.c_void_p)]
_c.symmem_comm_init_bootstrap.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(Bootstrap),
                                          ctypes.POINTER(Options), ctypes.POINTER(ctypes.c_void_p)]
_c.symmem_all_reduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                 ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
_c.symmem_comm_get_async_error.argtypes = [ctypes.c_void_p]
_c.symmem_tune_sizes.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), ctypes.c_int, ctypes.c_uint]
_c.symmem_comm_max_message_bytes.argtypes = [ctypes.c_void_p]
_c.symmem_comm_max_message_bytes.restype = ctypes.c_size_t
_c.symmem_comm_graph_mappings.argtypes = [ctypes.c_void_p]
_c.symmem_comm_graph_mappings.restype = ctypes.c_size_t
_c.symmem_comm_preferred_max_bytes.argtypes = [ctypes.c_void_p]
_c.symmem_comm_preferred_max_bytes.restype = ctypes.c_size_t
_c.symmem_link_preferred_max_bytes.argtypes = [ctypes.c_int]
_c.symmem_link_preferred_max_bytes.restype = ctypes.c_size_t
_c.symmem_comm_link_class.argtypes = [ctypes.c_void_p]
_c.symmem_comm_peer_link.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_int),
                                     ctypes.POINTER(ctypes.c_int)]
_c.symmem_reduce_scatter.argtypes = _c.symmem_all_reduce.argtypes
_c.symmem_all_gather.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                 ctypes.c_int, ctypes.c_void_p]
_c.symmem_barrier.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
_c.symmem_all_reduce_add_rmsnorm.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                             ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_float,
                                             ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
_c.symmem_comm_init_all.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(Options),
                                    ctypes.POINTER(ctypes.c_void_p)]
_c.symmem_comm_backend.argtypes = [ctypes.c_void_p]
_c.symmem_buffer_lookup.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
_c.symmem_buffer_lookup.restype = ctypes.c_void_p
_c.symmem_buffer_mapped_size.restype = ctypes.c_size_t
_c.symmem_buffer_mapped_size.argtypes = [ctypes.c_void_p]
_c.symmem_nccl_register.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
_c.symmem_nccl_deregister.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
_c.symmem_nccl_window_register.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                                           ctypes.POINTER(ctypes.c_void_p)]
_c.symmem_nccl_window_deregister.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
_c.symmem_algo_name.restype = ctypes.c_char_p
_c.symmem_algo_name.argtypes = [ctypes.c_int]
_c.symmem_algo_from_name.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int)]
_c.symmem_all_reduce_add_rmsnorm_check.argtypes = [ctypes.POINTER(TensorDesc)] * 4 + [
    ctypes.c_int, ctypes.c_double, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t), ctypes.c_char_p,
    ctypes.c_size_t]


def rmsnorm_check(inp, residual, weight, out, writes_input, eps):
    """symmem_all_reduce_add_rmsnorm_check over TensorDescs (out may be None): (tokens, hidden), or ValueError
    with the library's words for the rule broken."""
    tokens, hidden = ctypes.c_size_t(0), ctypes.c_size_t(0)
    msg = ctypes.create_string_buffer(512)
    status = _c.symmem_all_reduce_add_rmsnorm_check(inp, residual, weight, out, int(bool(writes_input)), float(eps),
                                                     ctypes.byref(tokens), ctypes.byref(hidden), msg, len(msg))
    if status != OK:
        raise ValueError(msg.value.decode(errors="replace"))
    return tokens.value, hidden.value


def check(status):
    if status != OK:
        raise SymmemError(status, _c.symmem_last_error().decode(errors="replace"))


def lib():
    return _c


def library_path():
    """The file of the libsymmem this process loaded."""
    return _c._name


def algo(name_or_value):
    """An algorithm as the C API numbers it, from its name ("twoshot_lamport", as SYMMEM_ALGO takes it) or
    its number; SymmemError (SYMMEM_INVALID_ARGUMENT) for an unknown one."""
    if isinstance(name_or_value, str):
        value = ctypes.c_int(0)
        check(_c.symmem_algo_from_name(name_or_value.encode(), ctypes.byref(value)))
        return value.value
    try:
        value = operator.index(name_or_value)
    except TypeError:
        raise TypeError(f"algo must be a name or an integer, not {type(name_or_value).__name__}") from None
    # checked before ctypes, which would keep only the low 32 bits (2**32 + 3 was algorithm 3)
    lo, hi = -(1 << (_C_BITS["int"] - 1)), (1 << (_C_BITS["int"] - 1)) - 1
    if not lo <= value <= hi or _c.symmem_algo_name(value).decode() == "invalid_algo":
        raise SymmemError(INVALID_ARGUMENT, f"algorithm {value} is not known to this libsymmem")
    return value


def algo_names():
    """Every algorithm's name, by number (index 0 is "auto")."""
    names = []
    while True:
        n = _c.symmem_algo_name(len(names)).decode()
        if n == "invalid_algo":
            return names
        names.append(n)


def version():
    v = _c.symmem_version()
    return (v // 10000, v // 100 % 100, v % 100)

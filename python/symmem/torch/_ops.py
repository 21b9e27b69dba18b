"""torch.ops.symmem.*: loading the op library, the group registry, the fake kernels.

The ops come from libsymmem_torch.so (python/csrc/symmem_torch.cpp, torch's stable ABI), found through
SYMMEM_TORCH_LIBRARY, then next to the package (where `pip install --no-build-isolation .` puts it), then a
source tree's build*/python/csrc/. Where it is missing (a wheel built without torch) the same schemas
(schemas.def, the one list both read) are defined here and run through the ctypes binding: correct and
capturable, but a few microseconds slower per eager call; `symmem.torch.op_library()` says which one is in use.

Every op names its group by string (Dynamo cannot pass Python objects into a graph): a SymmemCommunicator
registers its communicator under its group_name when it is created.
"""
import ast
import ctypes
import logging
import os
from pathlib import Path

import torch

import symmem
from symmem import _lib

log = logging.getLogger("symmem")


def _read_schemas():
    """name -> schema, from schemas.def: the one list, which the op library is compiled from too (a test checks
    the loaded library registered these). One C string literal a line; lines starting with // are comments."""
    text = (Path(__file__).resolve().parent / "schemas.def").read_text()
    schemas = [ast.literal_eval(line.strip().rstrip(",")) for line in text.splitlines()
               if line.strip() and not line.strip().startswith("//")]
    return {schema.split("(", 1)[0]: schema for schema in schemas}


SCHEMAS = _read_schemas()

DTYPES = {torch.float32: symmem.FLOAT32, torch.float16: symmem.FLOAT16, torch.bfloat16: symmem.BFLOAT16}
REDUCE_OPS = _lib.REDUCE_OPS  # the library's names of its reduction ops
# The all-reduces' wire formats and the algorithm each runs: "none" the exact one the library chooses, "int8"
# the compressed wire (lossy; docs/collectives.md, "Compressed wire"). symmem_torch.cpp's parse_wire says the same.
WIRES = {"none": "auto", "int8": "wire_int8"}


def _native(name):
    """Where a native part of the package named `name` is: next to the package (installed), else, in a source
    checkout with python/ on PYTHONPATH, the python/csrc/ of the build folder whose libsymmem the ctypes binding
    loaded, else of any build folder."""
    here = Path(__file__).resolve().parent.parent
    yield here / name
    yield Path(_lib.library_path()).resolve().parent / "python" / "csrc" / name
    for build in sorted(here.parent.parent.glob("build*")):
        yield build / "python" / "csrc" / name


def _candidates():
    env = os.environ.get("SYMMEM_TORCH_LIBRARY")
    if env:
        yield Path(env)
    yield from _native("libsymmem_torch.so")


def _load():
    from symmem import _settings  # library or python; another value warns and gives the default

    if _settings.value("SYMMEM_TORCH_OPS", log).lower() == "python":
        return None, None
    for path in _candidates():
        if not path.is_file():
            continue
        try:
            handle = ctypes.CDLL(str(path))
            torch.ops.load_library(str(path))
        except (OSError, RuntimeError) as e:
            log.warning("symmem: could not load the op library %s (%s); using the ctypes ops", path, e)
            return None, None
        handle.symmem_torch_register_group.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
        handle.symmem_torch_unregister_group.argtypes = [ctypes.c_char_p]
        handle.symmem_torch_pool_bind.argtypes = [ctypes.c_void_p]
        handle.symmem_torch_pool_unbind.argtypes = [ctypes.c_int]
        return str(path), handle
    return None, None


_path, _handle = _load()

if _path is None:
    # No op library: the same schemas, their kernels in Python over the ctypes binding.
    _lib_def = torch.library.Library("symmem", "DEF")
    for _schema in SCHEMAS.values():
        _lib_def.define(_schema)


def op_library():
    """The path of the loaded op library, or None when the ops run through ctypes."""
    return _path


# ---------------------------------------------------------------------------------------------------------
# The communicator's compiled entry (python/csrc/fast.c, symmem._fast): an eager all-reduce without the
# dispatcher's boxed call. Found where the op library is (_native); used only when it calls the libsymmem
# the ctypes binding loaded, so that a communicator handle never reaches another copy of the library.
# ---------------------------------------------------------------------------------------------------------
def _load_module(name, path):
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.ExtensionFileLoader(name, str(path))
    spec = importlib.util.spec_from_file_location(name, str(path), loader=loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def _load_entry(name, filename, mismatch, instead):
    """(path, module) of the first `filename` in the native places that loads as `name`, calls the libsymmem the
    ctypes binding loaded and for which mismatch(module) gives nothing, else (None, None); `instead` says in the
    log what communicators do then."""
    want = ctypes.cast(_lib.lib().symmem_all_reduce, ctypes.c_void_p).value
    for path in _native(filename):
        if not path.is_file():
            continue
        try:
            mod = _load_module(name, path)
        except (ImportError, OSError) as e:
            log.info("symmem: could not load %s (%s); %s", path, e, instead)
            continue
        why = ("calls another libsymmem than " + str(_lib.library_path()) if mod.library_entry() != want else
               mismatch(mod))
        if why:
            log.info("symmem: %s %s; %s", path, why, instead)
            continue
        return str(path), mod
    return None, None


_fast_path, _fast_module = _load_entry("symmem._fast", "_fast.abi3.so", lambda mod: None, "communicators call the op")


def _load_fast_torch():
    """symmem._fast_torch (python/csrc/fast_torch.cpp), the checked entry in torch's C++ API, where it was built for
    this Python (its file's suffix), this torch (built_against: the version and the commit) and calls this
    libsymmem; else None and communicators take symmem._fast. Loading a copy built for another torch calls none of
    torch's code; only a copy that matches is ever called."""
    import importlib.machinery

    if _fast_module is None:
        return None, None
    here = (torch.__version__, getattr(torch.version, "git_version", None) or "")
    return _load_entry(
        "symmem._fast_torch", "_fast_torch" + importlib.machinery.EXTENSION_SUFFIXES[0],
        lambda mod: None if tuple(mod.built_against) == here else
        f"was built for torch {tuple(mod.built_against)}, not this torch {here}", "communicators take symmem._fast")


_fast_torch_path, _fast_torch_module = _load_fast_torch()


def compiled_entry():
    """(path, module) of the compiled entry symmem._fast when it loaded and calls the loaded libsymmem, else
    (None, None); a SymmemCommunicator uses it for eager all-reduces unless SYMMEM_TORCH_FAST_CALL=off."""
    return _fast_path, _fast_module


def torch_entry():
    """(path, module) of symmem._fast_torch when it loaded for this torch, this Python and this libsymmem, else
    (None, None); where it did, a SymmemCommunicator's eager all-reduces take it instead of symmem._fast."""
    return _fast_torch_path, _fast_torch_module


# ---------------------------------------------------------------------------------------------------------
# Group registry (the C++ one when the op library is loaded, else this module's).
# ---------------------------------------------------------------------------------------------------------
class _Group:
    __slots__ = ("comm", "rank", "size", "device", "max_bytes")

    def __init__(self, comm):
        self.comm = comm
        self.rank, self.size, self.device = comm.rank, comm.size, comm.device
        self.max_bytes = comm.max_message_bytes


_py_groups = {}  # name -> _Group, for the ctypes kernels
_sizes = {}      # name -> world size, for the fakes (either way)


def register_group(name, comm):
    """Registers symmem.Comm `comm` under `name`; False if the name is taken."""
    if name in _sizes:
        return False
    if _handle is not None:
        if _handle.symmem_torch_register_group(name.encode(), comm.handle) != 0:
            return False
    else:
        _py_groups[name] = _Group(comm)
    _sizes[name] = comm.size
    return True


def unregister_group(name):
    if _sizes.pop(name, None) is None:
        return
    if _handle is not None:
        _handle.symmem_torch_unregister_group(name.encode())
    else:
        _py_groups.pop(name, None)


def pool_bind(comm):
    """A pluggable-allocator slot bound to `comm` (see symmem_torch.cpp); raises when none is free."""
    if _handle is None:
        raise RuntimeError("symmem.torch.get_mem_pool needs the op library (libsymmem_torch.so), which this "
                           "installation lacks: reinstall with `pip install --no-build-isolation .` where torch is")
    slot = _handle.symmem_torch_pool_bind(comm.handle)
    if slot < 0:
        raise RuntimeError(f"symmem: all {_handle.symmem_torch_pool_slots()} memory-pool slots are in use")
    return slot


def pool_unbind(slot):
    _handle.symmem_torch_pool_unbind(slot)


# ---------------------------------------------------------------------------------------------------------
# Checks shared by the fakes and the ctypes kernels; the op library's C++ checks say the same things.
# ---------------------------------------------------------------------------------------------------------
def _where(op, group_name):
    g = _py_groups.get(group_name)
    rank = f", rank {g.rank} of {g.size}" if g is not None else ""
    return f"symmem::{op} (group '{group_name}'{rank})"


def _dtype_name(dtype):
    """A dtype as the op library (symmem_torch.cpp) and the C library name it in messages: "float32", not
    "torch.float32", so a message does not depend on which op set raised it."""
    return str(dtype).removeprefix("torch.")


def _check_tensor(op, group_name, which, t):
    if t.device.type != "cuda":
        raise RuntimeError(f"{_where(op, group_name)}: {which} is not a CUDA tensor (device {t.device})")
    if not t.is_contiguous():
        raise RuntimeError(f"{_where(op, group_name)}: {which} is not contiguous: call .contiguous() first")
    if t.dtype not in DTYPES:
        raise RuntimeError(f"{_where(op, group_name)}: {which} has dtype {_dtype_name(t.dtype)}: "
                           "use bfloat16, float16 or float32")


def _check_reduce_op(op, group_name, reduce_op):
    if reduce_op not in REDUCE_OPS:
        names = [f'"{n}"' for n in REDUCE_OPS]
        known = ", ".join(names[:-1]) + " or " + names[-1]
        raise RuntimeError(f"{_where(op, group_name)}: reduce_op '{reduce_op}' is not known: use {known}")


def _check_wire(op, group_name, wire):
    if wire not in WIRES:
        raise RuntimeError(f"{_where(op, group_name)}: wire '{wire}' is not known: use \"none\" (exact) or \"int8\" "
                           "(compressed, lossy)")


def _check_out(op, group_name, inp, out, expect_shape, rule):
    _check_tensor(op, group_name, "out", out)
    if out.dtype != inp.dtype:
        raise RuntimeError(f"{_where(op, group_name)}: out has dtype {_dtype_name(out.dtype)} "
                           f"but input has dtype {_dtype_name(inp.dtype)}")
    if tuple(out.shape) != tuple(expect_shape):
        raise RuntimeError(f"{_where(op, group_name)}: out has shape {list(out.shape)} for an input of shape "
                           f"{list(inp.shape)}: {rule}")


def _scaled(op, group_name, inp, num, den):
    if inp.dim() < 1 or (inp.shape[0] * num) % den:
        raise RuntimeError(f"{_where(op, group_name)}: input of shape {list(inp.shape)} cannot be split in {den} "
                           f"along dim 0")
    return (inp.shape[0] * num // den, *inp.shape[1:])


def _world(group_name):
    """World size for the fakes: known when the group is registered in this process; tracing a graph for
    another process (or ahead of time) falls back to the shapes the caller gave."""
    return _sizes.get(group_name)


@torch.library.register_fake("symmem::all_reduce")
def _all_reduce_fake(input, reduce_op, group_name, wire="none"):
    _check_tensor("all_reduce", group_name, "input", input)
    _check_reduce_op("all_reduce", group_name, reduce_op)
    _check_wire("all_reduce", group_name, wire)
    return input.new_empty(input.shape)


@torch.library.register_fake("symmem::all_reduce_")
def _all_reduce__fake(input, reduce_op, group_name, wire="none"):
    _check_tensor("all_reduce_", group_name, "input", input)
    _check_reduce_op("all_reduce_", group_name, reduce_op)
    _check_wire("all_reduce_", group_name, wire)


@torch.library.register_fake("symmem::all_reduce_out")
def _all_reduce_out_fake(input, reduce_op, group_name, out, wire="none"):
    _check_tensor("all_reduce_out", group_name, "input", input)
    _check_reduce_op("all_reduce_out", group_name, reduce_op)
    _check_wire("all_reduce_out", group_name, wire)
    _check_out("all_reduce_out", group_name, input, out, input.shape, "they must match")


@torch.library.register_fake("symmem::reduce_scatter_out")
def _reduce_scatter_out_fake(input, reduce_op, group_name, out):
    op = "reduce_scatter_out"
    _check_tensor(op, group_name, "input", input)
    _check_reduce_op(op, group_name, reduce_op)
    world = _world(group_name)
    if world is None:  # the group lives elsewhere: out's dim 0 must still divide input's
        world = input.shape[0] // out.shape[0] if out.dim() >= 1 and out.shape[0] else 1
    _check_out(op, group_name, input, out, _scaled(op, group_name, input, 1, world),
               "out.shape[0] * world_size must equal input.shape[0], other dims equal")


@torch.library.register_fake("symmem::all_gather_out")
def _all_gather_out_fake(input, group_name, out):
    op = "all_gather_out"
    _check_tensor(op, group_name, "input", input)
    world = _world(group_name)
    if world is None:
        world = out.shape[0] // input.shape[0] if input.dim() >= 1 and input.shape[0] and out.dim() >= 1 else 1
    _check_out(op, group_name, input, out, _scaled(op, group_name, input, world, 1),
               "out.shape[0] must equal input.shape[0] * world_size, other dims equal")


def _check_rmsnorm(op, group_name, inp, residual, weight, eps, out=None, writes_input=False):
    """Each tensor as every op takes it, then the fused call's rules as the library states them
    (symmem_all_reduce_add_rmsnorm_check, which symmem_torch.cpp calls too): shapes, dtypes, the row width,
    eps, and no overlap between what the op writes and what it reads. (tokens, hidden, eps as float32)."""
    tensors = [inp, residual, weight] + ([out] if out is not None else [])
    for which, t in zip(("input", "residual", "weight", "out"), tensors):
        _check_tensor(op, group_name, which, t)
    try:
        tokens, hidden = _lib.rmsnorm_check(*_descs(tensors), *(() if out is not None else (None,)),
                                            writes_input, eps)
    except ValueError as e:
        raise RuntimeError(f"{_where(op, group_name)}: {e}") from None
    return tokens, hidden, ctypes.c_float(eps).value


def _descs(tensors):
    """The library's view of contiguous tensors: dtype, shape, and which storage they lie in at which byte.
    Storage identity and offsets, no data pointers: fake tensors have none."""
    descs, bases = [], []
    for t in tensors:
        storage = next((i for i, b in enumerate(bases) if torch._C._is_alias_of(t, b)), len(bases))
        if storage == len(bases):
            bases.append(t)
        descs.append(_lib.TensorDesc.make(DTYPES[t.dtype], _dtype_name(t.dtype), tuple(t.shape), storage,
                                          t.storage_offset() * t.element_size()))
    return descs


@torch.library.register_fake("symmem::all_reduce_add_rmsnorm")
def _all_reduce_add_rmsnorm_fake(input, residual, weight, eps, group_name):
    _check_rmsnorm("all_reduce_add_rmsnorm", group_name, input, residual, weight, eps)
    return input.new_empty(input.shape)


@torch.library.register_fake("symmem::all_reduce_add_rmsnorm_out")
def _all_reduce_add_rmsnorm_out_fake(input, residual, weight, eps, group_name, out):
    _check_rmsnorm("all_reduce_add_rmsnorm_out", group_name, input, residual, weight, eps, out=out)


@torch.library.register_fake("symmem::all_reduce_add_rmsnorm_")
def _all_reduce_add_rmsnorm__fake(input, residual, weight, eps, group_name):
    _check_rmsnorm("all_reduce_add_rmsnorm_", group_name, input, residual, weight, eps, writes_input=True)


@torch.library.register_fake("symmem::barrier")
def _barrier_fake(group_name):
    return None


# A barrier has no output, so graph passes would drop it as dead code; it is there for its effect.
if hasattr(torch.fx.node, "has_side_effect"):
    torch.fx.node.has_side_effect(torch.ops.symmem.barrier.default)


# ---------------------------------------------------------------------------------------------------------
# The ctypes kernels (only without the op library).
# ---------------------------------------------------------------------------------------------------------
def _py_group(op, group_name):
    g = _py_groups.get(group_name)
    if g is None:
        raise RuntimeError(f"symmem::{op}: group '{group_name}' is not registered in this process: create "
                           f"symmem.torch.SymmemCommunicator(group, device) first and pass its group_name")
    return g


def _py_prepare(op, group_name, inp, nbytes):
    g = _py_group(op, group_name)
    _check_tensor(op, group_name, "input", inp)
    if inp.device.index != g.device:
        raise RuntimeError(f"{_where(op, group_name)}: input is on {inp.device} but the group's communicator is on "
                           f"cuda:{g.device}")
    if nbytes > g.max_bytes:
        raise RuntimeError(f"{_where(op, group_name)}: the message is {nbytes} bytes, larger than the "
                           f"communicator's limit of {g.max_bytes} bytes")
    return g, torch.cuda.current_stream(inp.device).cuda_stream


if _path is None:
    def _py_all_reduce_into(op, inp, reduce_op, group_name, out, wire):
        _check_reduce_op(op, group_name, reduce_op)
        _check_wire(op, group_name, wire)
        g, stream = _py_prepare(op, group_name, inp, inp.numel() * inp.element_size())
        g.comm.all_reduce(inp.data_ptr(), out.data_ptr(), inp.numel(), DTYPES[inp.dtype], REDUCE_OPS[reduce_op],
                          algo=WIRES[wire], stream=stream)
        return out

    @torch.library.impl(_lib_def, "all_reduce", "CUDA")
    def _py_all_reduce(input, reduce_op, group_name, wire="none"):
        return _py_all_reduce_into("all_reduce", input, reduce_op, group_name, input.new_empty(input.shape), wire)

    @torch.library.impl(_lib_def, "all_reduce_", "CUDA")
    def _py_all_reduce_(input, reduce_op, group_name, wire="none"):
        _py_all_reduce_into("all_reduce_", input, reduce_op, group_name, input, wire)

    @torch.library.impl(_lib_def, "all_reduce_out", "CUDA")
    def _py_all_reduce_out(input, reduce_op, group_name, out, wire="none"):
        _check_out("all_reduce_out", group_name, input, out, input.shape, "they must match")
        _py_all_reduce_into("all_reduce_out", input, reduce_op, group_name, out, wire)

    @torch.library.impl(_lib_def, "reduce_scatter_out", "CUDA")
    def _py_reduce_scatter_out(input, reduce_op, group_name, out):
        op = "reduce_scatter_out"
        g = _py_group(op, group_name)
        _check_reduce_op(op, group_name, reduce_op)
        _check_out(op, group_name, input, out, _scaled(op, group_name, input, 1, g.size),
                   "out.shape[0] * world_size must equal input.shape[0], other dims equal")
        g, stream = _py_prepare(op, group_name, input, input.numel() * input.element_size())
        g.comm.reduce_scatter(input.data_ptr(), out.data_ptr(), out.numel(), DTYPES[input.dtype],
                              REDUCE_OPS[reduce_op], stream=stream)

    @torch.library.impl(_lib_def, "all_gather_out", "CUDA")
    def _py_all_gather_out(input, group_name, out):
        op = "all_gather_out"
        g = _py_group(op, group_name)
        _check_out(op, group_name, input, out, _scaled(op, group_name, input, g.size, 1),
                   "out.shape[0] must equal input.shape[0] * world_size, other dims equal")
        g, stream = _py_prepare(op, group_name, input, out.numel() * out.element_size())
        g.comm.all_gather(input.data_ptr(), out.data_ptr(), input.numel(), DTYPES[input.dtype], stream=stream)

    @torch.library.impl(_lib_def, "barrier", "CompositeExplicitAutograd")
    def _py_barrier(group_name):
        g = _py_group("barrier", group_name)
        g.comm.barrier(stream=torch.cuda.current_stream(g.device).cuda_stream)

    def _py_rmsnorm(op, input, residual, weight, eps, group_name, out=None):
        """out None: the result goes into input (the in-place form)."""
        tokens, hidden, eps32 = _check_rmsnorm(op, group_name, input, residual, weight, eps, out=out,
                                               writes_input=out is None)
        g = _py_group(op, group_name)
        dst = input if out is None else out
        for which, t in (("input", input), ("residual", residual), ("weight", weight), ("out", dst)):
            if t.device.index != g.device:
                raise RuntimeError(f"{_where(op, group_name)}: {which} is on {t.device} but the group's communicator "
                                   f"is on cuda:{g.device}")
        if tokens:
            g.comm.all_reduce_add_rmsnorm(input.data_ptr(), residual.data_ptr(), weight.data_ptr(), dst.data_ptr(),
                                          tokens, hidden, eps32, DTYPES[input.dtype],
                                          stream=torch.cuda.current_stream(input.device).cuda_stream)
        return dst

    @torch.library.impl(_lib_def, "all_reduce_add_rmsnorm", "CUDA")
    def _py_all_reduce_add_rmsnorm(input, residual, weight, eps, group_name):
        return _py_rmsnorm("all_reduce_add_rmsnorm", input, residual, weight, eps, group_name,
                           out=input.new_empty(input.shape))

    @torch.library.impl(_lib_def, "all_reduce_add_rmsnorm_out", "CUDA")
    def _py_all_reduce_add_rmsnorm_out(input, residual, weight, eps, group_name, out):
        _py_rmsnorm("all_reduce_add_rmsnorm_out", input, residual, weight, eps, group_name, out=out)

    @torch.library.impl(_lib_def, "all_reduce_add_rmsnorm_", "CUDA")
    def _py_all_reduce_add_rmsnorm_(input, residual, weight, eps, group_name):
        _py_rmsnorm("all_reduce_add_rmsnorm_", input, residual, weight, eps, group_name)

    # CPU tensors reach the same kernels, whose checks raise a RuntimeError naming the op and the group (as
    # the op library's do), instead of the dispatcher's NotImplementedError listing every backend.
    for _name, _kernel in (("all_reduce", _py_all_reduce), ("all_reduce_", _py_all_reduce_),
                           ("all_reduce_out", _py_all_reduce_out), ("reduce_scatter_out", _py_reduce_scatter_out),
                           ("all_gather_out", _py_all_gather_out),
                           ("all_reduce_add_rmsnorm", _py_all_reduce_add_rmsnorm),
                           ("all_reduce_add_rmsnorm_out", _py_all_reduce_add_rmsnorm_out),
                           ("all_reduce_add_rmsnorm_", _py_all_reduce_add_rmsnorm_)):
        _lib_def.impl(_name, _kernel, "CPU")

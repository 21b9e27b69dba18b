"""SymmemCommunicator: the interface SGLang's TorchSymmMemCommunicator and vLLM's SymmMemCommunicator have,
on torch.ops.symmem.*, so that it also runs on PCIe machines without NVLink multicast.

    comm = SymmemCommunicator(cpu_group, device)      # the gloo CPU group, as SGLang passes it
    if not comm.disabled and comm.should_torch_symm_mem_allreduce(x):
        y = comm.all_reduce(x)                        # stream-ordered, CUDA-graph capturable, traceable

Construction never raises (SGLang calls it without try/except): an unsupported setup sets `disabled` and
logs why. Calls go through the cached OpOverloads (no per-call overload resolution), so torch.compile and
Dynamo keep them inside the graph and eager calls cost one dispatcher call.
"""
import itertools
import logging
import weakref

import torch

import symmem
from symmem import SymmemError

from . import _ops
from ._watchdog import watchdog

log = logging.getLogger("symmem")

_AR = torch.ops.symmem.all_reduce.default
_AR_ = torch.ops.symmem.all_reduce_.default
_AR_OUT = torch.ops.symmem.all_reduce_out.default
_RS_OUT = torch.ops.symmem.reduce_scatter_out.default
_AG_OUT = torch.ops.symmem.all_gather_out.default
_BARRIER = torch.ops.symmem.barrier.default
_ARN = torch.ops.symmem.all_reduce_add_rmsnorm.default
_ARN_OUT = torch.ops.symmem.all_reduce_add_rmsnorm_out.default
_ARN_ = torch.ops.symmem.all_reduce_add_rmsnorm_.default

_DTYPES = frozenset(_ops.DTYPES)

# ---- learning the sizes a model issues -------------------------------------------------------------------
# SYMMEM_TORCH_LEARN_SIZES: how many distinct all-reduce sizes a communicator measures for AUTO the first time it
# sees each in an eager call (symmem_tune_sizes), so that its table holds exactly the sizes the model issues.
# Only where the call is a plain eager one: plain tensors (no subclass such as FakeTensor or FunctionalTensor),
# no TorchDispatchMode or TorchFunctionMode active (make_fx, FakeTensorMode, debug modes), not compiling, no
# autograd to record, no graph being captured.
_Tensor = torch.Tensor
_is_compiling = torch.compiler.is_compiling
_dispatch_modes = torch._C._len_torch_dispatch_stack
_function_modes = torch._C._is_torch_function_mode_enabled
_grad_enabled = torch.is_grad_enabled


# ---- the compiled entry (symmem._fast, python/csrc/fast.c) ------------------------------------------------
# A plain eager all-reduce (the conditions of _plain, below, plus no TorchDispatchMode or TorchFunctionMode and
# no Dynamo trace: nothing that must see the op) is checked and sent to the library by the entry's
# checked_all_reduce, skipping the dispatcher's boxed call and the checks' bytecode; everything else (tracing,
# FakeTensor, functionalization, autograd, a compressed wire, a size AUTO has yet to measure, a tensor the checks
# do not pass) calls the op, which raises the op's errors. A graph capture is fine either way: the library call
# is the same. What the dispatcher would also do is done there: out's autograd version counter is bumped, as for
# any in-place op. Dynamo evaluates is_dynamo_compiling to True while it traces, so a traced call never reaches
# the entry (which Dynamo could not trace); export's and AOTAutograd's tracing run on tensor subclasses or under
# a dispatch mode, which the entry sends to the op.
# Where symmem._fast_torch loaded (built for exactly this torch and Python), its entry reads the tensors in C++;
# elsewhere symmem._fast's reads them through their Python methods. Both check the same things.
_fast_path, _fast_module = _ops.compiled_entry()
_torch_entry_path, _torch_entry_module = _ops.torch_entry()
_raw_stream = torch._C._cuda_getCurrentRawStream if hasattr(torch._C, "_cuda_getCurrentRawStream") else None
_dynamo_compiling = getattr(torch.compiler, "is_dynamo_compiling", _is_compiling)
_DTYPE_INFO = {dt: (torch.empty((), dtype=dt).element_size(), code) for dt, code in _ops.DTYPES.items()}
_OP_CODES = _ops.REDUCE_OPS


def _version_bump():
    """torch._C._increment_version of out, which takes an iterable of tensors (torch >= 2.5), or None when this
    torch's does not, and then the fast path is off (the op bumps it)."""
    inc = getattr(torch._C, "_increment_version", None)
    if inc is None:
        return None
    t = torch.zeros(1)
    v = t._version
    try:
        inc((t,))
    except (TypeError, RuntimeError):
        return None
    return inc if t._version == v + 1 else None


_bump = _version_bump()


def fast_entry():
    """The path of the compiled entry that communicators call eager all-reduces through (symmem._fast_torch where
    it was built for this torch and Python, else symmem._fast), or None when they call the op (not built, not
    loadable, another libsymmem, or this torch lacks what it needs)."""
    if _fast_module is None or _raw_stream is None or _bump is None:
        return None
    return _torch_entry_path or _fast_path


def _new_entry(handle, device, max_bytes, learning, label, portable=False):
    """An Entry of the module fast_entry() names, or of symmem._fast when portable: (the Entry, its module's
    checked_all_reduce)."""
    if _torch_entry_module is not None and not portable:
        mod = _torch_entry_module
        return mod.Entry(handle, device, max_bytes, learning, label), mod.checked_all_reduce
    dtypes = tuple((dt, size, code) for dt, (size, code) in _DTYPE_INFO.items())
    mod = _fast_module
    return mod.Entry(handle, device, max_bytes, learning, label, (_Tensor, torch.nn.Parameter), dtypes,
                     _entry_hooks()), \
        mod.checked_all_reduce


def _entry_hooks():
    """The torch callables the entry calls: the checks' state, the current stream, the version bump, the result's
    allocation (symmem._fast.Entry's hooks, in its order)."""
    return (_dispatch_modes, _function_modes, _grad_enabled, _raw_stream, _bump, torch.empty_like)


def _plain(t):
    return type(t) is _Tensor and not (t.requires_grad and _grad_enabled())


def _eager_ok(inp):
    """Whether a call on `inp` is a plain eager one (see above), where measuring may happen."""
    return (_plain(inp) and not _is_compiling() and _dispatch_modes() == 0 and not _function_modes()
            and not (inp.is_cuda and torch.cuda.is_current_stream_capturing()))


_by_group = {}  # id(torch group) -> weakref(SymmemCommunicator): symmem.torch.empty(group=pg) finds it
_live = weakref.WeakSet()
_inproc_ids = itertools.count()


def _wire_setting(wire):
    """The wire format a communicator's all-reduces use: None or "none" exact, "int8" compressed; anything else
    warns and stays exact (construction never raises)."""
    if wire is None:
        return "none"
    if wire not in _ops.WIRES:
        log.warning("symmem: wire=%r is not one of %s; the all-reduces stay exact", wire, ", ".join(_ops.WIRES))
        return "none"
    return wire


def _torch_device(device):
    d = device if isinstance(device, torch.device) else torch.device(device)
    if d.type == "cuda" and d.index is None:
        d = torch.device("cuda", torch.cuda.current_device())
    return d


class SymmemCommunicator:
    """Attributes: disabled, disabled_reason (why, in words; None while enabled), group, world_size, rank,
    device, max_size (bytes; the largest eligible message), preferred_max_size (bytes; the cap a framework
    with another backend such as NCCL should apply: the library's bound for the group's links, within
    max_size), link_class (the group's worst link, a symmem.LINK_* value; None when disabled), group_name
    (what torch.ops.symmem.* take), comm (the symmem.Comm, None when disabled), wire (the all-reduce's wire
    format: "none", exact, the default; "int8", compressed and lossy, for sum of bf16/fp16 from
    SYMMEM_WIRE_MIN_BYTES on: docs/collectives.md, "Compressed wire"; every rank must pass the same)."""

    _wire = "none"  # the class's default, for instances made without __init__ too
    _fast = False    # whether plain eager all-reduces may take the compiled entry
    _entry = None    # its Entry while they do (_refresh_entry), else None
    _checked = None  # the checked_all_reduce of the Entry's module

    @property
    def wire(self):
        return self._wire

    @wire.setter
    def wire(self, value):
        self._wire = _wire_setting(value)
        self._refresh_entry()

    def __init__(self, group, device, max_size=None, wire=None):
        self.wire = wire  # the setter checks it
        self.disabled = True
        self.disabled_reason = "not initialised"
        self.group = group
        self.world_size = 1
        self.rank = 0
        self.device = device
        self.max_size = 0
        self.preferred_max_size = 0
        self.link_class = None
        self.comm = None
        self.group_name = None
        self._init_state()
        try:
            self._init(group, device, max_size)
        except Exception as e:  # noqa: BLE001 - never raise from here: SGLang does not catch
            self.disabled_reason = f"{type(e).__name__}: {e}"
            log.warning("symmem communicator disabled: %s", self.disabled_reason)
            self._teardown()

    def _init_state(self):
        self._error = None
        self._handle = 0          # the symmem_comm_t as an integer
        d = getattr(self, "device", None)
        self._dev_index = d.index if isinstance(d, torch.device) and d.index is not None else -1
        self._learned = set()     # all-reduce sizes measured for AUTO (tune, or seen eagerly)
        self._learn_left = 0
        self._learn_error = None
        self._pool = None
        self._pool_slot = -1
        self._pending_free = []
        self._fast = False        # whether plain eager all-reduces take the compiled entry (fast_entry)
        self._entry = None        # its Entry while they do (_refresh_entry)
        # ranks of this communicator that are threads of this process on this GPU (communicators_in_process)
        self._colocated = ()

    def _init(self, group, device, max_size):
        import torch.distributed as dist

        self.world_size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.device = _torch_device(device)
        if self.world_size < 2:
            self.disabled_reason = f"world size {self.world_size}"
            log.info("symmem communicator disabled: %s", self.disabled_reason)
            return
        if self.device.type != "cuda":
            self.disabled_reason = f"device {self.device} is not CUDA"
            log.info("symmem communicator disabled: %s", self.disabled_reason)
            return

        def allgather(data):
            out = [None] * self.world_size
            dist.all_gather_object(out, data, group=group)
            return out

        try:
            comm = symmem.Comm(self.world_size, self.rank, allgather=allgather, device=self.device.index)
        except SymmemError as e:
            self.disabled_reason = str(e)
            log.warning("symmem communicator disabled: %s", e)
            return
        self._attach(comm, getattr(group, "group_name", None) or "symmem", max_size)
        _by_group[id(group)] = weakref.ref(self)

    @classmethod
    def _from_comm(cls, comm, name, max_size=None, wire=None):
        """A communicator over an existing symmem.Comm (e.g. one rank of Comm.init_all), without a torch group."""
        self = cls.__new__(cls)
        self.wire = wire  # the setter checks it
        self.disabled = True
        self.disabled_reason = "not initialised"
        self.group = None
        self.world_size, self.rank = comm.size, comm.rank
        self.device = torch.device("cuda", comm.device)
        self.max_size = 0
        self.preferred_max_size = 0
        self.link_class = None
        self.comm = None
        self.group_name = None
        self._init_state()
        self._attach(comm, name, max_size)
        return self

    def _attach(self, comm, base_name, max_size):
        self.comm = comm
        for k in itertools.count():
            name = base_name if k == 0 else f"{base_name}#{k}"
            if _ops.register_group(name, comm):
                break
        self.group_name = name
        limit = comm.max_message_bytes
        self.max_size = limit if max_size is None else min(int(max_size), limit)
        self._handle = getattr(comm, "handle", 0) or 0  # 0: a stand-in without a library handle
        self._dev_index = self.device.index
        self._learn_left = _learn_budget()
        self._fast = bool(self._handle and fast_entry() is not None and _fast_call_setting())
        self.preferred_max_size = min(self.max_size, comm.preferred_max_bytes)
        self.link_class = comm.link_class
        self.disabled = False
        self.disabled_reason = None
        self._refresh_entry()
        _live.add(self)
        watchdog().add(self)

    # -- eligibility -----------------------------------------------------------------------------------
    def should_torch_symm_mem_allreduce(self, inp):
        """Whether all_reduce takes `inp`: bf16/fp16/fp32, contiguous, on this device, at most max_size bytes."""
        return (not self.disabled and inp.dtype in _DTYPES and inp.get_device() == self._dev_index
                and inp.is_contiguous() and inp.numel() * inp.element_size() <= self.max_size)

    should_use_symm_mem = should_torch_symm_mem_allreduce  # vLLM's name

    def should_all_reduce_add_rmsnorm(self, inp):
        """Whether all_reduce_add_rmsnorm takes `inp`: what all_reduce takes (dtype, device, contiguous, at most
        max_size bytes) with a last dimension (the row) of 1..symmem.RMSNORM_MAX_HIDDEN elements. The size cap is
        the all-reduce's, so a framework sends the same calls to symmem fused or unfused."""
        return (self.should_torch_symm_mem_allreduce(inp) and inp.dim() >= 1
                and 1 <= inp.shape[-1] <= symmem.RMSNORM_MAX_HIDDEN)

    def _raise_if_failed(self):
        if self._error is not None:
            raise SymmemError(self._error.status, f"communicator '{self.group_name}' failed earlier: {self._error}")

    def _refresh_entry(self):
        """Makes the compiled entry's state for what the communicator is now, or drops it: plain eager all-reduces
        take the entry only while it is enabled, live, not failed and on the exact wire; the sizes AUTO has
        measured are its to check while the communicator still learns."""
        if not (self._fast and not self.disabled and self._error is None and self._wire == "none"):
            self._entry = None
            return
        entry, checked = _new_entry(
            self._handle, self._dev_index, self.max_size, self._learned if self._learn_left > 0 else None,
            f"symmem::all_reduce (group '{self.group_name}', rank {self.rank} of {self.world_size})")
        self._checked = checked  # before the entry: a thread that sees the entry finds its function
        self._entry = entry

    # -- the sizes AUTO measures -----------------------------------------------------------------------
    def tune(self, sizes, symmetric_input=False):
        """Collective, blocking, never inside a graph capture: measure AUTO's all-reduce choice at exactly these
        message sizes in bytes (numel * element size: hidden size x each batch size a framework captures, x 2
        for bf16), so that each runs its measured winner; calls with ordinary tensors, and also with a
        symmetric input (symmem.torch.empty) when symmetric_input. Every rank passes the same sizes; sizes
        measured before (here or at an earlier init: the table is saved) are skipped. A no-op when disabled."""
        if self.disabled or self.comm is None:
            return
        self._raise_if_failed()
        forms = (symmem.FORM_ORDINARY, symmem.FORM_SYMMETRIC_INPUT) if symmetric_input else (symmem.FORM_ORDINARY,)
        sizes = sorted({int(b) for b in sizes if 0 < int(b) <= self.max_size})
        for k in range(0, len(sizes), 64):
            self.comm.tune_sizes(sizes[k:k + 64], forms)
        self._learned.update(sizes)

    def _learn(self, nbytes, inp):
        """The first plain eager call of a size not yet measured: measure it for AUTO (every rank issues the same
        all-reduces in the same order under tensor parallelism, so every rank gets here at the same call); at
        most SYMMEM_TORCH_LEARN_SIZES sizes. A call that is not plain eager (_eager_ok) measures nothing."""
        if not self._handle or not _eager_ok(inp):
            return
        self._learn_left -= 1
        self._learned.add(nbytes)
        if self._learn_left == 0:
            self._refresh_entry()  # every size is the entry's now
        forms = (symmem.FORM_ORDINARY,)
        if symmem.lib().symmem_buffer_lookup(self._handle, inp.data_ptr()):
            forms = (symmem.FORM_ORDINARY, symmem.FORM_SYMMETRIC_INPUT)  # a symmetric tensor: its own form too
        try:
            torch.cuda.current_stream(self.device).synchronize()  # the measurement gets the GPU to itself
            self.comm.tune_sizes([nbytes], forms)
        except SymmemError as e:
            # ranks out of step, or a failure while measuring: stop learning, keep serving
            self._learn_left = 0
            self._learn_error = e
            self._refresh_entry()
            log.warning("symmem: group '%s': learning the all-reduce size %d for AUTO failed, no more sizes are "
                        "measured: %s", self.group_name, nbytes, e)

    # -- collectives (stream-ordered on the current stream, CUDA-graph capturable) -----------------------
    def all_reduce(self, inp, *, out=None, op="sum", wire=None):
        """Reduce (op: "sum", "max", "min") over the group into `out`: a new tensor when None, `inp` itself
        for in place. wire: None for the communicator's `wire`, "none" (exact) or "int8" (compressed, lossy:
        sum of bf16/fp16 only, else RuntimeError). Returns the result, or None when `inp` is not eligible
        (vLLM's convention; SGLang checks should_torch_symm_mem_allreduce first)."""
        entry = self._entry
        if entry is not None and wire is None and not _dynamo_compiling():
            res = self._checked(entry, inp, out, _OP_CODES.get(op, -1))
            if res is not NotImplemented:
                return res
        dt = inp.dtype
        if self.disabled or dt not in _DTYPES or inp.get_device() != self._dev_index or not inp.is_contiguous():
            return None
        # numel * element size, not Tensor.nbytes: Dynamo traces this with symbolic sizes
        nbytes = inp.numel() * _DTYPE_INFO[dt][0]
        if nbytes > self.max_size:
            return None
        if self._error is not None:
            self._raise_if_failed()
        if self._learn_left > 0 and nbytes not in self._learned and not _is_compiling():
            self._learn(nbytes, inp)
        w = self.wire if wire is None else wire
        if w != "none":
            if out is None:
                return _AR(inp, op, self.group_name, w)
            if out is inp:
                _AR_(inp, op, self.group_name, w)
            else:
                _AR_OUT(inp, op, self.group_name, out, w)
            return out
        # the exact wire is the schema's default: not passing it spares the boxed call a string argument
        if out is None:
            return _AR(inp, op, self.group_name)
        if out is inp:
            _AR_(inp, op, self.group_name)
        else:
            _AR_OUT(inp, op, self.group_name, out)
        return out

    def all_reduce_add_rmsnorm(self, inp, residual, weight, eps, *, out=None):
        """The end of a tensor-parallel decoder layer's attention or MLP in one kernel: per row of the last
        dimension, residual += sum over the group of inp (in place), and the result is
        residual * weight / sqrt(mean(residual^2) + eps) (fp32 inside; symmem.h states the rounding). Into
        `out`: a new tensor when None, `inp` itself for in place; out must not overlap residual. Returns the
        result, or None when `inp` is not eligible (should_all_reduce_add_rmsnorm); residual and weight
        must match inp (shape [..., hidden] and [hidden], dtype, device), else RuntimeError."""
        if not self.should_all_reduce_add_rmsnorm(inp):
            return None
        if self._error is not None:
            self._raise_if_failed()
        if out is None:
            return _ARN(inp, residual, weight, eps, self.group_name)
        if out is inp:
            _ARN_(inp, residual, weight, eps, self.group_name)
        else:
            _ARN_OUT(inp, residual, weight, eps, self.group_name, out)
        return out

    def reduce_scatter(self, inp, *, out=None, op="sum"):
        """Rank r gets block r (along dim 0) of the reduction of every rank's `inp`, whose dim 0 is
        world_size times out's. None when `inp` is not eligible (dtype, device, contiguity, max_size)."""
        if not self.should_torch_symm_mem_allreduce(inp):
            return None
        self._raise_if_failed()
        if out is None:
            if inp.dim() < 1 or inp.shape[0] % self.world_size:
                raise ValueError(f"reduce_scatter: dim 0 of input shape {list(inp.shape)} is not a multiple of "
                                 f"world size {self.world_size}")
            out = inp.new_empty((inp.shape[0] // self.world_size, *inp.shape[1:]))
        _RS_OUT(inp, op, self.group_name, out)
        return out

    def all_gather(self, inp, *, out=None):
        """Every rank's `inp` concatenated along dim 0 in rank order. None when not eligible (the gathered
        size counts against max_size)."""
        if (self.disabled or inp.dtype not in _DTYPES or inp.device != self.device or not inp.is_contiguous()
                or inp.numel() * inp.element_size() * self.world_size > self.max_size):
            return None
        self._raise_if_failed()
        if out is None:
            if inp.dim() < 1:
                raise ValueError("all_gather: input must have at least one dimension (gathered along dim 0)")
            out = inp.new_empty((inp.shape[0] * self.world_size, *inp.shape[1:]))
        _AG_OUT(inp, self.group_name, out)
        return out

    def barrier(self):
        """Stream-ordered: the current stream of every rank waits until every rank's has reached it."""
        if self.disabled:
            return
        self._raise_if_failed()
        _BARRIER(self.group_name)

    # -- errors ------------------------------------------------------------------------------------------
    def check_error(self):
        """Raises SymmemError if the communicator is in its error state (non-blocking)."""
        self._raise_if_failed()
        if self.comm is not None:
            try:
                self.comm.check_async_error()
            except SymmemError as e:
                self._set_async_error(e)
                raise

    def _handle_for_watchdog(self):
        return self.comm.handle if self.comm is not None else 0

    def _set_async_error(self, err):
        if self._error is None:
            self._error = err
            self._entry = None

    # -- teardown ----------------------------------------------------------------------------------------
    def _release_buffer(self, buf):
        """Frees a symmetric tensor's buffer once no stream work can use it (a free during capture waits
        for close())."""
        if self.comm is None:
            return
        if torch.cuda.is_current_stream_capturing():
            self._pending_free.append(buf)
            return
        torch.cuda.synchronize(self.device)
        buf.free()

    def _teardown(self):
        self._fast = False
        self._entry = None
        wd = watchdog()
        with wd.lock:
            wd.remove(self)
            if self.group_name is not None:
                _ops.unregister_group(self.group_name)
            if self._pool is not None:
                # The pool returns its cached segments through the slot's free function: while still bound.
                self._pool = None
                if torch.cuda.is_available() and not torch.cuda.is_current_stream_capturing():
                    torch.cuda.synchronize(self.device)
                    torch.cuda.empty_cache()
            if self._pool_slot >= 0:
                _ops.pool_unbind(self._pool_slot)
                self._pool_slot = -1
            if self.comm is not None:
                if torch.cuda.is_available() and not torch.cuda.is_current_stream_capturing():
                    torch.cuda.synchronize(self.device)
                self._pending_free.clear()
                self.comm.destroy()  # frees every buffer still allocated on it
                self.comm = None
        ref = _by_group.get(id(self.group))
        if ref is not None and ref() is self:
            del _by_group[id(self.group)]
        if not self.disabled:
            self.disabled_reason = "closed"
        self.disabled = True

    def close(self):
        """Local: synchronises this device, then releases the communicator and its symmetric memory.
        Idempotent. A memory pool from get_mem_pool must have released its memory first."""
        self._teardown()

    def __repr__(self):
        state = (f"disabled: {self.disabled_reason}" if self.disabled else
                 "failed" if self._error is not None else "ok")
        return (f"SymmemCommunicator(group_name={self.group_name!r}, rank={self.rank}, world_size={self.world_size}, "
                f"device={self.device}, max_size={self.max_size}, {state})")


def _fast_call_setting():
    from symmem import _settings

    return _settings.value("SYMMEM_TORCH_FAST_CALL", log).lower() == "on"


def _learn_budget():
    from symmem import _settings

    return int(_settings.value("SYMMEM_TORCH_LEARN_SIZES", log))


def communicators_in_process(nranks, devices=None, max_size=None, timeout_ms=0, wire=None):
    """Every rank in this process (symmem_comm_init_all), one SymmemCommunicator each: devices[r] is rank r's
    GPU (repeats allowed: several ranks on one GPU); None puts rank r on GPU r. Drive rank r from its own
    thread (each with its own stream): collectives on several ranks wait for each other on the device."""
    comms = symmem.Comm.init_all(nranks, devices=devices, timeout_ms=timeout_ms)
    k = next(_inproc_ids)
    out = [SymmemCommunicator._from_comm(c, f"symmem-inproc{k}:{r}", max_size, wire) for r, c in enumerate(comms)]
    for c in out:
        c._colocated = tuple(o.rank for o in out if o is not c and o.device == c.device)
    return out


def resolve(group):
    """The SymmemCommunicator for `group`: a SymmemCommunicator, a torch group one was made for, or a
    group_name."""
    if isinstance(group, SymmemCommunicator):
        comm = group
    elif isinstance(group, str):
        comm = next((c for c in list(_live) if c.group_name == group), None)
    else:
        ref = _by_group.get(id(group))
        comm = ref() if ref is not None else None
        if comm is not None and comm.group is not group:
            comm = None
    if comm is None or comm.disabled:
        raise RuntimeError(f"symmem: no live SymmemCommunicator for {group!r}: create "
                           f"symmem.torch.SymmemCommunicator(group, device) first")
    return comm


def live_communicators():
    return list(_live)

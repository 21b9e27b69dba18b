"""symmem: symmetric peer-mapped GPU memory and direct-load collectives (Python binding).

    import symmem
    uid = symmem.new_unique_id()                     # rank 0; hand the string to the other ranks
    comm = symmem.Comm(nranks, rank, unique_id=uid, device=local_gpu)
    buf = comm.alloc(1 << 20)                        # collective
    buf.ptr, buf.peer_ptr(1)                         # this rank's part, rank 1's part mapped here
    comm.all_reduce(x_ptr, x_ptr, count, symmem.BFLOAT16, stream=torch.cuda.current_stream().cuda_stream)

    comms = symmem.Comm.init_all(4, devices=[0, 0, 0, 0])   # every rank in this process
    with symmem.group():                                 # one thread drives collective host calls of all
        bufs = [c.alloc(1 << 20) for c in comms]

The PyTorch integration is in symmem.torch: torch.ops.symmem.* custom ops, symmetric tensors and memory
pools, and SymmemCommunicator (the interface SGLang's and vLLM's communicators have).
"""
import contextlib
import ctypes

from ._lib import (ALGO_AUTO, BACKEND_CUDA, BACKEND_DEFAULT, BACKEND_HOST, BFLOAT16, FLOAT16, FLOAT32, FORM_ORDINARY,
                   FORM_SYMMETRIC, FORM_SYMMETRIC_INPUT, FORM_SYMMETRIC_OUTPUT, LINK_HOST,
                   LINK_NAMES, LINK_NONE, LINK_NVLINK, LINK_PCIE, LINK_SELF, OP_MAX, OP_MIN, OP_SUM, PLACEMENT_AUTO,
                   PLACEMENT_DEFAULT, PLACEMENT_DEVICE, PLACEMENT_HOST_NUMA, RMSNORM_MAX_HIDDEN, ALLGATHER_FN,
                   BARRIER_FN, Bootstrap, Options, SymmemError, UniqueId, algo, algo_names, c_arg, check, lib,
                   library_path, version)

__all__ = ["Comm", "Buffer", "SymmemError", "new_unique_id", "group", "version", "__version__", "library_path", "FLOAT32", "FLOAT16", "BFLOAT16",
           "OP_SUM", "OP_MAX", "OP_MIN", "BACKEND_CUDA", "BACKEND_HOST", "PLACEMENT_AUTO", "PLACEMENT_DEVICE",
           "PLACEMENT_HOST_NUMA", "RMSNORM_MAX_HIDDEN", "LINK_SELF", "LINK_NVLINK", "LINK_PCIE", "LINK_HOST",
           "LINK_NONE", "LINK_NAMES", "link_preferred_max_bytes", "algo", "algo_names", "FORM_ORDINARY",
           "FORM_SYMMETRIC_INPUT", "FORM_SYMMETRIC_OUTPUT", "FORM_SYMMETRIC"]

_c = lib()
_algo = algo
# The version of the libsymmem this package binds, as "0.1.0" (the wheel and a source build carry the two
# from one CMake project version, which pyproject.toml repeats).
__version__ = ".".join(map(str, version()))  # Comm.all_reduce's parameter is also called algo


def new_unique_id():
    """A fresh rendezvous id as a string (it carries a secret: hand it only to this job's ranks)."""
    uid = UniqueId()
    check(_c.symmem_get_unique_id(ctypes.byref(uid)))
    buf = ctypes.create_string_buffer(2 * len(uid.bytes) + 1)
    check(_c.symmem_unique_id_to_string(ctypes.byref(uid), buf, len(buf)))
    return buf.value.decode()


def link_preferred_max_bytes(link):
    """The largest all-reduce a framework with another backend (NCCL) should send to symmem when its ranks'
    worst link is `link` (LINK_PCIE, ...): None where symmem takes every size its workspace does (NVLink),
    0 for LINK_NONE (symmem_link_preferred_max_bytes: the algorithm choice's rule)."""
    n = _c.symmem_link_preferred_max_bytes(c_arg("link", link, "int"))
    return None if n == ctypes.c_size_t(-1).value else n


def _parse_unique_id(text):
    if isinstance(text, str):
        text = text.encode()
    elif not isinstance(text, bytes):
        raise TypeError("unique_id must be the string symmem.new_unique_id() returned (on rank 0, handed to the "
                        f"others), not {type(text).__name__}")
    uid = UniqueId()
    check(_c.symmem_unique_id_from_string(text, ctypes.byref(uid)))
    return uid


@contextlib.contextmanager
def group():
    """symmem_group_start/end: collective host calls (alloc) made inside by this thread on several ranks of
    one process (Comm.init_all) are run together at the end; the first failure is raised there."""
    check(_c.symmem_group_start())
    try:
        yield
    finally:
        check(_c.symmem_group_end())


def _coll_args(send_ptr, recv_ptr, count, dtype):
    """A collective's pointers, count and dtype, each checked against its C type (see _lib.c_arg)."""
    return (c_arg("send_ptr", send_ptr, "pointer"), c_arg("recv_ptr", recv_ptr, "pointer"),
            c_arg("count", count, "size_t"), c_arg("dtype", dtype, "int"))


class Buffer:
    """A symmetric allocation. free() is local and idempotent; the buffer is also freed with its Comm."""

    def __init__(self, comm, handle):
        self.comm = comm
        self._h = handle

    @property
    def ptr(self):
        return _c.symmem_buffer_ptr(self._h)

    @property
    def size(self):
        return _c.symmem_buffer_size(self._h)

    def peer_ptr(self, peer):
        return _c.symmem_buffer_peer_ptr(self._h, c_arg("peer", peer, "int"))

    def signal_ptr(self, peer):
        return _c.symmem_buffer_signal_ptr(self._h, c_arg("peer", peer, "int"))

    def free(self):
        if self._h:
            check(_c.symmem_free(self._h))
            self._h = None
            try:
                self.comm._buffers.remove(self)
            except ValueError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()


class Comm:
    """A communicator. Give either unique_id (a string from new_unique_id) or allgather, a callable that
    takes this rank's bytes and returns every rank's bytes in rank order (e.g. over a PyTorch Store or a
    torch.distributed CPU group)."""

    def __init__(self, nranks, rank, unique_id=None, allgather=None, device=-1, backend=BACKEND_DEFAULT,
                 placement=PLACEMENT_DEFAULT, timeout_ms=0):
        if (unique_id is None) == (allgather is None):
            raise ValueError("give exactly one of unique_id and allgather")
        if allgather is not None and not callable(allgather):
            raise TypeError(f"allgather must be a callable (bytes -> list of bytes), not {type(allgather).__name__}")
        nranks, rank = c_arg("nranks", nranks, "int"), c_arg("rank", rank, "int")
        opts = Options.make(device=device, timeout_ms=timeout_ms, backend=backend, placement=placement)
        handle = ctypes.c_void_p()
        if unique_id is not None:
            uid = _parse_unique_id(unique_id)
            check(_c.symmem_comm_init(nranks, rank, ctypes.byref(uid), ctypes.byref(opts), ctypes.byref(handle)))
        else:
            self._init_with_allgather(nranks, rank, allgather, opts, handle)
        self._h = handle
        self._buffers = []

    @classmethod
    def _wrap(cls, handle):
        self = cls.__new__(cls)
        self._h = handle
        self._buffers = []
        return self

    @classmethod
    def init_all(cls, nranks, devices=None, backend=BACKEND_DEFAULT, placement=PLACEMENT_DEFAULT, timeout_ms=0):
        """Every rank in this process (symmem_comm_init_all): a list of nranks Comms. devices[r] is rank r's
        GPU (repeats allowed: several ranks on one GPU); None puts rank r on GPU r. Drive them from one
        thread per rank, or from one thread with collective host calls inside symmem.group()."""
        nranks = c_arg("nranks", nranks, "int")
        opts = Options.make(timeout_ms=timeout_ms, backend=backend, placement=placement)
        handles = (ctypes.c_void_p * max(nranks, 1))()  # (C says what is wrong with nranks < 1)
        devs = None
        if devices is not None:
            if len(devices) != nranks:
                raise ValueError(f"devices has {len(devices)} entries for {nranks} ranks")
            devs = (ctypes.c_int * nranks)(*(c_arg(f"devices[{r}]", d, "int") for r, d in enumerate(devices)))
        check(_c.symmem_comm_init_all(nranks, devs, ctypes.byref(opts), handles))
        return [cls._wrap(ctypes.c_void_p(h)) for h in handles]

    @property
    def handle(self):
        """The symmem_comm_t as an integer (0 once destroyed), e.g. for the PyTorch op library."""
        return self._h.value or 0 if self._h else 0

    @staticmethod
    def _init_with_allgather(nranks, rank, allgather, opts, handle):
        """symmem_comm_init_bootstrap over `allgather`; a failure of the callback is raised with its own
        exception first (the C library only sees a nonzero return)."""
        causes = []

        def c_allgather(_ctx, send, recv, nbytes):
            try:
                parts = allgather(ctypes.string_at(send, nbytes))
                if len(parts) != nranks or any(len(p) != nbytes for p in parts):
                    got = ", ".join(str(len(p)) for p in parts)
                    raise ValueError(f"it returned {len(parts)} parts of [{got}] bytes; want {nranks} parts of "
                                     f"{nbytes} bytes each, in rank order")
                ctypes.memmove(recv, b"".join(parts), nranks * nbytes)
                return 0
            except Exception as e:  # noqa: BLE001 - C sees a nonzero return; the cause is raised below
                causes.append(e)
                return 1

        def c_barrier(_ctx):
            return c_allgather(None, ctypes.c_char_p(b"\0"), ctypes.create_string_buffer(nranks), 1)

        bs = Bootstrap(ALLGATHER_FN(c_allgather), BARRIER_FN(c_barrier), None)
        status = _c.symmem_comm_init_bootstrap(nranks, rank, ctypes.byref(bs), ctypes.byref(opts),
                                               ctypes.byref(handle))
        if status != 0 and causes:
            e = causes[0]
            detail = _c.symmem_last_error().decode(errors="replace")
            raise SymmemError(status, f"the allgather callback raised {type(e).__name__}: {e} on rank {rank} of "
                                      f"{nranks} (symmem_comm_init_bootstrap: {detail})") from e
        check(status)

    @property
    def rank(self):
        return _c.symmem_comm_rank(self._h)

    @property
    def size(self):
        return _c.symmem_comm_size(self._h)

    @property
    def device(self):
        return _c.symmem_comm_device(self._h)

    @property
    def max_message_bytes(self):
        """The largest message the collectives take without chunking (0 for the host backend)."""
        return _c.symmem_comm_max_message_bytes(self._h)

    @property
    def graph_mappings(self):
        """Peer allocations mapped for all-reduces captured into CUDA graphs on ordinary memory, which then run
        in place as on symmetric memory (symmem_comm_graph_mappings; SYMMEM_GRAPH_REGISTER)."""
        return _c.symmem_comm_graph_mappings(self._h)

    @property
    def preferred_max_bytes(self):
        """The size cap a framework with another backend (NCCL) should give symmem on this communicator: its
        link class's bound within max_message_bytes, the same on every rank (symmem_comm_preferred_max_bytes)."""
        return _c.symmem_comm_preferred_max_bytes(self._h)

    @property
    def link_class(self):
        """The worst link between two ranks' GPUs as the ranks agreed it (LINK_NVLINK, LINK_PCIE, LINK_HOST;
        LINK_NONE for the host backend); LINK_NAMES names it."""
        return _c.symmem_comm_link_class(self._h)

    def peer_link(self, peer):
        """(link, native_atomics): how this rank reaches `peer` (symmem_comm_peer_link)."""
        link, atomics = ctypes.c_int(0), ctypes.c_int(0)
        check(_c.symmem_comm_peer_link(self._h, c_arg("peer", peer, "int"), ctypes.byref(link), ctypes.byref(atomics)))
        return link.value, bool(atomics.value)

    def alloc(self, nbytes):
        """Collective: every rank passes the same size."""
        h = ctypes.c_void_p()
        check(_c.symmem_alloc(self._h, c_arg("nbytes", nbytes, "size_t"), ctypes.byref(h)))
        b = Buffer(self, h)
        self._buffers.append(b)
        return b

    def all_reduce(self, send_ptr, recv_ptr, count, dtype, op=OP_SUM, algo=ALGO_AUTO, stream=0):
        """Stream-ordered, graph-capturable. Pointers and stream are integers (data_ptr(), cuda_stream);
        algo a number or a name ("oneshot_push", "twoshot_lamport", ...: symmem.algo_names())."""
        check(_c.symmem_all_reduce(self._h, *_coll_args(send_ptr, recv_ptr, count, dtype), c_arg("op", op, "int"),
                                   _algo(algo), c_arg("stream", stream, "pointer")))

    def reduce_scatter(self, send_ptr, recv_ptr, count, dtype, op=OP_SUM, algo=ALGO_AUTO, stream=0):
        """recv gets `count` elements: block `rank` of the reduction of every rank's nranks*count elements."""
        check(_c.symmem_reduce_scatter(self._h, *_coll_args(send_ptr, recv_ptr, count, dtype),
                                       c_arg("op", op, "int"), _algo(algo), c_arg("stream", stream, "pointer")))

    def all_gather(self, send_ptr, recv_ptr, count, dtype, algo=ALGO_AUTO, stream=0):
        """recv gets nranks*count elements, rank r's at offset r*count."""
        check(_c.symmem_all_gather(self._h, *_coll_args(send_ptr, recv_ptr, count, dtype), _algo(algo),
                                   c_arg("stream", stream, "pointer")))

    def all_reduce_add_rmsnorm(self, x_ptr, residual_ptr, weight_ptr, out_ptr, tokens, hidden, eps, dtype,
                               algo=ALGO_AUTO, stream=0):
        """residual += sum over ranks of x; out = residual * weight / sqrt(mean(residual^2) + eps), per row of
        `hidden` elements, `tokens` rows (symmem_all_reduce_add_rmsnorm: stream-ordered, graph-capturable;
        out may be x, must not overlap residual; hidden <= RMSNORM_MAX_HIDDEN)."""
        ptrs = (c_arg(n, v, "pointer") for n, v in (("x_ptr", x_ptr), ("residual_ptr", residual_ptr),
                                                     ("weight_ptr", weight_ptr), ("out_ptr", out_ptr)))
        check(_c.symmem_all_reduce_add_rmsnorm(self._h, *ptrs, c_arg("tokens", tokens, "size_t"),
                                               c_arg("hidden", hidden, "size_t"), float(eps),
                                               c_arg("dtype", dtype, "int"), _algo(algo),
                                               c_arg("stream", stream, "pointer")))

    def tune_sizes(self, sizes, forms=(FORM_ORDINARY,)):
        """Collective, blocking, never during a graph capture: measure AUTO's all-reduce choice at exactly these
        message sizes (bytes) in these forms (FORM_ORDINARY: ordinary tensors in and out; FORM_SYMMETRIC_INPUT,
        ...), and make the table give each its winner (symmem_tune_sizes). Every rank passes the same sizes.
        Sizes already measured are skipped; at most 64."""
        sizes = [c_arg("sizes", s, "size_t") for s in sizes]
        mask = 0
        for f in forms:
            if f not in (FORM_ORDINARY, FORM_SYMMETRIC_INPUT, FORM_SYMMETRIC_OUTPUT, FORM_SYMMETRIC):
                raise ValueError(f"forms: {f!r} is not a symmem.FORM_* value")
            mask |= 1 << f
        arr = (ctypes.c_size_t * max(len(sizes), 1))(*sizes)
        check(_c.symmem_tune_sizes(self._h, arr, len(sizes), mask))

    def barrier(self, stream=0):
        """Every rank's stream waits until every rank's stream has reached this point (stream-ordered)."""
        check(_c.symmem_barrier(self._h, c_arg("stream", stream, "pointer")))

    def check_async_error(self):
        check(_c.symmem_comm_get_async_error(self._h))

    def destroy(self):
        if self._h:
            for b in list(self._buffers):
                b.free()
            check(_c.symmem_comm_destroy(self._h))
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()

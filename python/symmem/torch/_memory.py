"""Symmetric tensors: torch tensors in symmem buffers (every peer's part mapped on every rank), so that the
collectives read them in place (zero copy) and peers can load them directly.

    x = symmem.torch.empty(4096, 8192, dtype=torch.bfloat16, group=comm)   # collective
    comm.all_reduce(x, out=x)                                              # zero copy in and out

    pool = symmem.torch.get_mem_pool(comm)           # torch.cuda.MemPool over symmem (pluggable allocator)
    with torch.cuda.use_mem_pool(pool):
        y = torch.empty(n, device="cuda", dtype=torch.bfloat16)   # symmetric, like SGLang's NCCL pool

Both allocate collectively: every rank must allocate the same sizes in the same order (as ranks of one
program do). Zero copy needs every rank to pass the same buffer at the same offset; a mismatch is reported
by the collective (SYMMEM_INVALID_USAGE), never misread.
"""
import ctypes

import torch

import symmem
from symmem import _lib

from . import _ops
from ._comm import live_communicators, resolve

_c = _lib.lib()


class _Storage:
    """Owns one symmem buffer for the tensor made from it (torch keeps this object alive as long as the
    tensor's storage lives, through __cuda_array_interface__)."""

    def __init__(self, comm, buf, nbytes):
        self._comm = comm
        self.buf = buf
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (buf.ptr, False),
                                         "version": 2, "strides": None}

    def __del__(self):
        try:
            self._comm._release_buffer(self.buf)
        except Exception:  # noqa: BLE001 - interpreter teardown; close() frees what is left
            pass


def _sizes(size):
    if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
        size = tuple(size[0])
    return tuple(int(s) for s in size)


def empty(*size, dtype=torch.float32, group):
    """A tensor of `size` in a new symmetric buffer of `group` (a SymmemCommunicator, the torch group one was
    made for, or its group_name). Collective: every rank calls it with the same size and dtype."""
    comm = resolve(group)
    shape = _sizes(size)
    numel = 1
    for s in shape:
        numel *= s
    nbytes = numel * torch.empty((), dtype=dtype).element_size()
    buf = comm.comm.alloc(max(nbytes, 1))
    storage = _Storage(comm, buf, max(nbytes, 1))
    raw = torch.as_tensor(storage, device=comm.device)
    return raw[:nbytes].view(dtype).view(shape)


def peer_tensor(t, peer):
    """Rank `peer`'s part of the symmetric tensor `t` (same offset, shape and dtype), mapped here: a view that
    reads and writes the peer's memory directly. Local."""
    buf, comm = _find_buffer(t)
    off = t.data_ptr() - _c.symmem_buffer_ptr(buf)
    ptr = _c.symmem_buffer_peer_ptr(buf, peer)
    if not ptr:
        raise ValueError(f"peer {peer} is out of range for a group of {comm.world_size}")
    holder = _PeerView(ptr + off, t.numel() * t.element_size(), t)
    raw = torch.as_tensor(holder, device=t.device)
    return raw.view(t.dtype).view(t.shape)


class _PeerView:
    def __init__(self, ptr, nbytes, keep):
        self._keep = keep  # the local tensor keeps the buffer (and so the peer mapping) alive
        self.__cuda_array_interface__ = {"shape": (max(nbytes, 1),), "typestr": "|u1", "data": (ptr, False),
                                         "version": 2, "strides": None}


def _find_buffer(t):
    if t.device.type == "cuda":
        for comm in live_communicators():
            if comm.comm is not None and comm.device == t.device:
                buf = _c.symmem_buffer_lookup(comm.comm.handle, t.data_ptr())
                if buf:
                    return buf, comm
    raise ValueError("the tensor is not in symmetric memory of a live SymmemCommunicator "
                     "(use symmem.torch.empty or get_mem_pool)")


def is_symmetric(t):
    """Whether `t` lies in a symmetric buffer of a live communicator (so the collectives read it in place)."""
    try:
        _find_buffer(t)
        return True
    except ValueError:
        return False


def _allocator_releases_lock(conf=None):
    """Whether PyTorch's caching allocator releases its per-GPU lock around its device allocations
    (PYTORCH_CUDA_ALLOC_CONF, or PYTORCH_ALLOC_CONF, has release_lock_on_cudamalloc:True)."""
    import os
    if conf is None:
        conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or os.environ.get("PYTORCH_ALLOC_CONF") or ""
    for item in conf.replace(" ", "").split(","):
        key, _, value = item.partition(":")
        if key == "release_lock_on_cudamalloc":
            return value.lower() == "true"
    return False


def get_mem_pool(group):
    """A torch.cuda.MemPool whose memory comes from symmem_alloc on `group`'s communicator (one pool per
    communicator, made on first use). Needs the op library. Tensors allocated inside
    `torch.cuda.use_mem_pool(pool)` are symmetric. Release them (and the pool) before closing the
    communicator.

    Not for ranks that are threads of one process on one GPU (communicators_in_process with a repeated
    device): PyTorch's caching allocator by default holds its lock of that GPU while the pool allocates, and
    a symmetric allocation waits for every rank, so a second rank of the GPU cannot join it (the allocation
    fails at the bootstrap timeout). That case raises RuntimeError here, unless PYTORCH_CUDA_ALLOC_CONF has
    release_lock_on_cudamalloc:True (the lock is then released there); use symmem.torch.empty instead."""
    comm = resolve(group)
    if comm._colocated and not _allocator_releases_lock():
        raise RuntimeError(
            f"symmem: get_mem_pool: rank {comm.rank} shares {comm.device} with rank(s) "
            f"{', '.join(map(str, comm._colocated))} of this process; PyTorch's caching allocator allocates for "
            f"one GPU under one lock and a symmetric allocation waits for every rank, so the ranks' pool "
            f"allocations would wait for each other. Use symmem.torch.empty, one process per rank, or "
            f"PYTORCH_CUDA_ALLOC_CONF=release_lock_on_cudamalloc:True")
    if comm._pool is None:
        slot = _ops.pool_bind(comm.comm)
        try:
            alloc = torch.cuda.memory.CUDAPluggableAllocator(_ops.op_library(), f"symmem_torch_pool_alloc_{slot}",
                                                             f"symmem_torch_pool_free_{slot}")
            comm._pool = torch.cuda.MemPool(alloc.allocator())
        except Exception:
            _ops.pool_unbind(slot)
            raise
        comm._pool_slot = slot
    return comm._pool


class NcclRegistration:
    """A symmetric buffer registered with an NCCL communicator; deregister() (or garbage collection of the
    buffer's communicator) ends it."""

    def __init__(self, nccl_comm, handle, window):
        self.nccl_comm, self.handle, self.window = nccl_comm, handle, window

    def deregister(self):
        if self.handle:
            fn = _c.symmem_nccl_window_deregister if self.window else _c.symmem_nccl_deregister
            symmem.check(fn(self.nccl_comm, self.handle))
            self.handle = None


def nccl_comm_of(nccl_group, device):
    """The ncclComm_t (an integer) of torch ProcessGroupNCCL `nccl_group` on `device`. NCCL makes it lazily:
    run one collective on the group first."""
    backend = nccl_group._get_backend(torch.device(device))
    if not hasattr(backend, "_comm_ptr"):
        raise RuntimeError(f"symmem: {type(backend).__name__} does not expose its NCCL communicator (_comm_ptr)")
    ptr = backend._comm_ptr()
    if not ptr:
        raise RuntimeError("symmem: the NCCL communicator is not created yet: run one collective on the group")
    return ptr


def register_with_nccl(t, nccl_group, window=False, win_flags=1):
    """Registers the symmetric buffer holding `t` with the NCCL communicator of `nccl_group` (a torch
    ProcessGroupNCCL of the same ranks and devices; NCCL must run with NCCL_CUMEM_ENABLE=1), so NCCL's
    collectives on it skip their copies: ncclCommRegister (local), or with window=True
    ncclCommWindowRegister (collective, NCCL >= 2.27; win_flags 1 = NCCL_WIN_COLL_SYMMETRIC). Returns an
    NcclRegistration; SymmemError where NCCL refuses."""
    buf, comm = _find_buffer(t)
    nccl = ctypes.c_void_p(nccl_comm_of(nccl_group, comm.device))
    out = ctypes.c_void_p()
    if window:
        symmem.check(_c.symmem_nccl_window_register(buf, nccl, win_flags, ctypes.byref(out)))
    else:
        symmem.check(_c.symmem_nccl_register(buf, nccl, ctypes.byref(out)))
    return NcclRegistration(nccl, out, window)

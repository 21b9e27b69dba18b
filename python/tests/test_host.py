"""The Python binding over the host backend (no GPU): unique ids, a user allgather, allocation and peer
mappings across real processes, ranks of one process, errors surfacing as SymmemError, and arguments checked
before they reach ctypes."""
import ctypes
import multiprocessing as mp
import threading

import pytest

import symmem


def _rank_main(rank, nranks, uid, barrier, q):
    try:
        comm = symmem.Comm(nranks, rank, unique_id=uid, backend=symmem.BACKEND_HOST, timeout_ms=20000)
        assert comm.rank == rank and comm.size == nranks and comm.device == -1
        buf = comm.alloc(10007)
        ctypes.memset(buf.ptr, 65 + rank, buf.size)
        barrier.wait()
        for peer in range(nranks):
            data = ctypes.string_at(buf.peer_ptr(peer), buf.size)
            assert data == bytes([65 + peer]) * buf.size, f"peer {peer} content wrong"
            assert ctypes.string_at(buf.signal_ptr(peer), 64) == b"\0" * 64
        barrier.wait()
        buf.free()
        buf.free()  # idempotent
        try:
            comm.alloc(0)
            raise AssertionError("size 0 accepted")
        except symmem.SymmemError as e:
            assert e.name == "SYMMEM_INVALID_ARGUMENT" and "size 0" in str(e), str(e)
        comm.destroy()
        q.put((rank, "ok"))
    except Exception as e:  # noqa: BLE001 - reported to the parent
        q.put((rank, repr(e)))


def test_version():
    assert symmem.version() == (0, 1, 0)


def test_algorithm_names():
    names = symmem.algo_names()
    assert names[0] == "auto" and "twoshot_lamport" in names
    for value, name in enumerate(names):
        assert symmem.algo(name) == value
        assert symmem.algo(value) == value
    for bad in ("no_such_algo", len(names), -1):
        with pytest.raises(symmem.SymmemError) as e:
            symmem.algo(bad)
        assert e.value.name == "SYMMEM_INVALID_ARGUMENT"


def test_unique_id():
    a, b = symmem.new_unique_id(), symmem.new_unique_id()
    assert len(a) == 128 and a != b
    with pytest.raises(symmem.SymmemError) as e:
        symmem.Comm(2, 0, unique_id="nonsense", backend=symmem.BACKEND_HOST)
    assert e.value.name == "SYMMEM_INVALID_ARGUMENT"
    assert isinstance(e.value, RuntimeError)


@pytest.mark.parametrize("n", [3, 16])  # 16: SYMMEM_MAX_RANKS, every pair of the bootstrap mesh and mappings
def test_processes(n):
    ctx = mp.get_context("fork")
    uid = symmem.new_unique_id()
    barrier, q = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_rank_main, args=(r, n, uid, barrier, q)) for r in range(n)]
    for p in procs:
        p.start()
    results = dict(q.get(timeout=60) for _ in range(n))
    for p in procs:
        p.join(timeout=30)
    assert results == {r: "ok" for r in range(n)}


def test_user_allgather():
    # Threads stand in for processes; the allgather is a Python callable, as with a PyTorch Store.
    n = 2
    slots, bar = [None] * n, threading.Barrier(n)
    out, errors = [None] * n, []

    def make_allgather(rank):
        def allgather(data):
            slots[rank] = data
            bar.wait()
            res = list(slots)
            bar.wait()
            return res
        return allgather

    def run(rank):
        try:
            comm = symmem.Comm(n, rank, allgather=make_allgather(rank), backend=symmem.BACKEND_HOST)
            buf = comm.alloc(4096)
            out[rank] = (buf.peer_ptr(0), buf.peer_ptr(1))
            comm.destroy()
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=run, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert all(o is not None for o in out)


def test_init_all_and_group():
    comms = symmem.Comm.init_all(3, backend=symmem.BACKEND_HOST, timeout_ms=20000)
    try:
        assert [c.rank for c in comms] == [0, 1, 2] and all(c.size == 3 for c in comms)
        assert all(c.handle for c in comms)
        with symmem.group():
            bufs = [c.alloc(8192) for c in comms]
        for r, b in enumerate(bufs):
            ctypes.memset(b.ptr, 48 + r, b.size)
        for b in bufs:  # every rank sees every peer's part
            for peer in range(3):
                assert ctypes.string_at(b.peer_ptr(peer), 16) == bytes([48 + peer]) * 16
        with pytest.raises(ValueError):
            symmem.Comm.init_all(2, devices=[0])
    finally:
        for c in comms:
            c.destroy()
    assert all(c.handle == 0 for c in comms)


# ---- arguments checked before ctypes ---------------------------------------------------------------------
# ctypes keeps only an integer's low bits without a word: alloc(2**64 + 4096) allocated 4096 bytes,
# peer_ptr(2**32) gave rank 0's pointer, Comm(2**32 + 1, 2**32) made a 1-rank communicator, algo(2**32 + 3) was
# algorithm 3. And a unique_id of the wrong type gave an AttributeError.

BIG = 1 << 64


@pytest.fixture
def comm():
    c = symmem.Comm(1, 0, unique_id=symmem.new_unique_id(), backend=symmem.BACKEND_HOST, timeout_ms=20000)
    yield c
    c.destroy()


def test_alloc_size_out_of_range(comm):
    for bad in (BIG + 4096, BIG, -1):
        with pytest.raises(OverflowError, match="nbytes"):
            comm.alloc(bad)
    with pytest.raises(TypeError, match="nbytes must be an integer"):
        comm.alloc(4096.0)
    buf = comm.alloc(4096)  # the comm is untouched by the refusals
    assert buf.size == 4096


def test_peer_out_of_range(comm):
    buf = comm.alloc(4096)
    assert buf.peer_ptr(0) == buf.ptr
    for bad in (1 << 32, -(1 << 31) - 1):
        with pytest.raises(OverflowError, match="peer"):
            buf.peer_ptr(bad)
        with pytest.raises(OverflowError, match="peer"):
            buf.signal_ptr(bad)
    assert buf.peer_ptr(1) is None  # in C's range, out of the communicator's: NULL, as in C
    buf.free()
    assert buf.ptr is None


def test_ranks_and_options_out_of_range():
    uid = symmem.new_unique_id()
    with pytest.raises(OverflowError, match="nranks"):
        symmem.Comm((1 << 32) + 1, 1 << 32, unique_id=uid, backend=symmem.BACKEND_HOST)
    with pytest.raises(OverflowError, match="rank"):
        symmem.Comm(1, 1 << 32, unique_id=uid, backend=symmem.BACKEND_HOST)
    for kw in ({"device": 1 << 32}, {"timeout_ms": 1 << 31}, {"backend": (1 << 32) + symmem.BACKEND_HOST},
               {"placement": -(1 << 40)}):
        with pytest.raises(OverflowError, match=next(iter(kw))):
            symmem.Comm(1, 0, unique_id=uid, **{"backend": symmem.BACKEND_HOST, **kw})
    with pytest.raises(OverflowError, match="nranks"):
        symmem.Comm.init_all(1 << 32, backend=symmem.BACKEND_HOST)
    with pytest.raises(OverflowError, match=r"devices\[1\]"):
        symmem.Comm.init_all(2, devices=[0, 1 << 32], backend=symmem.BACKEND_HOST)


def test_algorithm_out_of_range():
    assert symmem.algo(3) == 3
    for bad in ((1 << 32) + 3, -(1 << 40)):
        with pytest.raises(symmem.SymmemError) as e:
            symmem.algo(bad)
        assert e.value.name == "SYMMEM_INVALID_ARGUMENT" and str(bad) in str(e.value)
    with pytest.raises(TypeError, match="algo must be a name or an integer"):
        symmem.algo(3.0)


def test_collective_arguments_out_of_range(comm):
    buf = comm.alloc(4096)
    good = dict(send_ptr=buf.ptr, recv_ptr=buf.ptr, count=16, dtype=symmem.FLOAT32)
    for name, bad in (("send_ptr", BIG + buf.ptr), ("recv_ptr", -1), ("count", BIG + 16), ("dtype", 1 << 32),
                      ("op", (1 << 32) + symmem.OP_SUM), ("stream", BIG)):
        with pytest.raises(OverflowError, match=name):
            comm.all_reduce(**{**good, name: bad})
    with pytest.raises(OverflowError, match="count"):
        comm.reduce_scatter(buf.ptr, buf.ptr, -16, symmem.FLOAT32)
    with pytest.raises(OverflowError, match="recv_ptr"):
        comm.all_gather(buf.ptr, BIG, 16, symmem.FLOAT32)
    with pytest.raises(OverflowError, match="hidden"):
        comm.all_reduce_add_rmsnorm(buf.ptr, buf.ptr, buf.ptr, buf.ptr, 1, BIG + 64, 1e-6, symmem.BFLOAT16)
    with pytest.raises(OverflowError, match="stream"):
        comm.barrier(stream=-1)
    with pytest.raises(TypeError, match="send_ptr must be an integer"):
        comm.all_reduce(ctypes.c_void_p(buf.ptr), buf.ptr, 16, symmem.FLOAT32)


def test_unique_id_of_the_wrong_type():
    for bad in (123, 1.5, ["id"]):
        with pytest.raises(TypeError, match="unique_id must be the string symmem.new_unique_id"):
            symmem.Comm(1, 0, unique_id=bad, backend=symmem.BACKEND_HOST)
    uid = symmem.new_unique_id()
    c = symmem.Comm(1, 0, unique_id=uid.encode(), backend=symmem.BACKEND_HOST)  # the same id as bytes
    c.destroy()
    with pytest.raises(TypeError, match="allgather must be a callable"):
        symmem.Comm(1, 0, allgather=42, backend=symmem.BACKEND_HOST)


def test_allgather_failure_names_its_cause():
    # torch.distributed.all_gather_object raises this where numpy is missing: the cause, not only "the
    # allgather failed", must lead the message.
    def allgather(data):
        raise RuntimeError("Numpy is not available")

    with pytest.raises(symmem.SymmemError) as info:
        symmem.Comm(2, 0, allgather=allgather, backend=symmem.BACKEND_HOST)
    first = str(info.value).splitlines()[0]
    assert first.startswith("SYMMEM_PEER_FAILURE: the allgather callback raised RuntimeError: Numpy is not "
                            "available on rank 0 of 2"), first
    assert isinstance(info.value.__cause__, RuntimeError)


def test_allgather_returning_the_wrong_parts_says_what_it_got():
    with pytest.raises(symmem.SymmemError, match=r"ValueError: it returned 1 parts of \[\d+\] bytes; want 2 parts"):
        symmem.Comm(2, 1, allgather=lambda data: [data], backend=symmem.BACKEND_HOST)


def test_missing_dependency_of_the_library_comes_first(monkeypatch, tmp_path):
    # A libsymmem that exists but needs a library the system lacks (a source build without libnuma):
    # the loader's words lead the message, then what to install.
    from symmem import _lib

    lib = tmp_path / "libsymmem.so.0"
    lib.write_bytes(b"")
    cause = "libnuma.so.1: cannot open shared object file: No such file or directory"

    def fake_cdll(path, *args, **kwargs):
        raise OSError(cause if path == str(lib) else f"{path}: cannot open shared object file")

    monkeypatch.setattr(_lib, "_candidates", lambda: iter([str(lib), "libsymmem.so.0"]))
    monkeypatch.setattr(_lib.ctypes, "CDLL", fake_cdll)
    with pytest.raises(OSError) as info:
        _lib._load()
    first = str(info.value).splitlines()[0]
    assert first.startswith(cause + ": needed by " + str(lib)), first
    assert "install libnuma1 (Debian/Ubuntu) or numactl-libs (RHEL/Fedora)" in first
    assert "scripts/run.sh" not in first, "a developer's hint where a user needs a package"

    monkeypatch.setattr(_lib, "_candidates", lambda: iter(["libsymmem.so.0"]))
    with pytest.raises(OSError, match="^libsymmem not found: reinstall symmem"):
        _lib._load()


def test_missing_device_fails_before_the_rendezvous():
    """A rank whose driver or device is missing says so at once: rank 1 never comes, and the status is the
    cause (no driver: NO_DEVICE; device 999 of a machine with GPUs: INVALID_ARGUMENT), never the TIMEOUT a
    rank that waited for its peer first would get after timeout_ms."""
    uid = symmem.new_unique_id()
    with pytest.raises(symmem.SymmemError) as e:
        symmem.Comm(2, 0, unique_id=uid, device=999, timeout_ms=60000)
    assert e.value.name in ("SYMMEM_NO_DEVICE", "SYMMEM_INVALID_ARGUMENT"), e.value
    assert "driver" in str(e.value) or "does not exist" in str(e.value), e.value

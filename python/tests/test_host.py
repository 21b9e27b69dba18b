"""The Python binding over the host backend (no GPU): unique ids, a user allgather, allocation and peer
mappings across real processes, ranks of one process, and errors surfacing as SymmemError."""
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


def test_three_processes():
    ctx = mp.get_context("fork")
    uid = symmem.new_unique_id()
    n = 3
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

"""The Python binding over the host backend (no GPU): unique ids, a user allgather, allocation and
peer mappings across real processes, and errors surfacing as SymmemError."""
import ctypes
import multiprocessing as mp
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import symmem  # noqa: E402


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


class HostBackend(unittest.TestCase):
    def test_version(self):
        self.assertEqual(len(symmem.version()), 3)

    def test_algorithm_names(self):
        names = symmem.algo_names()
        self.assertEqual(names[0], "auto")
        self.assertIn("twoshot_lamport", names)
        for value, name in enumerate(names):
            self.assertEqual(symmem.algo(name), value)
            self.assertEqual(symmem.algo(value), value)
        for bad in ("no_such_algo", len(names), -1):
            with self.assertRaises(symmem.SymmemError) as cm:
                symmem.algo(bad)
            self.assertEqual(cm.exception.name, "SYMMEM_INVALID_ARGUMENT")

    def test_unique_id(self):
        a, b = symmem.new_unique_id(), symmem.new_unique_id()
        self.assertEqual(len(a), 128)
        self.assertNotEqual(a, b)
        with self.assertRaises(symmem.SymmemError) as cm:
            symmem.Comm(2, 0, unique_id="nonsense", backend=symmem.BACKEND_HOST)
        self.assertEqual(cm.exception.name, "SYMMEM_INVALID_ARGUMENT")

    def test_three_processes(self):
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
        self.assertEqual(results, {r: "ok" for r in range(n)})

    def test_user_allgather(self):
        # Threads stand in for processes; the allgather is a Python callable, as with a PyTorch Store.
        import threading
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
        self.assertEqual(errors, [])
        self.assertTrue(all(o is not None for o in out))


if __name__ == "__main__":
    unittest.main()

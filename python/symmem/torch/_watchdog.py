"""The watchdog: a daemon thread that notices a communicator's asynchronous error (a collective timed out on
the device, a peer failed) without the application polling.

Why: an eager call already raises once the communicator is in its error state (the C API checks it on
entry), but a replayed CUDA graph makes no call that could raise, so a serving engine would go on with the
outputs of failed collectives. As torch's ProcessGroupNCCL does, the watchdog polls every live communicator
(symmem_comm_get_async_error: non-blocking, it reads host-mapped status) and, on the first error:
  - logs it at CRITICAL on the "symmem" logger (stderr when logging is not configured) with the C detail: the rank, the operation's
    sequence number, the missing peer;
  - marks the communicator, so that its next call raises SymmemError (a RuntimeError) at once;
  - then applies the error handling: "abort" (the default: os.abort(), so that the job's launcher sees the
    failure and restarts, as ProcessGroupNCCL's TORCH_NCCL_ASYNC_ERROR_HANDLING default does), "raise"
    (only the two steps above; graph replays then produce the library's documented post-error output), or a
    callable handler(communicator, error) run on the watchdog thread.

Settings: SYMMEM_TORCH_ERROR_HANDLING=abort|raise (or symmem.torch.set_error_handling(policy_or_callable));
SYMMEM_TORCH_WATCHDOG_MS, the polling period (default 100; 0 runs no thread: errors then surface only at
the next eager call).

Why not the C library's watcher (symmem_comm_set_error_handler, comm/watch.c): it runs handlers on a thread
of its own, where a Python handler would be a ctypes callback taking the GIL on a foreign thread (unsafe once
the interpreter is finalizing), and close() destroys a communicator under this watchdog's lock while the C
side waits for that communicator's running handler. The error state read here is the C library's all the
same. The default differs from SYMMEM_ON_ERROR's (report) because a library never ends its process on its
own, while a torch job's launcher restarts a failed rank (docs/integrations.md).
"""
import atexit
import logging
import os
import sys
import threading
import weakref

from symmem import SymmemError, _lib

log = logging.getLogger("symmem")

POLICIES = ("abort", "raise")


def _env_policy():
    from symmem import _settings  # the table's rule: a refused value warns and gives the default

    return _settings.value("SYMMEM_TORCH_ERROR_HANDLING", log).lower()


def _env_period_ms():
    from symmem import _settings

    return int(_settings.value("SYMMEM_TORCH_WATCHDOG_MS", log))


class Watchdog:
    def __init__(self):
        self.lock = threading.Lock()  # held while polling a communicator and while one is destroyed
        self.comms = {}               # id -> weakref to SymmemCommunicator
        self.handling = _env_policy()
        self.period_s = _env_period_ms() / 1000.0
        self._wake = threading.Event()
        self._thread = None
        self._stop = False

    def add(self, comm):
        with self.lock:
            self.comms[id(comm)] = weakref.ref(comm)
            if self.period_s > 0 and (self._thread is None or not self._thread.is_alive()):
                self._stop = False
                self._thread = threading.Thread(target=self._run, name="symmem-watchdog", daemon=True)
                self._thread.start()

    def remove(self, comm):
        """Called with self.lock held by the communicator's close()."""
        self.comms.pop(id(comm), None)

    def stop(self):
        self._stop = True
        self._wake.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout=5)

    def poll_once(self):
        """Checks every communicator once; returns the (communicator, error) pairs found (also used by tests)."""
        found = []
        c = _lib.lib()
        with self.lock:
            for key, ref in list(self.comms.items()):
                comm = ref()
                if comm is None:
                    del self.comms[key]
                    continue
                handle = comm._handle_for_watchdog()
                if not handle:
                    continue
                st = c.symmem_comm_get_async_error(handle)
                if st != 0:
                    err = SymmemError(st, c.symmem_last_error().decode(errors="replace"))
                    del self.comms[key]  # reported once
                    comm._set_async_error(err)
                    found.append((comm, err))
        for comm, err in found:
            self._handle(comm, err)
        return found

    def _handle(self, comm, err):
        msg = (f"symmem: communicator '{comm.group_name}' (rank {comm.rank} of {comm.world_size}, {comm.device}) "
               f"failed: {err}. Its next call raises; outputs of CUDA-graph replays after the failure are not "
               f"valid.")
        handling = self.handling
        if callable(handling):
            log.critical("%s Calling the error handler.", msg)
            try:
                handling(comm, err)
            except Exception:  # noqa: BLE001 - a failing handler must not kill the watchdog
                log.exception("symmem: the error handler raised")
            return
        if handling == "raise":
            log.critical("%s (SYMMEM_TORCH_ERROR_HANDLING=raise: the process goes on.)", msg)
            return
        log.critical("%s Aborting the process (SYMMEM_TORCH_ERROR_HANDLING=raise keeps it running).", msg)
        for h in logging.getLogger().handlers + log.handlers:
            try:
                h.flush()
            except Exception:  # noqa: BLE001
                pass
        sys.stderr.flush()
        os.abort()

    def _run(self):
        while not self._stop:
            self._wake.wait(self.period_s)
            if self._stop:
                return
            try:
                self.poll_once()
            except Exception:  # noqa: BLE001 - the watchdog never dies of a bug; it says so
                log.exception("symmem: watchdog poll failed")


_watchdog = Watchdog()


def watchdog():
    return _watchdog


def set_error_handling(handling):
    """What the watchdog does after logging an asynchronous error: "abort" (default), "raise", or a callable
    handler(communicator, error) run on the watchdog thread. Returns the previous setting."""
    if not callable(handling) and handling not in POLICIES:
        raise ValueError(f"error handling must be one of {POLICIES} or a callable, not {handling!r}")
    prev, _watchdog.handling = _watchdog.handling, handling
    return prev


def _after_fork_in_child():
    # Threads do not survive fork, and neither do CUDA communicators: start clean.
    global _watchdog
    _watchdog = Watchdog()


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(lambda: _watchdog.stop())

"""Ranks as processes or threads for the Python tests, and what they say when they do not finish.

A rank that hangs must fail its test with its stack, and a rank that dies must fail it at once with its exit
status, never leave the parent waiting on a queue until pytest's own timeout cuts the run short with nothing
to show. So:
  - each process rank calls `child_setup(stack_dir, rank)` first: faulthandler prints its Python stacks (every
    thread) on a crash, and into `stack_dir/rank<r>.txt` on SIGUSR1;
  - the parent collects results with `collect`, which watches the processes while it waits: a process that
    exited without reporting fails the test naming the rank and its exit status; then, or at the deadline, the
    ranks that have not reported get SIGUSR1, their stacks go into the failure message, and they are killed
    (the caller's `stop` grace is only for ranks that reported);
  - thread ranks: `dump_threads()` gives every thread's stack for the failure message.
The deadline comes from the caller, or SYMMEM_TEST_RANK_DEADLINE_S; it must stay below pytest's --timeout
(scripts/test_python.sh sets both) so that this harness, not pytest, reports the hang."""
import faulthandler
import os
import queue
import signal
import sys
import tempfile
import time

DEFAULT_DEADLINE_S = 120.0


def deadline_s(default=DEFAULT_DEADLINE_S):
    v = os.environ.get("SYMMEM_TEST_RANK_DEADLINE_S")
    return float(v) if v else float(default)


def child_setup(stack_dir, rank):
    """In a rank process, before anything that could hang: its stacks on a crash (stderr) and on SIGUSR1 (a file
    the parent reads). The file object stays open for the life of the process, as faulthandler requires."""
    faulthandler.enable(all_threads=True)
    # A forked rank cannot use the OpenMP thread pool its parent started (libgomp is not fork-safe): torch's first
    # parallel op there (a fill or randn of a large tensor) waits forever. One thread runs torch's ops inline.
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)
    if stack_dir:
        f = open(os.path.join(stack_dir, f"rank{rank}.txt"), "w")  # noqa: SIM115 - kept open on purpose
        faulthandler.register(signal.SIGUSR1, file=f, all_threads=True, chain=False)
        child_setup._file = f


def _exit_text(code):
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def collect(procs, q, deadline, stack_dir, what="rank"):
    """Results put on `q` as (rank, value, ...) by procs[rank]; returns ({rank: item}, [error texts]).
    Stops early when a process exits without reporting (after a short grace for its queued result)."""
    n = len(procs)
    results, errors = {}, []
    end = time.monotonic() + deadline
    exited_at = {}
    while len(results) < n:
        try:
            item = q.get(timeout=0.5)
            results[item[0]] = item
            continue
        except queue.Empty:
            pass
        now = time.monotonic()
        for r, p in enumerate(procs):
            if r in results or p.exitcode is None:
                continue
            # its result may still be in the queue's pipe: give it a moment before calling it lost
            first = exited_at.setdefault(r, now)
            if now - first > 5.0:
                errors.append(f"{what} {r} exited ({_exit_text(p.exitcode)}) without reporting a result")
        if errors:
            # the ranks still running wait for the dead one: where they wait is the rest of the story
            waiting = [r for r, p in enumerate(procs) if r not in results and p.is_alive()]
            if waiting:
                errors.append(f"{what}s {waiting} were still running; their Python stacks follow")
                errors.extend(dump_processes(procs, waiting, stack_dir, what))
            break
        if now > end:
            missing = [r for r in range(n) if r not in results]
            errors.append(f"{what}s {missing} gave no result within {deadline:.0f} s; their Python stacks follow")
            errors.extend(dump_processes(procs, missing, stack_dir, what))
            break
    # A rank without a result will not finish by itself (it waits for a peer that failed, or hangs): its
    # stacks are taken, so it is killed now, not waited for by the caller's stop() grace, which is for the
    # teardown of ranks that reported (a 16-rank run's can take a minute under MPS).
    for r, p in enumerate(procs):
        if r not in results and p.is_alive():
            p.kill()
            p.join(5)
    return results, errors


def dump_processes(procs, ranks, stack_dir, what="rank"):
    """SIGUSR1 to the ranks' processes, then their stack files' text (one entry per rank)."""
    for r in ranks:
        if procs[r].is_alive():
            try:
                os.kill(procs[r].pid, signal.SIGUSR1)
            except OSError:
                pass
    time.sleep(2.0)
    out = []
    for r in ranks:
        path = os.path.join(stack_dir, f"rank{r}.txt") if stack_dir else None
        text = ""
        if path and os.path.exists(path):
            with open(path) as f:
                text = f.read().strip()
        state = "alive" if procs[r].is_alive() else _exit_text(procs[r].exitcode)
        out.append(f"--- {what} {r} (pid {procs[r].pid}, {state}):\n{text or '(no stack written)'}")
    return out


def stop(procs, grace=10.0):
    """Join every process for up to `grace` s in all, then kill what is left."""
    end = time.monotonic() + grace
    for p in procs:
        p.join(max(0.0, end - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(5)


def dump_threads():
    """Every thread's Python stack in this process, as text."""
    with tempfile.TemporaryFile(mode="w+") as f:
        faulthandler.dump_traceback(file=f, all_threads=True)
        f.seek(0)
        return f.read()


__all__ = ["child_setup", "collect", "deadline_s", "dump_processes", "dump_threads", "stop"]

"""The test harness's promise (rank_harness.py): a rank process that dies fails its test at once with its exit
status, and one that hangs fails it at the deadline with its Python stack, instead of the parent waiting on a
queue until pytest's timeout. CPU only."""
import multiprocessing as mp
import os
import signal
import tempfile
import threading
import time

import rank_harness


def _rank(rank, q, stack_dir, mode):
    rank_harness.child_setup(stack_dir, rank)
    if rank == 1 and mode in ("die", "die_leaving_a_waiter"):
        os._exit(3)
    if (rank == 1 and mode == "hang") or (rank == 0 and mode == "die_leaving_a_waiter"):
        _stuck_in_a_named_frame()
    q.put((rank, "ok"))


def _stuck_in_a_named_frame():
    while True:
        time.sleep(0.05)


def _run(mode, deadline):
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    with tempfile.TemporaryDirectory() as d:
        procs = [ctx.Process(target=_rank, args=(r, q, d, mode)) for r in range(2)]
        for p in procs:
            p.start()
        t0 = time.monotonic()
        try:
            got, errors = rank_harness.collect(procs, q, deadline, d)
            codes = [p.exitcode for p in procs]  # as collect left them, before stop() kills what remains
        finally:
            rank_harness.stop(procs, grace=2)
        return got, errors, time.monotonic() - t0, codes


def test_every_rank_reports():
    got, errors, _, _ = _run("ok", 30)
    assert errors == [] and sorted(got) == [0, 1]


def test_a_dead_rank_is_named_with_its_exit_status_before_the_deadline():
    got, errors, took, _ = _run("die", 600)
    assert 0 in got
    assert any("rank 1 exited (exit status 3)" in e for e in errors), errors
    assert took < 60, took  # the deadline is 600 s: the death was noticed, not waited out


def test_a_hung_rank_fails_at_the_deadline_with_its_stack():
    got, errors, _, codes = _run("hang", 3)
    text = "\n".join(errors)
    assert "ranks [1] gave no result within 3 s" in text, text
    assert "_stuck_in_a_named_frame" in text, text
    assert list(got) == [0]
    # killed by the harness once its stack was taken, not left to the caller's join
    assert codes[1] == -signal.SIGKILL, codes


def test_ranks_left_waiting_for_a_dead_one_are_shown_and_killed():
    """A rank that dies leaves its peers waiting in a collective: the failure says where they wait, and they
    are killed at once, since the caller's stop() grace (60 s for 16 ranks' teardown) would only wait them out."""
    got, errors, _, codes = _run("die_leaving_a_waiter", 600)
    text = "\n".join(errors)
    assert got == {}
    assert "rank 1 exited (exit status 3)" in text, text
    assert "ranks [0] were still running" in text and "_stuck_in_a_named_frame" in text, text
    assert codes == [-signal.SIGKILL, 3], codes


def test_thread_stacks_name_the_waiting_function():
    stop = threading.Event()

    def _waiting_thread_body():
        stop.wait(30)

    t = threading.Thread(target=_waiting_thread_body)
    t.start()
    try:
        assert "_waiting_thread_body" in rank_harness.dump_threads()
    finally:
        stop.set()
        t.join()


def _report_cache(q):
    q.put(os.environ.get("SYMMEM_TOPO_CACHE_DIR"))


def test_ranks_write_their_measurements_into_the_sessions_cache_folder():
    """conftest.py points SYMMEM_TOPO_CACHE_DIR at a folder of the session's own, and a rank started the way the
    GPU tests start theirs (spawn) inherits it: the tables the tests autotune never reach ~/.cache/symmem."""
    ours = os.environ.get("SYMMEM_TOPO_CACHE_DIR")
    assert ours, "conftest.py sets SYMMEM_TOPO_CACHE_DIR"
    home = os.path.join(os.path.expanduser("~"), ".cache", "symmem")
    xdg = os.path.join(os.environ.get("XDG_CACHE_HOME", home), "symmem")
    assert os.path.realpath(ours) not in (os.path.realpath(home), os.path.realpath(xdg))
    assert os.path.isdir(ours) and (os.stat(ours).st_mode & 0o077) == 0, "a private folder, as the library asks"
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_report_cache, args=(q,))
    p.start()
    try:
        assert q.get(timeout=60) == ours
    finally:
        p.join(10)

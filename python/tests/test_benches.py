"""The PyTorch benchmarks in bench/ import, parse their arguments and stop with the skip code (77) and a
message where no GPU is visible: CI runs nothing else of them, so a broken import or a helper they lost
shows here rather than in the next GPU session."""
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

BENCH = Path(__file__).resolve().parent.parent.parent / "bench"
SCRIPTS = ["torch_ops_bench.py", "torch_fused_bench.py", "torch_allreduce_bench.py", "torch_wire_bench.py",
           "op_sweep.py"]


def _bench_module(name):
    """bench/<name>.py imported as a module (bench/ is no package); skips where the source tree is not here."""
    if not (BENCH / f"{name}.py").exists():
        pytest.skip(f"{BENCH / (name + '.py')} is not here (the package is tested outside its source tree)")
    sys.path.insert(0, str(BENCH))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCH))


@pytest.mark.parametrize("script", SCRIPTS)
def test_no_gpu_is_a_skip_with_a_message(script, tmp_path):
    if not (BENCH / script).exists():
        pytest.skip(f"{BENCH / script} is not here (the package is tested outside its source tree)")
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    r = subprocess.run([sys.executable, str(BENCH / script), "--nranks", "2"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 77, (r.returncode, r.stdout, r.stderr)
    assert "no CUDA device; nothing measured" in r.stderr, r.stderr


def test_gpus_refuse_asks_for_mps_when_ranks_share_a_gpu(monkeypatch):
    import torch
    tsu = _bench_module("torch_symm_util")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.delenv("CUDA_MPS_PIPE_DIRECTORY", raising=False)
    code, message = tsu.gpus_refuse(2)
    assert code == 2 and "need MPS" in message
    assert tsu.gpus_refuse(1) is None
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", "/tmp/mps")
    assert tsu.gpus_refuse(2) is None
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    assert tsu.gpus_refuse(1)[0] == 77


def test_wire_bench_raises_the_workspace_to_take_its_largest_size():
    """torch_wire_bench.py's workspace: the smallest power of two whose two-shot message limit (plan.c's layout:
    a data half over n + 1 slots) takes the largest size; the default 64 MiB where that suffices."""
    twb = _bench_module("torch_wire_bench")
    assert twb.workspace_for(4 << 20, 8) == 64 << 20
    assert twb.workspace_for(64 << 20, 8) == 256 << 20   # a half of 79.8 MiB: 70.9 MiB at 8 ranks
    assert twb.workspace_for(64 << 20, 2) == 512 << 20   # 2 ranks: two thirds of the half
    assert twb.workspace_for(56 << 20, 8) == 256 << 20   # 4096 x 7168 bf16


def test_op_sweep_reference_catches_what_is_wrong_and_only_that():
    """op_sweep.py's check of AUTO: every rank regenerates the same float64 sum of every rank's input, a
    result summed in fp32 from the bf16 inputs and rounded to bf16 passes, and each element pushed one unit
    off is counted, at 2, 5 and 16 ranks."""
    import torch
    op_sweep = _bench_module("op_sweep")
    dt = torch.bfloat16
    for world in (2, 5, 16):
        for size in (1024, 12288, 6150):
            n = size // 2
            per_rank = [op_sweep.inputs_and_sum(size, n, world, r, dt, "cpu") for r in range(world)]
            ref = per_rank[0][1]
            assert all(torch.equal(s, ref) for _, s in per_rank), "ranks disagree on the reference"
            assert not torch.equal(per_rank[0][0], per_rank[1][0]), "two ranks got the same input"
            fp32 = torch.zeros(n)
            for x, _ in per_rank:
                assert x.dtype == dt and x.numel() == n
                fp32 += x.float()
            good = fp32.to(dt)
            assert op_sweep.wrong_count(good, ref, world) == 0, (world, size)
            bad = good.clone()
            bad[::97] += 1
            assert op_sweep.wrong_count(bad, ref, world) == len(range(0, n, 97)), (world, size)


def test_comm_checks_cpu_times_every_entry_there_is(capsys):
    """bench/comm_checks_cpu.py runs without a GPU: a row per entry and call form, or 77 where none is built."""
    bench = _bench_module("comm_checks_cpu")
    from symmem.torch import _ops

    rc = bench.main(["-n", "50", "-r", "1", "--count", "64"])  # small: no thread pool here (see test_fast_entry)
    out = capsys.readouterr().out
    if _ops.compiled_entry()[1] is None:
        assert rc == 77
        return
    assert rc == 0
    for form in ("(x, out=y)", "(x)", "(x, out=x)"):
        assert f"fast.all_reduce{form}" in out
        assert (f"fast_torch.all_reduce{form}" in out) == (_ops.torch_entry()[1] is not None)


def test_op_sweep_buffer_sets_give_each_operation_of_a_graph_its_own_set():
    """op_sweep.py --buffers K: a graph of n captured calls works on set j mod K in its j-th operation, every
    implementation through the same sets, and the sets are disjoint views at the same offsets on every rank."""
    import torch
    op_sweep = _bench_module("op_sweep")
    base = torch.arange(40)
    sets = op_sweep.buffer_sets(base, 3, 10, 7)
    assert [s[0].item() for s in sets] == [0, 10, 20] and all(len(s) == 7 for s in sets)
    assert all(s.data_ptr() == base.data_ptr() + i * 10 * base.element_size() for i, s in enumerate(sets))
    seen = []
    outs = op_sweep.buffer_sets(torch.zeros(40), 3, 10, 7)
    call = op_sweep.cycling(lambda x, out: seen.append((x[0].item(), out.data_ptr())), sets, outs)
    for _ in range(7):  # graph_us: one call before the capture, then the captured ones
        call()
    assert [x for x, _ in seen] == [0, 10, 20, 0, 10, 20, 0]
    assert [o for _, o in seen] == [outs[j % 3].data_ptr() for j in range(7)]
    one = op_sweep.cycling(lambda x: seen.append(x), [base])  # the default, one set: every call on the same
    one(), one()
    assert seen[-1] is base and seen[-2] is base


def _sweep_csv(path, rows):
    """An op_sweep.py --csv file of `rows`: (ranks, bytes, form, auto, torch one-shot, torch two-shot, wrong),
    a time of None written as op_sweep writes a kernel it did not time (an empty cell)."""
    import csv
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["ranks", "placement", "bytes", "form", "auto_us", "oneshot_push_us", "torch_one_shot_us",
                    "torch_two_shot_us", "wrong", "torch_dropin_us", "buffers"])
        for ranks, size, form, auto, t1, t2, wrong in rows:
            w.writerow([ranks, "default", size, form, f"{auto:.3f}", "-1.000", "" if t1 is None else f"{t1:.3f}",
                        "" if t2 is None else f"{t2:.3f}", wrong, "", 1])
    return str(path)


def test_vs_torch_table_ranges_each_cell_over_forms_and_repeats_and_names_the_losses(tmp_path, capsys):
    """bench/vs_torch_table.py: a cell is the range of AUTO / the faster torch kernel over the forms and the
    files; one over the bound is in bold and listed with the form and file of its worst ratio; a size torch was
    not timed at is '-'; the #wrong of every row is summed."""
    table = _bench_module("vs_torch_table")
    a = _sweep_csv(tmp_path / "a.csv", [
        (2, 12288, "inplace", 4.5, 5.0, 4.6, 0),    # 4.5 / 4.6
        (2, 12288, "ord", 4.7, 5.0, 4.6, 0),        # 4.7 / 4.6: over
        (2, 4194304, "inplace", 13.0, 20.0, 16.0, 0),
        (8, 4194304, "inplace", 33.0, None, None, 0),  # torch not timed (--torch-max)
    ])
    b = _sweep_csv(tmp_path / "b.csv", [
        (2, 12288, "inplace", 4.4, 4.4, 4.8, 0),    # 4.4 / 4.4
        (2, 12288, "ord", 4.6, 5.0, 4.6, 3),
        (2, 4194304, "inplace", 12.0, 20.0, 16.0, 0),
    ])
    assert table.main([a, b]) == 0
    out = capsys.readouterr().out
    assert "| ranks | 12K | 4M |" in out
    assert "| 2 | **0.98-1.02** | 0.75-0.81 |" in out
    assert "| 8 | - | - |" in out
    assert "cells over 1.00: 1 of 2" in out
    assert f"2 ranks (default), 12K: 1.02 (ord, {a})" in out
    assert "out of bounds values (#wrong): 3" in out
    assert table.main([a, b, "--bound", "1.05"]) == 0
    assert "cells over 1.05: 0 of 2" in capsys.readouterr().out
    assert table.main([a, "--forms", "inplace"]) == 0
    assert "| 2 | 0.98 | 0.81 |" in capsys.readouterr().out


def test_vs_torch_table_without_torch_times_says_so(tmp_path, capsys):
    """No row with both AUTO's and torch's times (a sweep without --torch): exit 2 and a message, no table."""
    table = _bench_module("vs_torch_table")
    a = _sweep_csv(tmp_path / "a.csv", [(4, 1048576, "sym", 9.0, None, None, 0)])
    assert table.main([a]) == 2
    cap = capsys.readouterr()
    assert "| ranks |" not in cap.out and "no row of those forms" in cap.err
    assert table.main([str(tmp_path / "missing.csv")]) == 2
    assert "cannot read" in capsys.readouterr().err

"""The logged sweeps of this session, read once for tie_replay.py, graph_length_bias.py and skip_replay.py.

A run starts at a line "== NAME[: command]". In it, the autotune's DEBUG step lines ("autotune step 8 of 39:
all_reduce 128 KiB: twoshot_pull 76.9 us, ... -> twoshot_push (the model: twoshot_push)") and the bench's
forced rows, with the model's prediction where the bench printed it (--model 1)."""
import re

SZ = {"KiB": 1024, "MiB": 1 << 20}
STEP = re.compile(r"autotune step \d+ of \d+: (\w+) (\d+) (KiB|MiB): (.*) -> (\w+) \(the model: (\w+)\)")
ROW = re.compile(r"\s+(\d+)\s+\d+\s+bfloat16\s+sum\s+(\S+)\s+\|\s+([\d.]+)(?:.*\|\s+([\d.]+)\s+([\d.]+)\s*$)?")


def parse(path):
    """[{name, steps: [(kind, bytes, {algo: us}, chosen, model)], bench: {bytes: {algo: us}},
    pred: {bytes: {algo: us}}}], a run per "== " line."""
    runs, cur = [], None
    for line in open(path, errors="replace"):
        if line.startswith("== "):
            cur = {"name": line[3:].split(":")[0].strip(), "steps": [], "bench": {}, "pred": {}}
            runs.append(cur)
            continue
        if cur is None:
            continue
        m = STEP.search(line)
        if m:
            times = {a: float(t) for a, t in re.findall(r"(\w+) ([\d.]+) us", m.group(4))}
            cur["steps"].append((m.group(1), int(m.group(2)) * SZ[m.group(3)], times, m.group(5), m.group(6)))
            continue
        m = ROW.match(line)
        if m and not m.group(2).startswith("auto"):
            size, algo = int(m.group(1)), m.group(2)
            cur["bench"].setdefault(size, {})[algo] = float(m.group(3))
            if m.group(4):
                cur["pred"].setdefault(size, {})[algo] = float(m.group(4))
    return runs


def winner(times, model, tie=0.03):
    """The autotune's decision (collectives/autotune.c, symmem_autotune_winner): the fastest, unless the
    model's choice is within `tie` of it."""
    fastest = min(times, key=times.get)
    return model if model in times and times[model] <= (1 + tie) * times[fastest] else fastest

#!/usr/bin/env python3
"""Host cost of the checks in SymmemCommunicator's eager all_reduce, on any machine (no GPU needed): the same
communicator through each compiled entry there is (symmem._fast, and symmem._fast_torch where it was built for
this torch), CPU tensors on 'device -1', each entry calling a Python no-op in place of the library (its `call`
hook), beside torch.add. It isolates what the entries' checks cost; the library call and a GPU's torch.add are
bench/torch_ops_bench.py's, on a GPU.

  SYMMEM_LIBRARY=build/libsymmem.so PYTHONPATH=python python3 bench/comm_checks_cpu.py [-n 50000] [-r 9]

Prints ns per call, the best of -r rounds of -n calls. Exits 77 with a message where no compiled entry is built.
"""
import argparse
import sys
import timeit


def communicator(kind, noop):
    """A communicator of rank 0 of 2 on 'device -1' whose entry is `kind`'s, calling `noop` for the library."""
    import torch
    from symmem.torch import _comm, _ops

    c = _comm.SymmemCommunicator.__new__(_comm.SymmemCommunicator)
    c.group_name, c.rank, c.world_size, c.comm, c.disabled = "g", 0, 2, None, False
    c.group = None
    c.device = torch.device("cpu")
    c._init_state()
    c.max_size, c._handle, c._dev_index, c._fast = 1 << 30, 0xC0FFEE, -1, True
    if kind == "fast":
        mod, h = _ops.compiled_entry()[1], _comm._entry_hooks()
        dtypes = tuple((d, s, k) for d, (s, k) in _comm._DTYPE_INFO.items())
        c._entry = mod.Entry(c._handle, -1, c.max_size, None, "l", (torch.Tensor, torch.nn.Parameter), dtypes,
                             h[:3] + (lambda d: 0,) + h[4:], call=noop)
    else:
        mod = _ops.torch_entry()[1]
        c._entry = mod.Entry(c._handle, -1, c.max_size, None, "l", call=noop)
    c._checked = mod.checked_all_reduce
    return c


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=50000, help="calls per round")
    ap.add_argument("-r", type=int, default=9, help="rounds (the best is printed)")
    ap.add_argument("--count", type=int, default=8192, help="bf16 elements per tensor")
    args = ap.parse_args(argv)
    import torch
    from symmem.torch import _ops

    if _ops.compiled_entry()[1] is None:
        print("comm_checks_cpu: no compiled entry (symmem._fast) is built here; nothing measured", file=sys.stderr)
        return 77

    def noop(*a):
        return None

    g = {"torch": torch, "noop": noop, "fast": communicator("fast", noop)}
    if _ops.torch_entry()[1] is not None:
        g["fast_torch"] = communicator("fast_torch", noop)
    x = torch.empty(args.count, dtype=torch.bfloat16)
    g.update(x=x, y=torch.empty_like(x))
    print(f"torch {torch.__version__}, bf16 x {args.count}; ns per call, best of {args.r} rounds of {args.n}")
    stmts = ["torch.add(x, x, out=y)", "torch.add(x, x)", "noop(1, 2, 3, 4, 5, 6, 7)"]
    stmts += [f"{k}.all_reduce(x{a})" for k in ("fast", "fast_torch") if k in g for a in (", out=y", "", ", out=x")]
    with torch.no_grad():
        for stmt in stmts:
            t = min(timeit.repeat(stmt, globals=g, number=args.n, repeat=args.r)) / args.n * 1e9
            print(f"{t:8.0f}  {stmt}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""symmem under torchrun: two ranks, an all-reduce and the fused all-reduce + residual add + RMSNorm, checked.
    torchrun --standalone --nproc-per-node 2 examples/torch_allreduce.py   (two ranks on one GPU: start MPS first)"""
import os, sys, torch, torch.distributed as dist
import symmem.torch as st

rank = int(os.environ["LOCAL_RANK"])
dev = torch.device("cuda", rank % max(torch.cuda.device_count(), 1))
dist.init_process_group("gloo")                    # symmem's rendezvous needs only a CPU group
comm = st.SymmemCommunicator(dist.group.WORLD, dev)
if comm.disabled:
    sys.exit(f"rank {rank}: symmem is off here: {comm.disabled_reason}")
x = torch.full((8, 4096), rank + 1.0, device=dev, dtype=torch.bfloat16)
torch.testing.assert_close(comm.all_reduce(x), torch.full_like(x, 3.0))          # 1 + 2 on every rank
residual, w = torch.ones_like(x), torch.full((4096,), 2.0, device=dev, dtype=torch.bfloat16)
y = comm.all_reduce_add_rmsnorm(x, residual, w, 1e-6)   # residual += all_reduce(x); y = rmsnorm(residual) * w
torch.testing.assert_close(residual, torch.full_like(x, 4.0))
torch.testing.assert_close(y, torch.full_like(x, 2.0))  # a constant row normalises to 1, times w
print(f"rank {rank}: all-reduce and fused all-reduce + add + RMSNorm on {dev}: ok (op library: {st.op_library()})")
comm.close()
dist.destroy_process_group()

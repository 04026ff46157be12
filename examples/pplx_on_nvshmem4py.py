"""pplx-kernels-style MoE dispatch and combine with NVIDIA's NVSHMEM started
by nvshmem4py (as pplx's own tests start it), and this library's
low-latency kernels running on that NVSHMEM:

    torchrun --nproc_per_node=2 examples/pplx_on_nvshmem4py.py
    NVST_TEST_SHARE_GPUS=1 torchrun --nproc_per_node=2 examples/pplx_on_nvshmem4py.py   # one GPU

Needs nvshmem4py-cu13 and a build with NVSHMEM (nvshmem_backend_built()).
Each rank routes random tokens to top-3 of 8 experts, the experts double
their rows, and the combined result must equal the tokens times the sum of
their weights times 2. Prints PASS or FAIL per rank; exits 1 on FAIL.
"""
import os
import sys

import torch
import torch.distributed as dist
from cuda.core import Device

import nvshmem_tutorial as nt
from nvshmem_tutorial.pplx import AllToAll, nvshmem_init

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
share = os.environ.get("NVST_TEST_SHARE_GPUS") == "1"
local = 0 if share else int(os.environ.get("LOCAL_RANK", "0"))
torch.cuda.set_device(local)
dist.init_process_group("gloo" if share else "nccl")
device = Device(local)
device.set_current()
nvshmem_init(global_rank=rank, local_rank=local, world_size=world, device=device)  # NVSHMEM, by nvshmem4py
nt.init_from_torch(backend="nvshmem")  # our runtime joins that NVSHMEM instead of starting its own

E, K, H, M = 8, 3, 512, 16
ata = AllToAll.intranode(max_num_tokens=M, num_experts=E, experts_per_token=K, rank=rank, world_size=world,
                         dp_size=1, hidden_dim=H, hidden_dim_bytes=H * 2, hidden_dim_scale_bytes=0)
g = torch.Generator().manual_seed(rank)
T = 11
x = torch.randn((T, H), generator=g).to(torch.bfloat16).cuda()
indices = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(T)]).to(torch.uint32).cuda()
weights = torch.rand((T, K), generator=g).cuda()
bound_m = torch.tensor([T], dtype=torch.uint32, device="cuda")
counts = torch.empty(E // world, dtype=torch.int32, device="cuda")
expert_x = torch.empty((E // world, M * world, H), dtype=torch.bfloat16, device="cuda")
ata.dispatch(counts, expert_x, None, x, None, indices, bound_m)
y = torch.empty((M, H), dtype=torch.bfloat16, device="cuda")
ata.combine(y, indices, weights, expert_x * 2, bound_m)
torch.cuda.synchronize()
want = x.float() * 2 * weights.sum(1, keepdim=True)
ok = torch.allclose(y[:T].float(), want, rtol=2e-2, atol=2e-2)
print(f"[rank {rank}] {'PASS' if ok else 'FAIL'}: {int(counts.sum())} rows received, combined on "
      f"{nt.heap_kind()} (NVSHMEM {nt.nvshmem_backend_version()})", flush=True)
ata.destroy()
dist.barrier()
nt.finalize()
import nvshmem.core as nvshmem  # noqa: E402 - started by nvshmem_init above

nvshmem.finalize()
dist.destroy_process_group()
sys.exit(0 if ok else 1)

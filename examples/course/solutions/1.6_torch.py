"""1.6 PyTorch tensors, the exercise: an all-reduce by a ring of puts.

Each rank shifts a symmetric tensor right n - 1 times with
nvshmem_put_tensor (double-buffered: even steps write `a`, odd steps `b`)
and adds what arrives to a running sum; the sum must equal
nvshmem_tutorial.distributed.all_reduce's result on random data.

Run:  torchrun --nproc_per_node=2 examples/course/solutions/1.6_torch.py
      (NVST_TEST_SHARE_GPUS=1 on one GPU)
"""
from __future__ import annotations

import os

import torch
import torch.distributed as dist

import nvshmem_tutorial as nt
import nvshmem_tutorial.distributed as nd

N = 4096


def main() -> str:
    rank, n = dist.get_rank(), dist.get_world_size()
    mine = torch.randint(-100, 100, (N,), generator=torch.Generator().manual_seed(rank), dtype=torch.int32).cuda()
    bufs = [nt.nvshmem_alloc_tensor((N,), torch.int32) for _ in range(2)]
    total = mine.clone()
    current = mine
    for step in range(n - 1):
        dst = bufs[step % 2]
        nt.nvshmem_put_tensor(dst, current, (rank + 1) % n)
        nt.nvshmem_barrier()  # the step's data is everywhere; the other buffer is free again
        current = dst.clone()
        total += current
    reference = mine.clone()
    nd.all_reduce(reference)
    nt.nvshmem_barrier()
    for b in bufs:
        nt.nvshmem_free_tensor(b)
    return f"PE {rank}: ring sum equals all_reduce: {torch.equal(total, reference)}"


if __name__ == "__main__":
    share = os.environ.get("NVST_TEST_SHARE_GPUS") == "1"
    torch.cuda.set_device(0 if share else int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("gloo" if share else "nccl")
    nt.init_from_torch()
    line = main()
    lines = [None] * dist.get_world_size()
    dist.all_gather_object(lines, line)
    if dist.get_rank() == 0:
        print("\n".join(lines))
    nt.finalize()
    dist.destroy_process_group()

"""The seed tutorial's all-gather test, written for this library:
NvshmemBuffer's intranode_all_gather (async, as the seed calls it) and
all_gather_into_tensor against torch.distributed, and its barriers.

    python -m torch.distributed.run --nproc_per_node=2 tests/test_intranode_allgather.py

With NVST_TEST_SHARE_GPUS=1 (or fewer GPUs than ranks) the ranks share
GPU 0 and the reference runs on gloo. Prints PASS per check; exits 1 on a
mismatch.
"""
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from nvshmem_tutorial import NvshmemBuffer  # noqa: E402
from test_intranode_nvshmem import check, finish, join_torch  # noqa: E402


def reference(tensor, world, shared):
    """Every rank's tensor, gathered by torch.distributed."""
    if shared:  # gloo: through the host
        parts = [torch.empty_like(tensor, device="cpu") for _ in range(world)]
        dist.all_gather(parts, tensor.cpu())
        return [p.cuda() for p in parts]
    parts = [torch.empty_like(tensor) for _ in range(world)]
    dist.all_gather(parts, tensor)
    return parts


def main():
    rank, world, shared = join_torch()
    buffer = NvshmemBuffer(dist.group.WORLD, rank, world, 1024 * 1024 * 128, 0)
    if rank == 0:
        print(f"Number of SMs on device: {buffer.get_num_device_sms()}", flush=True)

    g = torch.Generator().manual_seed(rank)
    tensor = torch.randn(1024, generator=g).cuda()
    tensor_list = [torch.zeros_like(tensor) for _ in range(world)]
    buffer.intranode_all_gather(tensor_list, tensor, async_op=True)
    ref = reference(tensor, world, shared)
    check(all(torch.equal(a, b) for a, b in zip(tensor_list, ref)), "intranode_all_gather (async_op=True)")

    big = torch.randn((3, 1000), generator=g).cuda()
    out = torch.zeros((world, 3, 1000), device="cuda")
    buffer.all_gather_into_tensor(out, big)
    check(all(torch.equal(out[r], b) for r, b in enumerate(reference(big, world, shared))), "all_gather_into_tensor")

    right = (rank + 1) % world
    check(buffer.is_same_rdma_rank(rank) and (buffer.num_rdma_ranks > 1 or buffer.is_same_rdma_rank(right)),
          "is_same_rdma_rank")
    buffer.intranode_barrier()
    buffer.barrier()
    buffer.destroy()
    finish(rank, f"all-gather over {world} ranks")


if __name__ == "__main__":
    main()

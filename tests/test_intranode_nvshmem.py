"""The seed tutorial's first test, written for this library: the seed's
module-level API (get_unique_id, init_with_unique_id, nvshmem_alloc_tensor,
nvshmem_put_tensor, nvshmem_get_tensor and their _async forms,
nvshmem_barrier, nvshmem_free_tensor) between rank 0 and the last rank,
every byte checked.

    python -m torch.distributed.run --nproc_per_node=2 tests/test_intranode_nvshmem.py
    bash scripts/run_intranode_nvshmem.sh 2

With NVST_TEST_SHARE_GPUS=1 (or fewer GPUs than ranks) the ranks share
GPU 0 and torch.distributed runs on gloo (NCCL refuses that). Prints PASS
per check; exits 1 on the first wrong byte.
"""
import os
import sys

import torch
import torch.distributed as dist

from nvshmem_tutorial import (get_unique_id, init_with_unique_id, nvshmem_alloc_tensor, nvshmem_barrier,
                              nvshmem_free_tensor, nvshmem_get_tensor, nvshmem_get_tensor_async, nvshmem_put_tensor,
                              nvshmem_put_tensor_async)


def join_torch():
    """torch.distributed on this rank's GPU, or on GPU 0 for every rank with
    gloo when the ranks share it. Returns (rank, world, shared)."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    shared = os.environ.get("NVST_TEST_SHARE_GPUS") == "1" or torch.cuda.device_count() < local_world
    torch.cuda.set_device(0 if shared else local)
    dist.init_process_group(backend="gloo" if shared else "nccl", rank=rank, world_size=world)
    return rank, world, shared


def init_nvshmem():
    """torch.distributed first, then the job from rank 0's unique ID (the
    seed's sequence)."""
    rank, world, _ = join_torch()
    unique_id = get_unique_id() if rank == 0 else None
    unique_ids = [None] * world
    dist.all_gather_object(unique_ids, unique_id)
    pe = init_with_unique_id(unique_ids[0], rank, world, False)
    assert pe == rank, f"init_with_unique_id returned PE {pe} on rank {rank}"
    dist.barrier()
    return rank, world


def finish(rank, what):
    """Every rank is through; rank 0 says so; torch.distributed ends."""
    dist.barrier()
    if rank == 0:
        print(f"DONE: {what}", flush=True)
    dist.destroy_process_group()


def pattern(nbytes, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (nbytes,), generator=g, dtype=torch.uint8).cuda()


def check(ok, what):
    if not ok:
        print(f"FAIL {what}", flush=True)
        sys.exit(1)
    print(f"PASS {what}", flush=True)


def put(rank, world, nbytes, blocking):
    """Rank 0 writes into the last rank's symmetric buffer."""
    src_rank, dst_rank = 0, world - 1
    buffer = nvshmem_alloc_tensor(nbytes, 128)
    assert buffer.dtype == torch.uint8 and buffer.numel() == nbytes and buffer.data_ptr() % 128 == 0
    nvshmem_barrier()
    if rank == src_rank:
        local = pattern(nbytes, nbytes)
        (nvshmem_put_tensor if blocking else nvshmem_put_tensor_async)(buffer, local, nbytes, dst_rank)
        torch.cuda.synchronize()
    nvshmem_barrier()
    if rank == dst_rank:
        check(torch.equal(buffer, pattern(nbytes, nbytes)), f"put{'' if blocking else '_async'} {nbytes} bytes")
    nvshmem_free_tensor(buffer)
    nvshmem_barrier()


def get(rank, world, nbytes, blocking):
    """The last rank reads rank 0's symmetric buffer."""
    owner, reader = 0, world - 1
    buffer = nvshmem_alloc_tensor(nbytes, 128)
    if rank == owner:
        buffer.copy_(pattern(nbytes, nbytes + 1))
        torch.cuda.synchronize()
    nvshmem_barrier()
    if rank == reader:
        local = torch.zeros(nbytes, dtype=torch.uint8, device="cuda")
        (nvshmem_get_tensor if blocking else nvshmem_get_tensor_async)(local, buffer, nbytes, owner)
        torch.cuda.synchronize()
        check(torch.equal(local, pattern(nbytes, nbytes + 1)), f"get{'' if blocking else '_async'} {nbytes} bytes")
    nvshmem_barrier()
    nvshmem_free_tensor(buffer)
    nvshmem_barrier()


def main():
    rank, world = init_nvshmem()
    if world < 2:
        if rank == 0:
            print("This test needs at least 2 processes. Skipping.")
        dist.destroy_process_group()
        return
    for nbytes in (1024, (1 << 20) + 3):
        for blocking in (True, False):
            put(rank, world, nbytes, blocking)
            get(rank, world, nbytes, blocking)
    finish(rank, f"put/get between rank 0 and rank {world - 1} of {world}")


if __name__ == "__main__":
    main()

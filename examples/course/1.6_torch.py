"""1.6 PyTorch tensor integration: symmetric tensors on GPUs.

The same ideas as lessons 1.2-1.4 with torch tensors on GPUs: a tensor
allocated in the symmetric heap, a view of a peer's copy that a kernel reads
by load/store (nvshmem_ptr), blocking put and get of whole tensors (the copy
engine), and a collective with torch.distributed's name and argument order.

Run (2 GPUs):    torchrun --nproc_per_node=2 examples/course/1.6_torch.py
Run (one GPU):   NVST_TEST_SHARE_GPUS=1 torchrun --nproc_per_node=2 examples/course/1.6_torch.py
(PYTHONPATH=build/python, or after pip install .)
"""
from __future__ import annotations

import os

import torch
import torch.distributed as dist

import nvshmem_tutorial as nt
import nvshmem_tutorial.distributed as nd

N = 1024


def join() -> None:
    """One process per rank; torchrun sets RANK, WORLD_SIZE, LOCAL_RANK."""
    share = os.environ.get("NVST_TEST_SHARE_GPUS") == "1"  # ranks share one GPU
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(0 if share else local)
    # NCCL refuses two ranks on one GPU; gloo is enough to start the job.
    dist.init_process_group("gloo" if share else "nccl")
    nt.init_from_torch()  # the unique ID travels over a gloo group, never NCCL


def main() -> list[str]:
    rank, n = dist.get_rank(), dist.get_world_size()
    right, left = (rank + 1) % n, (rank - 1) % n
    lines: list[str] = []

    # nvshmem_malloc + a tensor over it: zeroed, the same shape on every rank.
    x = nt.nvshmem_alloc_tensor((N,), torch.float32)
    y = nt.nvshmem_alloc_tensor((N,), torch.float32)
    x.fill_(rank + 1)
    nt.nvshmem_barrier()  # waits for this GPU's fill_, then for every rank

    # nvshmem_ptr: the right neighbour's x as a tensor of this process.
    # Reading it runs a kernel that loads over NVLink (or within one GPU).
    peer = nt.peer_tensor(x, right)
    lines.append(f"peer_tensor(x, {right}) reads {peer[0].item()} (load/store through the mapped heap)")

    # nvshmem_putmem: my x into y on the right neighbour, by the copy engine.
    nt.nvshmem_put_tensor(y, x, right)
    nt.nvshmem_barrier()  # every put has landed
    lines.append(f"y after the put from PE {left}: {y[0].item()} everywhere: {bool((y == left + 1).all())}")

    # nvshmem_getmem: the left neighbour's x into a plain CUDA tensor.
    got = torch.empty(N, device="cuda")
    nt.nvshmem_get_tensor(got, x, left)
    lines.append(f"get of PE {left}'s x: {bool((got == left + 1).all())}")
    nt.nvshmem_barrier()  # nobody changes x while a peer may still read it

    # torch.distributed's all_reduce, run by the library's kernels.
    nd.all_reduce(x)
    want = n * (n + 1) / 2
    lines.append(f"all_reduce(x) = {x[0].item()} (1 + ... + {n} = {want}): {bool((x == want).all())}")

    nt.nvshmem_barrier()
    nt.nvshmem_free_tensor(y)
    nt.nvshmem_free_tensor(x)
    return lines


if __name__ == "__main__":
    join()
    mine = main()
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, mine)
    if dist.get_rank() == 0:
        for rank, lines in enumerate(every):
            for line in lines:
                print(f"PE {rank}: {line}")
    nt.finalize()
    dist.destroy_process_group()

"""3.4 Integration with DeepSpeed: a ZeRO-2 step on our collectives.

ZeRO stage 2 partitions the optimizer state and the gradients across the
data-parallel ranks: after backward, a reduce-scatter leaves each rank the
averaged gradients of its own partition of the flattened parameters; each
rank updates only that partition; an all-gather then gives every rank the
whole updated model. This program trains the same small model both ways
on 2 ranks and compares the parameters after STEPS steps:
  - DeepSpeed's own engine (deepspeed.initialize, "zero_optimization":
    {"stage": 2}), the reference, on the CPU over gloo;
  - the same step written with our collectives on the GPU:
    nvshmem_tutorial.distributed.reduce_scatter_tensor and
    all_gather_into_tensor.

Run (one GPU, two ranks sharing it):
  NVST_TEST_SHARE_GPUS=1 torchrun --nproc_per_node=2 examples/course/3.4_deepspeed.py
(PYTHONPATH=build/python; deepspeed==0.16.4 installed: scripts/course_wheels.sh)
"""
from __future__ import annotations

import contextlib
import os
import sys

# DeepSpeed's reference runs on its CPU accelerator: on GPUs it would need
# NCCL, which refuses two ranks on one GPU, and gloo lacks CUDA reduce-scatter.
os.environ.setdefault("DS_ACCELERATOR", "cpu")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

with contextlib.redirect_stdout(sys.stderr):  # DeepSpeed logs to stdout; keep ours clean
    import deepspeed  # noqa: E402
    import deepspeed.ops  # noqa: E402

import nvshmem_tutorial as nt  # noqa: E402
import nvshmem_tutorial.distributed as nd  # noqa: E402

STEPS, LR, BATCH = 3, 0.1, 4


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)  # the same initial weights for both runs, on every rank
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 8))


def batches(rank: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(100 + rank)  # each rank its own data
    return [torch.randn(BATCH, 16, generator=g) for _ in range(STEPS)]


def deepspeed_zero2(rank: int) -> torch.Tensor:
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    config = {"train_micro_batch_size_per_gpu": BATCH, "gradient_accumulation_steps": 1,
              "zero_optimization": {"stage": 2}, "zero_allow_untested_optimizer": True}
    with contextlib.redirect_stdout(sys.stderr):
        engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
        for x in batches(rank):
            loss = engine(x).pow(2).mean()
            engine.backward(loss)
            engine.step()
    return torch.cat([p.detach().reshape(-1) for p in engine.module.parameters()])


def our_zero2(rank: int, n: int, dev: torch.device) -> tuple[torch.Tensor, int]:
    """Returns (the parameters after STEPS steps, the partition size)."""
    model = make_model().to(dev)
    params = list(model.parameters())
    numel = sum(p.numel() for p in params)
    shard = (numel + n - 1) // n  # padded so that every rank's partition has the same size
    flat = torch.zeros(shard * n, device=dev)
    flat[:numel] = torch.cat([p.detach().reshape(-1) for p in params])
    for x in batches(rank):
        model.zero_grad()
        model(x.to(dev)).pow(2).mean().backward()
        grads = torch.zeros(shard * n, device=dev)
        grads[:numel] = torch.cat([p.grad.reshape(-1) for p in params])
        mine = torch.empty(shard, device=dev)
        nd.reduce_scatter_tensor(mine, grads)       # the sum of my partition's gradients
        mine /= n                                   # averaged over the data-parallel ranks
        part = flat[rank * shard:(rank + 1) * shard]
        part -= LR * mine                           # SGD on my partition only
        nd.all_gather_into_tensor(flat, part.clone())  # every rank: every updated partition
        with torch.no_grad():
            offset = 0
            for p in params:
                p.copy_(flat[offset:offset + p.numel()].view_as(p))
                offset += p.numel()
    return flat[:numel].cpu(), shard


def main() -> None:
    share = os.environ.get("NVST_TEST_SHARE_GPUS") == "1"  # ranks share one GPU
    torch.cuda.set_device(0 if share else int(os.environ["LOCAL_RANK"]))
    with contextlib.redirect_stdout(sys.stderr):
        # The shared-memory op of DeepSpeed's CPU accelerator is a C++ build
        # this program does not need: gloo carries the reference's traffic.
        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
        deepspeed.init_distributed(dist_backend="gloo")
    nt.init_from_torch()
    rank, n = dist.get_rank(), dist.get_world_size()
    reference = deepspeed_zero2(rank)
    ours, shard = our_zero2(rank, n, torch.device("cuda"))
    agree = torch.allclose(reference, ours, rtol=1e-5, atol=1e-6)
    lines = [None] * n
    dist.all_gather_object(lines, f"rank {rank}: DeepSpeed ZeRO-2 and our ZeRO-2 step agree after {STEPS} steps: {agree}")
    if rank == 0:
        print(f"model: {reference.numel()} parameters, a partition of {shard} per rank")
        print("\n".join(lines))
    nt.finalize()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""3.4 DeepSpeed, the exercise: ZeRO stage 0 (plain data parallelism).

Without partitioning, DeepSpeed all-reduces the gradients and every rank
runs the optimizer on the whole model. Ours: one all_reduce of the
flattened gradients (nvshmem_tutorial.distributed.all_reduce), divided by
the number of ranks, then SGD everywhere. Compared with DeepSpeed's engine
at "stage": 0 after STEPS steps.

Run:  NVST_TEST_SHARE_GPUS=1 torchrun --nproc_per_node=2 examples/course/solutions/3.4_deepspeed.py
"""
from __future__ import annotations

import contextlib
import os
import sys

os.environ.setdefault("DS_ACCELERATOR", "cpu")  # the reference on the CPU over gloo, as in the lesson

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

with contextlib.redirect_stdout(sys.stderr):
    import deepspeed  # noqa: E402
    import deepspeed.ops  # noqa: E402

import nvshmem_tutorial as nt  # noqa: E402
import nvshmem_tutorial.distributed as nd  # noqa: E402

STEPS, LR, BATCH = 3, 0.1, 4


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 8))


def batches(rank: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(100 + rank)
    return [torch.randn(BATCH, 16, generator=g) for _ in range(STEPS)]


def deepspeed_stage0(rank: int) -> torch.Tensor:
    model = make_model()
    config = {"train_micro_batch_size_per_gpu": BATCH, "zero_optimization": {"stage": 0}}
    with contextlib.redirect_stdout(sys.stderr):
        engine, _, _, _ = deepspeed.initialize(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=LR),
                                               config=config)
        for x in batches(rank):
            engine.backward(engine(x).pow(2).mean())
            engine.step()
    return torch.cat([p.detach().reshape(-1) for p in engine.module.parameters()])


def our_data_parallel(rank: int, n: int, dev: torch.device) -> torch.Tensor:
    model = make_model().to(dev)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for x in batches(rank):
        optimizer.zero_grad()
        model(x.to(dev)).pow(2).mean().backward()
        grads = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        nd.all_reduce(grads)
        grads /= n
        offset = 0
        for p in model.parameters():
            p.grad.copy_(grads[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
        optimizer.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).cpu()


if __name__ == "__main__":
    torch.cuda.set_device(0 if os.environ.get("NVST_TEST_SHARE_GPUS") == "1" else int(os.environ["LOCAL_RANK"]))
    with contextlib.redirect_stdout(sys.stderr):
        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
        deepspeed.init_distributed(dist_backend="gloo")
    nt.init_from_torch()
    rank, n = dist.get_rank(), dist.get_world_size()
    agree = torch.allclose(deepspeed_stage0(rank), our_data_parallel(rank, n, torch.device("cuda")),
                           rtol=1e-5, atol=1e-6)
    lines = [None] * n
    dist.all_gather_object(lines, f"rank {rank}: DeepSpeed stage 0 and our all_reduce step agree: {agree}")
    if rank == 0:
        print("\n".join(lines))
    nt.finalize()
    dist.destroy_process_group()

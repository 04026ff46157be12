"""What the inference examples share: joining the job from torchrun, on one
GPU per rank or with ranks sharing GPUs (then torch.distributed runs on gloo,
since NCCL wants a GPU per rank), and a latency timer."""
import os
import sys
import time

import torch
import torch.distributed as dist

import nvshmem_tutorial as nt


def join():
    """(rank, world, device) after joining torch.distributed and nvst."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", "0"))
    gpus = torch.cuda.device_count()
    dev = torch.device("cuda", local % gpus)
    torch.cuda.set_device(dev)
    if world > gpus:  # ranks share GPUs
        dist.init_process_group("gloo")
    else:
        dist.init_process_group("nccl", device_id=dev)
    nt.init_from_torch()
    return rank, world, dev


def finish(ok, *owned):
    """Frees `owned` (collective, in order), leaves the job, exits 0 if ok."""
    dist.barrier()
    torch.cuda.synchronize()
    for thing in owned:
        thing.free()
    nt.finalize()
    dist.destroy_process_group()
    sys.exit(0 if ok else 1)


class Timer:
    """Wall time per step in microseconds, after the GPU finished the step."""

    def __init__(self):
        self.steps = []

    def __enter__(self):
        torch.cuda.synchronize()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        torch.cuda.synchronize()
        self.steps.append((time.perf_counter() - self.t0) * 1e6)

    def summary(self):
        s = sorted(self.steps)
        return f"{len(s)} steps, median {s[len(s) // 2]:.1f} us, max {s[-1]:.1f} us"

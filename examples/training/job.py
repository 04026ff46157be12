"""What the training examples share: joining the job under torchrun, and
timing.

GPUs: one rank per GPU on NCCL for torch.distributed's own traffic, or
ranks sharing GPUs (more ranks than GPUs) on gloo. No GPU: host-memory PEs
(NVST_HEAP=host), the same runtime and patterns on CPU tensors. The
library's traffic never goes through NCCL either way.
"""
import os
import time

import torch
import torch.distributed as dist

import nvshmem_tutorial as nt


def start():
    """Joins torch.distributed and the runtime; returns (rank, world, device, nccl_usable)."""
    local = int(os.environ.get("LOCAL_RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if torch.cuda.is_available():
        gpus = torch.cuda.device_count()
        dev = torch.device("cuda", local % gpus)
        torch.cuda.set_device(dev)
        nccl = world <= gpus
        dist.init_process_group("nccl" if nccl else "gloo", **({"device_id": dev} if nccl else {}))
        nt.init_from_torch()
        return dist.get_rank(), world, dev, nccl
    dist.init_process_group("gloo")
    os.environ["NVST_HEAP"] = "host"
    uid = [nt.get_unique_id() if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(uid, src=0)
    nt.init_with_unique_id(uid[0], dist.get_rank(), world)
    return dist.get_rank(), world, torch.device("cpu"), False


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def timed(dev, fn, steps):
    """Seconds per call of fn, over `steps` calls after one warm-up call."""
    fn()
    sync(dev)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(steps):
        fn()
    sync(dev)
    return (time.perf_counter() - t0) / steps


def report(rank, rows):
    """Prints rank 0's table: (what, value) pairs."""
    if rank == 0:
        width = max(len(w) for w, _ in rows)
        for what, value in rows:
            print(f"  {what:<{width}}  {value}", flush=True)


def finish():
    nt.finalize()
    dist.destroy_process_group()

# torchrun --nproc_per_node=2 examples/training/training_patterns.py --pattern all --benchmark
"""Data-parallel training patterns on symmetric memory, each run and timed:

  gradient      GradientSync: bucketed all-reduce from backward hooks
  hierarchical  the same, reduced inside the node, across nodes, inside again
                (logical nodes on one host: NVST_NODE_SIZE=1 or 2)
  zero          ShardedOptimizer: reduce-scatter, fused Adam on the shard, all-gather
  hybrid        HybridParameterServer: a parameter any rank reads (GPUs only)

Each prints time per step, the step's time with no communication at all
(so the difference is the communication the step could not hide), and the
host time spent issuing communication; with one GPU per rank the same step
under PyTorch DDP on NCCL is printed beside it. Ranks may share a GPU
(gloo for torch.distributed; then the ranks' kernels time-share it, so
read the times as the host-side cost). Without a GPU the runtime runs on
host-memory PEs. Every pattern ends by checking that all ranks hold the
same parameters.
"""
import argparse
import copy
import sys

import torch
import torch.distributed as dist

from job import finish, report, start, timed
from nvshmem_tutorial.training import GradientSync, HybridParameterServer, ShardedOptimizer
from nvshmem_tutorial.training.comm import agree, fingerprint


def model_for(width, layers, dev):
    torch.manual_seed(0)
    mods = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.GELU()]
    return torch.nn.Sequential(*mods).to(dev)


def data(rank, batch, width, dev):
    g = torch.Generator().manual_seed(rank)
    return torch.randn(batch, width, generator=g).to(dev), torch.randn(batch, width, generator=g).to(dev)


def same_everywhere(model):
    agree("example", "parameters", [fingerprint(p) for p in model.parameters()])
    return "identical on every rank"


def gradient(args, rank, world, dev, nccl, hierarchical=False):
    model = model_for(args.width, args.layers, dev)
    plain = copy.deepcopy(model)
    x, y = data(rank, args.batch, args.width, dev)
    sync = GradientSync(model.parameters(), bucket_bytes=args.bucket_kib << 10, hierarchical=hierarchical)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    plain_opt = torch.optim.SGD(plain.parameters(), lr=1e-3)

    def step():
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        sync.synchronize_gradients()
        opt.step()

    def compute_only():
        plain_opt.zero_grad()
        torch.nn.functional.mse_loss(plain(x), y).backward()
        plain_opt.step()

    t = timed(dev, step, args.steps)
    issue = sync.comm_seconds / (args.steps + 1)
    t0 = timed(dev, compute_only, args.steps)
    grads = sum(p.numel() for p in model.parameters()) * 4
    rows = [(f"{'hierarchical ' if hierarchical else ''}gradient sync, {world} ranks, {grads >> 10} KiB of "
             f"gradients in {len(sync.buckets)} buckets", ""),
            ("time per step", f"{t * 1e6:.0f} us"),
            ("time per step with no communication", f"{t0 * 1e6:.0f} us"),
            ("time in communication (not hidden)", f"{max(t - t0, 0) * 1e6:.0f} us"),
            ("host time issuing it per step", f"{issue * 1e6:.0f} us")]
    if nccl and not hierarchical:
        ddp = torch.nn.parallel.DistributedDataParallel(copy.deepcopy(plain), bucket_cap_mb=args.bucket_kib / 1024)
        ddp_opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)

        def ddp_step():
            ddp_opt.zero_grad()
            torch.nn.functional.mse_loss(ddp(x), y).backward()
            ddp_opt.step()

        rows.append(("PyTorch DDP on NCCL, time per step", f"{timed(dev, ddp_step, args.steps) * 1e6:.0f} us"))
    rows.append(("parameters", same_everywhere(model)))
    report(rank, rows)
    sync.close()


def zero(args, rank, world, dev, nccl):
    model = model_for(args.width, args.layers, dev)
    x, y = data(rank, args.batch, args.width, dev)
    opt = ShardedOptimizer(model.parameters(), optimizer="adam", lr=1e-3)

    def step():
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()

    t = timed(dev, step, args.steps)
    mine, full = opt.state_bytes()
    report(rank, [(f"ZeRO sharded Adam, {world} ranks", ""),
                  ("time per step", f"{t * 1e6:.0f} us"),
                  ("host time issuing communication per step", f"{opt.comm_seconds / (args.steps + 1) * 1e6:.0f} us"),
                  ("optimizer state per rank", f"{mine >> 10} KiB (unsharded: {full >> 10} KiB)"),
                  ("parameters", same_everywhere(model))])
    opt.close()


def hybrid(args, rank, world, dev, nccl):
    if dev.type != "cuda":
        report(rank, [("hybrid parameter server", "skipped: reading another rank's copy needs GPU heaps")])
        return
    emb = torch.nn.Embedding(args.width * 4, args.width).to(dev)
    server = HybridParameterServer(8 * emb.weight.numel() * 4 + (1 << 20))
    server.register_mirror("embedding.weight", emb.weight)
    peer = (rank + 1) % world
    view = timed(dev, lambda: server.get_parameter("embedding.weight", peer, copy=False), args.steps)
    copy_t = timed(dev, lambda: server.get_parameter("embedding.weight", peer), args.steps)
    refresh = timed(dev, server.refresh, args.steps)
    rows = [(f"hybrid parameter server, {emb.weight.numel() * 4 >> 10} KiB parameter", ""),
            ("get_parameter, zero-copy view", f"{view * 1e6:.0f} us"),
            ("get_parameter, checked copy", f"{copy_t * 1e6:.0f} us"),
            ("refresh (publish a new version)", f"{refresh * 1e6:.0f} us")]
    if nccl:  # the same bytes from the same peer, the way one would without symmetric memory
        bcast = torch.empty_like(emb.weight)
        rows.append(("torch.distributed.broadcast (NCCL)",
                     f"{timed(dev, lambda: dist.broadcast(bcast, src=peer), args.steps) * 1e6:.0f} us"))
    report(rank, rows)
    server.close()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pattern", choices=["gradient", "hierarchical", "zero", "hybrid", "all"], default="gradient")
    p.add_argument("--benchmark", action="store_true", help="a larger model and more steps")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--bucket-kib", type=int, default=1024)
    args = p.parse_args()
    args.width, args.layers, args.batch = (1024, 8, 64) if args.benchmark else (128, 4, 16)
    args.steps = args.steps or (50 if args.benchmark else 5)
    rank, world, dev, nccl = start()
    patterns = ["gradient", "zero", "hybrid"] if args.pattern == "all" else [args.pattern]
    for name in patterns:
        if name == "hierarchical":
            gradient(args, rank, world, dev, nccl, hierarchical=True)
        else:
            {"gradient": gradient, "zero": zero, "hybrid": hybrid}[name](args, rank, world, dev, nccl)
    finish()


if __name__ == "__main__":
    sys.exit(main())

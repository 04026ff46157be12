# torchrun --nproc_per_node=2 examples/training/pipeline_parallel.py --schedule 1f1b
"""Pipeline parallelism with 1F1B or interleaved schedules whose
activations and gradients move through symmetric buffers (put_signal into a
slot, a credit per slot back), never through NCCL send/recv.

An MLP of --layers layers is split over the ranks (interleaved: --chunks
chunks per rank). Each step prints its time, the time the stages computed,
and the bubble fraction measured (1 - compute / step, averaged over the
ranks) beside the schedule's own. The loss is checked against the same
model run on one rank. Ranks may share a GPU, or run without one
(host-memory PEs).
"""
import argparse
import copy
import sys

import torch
import torch.distributed as dist

from job import finish, report, start
from nvshmem_tutorial.training import PipelineEngine


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--schedule", choices=["1f1b", "interleaved"], default="1f1b")
    p.add_argument("--chunks", type=int, default=2, help="model chunks per rank (interleaved)")
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--microbatches", type=int, default=8)
    p.add_argument("--micro-size", type=int, default=32)
    p.add_argument("--steps", type=int, default=10)
    args = p.parse_args()
    rank, world, dev, _ = start()
    chunks = args.chunks if args.schedule == "interleaved" else 1
    torch.manual_seed(0)
    layers = [torch.nn.Sequential(torch.nn.Linear(args.width, args.width), torch.nn.Tanh())
              for _ in range(args.layers)]
    whole = copy.deepcopy(torch.nn.Sequential(*layers)).to(dev)
    mine = [c.to(dev) for c in PipelineEngine.split(layers, chunks)]
    engine = PipelineEngine(mine, args.microbatches, (args.micro_size, args.width), torch.nn.functional.mse_loss,
                            args.schedule)
    opt = torch.optim.SGD([q for c in mine for q in c.parameters()], lr=1e-3)
    g = torch.Generator().manual_seed(1)
    xs = [torch.randn(args.micro_size, args.width, generator=g).to(dev) for _ in range(args.microbatches)]
    ys = [torch.randn(args.micro_size, args.width, generator=g).to(dev) for _ in range(args.microbatches)]
    with torch.no_grad():
        want = sum(float(torch.nn.functional.mse_loss(whole(x), y)) for x, y in zip(xs, ys)) / args.microbatches
    stats = []
    for step in range(args.steps + 1):
        opt.zero_grad()
        losses, s = engine.step(xs, ys)
        if step == 0 and rank == world - 1:
            ok = abs(sum(losses) - want) <= 1e-5 * abs(want)
            print(f"  first loss {sum(losses):.6f}, one-rank model {want:.6f}: {'PASS' if ok else 'FAIL'}", flush=True)
            if not ok:
                sys.exit(1)
        opt.step()
        if step:  # the first step compiles and allocates
            stats.append(s)
    mine_stats = torch.tensor([sum(s.step_seconds for s in stats), sum(s.compute_seconds for s in stats)],
                              dtype=torch.float64)
    everyone = [torch.zeros_like(mine_stats) for _ in range(world)]
    dist.all_gather(everyone, mine_stats)
    step_t = max(float(e[0]) for e in everyone) / len(stats)
    bubble = sum(1 - float(e[1]) / float(e[0]) for e in everyone) / world
    report(rank, [(f"pipeline {args.schedule}, {world} ranks x {chunks} chunk(s), {args.layers} layers, "
                   f"{args.microbatches} microbatches", ""),
                  ("time per step", f"{step_t * 1e3:.2f} ms"),
                  ("compute per rank per step (mean)",
                   f"{sum(float(e[1]) for e in everyone) / world / len(stats) * 1e3:.2f} ms"),
                  ("bubble fraction, measured", f"{bubble:.3f}"),
                  ("bubble fraction, the schedule's (backward = 2 x forward)",
                   f"{stats[0].ideal_bubble_fraction:.3f}")])
    engine.close()
    finish()


if __name__ == "__main__":
    sys.exit(main())

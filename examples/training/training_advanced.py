# torchrun --nproc_per_node=2 examples/training/training_advanced.py --demo all
"""Asynchronous and lock-free gradient aggregation on symmetric memory:

  async_grad  AsyncGradientServer: submit this step's gradients, go on
              computing, apply the average from `staleness` steps ago
  lockfree    LockFreeAccumulator: ranks add into one symmetric buffer with
              device atomics (or, deterministic, into per-rank slots) and a
              generation counter; no collective call

Prints time per step and the communication time the step could not hide,
for staleness 0 (synchronous) and 1; and the lock-free sum's time per
generation in both modes, checked against the sum of every rank's part.
"""
import argparse
import copy
import sys

import torch

from job import finish, report, start, timed
from nvshmem_tutorial.training import AsyncGradientServer, LockFreeAccumulator


def async_grad(args, rank, world, dev):
    torch.manual_seed(0)
    base = torch.nn.Sequential(*[torch.nn.Linear(args.width, args.width) for _ in range(4)]).to(dev)
    g = torch.Generator().manual_seed(rank)
    x, y = torch.randn(64, args.width, generator=g).to(dev), torch.randn(64, args.width, generator=g).to(dev)
    rows = [(f"async gradient server, {world} ranks, {sum(p.numel() for p in base.parameters()) * 4 >> 10} KiB "
             "of gradients", "")]
    plain = copy.deepcopy(base)
    plain_opt = torch.optim.SGD(plain.parameters(), lr=1e-3)

    def compute_only():
        plain_opt.zero_grad()
        torch.nn.functional.mse_loss(plain(x), y).backward()
        plain_opt.step()

    t0 = timed(dev, compute_only, args.steps)
    rows.append(("time per step with no communication", f"{t0 * 1e6:.0f} us"))
    for staleness in (0, 1):
        model = copy.deepcopy(base)
        server = AsyncGradientServer(model.parameters(), staleness=staleness)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)

        def step():
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            server.submit_gradients()
            if server.wait():
                opt.step()

        t = timed(dev, step, args.steps)
        rows += [(f"staleness {staleness}: time per step", f"{t * 1e6:.0f} us"),
                 (f"staleness {staleness}: communication not hidden", f"{max(t - t0, 0) * 1e6:.0f} us")]
        server.close()
    report(rank, rows)


def lockfree(args, rank, world, dev):
    n = args.width * args.width
    rows = [(f"lock-free accumulation, {world} ranks, {n * 4 >> 10} KiB", "")]
    modes = [True] + ([False] if dev.type == "cuda" else [])
    for deterministic in modes:
        acc = LockFreeAccumulator(n, deterministic=deterministic)
        part = torch.full((n,), float(rank + 1), device=dev)
        ok = []

        def generation():
            acc.accumulate(part)
            ok.append(float(acc.result()[n // 2]) == world * (world + 1) / 2)

        t = timed(dev, generation, args.steps)
        name = "deterministic (put_signal, rank order)" if deterministic else "atomic (device atomics)"
        rows.append((f"{name}: time per generation", f"{t * 1e6:.0f} us, {'PASS' if all(ok) else 'FAIL'}"))
        acc.close()
        if not all(ok):
            report(rank, rows)
            sys.exit(1)
    report(rank, rows)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--demo", choices=["async_grad", "lockfree", "all"], default="all")
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--steps", type=int, default=20)
    args = p.parse_args()
    rank, world, dev, _ = start()
    if args.demo in ("async_grad", "all"):
        async_grad(args, rank, world, dev)
    if args.demo in ("lockfree", "all"):
        lockfree(args, rank, world, dev)
    finish()


if __name__ == "__main__":
    sys.exit(main())

"""ZeRO-style sharded optimizer on our reduce-scatter and all-gather."""
from __future__ import annotations

import time
from typing import Iterable, List, Optional, Tuple

import torch

from .buckets import padded, shard_range
from .comm import Communicator, SymmetricTensor, agree, fingerprint


class ShardedOptimizer:
    """Data parallelism whose optimizer state is split across the ranks
    (ZeRO stages 1 and 2): each rank keeps the optimizer state, and does the
    update, for 1/world of the parameters only.

    Use case: models whose Adam state (two fp32 tensors per parameter) does
    not fit on every GPU next to the parameters; each rank holds 1/world of
    it, for the same communication volume as an all-reduce (a
    reduce-scatter plus an all-gather move the same bytes).

    The parameters are moved into one flat buffer in the symmetric heap
    (each parameter's .data becomes a view of it), padded to a multiple of
    world. step(): gradients are packed into a flat symmetric buffer; a
    reduce-scatter leaves each rank the sum of its shard; the update runs
    as one fused kernel over the shard (torch's fused Adam or SGD over the
    single flat shard tensor); an all-gather brings every rank the updated
    parameters. Building it is collective and raises on every rank when the
    ranks' parameters differ.
    """

    def __init__(self, params: Iterable[torch.nn.Parameter], comm: Optional[Communicator] = None,
                 optimizer: str = "adam", lr: float = 1e-3, betas: Tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, momentum: float = 0.0,
                 check_parameters: bool = True):
        self.params: List[torch.nn.Parameter] = [p for p in params if p.requires_grad]
        self.comm = comm or Communicator()
        if not self.params:
            raise ValueError("nvshmem_tutorial.training.ShardedOptimizer: no parameters that require grad")
        if {p.dtype for p in self.params} != {torch.float32}:
            raise ValueError("nvshmem_tutorial.training.ShardedOptimizer: parameters must be float32")
        if optimizer not in ("adam", "sgd"):
            raise ValueError(f"nvshmem_tutorial.training.ShardedOptimizer: optimizer {optimizer!r} is not "
                             "'adam' or 'sgd'")
        agree("ShardedOptimizer", "parameter shapes or settings",
              [repr(tuple(p.shape)).encode() for p in self.params]
              + [repr((optimizer, lr, betas, eps, weight_decay, momentum)).encode()])
        if check_parameters:
            agree("ShardedOptimizer", "parameter values", [fingerprint(p) for p in self.params],
                  [f"parameter #{i} {tuple(p.shape)}" for i, p in enumerate(self.params)])
        world, rank = self.comm.world, self.comm.rank
        self.numel = sum(p.numel() for p in self.params)
        total = padded(self.numel, world)
        self._flat = SymmetricTensor(total, torch.float32, "sharded optimizer parameters")
        self._grads = SymmetricTensor(total, torch.float32, "sharded optimizer gradients")
        flat = self._flat.tensor
        flat.zero_()
        self._offsets = []
        off = 0
        with torch.no_grad():
            for p in self.params:
                n = p.numel()
                flat[off:off + n].copy_(p.reshape(-1))
                p.data = flat[off:off + n].view_as(p)
                self._offsets.append(off)
                off += n
        start, end = shard_range(self.numel, world, rank)
        self.shard = torch.nn.Parameter(flat[start:end])  # shares the flat buffer's memory
        self._send = torch.empty_like(self.shard.data)
        self._grad_shard = torch.zeros_like(self.shard.data)
        fused = {"fused": True}
        if optimizer == "adam":
            self._opt = torch.optim.Adam([self.shard], lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                         **fused)
        else:
            self._opt = torch.optim.SGD([self.shard], lr=lr, momentum=momentum, weight_decay=weight_decay, **fused)
        self.comm_seconds = 0.0

    def state_bytes(self) -> Tuple[int, int]:
        """(optimizer state bytes on this rank, bytes an unsharded optimizer
        would keep on every rank)."""
        per_element = 2 if isinstance(self._opt, torch.optim.Adam) else (1 if self._opt.defaults["momentum"] else 0)
        return per_element * 4 * self.shard.numel(), per_element * 4 * self.numel

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        """Reduce-scatter the gradients (average), update this rank's shard,
        all-gather the parameters. Collective; a missing gradient counts as 0."""
        g = self._grads.tensor
        g.zero_()
        for p, off in zip(self.params, self._offsets):
            if p.grad is not None:
                g[off:off + p.numel()].copy_(p.grad.reshape(-1))
        t0 = time.perf_counter()
        self.comm.reduce_scatter(self._grad_shard, g)
        self.comm_seconds += time.perf_counter() - t0
        self._grad_shard.mul_(1.0 / self.comm.world)
        self.shard.grad = self._grad_shard
        self._opt.step()
        self._send.copy_(self.shard.data)
        t0 = time.perf_counter()
        self.comm.all_gather(self._flat.tensor, self._send)
        self.comm_seconds += time.perf_counter() - t0

    def close(self) -> None:
        """Collective: frees the flat buffers. The parameters get their own
        memory back first, so the model stays usable."""
        with torch.no_grad():
            for p in self.params:
                p.data = p.data.clone()
        self._flat.free()
        self._grads.free()

"""Tensor-parallel linear layers (Megatron's column and row split) on our
collectives."""
from __future__ import annotations

from typing import Optional

import torch

from .comm import Communicator, agree


def _gather_last_dim(comm: Communicator, x: torch.Tensor) -> torch.Tensor:
    """[..., n] on every rank -> [..., world * n], rank r's part at r."""
    x = x.contiguous()
    out = torch.empty((comm.world,) + tuple(x.shape), dtype=x.dtype, device=x.device)
    comm.all_gather(out.view(-1), x.view(-1))
    return out.movedim(0, -2).reshape(*x.shape[:-1], comm.world * x.shape[-1])


def _my_part(comm: Communicator, x: torch.Tensor) -> torch.Tensor:
    n = x.shape[-1] // comm.world
    return x[..., comm.rank * n:(comm.rank + 1) * n].contiguous()


def _summed(comm: Communicator, x: torch.Tensor) -> torch.Tensor:
    y = x.contiguous().clone()
    comm.all_reduce(y)
    return y


def _as_is(comm: Communicator, x: torch.Tensor) -> torch.Tensor:
    return x


def _function(name: str, forward, backward):
    """An autograd function of (x, comm) from its two halves."""
    def fwd(ctx, x, comm):
        ctx.comm = comm
        return forward(comm, x)

    def bwd(ctx, g):
        return backward(ctx.comm, g), None

    return type(name, (torch.autograd.Function,), {"forward": staticmethod(fwd), "backward": staticmethod(bwd)})


# Megatron's four region boundaries. Copy: each rank's weight shard saw the
# whole (replicated) input, so the input's gradient is the sum. Reduce: the
# ranks' partial outputs add up. Gather: the ranks' output columns side by
# side. Scatter: this rank's input columns.
_CopyToParallel = _function("_CopyToParallel", _as_is, _summed)
_ReduceFromParallel = _function("_ReduceFromParallel", _summed, _as_is)
_GatherFromParallel = _function("_GatherFromParallel", _gather_last_dim, _my_part)
_ScatterToParallel = _function("_ScatterToParallel", _my_part, _gather_last_dim)


def _split(features: int, world: int, what: str) -> int:
    if features % world != 0:
        raise ValueError(f"nvshmem_tutorial.training.{what}: {features} features do not split over {world} ranks")
    return features // world


class ColumnParallelLinear(torch.nn.Module):
    """y = x W^T + b with W's output rows split across the ranks: rank r
    computes output features [r n / w, (r + 1) n / w).

    Use case: the first linear of a transformer MLP or the QKV projection,
    when the weights do not fit one GPU or one GPU's matmul is too slow.
    gather_output=False leaves each rank its own columns (what a following
    RowParallelLinear takes, with no communication in between); True
    all-gathers them. The input's gradient is all-reduced in backward.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, gather_output: bool = True,
                 comm: Optional[Communicator] = None):
        super().__init__()
        self.comm = comm or Communicator()
        self.out_per_rank = _split(out_features, self.comm.world, "ColumnParallelLinear")
        self.gather_output = gather_output
        self.weight = torch.nn.Parameter(torch.empty(self.out_per_rank, in_features, device=self.comm.device))
        self.bias = torch.nn.Parameter(torch.zeros(self.out_per_rank, device=self.comm.device)) if bias else None
        agree("ColumnParallelLinear", "layer shapes", [repr((in_features, out_features, bias, gather_output)).encode()])

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, gather_output: bool = True,
                    comm: Optional[Communicator] = None) -> "ColumnParallelLinear":
        """This rank's shard of an existing (replicated) nn.Linear."""
        m = cls(linear.in_features, linear.out_features, linear.bias is not None, gather_output, comm)
        rows = slice(m.comm.rank * m.out_per_rank, (m.comm.rank + 1) * m.out_per_rank)
        with torch.no_grad():
            m.weight.copy_(linear.weight[rows])
            if m.bias is not None:
                m.bias.copy_(linear.bias[rows])
        return m

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.linear(_CopyToParallel.apply(x, self.comm), self.weight, self.bias)
        return _GatherFromParallel.apply(y, self.comm) if self.gather_output else y


class RowParallelLinear(torch.nn.Module):
    """y = x W^T + b with W's input columns split across the ranks: rank r
    multiplies input features [r n / w, (r + 1) n / w) and the partial
    outputs are all-reduced (the bias is added once, after).

    Use case: the second linear of a transformer MLP or the attention
    output projection, right after a ColumnParallelLinear with
    gather_output=False (input_is_parallel=True): one all-reduce per MLP.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, input_is_parallel: bool = True,
                 comm: Optional[Communicator] = None):
        super().__init__()
        self.comm = comm or Communicator()
        self.in_per_rank = _split(in_features, self.comm.world, "RowParallelLinear")
        self.input_is_parallel = input_is_parallel
        self.weight = torch.nn.Parameter(torch.empty(out_features, self.in_per_rank, device=self.comm.device))
        self.bias = torch.nn.Parameter(torch.zeros(out_features, device=self.comm.device)) if bias else None
        agree("RowParallelLinear", "layer shapes",
              [repr((in_features, out_features, bias, input_is_parallel)).encode()])

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, input_is_parallel: bool = True,
                    comm: Optional[Communicator] = None) -> "RowParallelLinear":
        m = cls(linear.in_features, linear.out_features, linear.bias is not None, input_is_parallel, comm)
        cols = slice(m.comm.rank * m.in_per_rank, (m.comm.rank + 1) * m.in_per_rank)
        with torch.no_grad():
            m.weight.copy_(linear.weight[:, cols])
            if m.bias is not None:
                m.bias.copy_(linear.bias)
        return m

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.input_is_parallel:
            x = _ScatterToParallel.apply(x, self.comm)
        y = _ReduceFromParallel.apply(torch.nn.functional.linear(x, self.weight), self.comm)
        return y + self.bias if self.bias is not None else y

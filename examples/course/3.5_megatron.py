"""3.5 Integration with Megatron-LM: a tensor-parallel MLP on our all-reduce.

Megatron's tensor parallelism splits an MLP's two matrices across ranks:
the first by columns (ColumnParallelLinear: each rank computes its slice
of the hidden layer, no communication), the second by rows
(RowParallelLinear: each rank's partial product, then an all-reduce that
sums them). Backward mirrors it: the input's gradient is all-reduced.
This program runs megatron-core's own layers (the reference, on the CPU
over gloo) and the same computation on the GPU with each rank's weight
shards taken from Megatron's layers and our all_reduce, and compares the
output and the input gradient.

Run (one GPU, two ranks sharing it):
  NVST_TEST_SHARE_GPUS=1 torchrun --nproc_per_node=2 examples/course/3.5_megatron.py
(PYTHONPATH=build/python; megatron-core==0.16.1 installed: scripts/course_wheels.sh)
"""
from __future__ import annotations

import contextlib
import os
import sys

import torch
import torch.distributed as dist

with contextlib.redirect_stdout(sys.stderr):  # its import warns about optional packages
    from megatron.core import parallel_state
    from megatron.core.model_parallel_config import ModelParallelConfig
    from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear

import nvshmem_tutorial as nt  # noqa: E402
import nvshmem_tutorial.distributed as nd  # noqa: E402

BATCH, HIDDEN, FFN = 4, 16, 32


def megatron_mlp(n: int) -> tuple[torch.nn.Module, torch.nn.Module]:
    config = ModelParallelConfig(tensor_model_parallel_size=n, use_cpu_initialization=True,
                                 params_dtype=torch.float32)
    init = lambda w: torch.nn.init.normal_(w, std=0.5)  # noqa: E731
    torch.manual_seed(0)  # Megatron draws the full matrix and keeps this rank's shard
    fc1 = ColumnParallelLinear(HIDDEN, FFN, config=config, init_method=init, bias=False, gather_output=False)
    fc2 = RowParallelLinear(FFN, HIDDEN, config=config, init_method=init, bias=False, input_is_parallel=True,
                            skip_bias_add=True)
    return fc1, fc2


def the_input() -> torch.Tensor:
    return torch.randn(BATCH, HIDDEN, generator=torch.Generator().manual_seed(1))  # the same on every rank


def reference(fc1: torch.nn.Module, fc2: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    x = the_input().requires_grad_()
    h, _ = fc1(x)
    y, _ = fc2(torch.nn.functional.gelu(h))  # Megatron all-reduces inside fc2
    y.sum().backward()                       # and x.grad inside fc1's backward
    return y.detach(), x.grad


def ours(fc1: torch.nn.Module, fc2: torch.nn.Module, dev: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    w1 = fc1.weight.detach().to(dev)  # my columns of the first matrix (FFN / n rows of W1)
    w2 = fc2.weight.detach().to(dev)  # my rows of the second (FFN / n columns of W2)
    x = the_input().to(dev).requires_grad_()
    partial = torch.nn.functional.gelu(x @ w1.t()) @ w2.t()  # local: no communication
    y = partial.detach().clone()
    nd.all_reduce(y)                  # RowParallelLinear's forward all-reduce
    partial.sum().backward()          # d(sum y)/d(partial) = 1 on every rank
    grad = x.grad.clone()
    nd.all_reduce(grad)               # ColumnParallelLinear's backward all-reduce
    return y.cpu(), grad.cpu()


def main() -> None:
    share = os.environ.get("NVST_TEST_SHARE_GPUS") == "1"  # ranks share one GPU
    torch.cuda.set_device(0 if share else int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("gloo")  # Megatron's reference runs on the CPU
    nt.init_from_torch()
    rank, n = dist.get_rank(), dist.get_world_size()
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=n)
    fc1, fc2 = megatron_mlp(n)
    y_ref, g_ref = reference(fc1, fc2)
    y, g = ours(fc1, fc2, torch.device("cuda"))
    same_y = torch.allclose(y, y_ref, rtol=1e-4, atol=1e-5)
    same_g = torch.allclose(g, g_ref, rtol=1e-4, atol=1e-5)
    lines = [None] * n
    dist.all_gather_object(lines, f"rank {rank}: output equal {same_y}, input gradient equal {same_g}")
    if rank == 0:
        print(f"tensor parallel {n}: fc1 shard {tuple(fc1.weight.shape)}, fc2 shard {tuple(fc2.weight.shape)}")
        print("\n".join(lines))
    parallel_state.destroy_model_parallel()
    nt.finalize()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

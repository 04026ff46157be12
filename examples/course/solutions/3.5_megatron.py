"""3.5 Megatron-LM, the exercise: a vocabulary-parallel embedding.

Megatron's VocabParallelEmbedding splits the embedding table by rows:
rank r holds the vectors of tokens [r V/n, (r + 1) V/n). Each rank looks up
the tokens it owns, writes zeros for the others, and an all-reduce sums
the ranks' results, so every rank gets every token's vector. Ours: the
same lookup with this rank's rows of Megatron's own table on the GPU, and
nvshmem_tutorial.distributed.all_reduce; compared with Megatron's output.

Run:  NVST_TEST_SHARE_GPUS=1 torchrun --nproc_per_node=2 examples/course/solutions/3.5_megatron.py
"""
from __future__ import annotations

import contextlib
import os
import sys

import torch
import torch.distributed as dist

with contextlib.redirect_stdout(sys.stderr):
    from megatron.core import parallel_state
    from megatron.core.model_parallel_config import ModelParallelConfig
    from megatron.core.tensor_parallel import VocabParallelEmbedding

import nvshmem_tutorial as nt  # noqa: E402
import nvshmem_tutorial.distributed as nd  # noqa: E402

VOCAB, DIM = 64, 8


def main() -> None:
    torch.cuda.set_device(0 if os.environ.get("NVST_TEST_SHARE_GPUS") == "1" else int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("gloo")  # Megatron's reference on the CPU
    nt.init_from_torch()
    rank, n = dist.get_rank(), dist.get_world_size()
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=n)
    config = ModelParallelConfig(tensor_model_parallel_size=n, use_cpu_initialization=True, params_dtype=torch.float32)
    torch.manual_seed(0)
    table = VocabParallelEmbedding(VOCAB, DIM, init_method=lambda w: torch.nn.init.normal_(w, std=1.0), config=config)
    tokens = torch.randint(0, VOCAB, (3, 5), generator=torch.Generator().manual_seed(2))  # the same on every rank
    want = table(tokens).detach()

    dev = torch.device("cuda")
    rows = VOCAB // n
    first = rank * rows
    mine = table.weight.detach().to(dev)          # my rows of the table
    t = tokens.to(dev)
    owned = (t >= first) & (t < first + rows)
    out = mine[(t - first).clamp(0, rows - 1)]     # look up what I own
    out[~owned] = 0                                # zeros for the rest
    nd.all_reduce(out)                             # every token's vector, everywhere
    same = torch.allclose(out.cpu(), want, rtol=1e-6, atol=1e-6)
    lines = [None] * n
    dist.all_gather_object(lines, f"rank {rank}: rows [{first}, {first + rows}), output {tuple(out.shape)} equal: {same}")
    if rank == 0:
        print("\n".join(lines))
    parallel_state.destroy_model_parallel()
    nt.finalize()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

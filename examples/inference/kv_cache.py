"""A paged KV cache on the symmetric heap: every rank keeps its sequences'
keys and values in pages of its own heap, and every rank attends over every
rank's sequences, reading the pages where they lie (NVLink loads through the
page table; no copy into a local cache). Each result is checked against
attention over a local, contiguous cache of the same tokens.

    torchrun --nproc_per_node=2 examples/inference/kv_cache.py   (PYTHONPATH=build/python)
"""
import torch
import torch.distributed as dist

from _job import Timer, finish, join
from nvshmem_tutorial.inference import DistributedKVCache

HEADS, DIM, PAGE, SEQS = 8, 64, 16, 4


def tokens(home, seq, dev):
    """The keys and values of sequence `seq` of rank `home`: the same on every rank."""
    g = torch.Generator().manual_seed(1000 * home + seq)
    length = int(torch.randint(1, 200, (1,), generator=g))
    k = torch.randn(length, HEADS, DIM, generator=g)
    v = torch.randn(length, HEADS, DIM, generator=g)
    return k.to(dev), v.to(dev)


def reference(q, k, v):
    """Attention over a local contiguous cache."""
    s = torch.einsum("hd,thd->ht", q, k) / DIM**0.5
    return torch.einsum("ht,thd->hd", torch.softmax(s, dim=1), v)


def main():
    rank, world, dev = join()
    cache = DistributedKVCache(num_pages=64, page_size=PAGE, num_heads=HEADS, head_dim=DIM, max_seqs=SEQS)
    for seq in range(SEQS):  # prefill this rank's sequences in two appends (a page is split across them)
        k, v = tokens(rank, seq, dev)
        half = k.shape[0] // 2
        cache.append(seq, k[:half], v[:half])
        cache.append(seq, k[half:], v[half:])
    dist.barrier()
    worst, timer = 0.0, Timer()
    for home in range(world):
        for seq in range(SEQS):
            k, v = tokens(home, seq, dev)
            q = torch.randn(HEADS, DIM, generator=torch.Generator().manual_seed(7 + seq)).to(dev)
            with timer:
                got = cache.attend(q, seq, home)
            worst = max(worst, (got - reference(q, k, v)).abs().max().item())
            assert cache.length(seq, home) == k.shape[0]
    ok = worst < 1e-4
    print(f"rank {rank}: attention over {world * SEQS} sequences of {world} ranks' pages: "
          f"max |error| against a local cache {worst:.2e} ({'PASS' if ok else 'FAIL'}); {timer.summary()}")
    finish(ok, cache)


if __name__ == "__main__":
    main()

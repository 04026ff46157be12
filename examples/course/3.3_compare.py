"""3.3 NCCL vs NVSHMEM vs ours: the same halo exchange two ways.

A 1-D domain is split across PEs; each step every PE needs HALO values
from each neighbour's edge. Two ways to get them:
  - collective (NCCL's model: every rank calls the same operation with
    matching sizes): an all_gather of every PE's edges, from which each PE
    picks its neighbours' - simple, but each PE receives every PE's edges;
  - one-sided (NVSHMEM's model): each PE puts its edges straight into its
    neighbours' halo slots with a signal - only the bytes that are needed,
    and only the two neighbours take part.
This library offers both on the same symmetric heap, so a program can use
the collective where the pattern is dense and regular and the put where it
is sparse or data-dependent. The program checks both give the same halos
and prints what each PE received.

Run:  PYTHONPATH=build/python python3 examples/course/3.3_compare.py
"""
from __future__ import annotations

import numpy as np

import nvshmem_tutorial as nt

N_PES = 4
LOCAL = 10_000  # cells per PE
HALO = 64       # cells each side needs from each neighbour


def domain(rank: int) -> np.ndarray:
    return np.random.default_rng(rank).standard_normal(LOCAL).astype(np.float32)


def halos_by_collective(mine: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """(left halo, right halo, bytes received): an all_gather of every edge."""
    me, n = nt.my_pe(), nt.n_pes()
    edges = np.concatenate([mine[:HALO], mine[-HALO:]])  # my left and right edges
    every = np.zeros(n * edges.size, np.float32)
    nt.all_gather(edges, every)
    every = every.reshape(n, 2, HALO)
    left, right = (me - 1) % n, (me + 1) % n
    return every[left, 1], every[right, 0], (n - 1) * edges.nbytes


def halos_by_puts(mine: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """One-sided: my edges go straight into my neighbours' halo slots."""
    me, n = nt.my_pe(), nt.n_pes()
    halo = nt.alloc(2 * HALO * 4)  # [from my left neighbour | from my right neighbour]
    sig = nt.alloc(8)
    left, right = (me - 1) % n, (me + 1) % n
    nt.put_signal(halo, mine[:HALO].copy(), sig, 0, 1, left, add=True, offset=HALO * 4)  # its right halo
    nt.put_signal(halo, mine[-HALO:].copy(), sig, 0, 1, right, add=True)                # its left halo
    nt.signal_wait_until(sig, 0, "ge", 2)
    h = halo.array(np.float32).copy()
    nt.barrier_all()
    nt.free(sig)
    nt.free(halo)
    return h[:HALO], h[HALO:], 2 * HALO * 4


def pe_main(rank: int) -> str:
    n = nt.n_pes()
    mine = domain(rank)
    cl, cr, cb = halos_by_collective(mine)
    pl, pr, pb = halos_by_puts(mine)
    want_l, want_r = domain((rank - 1) % n)[-HALO:], domain((rank + 1) % n)[:HALO]
    same = all(np.array_equal(a, b) for a, b in ((cl, want_l), (cr, want_r), (pl, want_l), (pr, want_r)))
    return f"PE {rank}: halos correct both ways: {same}; bytes received: all_gather {cb}, puts {pb}"


if __name__ == "__main__":
    env = {"NVST_SYMMETRIC_SIZE": "8M", "NVST_COLL_WORKSPACE": "1M"}
    for line in nt.launch(N_PES, pe_main, env=env):
        print(line)

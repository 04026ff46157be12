"""2.3 AllGather, the exercise: the direct (one-shot) all-gather.

Each PE puts its block into slot [its rank] of every PE's output at once
and adds 1 to one signal word there; each PE waits until the word reaches
n - 1. One hop of latency; the PE's link carries n - 1 blocks at the same
time, where the ring sends one per step.

Run:  PYTHONPATH=build/python python3 examples/course/solutions/2.3_allgather.py
"""
from __future__ import annotations

import numpy as np

import nvshmem_tutorial as nt

BLOCK = 25_000


def pe_main(rank: int) -> str:
    n = nt.n_pes()
    mine = np.random.default_rng(rank).standard_normal(BLOCK).astype(np.float32)
    out = nt.alloc(n * mine.nbytes)
    sig = nt.alloc(8)
    out.array(np.float32)[rank * BLOCK:(rank + 1) * BLOCK] = mine
    for pe in range(n):
        if pe != rank:
            nt.put_signal(out, mine, sig, 0, 1, pe, add=True, offset=rank * mine.nbytes)
    nt.signal_wait_until(sig, 0, "ge", n - 1)
    direct = out.array(np.float32).copy()
    library = np.zeros(n * BLOCK, np.float32)
    nt.all_gather(mine, library)
    nt.barrier_all()
    nt.free(sig)
    nt.free(out)
    return f"PE {rank}: direct all-gather equals the library's: {np.array_equal(direct, library)}"


if __name__ == "__main__":
    for line in nt.launch(4, pe_main, env={"NVST_SYMMETRIC_SIZE": "8M", "NVST_COLL_WORKSPACE": "1M"}):
        print(line)

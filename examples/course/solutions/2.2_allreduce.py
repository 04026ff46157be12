"""2.2 AllReduce, the exercise: a one-shot all-reduce.

Every PE puts its whole input into slot [its rank] of every other PE with
a signal, waits for n - 1 signals, and sums the n slots in PE order. One
step instead of 2 (n - 1): fewer hops (latency), but each PE sends
(n - 1) times its data instead of 2 (n - 1) / n times (bandwidth). Small
messages prefer it; the library's automatic choice does the same.

Run:  PYTHONPATH=build/python python3 examples/course/solutions/2.2_allreduce.py
"""
from __future__ import annotations

import numpy as np

import nvshmem_tutorial as nt

COUNT = 10_000


def one_shot_all_reduce(x: np.ndarray) -> np.ndarray:
    rank, n = nt.my_pe(), nt.n_pes()
    slots = nt.alloc(n * x.nbytes)
    sig = nt.alloc(8)
    for pe in range(n):
        if pe != rank:
            nt.put_signal(slots, x, sig, 0, 1, pe, add=True, offset=rank * x.nbytes)
    nt.signal_wait_until(sig, 0, "ge", n - 1)
    mine = slots.array(x.dtype).reshape(n, x.size)
    mine[rank] = x
    out = mine.sum(axis=0, dtype=x.dtype)
    nt.barrier_all()
    nt.free(sig)
    nt.free(slots)
    return out


def pe_main(rank: int) -> str:
    n = nt.n_pes()
    inputs = [np.random.default_rng(p).integers(-1000, 1000, COUNT, dtype=np.int32) for p in range(n)]
    library = np.zeros(COUNT, np.int32)
    nt.all_reduce(inputs[rank], library, "sum")
    return f"PE {rank}: one-shot equals the library's all_reduce: {np.array_equal(one_shot_all_reduce(inputs[rank]), library)}"


if __name__ == "__main__":
    for line in nt.launch(4, pe_main, env={"NVST_SYMMETRIC_SIZE": "8M", "NVST_COLL_WORKSPACE": "1M"}):
        print(line)

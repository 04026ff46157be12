"""2.2 AllReduce: a ring all-reduce written with puts, against the library's.

The bandwidth-optimal all-reduce is two rings: a reduce-scatter (n - 1
steps; after them PE r holds the full sum of chunk (r + 1) % n) and an
all-gather of the reduced chunks (n - 1 more steps). Each step every PE
sends one chunk, 1/n of the data, to its right neighbour, so each PE sends
2 (n - 1) / n of the data in all: the least any all-reduce can.

Integers make the check exact: the sum does not depend on the order.

Run:  PYTHONPATH=build/python python3 examples/course/2.2_allreduce.py
"""
from __future__ import annotations

import numpy as np

import nvshmem_tutorial as nt

N_PES = 4
COUNT = 40_000  # int32 elements, a multiple of N_PES


def ring_all_reduce(x: np.ndarray) -> np.ndarray:
    rank, n = nt.my_pe(), nt.n_pes()
    right = (rank + 1) % n
    chunk = x.size // n
    acc = x.copy()
    # One receive slot per step and one signal word per step: no slot is
    # ever written twice, so no flow control is needed (memory for time).
    steps = 2 * (n - 1)
    inbox = nt.alloc(steps * chunk * 4)
    sig = nt.alloc(8 * steps)
    slots = inbox.array(np.int32).reshape(steps, chunk)

    def part(c: int) -> slice:
        return slice(c * chunk, (c + 1) * chunk)

    # Reduce-scatter: at step s send chunk (rank - s), receive chunk
    # (rank - s - 1) from the left and add my own to it.
    for s in range(n - 1):
        nt.put_signal(inbox, acc[part((rank - s) % n)].copy(), sig, s, 1, right, offset=s * chunk * 4)
        nt.signal_wait_until(sig, s, "eq", 1)
        acc[part((rank - s - 1) % n)] += slots[s]
    # Now acc's chunk (rank + 1) % n is the full sum. All-gather it around
    # the ring: at step s send chunk (rank + 1 - s), receive (rank - s).
    for s in range(n - 1):
        t = n - 1 + s
        nt.put_signal(inbox, acc[part((rank + 1 - s) % n)].copy(), sig, t, 1, right, offset=t * chunk * 4)
        nt.signal_wait_until(sig, t, "eq", 1)
        acc[part((rank - s) % n)] = slots[t]
    nt.barrier_all()
    nt.free(sig)
    nt.free(inbox)
    return acc


def pe_main(rank: int) -> str:
    n = nt.n_pes()
    inputs = [np.random.default_rng(p).integers(-1000, 1000, COUNT, dtype=np.int32) for p in range(n)]
    want = np.sum(inputs, axis=0, dtype=np.int32)

    mine = ring_all_reduce(inputs[rank])
    library = np.zeros(COUNT, np.int32)
    nt.all_reduce(inputs[rank], library, "sum")  # nvshmem_int_sum_reduce(NVSHMEM_TEAM_WORLD, ...)
    return (f"PE {rank}: ring all-reduce correct: {np.array_equal(mine, want)}, "
            f"library all_reduce correct: {np.array_equal(library, want)}")


if __name__ == "__main__":
    env = {"NVST_SYMMETRIC_SIZE": "8M", "NVST_COLL_WORKSPACE": "1M"}
    for line in nt.launch(N_PES, pe_main, env=env):
        print(line)

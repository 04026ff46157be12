"""1.4 Synchronization, the exercise: a barrier made of signals.

A central-counter barrier that can be reused: in its g-th use every PE adds
1 to word 0 on PE 0 and waits until word 1 on itself reaches g; PE 0 waits
until word 0 reaches g * n and then sets word 1 to g on every PE. The
counters only grow, so no reset is needed between uses. Each PE checks, after
every round, that every PE's put of that round is visible to it.

Run:  PYTHONPATH=build/python python3 examples/course/solutions/1.4_sync.py
"""
from __future__ import annotations

import numpy as np

import nvshmem_tutorial as nt

ROUNDS = 3


def my_barrier(sig: nt.Symmetric, g: int) -> None:
    n = nt.n_pes()
    empty = np.zeros(0, np.uint8)
    nt.quiet()  # my earlier puts are complete before I announce arrival
    nt.put_signal(sig, empty, sig, 0, 1, 0, add=True)
    if nt.my_pe() == 0:
        nt.signal_wait_until(sig, 0, "ge", g * n)
        for pe in range(n):
            nt.put_signal(sig, empty, sig, 1, g, pe)
    nt.signal_wait_until(sig, 1, "ge", g)


def pe_main(rank: int) -> str:
    n = nt.n_pes()
    sig = nt.alloc(16)
    slots = nt.alloc(8 * n)
    seen = []
    for r in range(1, ROUNDS + 1):
        for pe in range(n):  # my slot on every PE := this round's number
            nt.put(slots, np.array([r * 100 + rank], np.int64), pe, offset=8 * rank)
        my_barrier(sig, 2 * r - 1)
        seen.append(bool(np.array_equal(slots.array(np.int64), r * 100 + np.arange(n))))
        my_barrier(sig, 2 * r)  # the next round's puts wait for everyone's check
    nt.barrier_all()
    nt.free(slots)
    nt.free(sig)
    return f"PE {rank}: rounds complete and visible {seen}"


if __name__ == "__main__":
    for line in nt.launch(4, pe_main, env={"NVST_SYMMETRIC_SIZE": "8M"}):
        print(line)

"""1.4 Barriers and synchronization: when is the data there?

Three ways to know that a put has landed, from the heaviest to the lightest:
  1. barrier_all: every PE completes its puts and waits for all the others;
  2. put_signal + signal_wait_until: the data, then a signal word the
     target waits on; only the two PEs involved take part;
  3. put; fence; put(flag): ordering alone, for a flag written by a plain put.
Plus a signal that counts: every PE adds 1 to one word (a gather of
"I am done" without a barrier).

Run:  PYTHONPATH=build/python python3 examples/course/1.4_sync.py
"""
from __future__ import annotations

import numpy as np

import nvshmem_tutorial as nt

N_PES = 4
COUNT = 50_000


def payload(sender: int, step: int) -> np.ndarray:
    return np.random.default_rng(100 * step + sender).integers(0, 1 << 30, COUNT, dtype=np.int32)


def pe_main(rank: int) -> list[str]:
    n = nt.n_pes()
    right, left = (rank + 1) % n, (rank - 1) % n
    data = nt.alloc(4 * COUNT)
    sig = nt.alloc(8 * 4)  # four signal words, zeroed by alloc
    lines: list[str] = []

    # 1. Barrier: nvshmem_barrier_all() = quiet (my puts complete) + every
    # PE arrives. After it, every put issued before it is visible.
    nt.put(data, payload(rank, 1), right)
    nt.barrier_all()
    lines.append(f"barrier: {np.array_equal(data.array(np.int32), payload(left, 1))}")
    nt.barrier_all()  # everyone read step 1 before step 2 overwrites it

    # 2. Put with signal: nvshmem_putmem_signal(data, src, n, sig, 1,
    # NVSHMEM_SIGNAL_SET, right). The signal is written after the data, so
    # a target that sees the signal sees the data. No other PE waits.
    nt.put_signal(data, payload(rank, 2), sig, 0, 1, right)
    value = nt.signal_wait_until(sig, 0, "eq", 1)  # nvshmem_signal_wait_until(sig, NVSHMEM_CMP_EQ, 1)
    lines.append(f"put_signal: {np.array_equal(data.array(np.int32), payload(left, 2))} (signal {value})")

    # Before reusing `data` my left neighbour must know I have read it:
    # a signal back (word 1) instead of a barrier.
    nt.put_signal(data, np.zeros(0, np.int32), sig, 1, 1, left)
    nt.signal_wait_until(sig, 1, "eq", 1)

    # 3. Fence: puts to one PE are delivered in order across a fence
    # (nvshmem_fence). A plain put of a flag after the data works as a
    # signal; without the fence the flag could overtake the data.
    nt.put(data, payload(rank, 3), right)
    nt.fence()
    nt.put(sig, np.array([7], np.uint64), right, offset=8 * 2)
    nt.signal_wait_until(sig, 2, "eq", 7)
    lines.append(f"fence + flag: {np.array_equal(data.array(np.int32), payload(left, 3))}")

    # A counting signal: every PE adds 1 to word 3 on PE 0
    # (NVSHMEM_SIGNAL_ADD); PE 0 waits until it reaches n.
    nt.put_signal(data, np.zeros(0, np.int32), sig, 3, 1, 0, add=True)
    if rank == 0:
        lines.append(f"arrivals counted on PE 0: {nt.signal_wait_until(sig, 3, 'ge', n)}")

    nt.barrier_all()  # nobody frees memory a peer may still write
    nt.free(sig)
    nt.free(data)
    return lines


if __name__ == "__main__":
    for rank, lines in enumerate(nt.launch(N_PES, pe_main, env={"NVST_SYMMETRIC_SIZE": "8M"})):
        for line in lines:
            print(f"PE {rank} {line}")

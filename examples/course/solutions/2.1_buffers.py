"""2.1 Communication buffers, the exercise: two producers, one consumer.

PEs 0 and 2 each stream MESSAGES messages to PE 1. Each producer gets its
own region of SLOTS slots and its own `ready` word on the consumer (so they
never write the same place), and its own credit word at home. The consumer
takes whichever producer's next message is there, in turn.

Run:  PYTHONPATH=build/python python3 examples/course/solutions/2.1_buffers.py
"""
from __future__ import annotations

import numpy as np

import nvshmem_tutorial as nt

SLOTS, SLOT_INTS, MESSAGES = 3, 256, 10
CONSUMER, PRODUCERS = 1, (0, 2)


def message(producer: int, i: int) -> np.ndarray:
    return np.full(SLOT_INTS, 1000 * producer + i, np.int32)


def pe_main(rank: int) -> str:
    buf = nt.alloc(len(PRODUCERS) * SLOTS * SLOT_INTS * 4)
    sig = nt.alloc(8 * (len(PRODUCERS) + 1))  # consumer: ready word per producer; producer: word 2 = credits
    empty = np.zeros(0, np.uint8)
    if rank in PRODUCERS:
        k = PRODUCERS.index(rank)
        for i in range(MESSAGES):
            nt.signal_wait_until(sig, 2, "ge", max(0, i - SLOTS + 1))
            offset = ((k * SLOTS) + i % SLOTS) * SLOT_INTS * 4
            nt.put_signal(buf, message(rank, i), sig, k, 1, CONSUMER, add=True, offset=offset)
        text = f"PE {rank}: sent {MESSAGES}"
    else:
        slots = buf.array(np.int32).reshape(len(PRODUCERS), SLOTS, SLOT_INTS)
        good = {p: 0 for p in PRODUCERS}
        for i in range(MESSAGES):
            for k, p in enumerate(PRODUCERS):
                nt.signal_wait_until(sig, k, "ge", i + 1)
                good[p] += int(np.array_equal(slots[k, i % SLOTS], message(p, i)))
                nt.put_signal(sig, empty, sig, 2, 1, p, add=True)
        text = f"PE {rank}: intact from PE 0: {good[0]}, from PE 2: {good[2]}"
    nt.barrier_all()
    nt.free(sig)
    nt.free(buf)
    return text


if __name__ == "__main__":
    for line in nt.launch(3, pe_main, env={"NVST_SYMMETRIC_SIZE": "8M"}):
        print(line)

"""2.4 Overlap, the exercise: the receiver computes while data arrives.

PE 0 sends a large array to PE 1 in CHUNKS chunks, each with its own
signal word. PE 1 does not wait for the whole array: it waits for chunk c,
processes it (a running sum of squares) and moves on, so its compute on
chunk c overlaps the transfer of chunk c + 1. The result must equal the
same computation on the whole array.

Run:  PYTHONPATH=build/python python3 examples/course/solutions/2.4_overlap.py
"""
from __future__ import annotations

import numpy as np

import nvshmem_tutorial as nt

CHUNKS, CHUNK = 8, 20_000


def pe_main(rank: int) -> str:
    data = nt.alloc(4 * CHUNKS * CHUNK)
    sig = nt.alloc(8 * CHUNKS)
    source = np.random.default_rng(3).integers(-100, 100, CHUNKS * CHUNK).astype(np.int32)
    text = ""
    if rank == 0:
        for c in range(CHUNKS):
            part = source[c * CHUNK:(c + 1) * CHUNK]
            nt.put_signal(data, part, sig, c, 1, 1, offset=4 * c * CHUNK)
        text = f"PE 0: sent {CHUNKS} chunks"
    else:
        view = data.array(np.int32)
        total = 0
        for c in range(CHUNKS):
            nt.signal_wait_until(sig, c, "eq", 1)
            chunk = view[c * CHUNK:(c + 1) * CHUNK].astype(np.int64)
            total += int((chunk * chunk).sum())
        whole = int((source.astype(np.int64) ** 2).sum())
        text = f"PE 1: sum of squares chunk by chunk equals the whole: {total == whole}"
    nt.barrier_all()
    nt.free(sig)
    nt.free(data)
    return text


if __name__ == "__main__":
    for line in nt.launch(2, pe_main, env={"NVST_SYMMETRIC_SIZE": "8M"}):
        print(line)

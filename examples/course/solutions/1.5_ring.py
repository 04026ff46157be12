"""1.5 Ring communication, the exercise: two tokens in opposite directions.

PE 0 sends one token right (clockwise) and one left (counter-clockwise) at
the same time. Each PE appends its rank as a decimal digit to each token
and forwards it in the token's direction; PE 0 prints both on their return.
Each direction has its own buffer and signal word, so the two never mix.

Run:  PYTHONPATH=build/python python3 examples/course/solutions/1.5_ring.py
"""
from __future__ import annotations

import numpy as np

import nvshmem_tutorial as nt


def pe_main(rank: int) -> str:
    n = nt.n_pes()
    tokens = nt.alloc(16)  # word 0: clockwise token, word 1: counter-clockwise
    sig = nt.alloc(16)
    step = {0: +1, 1: -1}
    if rank == 0:
        for d in (0, 1):
            nt.put_signal(tokens, np.array([0], np.int64), sig, d, 1, (rank + step[d]) % n, offset=8 * d)
    for d in (0, 1):
        nt.signal_wait_until(sig, d, "eq", 1)
        if rank != 0:
            value = int(tokens.array(np.int64)[d]) * 10 + rank
            nt.put_signal(tokens, np.array([value], np.int64), sig, d, 1, (rank + step[d]) % n, offset=8 * d)
    result = tokens.array(np.int64).tolist()
    nt.barrier_all()
    nt.free(sig)
    nt.free(tokens)
    return f"clockwise visits {result[0]}, counter-clockwise visits {result[1]}" if rank == 0 else ""


if __name__ == "__main__":
    print(nt.launch(4, pe_main, env={"NVST_SYMMETRIC_SIZE": "8M"})[0])

"""1.2 Symmetric memory, the exercise: a table every PE fills in.

One symmetric array of n int64 slots; each PE writes 10 * (its rank) + 1 +
(the target's rank) into slot [its rank] of every PE's array (an
all-to-all made of puts at an offset), then every PE prints its table.

Run:  PYTHONPATH=build/python python3 examples/course/solutions/1.2_symmetric.py
"""
from __future__ import annotations

import numpy as np

import nvshmem_tutorial as nt


def pe_main(rank: int) -> str:
    n = nt.n_pes()
    table = nt.alloc(8 * n)
    for pe in range(n):
        value = np.array([10 * rank + 1 + pe], dtype=np.int64)
        nt.put(table, value, pe, offset=8 * rank)  # my slot, in PE pe's copy
    nt.barrier_all()
    row = table.array(np.int64).tolist()
    nt.barrier_all()  # nobody frees while a peer may still write
    nt.free(table)
    return f"PE {rank}: {row}"


if __name__ == "__main__":
    for line in nt.launch(4, pe_main, env={"NVST_SYMMETRIC_SIZE": "8M"}):
        print(line)

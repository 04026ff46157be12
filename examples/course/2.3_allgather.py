"""2.3 AllGather: every PE ends with every PE's block, in PE order.

The ring all-gather: at step s each PE forwards to its right neighbour the
block it received at step s - 1 (its own at step 0), straight into the
right place of the neighbour's output, with one signal word per step. After
n - 1 steps every output is complete. Each PE sends (n - 1) blocks, all to
one neighbour: bandwidth-optimal, n - 1 hops of latency.

Run:  PYTHONPATH=build/python python3 examples/course/2.3_allgather.py
"""
from __future__ import annotations

import numpy as np

import nvshmem_tutorial as nt

N_PES = 4
BLOCK = 25_000  # float32 elements per PE


def block_of(pe: int) -> np.ndarray:
    return np.random.default_rng(pe).standard_normal(BLOCK).astype(np.float32)


def ring_all_gather(mine: np.ndarray) -> np.ndarray:
    rank, n = nt.my_pe(), nt.n_pes()
    right = (rank + 1) % n
    out = nt.alloc(n * mine.nbytes)  # symmetric: the peers write into it
    sig = nt.alloc(8 * n)            # word s: the block of step s has arrived
    blocks = out.array(np.float32).reshape(n, mine.size)
    blocks[rank] = mine
    for s in range(n - 1):
        b = (rank - s) % n  # the block I hold and forward at step s
        # Straight into slot b of the neighbour's output: no copy at the end.
        nt.put_signal(out, blocks[b].copy(), sig, s, 1, right, offset=b * mine.nbytes)
        nt.signal_wait_until(sig, s, "eq", 1)  # block (rank - s - 1) arrived
    result = blocks.reshape(-1).copy()
    nt.barrier_all()
    nt.free(sig)
    nt.free(out)
    return result


def pe_main(rank: int) -> str:
    n = nt.n_pes()
    want = np.concatenate([block_of(p) for p in range(n)])
    mine = ring_all_gather(block_of(rank))
    library = np.zeros(n * BLOCK, np.float32)
    nt.all_gather(block_of(rank), library)  # nvshmem_fcollectmem / nvshmem_float_fcollect
    # A gather only moves bytes, so equality is exact even for floats.
    return (f"PE {rank}: ring all-gather equal: {np.array_equal(mine, want)}, "
            f"library all_gather equal: {np.array_equal(library, want)}")


if __name__ == "__main__":
    env = {"NVST_SYMMETRIC_SIZE": "8M", "NVST_COLL_WORKSPACE": "1M"}
    for line in nt.launch(N_PES, pe_main, env=env):
        print(line)

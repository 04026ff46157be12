"""1.3 One-sided put and get: write into another PE's memory, no receive call.

The target of a put does nothing: it does not post a receive, it does not
know when the data arrives unless the writer tells it (lesson 1.4). This
program moves a block of floats one step right around the PEs, writes into
the middle of a buffer with an offset, and shows the checks every put makes
before any byte moves.

Run:  PYTHONPATH=build/python python3 examples/course/1.3_put_get.py
"""
from __future__ import annotations

import numpy as np

import nvshmem_tutorial as nt

N_PES = 3
COUNT = 100_000  # floats per block: 400 KB, several fabric messages


def block_of(rank: int) -> np.ndarray:
    """The data PE `rank` sends: random, so a misplaced byte would show."""
    return np.random.default_rng(rank).standard_normal(COUNT).astype(np.float32)


def pe_main(rank: int) -> list[str]:
    n = nt.n_pes()
    right, left = (rank + 1) % n, (rank - 1) % n
    inbox = nt.alloc(4 * COUNT)
    lines: list[str] = []

    # nvshmem_putmem(inbox, src, bytes, right): blocking, which means the
    # source may be reused on return; it does not mean the target sees it.
    nt.put(inbox, block_of(rank), right)
    nt.barrier_all()  # completes every put, then synchronizes (lesson 1.4)
    ok = np.array_equal(inbox.array(np.float32), block_of(left))
    lines.append(f"PE {rank}: block from PE {left} arrived intact: {ok}")

    # A put at an offset: 4 int32 written at byte 16 of the same buffer on
    # the right neighbour (nvshmem_int_put(inbox + 4, src, 4, right)).
    nt.barrier_all()  # everyone has read the block before we overwrite it
    nt.put(inbox, np.arange(4, dtype=np.int32) + 10 * rank, right, offset=16)
    nt.barrier_all()
    lines.append(f"PE {rank}: ints 4..7 = {inbox.array(np.int32)[4:8].tolist()}")

    # Every put is checked first; a bad one raises on the caller and no
    # byte moves: past the end of the allocation, a PE that does not exist,
    # a source that is not one contiguous block.
    bad = {
        "past the end": lambda: nt.put(inbox, np.zeros(COUNT + 1, np.float32), right),
        "PE out of range": lambda: nt.put(inbox, np.zeros(4, np.float32), n + 3),
        "strided source": lambda: nt.put(inbox, np.zeros((4, 4), np.float32)[:, 1], right),
    }
    for what, call in bad.items():
        try:
            call()
            lines.append(f"PE {rank}: {what}: accepted (wrong)")
        except (ValueError, RuntimeError) as e:
            lines.append(f"PE {rank}: {what}: refused ({type(e).__name__})")

    # Gets: on GPUs, nvshmem_getmem / nt.nvshmem_get_tensor read a node
    # peer's heap by load/store (lesson 1.6). Host-memory PEs reach their
    # peers only through the proxy, which does puts; a read from another
    # node is a request answered by a put (this lesson's exercise).
    nt.barrier_all()
    nt.free(inbox)
    return lines


if __name__ == "__main__":
    for lines in nt.launch(N_PES, pe_main, env={"NVST_SYMMETRIC_SIZE": "8M"}):
        for line in lines:
            print(line)

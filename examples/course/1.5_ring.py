"""1.5 Ring communication: every PE talks only to its right neighbour.

A ring is the pattern behind ring all-reduce and all-gather: n PEs, each
receives from the left and sends to the right, so every link carries the
same load. Two rings here:
  A. a token goes around the ring LAPS times; each PE adds its rank;
  B. PE 0 broadcasts a large array along the ring in chunks: a PE forwards
     chunk c as soon as it has arrived, while chunk c + 1 is on its way,
     so the ring works as a pipeline instead of n - 1 serial hops.

Run:  PYTHONPATH=build/python python3 examples/course/1.5_ring.py
"""
from __future__ import annotations

import numpy as np

import nvshmem_tutorial as nt

N_PES = 4
LAPS = 3
CHUNKS, CHUNK = 8, 16_384  # float32 elements per chunk


def token_ring(rank: int, n: int) -> int:
    """A: returns the token PE 0 holds after LAPS laps."""
    token = nt.alloc(8)
    sig = nt.alloc(8)  # counts arrivals: lap L has arrived when it reaches L
    right = (rank + 1) % n
    value = 0
    for lap in range(1, LAPS + 1):
        if rank == 0:
            # PE 0 starts each lap with what came back from the last one.
            nt.put_signal(token, np.array([value], np.int64), sig, 0, 1, right, add=True)
            nt.signal_wait_until(sig, 0, "ge", lap)
            value = int(token.array(np.int64)[0])
        else:
            nt.signal_wait_until(sig, 0, "ge", lap)
            value = int(token.array(np.int64)[0]) + rank
            nt.put_signal(token, np.array([value], np.int64), sig, 0, 1, right, add=True)
    nt.barrier_all()
    nt.free(sig)
    nt.free(token)
    return value


def ring_broadcast(rank: int, n: int) -> bool:
    """B: PE 0's array reaches every PE chunk by chunk."""
    data = nt.alloc(4 * CHUNKS * CHUNK)
    sig = nt.alloc(8 * CHUNKS)  # word c: chunk c has arrived
    right = (rank + 1) % n
    source = np.random.default_rng(7).standard_normal(CHUNKS * CHUNK).astype(np.float32)
    if rank == 0:
        data.array(np.float32)[:] = source
    mine = data.array(np.float32)
    for c in range(CHUNKS):
        part = slice(c * CHUNK, (c + 1) * CHUNK)
        if rank != 0:
            nt.signal_wait_until(sig, c, "eq", 1)  # chunk c is here
        if right != 0:  # the last PE keeps what it got
            nt.put_signal(data, mine[part].copy(), sig, c, 1, right, offset=4 * c * CHUNK)
    ok = bool(np.array_equal(mine, source))
    nt.barrier_all()
    nt.free(sig)
    nt.free(data)
    return ok


def pe_main(rank: int) -> str:
    n = nt.n_pes()
    token = token_ring(rank, n)
    ok = ring_broadcast(rank, n)
    text = f"PE {rank}: ring broadcast of {CHUNKS} chunks intact: {ok}"
    if rank == 0:
        text = f"PE 0: token after {LAPS} laps = {token} (= {LAPS} x (1 + ... + {n - 1}))\n" + text
    return text


if __name__ == "__main__":
    for text in nt.launch(N_PES, pe_main, env={"NVST_SYMMETRIC_SIZE": "8M"}):
        print(text)

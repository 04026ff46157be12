"""3.2 Custom collective operations: an all-to-all and a reduce to one PE.

The library's collectives are compositions of lesson 1.4's calls; so can
yours be, when a pattern is not in the library or a fused form saves a
pass. Two here, each with the three parts every collective has:
  - placement: where each PE's contribution lands (a slot per source);
  - completion: how a PE knows all of its inputs are there (a signal that
    counts arrivals, one per source);
  - reuse safety: when the buffers may be written again (a barrier here).
all_to_all: PE r sends part p of its input to PE p; PE p stores it in slot
r. reduce: every PE sends its vector to the root, which sums the slots in
PE order (so the result is the same whatever order they arrived in).

Run:  PYTHONPATH=build/python python3 examples/course/3.2_custom.py
"""
from __future__ import annotations

import numpy as np

import nvshmem_tutorial as nt

N_PES = 4
PART = 5_000  # int32 elements per (source, destination) pair


def all_to_all(send: np.ndarray) -> np.ndarray:
    """send has n parts of PART; returns n parts, part r from PE r."""
    me, n = nt.my_pe(), nt.n_pes()
    recv = nt.alloc(send.nbytes)
    sig = nt.alloc(8)
    parts = send.reshape(n, PART)
    for k in range(1, n + 1):
        p = (me + k) % n  # start with the next PE, not all with PE 0 (no hot spot)
        nt.put_signal(recv, parts[p], sig, 0, 1, p, add=True, offset=me * parts[p].nbytes)
    nt.signal_wait_until(sig, 0, "ge", n)  # all n parts, mine included
    out = recv.array(send.dtype).copy()
    nt.barrier_all()  # nobody frees recv while a peer may still write it
    nt.free(sig)
    nt.free(recv)
    return out


def reduce_to(root: int, x: np.ndarray) -> np.ndarray | None:
    me, n = nt.my_pe(), nt.n_pes()
    slots = nt.alloc(n * x.nbytes)
    sig = nt.alloc(8)
    nt.put_signal(slots, x, sig, 0, 1, root, add=True, offset=me * x.nbytes)
    out = None
    if me == root:
        nt.signal_wait_until(sig, 0, "ge", n)
        out = slots.array(x.dtype).reshape(n, x.size).sum(axis=0, dtype=x.dtype)
    nt.barrier_all()
    nt.free(sig)
    nt.free(slots)
    return out


def pe_main(rank: int) -> str:
    n = nt.n_pes()
    # Part p of PE r's input is filled with 1000 r + p: the output of PE p
    # must then read 1000 r + p in its slot r.
    send = np.repeat(1000 * rank + np.arange(n, dtype=np.int32), PART)
    got = all_to_all(send)
    want = np.repeat(1000 * np.arange(n, dtype=np.int32) + rank, PART)
    text = f"PE {rank}: all_to_all slots {got[::PART].tolist()} correct {np.array_equal(got, want)}"
    x = np.random.default_rng(rank).integers(-100, 100, 1000, dtype=np.int32)
    total = reduce_to(2, x)
    if total is not None:
        ref = sum(np.random.default_rng(p).integers(-100, 100, 1000, dtype=np.int32) for p in range(n))
        text += f"; reduce to PE 2 correct {np.array_equal(total, ref)}"
    return text


if __name__ == "__main__":
    for line in nt.launch(N_PES, pe_main, env={"NVST_SYMMETRIC_SIZE": "8M"}):
        print(line)

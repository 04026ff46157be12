"""The guide's ``--pitfalls``: the mistakes people make with one-sided
communication, each made on purpose in a 2-PE job on host-memory PEs here,
with the error this library gives for it (or, where no run-time check can
see it, what prevents it). Runs anywhere, no GPU needed, in a few seconds."""
from __future__ import annotations

import numpy as np

import nvshmem_tutorial as nt

# (mistake, how to avoid it); the checks below run in the same order.
MISTAKES = [
    ("a symmetric heap too small for what is allocated",
     "raise NVST_SYMMETRIC_SIZE (or InitOptions::heap_bytes)"),
    ("PEs allocating different sizes (a collective called differently)",
     "allocate the same sizes in the same order on every PE"),
    ("reading past the end of a symmetric buffer",
     "index within the buffer; its size is the same on every PE"),
    ("a PE number out of range", "PEs are 0 .. n_pes() - 1"),
    ("waiting for a signal nobody sends (or that was sent to another word)",
     "pair every wait with a put_signal to the same word and PE"),
    ("a hash map too small for its keys", "size it for every key ever inserted (erased slots come back with clear())"),
    ("a ring item of the wrong shape", "push arrays of the ring's item shape and dtype"),
]
UNCHECKED = [
    ("a signal sent before its data (a missing fence)",
     "not detectable when it happens: put_signal delivers the data first, and the blocking put returns only when "
     "its data has landed; in kernels use putmem_signal, or fence() between putmem_nbi and signal_op"),
    ("reusing a buffer a peer may still read (unsynchronised reuse)",
     "not detectable: a barrier_all (or a signal the reader sends back) before overwriting; a RingBuffer does "
     "this for you (a producer writes a slot only after the consumer released it)"),
    ("a source buffer changed before a non-blocking put completed",
     "not detectable: quiet() before reusing the source of putmem_nbi (the Python put is blocking)"),
]


def _first_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0]}"


def _expect_error(fn) -> str:
    try:
        fn()
    except (RuntimeError, ValueError, IndexError, TypeError) as e:
        return _first_line(e)
    return "NO ERROR (this check is missing)"


def _run(rank: int) -> list[str]:
    from nvshmem_tutorial.structures import DistributedHashMap, RingBuffer

    out = []
    out.append(_expect_error(lambda: nt.alloc(1 << 40)))
    nt.barrier_all()
    out.append(_expect_error(lambda: nt.alloc(4096 * (rank + 1))))
    nt.barrier_all()
    buf = nt.alloc(64)
    out.append(_expect_error(lambda: nt.atomic_fetch(buf, 8, 1 - rank)))
    out.append(_expect_error(lambda: nt.atomic_fetch(buf, 0, nt.n_pes() + 3)))
    sig = nt.alloc(8)
    out.append(_expect_error(lambda: nt.signal_wait_until(sig, 0, "ge", 1)))
    nt.barrier_all()
    m = DistributedHashMap(1)
    nt.barrier_all()
    out.append(_expect_error(lambda: [m.insert(k, k) for k in range(8)]) if rank == 0 else "")
    nt.barrier_all()
    ring = RingBuffer(2, 4, np.float32)
    out.append(_expect_error(lambda: ring.push(np.zeros(5, np.float32), 0)))
    nt.barrier_all()
    ring.free()
    m.free()
    nt.free(sig)
    nt.free(buf)
    return out


def run() -> int:
    results = nt.launch(2, _run, env={"NVST_TIMEOUT_S": "2", "NVST_SYMMETRIC_SIZE": "8M"}, timeout=120)
    print("Mistakes this library checks, each made on purpose here (2 host-memory PEs), and what it answers:\n")
    failed = 0
    for i, (mistake, avoid) in enumerate(MISTAKES):
        got = results[0][i]
        failed += got.startswith("NO ERROR")
        print(f"{i + 1}. {mistake}\n   here: {got}\n   avoid: {avoid}\n")
    print("Mistakes no run-time check can see, and what prevents them:\n")
    for mistake, what in UNCHECKED:
        print(f"- {mistake}: {what}")
    return 1 if failed else 0

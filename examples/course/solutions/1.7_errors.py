"""1.7 Errors and debugging, the exercise: read the timeout, fix the bug.

The buggy exchange: every PE puts its block to its right neighbour with
put_signal ADD 1 and then waits for its signal word to reach 2. It never
does (only one PE writes to each word), so each wait ends after
NVST_TIMEOUT_S with a message naming the word, the comparison and the last
value seen (1). The fix waits for what is really sent: >= 1.

Run:  PYTHONPATH=build/python python3 examples/course/solutions/1.7_errors.py
"""
from __future__ import annotations

import numpy as np

import nvshmem_tutorial as nt


def exchange(rank: int, wait_for: int) -> float:
    n = nt.n_pes()
    buf = nt.alloc(4 * 1000)
    sig = nt.alloc(8)
    try:
        nt.put_signal(buf, np.full(1000, rank, np.float32), sig, 0, 1, (rank + 1) % n, add=True)
        nt.signal_wait_until(sig, 0, "ge", wait_for)
        return float(buf.array(np.float32).sum())
    finally:
        nt.barrier_all()
        nt.free(sig)
        nt.free(buf)


def pe_main(rank: int) -> list[str]:
    try:
        exchange(rank, wait_for=2)
        buggy = "no error (wrong)"
    except RuntimeError as e:
        text = str(e)
        buggy = text[text.index("timed out"):text.index(" (")] if "timed out" in text else text
    fixed = exchange(rank, wait_for=1)
    return [f"buggy version: {buggy}", f"fixed version: received sum {fixed}"]


if __name__ == "__main__":
    results = nt.launch(2, pe_main, env={"NVST_TIMEOUT_S": "1", "NVST_SYMMETRIC_SIZE": "8M"})
    for rank, lines in enumerate(results):
        for line in lines:
            print(f"PE {rank} {line}")

"""2.7 Memory, the exercise: size the heap exactly for a workload.

The workload: three 1 MiB buffers and all-reduces with a 1 MiB collective
workspace. From lesson 2.7's accounting, the heap must hold the runtime's
64 KiB, the workspace (2 x 1 MiB + 2560 bytes on host PEs) and the three
buffers. The runtime rounds the heap up to whole 4 KiB pages, so the
program runs the workload with the computed size, and with one page less
than that rounded up, which must fail with the allocator's message
instead of corrupting anything.

Run:  PYTHONPATH=build/python python3 examples/course/solutions/2.7_memory.py
"""
from __future__ import annotations

import numpy as np

import nvshmem_tutorial as nt

MiB = 1 << 20
WORKSPACE = MiB
PAGE = 4096
NEEDED = 64 * 1024 + (2 * WORKSPACE + 2560) + 3 * MiB


def workload(rank: int) -> str:
    bufs = [nt.alloc(MiB) for _ in range(3)]
    x = np.full(1000, rank + 1, np.float32)
    nt.all_reduce(x, x)
    for b in bufs:
        nt.free(b)
    return f"all_reduce {x[0]}"


def attempt(heap: int) -> str:
    env = {"NVST_SYMMETRIC_SIZE": str(heap), "NVST_COLL_WORKSPACE": str(WORKSPACE)}
    try:
        return f"heap of {heap} bytes: runs, {nt.launch(2, workload, env=env)[0]}"
    except RuntimeError as e:
        return f"heap of {heap} bytes: refused ({'heap exhausted' if 'heap exhausted' in str(e) else e})"


if __name__ == "__main__":
    print(attempt(NEEDED))
    print(attempt((NEEDED + PAGE - 1) // PAGE * PAGE - PAGE))

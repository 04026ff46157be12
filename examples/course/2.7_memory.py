"""2.7 Memory optimisation: what each part of the library takes from the heap.

Every PE reserves its whole symmetric heap at init (NVST_SYMMETRIC_SIZE;
NVSHMEM_SYMMETRIC_SIZE), so the heap must hold the peak of everything
symmetric at once: the runtime's own words, the collectives' workspace,
and the program's buffers. This program measures each on host-memory PEs
with heap_free_bytes, then shows the two ways a heap runs out: too small,
and fragmented (enough bytes free, no block large enough).

Run:  PYTHONPATH=build/python python3 examples/course/2.7_memory.py
"""
from __future__ import annotations

import sys
import time

import numpy as np

import nvshmem_tutorial as nt

MiB = 1 << 20
HEAP = 24 * MiB
WORKSPACE = 4 * MiB  # NVST_COLL_WORKSPACE (default 32 MiB)


def free() -> int:
    return nt._nvst.heap_free_bytes()


def pe_main(rank: int) -> list[str]:
    lines = [f"heap: {HEAP // MiB} MiB per PE"]
    lines.append(f"runtime's own words: {HEAP - free()} bytes")

    before = free()
    x = np.ones(16, np.float32)
    nt.all_reduce(x, x)  # the first collective on a team allocates its workspace
    lines.append(f"collective workspace: {before - free()} bytes = 2 x NVST_COLL_WORKSPACE + {before - free() - 2 * WORKSPACE}")

    # Buffers: sizes round up to 256 bytes (the alignment), so many tiny
    # allocations waste space; one allocation carved up by offsets does not.
    before = free()
    tiny = [nt.alloc(8) for _ in range(100)]
    one = nt.alloc(8 * 100)
    used_tiny = before - free() - 800  # the last tiny one's padding shows once `one` follows it
    lines.append(f"100 allocations of 8 bytes: {used_tiny} bytes; one of 800 bytes: 800")
    for t in tiny:
        nt.free(t)
    nt.free(one)

    # Fragmentation: three 4 MiB buffers, free the middle one. About 8 MiB
    # are free, in two holes: the middle 4 MiB and what is left at the end.
    a, b, c = (nt.alloc(4 * MiB) for _ in range(3))
    nt.free(b)
    try:
        nt.alloc(free() - 1 * MiB)  # fewer bytes than are free, more than any one hole
        lines.append("fragmented alloc succeeded (wrong)")
    except RuntimeError as e:
        text = str(e)
        lines.append("fragmented heap: " + text[text.index("largest free block"):text.index("; heap size")])
    nt.free(a)
    nt.free(c)

    # Reuse: alloc/free are collective (an allgather and a barrier each),
    # so allocating per step costs round trips; allocate once, reuse.
    t0 = time.perf_counter()
    for _ in range(20):
        nt.free(nt.alloc(MiB))
    t1 = time.perf_counter()
    buf = nt.alloc(MiB)
    for _ in range(20):
        buf.array(np.uint8)[:16] = 0
    t2 = time.perf_counter()
    nt.free(buf)
    print(f"PE {rank}: 20 x alloc+free {1e3 * (t1 - t0):.1f} ms, 20 x reuse {1e3 * (t2 - t1):.3f} ms", file=sys.stderr)
    lines.append(f"after freeing everything but the workspace: {HEAP - free()} bytes in use")
    return lines


if __name__ == "__main__":
    env = {"NVST_SYMMETRIC_SIZE": str(HEAP), "NVST_COLL_WORKSPACE": str(WORKSPACE)}
    for line in nt.launch(2, pe_main, env=env)[0]:
        print(line)

"""1.2 Symmetric memory: one allocation, the same place on every PE.

alloc(nbytes) is collective: every PE asks for the same size, in the same
order, and gets the same offset in its own heap. So "buf on PE 2" names one
place, and a put to it needs no address from PE 2. This program shows the
three rules: same size on every PE (else an error on every PE), the same
offset (a put lands where the target reads), and free/alloc reuse.

Run:  PYTHONPATH=build/python python3 examples/course/1.2_symmetric.py
"""
from __future__ import annotations

import numpy as np

import nvshmem_tutorial as nt

N_PES = 3
HEAP = 8 << 20  # NVST_SYMMETRIC_SIZE: each PE's heap (NVSHMEM_SYMMETRIC_SIZE)


def pe_main(rank: int) -> list[str]:
    n = nt.n_pes()
    lines: list[str] = []
    free0 = nt._nvst.heap_free_bytes()
    # The runtime keeps the first 64 KiB of every heap for itself (barrier
    # words and the like); the rest is ours.
    lines.append(f"heap {HEAP >> 20} MiB, free for us {free0} bytes ({HEAP - free0} kept by the runtime)")

    # nvshmem_malloc(4000) on every PE; the memory is zeroed before alloc
    # returns, on every PE (alloc ends with a barrier).
    a = nt.alloc(4000)
    b = nt.alloc(1 << 20)
    used = free0 - nt._nvst.heap_free_bytes()
    lines.append(f"after alloc(4000) and alloc(1 MiB): {used} bytes used (sizes rounded up to the alignment)")

    # Same offset everywhere: I write my rank into `a` on my right neighbour
    # without knowing any of its addresses; it finds the value in its own `a`.
    nt.put(a, np.array([100 + rank], dtype=np.int32), (rank + 1) % n)
    nt.barrier_all()  # every put has landed before anyone reads (lesson 1.4)
    got = int(a.array(np.int32)[0])
    lines.append(f"a[0] on PE {rank} = {got} (written by PE {(rank - 1) % n})")

    # Different sizes on different PEs would break the "same offset" rule:
    # the allocator compares every PE's request first and refuses on all.
    try:
        nt.alloc(1000 + rank)
        lines.append("mismatched alloc accepted (wrong)")
    except RuntimeError as e:
        lines.append("mismatched alloc refused: " + ("names each PE's size" if "1002" in str(e) else str(e)))

    # free is collective too. Freed space is reused: the allocator is a
    # deterministic first-fit list, so every PE makes the same choice.
    nt.free(b)
    b2 = nt.alloc(1 << 20)
    lines.append(f"free(b) then alloc(1 MiB) again: {free0 - nt._nvst.heap_free_bytes()} bytes used, as before")
    nt.free(b2)
    nt.free(a)
    assert nt._nvst.heap_free_bytes() == free0
    lines.append("everything freed: the heap is whole again")
    return lines


if __name__ == "__main__":
    results = nt.launch(N_PES, pe_main, env={"NVST_SYMMETRIC_SIZE": str(HEAP)})
    # Every PE saw the same layout; print PE 0's story and each PE's a[0].
    for line in results[0]:
        print(line)
    for rank in range(1, N_PES):
        print(results[rank][2])

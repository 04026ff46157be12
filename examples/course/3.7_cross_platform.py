"""3.7 Cross-platform communication: one program, several transports.

Nothing in a program written against the API names the hardware: the
heap may be GPU memory or host memory, and the path to a peer may be
NVLink or a libfabric provider. This program runs the same job, a ring of
put_signal plus an all-reduce on host-memory PEs, over the libfabric
providers a Linux machine has without special hardware (shm: shared
memory; tcp;ofi_rxm: TCP with reliable messaging on top), then asks for
one it lacks (efa: AWS's adapter), which must fail at init with a message
listing what is there.

Run:  PYTHONPATH=build/python python3 examples/course/3.7_cross_platform.py
"""
from __future__ import annotations

import numpy as np

import nvshmem_tutorial as nt

PROVIDERS = ["shm", "tcp;ofi_rxm"]
MISSING = "efa"
COUNT = 100_000


def pe_main(rank: int) -> str:
    n = nt.n_pes()
    buf, sig = nt.alloc(4 * COUNT), nt.alloc(8)
    data = np.random.default_rng(rank).standard_normal(COUNT).astype(np.float32)
    nt.put_signal(buf, data, sig, 0, 1, (rank + 1) % n)
    nt.signal_wait_until(sig, 0, "eq", 1)
    ring_ok = np.array_equal(buf.array(np.float32), np.random.default_rng((rank - 1) % n)
                             .standard_normal(COUNT).astype(np.float32))
    x = np.arange(1000, dtype=np.int32) * (rank + 1)
    nt.all_reduce(x, x, "sum")
    sum_ok = np.array_equal(x, np.arange(1000, dtype=np.int32) * (n * (n + 1) // 2))
    route = nt.transport_to((rank + 1) % n)
    nt.barrier_all()
    nt.free(sig)
    nt.free(buf)
    return f"{route}: ring {ring_ok}, all_reduce {sum_ok}"


def run(provider: str) -> str:
    env = {"NVST_FABRIC_PROVIDER": provider, "NVST_SYMMETRIC_SIZE": "8M", "NVST_COLL_WORKSPACE": "1M"}
    try:
        results = nt.launch(3, pe_main, env=env)
    except RuntimeError as e:
        text = str(e)
        if "is not available" in text:
            listed = text[text.index("providers present:"):].split(" (set")[0]
            return f"{provider}: refused at init, naming what is there ({'tcp;ofi_rxm' in listed})"
        raise
    same = len(set(results)) == 1
    return f"{provider}: {results[0]} (all 3 PEs agree: {same})"


if __name__ == "__main__":
    for p in PROVIDERS + [MISSING]:
        print(run(p))

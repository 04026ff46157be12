"""3.3 Comparison, the exercise: a sparse, data-dependent exchange.

Each PE has a few records for a few other PEs, decided at run time (here
by a random draw): the kind of traffic MoE routing produces. NCCL's model
needs two collectives (an all_to_all of the counts, then one of the data
with those splits); the one-sided form needs none: each PE puts its
records for PE p into its own slot on p, with the count in the slot's
first word, and adds 1 to p's arrival counter; every PE waits for n
arrivals (empty messages included, so the receiver knows when it is done).

Run:  PYTHONPATH=build/python python3 examples/course/solutions/3.3_compare.py
"""
from __future__ import annotations

import numpy as np

import nvshmem_tutorial as nt

MAX_RECORDS = 8  # per (source, destination)


def records_for(src: int, dst: int) -> np.ndarray:
    """What PE src sends PE dst: 0..MAX_RECORDS values, chosen at run time."""
    rng = np.random.default_rng(100 * src + dst)
    return 1000 * src + 10 * dst + np.arange(rng.integers(0, MAX_RECORDS + 1), dtype=np.int64)


def pe_main(rank: int) -> str:
    n = nt.n_pes()
    slot = 8 * (1 + MAX_RECORDS)  # count, then records
    inbox = nt.alloc(n * slot)
    sig = nt.alloc(8)
    for p in range(n):
        recs = records_for(rank, p)
        msg = np.concatenate([[recs.size], recs]).astype(np.int64)
        nt.put_signal(inbox, msg, sig, 0, 1, p, add=True, offset=rank * slot)
    nt.signal_wait_until(sig, 0, "ge", n)
    box = inbox.array(np.int64).reshape(n, 1 + MAX_RECORDS)
    got = [box[s, 1:1 + box[s, 0]] for s in range(n)]
    ok = all(np.array_equal(got[s], records_for(s, rank)) for s in range(n))
    total = sum(g.size for g in got)
    nt.barrier_all()
    nt.free(sig)
    nt.free(inbox)
    return f"PE {rank}: received {total} records from {n} PEs, all correct: {ok}"


if __name__ == "__main__":
    for line in nt.launch(4, pe_main, env={"NVST_SYMMETRIC_SIZE": "8M"}):
        print(line)

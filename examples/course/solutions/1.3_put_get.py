"""1.3 Put and get, the exercise: a get from a PE the proxy reaches.

The proxy only puts, so a read of a remote PE's memory becomes a request
and a reply: I put (start, count) into the owner's request slot with a
signal; the owner waits for the signal and puts the slice back to me with a
signal of its own. Each PE reads 5 values of its right neighbour's table.

Run:  PYTHONPATH=build/python python3 examples/course/solutions/1.3_put_get.py
"""
from __future__ import annotations

import numpy as np

import nvshmem_tutorial as nt

COUNT = 5


def pe_main(rank: int) -> str:
    n = nt.n_pes()
    right, left = (rank + 1) % n, (rank - 1) % n
    table = nt.alloc(8 * 1000)
    table.array(np.int64)[:] = 1000 * rank + np.arange(1000)   # what others read
    request = nt.alloc(16)        # (start, count) from my left neighbour
    reply = nt.alloc(8 * COUNT)   # the slice my right neighbour sends back
    sig = nt.alloc(16)            # word 0: a request came; word 1: my reply came
    nt.barrier_all()              # every table is filled before anyone asks

    start = 10 * rank
    nt.put_signal(request, np.array([start, COUNT], np.int64), sig, 0, 1, right)   # ask
    nt.signal_wait_until(sig, 0, "eq", 1)                        # serve my left neighbour
    s, c = request.array(np.int64).tolist()
    nt.put_signal(reply, table.array(np.int64)[s:s + c].copy(), sig, 1, 1, left)
    nt.signal_wait_until(sig, 1, "eq", 1)                        # my answer is here
    got = reply.array(np.int64).tolist()
    nt.barrier_all()
    for buf in (sig, reply, request, table):
        nt.free(buf)
    return f"PE {rank} read PE {right}'s table[{start}:{start + COUNT}] = {got}"


if __name__ == "__main__":
    for line in nt.launch(3, pe_main, env={"NVST_SYMMETRIC_SIZE": "8M"}):
        print(line)

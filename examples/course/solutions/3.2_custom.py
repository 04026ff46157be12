"""3.2 Custom collectives, the exercise: an inclusive prefix sum (scan).

PE r must end with x_0 + ... + x_r. The Hillis-Steele scan takes
ceil(log2 n) steps: at step d (1, 2, 4, ...) each PE r sends its running sum
to PE r + d (if it exists) and adds what arrives from PE r - d (if it
exists). Each step has its own slot and signal word, so a fast PE's next
step never overwrites what a slow PE has not yet added.

Run:  PYTHONPATH=build/python python3 examples/course/solutions/3.2_custom.py
"""
from __future__ import annotations

import numpy as np

import nvshmem_tutorial as nt

COUNT = 1000


def inclusive_scan(x: np.ndarray) -> np.ndarray:
    me, n = nt.my_pe(), nt.n_pes()
    steps = max(1, (n - 1).bit_length())
    inbox = nt.alloc(steps * x.nbytes)
    sig = nt.alloc(8 * steps)
    acc = x.copy()
    for s in range(steps):
        d = 1 << s
        if me + d < n:
            nt.put_signal(inbox, acc, sig, s, 1, me + d, offset=s * x.nbytes)
        if me - d >= 0:
            nt.signal_wait_until(sig, s, "eq", 1)
            acc = acc + inbox.array(x.dtype)[s * x.size:(s + 1) * x.size]
    nt.barrier_all()
    nt.free(sig)
    nt.free(inbox)
    return acc


def pe_main(rank: int) -> str:
    inputs = [np.random.default_rng(p).integers(-50, 50, COUNT, dtype=np.int64) for p in range(nt.n_pes())]
    got = inclusive_scan(inputs[rank])
    return f"PE {rank}: scan correct {np.array_equal(got, np.sum(inputs[:rank + 1], axis=0))}"


if __name__ == "__main__":
    for line in nt.launch(5, pe_main, env={"NVST_SYMMETRIC_SIZE": "8M"}):
        print(line)

"""2.4 Overlapped communication: reduce gradients while computing the rest.

Data-parallel training all-reduces each layer's gradients. Waiting until
the whole backward pass is done wastes the time the network sits idle
during it; frameworks instead cut the gradients into buckets and start a
bucket's all-reduce as soon as backward has produced it, while backward
goes on computing the next. Here "backward" is numpy work per bucket, and a
communication thread all-reduces finished buckets in order (all_reduce
releases the GIL while it waits on the fabric, and so does numpy's math).

Every PE must issue the collectives in the same order: the queue keeps
bucket order, so it does.

Run:  PYTHONPATH=build/python python3 examples/course/2.4_overlap.py
"""
from __future__ import annotations

import queue
import sys
import threading
import time

import numpy as np

import nvshmem_tutorial as nt

N_PES = 2
BUCKETS = 4
BUCKET = 50_000  # float32 gradients per bucket


def backward(rank: int, b: int) -> np.ndarray:
    """Stands in for the backward pass of one bucket's layers."""
    rng = np.random.default_rng(1000 * rank + b)
    w = rng.standard_normal((256, 256)).astype(np.float32)
    for _ in range(20):  # some real compute, so there is something to hide behind
        w = np.tanh(w @ w * 0.01)
    return np.resize(w, BUCKET).astype(np.float32)


def serial(rank: int) -> list[np.ndarray]:
    out = []
    for b in range(BUCKETS):
        g = backward(rank, b)
        nt.all_reduce(g, g, "sum")  # the network works, the CPU waits
        out.append(g)
    return out


def overlapped(rank: int) -> list[np.ndarray]:
    ready: queue.Queue[np.ndarray | None] = queue.Queue()
    done: list[np.ndarray] = []

    def communicate() -> None:
        while (g := ready.get()) is not None:
            nt.all_reduce(g, g, "sum")  # in bucket order, on every PE
            done.append(g)

    comm = threading.Thread(target=communicate)
    comm.start()
    for b in range(BUCKETS):
        ready.put(backward(rank, b))  # bucket b goes out while b + 1 is computed
    ready.put(None)
    comm.join()
    return done


def pe_main(rank: int) -> str:
    n = nt.n_pes()
    want = [sum(backward(p, b) for p in range(n)) for b in range(BUCKETS)]
    nt.barrier_all()
    t0 = time.perf_counter()
    a = serial(rank)
    nt.barrier_all()
    t1 = time.perf_counter()
    b = overlapped(rank)
    nt.barrier_all()
    t2 = time.perf_counter()
    # Times vary from machine to machine: stderr, not the checked output.
    print(f"PE {rank}: serial {1e3 * (t1 - t0):.1f} ms, overlapped {1e3 * (t2 - t1):.1f} ms", file=sys.stderr)
    same = all(np.array_equal(x, y) for x, y in zip(a, b))
    close = all(np.allclose(x, w, rtol=1e-5, atol=1e-5) for x, w in zip(a, want))
    return f"PE {rank}: {BUCKETS} buckets; overlapped equals serial bitwise: {same}; equals the sum: {close}"


if __name__ == "__main__":
    env = {"NVST_SYMMETRIC_SIZE": "8M", "NVST_COLL_WORKSPACE": "1M"}
    for line in nt.launch(N_PES, pe_main, env=env):
        print(line)

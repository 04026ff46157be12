"""2.5 Multi-node setup: one job across hosts, as a launcher builds it.

On several hosts nothing is shared but the network: rank 0 makes a unique ID
that names an address the other hosts can reach (not loopback), and the ID
must get to every process before any of them can join. Launchers do that
through their own channel (torchrun's rendezvous store, mpirun's PMI, a
shared file). This program plays two "hosts" on one machine: each starts
its own two processes, the ID travels through a file, and NVST_NODE_SIZE=2
tells the runtime which PEs share a host. PEs on one node would use NVLink
on GPUs; PEs on the other node are reached through the proxy and libfabric.

Run:  PYTHONPATH=build/python python3 examples/course/2.5_multinode.py
"""
from __future__ import annotations

import multiprocessing as mp
import os
import tempfile
import time

import numpy as np

import nvshmem_tutorial as nt

HOSTS, PER_HOST = 2, 2
ENV = {"NVST_HEAP": "host", "NVST_NODE_SIZE": str(PER_HOST), "NVST_SYMMETRIC_SIZE": "8M",
       "NVST_COLL_WORKSPACE": "1M"}


def read_id(path: str, timeout_s: float = 30) -> str:
    """What a launcher's rendezvous does: wait for rank 0 to publish the ID."""
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no unique ID in {path} after {timeout_s} s")
        time.sleep(0.05)
    with open(path) as f:
        return f.read()


def pe(rank: int, id_path: str, results: mp.Queue) -> None:
    os.environ.update(ENV)
    nt.init_with_unique_id(read_id(id_path), rank, HOSTS * PER_HOST)
    n = nt.n_pes()
    node = [nt.team_translate_pe(nt.TEAM_NODE, i) for i in range(nt.team_n_pes(nt.TEAM_NODE))]
    # A put to the same slot of the PE with my node index on the other host.
    other = (rank + PER_HOST) % n
    buf, sig = nt.alloc(4 * 1000), nt.alloc(8)
    nt.put_signal(buf, np.full(1000, rank, np.int32), sig, 0, 1, other)
    nt.signal_wait_until(sig, 0, "eq", 1)
    got = int(buf.array(np.int32)[0])
    x = np.full(10, rank + 1, np.int32)
    nt.all_reduce(x, x, "sum")  # across both hosts
    nt.barrier_all()
    nt.free(sig)
    nt.free(buf)
    nt.finalize()
    results.put((rank, f"PE {rank}: node {node}, got PE {got}'s block from the other node, all_reduce {x[0]}"))


def start_host(host: int, id_path: str, results: mp.Queue) -> list[mp.Process]:
    """What the launcher on one host does: start its ranks."""
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=pe, args=(host * PER_HOST + i, id_path, results)) for i in range(PER_HOST)]
    for p in procs:
        p.start()
    return procs


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        id_path = os.path.join(tmp, "unique_id")
        results: mp.Queue = mp.get_context("spawn").Queue()
        procs = start_host(1, id_path, results)  # the second host may start first: it waits
        # Rank 0's host makes the ID with an address the other hosts reach:
        # 127.0.0.1 here; on a cluster this host's address on the job's network.
        uid = nt.make_unique_id("127.0.0.1")
        with open(id_path + ".tmp", "w") as f:
            f.write(uid)
        os.rename(id_path + ".tmp", id_path)  # published whole, never half-written
        procs += start_host(0, id_path, results)
        lines = dict(results.get(timeout=120) for _ in procs)
        for p in procs:
            p.join(timeout=30)
    for rank in sorted(lines):
        print(lines[rank])

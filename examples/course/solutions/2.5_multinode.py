"""2.5 Multi-node setup, the exercise: join from the environment.

mpirun and torchrun do not call init_with_unique_id for you; they set
environment variables and the program calls init(). Each process here gets
NVST_UNIQUE_ID, NVST_RANK, NVST_WORLD_SIZE, NVST_LOCAL_RANK and
NVST_LOCAL_WORLD_SIZE (the last two describe its host: 2 hosts x 2 ranks)
and calls nt.init() with no arguments. The node team is not taken from the
launcher's LOCAL_* numbers: the runtime finds which PEs really share a host
(all four here), and only NVST_NODE_SIZE splits a host into logical nodes.

Run:  PYTHONPATH=build/python python3 examples/course/solutions/2.5_multinode.py
"""
from __future__ import annotations

import multiprocessing as mp
import os

import nvshmem_tutorial as nt

HOSTS, PER_HOST = 2, 2


def pe(env: dict[str, str], results: mp.Queue) -> None:
    os.environ.update(env)
    nt.init()  # reads the NVST_* variables, as it reads torchrun's or mpirun's
    node = [nt.team_translate_pe(nt.TEAM_NODE, i) for i in range(nt.team_n_pes(nt.TEAM_NODE))]
    nt.barrier_all()
    results.put((nt.my_pe(), f"PE {nt.my_pe()} of {nt.n_pes()}: local rank {env['NVST_LOCAL_RANK']}, node {node}"))
    nt.finalize()


if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    results: mp.Queue = ctx.Queue()
    uid = nt.make_unique_id("127.0.0.1")
    procs = []
    for rank in range(HOSTS * PER_HOST):
        env = {"NVST_HEAP": "host", "NVST_SYMMETRIC_SIZE": "8M", "NVST_UNIQUE_ID": uid, "NVST_RANK": str(rank),
               "NVST_WORLD_SIZE": str(HOSTS * PER_HOST), "NVST_LOCAL_RANK": str(rank % PER_HOST),
               "NVST_LOCAL_WORLD_SIZE": str(PER_HOST)}
        procs.append(ctx.Process(target=pe, args=(env, results)))
        procs[-1].start()
    lines = dict(results.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=30)
    for rank in sorted(lines):
        print(lines[rank])

"""3.1 Topology, the exercise: the leader-based hierarchical all-reduce.

The simpler hierarchy: all-reduce inside each node, then only the node
leaders (node index 0) all-reduce across nodes, then each leader
broadcasts the result inside its node. The leaders' team comes from
team_split_strided(world, start=0, stride=PER_NODE, size=NODES); every PE
calls the split, and the PEs outside it get a team they are not a member
of (team_my_pe = -1) and skip its collective.

Run:  PYTHONPATH=build/python python3 examples/course/solutions/3.1_topology.py
"""
from __future__ import annotations

import numpy as np

import nvshmem_tutorial as nt

NODES, PER_NODE, COUNT = 2, 2, 10_000


def pe_main(rank: int) -> str:
    n = nt.n_pes()
    node, _ = nt.team_split_2d(nt.TEAM_WORLD, PER_NODE)
    leaders = nt.team_split_strided(nt.TEAM_WORLD, 0, PER_NODE, NODES)
    for team in (node, leaders):
        nt.coll_prepare(team)
    inputs = [np.random.default_rng(p).integers(-1000, 1000, COUNT, dtype=np.int32) for p in range(n)]
    x = np.zeros(COUNT, np.int32)
    nt.all_reduce(inputs[rank], x, "sum", team=node)
    if nt.team_my_pe(leaders) >= 0:
        nt.all_reduce(x, x, "sum", team=leaders)
    nt.broadcast(x, 0, team=node)
    role = "leader" if nt.team_my_pe(leaders) >= 0 else "member"
    return f"PE {rank} ({role}): correct {np.array_equal(x, np.sum(inputs, axis=0, dtype=np.int32))}"


if __name__ == "__main__":
    env = {"NVST_NODE_SIZE": str(PER_NODE), "NVST_SYMMETRIC_SIZE": "16M", "NVST_COLL_WORKSPACE": "1M"}
    for line in nt.launch(NODES * PER_NODE, pe_main, env=env):
        print(line)

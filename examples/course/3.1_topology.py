"""3.1 Topology awareness: a hierarchical all-reduce over nodes.

Links inside a node (NVLink, hundreds of GB/s per GPU) are an order of
magnitude faster than links between nodes (one NIC per GPU). A flat ring
all-reduce sends 2 (n - 1) / n of the data over the slowest link on the
ring. The hierarchical form sends the slow links only 1/k of it (k PEs per
node):
  1. reduce-scatter inside the node: PE i of the node holds the node's sum
     of shard i (1/k of the data);
  2. all-reduce of that shard across nodes, among the PEs with the same
     index in their node (the "column" team);
  3. all-gather inside the node: every PE has every reduced shard.
Teams express the topology: team_split_2d(world, k) gives each PE its row
(its node) and its column.

Run:  PYTHONPATH=build/python python3 examples/course/3.1_topology.py
"""
from __future__ import annotations

import numpy as np

import nvshmem_tutorial as nt

NODES, PER_NODE = 2, 2
COUNT = 24_000  # int32 elements, divisible by PER_NODE


def hierarchical_all_reduce(x: np.ndarray, row: int, column: int) -> np.ndarray:
    k = nt.team_n_pes(row)
    shard = np.zeros(x.size // k, x.dtype)
    nt.reduce_scatter(x, shard, "sum", team=row)     # 1. within the node
    nt.all_reduce(shard, shard, "sum", team=column)  # 2. across nodes, 1/k of the data
    out = np.zeros_like(x)
    nt.all_gather(shard, out, team=row)              # 3. within the node
    return out


def pe_main(rank: int) -> list[str]:
    n = nt.n_pes()
    # Rows of PER_NODE consecutive PEs = the nodes (NVST_NODE_SIZE below
    # makes the same split for the runtime's TEAM_NODE).
    row, column = nt.team_split_2d(nt.TEAM_WORLD, PER_NODE)
    for team in (row, column):
        nt.coll_prepare(team)  # every PE, before a team's first collective
    members = lambda t: [nt.team_translate_pe(t, i) for i in range(nt.team_n_pes(t))]  # noqa: E731
    node = [nt.team_translate_pe(nt.TEAM_NODE, i) for i in range(nt.team_n_pes(nt.TEAM_NODE))]
    lines = [f"PE {rank}: row (node) {members(row)} = TEAM_NODE {node}; column {members(column)}"]

    inputs = [np.random.default_rng(p).integers(-1000, 1000, COUNT, dtype=np.int32) for p in range(n)]
    want = np.sum(inputs, axis=0, dtype=np.int32)
    got = hierarchical_all_reduce(inputs[rank], row, column)
    flat = np.zeros(COUNT, np.int32)
    nt.all_reduce(inputs[rank], flat)
    lines.append(f"PE {rank}: hierarchical correct: {np.array_equal(got, want)}, flat correct: {np.array_equal(flat, want)}")
    if rank == 0:
        # Bytes on each inter-node link with ring algorithms: the world ring
        # crosses nodes on two of its links; each column ring only carries 1/k.
        size = COUNT * 4
        flat_bytes = 2 * (n - 1) / n * size  # a world ring crosses nodes
        hier_bytes = 2 * (NODES - 1) / NODES * size / PER_NODE  # only step 2 crosses
        lines.append(f"bytes on each inter-node link (rings): flat {flat_bytes:.0f}, hierarchical {hier_bytes:.0f}")
    return lines


if __name__ == "__main__":
    env = {"NVST_NODE_SIZE": str(PER_NODE), "NVST_SYMMETRIC_SIZE": "16M", "NVST_COLL_WORKSPACE": "1M"}
    for lines in nt.launch(NODES * PER_NODE, pe_main, env=env):
        for line in lines:
            print(line)

"""1.1 Initialization, the exercise: split one machine into logical nodes.

NVST_NODE_SIZE=2 makes PEs {0, 1} one node and {2, 3} another, so the
inter-node path (the proxy) runs on one machine. Each PE prints the world
PE numbers of its node team, found with team_translate_pe (NVSHMEM:
nvshmem_team_translate_pe(NVSHMEMX_TEAM_NODE, i, NVSHMEM_TEAM_WORLD)).

Run:  PYTHONPATH=build/python python3 examples/course/solutions/1.1_init.py
"""
from __future__ import annotations

import nvshmem_tutorial as nt


def pe_main(rank: int) -> str:
    node_size = nt.team_n_pes(nt.TEAM_NODE)
    members = [nt.team_translate_pe(nt.TEAM_NODE, i) for i in range(node_size)]
    nt.barrier_all()
    return f"PE {rank}: node PE {nt.team_my_pe(nt.TEAM_NODE)} of {node_size}, node members {members}"


if __name__ == "__main__":
    for line in nt.launch(4, pe_main, env={"NVST_NODE_SIZE": "2", "NVST_SYMMETRIC_SIZE": "8M"}):
        print(line)

"""3.6 Multi-tenant sharing, the exercise: tenants inside one job, as teams.

One job of 4 PEs serves two tenants: PEs {0, 1} and PEs {2, 3}, made with
team_split_strided (every PE calls both splits). Each tenant runs its own
all-reduces on its own team, at the same time as the other, and must see
only its members' data. Unlike two jobs, the tenants share the heap: its
size must hold both tenants' workspaces and buffers.

Run:  PYTHONPATH=build/python python3 examples/course/solutions/3.6_multitenant.py
"""
from __future__ import annotations

import numpy as np

import nvshmem_tutorial as nt


def pe_main(rank: int) -> str:
    teams = [nt.team_split_strided(nt.TEAM_WORLD, 0, 1, 2), nt.team_split_strided(nt.TEAM_WORLD, 2, 1, 2)]
    for t in teams:
        nt.coll_prepare(t)  # every PE, members or not
    mine = next(t for t in teams if nt.team_my_pe(t) >= 0)
    members = [nt.team_translate_pe(mine, i) for i in range(nt.team_n_pes(mine))]
    x = np.full(10_000, 10 ** rank, np.int64)
    out = np.zeros_like(x)
    for _ in range(5):
        nt.all_reduce(x, out, "sum", team=mine)
    want = sum(10 ** p for p in members)
    return f"PE {rank}: tenant {members}, sum {out[0]} (own members only: {bool(np.all(out == want))})"


if __name__ == "__main__":
    for line in nt.launch(4, pe_main, env={"NVST_SYMMETRIC_SIZE": "16M", "NVST_COLL_WORKSPACE": "1M"}):
        print(line)

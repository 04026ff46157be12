"""1.1 Initialization: start a job of PEs and ask the runtime who is who.

A job is n processes, the processing elements (PEs). Each one joins the job
with the same unique ID (rank 0's address, port and a random cookie), gets
its PE number, and learns how it reaches every other PE. Here the PEs are
host-memory PEs on this machine (no GPU needed): launch() starts them as
fresh processes, as torchrun or mpirun would start one per GPU.

Run:  PYTHONPATH=build/python python3 examples/course/1.1_init.py
"""
from __future__ import annotations

import nvshmem_tutorial as nt

N_PES = 4
# What a launcher tells each process: init_with_unique_id(uid, rank, n)
# sets NVST_UNIQUE_ID, NVST_RANK and NVST_WORLD_SIZE from its arguments;
# under torchrun, init() reads RANK, WORLD_SIZE, LOCAL_RANK,
# LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT; under mpirun OMPI_COMM_WORLD_*.


def pe_main(rank: int) -> str:
    """Runs on every PE, after launch() has called init for it (NVSHMEM:
    nvshmemx_init_attr with a unique ID; ours: init_with_unique_id)."""
    assert nt.initialized()
    me = nt.my_pe()          # nvshmem_my_pe()
    n = nt.n_pes()           # nvshmem_n_pes()
    assert me == rank        # the launcher's rank becomes the PE number
    # A second init is an error, named as such, not a silent re-join.
    try:
        nt.init()
        raise AssertionError("init twice was accepted")
    except RuntimeError as e:
        assert "called twice" in str(e), e
    # How this PE reaches each PE: "self", "nvlink" (load/store through a
    # mapped peer heap) or "fabric:<provider>" (the proxy and libfabric).
    # Host-memory PEs reach every peer through the fabric.
    routes = ", ".join(f"{pe}:{nt.transport_to(pe).split(':')[0]}" for pe in range(n))
    # The node team: PEs that share a host (nvshmemx_team_node). On one
    # machine every PE is in it, unless NVST_NODE_SIZE splits the host.
    node = f"node PE {nt.team_my_pe(nt.TEAM_NODE)} of {nt.team_n_pes(nt.TEAM_NODE)}"
    # Everyone must be here before anyone leaves (nvshmem_barrier_all);
    # finalize (nvshmem_finalize) is collective too and launch() calls it.
    nt.barrier_all()
    return f"PE {me} of {n}: heap {nt.heap_kind()}, {node}, routes {routes}"


if __name__ == "__main__":
    # launch(n, fn): a fresh unique ID, n processes, each joins it as rank r
    # and runs fn(r); the results come back in rank order.
    for line in nt.launch(N_PES, pe_main, env={"NVST_SYMMETRIC_SIZE": "8M"}):
        print(line)
    # The same program under torchrun (one process per GPU) would call
    # nt.init() itself: it reads RANK, WORLD_SIZE, MASTER_ADDR and the rest.
    print("all PEs joined and left")

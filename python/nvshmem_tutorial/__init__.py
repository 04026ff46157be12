"""NVSHMEM-Tutorial for Python.

This build is torch-free: the runtime's host API and the collectives on
numpy arrays, with host-memory PEs (NVST_HEAP=host) talking through the
proxy and the fabric transport. `launch(n, fn)` runs `fn(rank)` in n fresh
processes joined into one job, which is how the tests and examples start.
"""
from ._nvst import (  # noqa: F401
    NvstError,
    Symmetric,
    all_gather,
    all_reduce,
    alloc,
    barrier_all,
    broadcast,
    fence,
    finalize,
    free,
    get_unique_id,
    heap_kind,
    init,
    init_with_unique_id,
    initialized,
    my_pe,
    n_pes,
    put,
    put_signal,
    quiet,
    reduce_scatter,
    signal_wait_until,
    transport_to,
)
from .launch import launch  # noqa: F401

"""Run a function as n PEs of one job on this host (no torchrun needed).

The Python front end of the library's way of starting PEs (nvst/launch.hpp):
each child joins with init_with_unique_id, which hands the runtime the same
NVST_* variables the C++ spawner sets. The children are Python processes
started by multiprocessing (spawn), since they run a Python function.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import traceback
from typing import Any, Callable, Mapping


def _pe_main(fn: Callable[[int], Any], rank: int, nranks: int, uid: str, env: Mapping[str, str], queue: Any) -> None:
    os.environ.update(env)
    from . import _nvst

    try:
        _nvst.init_with_unique_id(uid, rank, nranks)
        result = fn(rank)
        _nvst.finalize()
        queue.put((rank, True, result))
    except BaseException:  # report everything, including assertion failures
        queue.put((rank, False, traceback.format_exc()))


def launch(
    nranks: int, fn: Callable[[int], Any], env: Mapping[str, str] | None = None, timeout: float = 120.0
) -> list[Any]:
    """Runs fn(rank) in nranks new processes joined by one unique ID.

    Arguments:
        nranks: the number of PEs (processes), at least 1.
        fn: called as fn(rank) in every PE after the runtime is initialised;
            it must be importable by the children (defined at module level).
        env: extra environment variables for every PE; NVST_HEAP defaults to
            "host" (host-memory PEs, no GPU needed).
        timeout: seconds to wait for each PE's report.

    Returns:
        fn's return values, by rank.

    Raises:
        ValueError: nranks or timeout out of range.
        RuntimeError: naming each rank that failed (with its traceback), or
            that did not report within timeout.
    """
    from . import _nvst

    if not isinstance(nranks, int) or nranks < 1:
        raise ValueError(f"nvshmem_tutorial.launch: nranks must be an int >= 1, got {nranks!r}")
    if not timeout > 0:
        raise ValueError(f"nvshmem_tutorial.launch: timeout must be > 0 seconds, got {timeout!r}")

    env = {"NVST_HEAP": "host", **(env or {})}
    uid = _nvst.get_unique_id()
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_pe_main, args=(fn, r, nranks, uid, env, queue)) for r in range(nranks)]
    for p in procs:
        p.start()
    results: dict[int, Any] = {}
    failures: list[str] = []
    try:
        for _ in range(nranks):
            rank, ok, value = queue.get(timeout=timeout)
            if ok:
                results[rank] = value
            else:
                failures.append(f"rank {rank}:\n{value}")
    except Exception:
        missing = sorted(set(range(nranks)) - set(results))
        failures.append(f"no report within {timeout} s from rank(s) {missing}")
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    if failures:
        raise RuntimeError("\n".join(failures))
    return [results[r] for r in range(nranks)]

"""Run a function as n PEs of one job on this host (no torchrun needed)."""
import multiprocessing as mp
import os
import traceback


def _pe_main(fn, rank, nranks, uid, env, queue):
    os.environ.update(env)
    from . import _nvst

    try:
        _nvst.init_with_unique_id(uid, rank, nranks)
        result = fn(rank)
        _nvst.finalize()
        queue.put((rank, True, result))
    except BaseException:  # report everything, including assertion failures
        queue.put((rank, False, traceback.format_exc()))


def launch(nranks, fn, env=None, timeout=120.0):
    """Runs fn(rank) in nranks new processes joined by one unique ID.

    Returns the list of results by rank. Raises RuntimeError naming each rank
    that failed (with its traceback), or that did not report within timeout.
    fn must be importable by the children (defined at module level).
    """
    from . import _nvst

    env = {"NVST_HEAP": "host", **(env or {})}
    uid = _nvst.get_unique_id()
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_pe_main, args=(fn, r, nranks, uid, env, queue)) for r in range(nranks)]
    for p in procs:
        p.start()
    results, failures = {}, []
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

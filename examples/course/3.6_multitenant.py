"""3.6 Multi-tenant sharing: several jobs on one machine at the same time.

Two independent jobs (two tenants) start at once on this host, each with
its own unique ID: its own rank 0 and port, its own random cookie, its own
heaps and fabric endpoints. Nothing is shared but the machine, so neither
can see or corrupt the other's memory; a process presenting another job's
cookie is refused. Each job runs the same all-reduce with different data
and must get only its own sum.

On GPUs the same holds per process, and two more resources must be shared
on purpose: GPU memory (each PE's heap is reserved at init: size them so
the tenants fit) and SMs (communication kernels take SMs from compute:
the EP Buffer's num_sms, NVST_COLL_MAX_BLOCKS for the collectives).

Run:  PYTHONPATH=build/python python3 examples/course/3.6_multitenant.py
"""
from __future__ import annotations

import threading

import numpy as np

import nvshmem_tutorial as nt

TENANTS = {"tenant A": (2, 10), "tenant B": (3, 100)}  # (PEs, value scale)
COUNT = 50_000
ENV = {"NVST_SYMMETRIC_SIZE": "8M", "NVST_COLL_WORKSPACE": "1M"}


def job_a(rank: int) -> tuple[int, float]:
    return _reduce(rank, 10)


def job_b(rank: int) -> tuple[int, float]:
    return _reduce(rank, 100)


def _reduce(rank: int, scale: int) -> tuple[int, float]:
    """Each job's PEs sum (rank + 1) * scale; returns (n_pes, result)."""
    x = np.full(COUNT, (rank + 1) * scale, np.float32)
    for _ in range(5):  # several rounds, so the two jobs' traffic interleaves
        out = np.zeros_like(x)
        nt.all_reduce(x, out, "sum")
    assert np.all(out == out[0])
    return nt.n_pes(), float(out[0])


def main() -> None:
    results: dict[str, list[tuple[int, float]]] = {}
    jobs = {"tenant A": job_a, "tenant B": job_b}

    def run(name: str) -> None:
        n, _ = TENANTS[name]
        results[name] = nt.launch(n, jobs[name], env=ENV)  # a fresh unique ID per launch

    threads = [threading.Thread(target=run, args=(name,)) for name in jobs]
    for t in threads:
        t.start()  # both jobs run at the same time
    for t in threads:
        t.join()
    for name, (n, scale) in TENANTS.items():
        if name not in results:
            raise SystemExit(f"{name} did not finish")
        want = scale * n * (n + 1) / 2
        got = {r for _, r in results[name]}
        print(f"{name}: {n} PEs, every PE got {sorted(got)} (own sum {want}): {got == {want}}")


if __name__ == "__main__":
    main()

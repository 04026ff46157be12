"""3.7 Cross-platform, the exercise: pick the best provider that exists.

A portable launcher lists providers from the fastest to the most common
and takes the first one the machine has: efa (AWS), verbs;ofi_rxm
(InfiniBand, RoCE), then tcp;ofi_rxm (any network). A provider that is
missing fails at init, on every PE, quickly and with a message; the
launcher moves on to the next. (On a machine with EFA or InfiniBand the
first lines differ: that is the point.)

Run:  PYTHONPATH=build/python python3 examples/course/solutions/3.7_cross_platform.py
"""
from __future__ import annotations

import numpy as np

import nvshmem_tutorial as nt

PREFERENCE = ["efa", "verbs;ofi_rxm", "tcp;ofi_rxm"]


def pe_main(rank: int) -> str:
    x = np.full(100, rank + 1, np.int64)
    nt.all_reduce(x, x, "sum")
    return f"{nt.transport_to((rank + 1) % nt.n_pes())}, all_reduce {x[0]}"


if __name__ == "__main__":
    for provider in PREFERENCE:
        env = {"NVST_FABRIC_PROVIDER": provider, "NVST_SYMMETRIC_SIZE": "8M", "NVST_COLL_WORKSPACE": "1M"}
        try:
            result = nt.launch(2, pe_main, env=env)[0]
        except RuntimeError as e:
            if "is not available" not in str(e):
                raise
            print(f"{provider}: not on this machine, next")
            continue
        print(f"{provider}: chosen; {result}")
        break
    else:
        raise SystemExit("no provider of the list is available")

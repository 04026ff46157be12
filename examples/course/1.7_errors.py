"""1.7 Error handling and debugging: every mistake named, no hangs.

Communication bugs usually show up as hangs (a signal that never comes) or
as silent corruption (a put to the wrong place). The runtime turns both
into errors that name what was wrong: arguments are checked before any
byte moves, PEs that disagree are refused on every PE, and every wait has a
timeout after which the waiter says what it waited for.

Run:  PYTHONPATH=build/python python3 examples/course/1.7_errors.py
"""
from __future__ import annotations

from typing import Callable

import numpy as np

import nvshmem_tutorial as nt

N_PES = 2
TIMEOUT_S = "1"  # NVST_TIMEOUT_S: every host wait gives up after this


def error_of(call: Callable[[], object]) -> str:
    """The exception's type and the part of its message that names the cause."""
    try:
        call()
    except Exception as e:  # noqa: BLE001 - the lesson shows every kind
        text = str(e).split(" (../")[0]  # drop the source location suffix
        return f"{type(e).__name__}: {text.replace('[nvst rank 0] ', '').replace('[nvst rank 1] ', '')}"
    return "no error (wrong)"


def pe_main(rank: int) -> list[str]:
    n = nt.n_pes()
    buf = nt.alloc(64)
    sig = nt.alloc(8)
    peer = (rank + 1) % n
    cases = [
        # 1. Wrong arguments: refused on the caller, before anything moves.
        ("put past the end", lambda: nt.put(buf, np.zeros(17, np.float32), peer)),
        ("put to PE 9", lambda: nt.put(buf, np.zeros(1, np.float32), 9)),
        ("unknown comparison", lambda: nt.signal_wait_until(sig, 0, "bigger", 1)),
        ("unsupported dtype", lambda: nt.all_reduce(np.zeros(4), np.zeros(4))),
        ("unknown reduction", lambda: nt.all_reduce(np.zeros(4, np.float32), np.zeros(4, np.float32), "avg")),
        # 2. A wait that can never end: nobody signals. After NVST_TIMEOUT_S
        # the waiter reports what it waited for instead of hanging forever.
        ("signal never sent", lambda: nt.signal_wait_until(sig, 0, "ge", 5)),
    ]
    lines = [f"{what}: {error_of(call)}" for what, call in cases]
    # 3. PEs that disagree: a collective allocation with different sizes is
    # refused on every PE, each naming all the sizes.
    lines.append("mismatched alloc: " + ("refused naming both sizes"
                                         if all(s in error_of(lambda: nt.alloc(256 + 64 * rank)) for s in ("256", "320"))
                                         else "not refused (wrong)"))
    # After these errors the job still works: the checks left no state.
    nt.put_signal(buf, np.full(16, rank, np.float32), sig, 0, 1, peer)
    nt.signal_wait_until(sig, 0, "ge", 1)
    lines.append(f"still working afterwards: {buf.array(np.float32)[0] == (rank - 1) % n}")
    nt.barrier_all()
    nt.free(sig)
    nt.free(buf)
    return lines


if __name__ == "__main__":
    results = nt.launch(N_PES, pe_main, env={"NVST_TIMEOUT_S": TIMEOUT_S, "NVST_SYMMETRIC_SIZE": "8M"})
    for line in results[0]:
        print(line)
    assert all(r[-1].endswith("True") for r in results)

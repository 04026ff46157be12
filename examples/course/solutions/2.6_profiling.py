"""2.6 Profiling, the exercise: read the proxy's raw trace yourself.

Trace 3 puts of 1 MiB from PE 0 to PE 1, then join the two files by piece
number (the `seq` column: on the sender, events about pieces sent to PE 1;
on the target, events about pieces from PE 0) and check the order a
correct proxy must show on one clock: staged <= landed <= acked. (Not
posted <= landed: `posted` is stamped after the fabric call returns, and
the data may land before the sender's thread reads the clock.) Print the
check and, on stderr, each piece's staged -> landed time.

Run:  PYTHONPATH=build/python python3 examples/course/solutions/2.6_profiling.py
"""
from __future__ import annotations

import os
import sys
import tempfile

import numpy as np

import nvshmem_tutorial as nt

PUTS, BYTES = 3, 1 << 20


def pe_main(rank: int) -> None:
    buf, sig = nt.alloc(BYTES), nt.alloc(8)
    if rank == 0:
        for _ in range(PUTS):
            nt.put_signal(buf, np.ones(BYTES // 4, np.float32), sig, 0, 1, 1, add=True)
    else:
        nt.signal_wait_until(sig, 0, "ge", PUTS)
    nt.barrier_all()
    nt.free(sig)
    nt.free(buf)


def events(path: str, peer: int, steps: tuple[str, ...]) -> dict[int, dict[str, int]]:
    out: dict[int, dict[str, int]] = {}
    with open(path) as f:
        for line in f:
            ns, step, pe, seq = line.split()
            if step in steps and int(pe) == peer:
                out.setdefault(int(seq), {}).setdefault(step, int(ns))
    return out


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        prefix = os.path.join(tmp, "trace")
        nt.launch(2, pe_main, env={"NVST_PROXY_TRACE": prefix, "NVST_SYMMETRIC_SIZE": "4M"})
        sent = events(prefix + ".0", 1, ("staged",))
        got = events(prefix + ".1", 0, ("landed", "acked"))
    pieces = sorted(set(sent) & set(got))
    ordered = all(sent[s]["staged"] <= got[s]["landed"] <= got[s]["acked"] for s in pieces)
    for s in pieces:
        print(f"piece {s}: staged -> landed {(got[s]['landed'] - sent[s]['staged']) / 1e3:.1f} us", file=sys.stderr)
    # At least one piece per put. A quiet that waits long for an ack may
    # also send a request for it (traced as `requested`, so not joined here).
    print(f"every put traced on both sides: {len(pieces) >= PUTS}; staged <= landed <= acked for every piece: "
          f"{ordered}")

"""2.6 Performance profiling: where does a put's time go?

GPU kernels are profiled with Nsight Systems, Nsight Compute and PyTorch's
profiler (the chapter shows the commands). What those tools cannot see is
the CPU proxy that carries puts between nodes; it keeps its own timeline.
NVST_PROXY_TRACE=PREFIX makes every PE's proxy record each step of each
piece (taken, staged, posted, written on the sender; bell, landed, acked on
the target) on the host's steady clock and write PREFIX.RANK at finalize;
scripts/proxy_trace.py lines the two sides up.

This program traces PUTS puts of 4 MiB from PE 0 to PE 1 (host-memory PEs,
so the same proxy path as GPUs on two nodes), counts the commands taken
and the pieces staged for them, checks that every piece posted went
through every later step, and runs the script. A quiet that waits long for
an ack may send a piece of its own asking for it (`requested`, not
`staged`), so how many pieces are posted depends on timing; the lines
printed do not. The times on stderr depend on the machine.

Run:  PYTHONPATH=build/python python3 examples/course/2.6_profiling.py
"""
from __future__ import annotations

import collections
import os
import subprocess
import sys
import tempfile

import numpy as np

import nvshmem_tutorial as nt

PUTS = 5
BYTES = 4 << 20
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "proxy_trace.py")
SENDER_STEPS = ("taken", "staged")
# Every piece posted (the puts' and any ack requests) takes these steps.
PIECE_STEPS = ("posted", "written", "bell", "landed", "acked")


def pe_main(rank: int) -> None:
    buf = nt.alloc(BYTES)
    sig = nt.alloc(8)
    if rank == 0:
        data = np.ones(BYTES // 4, np.float32)
        for _ in range(PUTS):
            nt.put_signal(buf, data, sig, 0, 1, 1, add=True)  # blocking: each put completes (quiet)
    else:
        nt.signal_wait_until(sig, 0, "ge", PUTS)
    nt.barrier_all()
    nt.free(sig)
    nt.free(buf)


def counts(*paths: str) -> collections.Counter[str]:
    """Events per step in PEs' traces: lines of `ns step pe seq`."""
    c: collections.Counter[str] = collections.Counter()
    for path in paths:
        with open(path) as f:
            c.update(line.split()[1] for line in f)
    return c


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        prefix = os.path.join(tmp, "trace")
        env = {"NVST_PROXY_TRACE": prefix, "NVST_SYMMETRIC_SIZE": str(2 * BYTES)}
        nt.launch(2, pe_main, env=env)
        sender, both = counts(prefix + ".0"), counts(prefix + ".0", prefix + ".1")
        print("sender (PE 0):  " + ", ".join(f"{step} {sender[step]}" for step in SENDER_STEPS))
        print(f"every piece posted was written, rang at the target, landed and was acked: "
              f"{len({both[step] for step in PIECE_STEPS}) == 1}")
        # The median time of each step after the sender's proxy took the
        # put, in microseconds: the first line says what was measured.
        r = subprocess.run([sys.executable, SCRIPT, prefix, "--from", "host"], capture_output=True, text=True,
                           timeout=60, check=True)
        header, *table = r.stdout.splitlines()
        print(header.split(";")[0])
        print("\n".join(table), file=sys.stderr)

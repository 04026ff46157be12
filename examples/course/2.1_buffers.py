"""2.1 Communication buffers: a channel with slots and credits.

A producer streams MESSAGES messages to a consumer through a buffer of
SLOTS slots in the consumer's heap. The consumer owns the buffer; the
producer writes into it one-sidedly. Two counters keep them in step:
  - `ready` (on the consumer): messages written, added by the producer's
    put_signal; the consumer waits until it exceeds what it has read;
  - `credits` (on the producer): slots freed, added by the consumer after
    it has read a slot; the producer never runs more than SLOTS ahead.
This is the shape of every communication buffer in the library: the
collectives' workspace, the EP Buffer's receive slots, the proxy's FIFO.

Run:  PYTHONPATH=build/python python3 examples/course/2.1_buffers.py
"""
from __future__ import annotations

import numpy as np

import nvshmem_tutorial as nt

SLOTS = 4          # slots in the consumer's buffer
SLOT_BYTES = 4096  # bytes per slot: 1024 float32
MESSAGES = 20
PRODUCER, CONSUMER = 0, 1


def message(i: int) -> np.ndarray:
    return np.random.default_rng(i).standard_normal(SLOT_BYTES // 4).astype(np.float32)


def produce(buf: nt.Symmetric, sig: nt.Symmetric) -> int:
    """Returns the most messages ever in flight (written, not yet read)."""
    most = 0
    for i in range(MESSAGES):
        # Slot i % SLOTS is free once the consumer has read message i - SLOTS,
        # that is once it has returned i - SLOTS + 1 credits.
        credits = nt.signal_wait_until(sig, 1, "ge", max(0, i - SLOTS + 1))
        most = max(most, i + 1 - credits)
        nt.put_signal(buf, message(i), sig, 0, 1, CONSUMER, add=True, offset=(i % SLOTS) * SLOT_BYTES)
    return most


def consume(buf: nt.Symmetric, sig: nt.Symmetric) -> tuple[int, float]:
    """Returns (messages that arrived intact, checksum)."""
    intact, checksum = 0, 0.0
    slots = buf.array(np.float32).reshape(SLOTS, SLOT_BYTES // 4)
    empty = np.zeros(0, np.uint8)
    for i in range(MESSAGES):
        nt.signal_wait_until(sig, 0, "ge", i + 1)  # message i is in slot i % SLOTS
        got = slots[i % SLOTS].copy()              # read it out before handing the slot back
        intact += int(np.array_equal(got, message(i)))
        checksum += float(got.sum())
        nt.put_signal(sig, empty, sig, 1, 1, PRODUCER, add=True)  # one credit back
    return intact, checksum


def pe_main(rank: int) -> str:
    buf = nt.alloc(SLOTS * SLOT_BYTES)  # used on the consumer only, allocated everywhere
    sig = nt.alloc(16)                  # word 0: ready (consumer); word 1: credits (producer)
    if rank == PRODUCER:
        most = produce(buf, sig)
        text = f"producer: sent {MESSAGES} messages through {SLOTS} slots, never more than {SLOTS} ahead: {most <= SLOTS}"
    else:
        intact, checksum = consume(buf, sig)
        want = sum(float(message(i).sum()) for i in range(MESSAGES))
        text = f"consumer: {intact}/{MESSAGES} messages intact, in order: {abs(checksum - want) < 1e-3}"
    nt.barrier_all()
    nt.free(sig)
    nt.free(buf)
    return text


if __name__ == "__main__":
    for line in nt.launch(2, pe_main, env={"NVST_SYMMETRIC_SIZE": "8M"}):
        print(line)

"""nvshmem_tutorial.structures on host-memory PEs: several PEs at once against
sequential models (dicts, numpy arrays, per-producer sequences).

NVST_STRUCTURE_TEST_OPS scales the operations per PE (default CI-sized; the
full 10**5 runs on the GPU machine's CPU side or by hand)."""
import os

import numpy as np
import nvshmem_tutorial as nt
from nvshmem_tutorial.structures import DistributedHashMap, DistributedTensor, RingBuffer

OPS = int(os.environ.get("NVST_STRUCTURE_TEST_OPS", "200"))


def _tensor(rank):
    n = nt.n_pes()
    t = DistributedTensor((10 * n + 3, 5), np.float32)  # the last shard is shorter
    rng = np.random.default_rng(7)  # the same on every PE: the model
    model = rng.standard_normal(t.shape).astype(np.float32)
    # Each PE writes a disjoint, interleaved set of rows into every shard.
    mine = np.arange(rank, t.shape[0], n)
    t.scatter_(mine, model[mine])
    nt.barrier_all()
    lo = rank * t.rows_per_pe
    assert np.array_equal(t.local[: t.local_rows], model[lo:lo + t.local_rows])
    idx = np.random.default_rng(100 + rank).integers(0, t.shape[0], 40)
    got = t.gather(idx)
    assert got.shape == (40, 5) and np.array_equal(got, model[idx])
    try:
        t.gather([t.shape[0]])
        raise AssertionError("out-of-range row accepted")
    except IndexError as e:
        assert "outside" in str(e)
    nt.barrier_all()
    t.free()
    return True


def test_distributed_tensor_gather_scatter_match_numpy():
    assert nt.launch(3, _tensor) == [True] * 3


def _hash_map(rank):
    n = nt.n_pes()
    m = DistributedHashMap(4 * OPS + 64)
    nt.barrier_all()
    rng = np.random.default_rng(rank)
    model = {}
    for i in range(OPS):
        key = (rank + 1) << 40 | int(rng.integers(0, OPS // 2 + 1))
        op = rng.integers(0, 10)
        if op < 5:
            value = int(rng.integers(0, 2**63))
            assert m.insert(key, value) == (key not in model), (i, key)
            model[key] = value
        elif op < 8:
            assert m.lookup(key) == model.get(key), (i, key)
        elif op < 9:
            assert m.erase(key) == (model.pop(key, None) is not None), (i, key)
        else:  # shared keys: every PE at once
            m.insert(int(rng.integers(0, 16)), rank)
    nt.barrier_all()
    for key, value in model.items():
        assert m.lookup(key) == value
    for key in range(16):
        v = m.lookup(key)
        assert v is None or 0 <= v < n
    nt.barrier_all()
    m.free()
    return True


def test_hash_map_several_pes_match_a_dict():
    assert nt.launch(3, _hash_map) == [True] * 3


def _hash_map_full(rank):
    m = DistributedHashMap(2)
    nt.barrier_all()
    err = ""
    if rank == 0:
        try:
            for k in range(100):  # 2 slots per PE, 2 PEs: some owner fills up
                m.insert(k, k)
        except RuntimeError as e:
            err = str(e)
    nt.barrier_all()
    m.free()
    return err


def test_hash_map_full_is_a_clear_error():
    errs = nt.launch(2, _hash_map_full)
    assert "full on PE" in errs[0] and "slots" in errs[0]


def _ring(rank):
    n = nt.n_pes()
    ring = RingBuffer(4, (3,), np.int64)  # small: producers wait for room
    nt.barrier_all()
    items = max(OPS // 5, 10)
    import threading

    failure = []

    def consume():
        try:
            expect = items * n if rank == 0 else 0
            nxt = [0] * n
            for _ in range(expect):
                p, seq, check = ring.pop()
                assert check == p * 1000003 + seq, "garbled"
                assert seq == nxt[p], f"from PE {p}: seq {seq}, expected {nxt[p]} (lost, repeated or reordered)"
                nxt[p] += 1
            assert len(ring) == 0
        except BaseException as e:  # reported by the main thread
            failure.append(repr(e))

    consumer = threading.Thread(target=consume)
    consumer.start()
    for seq in range(items):
        ring.push(np.array([rank, seq, rank * 1000003 + seq]), 0)
    consumer.join()
    nt.barrier_all()
    ring.free()
    assert not failure, failure
    return True


def test_ring_buffer_many_producers_nothing_lost_or_repeated():
    assert nt.launch(3, _ring) == [True] * 3


def _ring_bad_item(rank):
    ring = RingBuffer(4, 3, np.float32)
    try:
        ring.push(np.zeros(4, np.float32), 0)
        return ""
    except ValueError as e:
        return str(e)
    finally:
        nt.barrier_all()
        ring.free()


def test_ring_buffer_rejects_a_wrong_item():
    assert all("shape" in e for e in nt.launch(2, _ring_bad_item))

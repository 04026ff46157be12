"""Distributed data structures on the symmetric heap.

- ``DistributedTensor``: a numpy array sharded by rows over all PEs, with
  global indexing; ``gather`` and ``scatter_`` read and write other PEs'
  shards one-sidedly (no code runs on the owner).
- ``DistributedHashMap``: fixed-capacity open addressing, key -> owner PE by
  hash, lock-free with remote compare-and-swap. The same algorithm runs in
  kernels (``include/nvst/structures/hash_map.hpp`` with ``DeviceOps``).
- ``RingBuffer``: a multi-producer single-consumer ring of fixed-size items in
  the consumer's symmetric memory; producers reserve a slot with a remote
  fetch-add, write it and publish it with a signal; a full ring makes
  producers wait (nothing unread is overwritten). Kernels use
  ``include/nvst/structures/ring_buffer.hpp``.
- ``ParameterCache``: named, versioned tensors (``parameter_cache.py``).

The handles here run on host-memory PEs with numpy (``NVST_HEAP=host``, what
CI runs). On GPU heaps the hash map also works from the host (its atomics run
as one-thread kernels); kernels use the hash map and the ring through the
headers above, with the addresses ``view()`` returns. Every constructor is
collective: all PEs call it in the same order with the same arguments.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from .. import _nvst

__all__ = ["DistributedTensor", "DistributedHashMap", "RingBuffer"]  # and ParameterCache, on first use

# Reads of another PE's shard move whole 8-byte words (remote atomic fetches:
# host heaps have no one-sided get through the proxy); rows are padded to them.
_WORD = 8


def __getattr__(name: str) -> Any:
    # ParameterCache lives in its own module; imported on first use so that
    # this package imports without it.
    if name == "ParameterCache":
        from .parameter_cache import ParameterCache

        return ParameterCache
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class DistributedTensor:
    """A tensor of ``shape`` sharded by rows (dimension 0) over all PEs.

    PE p holds rows ``[p * rows_per_pe, (p + 1) * rows_per_pe)`` (the last
    shard may be shorter). ``local`` is this PE's shard as a numpy view.

    Args:
        shape: global shape; shape[0] rows are split over the PEs.
        dtype: numpy dtype of the elements.
    """

    def __init__(self, shape: Sequence[int], dtype: Any = np.float32) -> None:
        shape = tuple(int(s) for s in shape)
        if not shape or any(s <= 0 for s in shape):
            raise ValueError(f"DistributedTensor: shape {shape} must have positive sizes")
        self.shape = shape
        self.dtype = np.dtype(dtype)
        self.n_pes = _nvst.n_pes()
        self.rows_per_pe = -(-shape[0] // self.n_pes)
        self.row_shape = shape[1:]
        self._row_bytes = int(np.prod(self.row_shape, dtype=np.int64)) * self.dtype.itemsize
        self._row_stride = -(-self._row_bytes // _WORD) * _WORD
        self._buf = _nvst.alloc(self.rows_per_pe * self._row_stride)
        rows = self._buf.array(np.uint8).reshape(self.rows_per_pe, self._row_stride)
        self.local = rows[:, : self._row_bytes].view(self.dtype).reshape((self.rows_per_pe,) + self.row_shape)
        me = _nvst.my_pe()
        self.local_rows = max(0, min(shape[0], (me + 1) * self.rows_per_pe) - me * self.rows_per_pe)

    def owner(self, index: int) -> tuple[int, int]:
        """(PE, row in its shard) of global row ``index``."""
        if not 0 <= index < self.shape[0]:
            raise IndexError(f"DistributedTensor: row {index} is outside 0..{self.shape[0] - 1}")
        return index // self.rows_per_pe, index % self.rows_per_pe

    def _indices(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        bad = idx[(idx < 0) | (idx >= self.shape[0])]
        if bad.size:
            raise IndexError(f"DistributedTensor: rows {bad[:8].tolist()} are outside 0..{self.shape[0] - 1}")
        return idx

    def gather(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """The rows ``indices`` (global), read one-sidedly from their owners.

        Returns an array of shape ``(len(indices),) + row_shape``.
        """
        idx = self._indices(indices)
        me = _nvst.my_pe()
        out = np.empty((idx.size, self._row_stride), dtype=np.uint8)
        words = self._row_stride // _WORD
        for j, g in enumerate(idx):
            pe, row = divmod(int(g), self.rows_per_pe)
            if pe == me:
                out[j] = self._buf.array(np.uint8)[row * self._row_stride:(row + 1) * self._row_stride]
                continue
            first = row * words
            vals = [_nvst.atomic_fetch(self._buf, first + w, pe, "uint64") for w in range(words)]
            out[j] = np.array(vals, dtype=np.uint64).view(np.uint8)
        return out[:, : self._row_bytes].copy().view(self.dtype).reshape((idx.size,) + self.row_shape)

    def scatter_(self, indices: Sequence[int] | np.ndarray, values: np.ndarray) -> None:
        """Writes ``values[j]`` into global row ``indices[j]`` on its owner.

        One-sided; complete (visible at the owners) on return. Rows named twice
        get the last value given.
        """
        idx = self._indices(indices)
        vals = np.ascontiguousarray(values, dtype=self.dtype).reshape((idx.size,) + self.row_shape)
        me = _nvst.my_pe()
        for j, g in enumerate(idx):
            pe, row = divmod(int(g), self.rows_per_pe)
            if pe == me:
                self.local[row] = vals[j]
            else:
                _nvst.put(self._buf, vals[j], pe, row * self._row_stride)
        _nvst.quiet()

    def free(self) -> None:
        """Collective: returns the symmetric memory."""
        _nvst.free(self._buf)


class DistributedHashMap:
    """Keys (0 .. 2**64 - 3) to 64-bit values, ``capacity`` slots per PE.

    A key lives on PE ``hash(key) % n_pes``. Inserts, lookups and erases are
    lock-free and callable from any PE at once. Erased slots are reused only
    after ``clear()``.
    """

    def __init__(self, capacity: int) -> None:
        self._m = _nvst._HashMap(int(capacity))
        self.capacity = int(capacity)

    def insert(self, key: int, value: int) -> bool:
        """Sets ``key`` to ``value``. True when the key was new.

        Raises NvstError when the owner's slots are all taken.
        """
        return self._m.insert(key, value & 0xFFFFFFFFFFFFFFFF)

    def lookup(self, key: int) -> Optional[int]:
        """The value of ``key``, or None."""
        return self._m.lookup(key)

    def erase(self, key: int) -> bool:
        """Removes ``key``; True when it was present."""
        return self._m.erase(key)

    def __contains__(self, key: int) -> bool:
        return self._m.lookup(key) is not None

    def clear(self) -> None:
        """Collective: empties the map on every PE."""
        self._m.clear()

    def view(self) -> dict:
        """Addresses for kernels: ``slots``, ``capacity``, ``n_pes`` (hash_map.hpp's HashMapView)."""
        return self._m.view()

    def free(self) -> None:
        """Collective."""
        self._m.free()


class RingBuffer:
    """Multi-producer single-consumer rings: one per PE, ``capacity`` items each.

    ``push(item, pe)`` appends to PE ``pe``'s ring (waiting while it is full);
    ``pop()`` takes the oldest item of this PE's ring (waiting for one). Items
    are arrays of ``item_shape`` and ``dtype``: numpy arrays on host heaps,
    CUDA tensors on GPU heaps, where both calls are one-thread kernels ordered
    on torch's current stream (they return at once; the data moves in stream
    order, and the wait is on the GPU, with the device timeout).
    """

    def __init__(self, capacity: int, item_shape: Sequence[int] | int, dtype: Any = np.float32) -> None:
        # numpy's integers count as a scalar too
        self.item_shape = ((int(item_shape),) if isinstance(item_shape, (int, np.integer))
                           else tuple(int(s) for s in item_shape))
        self.dtype = dtype
        self.capacity = int(capacity)
        self._gpu = _nvst.device() >= 0
        itemsize = dtype.itemsize if self._gpu else np.dtype(dtype).itemsize
        self.item_bytes = int(np.prod(self.item_shape, dtype=np.int64)) * itemsize
        self._r = _nvst._Ring(self.capacity, self.item_bytes)

    def _device_item(self, t: Any, fn: str) -> Any:
        import torch

        if not isinstance(t, torch.Tensor) or not t.is_cuda or t.dtype != self.dtype:
            raise TypeError(f"RingBuffer.{fn}: a CUDA tensor of {self.dtype} is needed on a GPU heap")
        if tuple(t.shape) != self.item_shape:
            raise ValueError(f"RingBuffer.{fn}: item has shape {tuple(t.shape)}, the ring holds {self.item_shape}")
        return t.contiguous()

    def push(self, item: Any, pe: int) -> Optional[int]:
        """Appends ``item`` to PE ``pe``'s ring. Host heaps: blocking, returns
        the ticket; GPU heaps: stream-ordered, returns None."""
        if self._gpu:
            import torch

            t = self._device_item(item, "push")
            self._r.push_device(t.data_ptr(), pe, torch.cuda.current_stream().cuda_stream)
            return None
        arr = np.ascontiguousarray(item, dtype=self.dtype)
        if arr.shape != self.item_shape:
            raise ValueError(f"RingBuffer.push: item has shape {arr.shape}, the ring holds {self.item_shape}")
        return self._r.push(arr, pe)

    def pop(self) -> Any:
        """The oldest item of this PE's ring (waits for one; NVST_TIMEOUT_S,
        or NVST_DEVICE_TIMEOUT_S on the GPU)."""
        if self._gpu:
            import torch

            out = torch.empty(self.item_shape, dtype=self.dtype, device=f"cuda:{_nvst.device()}")
            self._r.pop_device(out.data_ptr(), torch.cuda.current_stream().cuda_stream)
            return out
        out = np.empty(self.item_shape, dtype=self.dtype)
        self._r.pop(out)
        return out

    def __len__(self) -> int:
        """Items reserved in this PE's ring and not yet popped (host heaps)."""
        return self._r.size()

    def view(self) -> dict:
        """Addresses for kernels (ring_buffer.hpp's RingView)."""
        return self._r.view()

    def free(self) -> None:
        """Collective."""
        self._r.free()

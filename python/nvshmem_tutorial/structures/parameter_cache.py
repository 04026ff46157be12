"""Named, versioned tensors in symmetric memory that any rank reads
(zero-copy on its node) while their owner updates them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import torch

from .. import _nvst
from ..tensors import get_tensor, peer_tensor, via_proxy
from ..training.comm import SymmetricTensor, agree, require_runtime

_ALIGN = 256  # slot alignment in bytes: whole 16-byte vectors, and HBM's burst


@dataclass
class _Entry:
    index: int
    offset: int  # bytes from the data region's start: slot 0, then slot 1
    nbytes: int
    shape: Tuple[int, ...]
    dtype: torch.dtype
    version: int = 0


class ParameterCache:
    """A registry of named tensors, one copy per rank, each rank the writer
    of its own copy and every rank a reader of every copy.

    Use case: state many ranks read and one rank refreshes: LoRA adapters
    or embedding tables served to other ranks, a mirror of parameters that
    an FSDP model keeps sharded, weights an inference rank pulls from a
    trainer. A read on the same node is a view of the owner's memory over
    NVLink (no copy); a PE of another node cannot be read (gets across
    nodes are not offered), and asking says so.

    Every entry has two slots and three words: its version, and a sequence
    number per slot that is odd while that slot is being written. update()
    writes version v + 1 into slot (v + 1) % 2, so the slot of the version a
    reader just saw is not touched until the owner publishes v + 2. A reader
    never sees a half-written update: view() returns the slot of the
    current version with that slot's sequence number, and stable() tells
    whether the view is still intact (a seqlock the caller closes);
    read() returns a copy checked that way, retrying when it raced.

    register() is collective (the same names, shapes and dtypes in the same
    order on every rank; checked). capacity_bytes is the data region of
    every rank (two slots per entry).
    """

    def __init__(self, capacity_bytes: int, max_entries: int = 256):
        require_runtime("ParameterCache")
        if capacity_bytes < _ALIGN or max_entries < 1:
            raise ValueError(f"nvshmem_tutorial.ParameterCache: capacity_bytes ({capacity_bytes}) must be >= "
                             f"{_ALIGN} and max_entries ({max_entries}) >= 1")
        agree("ParameterCache", "capacities", [repr((capacity_bytes, max_entries)).encode()])
        self.capacity = capacity_bytes // _ALIGN * _ALIGN
        self.max_entries = max_entries
        self._data = SymmetricTensor(self.capacity, torch.uint8, "parameter cache data")
        # Words: [3 i] version of entry i, [3 i + 1 + s] sequence number of its slot s.
        self._words = SymmetricTensor(3 * max_entries, torch.int64, "parameter cache versions")
        self._entries: Dict[str, _Entry] = {}
        self._used = 0
        self.gpu = self._data.gpu
        self._peer_data: Dict[int, torch.Tensor] = {}
        self._peer_words: Dict[int, torch.Tensor] = {}
        _nvst.barrier_all()

    def names(self):
        return list(self._entries)

    def register(self, name: str, tensor: torch.Tensor) -> None:
        """Collective: adds `name` with tensor's shape and dtype and publishes
        tensor as its version 1 on this rank."""
        if name in self._entries:
            raise ValueError(f"nvshmem_tutorial.ParameterCache.register: {name!r} is already registered")
        agree("ParameterCache.register", "registrations (name, shape, dtype)",
              [repr((name, tuple(tensor.shape), str(tensor.dtype))).encode()], [name])
        nbytes = tensor.numel() * tensor.element_size()
        size = -(-max(nbytes, 1) // _ALIGN) * _ALIGN
        if len(self._entries) == self.max_entries:
            raise ValueError(f"nvshmem_tutorial.ParameterCache.register: {name!r}: all {self.max_entries} entries "
                             "are used")
        if self._used + 2 * size > self.capacity:
            raise ValueError(f"nvshmem_tutorial.ParameterCache.register: {name!r} needs 2 x {size} bytes; "
                             f"{self.capacity - self._used} of {self.capacity} are free")
        self._entries[name] = _Entry(len(self._entries), self._used, nbytes, tuple(tensor.shape), tensor.dtype)
        self._used += 2 * size
        self.update(name, tensor)
        _nvst.barrier_all()

    def _entry(self, name: str, fn: str) -> _Entry:
        e = self._entries.get(name)
        if e is None:
            raise KeyError(f"nvshmem_tutorial.ParameterCache.{fn}: no entry {name!r} (registered: "
                           f"{', '.join(self._entries) or 'none'})")
        return e

    def _slot(self, data: torch.Tensor, e: _Entry, slot: int) -> torch.Tensor:
        size = -(-max(e.nbytes, 1) // _ALIGN) * _ALIGN
        start = e.offset + slot * size
        return data[start:start + e.nbytes].view(e.dtype).view(e.shape)

    def update(self, name: str, tensor: torch.Tensor) -> int:
        """Publishes tensor as this rank's next version of `name`; returns it.
        Ordered on the current stream on GPUs (readers on other GPUs see the
        new version once this stream has passed it)."""
        e = self._entry(name, "update")
        if tuple(tensor.shape) != e.shape or tensor.dtype != e.dtype:
            raise ValueError(f"nvshmem_tutorial.ParameterCache.update: {name!r} is {e.shape} {e.dtype}; got "
                             f"{tuple(tensor.shape)} {tensor.dtype}")
        v = e.version + 1
        slot = v % 2
        words = self._words.tensor
        seq = words[3 * e.index + 1 + slot: 3 * e.index + 2 + slot]
        seq.add_(1)  # odd: being written
        with torch.no_grad():
            self._slot(self._data.tensor, e, slot).copy_(tensor)
        seq.add_(1)  # even: complete
        words[3 * e.index:3 * e.index + 1].fill_(v)
        e.version = v
        return v

    def _remote(self, rank: int) -> bool:
        return rank != _nvst.my_pe() and _nvst.peer_addr(self._data.tensor.data_ptr(), rank) == 0

    def _refuse_other_node(self, rank: int) -> None:
        """A PE reached through the proxy cannot be read: gets across nodes
        are not offered (docs/status.md)."""
        if via_proxy(rank):
            raise ValueError(f"nvshmem_tutorial.ParameterCache: PE {rank} is on another node "
                             f"({_nvst.transport_to(rank)}); reading it needs a get across nodes, which the proxy "
                             "does not offer: read it from a PE of its node, or have its owner put it")

    def _views(self, rank: int) -> Tuple[torch.Tensor, torch.Tensor]:
        if rank == _nvst.my_pe():
            return self._data.tensor, self._words.tensor
        if rank not in self._peer_data:
            self._peer_data[rank] = peer_tensor(self._data.tensor, rank)
            self._peer_words[rank] = peer_tensor(self._words.tensor, rank)
        return self._peer_data[rank], self._peer_words[rank]

    def _read_words(self, rank: int, e: _Entry) -> Tuple[int, int, int]:
        """(version, sequence of slot 0, of slot 1) of rank's entry."""
        if self._remote(rank):
            self._refuse_other_node(rank)
            got = torch.empty(3, dtype=torch.int64, device=self._words.tensor.device)
            get_tensor(got, self._words.tensor[3 * e.index:3 * e.index + 3], rank)
        else:
            got = self._views(rank)[1][3 * e.index:3 * e.index + 3]
        v, s0, s1 = (int(x) for x in got.tolist())
        return v, s0, s1

    def view(self, name: str, rank: int) -> Tuple[torch.Tensor, int, int]:
        """(zero-copy view of rank's current version of `name`, version,
        that slot's sequence number) on this node; pass the last two to
        stable() after using the view."""
        e = self._entry(name, "view")
        self._check_rank(rank, "view")
        if self._remote(rank):
            raise ValueError(f"nvshmem_tutorial.ParameterCache.view: PE {rank} is on another node "
                             f"({_nvst.transport_to(rank)}); use read()")
        v, s0, s1 = self._read_words(rank, e)
        seq = (s0, s1)[v % 2]
        return self._slot(self._views(rank)[0], e, v % 2), v, seq

    def stable(self, name: str, rank: int, version: int, seq: int) -> bool:
        """Whether the slot behind view()'s (version, seq) was left alone
        since: False once the owner has started writing version + 2."""
        e = self._entry(name, "stable")
        words = self._read_words(rank, e)
        return seq % 2 == 0 and words[1 + version % 2] == seq

    def read(self, name: str, rank: int, attempts: int = 100) -> Tuple[torch.Tensor, int]:
        """A copy of rank's current version of `name`, and the version;
        retried while an update races it (RuntimeError after `attempts`)."""
        e = self._entry(name, "read")
        self._check_rank(rank, "read")
        for _ in range(attempts):
            v, s0, s1 = self._read_words(rank, e)
            slot = v % 2
            seq = (s0, s1)[slot]
            if seq % 2:
                continue
            if self._remote(rank):
                out = torch.empty(e.shape, dtype=e.dtype, device=self._data.tensor.device)
                get_tensor(out, self._slot(self._data.tensor, e, slot).contiguous(), rank)
            else:
                out = self._slot(self._views(rank)[0], e, slot).clone()
            if self.stable(name, rank, v, seq):
                return out, v
        raise RuntimeError(f"nvshmem_tutorial.ParameterCache.read: {name!r} on PE {rank} changed during each of "
                           f"{attempts} reads")

    def version(self, name: str, rank: Optional[int] = None) -> int:
        """rank's (default: this rank's) published version of `name`."""
        e = self._entry(name, "version")
        if rank is None or rank == _nvst.my_pe():
            return e.version
        self._check_rank(rank, "version")
        return self._read_words(rank, e)[0]

    def _check_rank(self, rank: int, fn: str) -> None:
        if not 0 <= rank < _nvst.n_pes():
            raise ValueError(f"nvshmem_tutorial.ParameterCache.{fn}: rank {rank} out of range [0, {_nvst.n_pes()})")
        if not self.gpu and rank != _nvst.my_pe():
            raise ValueError(f"nvshmem_tutorial.ParameterCache.{fn}: reading another PE's copy needs GPU heaps "
                             "(host heaps have no remote reads in Python)")

    def close(self) -> None:
        """Collective."""
        _nvst.barrier_all()
        self._peer_data.clear()
        self._peer_words.clear()
        self._data.free()
        self._words.free()

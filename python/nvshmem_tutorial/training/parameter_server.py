"""FSDP-hybrid parameter server: chosen parameters mirrored in symmetric
memory for any rank to read."""
from __future__ import annotations

from typing import Dict, Optional

import torch

from ..structures.parameter_cache import ParameterCache


class HybridParameterServer:
    """Mirrors named parameters in a ParameterCache so that every rank can
    read any rank's current value on its node: a view over NVLink (no
    copy, no collective) or a checked copy. Ranks of other nodes cannot be
    read (ParameterCache: gets across nodes are not offered).

    Use case: a model trained with FSDP (or ZeRO) keeps most parameters
    sharded, but a few are read all the time by other ranks or processes:
    an embedding table for lookups, a shared adapter, a teacher's weights.
    register_mirror() puts a full copy of each in symmetric memory beside
    the sharded model (for an FSDP module, call it on the full parameter,
    e.g. inside FSDP.summon_full_params); refresh() republishes after an
    optimizer step; get_parameter() reads. Versions come from the cache: a
    reader never sees a half-written refresh (get_parameter returns a
    checked copy or, with copy=False on one node, a view whose version
    stays intact until the owner's next-but-one refresh).
    """

    def __init__(self, capacity_bytes: int, max_entries: int = 256, cache: Optional[ParameterCache] = None):
        self.cache = cache or ParameterCache(capacity_bytes, max_entries)
        self._mirrors: Dict[str, torch.Tensor] = {}

    def register_mirror(self, name: str, tensor: torch.Tensor) -> None:
        """Collective: mirrors `tensor` (read again by every refresh())."""
        self.cache.register(name, tensor.detach())
        self._mirrors[name] = tensor

    def refresh(self, name: Optional[str] = None) -> None:
        """Publishes the current values of one mirrored tensor (or all) as a
        new version. Local: no other rank takes part."""
        for n in ([name] if name is not None else list(self._mirrors)):
            if n not in self._mirrors:
                raise KeyError(f"nvshmem_tutorial.training.HybridParameterServer.refresh: {n!r} is not mirrored")
            self.cache.update(n, self._mirrors[n].detach())

    def get_parameter(self, name: str, rank: int, copy: bool = True) -> torch.Tensor:
        """rank's current value of `name`: a consistent copy, or (copy=False,
        same node) a zero-copy view; version(name, rank) says which."""
        if copy:
            return self.cache.read(name, rank)[0]
        return self.cache.view(name, rank)[0]

    def version(self, name: str, rank: int) -> int:
        return self.cache.version(name, rank)

    def close(self) -> None:
        """Collective."""
        self.cache.close()

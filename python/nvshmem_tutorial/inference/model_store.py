"""Several models' weights resident in symmetric memory (see __init__.py)."""
from __future__ import annotations

import math
from typing import Mapping, Sequence

import torch

from .. import _nvst
from ..tensors import alloc_tensor, nvshmem_free_tensor, peer_tensor, put_tensor


class ModelStore:
    """The weights of several models, each in two banks of symmetric memory.

    ``params(name)`` returns the model's tensors as views of its active bank:
    serving a request reads them in place, and switching models copies
    nothing. ``hot_swap(name, weights, pe)`` writes new weights into the
    other bank of PE ``pe`` (one-sided, from any PE of the node) and then
    flips that PE's bank word: a request that starts afterwards sees the
    new weights whole, one already running keeps the old bank. One swap per
    model at a time: the next may start once the server acknowledged the last
    (``version(name)`` tells it).

    Args:
        models: for each model name, its parameters' names and shapes.
        dtype: element type of every parameter.
    """

    def __init__(self, models: Mapping[str, Mapping[str, Sequence[int]]], dtype: torch.dtype = torch.float32) -> None:
        if not models:
            raise ValueError("ModelStore: no models given")
        self.dtype = dtype
        self.names = sorted(models)  # the same order on every PE: allocation is collective
        self._layout: dict[str, list[tuple[str, tuple[int, ...], int]]] = {}
        self._banks: dict[str, torch.Tensor] = {}
        for name in self.names:
            offset, params = 0, []
            for pname in sorted(models[name]):
                shape = tuple(int(s) for s in models[name][pname])
                params.append((pname, shape, offset))
                offset += math.prod(shape)
            self._layout[name] = params
            self._banks[name] = alloc_tensor((2, offset), dtype)
        # version[i]: swaps of model i so far; its active bank is version % 2.
        self._version = alloc_tensor((len(self.names),), torch.int64)

    def _index(self, name: str) -> int:
        if name not in self._layout:
            raise KeyError(f"ModelStore: no model '{name}' (models: {', '.join(self.names)})")
        return self.names.index(name)

    def version(self, name: str) -> int:
        """Swaps of model ``name`` on this PE so far."""
        return int(self._version[self._index(name)].item())

    def _views(self, name: str, bank: torch.Tensor) -> dict[str, torch.Tensor]:
        return {p: bank[off:off + math.prod(shape)].view(shape) for p, shape, off in self._layout[name]}

    def params(self, name: str) -> dict[str, torch.Tensor]:
        """Model ``name``'s parameters on this PE: views of its active bank."""
        return self._views(name, self._banks[name][self.version(name) % 2])

    def load(self, name: str, weights: Mapping[str, torch.Tensor]) -> None:
        """Fills model ``name``'s active bank on this PE (before serving)."""
        self._fill(self.params(name), weights, "load")

    def _fill(self, dst: Mapping[str, torch.Tensor], weights: Mapping[str, torch.Tensor], fn: str) -> None:
        if set(weights) != set(dst):
            raise ValueError(f"ModelStore.{fn}: parameters {sorted(weights)} are not the model's {sorted(dst)}")
        for p, t in dst.items():
            if tuple(weights[p].shape) != tuple(t.shape):
                raise ValueError(f"ModelStore.{fn}: {p} has shape {tuple(weights[p].shape)}, needs {tuple(t.shape)}")
            t.copy_(weights[p])

    def hot_swap(self, name: str, weights: Mapping[str, torch.Tensor], pe: int) -> None:
        """Writes ``weights`` into PE ``pe``'s inactive bank of model ``name``,
        then makes it the active one there. Blocking."""
        i = self._index(name)
        version_there = peer_tensor(self._version, pe) if pe != _nvst.my_pe() else self._version
        v = int(version_there[i].item())
        staging = torch.empty_like(self._banks[name][0])
        self._fill(self._views(name, staging), weights, "hot_swap")
        put_tensor(self._banks[name][(v + 1) % 2], staging, pe)   # the weights first (blocking) ...
        put_tensor(self._version[i:i + 1], torch.tensor([v + 1], device=staging.device), pe)  # ... then the flip

    def free(self) -> None:
        """Collective."""
        nvshmem_free_tensor(self._version)
        for name in reversed(self.names):
            nvshmem_free_tensor(self._banks[name])

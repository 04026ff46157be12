"""Inference patterns on symmetric memory (PyTorch, GPU heaps).

- ``DistributedKVCache``: a paged KV cache whose pages live in the symmetric
  heap of every PE of a node, with a page table per sequence; attention on
  one PE reads the pages of the others where they are (NVLink loads, page by
  page with an online softmax), no copy into a local cache.
- ``ModelStore``: the weights of several models resident in symmetric memory;
  a request picks a model by name and uses its weights in place (switching
  copies nothing); ``hot_swap`` replaces one model's weights from any PE of
  the node while the others keep serving.

Speculative decoding over a ``RingBuffer`` is in examples/inference/.
Needs PyTorch and a GPU heap; the package imports lazily so that the rest of
nvshmem_tutorial works without them.
"""
from typing import Any

__all__ = ["DistributedKVCache", "ModelStore"]


def __getattr__(name: str) -> Any:
    if name == "DistributedKVCache":
        from .kv_cache import DistributedKVCache

        return DistributedKVCache
    if name == "ModelStore":
        from .model_store import ModelStore

        return ModelStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

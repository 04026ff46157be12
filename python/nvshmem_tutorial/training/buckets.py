"""Bucketing and sharding arithmetic: pure Python, so CI tests it.

Gradients are reduced in buckets: one collective per bucket instead of one
per parameter (a small collective costs its launch and a flag exchange
whatever its size), and a bucket starts as soon as the backward pass has
produced every gradient in it, so reduction overlaps the rest of backward.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Sequence, Tuple


@dataclass(frozen=True)
class Bucket:
    """Parameters (by index) reduced together, and where each sits in the
    bucket's flat buffer (element offsets)."""
    params: Tuple[int, ...]
    offsets: Tuple[int, ...]
    numel: int


def plan_buckets(numels: Sequence[int], element_bytes: int, bucket_bytes: int) -> List[Bucket]:
    """Groups parameters into buckets of at most bucket_bytes, in reverse
    order (the order backward produces gradients). A parameter larger than
    bucket_bytes gets a bucket of its own. Parameters with no elements are
    left out."""
    if bucket_bytes < element_bytes:
        raise ValueError(f"gradient sync: bucket_bytes ({bucket_bytes}) is smaller than one element "
                         f"({element_bytes} bytes)")
    if any(n < 0 for n in numels):
        raise ValueError(f"gradient sync: negative parameter size in {list(numels)}")
    cap = bucket_bytes // element_bytes
    buckets: List[Bucket] = []
    params: List[int] = []
    offsets: List[int] = []
    used = 0
    for i in reversed(range(len(numels))):
        n = numels[i]
        if n == 0:
            continue
        if params and used + n > cap:
            buckets.append(Bucket(tuple(params), tuple(offsets), used))
            params, offsets, used = [], [], 0
        params.append(i)
        offsets.append(used)
        used += n
    if params:
        buckets.append(Bucket(tuple(params), tuple(offsets), used))
    return buckets


def padded(numel: int, parts: int) -> int:
    """numel rounded up to a multiple of parts (each part a whole shard)."""
    if parts < 1:
        raise ValueError(f"sharding: {parts} parts")
    return -(-numel // parts) * parts


def shard_range(numel: int, parts: int, index: int) -> Tuple[int, int]:
    """[start, end) of shard `index` of a flat buffer of numel elements
    padded to parts equal shards (the end may pass numel: padding)."""
    if not 0 <= index < parts:
        raise ValueError(f"sharding: shard {index} out of range for {parts} parts")
    size = padded(numel, parts) // parts
    return index * size, (index + 1) * size

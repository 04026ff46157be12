"""A paged KV cache spread over the PEs of a node (see __init__.py)."""
from __future__ import annotations

import math

import torch

from .. import _nvst
from ..tensors import nvshmem_alloc_tensor, nvshmem_free_tensor, peer_tensor


class DistributedKVCache:
    """Pages of keys and values on every PE; sequences whose pages any PE reads.

    Every PE holds ``num_pages`` pages, each ``page_size`` positions of
    ``[num_heads, head_dim]`` keys and values, and a page table: for each of
    its ``max_seqs`` sequences the (PE, page) of each block of positions and
    the length. A sequence belongs to the PE that appends to it (its home);
    its pages come from the home's pool. Any PE of the node reads it in
    place: the table and the pages through peer views (nvshmem_ptr), and
    ``attend`` computes attention one page at a time with an online softmax,
    so the pages are read where they lie and never gathered into a copy.

    Args:
        num_pages: pages per PE.
        page_size: positions per page.
        num_heads, head_dim: shape of one position's key (and value).
        dtype: element type of keys and values.
        max_seqs: sequences per home PE.
        max_pages_per_seq: pages one sequence may use.
    """

    def __init__(self, num_pages: int, page_size: int, num_heads: int, head_dim: int,
                 dtype: torch.dtype = torch.float32, max_seqs: int = 64, max_pages_per_seq: int = 64) -> None:
        for name, v in (("num_pages", num_pages), ("page_size", page_size), ("num_heads", num_heads),
                        ("head_dim", head_dim), ("max_seqs", max_seqs), ("max_pages_per_seq", max_pages_per_seq)):
            if int(v) <= 0:
                raise ValueError(f"DistributedKVCache: {name} must be positive, got {v}")
        self.page_size, self.num_heads, self.head_dim = page_size, num_heads, head_dim
        self.max_seqs, self.max_pages_per_seq = max_seqs, max_pages_per_seq
        self.k = nvshmem_alloc_tensor((num_pages, page_size, num_heads, head_dim), dtype)
        self.v = nvshmem_alloc_tensor((num_pages, page_size, num_heads, head_dim), dtype)
        # table[s, i] = (pe, page) of positions [i * page_size, (i + 1) * page_size) of sequence s.
        self.table = nvshmem_alloc_tensor((max_seqs, max_pages_per_seq, 2), torch.int32)
        self.lengths = nvshmem_alloc_tensor((max_seqs,), torch.int64)
        self._free_pages = list(range(num_pages - 1, -1, -1))
        self._pages_of: dict[int, list[int]] = {}
        self._peer_views: dict[int, tuple[torch.Tensor, ...]] = {}

    def _views(self, pe: int) -> tuple[torch.Tensor, ...]:
        """k, v, table, lengths of PE ``pe`` as this PE reads them (no copy)."""
        if pe == _nvst.my_pe():
            return self.k, self.v, self.table, self.lengths
        if pe not in self._peer_views:
            self._peer_views[pe] = tuple(peer_tensor(t, pe) for t in (self.k, self.v, self.table, self.lengths))
        return self._peer_views[pe]

    def append(self, seq: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Appends positions ``k``, ``v`` (``[T, num_heads, head_dim]``, on
        this GPU) to sequence ``seq`` of this PE, taking pages from this PE's
        pool as needed. The length is published last, after the pages and
        the table, so a reader never sees positions that are not written."""
        if not 0 <= seq < self.max_seqs:
            raise ValueError(f"DistributedKVCache.append: sequence {seq} is outside 0..{self.max_seqs - 1}")
        if k.shape != v.shape or k.dim() != 3 or tuple(k.shape[1:]) != (self.num_heads, self.head_dim):
            raise ValueError(f"DistributedKVCache.append: k {tuple(k.shape)} and v {tuple(v.shape)} must both be "
                             f"[T, {self.num_heads}, {self.head_dim}]")
        me = _nvst.my_pe()
        length = int(self.lengths[seq].item())
        pages = self._pages_of.setdefault(seq, [])
        done = 0
        while done < k.shape[0]:
            block, offset = divmod(length, self.page_size)
            if offset == 0:
                if block >= self.max_pages_per_seq:
                    raise ValueError(f"DistributedKVCache.append: sequence {seq} would need more than "
                                     f"{self.max_pages_per_seq} pages")
                if not self._free_pages:
                    raise RuntimeError(f"DistributedKVCache.append: every page of PE {me} is in use")
                pages.append(self._free_pages.pop())
                self.table[seq, block, 0] = me
                self.table[seq, block, 1] = pages[-1]
            n = min(self.page_size - offset, k.shape[0] - done)
            self.k[pages[block], offset:offset + n] = k[done:done + n]
            self.v[pages[block], offset:offset + n] = v[done:done + n]
            done += n
            length += n
        torch.cuda.current_stream().synchronize()  # pages and table written before the length says so
        self.lengths[seq] = length
        torch.cuda.current_stream().synchronize()

    def release(self, seq: int) -> None:
        """Returns sequence ``seq``'s pages to this PE's pool (its readers must be done)."""
        self._free_pages.extend(reversed(self._pages_of.pop(seq, [])))
        self.lengths[seq] = 0

    def length(self, seq: int, home_pe: int) -> int:
        """Positions in sequence ``seq`` of PE ``home_pe``."""
        return int(self._views(home_pe)[3][seq].item())

    def attend(self, q: torch.Tensor, seq: int, home_pe: int) -> torch.Tensor:
        """Attention of queries ``q`` (``[num_heads, head_dim]``, one decode
        step) over sequence ``seq`` of PE ``home_pe``: softmax(q k^T / sqrt(d)) v
        per head, reading every page where it lies. Returns ``[num_heads, head_dim]``."""
        _, _, table, lengths = self._views(home_pe)
        length = int(lengths[seq].item())
        if length == 0:
            raise ValueError(f"DistributedKVCache.attend: sequence {seq} of PE {home_pe} is empty")
        entries = table[seq, : -(-length // self.page_size)].tolist()
        scale = 1.0 / math.sqrt(self.head_dim)
        qf = q.float()
        m = torch.full((self.num_heads,), -math.inf, device=q.device)
        denom = torch.zeros(self.num_heads, device=q.device)
        acc = torch.zeros(self.num_heads, self.head_dim, device=q.device)
        for block, (pe, page) in enumerate(entries):
            kk, vv, _, _ = self._views(pe)
            n = min(self.page_size, length - block * self.page_size)
            kp, vp = kk[page, :n], vv[page, :n]                         # views of the page where it lies
            s = torch.einsum("hd,thd->ht", qf, kp.float()) * scale      # [H, n]
            m_new = torch.maximum(m, s.max(dim=1).values)
            correction = torch.exp(m - m_new)
            p = torch.exp(s - m_new[:, None])
            denom = denom * correction + p.sum(dim=1)
            acc = acc * correction[:, None] + torch.einsum("ht,thd->hd", p, vp.float())
            m = m_new
        return (acc / denom[:, None]).to(q.dtype)

    def free(self) -> None:
        """Collective."""
        self._peer_views.clear()
        for t in (self.lengths, self.table, self.v, self.k):
            nvshmem_free_tensor(t)

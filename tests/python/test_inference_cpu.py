"""The arithmetic of nvshmem_tutorial.inference on the CPU (PyTorch, no GPU,
no job): the KV cache's page-by-page attention (online softmax over pages
found through the page table, pages scattered over two "PEs") against
attention over one contiguous cache. The GPU runs of the examples check the
rest (examples/inference/)."""
import math

import pytest

torch = pytest.importorskip("torch")

from nvshmem_tutorial.inference.kv_cache import DistributedKVCache  # noqa: E402


def _cache_over(pages_of_pe, table, lengths, page_size, heads, dim):
    """A DistributedKVCache whose views are CPU tensors (one pair of page pools per PE)."""
    c = DistributedKVCache.__new__(DistributedKVCache)
    c.page_size, c.num_heads, c.head_dim = page_size, heads, dim
    c._views = lambda pe: (pages_of_pe[pe][0], pages_of_pe[pe][1], table, lengths)
    return c


@pytest.mark.parametrize("length", [1, 15, 16, 17, 100])
def test_paged_attention_equals_attention_over_a_contiguous_cache(length):
    g = torch.Generator().manual_seed(length)
    page_size, heads, dim, pages = 16, 4, 32, 8
    k = torch.randn(length, heads, dim, generator=g)
    v = torch.randn(length, heads, dim, generator=g)
    q = torch.randn(heads, dim, generator=g)
    pools = {pe: (torch.full((pages, page_size, heads, dim), float("nan")),
                  torch.full((pages, page_size, heads, dim), float("nan"))) for pe in (0, 1)}
    table = torch.zeros(1, pages, 2, dtype=torch.int32)
    order = torch.randperm(2 * pages, generator=g)  # blocks on both PEs, in any page order
    for block in range(math.ceil(length / page_size)):
        pe, page = divmod(int(order[block]), pages)
        table[0, block] = torch.tensor([pe, page])
        n = min(page_size, length - block * page_size)
        pools[pe][0][page, :n] = k[block * page_size:block * page_size + n]
        pools[pe][1][page, :n] = v[block * page_size:block * page_size + n]
    cache = _cache_over(pools, table, torch.tensor([length]), page_size, heads, dim)
    got = cache.attend(q, 0, home_pe=0)
    s = torch.einsum("hd,thd->ht", q, k) / math.sqrt(dim)
    want = torch.einsum("ht,thd->hd", torch.softmax(s, dim=1), v)
    assert torch.allclose(got, want, atol=1e-5), (got - want).abs().max()


def test_an_empty_sequence_is_refused():
    cache = _cache_over({0: (None, None)}, torch.zeros(1, 1, 2, dtype=torch.int32), torch.tensor([0]), 16, 1, 8)
    with pytest.raises(ValueError, match="empty"):
        cache.attend(torch.zeros(1, 8), 0, home_pe=0)

"""nvshmem_tutorial.pplx.AllToAll with pplx-kernels' test shapes and checks
(their tests/test_all_to_all.py, re-expressed), ranks sharing GPUs where
there are fewer GPUs than ranks (NVST_TEST_SHARE_GPUS=1, gloo):

    NVST_TEST_SHARE_GPUS=1 torchrun --nproc_per_node=2 tests/python/pplx_job.py   # dp_size 1
    NVST_TEST_SHARE_GPUS=1 torchrun --nproc_per_node=4 tests/python/pplx_job.py   # dp_size 1 and 2

Every rank builds every DP group's tokens from one seed (as pplx's test
does), dispatches its group's, and checks: each local expert's token
count, the set of rows (and fp8 scales) it received against the tokens
routed to it, and after a pretend expert (x 1.5) the combined rows against
the exact weighted sum: within one unit in the last place of the output
dtype, as pplx's fp32 sum rounded once is. in_dtype x out_dtype as pplx's
(bf16, fp8 e4m3, fp16 x fp16, bf16) with expert_y in the output dtype,
and pplx's other pairings (expert_y float32, or the other 16-bit type);
the send/recv halves split (do_send / do_recv), bound_m below dp_x's rows
(junk rows never sent, out_tokens' rows there left alone) and
column-major scales, each in some of the cases; bad arguments refused.
"""
import dataclasses
import sys

import torch
from job_checks import assert_rounded_once, start_job
from nvshmem_tutorial.pplx import AllToAll

RANK, WORLD, DEV, CHECKS = start_job()


@dataclasses.dataclass
class MoE:  # pplx's MoEConfig
    num_experts: int
    experts_per_token: int
    hidden_dim: int
    max_num_tokens: int
    in_dtype: torch.dtype = torch.bfloat16
    out_dtype: torch.dtype = torch.bfloat16
    block_size: int = 128


SMALL = MoE(num_experts=8, experts_per_token=3, hidden_dim=512, max_num_tokens=10)
MEDIUM = MoE(num_experts=64, experts_per_token=4, hidden_dim=1024, max_num_tokens=20)


class RankData:  # pplx's RankTestData: random token count, distinct experts per token
    def __init__(self, moe, rng):
        self.num_tokens = int(torch.randint(1, moe.max_num_tokens, [1], generator=rng).item())
        self.indices = torch.empty(self.num_tokens, moe.experts_per_token, dtype=torch.int32)
        for i in range(self.num_tokens):
            self.indices[i] = torch.randperm(moe.num_experts, generator=rng)[:moe.experts_per_token]
        self.weights = torch.rand(self.num_tokens, moe.experts_per_token, generator=rng)
        self.x_scale = None
        if moe.in_dtype.itemsize == 1:
            x = torch.rand(self.num_tokens, moe.hidden_dim, generator=rng)
            self.x = ((x - 0.5) * 400).to(moe.in_dtype)
            self.x_scale = torch.rand(self.num_tokens, -(-moe.hidden_dim // moe.block_size), generator=rng)
        else:
            self.x = torch.randn(self.num_tokens, moe.hidden_dim, generator=rng).to(moe.in_dtype)


def rows_of(t):
    """A set of rows as bytes (exact, any dtype)."""
    # flatten first: a [n, 1] slice of column-major scales counts as contiguous, its last stride above 1
    row_bytes = t.element_size() * (t.numel() // max(t.shape[0], 1))
    raw = t.contiguous().flatten().view(torch.uint8).reshape(t.shape[0], row_bytes).cpu()
    return {bytes(r.numpy().tobytes()) for r in raw}


def run(moe, dp_size, internode, split, y_dtype, padded, col_scales):
    """One case. y_dtype: expert_y's dtype (pplx's test: out_dtype). padded:
    dp_x and indices have max_num_tokens rows, bound_m fewer (the rest is
    junk, never sent, and out_tokens' rows there are left alone).
    col_scales: the fp8 scales' tensors are column-major views."""
    num_dp = WORLD // dp_size
    dp_rank = RANK // dp_size
    E_local = moe.num_experts // WORLD
    scale_bytes = 0 if moe.in_dtype.itemsize != 1 else -(-moe.hidden_dim // moe.block_size) * 4
    make = AllToAll.internode if internode else AllToAll.intranode
    ata = make(max_num_tokens=moe.max_num_tokens, num_experts=moe.num_experts,
               experts_per_token=moe.experts_per_token, rank=RANK, world_size=WORLD, dp_size=dp_size,
               hidden_dim=moe.hidden_dim, hidden_dim_bytes=moe.hidden_dim * moe.in_dtype.itemsize,
               hidden_dim_scale_bytes=scale_bytes)
    rng = torch.Generator().manual_seed(123)
    data = [RankData(moe, rng) for _ in range(num_dp)]
    mine = data[dp_rank]
    n = mine.num_tokens
    sent_to = [[] for _ in range(moe.num_experts)]  # (group, token) per expert
    for g, d in enumerate(data):
        for t in range(d.num_tokens):
            for e in d.indices[t].tolist():
                sent_to[e].append((g, t))

    x, x_scale, indices, weights = mine.x, mine.x_scale, mine.indices, mine.weights
    if padded:  # junk rows past bound_m: tokens to experts like any other's, never to be sent
        junk = RankData(dataclasses.replace(moe, max_num_tokens=moe.max_num_tokens + 1), rng)
        pad = moe.max_num_tokens - n
        x = torch.cat([x, junk.x[:1].expand(pad, -1)])
        indices = torch.cat([indices, junk.indices[:1].expand(pad, -1)])
        weights = torch.cat([weights, junk.weights[:1].expand(pad, -1)])
        if x_scale is not None:
            x_scale = torch.cat([x_scale, junk.x_scale[:1].expand(pad, -1)])
    counts = torch.full((E_local,), -7, dtype=torch.int32, device=DEV)
    cap = moe.max_num_tokens * num_dp
    expert_x = torch.empty((E_local, cap, moe.hidden_dim), dtype=moe.in_dtype, device=DEV)
    expert_scale = dp_x_scale = None
    if scale_bytes:
        dp_x_scale = x_scale.to(DEV)
        if col_scales:  # strided views: tokens innermost (pplx reads any strides)
            expert_scale = torch.empty((E_local, scale_bytes // 4, cap), dtype=torch.float32, device=DEV)
            expert_scale = expert_scale.transpose(1, 2)
            dp_x_scale = dp_x_scale.T.contiguous().T
        else:
            expert_scale = torch.empty((E_local, cap, scale_bytes // 4), dtype=torch.float32, device=DEV)
    bound_m = torch.tensor([n], dtype=torch.uint32, device=DEV)
    args = dict(out_expert_num_tokens=counts, out_expert_x=expert_x, out_expert_x_scale=expert_scale,
                dp_x=x.to(DEV), dp_x_scale=dp_x_scale, indices=indices.to(DEV).to(torch.uint32), bound_m=bound_m)
    if split:
        ata.dispatch(**args, do_send=True, do_recv=False)
        torch.cuda._sleep(1000)  # other work between the halves
        ata.dispatch(**args, do_send=False, do_recv=True)
    else:
        ata.dispatch(**args)
    torch.cuda.synchronize()
    for i in range(E_local):
        e = RANK * E_local + i
        got = int(counts[i].item())
        assert got == len(sent_to[e]), f"expert {e}: {got} tokens, {len(sent_to[e])} routed to it"
        want = torch.stack([data[g].x[t] for g, t in sent_to[e]]) if got else mine.x[:0]
        assert rows_of(expert_x[i, :got]) == rows_of(want), f"expert {e}: the rows received differ from those sent"
        if scale_bytes:
            want_s = torch.stack([data[g].x_scale[t] for g, t in sent_to[e]]) if got else mine.x_scale[:0]
            assert rows_of(expert_scale[i, :got]) == rows_of(want_s), f"expert {e}: the scales differ"

    val = 1.5
    expert_y = expert_x.to(y_dtype) * val
    y = torch.full((moe.max_num_tokens, moe.hidden_dim), float("nan"), dtype=moe.out_dtype, device=DEV)
    cargs = dict(out_tokens=y, indices=indices.to(DEV).to(torch.uint32), weights=weights.to(DEV),
                 expert_y=expert_y, bound_m=bound_m)
    if split:
        ata.combine(**cargs, do_send=True, do_recv=False)
        ata.combine(**cargs, do_send=False, do_recv=True)
    else:
        ata.combine(**cargs)
    torch.cuda.synchronize()
    ata.destroy()
    # pplx's kernels sum in fp32 and round once to out_tokens' dtype; the
    # reference is that sum, exact (float64), of the same expert_y values.
    # (pplx's own test sums in the output dtype: at top-4 that strays past
    # assert_close's fp16 tolerance from the once-rounded sum it checks.)
    rows = (mine.x.to(y_dtype) * val).double()  # each token's expert_y row, as every expert made it
    exact = (mine.weights.double().unsqueeze(2) * rows.unsqueeze(1)).sum(1)
    assert_rounded_once(y[:n].cpu(), exact, moe.out_dtype, "combined rows")
    assert bool(y[n:].isnan().all()), "combine wrote rows at or past bound_m"


CASES = []  # pplx's: in_dtype x out_dtype, expert_y in the output dtype
for dp_size in [d for d in (1, 2) if WORLD % d == 0 and WORLD // d >= 2]:
    for moe in (SMALL, MEDIUM):
        if moe.num_experts % WORLD:
            continue
        for in_dtype in (torch.bfloat16, torch.float8_e4m3fn, torch.float16):
            for out_dtype in (torch.float16, torch.bfloat16):
                CASES.append((dataclasses.replace(moe, in_dtype=in_dtype, out_dtype=out_dtype), dp_size, out_dtype))
# pplx's other pairings: expert_y float32, or the other 16-bit type (in, expert_y, out)
MIXED = [(torch.bfloat16, torch.float32, torch.float16), (torch.float16, torch.bfloat16, torch.float16),
         (torch.bfloat16, torch.float16, torch.bfloat16), (torch.float8_e4m3fn, torch.float32, torch.bfloat16)]
for in_dtype, y_dtype, out_dtype in MIXED:
    CASES.append((dataclasses.replace(MEDIUM, in_dtype=in_dtype, out_dtype=out_dtype), 1, y_dtype))

for i, (moe, dp_size, y_dtype) in enumerate(CASES):
    internode = i % 2 == 1
    split = i % 3 == 0
    padded = i % 4 == 2
    col_scales = moe.in_dtype.itemsize == 1 and i % 4 == 3
    name = (f"pplx all-to-all: {moe.num_experts} experts top-{moe.experts_per_token} hidden {moe.hidden_dim}, "
            f"{str(moe.in_dtype)[6:]} -> {str(y_dtype)[6:]} -> {str(moe.out_dtype)[6:]}, dp_size {dp_size}"
            f"{', internode()' if internode else ''}{', send/recv split' if split else ''}"
            f"{', bound_m below the rows' if padded else ''}{', column-major scales' if col_scales else ''}")
    CHECKS(name)(lambda moe=moe, dp_size=dp_size, internode=internode, split=split, y_dtype=y_dtype, padded=padded,
                 col_scales=col_scales: run(moe, dp_size, internode, split, y_dtype, padded, col_scales))


@CHECKS("pplx all-to-all: bad arguments refused by name")
def _():
    for kwargs, what in ((dict(world_size=WORLD + 1), "world_size"), (dict(dp_size=WORLD), "groups"),
                         (dict(hidden_dim_scale_bytes=3), "hidden_dim_scale_bytes")):
        base = dict(max_num_tokens=8, num_experts=2 * WORLD, experts_per_token=2, rank=RANK, world_size=WORLD,
                    dp_size=1, hidden_dim=256, hidden_dim_bytes=512, hidden_dim_scale_bytes=0)
        base.update(kwargs)
        try:
            AllToAll.intranode(**base)
        except (ValueError, RuntimeError) as e:
            assert what in str(e), str(e)
        else:
            raise AssertionError(f"{what}: accepted")


sys.exit(CHECKS.done())

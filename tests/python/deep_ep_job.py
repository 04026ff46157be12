"""nvshmem_tutorial.ep as DeepEP v1.2.1's callers use it, checked against
references computed here (2 or more ranks; sharing GPUs with
NVST_TEST_SHARE_GPUS=1, on gloo):

    NVST_TEST_SHARE_GPUS=1 torchrun --nproc_per_node=2 tests/python/deep_ep_job.py

Run without NVST_SYMMETRIC_SIZE: Buffer(group, int(2e9)) must size the heap
itself. Checks the handles' tuple forms (normal: rank_prefix_matrix first;
low latency: recv_src_info, recv_layout_range, M, hidden, num_experts),
capture(), Config's positional form and invariants, dispatch without
topk_idx, column-major fp8 scales, zero-copy combine,
clean_low_latency_buffer, and the kernel names DeepEP's bench_kineto looks
up (one profiler row containing "dispatch", one "combine", launched as
::dispatch / ::combine).
"""
import os
import sys

import nvshmem_tutorial as nt
import nvshmem_tutorial.ep as deep_ep
import torch
import torch.distributed as dist
from job_checks import start_job

RANK, WORLD, DEV, CHECKS = start_job()
T, H, K, E = 64, 1024, 4, 8 * WORLD
STATE = {}


def gather(t):
    """Every rank's t (through the host, whatever the backend)."""
    parts = [torch.empty_like(t, device="cpu") for _ in range(WORLD)]
    dist.all_gather(parts, t.cpu())
    return [p.to(DEV) for p in parts]


def routing(seed):
    g = torch.Generator().manual_seed(seed * 100 + RANK)
    scores = torch.rand((T, E), generator=g)
    topk = torch.topk(scores, K, dim=-1).indices
    topk[torch.rand((T, K), generator=g) < 0.1] = -1
    return topk.to(DEV)


def raises(exc, fn, what):
    try:
        fn()
    except exc as e:
        return str(e)
    raise AssertionError(f"{what}: no {exc.__name__}")


@CHECKS("Buffer(group, int(2e9)) sizes the symmetric heap itself")
def _():
    assert "NVST_SYMMETRIC_SIZE" not in os.environ or STATE, "run this job without NVST_SYMMETRIC_SIZE"
    buf = deep_ep.Buffer(None, int(2e9), 0, low_latency_mode=False, num_qps_per_rank=1, explicitly_destroy=True)
    assert int(os.environ["NVST_SYMMETRIC_SIZE"]) >= 2e9
    STATE["normal"] = buf


@CHECKS("statics: is_sm90_compiled, capture, Config's positional form and invariants, set_num_sms")
def _():
    assert deep_ep.Buffer.is_sm90_compiled() is True
    ev = deep_ep.Buffer.capture()
    assert isinstance(ev, deep_ep.EventOverlap) and ev.event is not None
    ev.current_stream_wait()
    c = deep_ep.Config(24, 8, 256)
    assert (c.num_sms, c.num_max_nvl_chunked_send_tokens, c.num_max_nvl_chunked_recv_tokens) == (24, 8, 256)
    assert "send < recv" in raises(ValueError, lambda: deep_ep.Config(24, 300, 256), "send chunk above recv")
    assert "even" in raises(ValueError, lambda: deep_ep.Buffer.set_num_sms(23), "odd SM count")
    assert STATE["normal"].get_comm_stream() is not None


@CHECKS("normal dispatch/combine: handle[0] is rank_prefix_matrix, rows by source rank, capture() as previous_event")
def _():
    buf = STATE["normal"]
    topk = routing(1)
    x = torch.full((T, H), float(RANK), dtype=torch.bfloat16, device=DEV)
    weights = torch.rand((T, K), device=DEV)
    per_rank, _, per_expert, in_rank, _ = buf.get_dispatch_layout(topk, E)
    recv_x, recv_idx, recv_w, counts, handle, _ = buf.dispatch(
        x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert,
        topk_idx=topk, topk_weights=weights, config=deep_ep.Config(24, 8, 256), previous_event=buf.capture())
    assert isinstance(handle, tuple) and len(handle) == 6
    prefix = handle[0]
    sent = torch.stack(gather(per_rank))  # [src, dst]
    assert torch.equal(prefix.cpu(), sent.cumsum(0).to(torch.int32).cpu()), (prefix, sent)
    start = 0
    for src in range(WORLD):  # rows arrive source by source
        end = int(prefix[src][RANK])
        assert bool((recv_x[start:end].float() == src).all()), f"rows {start}:{end} are not rank {src}'s"
        start = end
    assert start == recv_x.shape[0]
    assert torch.equal(handle[4].cpu(), in_rank.cpu())
    assert "channel" in raises(NotImplementedError, lambda: handle[1], "channel_prefix_matrix")
    gbl = torch.stack(gather(per_expert)).sum(0)
    assert counts == gbl.view(WORLD, -1)[RANK].tolist()
    combined, combined_w, _ = buf.combine(recv_x, handle, topk_weights=recv_w, previous_event=buf.capture())
    hits = in_rank.sum(1, keepdim=True).float()
    torch.testing.assert_close(combined.float(), x.float() * hits)
    STATE["handle"] = handle


@CHECKS("normal dispatch without topk_idx (is_token_in_rank routes), column-major fp8 scales, cached handle")
def _():
    buf = STATE["normal"]
    topk = routing(2)
    per_rank, _, per_expert, in_rank, _ = buf.get_dispatch_layout(topk, E)
    x = torch.randn((T, H), device=DEV).to(torch.bfloat16)
    scales = (x.float().view(T, -1, 128).abs().amax(-1) / 448).clamp(min=1e-4)
    x8 = (x.float().view(T, -1, 128) / scales.unsqueeze(-1)).view(T, H).to(torch.float8_e4m3fn)
    col_major = scales.T.contiguous().T
    assert not col_major.is_contiguous()
    recv, recv_idx, recv_w, counts, handle, _ = buf.dispatch(
        (x8, col_major), num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert)
    assert recv_idx is None and recv_w is None
    gbl = torch.stack(gather(per_expert)).sum(0)
    assert counts == gbl.view(WORLD, -1)[RANK].tolist(), (counts, gbl)
    # Rows arrive source by source, each source's in token order: exactly
    # its tokens bound here (column RANK of its is_token_in_rank).
    want_x, want_s = [], []
    for a, s, m in zip(gather(x8.view(torch.uint8)), gather(scales), gather(in_rank)):
        want_x.append(a[m[:, RANK]])
        want_s.append(s[m[:, RANK]])
    want_x, want_s = torch.cat(want_x), torch.cat(want_s)
    assert recv[0].shape == (want_x.shape[0], H) and recv[1].shape == want_s.shape, \
        f"{recv[0].shape[0]} rows received, {want_x.shape[0]} sent here"
    assert torch.equal(recv[0].view(torch.uint8), want_x), "fp8 rows differ"
    assert recv[1].is_contiguous() and torch.equal(recv[1], want_s), "scales differ"
    # Cached, on the handle: the same fp8 rows and scales, the scales given
    # column-major again, after a captured event and finishing async.
    (c8, cs), _, _, _, _, ev = buf.dispatch((x8, col_major), handle=handle, previous_event=buf.capture(),
                                            async_finish=True)
    ev.current_stream_wait()
    assert torch.equal(c8.view(torch.uint8), want_x) and torch.equal(cs, want_s), "cached fp8 dispatch differs"
    cached, _, _, _, _, _ = buf.dispatch(x, handle=handle)
    combined, _, _ = buf.combine(cached, handle)
    torch.testing.assert_close(combined.float(), x.float() * in_rank.sum(1, keepdim=True).float(), rtol=1e-2,
                               atol=1e-2)


@CHECKS("low latency: DeepEP's handle tuple, token indices, layout range or a clear refusal, zero-copy combine")
def _():
    M = T
    hint = deep_ep.Buffer.get_low_latency_rdma_size_hint(M, H, WORLD, E)
    buf = deep_ep.Buffer(None, num_rdma_bytes=hint, low_latency_mode=True, num_qps_per_rank=E // WORLD,
                         allow_nvlink_for_low_latency_mode=True, explicitly_destroy=True)
    STATE["ll"] = buf
    topk = routing(3)
    x = torch.full((T, H), float(RANK), dtype=torch.bfloat16, device=DEV)
    x[:, -128:] = torch.arange(T, device=DEV).to(torch.bfloat16).view(-1, 1)
    stats = torch.zeros(E // WORLD, dtype=torch.int32, device=DEV)
    recv_x, recv_count, handle, event, hook = buf.low_latency_dispatch(
        x, topk, M, E, cumulative_local_expert_recv_stats=stats, use_fp8=False, async_finish=True)
    event.current_stream_wait()
    assert isinstance(handle, tuple) and len(handle) == 5 and tuple(handle[2:]) == (M, H, E)
    all_topk = torch.stack(gather(topk))
    for i in range(E // WORLD):
        e = RANK * (E // WORLD) + i
        n = int(recv_count[i])
        assert n == int((all_topk == e).sum()) == int(stats[i])
        tokens = handle[0][i][:n]
        assert torch.equal(recv_x[i, :n, -1].float(), tokens.float()), "recv_src_info is not each row's token"
    try:
        layout = handle[1]
    except NotImplementedError as e:  # rows of one expert arrived interleaved across sources
        assert "arrival order" in str(e)
    else:
        assert torch.equal((layout & 0xffffffff).sum(1).to(torch.int32).cpu(), recv_count.cpu())
        for i in range(E // WORLD):
            for src in range(WORLD):
                b, c = int(layout[i, src] >> 32), int(layout[i, src] & 0xffffffff)
                assert bool((recv_x[i, b:b + c, :-128].float() == src).all())
    weights = torch.rand((T, K), device=DEV)
    y = recv_x.clone()
    buf.get_next_low_latency_combine_buffer(handle)[:, :, :] = y
    out, _, _ = buf.low_latency_combine(torch.zeros_like(y), topk, weights, handle, zero_copy=True)
    ref = x.float() * weights.masked_fill(topk < 0, 0).sum(1, keepdim=True)
    torch.testing.assert_close(out.float(), ref, rtol=1e-2, atol=1e-2)
    buf.clean_low_latency_buffer(M, H, E)
    raises(ValueError, lambda: buf.clean_low_latency_buffer(M + 1, H, E), "clean with another shape")


@CHECKS("profiler: one kernel row named *dispatch* and one *combine*, launched as ::dispatch / ::combine")
def _():
    buf = STATE["ll"]
    topk = routing(4)
    x = torch.randn((T, H), device=DEV).to(torch.bfloat16)
    w = torch.rand((T, K), device=DEV)
    for hook_mode in (False, True):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(4):
                recv, _, handle, _, hook = buf.low_latency_dispatch(x, topk, T, E, return_recv_hook=hook_mode)
                if hook_mode:
                    hook()
                y = torch.zeros((E // WORLD, WORLD * T, H), dtype=torch.bfloat16, device=DEV)
                _, _, hook = buf.low_latency_combine(y, topk, w, handle, return_recv_hook=hook_mode)
                if hook_mode:
                    hook()
            torch.cuda.synchronize()
        rows = prof.key_averages().table(sort_by="cuda_time_total", max_name_column_width=100).split("\n")
        names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        for word in ("dispatch", "combine"):
            lines = [r for r in rows if word in r]
            assert len(lines) == 1, f"{len(lines)} profiler rows contain {word!r} (DeepEP's bench_kineto needs 1): " \
                                    f"{[r.split()[0] for r in lines]}"
            # bench_kineto's hook-mode split: launches named ::word, a multiple of 2 per 4 calls
            launches = [n for n in names if f"::{word}" in n]
            assert len(launches) >= 4 and len(launches) % 2 == 0, f"{len(launches)} launches named ::{word}"


for b in ("ll", "normal"):
    if b in STATE:
        STATE[b].destroy()
nt.finalize()
sys.exit(CHECKS.done())

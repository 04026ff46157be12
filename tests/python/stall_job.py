"""ep.Buffer across nodes with work queued right behind each call, as users
write it: x.cpu() (a copy into pageable memory) or x.clone() (device to
device) of the call's output on the current stream, without synchronising
first. Each of low_latency_dispatch / _combine and dispatch / combine must
come back within LIMIT_S with every value right (a reference rebuilt on
every rank from the ranks' seeds). test_stall_gpu.py runs it with 2 ranks
on logical nodes of their own (NVST_NODE_SIZE=1) and fails on a stall
report of the proxy in the output.

    NVST_NODE_SIZE=1 NVST_TEST_SHARE_GPUS=1 torchrun --nproc_per_node=2 tests/python/stall_job.py
"""
import sys
import time

import nvshmem_tutorial as nt
import nvshmem_tutorial.ep as deep_ep
import torch
import torch.distributed as dist
from job_checks import start_job

LIMIT_S = 5.0
RANK, WORLD, DEV, CHECKS = start_job()
nt.init_from_torch()
T, H, K = 64, 512, 4
E = 4 * WORLD
EL = E // WORLD


def inputs(rank):
    """Rank `rank`'s x, topk_idx and weights, the same on every rank."""
    g = torch.Generator(device="cpu").manual_seed(1000 + rank)
    x = (torch.rand((T, H), generator=g) * 4 - 2 + 0.01).to(torch.bfloat16)
    idx = torch.rand((T, E), generator=g).topk(K, dim=1).indices.to(torch.int64)
    w = torch.rand((T, K), generator=g)
    return x.to(DEV), idx.to(DEV), w.to(DEV)


ALL = [inputs(r) for r in range(WORLD)]
X, IDX, W = ALL[RANK]


def behind(out, how):
    """The output as the caller takes it right after the call, on the host."""
    if how == "cpu":
        return out.cpu()
    copy = out.clone()
    torch.cuda.current_stream().synchronize()
    return copy.cpu()


def timed(call, how):
    """(call's outputs, what `behind` made of the first, seconds)."""
    torch.cuda.synchronize()
    dist.barrier()
    t0 = time.perf_counter()
    outs = call()
    got = behind(outs[0], how)
    dt = time.perf_counter() - t0
    assert dt < LIMIT_S, f"{dt:.2f} s from the call to its output on the host (limit {LIMIT_S} s)"
    return outs, got, dt


def ll_rows(recv_count, src_info):
    """Per local expert, (rank, token) of each received row, in slot order."""
    return [[(int(src_info[e, i, 0]), int(src_info[e, i, 1])) for i in range(int(recv_count[e]))] for e in range(EL)]


def want_ll_rows(e):
    return sorted((s, t) for s in range(WORLD) for t in range(T) if bool((ALL[s][1][t] == RANK * EL + e).any()))


def check_ll_dispatch(got, recv_count, src_info):
    for e, rows in enumerate(ll_rows(recv_count.cpu(), src_info.cpu())):
        assert sorted(rows) == want_ll_rows(e), f"expert {e}: rows from {sorted(rows)[:4]}..."
        for i, (s, t) in enumerate(rows):
            assert torch.equal(got[e, i], ALL[s][0][t].cpu()), f"expert {e} slot {i}: row of rank {s} token {t}"


def normal_rows():
    return [(s, t) for s in range(WORLD) for t in range(T) if bool(((ALL[s][1][t] // EL) == RANK).any())]


def normal_combine_reference(scale):
    """What combine returns when rank r's expert scales rows by scale(r):
    this rank's term first, another node's summed there and rounded once
    to bf16 (each rank is a node here)."""
    ref = torch.zeros((T, H), dtype=torch.float32, device=DEV)
    owner = IDX // EL
    for r in range(WORLD):
        goes = (owner == r).any(1)
        term = torch.zeros_like(ref)
        term[goes] = (X[goes] * scale(r)).to(torch.bfloat16).float()
        ref += term if r == RANK else term.to(torch.bfloat16).float()
    return ref.to(torch.bfloat16)


for how in ("cpu", "clone"):
    what = ".cpu() (pageable)" if how == "cpu" else ".clone()"

    @CHECKS(f"low_latency_dispatch across nodes, then {what} of recv_x at once")
    def _():
        size = deep_ep.Buffer.get_low_latency_rdma_size_hint(T, H, WORLD, E, K)
        buf = deep_ep.Buffer(None, num_rdma_bytes=size, low_latency_mode=True)
        (recv_x, recv_count, handle, _, _), got, dt = timed(
            lambda: buf.low_latency_dispatch(X, IDX, T, E, use_fp8=False), how)
        check_ll_dispatch(got, recv_count, handle.src_info)
        print(f"[rank {RANK}] low_latency_dispatch + {how}: {dt:.3f} s", flush=True)
        buf.destroy()

    @CHECKS(f"low_latency_combine across nodes, then {what} of its output at once")
    def _():
        size = deep_ep.Buffer.get_low_latency_rdma_size_hint(T, H, WORLD, E, K)
        buf = deep_ep.Buffer(None, num_rdma_bytes=size, low_latency_mode=True)
        recv_x, recv_count, handle, _, _ = buf.low_latency_dispatch(X, IDX, T, E, use_fp8=False)
        torch.cuda.synchronize()
        factor = torch.tensor([2.0 ** ((RANK * EL + e) % 3) for e in range(EL)], device=DEV)  # exact in bf16
        y = (recv_x.float() * factor[:, None, None]).to(torch.bfloat16)
        (combined, _, _), got, dt = timed(lambda: buf.low_latency_combine(y, IDX, W, handle), how)
        ref = torch.zeros((T, H), dtype=torch.float32, device=DEV)
        for k in range(K):
            f = (2.0 ** (IDX[:, k] % 3)).float()
            ref += W[:, k:k + 1] * (X.float() * f[:, None])
        torch.testing.assert_close(got.float(), ref.cpu(), rtol=1e-2, atol=1e-2)
        print(f"[rank {RANK}] low_latency_combine + {how}: {dt:.3f} s", flush=True)
        buf.destroy()

    @CHECKS(f"dispatch (first) across nodes, then {what} of recv_x at once")
    def _():
        buf = deep_ep.Buffer(None, num_nvl_bytes=64 << 20)
        per_rank, _, per_expert, in_rank, _ = buf.get_dispatch_layout(IDX, E)
        (recv_x, *_rest), got, dt = timed(
            lambda: buf.dispatch(X, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank,
                                 num_tokens_per_expert=per_expert, topk_idx=IDX, topk_weights=W), how)
        rows = normal_rows()
        assert got.shape == (len(rows), H), (tuple(got.shape), len(rows))
        if rows:
            assert torch.equal(got, torch.stack([ALL[s][0][t] for s, t in rows]).cpu()), "recv_x"
        print(f"[rank {RANK}] dispatch + {how}: {dt:.3f} s", flush=True)
        buf.destroy()

    @CHECKS(f"combine across nodes, then {what} of its output at once")
    def _():
        buf = deep_ep.Buffer(None, num_nvl_bytes=64 << 20)
        per_expert = buf.get_dispatch_layout(IDX, E)[2]
        recv_x, _, _, _, handle, _ = buf.dispatch(X, topk_idx=IDX, topk_weights=W, num_tokens_per_expert=per_expert)
        torch.cuda.synchronize()
        y = (recv_x * ((RANK + 1) * 0.5)).to(torch.bfloat16)
        (combined, _, _), got, dt = timed(lambda: buf.combine(y, handle), how)
        assert torch.equal(got, normal_combine_reference(lambda r: (r + 1) * 0.5).cpu()), "combined_x"
        print(f"[rank {RANK}] combine + {how}: {dt:.3f} s", flush=True)
        buf.destroy()


dist.barrier()
failed = CHECKS.done()
nt.finalize()
dist.destroy_process_group()
sys.exit(failed)

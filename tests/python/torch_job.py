"""The PyTorch half of the package on GPUs, one process per GPU, launched by
torchrun (tests/python/test_torch_gpu.py starts it):

    torchrun --nproc_per_node=2 tests/python/torch_job.py

Every check compares with torch.distributed (NCCL) or with a reference in
plain PyTorch on random data, after poisoning the outputs. Each rank prints
"PASS name" or "FAIL name: why"; the exit status is the number of failures.
A failing check does not stop the others (they are all collective, so a rank
never skips one). With one rank (a one-GPU machine) the checks that need a
peer check what one rank can: a send to oneself refused, all_gather a copy.
"""
import os
import sys

import nvshmem_tutorial as nt
import nvshmem_tutorial.distributed as nd
import nvshmem_tutorial.ep as deep_ep
import torch
import torch.distributed as dist
from job_checks import Checks, join_torch

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
LOCAL = int(os.environ.get("LOCAL_RANK", "0"))
# NVST_NODE_SIZE=1: every rank is a node of its own, so peers are reached
# only through the proxy. Then only what works across nodes runs, plus a
# check that the rest refuses clearly.
INTERNODE = os.environ.get("NVST_NODE_SIZE") == "1"
# NVST_TEST_SHARE_GPUS=1: ranks share GPUs (a one-GPU machine). NCCL wants a
# GPU per rank, so torch.distributed runs on gloo, and only the checks that
# also run across nodes run (they compare with references computed locally).
SHARE = os.environ.get("NVST_TEST_SHARE_GPUS") == "1"
SUBSET = INTERNODE or SHARE
# NVST_BACKEND=nvshmem: the job runs on NVIDIA's NVSHMEM (one node).
BACKEND = os.environ.get("NVST_BACKEND") or "nvst"
DEV = join_torch(LOCAL, SHARE)
if os.environ.get("NVST_TEST_SIDE_STREAM"):  # everything on a stream of torch's instead of the default one
    torch.cuda.set_stream(torch.cuda.Stream())
nt.init_from_torch()

CHECKS = Checks(RANK, dist.barrier)


def check(name, internode=False):
    return CHECKS(name, run=internode or not SUBSET)


def rand(shape, dtype, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    if dtype.is_floating_point:
        return (torch.rand(shape, generator=g) * 4 - 2 + 0.01).to(dtype).to(DEV)
    return torch.randint(-1000, 1000, shape, generator=g, dtype=dtype).to(DEV)


def same(a, b, what):
    if a.shape != b.shape or a.dtype != b.dtype:
        raise AssertionError(f"{what}: {tuple(a.shape)} {a.dtype} vs {tuple(b.shape)} {b.dtype}")
    wrong = (a.view(torch.uint8) != b.view(torch.uint8)).sum().item() if a.numel() else 0
    if wrong:
        raise AssertionError(f"{what}: {wrong} bytes differ")


def raises(exc, fn, what, says=None):
    """fn() raises exc, whose message holds `says` when given."""
    try:
        fn()
    except exc as e:
        if says is not None and says not in str(e):
            raise AssertionError(f"{what}: the message does not say {says!r}: {e}") from e
        return
    raise AssertionError(f"{what}: no {exc.__name__} raised")


@check("init: ranks agree with torch.distributed", internode=True)
def _():
    assert nt.my_pe() == RANK and nt.n_pes() == WORLD, (nt.my_pe(), nt.n_pes())
    assert nt.heap_kind() in (("nvshmem",) if BACKEND == "nvshmem" else ("cumem", "cudaipc")), nt.heap_kind()
    # The other backend needs a new process (or is not in this build).
    other = "nvst" if BACKEND == "nvshmem" else "nvshmem"
    if other == "nvshmem" and not nt.nvshmem_backend_built():
        raises(ValueError, lambda: nt.NvshmemBuffer(None, RANK, WORLD, 1 << 20, 0, backend=other), "absent backend")
    else:
        raises(RuntimeError, lambda: nt.init_from_torch(None, other), "a second backend")
    raises(ValueError, lambda: nt.NvshmemBuffer(None, RANK, WORLD, 1 << 20, 0, backend="bogus"), "unknown backend")


@check("symmetric tensors: peer views read and write the peer's copy")
def _():
    t = nt.alloc_tensor((1000, 3), torch.float32)
    assert t.device == DEV and (t == 0).all()
    t.copy_(rand((1000, 3), torch.float32, 100 + RANK))
    nt.nvshmem_barrier()
    peer = (RANK + 1) % WORLD
    view = nt.peer_tensor(t, peer)
    assert view.device == DEV, view.device
    same(view.clone(), rand((1000, 3), torch.float32, 100 + peer), "peer view")
    nt.nvshmem_barrier()
    view[7, 1] = float(RANK) + 0.5  # the left neighbour's copy
    torch.cuda.synchronize()
    nt.nvshmem_barrier()
    left = (RANK - 1) % WORLD
    assert t[7, 1].item() == float(left) + 0.5, t[7, 1].item()
    nt.nvshmem_free_tensor(t)


@check("put/get tensors, blocking and async, every dtype")
def _():
    peer = (RANK + 1) % WORLD
    left = (RANK - 1) % WORLD
    for i, dtype in enumerate([torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int64, torch.uint8]):
        n = 4097 + i
        dst = nt.alloc_tensor((n,), dtype)
        src = rand((n,), dtype if dtype != torch.uint8 else torch.int32, 7 * i + RANK).to(dtype)
        nt.put_tensor(dst, src, peer)
        nt.nvshmem_barrier()
        expect = rand((n,), dtype if dtype != torch.uint8 else torch.int32, 7 * i + left).to(dtype)
        same(dst, expect, f"put {dtype}")
        got = torch.full((n,), 3, dtype=dtype, device=DEV)
        nt.get_tensor_async(got, dst, peer)  # peer's dst holds my src
        torch.cuda.current_stream().synchronize()
        same(got, src, f"get {dtype}")
        nt.nvshmem_barrier()
        nt.nvshmem_free_tensor(dst)


@check("collectives equal torch.distributed (NCCL)")
def _():
    for dtype in [torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int64]:
        for n in [0, 1, 1023, WORLD * 4099, 1 << 20]:
            seed = n * 31 + RANK
            x = rand((n,), dtype, seed)
            ops = [("sum", dist.ReduceOp.SUM), ("max", dist.ReduceOp.MAX), ("min", dist.ReduceOp.MIN)]
            for name, op in ops:
                ours, ref = x.clone(), x.clone()
                nd.all_reduce(ours, op=op)
                dist.all_reduce(ref, op=op)
                if name == "sum" and dtype.is_floating_point and WORLD > 2:
                    torch.testing.assert_close(ours, ref, rtol=1e-2, atol=1e-2)  # summation order differs
                else:
                    same(ours, ref, f"all_reduce {name} {dtype} n={n}")
            out = torch.full((WORLD * n,), 7, dtype=dtype, device=DEV)
            ref = torch.empty_like(out)
            nd.all_gather_into_tensor(out, x)
            dist.all_gather_into_tensor(ref, x)
            same(out, ref, f"all_gather_into_tensor {dtype} n={n}")
            m = n // WORLD
            big = x[: m * WORLD]
            out = torch.full((m,), 7, dtype=dtype, device=DEV)
            ref = torch.empty_like(out)
            nd.reduce_scatter_tensor(out, big)
            dist.reduce_scatter_tensor(ref, big)
            if dtype.is_floating_point and WORLD > 2:
                torch.testing.assert_close(out, ref, rtol=1e-2, atol=1e-2)
            else:
                same(out, ref, f"reduce_scatter_tensor {dtype} n={n}")
            b, ref = x.clone(), x.clone()
            nd.broadcast(b, src=WORLD - 1)
            dist.broadcast(ref, src=WORLD - 1)
            same(b, ref, f"broadcast {dtype} n={n}")
            rows = (n // WORLD) * WORLD
            a2a_in = x[:rows].view(WORLD, -1) if rows else x[:0].view(WORLD, 0)
            out, ref = torch.full_like(a2a_in, 7), torch.empty_like(a2a_in)
            nd.all_to_all_single(out, a2a_in)
            dist.all_to_all_single(ref, a2a_in)
            same(out, ref, f"all_to_all_single {dtype} n={n}")
    # Uneven splits (rows of 5 elements): rank r sends (r + p + 1) rows to p.
    send = [RANK + p + 1 for p in range(WORLD)]
    recv = [p + RANK + 1 for p in range(WORLD)]
    x = rand((sum(send), 5), torch.bfloat16, 900 + RANK)
    out = torch.full((sum(recv), 5), 7, dtype=torch.bfloat16, device=DEV)
    ref = torch.empty_like(out)
    nd.all_to_all_single(out, x, recv, send)
    dist.all_to_all_single(ref, x, recv, send)
    same(out, ref, "all_to_all_single uneven")
    y = rand((4096,), torch.float32, 1234 + RANK)
    ref = y.clone()
    work = nd.all_reduce(y, async_op=True)
    work.wait()
    dist.all_reduce(ref)
    same(y, ref, "all_reduce async_op")


@check("bad input raises on the caller, sizes that differ raise on every rank")
def _():
    raises(ValueError, lambda: nd.all_reduce(torch.ones(4)), "CPU tensor")
    raises(ValueError, lambda: nd.all_reduce(torch.ones(4, 4, device=DEV).t()), "non-contiguous")
    raises(TypeError, lambda: nd.all_reduce(torch.ones(4, dtype=torch.float64, device=DEV)), "float64")
    raises(ValueError, lambda: nd.all_gather_into_tensor(torch.ones(3, device=DEV), torch.ones(4, device=DEV)),
           "all_gather output size")
    raises(ValueError, lambda: nd.all_reduce(torch.ones(4, device=DEV), op="xor"), "bad op")
    raises(ValueError, lambda: nt.put_tensor(torch.ones(4, device=DEV), torch.ones(5, device=DEV), 0),
           "put size")
    raises(ValueError, lambda: nt.put_tensor_async(torch.ones(4, device=DEV), torch.ones(4), 0),
           "put from a CPU tensor")
    raises(ValueError, lambda: nt.put_tensor_async(torch.ones(16, device=DEV), torch.ones(4, 4, device=DEV).t(), 0),
           "put non-contiguous")
    raises(TypeError, lambda: nt.get_tensor_async(torch.ones(4, device=DEV), [1.0, 2.0], 0), "get from a list")
    raises(ValueError, lambda: nt.nvshmem_put_tensor(torch.ones(4, device=DEV), torch.ones(4, device=DEV), 17, 0),
           "seed put of more bytes than the tensors hold")
    raises(ValueError, lambda: nt.nvshmem_alloc_tensor(64, 96), "seed alloc with an alignment not a power of two")
    if WORLD > 1:  # needs two ranks to differ
        raises(ValueError, lambda: nd.all_reduce(torch.ones(100 + RANK, device=DEV)), "count differs across ranks")
    raises(ValueError, lambda: nt.peer_tensor(torch.ones(4, device=DEV), 0), "peer of a non-symmetric tensor")


@check("NvshmemBuffer: send/recv ring (multi-slot), all_gather", internode=True)
def _():
    buf = nt.NvshmemBuffer(None, RANK, WORLD, num_nvl_bytes=WORLD << 20, num_rdma_bytes=0, backend=BACKEND)
    dst, src = (RANK + 1) % WORLD, (RANK - 1) % WORLD
    if WORLD == 1:  # no peer to send to: that is refused, and all_gather is a copy
        raises(ValueError, lambda: buf.send(torch.ones(4, device=DEV), 0), "send to oneself")
    for n in ([] if WORLD == 1 else [1, 1000, (5 << 20) // 2 + 3]):  # the last is 2.5 slots
        x = rand((n,), torch.float16, n + RANK)
        got = torch.full((n,), 9, dtype=torch.float16, device=DEV)
        if RANK % 2 == 0:
            buf.send(x, dst)
            buf.recv(got, src)
        else:
            buf.recv(got, src)
            buf.send(x, dst)
        torch.cuda.synchronize()
        same(got, rand((n,), torch.float16, n + src), f"send/recv {n}")
    # Across nodes internode_all_gather is a ring of send/recv; 3 MiB + 10 B
    # is over 3 slots, so its sends wait for their receivers.
    for n, dtype in [(333, torch.int32), ((3 << 20) // 2 + 5, torch.float16)]:
        x = rand((n,), dtype, 5 + RANK)
        lst = [torch.full((n,), 9, dtype=dtype, device=DEV) for _ in range(WORLD)]
        if INTERNODE:
            buf.internode_all_gather(lst, x)
        else:
            buf.all_gather(lst, x)
        torch.cuda.synchronize()
        for r, got in enumerate(lst):
            same(got, rand((n,), dtype, 5 + r), f"all_gather of {n} {dtype}, rank {r}'s part")
    buf.barrier()
    buf.destroy()


# ---- ep.Buffer against a plain-PyTorch reference ---------------------------------

def routing(T, K, E, seed, masked=False):
    g = torch.Generator(device="cpu").manual_seed(seed)
    scores = torch.rand((T, E), generator=g)
    idx = scores.topk(K, dim=1).indices.to(torch.int64)
    if masked:
        idx[torch.rand((T, K), generator=g) < 0.25] = -1
    w = torch.rand((T, K), generator=g).to(torch.float32)
    return idx.to(DEV), w.to(DEV)


def gather_all(t):
    if SHARE:  # gloo gathers host tensors
        out = [torch.empty_like(t, device="cpu") for _ in range(WORLD)]
        dist.all_gather(out, t.cpu())
        return [o.to(DEV) for o in out]
    out = [torch.empty_like(t) for _ in range(WORLD)]
    dist.all_gather(out, t)
    return out


def gather_all_padded(t, M):
    pad = torch.zeros((M,) + tuple(t.shape[1:]), dtype=t.dtype, device=DEV)
    pad[: t.shape[0]] = t
    return gather_all(pad)


@check("collectives equal a reference from the gathered inputs (runs on a shared GPU and across nodes)",
       internode=True)
def _():
    def reduced(xs, name, dtype):
        if name == "sum":
            acc = sum(x.double() for x in xs) if dtype.is_floating_point else sum(x.long() for x in xs)
            return acc.to(dtype)
        stacked = torch.stack(xs)
        return stacked.amax(0) if name == "max" else stacked.amin(0)

    def close(got, want, what, terms=None):
        """Bit for bit, except a float sum of more than 2 ranks: the library
        sums in its own order, and across nodes rounds each node's partial
        sum to the dtype once more, so each of two roundings may be off by
        an ulp of the terms' magnitudes."""
        if terms is None or not want.dtype.is_floating_point or WORLD <= 2:
            return same(got, want, what)
        bound = 2 * torch.finfo(want.dtype).eps * sum(t.double().abs() for t in terms) + 1e-30
        err = (got.double() - want.double()).abs()
        assert bool((err <= bound).all()), f"{what}: off by {float((err - bound).max()):.3g} beyond 2 ulps of the terms"

    for dtype in [torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int64]:
        for n in [1, 1023, WORLD * 4099]:
            x = rand((n,), dtype, n * 17 + RANK)
            xs = gather_all(x)
            for name in ("sum", "max", "min"):
                ours = x.clone()
                nd.all_reduce(ours, op=name)
                close(ours, reduced(xs, name, dtype), f"all_reduce {name} {dtype} n={n}", xs if name == "sum" else None)
            out = torch.full((WORLD * n,), 7, dtype=dtype, device=DEV)
            nd.all_gather_into_tensor(out, x)
            same(out, torch.cat(xs), f"all_gather_into_tensor {dtype} n={n}")
            m = n // WORLD
            if m:
                out = torch.full((m,), 7, dtype=dtype, device=DEV)
                nd.reduce_scatter_tensor(out, x[: m * WORLD])
                want = reduced([v[: m * WORLD] for v in xs], "sum", dtype)[RANK * m:(RANK + 1) * m]
                close(out, want, f"reduce_scatter_tensor {dtype} n={n}", [v[RANK * m:(RANK + 1) * m] for v in xs])
                a2a_in = x[: m * WORLD].view(WORLD, m)
                out = torch.full_like(a2a_in, 7)
                nd.all_to_all_single(out, a2a_in)
                same(out, torch.stack([v[: m * WORLD].view(WORLD, m)[RANK] for v in xs]),
                     f"all_to_all_single {dtype} n={n}")
            b = x.clone()
            nd.broadcast(b, src=WORLD - 1)
            same(b, xs[WORLD - 1], f"broadcast {dtype} n={n}")
    # Uneven splits (rows of 5): rank r sends (r + p + 1) rows to p.
    send = [RANK + p + 1 for p in range(WORLD)]
    recv = [p + RANK + 1 for p in range(WORLD)]
    x = rand((sum(send), 5), torch.bfloat16, 950 + RANK)
    rows = max(sum(p + q + 1 for q in range(WORLD)) for p in range(WORLD))
    padded = gather_all_padded(x, rows)
    out = torch.full((sum(recv), 5), 7, dtype=torch.bfloat16, device=DEV)
    nd.all_to_all_single(out, x, recv, send)
    start = [sum(p + q + 1 for q in range(RANK)) for p in range(WORLD)]  # where rank p's rows for me begin
    want = torch.cat([padded[p][start[p]:start[p] + p + RANK + 1] for p in range(WORLD)])
    same(out, want, "all_to_all_single uneven")
    y = rand((4096,), torch.float32, 1299 + RANK)
    ys = gather_all(y)
    work = nd.all_reduce(y, async_op=True)
    work.wait()
    close(y, reduced(ys, "sum", torch.float32), "all_reduce async_op", ys)


@check("ep.Buffer normal mode equals a PyTorch reference (bf16, fp8, cached, combine, bias pair)", internode=True)
def _():
    T, H, K, E = 513, 256, 4, 8 * WORLD
    El = E // WORLD
    buf = deep_ep.Buffer(None, num_nvl_bytes=256 << 20)
    # The outputs' copy out of the receive region reads nothing else.
    far = torch.empty(16, dtype=torch.uint8, device=DEV)
    raises(RuntimeError, lambda: buf._normal.copy_out([far.data_ptr()], [far.data_ptr()], [16], 0),
           "copy_out from outside the receive region")
    for masked in (False, True):
        x = rand((T, H), torch.bfloat16, 40 + RANK)
        idx, w = routing(T, K, E, 50 + RANK + 7 * masked, masked)
        per_rank, per_node, per_expert, in_rank, _ = buf.get_dispatch_layout(idx, E)
        all_idx = gather_all(idx)
        all_x, all_w = gather_all(x), gather_all(w)
        # Reference layout.
        owner = torch.where(idx >= 0, idx // El, torch.full_like(idx, -1))
        ref_in_rank = torch.stack([(owner == r).any(1) for r in range(WORLD)], 1)
        same(in_rank, ref_in_rank, "is_token_in_rank")
        same(per_rank, ref_in_rank.sum(0).to(torch.int32), "num_tokens_per_rank")
        G = nt.team_n_pes(nt.TEAM_NODE)
        if G == WORLD:
            assert per_node is None, "num_tokens_per_rdma_rank on one node"
        else:  # a token counts once for a node, however many of its ranks it goes to
            ref_node = torch.stack([ref_in_rank[:, n * G:(n + 1) * G].any(1) for n in range(WORLD // G)], 1)
            same(per_node, ref_node.sum(0).to(torch.int32), "num_tokens_per_rdma_rank")
        ref_pe = torch.stack([(idx == e).sum() for e in range(E)]).to(torch.int32)
        same(per_expert, ref_pe, "num_tokens_per_expert")
        recv_x, recv_idx, recv_w, counts, handle, _ = buf.dispatch(
            x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert,
            topk_idx=idx, topk_weights=w)
        # Expected rows: source rank by source rank, in token order.
        rows = [(s, t) for s in range(WORLD) for t in range(T)
                if ((all_idx[s][t] >= 0) & (all_idx[s][t] // El == RANK)).any()]
        assert recv_x.shape == (len(rows), H), (recv_x.shape, len(rows))
        if rows:
            tok = torch.tensor([t for _, t in rows], device=DEV)
            same(recv_x, torch.stack([all_x[s][t] for s, t in rows]), "recv_x")
            same(handle.recv_src_idx, tok.to(torch.int32), "recv_src_idx")
            ref_idx = torch.stack([all_idx[s][t] for s, t in rows])
            mine = (ref_idx >= 0) & (ref_idx // El == RANK)
            same(recv_idx, torch.where(mine, ref_idx - RANK * El, torch.full_like(ref_idx, -1)), "recv_topk_idx")
            ref_w = torch.stack([all_w[s][t] for s, t in rows])
            same(recv_w, torch.where(mine, ref_w, torch.zeros_like(ref_w)), "recv_topk_weights")
        ref_counts = [int(((recv_idx == e).sum()).item()) for e in range(El)]
        assert counts == ref_counts, (counts, ref_counts)
        # get_local_buffer_tensor: the receive region starts with the received rows.
        R = len(rows)
        same(buf.get_local_buffer_tensor(torch.bfloat16, (R, H)), recv_x, "get_local_buffer_tensor")
        if R > 1:  # DeepEP's offset is in bytes
            same(buf.get_local_buffer_tensor(torch.bfloat16, (R - 1, H), offset=2 * H), recv_x[1:],
                 "get_local_buffer_tensor from byte 2H")
        raises(ValueError, lambda: buf.get_local_buffer_tensor(torch.bfloat16, 1 << 40), "a slice past the end")
        raises(ValueError, lambda: buf.get_local_buffer_tensor(torch.bfloat16, use_rdma_buffer=True),
               "use_rdma_buffer before any low-latency dispatch")
        # num_worst_tokens: the same rows, padded (no expert, weight 0, source
        # -1), no per-expert counts; the combine takes the padded rows.
        W = R + 5 + RANK
        px, pidx, pw, pcounts, phandle, _ = buf.dispatch(x, num_tokens_per_expert=per_expert, topk_idx=idx,
                                                          topk_weights=w, num_worst_tokens=W)
        assert px.shape == (W, H) and pidx.shape == (W, K) and pcounts == [], (px.shape, pidx.shape, pcounts)
        same(px[:R], recv_x, "num_worst_tokens recv_x")
        same(pidx[:R], recv_idx, "num_worst_tokens recv_topk_idx")
        same(pw[:R], recv_w, "num_worst_tokens recv_topk_weights")
        same(pidx[R:], torch.full((W - R, K), -1, dtype=torch.int64, device=DEV), "padded recv_topk_idx")
        same(pw[R:], torch.zeros((W - R, K), dtype=torch.float32, device=DEV), "padded recv_topk_weights")
        same(phandle.recv_src_idx[R:], torch.full((W - R,), -1, dtype=torch.int32, device=DEV), "padded src_idx")
        if R > 1:
            raises(ValueError, lambda: buf.dispatch(x, num_tokens_per_expert=per_expert, topk_idx=idx,
                                                    num_worst_tokens=R - 1), "num_worst_tokens below the count")
        else:  # every rank takes part in the collective; this one keeps its rows
            buf.dispatch(x, num_tokens_per_expert=per_expert, topk_idx=idx, num_worst_tokens=R)
        # Cached: the same routing again, new data.
        x2 = rand((T, H), torch.bfloat16, 60 + RANK)
        recv_x2, *_rest, event = buf.dispatch(x2, handle=handle, async_finish=True)
        event.current_stream_wait()
        all_x2 = gather_all(x2)
        if rows:
            same(recv_x2, torch.stack([all_x2[s][t] for s, t in rows]), "cached recv_x")
        # Combine: the "expert" scales each row by (rank + 1) / 2 (exact in bf16).
        y = (recv_x * ((RANK + 1) * 0.5)).to(torch.bfloat16)
        combined, combined_w, _ = buf.combine(y, handle, topk_weights=recv_w)
        # In rank order, in fp32; another node's ranks are first summed on its
        # relay and rounded once to bf16 (the hierarchical combine, as
        # tests/common/ep_reference.hpp's normal_combine_expected).
        ref = torch.zeros((T, H), dtype=torch.float32, device=DEV)
        for node in range(WORLD // G):
            partial = torch.zeros_like(ref)
            for r in range(node * G, (node + 1) * G):
                goes = (owner == r).any(1)
                term = (x[goes] * ((r + 1) * 0.5)).to(torch.bfloat16).float()
                if node == RANK // G:
                    ref[goes] += term
                else:
                    partial[goes] += term
            ref += partial.to(torch.bfloat16).float()
        same(combined, ref.to(torch.bfloat16), "combined_x")
        same(combined_w, torch.where(idx >= 0, w, torch.zeros_like(w)), "combined_topk_weights")
        # A cached dispatch with the padded handle is padded too (DeepEP's).
        cx, *_ = buf.dispatch(x, handle=phandle)
        assert cx.shape == (W, H), cx.shape
        same(cx[:R], recv_x, "cached num_worst_tokens recv_x")
        py = torch.cat([y, rand((W - R, H), torch.bfloat16, 90 + RANK)])  # padding rows are not read
        combined_p, combined_pw, _ = buf.combine(py, phandle, topk_weights=pw)
        same(combined_p, combined, "combine of num_worst_tokens rows")
        same(combined_pw, combined_w, "combined_topk_weights of num_worst_tokens rows")
        # DeepEP's bias pair: both added in fp32, in order, before the one rounding.
        b0 = (torch.arange(T * H, device=DEV) % 13 * 0.125 - 0.5).view(T, H).to(torch.bfloat16)
        b1 = (torch.arange(T * H, device=DEV) % 7 * 0.375 - 1.0).view(T, H).to(torch.bfloat16)
        combined_b, _, _ = buf.combine(y, handle, bias=(b0, b1))
        same(combined_b, (ref + b0.float() + b1.float()).to(torch.bfloat16), "combined_x with a bias pair")
        # fp8 dispatch: e4m3 rows with one scale per 128 channels travel unchanged.
        amax = x.float().abs().view(T, H // 128, 128).amax(-1).clamp(min=1e-4)
        scales = (amax / 448.0).contiguous()
        x8 = (x.float().view(T, H // 128, 128) / scales[..., None]).view(T, H).to(torch.float8_e4m3fn)
        (r8, rs), *_ = buf.dispatch((x8, scales), num_tokens_per_expert=per_expert, topk_idx=idx, topk_weights=w)
        all_x8, all_s = gather_all(x8.view(torch.uint8)), gather_all(scales)
        if rows:
            same(r8.view(torch.uint8), torch.stack([all_x8[s][t] for s, t in rows]), "fp8 recv_x")
            same(rs, torch.stack([all_s[s][t] for s, t in rows]), "fp8 recv scales")
    raises(TypeError, lambda: buf.dispatch(x.float(), topk_idx=idx, num_tokens_per_expert=per_expert),
           "float32 x refused")
    buf.destroy()


@check("ep.Buffer low-latency mode equals a PyTorch reference (bf16, fp8, hook, round_scale, ue8m0, stats, "
       "wait stats, zero_copy, combine, LogFMT combine, the RDMA-buffer view)", internode=True)
def _():
    M, H, K, E = 64, 512, 4, 4 * WORLD
    El = E // WORLD
    size = deep_ep.Buffer.get_low_latency_rdma_size_hint(M, H, WORLD, E, K)
    buf = deep_ep.Buffer(None, num_rdma_bytes=size, low_latency_mode=True)
    stats = torch.zeros(El, dtype=torch.int32, device=DEV)  # cumulative_local_expert_recv_stats
    want_stats = torch.zeros(El, dtype=torch.int32, device=DEV)
    wait_base = 1 << 40  # the statistics start high, so a kernel storing instead of adding would show
    wait_d = torch.full((WORLD,), wait_base, dtype=torch.int64, device=DEV)  # dispatch_wait_recv_cost_stats
    wait_c = torch.full((WORLD,), wait_base, dtype=torch.int64, device=DEV)  # combine_wait_recv_cost_stats
    for use_fp8, hook_mode, rounded, ue8m0 in ((False, False, False, False), (True, False, False, False),
                                               (False, True, False, False), (True, True, True, False),
                                               (True, False, True, True), (True, True, True, True)):
        T = M - RANK  # ranks send different counts
        x = rand((T, H), torch.bfloat16, 70 + RANK)
        idx, w = routing(T, K, E, 80 + RANK, masked=True)
        all_x, all_idx = gather_all_padded(x, M), gather_all_padded(idx, M)
        recv_x, recv_count, handle, _, hook = buf.low_latency_dispatch(
            x, idx, M, E, use_fp8=use_fp8, return_recv_hook=hook_mode, round_scale=rounded, use_ue8m0=ue8m0,
            cumulative_local_expert_recv_stats=stats, dispatch_wait_recv_cost_stats=wait_d)
        if hook_mode:
            hook()
        torch.cuda.synchronize()
        want_stats += recv_count
        if use_fp8:
            q, scale = recv_x
            # DeepEP's scales: [El, rows, columns] with the rows contiguous (column-major).
            assert scale.stride(1) == 1 and scale.stride(2) == WORLD * M, scale.stride()
            if ue8m0:  # int32 [El, rows, H / 512], four exponent bytes each, little-endian
                assert scale.dtype == torch.int32 and scale.shape == (El, WORLD * M, H // 512), scale.shape
                packed = torch.empty(scale.shape, dtype=torch.int32, device=DEV).copy_(scale)  # row-major
                scale = torch.exp2(packed.view(torch.uint8).float() - 127)
            deq = (q.float().view(El, WORLD * M, H // 128, 128) * scale[..., None]).view(El, WORLD * M, H)
        info = handle.src_info  # [El, rows, 3]: source rank, token, top-k slot
        for e in range(El):
            n = int(recv_count[e].item())
            want = sorted((s, t) for s in range(WORLD) for t in range(M - s)
                          if (all_idx[s][t] == RANK * El + e).any())
            got = sorted((int(info[e, i, 0]), int(info[e, i, 1])) for i in range(n))
            assert got == want, f"expert {e}: rows from {got[:5]}..., expected {want[:5]}... ({n} vs {len(want)})"
            if rounded:  # every scale in use is a power of two
                sc = scale[e, :n]
                assert torch.equal(sc, torch.exp2(torch.log2(sc).round())), f"expert {e}: a scale is not 2^k"
            for i in range(n):
                s, t = int(info[e, i, 0]), int(info[e, i, 1])
                if use_fp8:
                    torch.testing.assert_close(deq[e, i], all_x[s][t].float(), rtol=0.07, atol=1e-3)
                else:
                    same(recv_x[e, i], all_x[s][t], f"LL row e={e} i={i}")
        # Combine: the expert output is the bf16 row times (global expert % 3 + 1).
        xin = recv_x if not use_fp8 else deq.to(torch.bfloat16)
        factor = torch.tensor([(RANK * El + e) % 3 + 1 for e in range(El)], device=DEV, dtype=torch.float32)
        y = (xin.float() * factor[:, None, None]).to(torch.bfloat16)
        zero_copy = not use_fp8 and not hook_mode
        if zero_copy:  # DeepEP's zero-copy combine: the data is in the Buffer's tensor; x gives only the shape
            buf.get_next_low_latency_combine_buffer(handle).copy_(y)
            y = torch.zeros_like(y)
        combined, _, chook = buf.low_latency_combine(y, idx, w, handle, return_recv_hook=hook_mode,
                                                     zero_copy=zero_copy, combine_wait_recv_cost_stats=wait_c)
        if hook_mode:
            chook()
        torch.cuda.synchronize()
        ref = torch.zeros((T, H), dtype=torch.float32, device=DEV)
        base = x.float() if not use_fp8 else None
        for k in range(K):
            e = idx[:, k]
            ok = e >= 0
            f = (e % 3 + 1).float()
            if use_fp8:
                continue
            yk = (base * f[:, None]).to(torch.bfloat16).float()
            ref += torch.where(ok[:, None], w[:, k:k + 1] * yk, torch.zeros_like(yk))
        if not use_fp8:
            torch.testing.assert_close(combined.float(), ref, rtol=1e-2, atol=1e-2)
    same(stats, want_stats, "cumulative_local_expert_recv_stats")
    # Every receive waited on every rank for at least a load's cycles.
    assert (wait_d > wait_base).all() and (wait_c > wait_base).all(), (wait_d.tolist(), wait_c.tolist())
    raises(ValueError, lambda: buf.low_latency_dispatch(x, idx, M, E, use_fp8=True, use_ue8m0=True),
           "use_ue8m0 without round_scale")
    raises(TypeError, lambda: buf.low_latency_dispatch(x, idx, M, E, dispatch_wait_recv_cost_stats=wait_d.int()),
           "int32 wait statistics")
    # Bad inputs are refused on the caller before anything is launched, each
    # naming what is wrong (every rank makes the same calls).
    for bad_x, bad_idx, exc, says, what in [
            (x.float(), idx, TypeError, "x has dtype", "float32 x"),
            (x[None], idx, ValueError, "x must be [T, H]", "3-D x"),
            (x, idx.int(), TypeError, "topk_idx has dtype", "int32 topk_idx"),
            (x, idx[:, :, None], ValueError, "topk_idx [T, K]", "3-D topk_idx"),
            (x[:-1], idx, ValueError, "x must be [T, H]", "x and topk_idx of different T"),
            (x.cpu(), idx, ValueError, "x is on cpu", "x on the CPU"),
            (None, idx, TypeError, "x must be a torch.Tensor", "x not a tensor")]:
        raises(exc, lambda: buf.low_latency_dispatch(bad_x, bad_idx, M, E), f"dispatch: {what}", says)
    recv_x, _, handle, _, _ = buf.low_latency_dispatch(x, idx, M, E, use_fp8=False)
    for bad_y, bad_w, out, exc, says, what in [
            (torch.zeros((El, 1, H), dtype=torch.bfloat16, device=DEV), w, None, ValueError, "x must be [",
             "x of another shape"),
            (recv_x.float(), w, None, TypeError, "x has dtype", "float32 x"),
            (recv_x, w[:, 1:].contiguous(), None, ValueError, "topk_weights must both be", "weights of another shape"),
            (recv_x, w.double(), None, TypeError, "topk_weights has dtype", "float64 weights"),
            (recv_x, w, torch.empty((1, H), dtype=torch.bfloat16, device=DEV), ValueError, "out must be [",
             "out of another shape"),
            (recv_x, w, [], TypeError, "out must be a torch.Tensor", "out not a tensor")]:
        raises(exc, lambda: buf.low_latency_combine(bad_y, idx, bad_w, handle, out=out), f"combine: {what}", says)
    # LogFMT combine (through the receive hook): expert outputs x / 8 (under
    # 1, so every group is compressed) against the exact sum, within 2.2 %
    # of the terms' magnitudes plus bf16 rounding, and not all exact.
    T = M - RANK
    x = rand((T, H), torch.bfloat16, 90 + RANK)
    idx, w = routing(T, K, E, 91 + RANK, masked=True)
    recv_x, _, handle, _, _ = buf.low_latency_dispatch(x, idx, M, E, use_fp8=False)
    y = (recv_x.float() / 8).to(torch.bfloat16)
    combined, _, chook = buf.low_latency_combine(y, idx, w, handle, use_logfmt=True, return_recv_hook=True)
    chook()
    torch.cuda.synchronize()
    terms = torch.where((idx >= 0)[:, :, None], w[:, :, None] * (x.float() / 8).to(torch.bfloat16).float()[:, None, :],
                        torch.zeros((T, K, H), device=DEV))
    ref, mag = terms.sum(1), terms.abs().sum(1)
    err = (combined.float() - ref).abs()
    bound = mag * 0.0223 + ref.abs() / 256 + 1e-6
    assert bool((err <= bound).all()), f"LogFMT combine off by {float((err - bound).max()):.3g} beyond its bound"
    assert bool((err > ref.abs() / 256 + 1e-6).any()) or T == 0, "LogFMT combine equals bf16 everywhere"
    # get_local_buffer_tensor(use_rdma_buffer=True): the low-latency block,
    # which holds recv_x; DeepEP's byte offset reaches its first row.
    region = buf.get_local_buffer_tensor(torch.uint8, use_rdma_buffer=True)
    at = recv_x.data_ptr() - region.data_ptr()
    assert 0 <= at and at + recv_x.numel() * 2 <= region.numel(), (at, recv_x.numel(), region.numel())
    same(buf.get_local_buffer_tensor(torch.bfloat16, (H,), offset=at, use_rdma_buffer=True), recv_x[0, 0],
         "the low-latency block at recv_x's offset")
    past_end = region.numel() + 1
    raises(ValueError, lambda: buf.get_local_buffer_tensor(torch.uint8, past_end, use_rdma_buffer=True),
           "a view past the low-latency block")
    # destroy() frees the low-latency memory now, although outputs (views of
    # it), the Buffer's cached output tensors and a receive hook are all still
    # held; the hook then says so instead of touching freed memory.
    free_before = nt._nvst.heap_free_bytes()
    buf.destroy()
    assert nt._nvst.heap_free_bytes() >= free_before + size // 2, (free_before, nt._nvst.heap_free_bytes(), size)
    raises(ValueError, chook, "a hook of a destroyed Buffer")
    del recv_x, region, combined, chook


dist.barrier()
failed = CHECKS.done()
nt.finalize()
dist.destroy_process_group()
sys.exit(failed)

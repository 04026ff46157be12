# torchrun --nproc_per_node=2 examples/moe_inference_ll.py    (PYTHONPATH=build/python, or pip install .)
"""Mixture-of-experts decoding with the low-latency mode: the pattern of
DeepEP's inference users, on nvshmem_tutorial.ep.Buffer.

A decode step has few tokens per rank (here up to M = 128), so latency
matters, not bandwidth. The low-latency mode sends each token (fp8, one
scale per 128 channels) straight into fixed per-expert receive buffers
and combines the experts' outputs with the router's weights on the way
back. Three habits of its users, each shown here:

1. Two micro-batches overlap: with return_recv_hook a call only sends;
   its hook() receives later. Micro-batch B's dispatch goes out before
   A's experts run, and A's combine before B's experts run.
2. A whole step is captured in a CUDA graph once and replayed for every
   later step (static input tensors, filled before each replay).
3. The experts read the received rows in place: recv_x is a view of the
   buffer, [local experts, ranks x M, H] with recv_count rows used each.

The script checks itself against a dense layer computed from its own
tokens (fp8 quantisation costs a few percent) and prints PASS or FAIL.
Ranks may share a GPU (torch.distributed runs on gloo).
"""
import os
import sys

import torch
import torch.distributed as dist

import nvshmem_tutorial as nt
import nvshmem_tutorial.ep as deep_ep

M, H, K = 128, 1024, 4  # tokens per rank at most, hidden size, experts per token


def expert_weight(e, dev):  # every rank can make every expert's weights: the check uses them all
    g = torch.Generator().manual_seed(2000 + e)
    return (torch.randn((H, H), generator=g) / H ** 0.5).to(dev)


def run_experts(recv_x, recv_count, weights):
    """fp8 rows and their scales (DeepEP's layout) -> bf16 expert outputs, in place of the buffer's rows."""
    q, scales = recv_x
    E_local, rows, _ = q.shape
    deq = (q.float().view(E_local, rows, H // 128, 128) * scales[..., None]).view(E_local, rows, H)
    y = torch.empty((E_local, rows, H), dtype=torch.bfloat16, device=q.device)
    for e, w in enumerate(weights):
        y[e] = (deq[e] @ w).to(torch.bfloat16)  # rows past recv_count[e] are never read by the combine
    return y


def main():
    local = int(os.environ.get("LOCAL_RANK", "0"))
    dev = torch.device("cuda", local % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    nt.init_from_torch()
    E = 8 * world
    per = E // world
    all_weights = [expert_weight(e, dev) for e in range(E)]
    mine = all_weights[rank * per:(rank + 1) * per]
    size = deep_ep.Buffer.get_low_latency_rdma_size_hint(M, H, world, E, K)
    buf = deep_ep.Buffer(None, num_rdma_bytes=size, low_latency_mode=True)

    def batch(seed, T):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn((T, H), generator=g).to(torch.bfloat16).to(dev)
        scores = torch.randn((T, E), generator=g)
        idx = scores.topk(K, dim=1).indices
        w = torch.softmax(scores.gather(1, idx), dim=1)
        return x, idx.to(dev), w.to(dev)

    def reference(x, idx, w):
        out = torch.zeros((x.shape[0], H), dtype=torch.float32, device=dev)
        for k in range(K):
            for e in range(E):
                rows = idx[:, k] == e
                if rows.any():
                    out[rows] += w[rows, k, None] * (x[rows].float() @ all_weights[e])
        return out

    ok = True

    def check(got, want, what):
        nonlocal ok
        err = (got.float() - want).abs().max().item()
        scale = want.abs().max().item()
        good = err <= 0.08 * scale  # e4m3 keeps 3 mantissa bits; the error shrinks in the weighted sums
        ok &= good
        print(f"[rank {rank}] {'PASS' if good else 'FAIL'} {what}: max error {err:.3g} (of {scale:.3g})", flush=True)

    # 1. Two micro-batches, A and B, overlapping through the receive hooks.
    a, b = batch(10 + rank, M - rank), batch(20 + rank, M // 2)
    ra, ca, ha, _, hook_a = buf.low_latency_dispatch(a[0], a[1], M, E, use_fp8=True, return_recv_hook=True)
    rb, cb, hb, _, hook_b = buf.low_latency_dispatch(b[0], b[1], M, E, use_fp8=True, return_recv_hook=True)
    hook_a()  # A's rows are here; B's are still on their way
    out_a, _, comb_a = buf.low_latency_combine(run_experts(ra, ca, mine), a[1], a[2], ha, return_recv_hook=True)
    hook_b()
    out_b, _, comb_b = buf.low_latency_combine(run_experts(rb, cb, mine), b[1], b[2], hb, return_recv_hook=True)
    comb_a()
    comb_b()
    torch.cuda.synchronize()
    check(out_a, reference(*a), "micro-batch A (overlapped with B)")
    check(out_b, reference(*b), "micro-batch B")

    # 2. One step in a CUDA graph, replayed on new tokens copied into its static inputs.
    x_s = torch.zeros((M, H), dtype=torch.bfloat16, device=dev)
    idx_s = torch.zeros((M, K), dtype=torch.int64, device=dev)
    w_s = torch.zeros((M, K), dtype=torch.float32, device=dev)

    def step():
        recv_x, count, handle, _, _ = buf.low_latency_dispatch(x_s, idx_s, M, E, use_fp8=True)
        out, _, _ = buf.low_latency_combine(run_experts(recv_x, count, mine), idx_s, w_s, handle)
        return out

    def load(x, idx, w):
        x_s.copy_(x)
        idx_s.copy_(idx)
        w_s.copy_(w)

    load(*batch(30 + rank, M))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up outside the capture, as torch asks
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out_s = step()
    for i in range(3):
        c = batch(40 + 10 * i + rank, M)
        load(*c)
        graph.replay()
        torch.cuda.synchronize()
        check(out_s, reference(*c), f"CUDA graph replay {i}")

    buf.destroy()
    dist.barrier()
    nt.finalize()
    dist.destroy_process_group()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

# torchrun --nproc_per_node=2 examples/moe_training.py        (PYTHONPATH=build/python, or pip install .)
"""A mixture-of-experts layer trained with expert parallelism: the pattern
DeepEP's users write, on nvshmem_tutorial.ep.Buffer.

Each rank holds its tokens and E / ranks of the E experts. Forward: the
layout says where each token goes, dispatch sends it to the ranks of its
top-k experts, each rank runs its experts on what it received and weights
them, and combine sums the results back at each token's rank. Backward is
the same two steps the other way round: the gradient of a dispatch is a
combine of the gradients, and the gradient of a combine is a dispatch of
them with the cached handle (no layout again). The two autograd Functions
below are that whole idea.

The script checks itself: after one step every rank compares its output
and the gradients of its input and of its experts with a dense layer
computed on its own from every rank's tokens, and prints PASS or FAIL.
Ranks may share a GPU (torch.distributed runs on gloo; the library needs
no NCCL).
"""
import os
import sys

import torch
import torch.distributed as dist

import nvshmem_tutorial as nt
import nvshmem_tutorial.ep as deep_ep

T, H, K = 256, 512, 4  # tokens per rank, hidden size, experts per token


class Dispatch(torch.autograd.Function):
    """x [T, H] -> the rows this rank's experts receive; backward: combine."""

    @staticmethod
    def forward(ctx, x, topk_idx, topk_weights, buf, num_experts):
        per_rank, _, per_expert, in_rank, _ = buf.get_dispatch_layout(topk_idx, num_experts)
        recv_x, recv_idx, recv_w, _, handle, _ = buf.dispatch(
            x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert,
            topk_idx=topk_idx, topk_weights=topk_weights)
        ctx.buf, ctx.handle = buf, handle
        ctx.mark_non_differentiable(recv_idx, recv_w)  # the routing is an input here, not trained
        return recv_x, recv_idx, recv_w, handle

    @staticmethod
    def backward(ctx, grad_recv_x, *_):
        grad_x, _, _ = ctx.buf.combine(grad_recv_x.contiguous(), ctx.handle)  # a token's copies' gradients, summed
        return grad_x, None, None, None, None


class Combine(torch.autograd.Function):
    """The experts' weighted rows -> [T, H] at each token's rank; backward: a cached dispatch."""

    @staticmethod
    def forward(ctx, y, buf, handle):
        combined, _, _ = buf.combine(y, handle)
        ctx.buf, ctx.handle = buf, handle
        return combined

    @staticmethod
    def backward(ctx, grad_combined):
        grad_y, *_ = ctx.buf.dispatch(grad_combined.contiguous(), handle=ctx.handle)  # every copy gets the gradient
        return grad_y, None, None


def experts_forward(recv_x, recv_idx, recv_w, weights):
    """Each received row through this rank's experts that chose it, weighted and summed (fp32, then bf16)."""
    x = recv_x.float()
    out = torch.zeros_like(x)
    for k in range(recv_idx.shape[1]):
        e = recv_idx[:, k]
        for local, w in enumerate(weights):
            rows = e == local
            if rows.any():
                out[rows] += recv_w[rows, k, None] * (x[rows] @ w)
    return out.to(torch.bfloat16)


def dense_reference(x, topk_idx, topk_weights, all_weights):
    """The same layer with every expert here (no communication), in fp32."""
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    for k in range(topk_idx.shape[1]):
        for e, w in enumerate(all_weights):
            rows = topk_idx[:, k] == e
            if rows.any():
                out[rows] += topk_weights[rows, k, None] * (x[rows].float() @ w)
    return out


def main():
    local = int(os.environ.get("LOCAL_RANK", "0"))
    dev = torch.device("cuda", local % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    dist.init_process_group("gloo")  # only the unique ID and the check's gathers use it
    rank, world = dist.get_rank(), dist.get_world_size()
    nt.init_from_torch()
    E = 4 * world
    per = E // world

    # Every rank can make every expert's weights (the seed is the expert's
    # number): it owns E / world of them, and the check uses them all.
    def expert_weight(e):
        g = torch.Generator().manual_seed(1000 + e)
        return (torch.randn((H, H), generator=g) / H ** 0.5).to(dev)
    all_weights = [expert_weight(e) for e in range(E)]
    mine = [all_weights[rank * per + i].clone().requires_grad_() for i in range(per)]

    g = torch.Generator().manual_seed(rank)
    x = torch.randn((T, H), generator=g).to(torch.bfloat16).to(dev).requires_grad_()
    scores = torch.randn((T, E), generator=g)
    topk_idx = scores.topk(K, dim=1).indices.to(dev)
    topk_weights = torch.softmax(scores.gather(1, topk_idx.cpu()), dim=1).to(dev)
    grad_out = torch.randn((T, H), generator=g).to(dev)  # d loss / d output

    buf = deep_ep.Buffer(None, num_nvl_bytes=256 << 20)
    recv_x, recv_idx, recv_w, handle = Dispatch.apply(x, topk_idx, topk_weights, buf, E)
    y = experts_forward(recv_x, recv_idx, recv_w, mine)
    out = Combine.apply(y, buf, handle)
    (out.float() * grad_out).sum().backward()

    # The check: the dense layer over every rank's tokens, here.
    def gather(t):
        parts = [torch.empty_like(t, device="cpu") for _ in range(world)]
        dist.all_gather(parts, t.detach().cpu())
        return [p.to(dev) for p in parts]
    xs, idxs, ws, gs = gather(x), gather(topk_idx), gather(topk_weights), gather(grad_out)
    ref_weights = [w.clone().requires_grad_() for w in all_weights]
    ref_x = [v.float().requires_grad_() for v in xs]
    ref_out = [dense_reference(ref_x[r], idxs[r], ws[r], ref_weights) for r in range(world)]
    sum((o * gr).sum() for o, gr in zip(ref_out, gs)).backward()

    def close(got, want, what):
        err = (got.float() - want.float()).abs().max().item()
        scale = want.float().abs().max().item()
        ok = err <= 0.02 * scale + 1e-3
        print(f"[rank {rank}] {'PASS' if ok else 'FAIL'} {what}: max error {err:.3g} (of {scale:.3g})", flush=True)
        return ok
    ok = close(out, ref_out[rank], "output")
    ok &= close(x.grad, ref_x[rank].grad, "input gradient")
    for i, w in enumerate(mine):
        ok &= close(w.grad, ref_weights[rank * per + i].grad, f"expert {rank * per + i} weight gradient")

    buf.destroy()
    dist.barrier()
    nt.finalize()
    dist.destroy_process_group()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

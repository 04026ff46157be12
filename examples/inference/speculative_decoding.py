"""Speculative decoding across two ranks: a small draft model on rank 0
proposes K tokens at a time, the target model on rank 1 checks them in one
pass and answers how many it accepts plus its own next token. Proposals and
verdicts travel through RingBuffers in each receiver's symmetric memory
(pushed and popped by one-thread kernels: a remote fetch-add, a put, a
signal). Both models are tiny and deterministic (seeded weights, greedy
decoding), so the result must equal the target decoding alone, which each
rank also computes and compares.

    torchrun --nproc_per_node=2 examples/inference/speculative_decoding.py   (PYTHONPATH=build/python)
"""
import torch

from _job import Timer, finish, join
from nvshmem_tutorial.structures import RingBuffer

VOCAB, HIDDEN, WINDOW, K, LENGTH, ALTERED = 64, 48, 4, 4, 96, 4
PROMPT = [3, 14, 15, 9, 26]


class TinyLM:
    """Next token = argmax(out(tanh(w(mean of the last WINDOW embeddings)))).
    The draft is the target with `altered` tokens' embeddings replaced: it
    agrees until one of them is in its window."""

    def __init__(self, dev, altered=0):
        g = torch.Generator().manual_seed(2024)
        self.emb = torch.randn(VOCAB, HIDDEN, generator=g)
        self.w = torch.randn(HIDDEN, HIDDEN, generator=g) / HIDDEN**0.5
        self.out = torch.randn(HIDDEN, VOCAB, generator=g) / HIDDEN**0.5
        if altered:
            n = torch.Generator().manual_seed(7)
            rows = torch.randperm(VOCAB, generator=n)[:altered]
            self.emb[rows] = torch.randn(altered, HIDDEN, generator=n)
        self.emb, self.w, self.out = self.emb.to(dev), self.w.to(dev), self.out.to(dev)

    def next_tokens(self, ctx, positions):
        """The greedy prediction after each prefix ctx[:p] for p in positions (one batched pass)."""
        windows = torch.stack([ctx[p - WINDOW:p] for p in positions])
        h = torch.tanh(self.emb[windows].mean(dim=1) @ self.w)
        return (h @ self.out).argmax(dim=1)

    def greedy(self, prompt, length):
        ctx = prompt.clone()
        while ctx.numel() < length:
            ctx = torch.cat([ctx, self.next_tokens(ctx, [ctx.numel()])])
        return ctx


def main():
    rank, world, dev = join()
    assert world == 2, "run with 2 ranks: the draft on rank 0, the target on rank 1"
    proposals = RingBuffer(8, K + 2, torch.int64)  # [step, length so far, t1..tK], in rank 1's memory
    verdicts = RingBuffer(8, 3, torch.int64)       # [step, accepted, target's token], in rank 0's memory
    target = TinyLM(dev)
    ctx = torch.tensor(PROMPT, device=dev)
    accepted_total, steps, timer = 0, 0, Timer()
    if rank == 0:
        draft = TinyLM(dev, altered=ALTERED)
        while ctx.numel() < LENGTH:
            with timer:
                guess = ctx
                for _ in range(K):
                    guess = torch.cat([guess, draft.next_tokens(guess, [guess.numel()])])
                head = torch.tensor([steps, ctx.numel()], device=dev)
                proposals.push(torch.cat([head, guess[ctx.numel():]]), 1)
                step, accepted, token = verdicts.pop().tolist()
            assert step == steps
            ctx = torch.cat([guess[: ctx.numel() + accepted], torch.tensor([token], device=dev)])
            accepted_total += accepted
            steps += 1
    else:
        while ctx.numel() < LENGTH:
            with timer:
                item = proposals.pop()
                step, length = item[:2].tolist()
                guess = torch.cat([ctx, item[2:]])
                # The target's own choice after each prefix: the K proposals and one more.
                want = target.next_tokens(guess, list(range(length, length + K + 1)))
                agree = (want[:K] == item[2:]).int()
                accepted = int(agree.cumprod(0).sum())
                token = int(want[accepted])
                verdicts.push(torch.tensor([step, accepted, token], device=dev), 0)
            ctx = torch.cat([guess[: length + accepted], torch.tensor([token], device=dev)])
            accepted_total += accepted
            steps += 1
    ctx = ctx[:LENGTH]
    alone = target.greedy(torch.tensor(PROMPT, device=dev), LENGTH)
    ok = torch.equal(ctx, alone)
    role = "draft " if rank == 0 else "target"
    print(f"rank {rank} ({role}): {LENGTH - len(PROMPT)} tokens in {steps} steps, accepted {accepted_total} of "
          f"{steps * K} proposals ({100.0 * accepted_total / max(1, steps * K):.0f}%); latency per step "
          f"{timer.summary()}; equal to the target decoding alone: {'PASS' if ok else 'FAIL'}")
    finish(ok, verdicts, proposals)


if __name__ == "__main__":
    main()

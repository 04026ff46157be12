"""Asynchronous gradient reduction with bounded staleness, and lock-free
accumulation into one symmetric buffer."""
from __future__ import annotations

import time
from typing import Iterable, List, Optional

import torch

from ..tensors import peer_tensor, via_proxy
from .comm import Communicator, SymmetricTensor, agree, fingerprint


class AsyncGradientServer:
    """Gradient averaging that does not stop the step: submit_gradients()
    starts the all-reduce of this step's gradients and returns; wait()
    writes into param.grad the average submitted `staleness` steps earlier
    (staleness 0: this step's, the synchronous result).

    Use case: training where the all-reduce is as long as a step's compute
    (large data-parallel groups, slow links): with staleness k the update of
    step t uses the gradients of step t - k, and the reduction of step t
    runs behind the compute of steps t + 1 .. t + k. Staleness 1 is the
    classic one-step-delayed SGD; k = 0 is an all-reduce with nothing
    overlapped.

    Each submission owns one of staleness + 1 flat symmetric buffers; on GPUs
    its all-reduce runs on a side stream. Building it is collective and
    checks that the ranks' parameters agree.
    """

    def __init__(self, params: Iterable[torch.nn.Parameter], comm: Optional[Communicator] = None,
                 staleness: int = 0, check_parameters: bool = True):
        self.params: List[torch.nn.Parameter] = [p for p in params if p.requires_grad]
        self.comm = comm or Communicator()
        if staleness < 0:
            raise ValueError(f"nvshmem_tutorial.training.AsyncGradientServer: staleness {staleness} < 0")
        if not self.params or {p.dtype for p in self.params} != {torch.float32}:
            raise ValueError("nvshmem_tutorial.training.AsyncGradientServer: needs float32 parameters")
        agree("AsyncGradientServer", "parameter shapes or staleness",
              [repr(tuple(p.shape)).encode() for p in self.params] + [repr(staleness).encode()])
        if check_parameters:
            agree("AsyncGradientServer", "parameter values", [fingerprint(p) for p in self.params],
                  [f"parameter #{i} {tuple(p.shape)}" for i, p in enumerate(self.params)])
        self.staleness = staleness
        self.numel = sum(p.numel() for p in self.params)
        self._ring = SymmetricTensor((staleness + 1) * self.numel, torch.float32, "async gradient buffers")
        self._stream = torch.cuda.Stream(self.comm.device) if self.comm.gpu else None
        self._events: List[Optional[torch.cuda.Event]] = [None] * (staleness + 1)
        self.submitted = 0
        self.applied = 0
        self.comm_seconds = 0.0

    def _slot(self, i: int) -> torch.Tensor:
        k = i % (self.staleness + 1)
        return self._ring.tensor[k * self.numel:(k + 1) * self.numel]

    def submit_gradients(self) -> None:
        """Starts averaging the current param.grad (None counts as 0) and
        returns; on a host heap the reduction runs here."""
        if self.submitted - self.applied > self.staleness:
            raise RuntimeError("nvshmem_tutorial.training.AsyncGradientServer: wait() for the oldest submission "
                               "first (more than staleness + 1 in flight)")
        buf = self._slot(self.submitted)
        off = 0
        for p in self.params:
            n = p.numel()
            if p.grad is None:
                buf[off:off + n].zero_()
            else:
                buf[off:off + n].copy_(p.grad.reshape(-1))
            off += n
        t0 = time.perf_counter()
        if self._stream is not None:
            self._stream.wait_stream(torch.cuda.current_stream(self.comm.device))
            with torch.cuda.stream(self._stream):
                self.comm.all_reduce(buf)
                ev = torch.cuda.Event()
                ev.record()
            self._events[self.submitted % (self.staleness + 1)] = ev
        else:
            self.comm.all_reduce(buf)
        self.comm_seconds += time.perf_counter() - t0
        self.submitted += 1

    def wait(self) -> bool:
        """Writes the average of the submission `staleness` steps back into
        param.grad and returns True; returns False (param.grad untouched)
        while fewer than staleness + 1 submissions were made."""
        if self.submitted - self.applied <= self.staleness:
            return False
        i = self.applied
        if self._stream is not None:
            torch.cuda.current_stream(self.comm.device).wait_event(self._events[i % (self.staleness + 1)])
        buf = self._slot(i)
        off = 0
        scale = 1.0 / self.comm.world
        for p in self.params:
            n = p.numel()
            avg = buf[off:off + n].view_as(p) * scale
            if p.grad is None:
                p.grad = avg
            else:
                p.grad.copy_(avg)
            off += n
        self.applied += 1
        return True

    def close(self) -> None:
        """Collective: frees the buffers (after the last wait)."""
        if self._stream is not None:
            self._stream.synchronize()
        self._ring.free()


class LockFreeAccumulator:
    """Every rank adds its tensor into one symmetric buffer, with no lock and
    no collective call: result() returns the sum of every rank's
    accumulate() of the same generation.

    Use case: gradient or statistics aggregation where ranks finish at
    different times (asynchronous workers, uneven microbatches): a rank's
    contribution lands as soon as it is ready, and only the reader waits.

    Atomic mode (GPU, PEs on one node): each rank adds into every rank's
    copy of the buffer with device atomics (index_add_ on peer views over
    NVLink), then adds 1 to that rank's generation counter with a signal
    after the data. Fast and order-free, so float sums vary in the last
    bits from run to run. Deterministic mode: each rank puts its tensor into
    its own slot of every rank's buffer (put_signal: works across nodes and
    on host heaps), and the reader adds the slots in rank order; results are
    bitwise reproducible. Generations alternate between two buffers, so a
    fast rank's next contribution cannot land in the one being read.
    """

    def __init__(self, numel: int, comm: Optional[Communicator] = None, deterministic: bool = False):
        self.comm = comm or Communicator()
        if numel < 1:
            raise ValueError(f"nvshmem_tutorial.training.LockFreeAccumulator: numel {numel} < 1")
        world = self.comm.world
        if not deterministic:
            if not self.comm.gpu:
                raise ValueError("nvshmem_tutorial.training.LockFreeAccumulator: atomic mode needs GPUs; "
                                 "use deterministic=True on host heaps")
            far = [p for p in range(world) if via_proxy(p)]
            if far:
                raise ValueError(f"nvshmem_tutorial.training.LockFreeAccumulator: atomic mode needs every PE "
                                 f"reachable by load/store; PEs {far} are on other nodes (deterministic=True works)")
        agree("LockFreeAccumulator", "sizes or modes", [repr((numel, deterministic)).encode()])
        self.numel = numel
        self.deterministic = deterministic
        slots = world if deterministic else 1
        self._buf = SymmetricTensor(2 * slots * numel, torch.float32, "lock-free accumulator")
        self._gen = SymmetricTensor(2, torch.int64, "lock-free generation counters")
        self._slots = slots
        self.generation = 0  # the next generation this rank contributes to and reads
        self._contributed = False
        if not deterministic:
            self._index = torch.arange(numel, device=self.comm.device)
            self._peers = [peer_tensor(self._buf.tensor, p) for p in range(world)]
        self.comm.barrier()

    def _part(self, tensor: torch.Tensor, parity: int, slot: int) -> torch.Tensor:
        base = (parity * self._slots + slot) * self.numel
        return tensor[base:base + self.numel]

    def accumulate(self, t: torch.Tensor) -> None:
        """Adds t (numel float32 elements) to this generation's sum, on every
        rank's buffer. Returns without waiting for anyone."""
        if t.numel() != self.numel or t.dtype != torch.float32 or t.device != self.comm.device:
            raise ValueError(f"nvshmem_tutorial.training.LockFreeAccumulator.accumulate: needs {self.numel} "
                             f"float32 elements on {self.comm.device}, got {t.numel()} {t.dtype} on {t.device}")
        if self._contributed:
            raise RuntimeError("nvshmem_tutorial.training.LockFreeAccumulator.accumulate: this rank already "
                               "contributed to this generation; call result() first")
        parity = self.generation % 2
        src = t.reshape(-1)
        me = self.comm.rank
        if self.deterministic:
            # Staged in this rank's own slot: puts read symmetric memory (the proxy needs it across nodes).
            mine = self._part(self._buf.tensor, parity, me)
            mine.copy_(src)
            for pe in range(self.comm.world):
                if pe == me:
                    self._gen.signal_add(parity, pe)
                else:
                    self._buf.put_signal((parity * self._slots + me) * self.numel, mine, self._gen, parity, pe)
        else:
            for pe in range(self.comm.world):
                self._part(self._peers[pe], parity, 0).index_add_(0, self._index, src)
                self._gen.signal_add(parity, pe)
        self._contributed = True

    def result(self) -> torch.Tensor:
        """Waits until every rank has contributed to this generation and
        returns the sum (a new tensor); the next accumulate() starts the
        next generation."""
        parity = self.generation % 2
        self._gen.wait_at_least(parity, (self.generation // 2 + 1) * self.comm.world)
        if self.deterministic:
            out = self._part(self._buf.tensor, parity, 0).clone()
            for r in range(1, self.comm.world):
                out += self._part(self._buf.tensor, parity, r)
        else:
            mine = self._part(self._buf.tensor, parity, 0)
            out = mine.clone()
            mine.zero_()  # before this rank's next contribution, hence before anyone's next-but-one
        self.generation += 1
        self._contributed = False
        return out

    def close(self) -> None:
        """Collective."""
        self.comm.barrier()
        self._buf.free()
        self._gen.free()

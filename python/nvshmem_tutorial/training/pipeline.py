"""Pipeline parallelism whose activations and gradients travel through
symmetric buffers: put_signal into a slot, one credit per slot."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

from .comm import Communicator, SymmetricTensor, agree
from .schedules import Op, partition_layers, schedule, simulate


class _Channel:
    """The messages of one direction (activations forward, or gradients
    backward) as `slots` symmetric slots at every rank: message number i
    lands in slot i % slots of the receiver, whose data signal for that slot
    counts arrivals; the receiver returns a credit to the sender's credit
    word for that slot once it has copied the message out. Before its
    (u + 1)-th use of a slot the sender waits for u credits, so no message
    overwrites one not yet read. On GPUs every wait is on the stream."""

    def __init__(self, slots: int, numel: int, dtype: torch.dtype, what: str):
        self.slots = slots
        self.numel = numel
        self.recv_buf = SymmetricTensor(slots * numel, dtype, f"pipeline {what} slots")
        self.send_buf = SymmetricTensor(slots * numel, dtype, f"pipeline {what} send staging")
        self.data = SymmetricTensor(slots, torch.int64, f"pipeline {what} data signals")
        self.credit = SymmetricTensor(slots, torch.int64, f"pipeline {what} credits")

    def send(self, t: torch.Tensor, index: int, pe: int) -> None:
        if t.numel() != self.numel:
            raise ValueError(f"PipelineEngine: a stage produced {tuple(t.shape)}; the engine was built for "
                             f"activations of {self.numel} elements (activation_shape)")
        slot, use = index % self.slots, index // self.slots
        self.credit.wait_at_least(slot, use)
        stage = self.send_buf.tensor[slot * self.numel:(slot + 1) * self.numel]
        stage.copy_(t.reshape(-1))  # the put reads symmetric memory (the proxy needs it across nodes)
        self.recv_buf.put_signal(slot * self.numel, stage, self.data, slot, pe)

    def recv(self, index: int, pe: int, out: torch.Tensor) -> None:
        slot, use = index % self.slots, index // self.slots
        self.data.wait_at_least(slot, use + 1)
        out.reshape(-1).copy_(self.recv_buf.tensor[slot * self.numel:(slot + 1) * self.numel])
        self.credit.signal_add(slot, pe)

    def free(self) -> None:
        for b in (self.recv_buf, self.send_buf, self.data, self.credit):
            b.free()


@dataclass
class StepStats:
    """What one PipelineEngine.step measured on this rank."""
    step_seconds: float
    compute_seconds: float  # forward and backward work, not the waits
    bubble_fraction: float  # 1 - compute / step: waiting for other stages
    ideal_bubble_fraction: float  # the schedule's own, with backward = 2 x forward


class PipelineEngine:
    """Runs a pipeline-parallel training step, 1F1B or interleaved.

    Use case: models too large for one GPU's memory that split by depth:
    each rank holds a stage (1F1B) or several non-adjacent chunks
    (interleaved, which shrinks the pipeline bubble by about 1/chunks at
    the price of chunks x more messages). Activation handoff between stages
    is a put_signal into a symmetric slot of the next stage, a one-sided
    write with no matching receive call and no NCCL communicator.

    chunks: this rank's model chunks; chunk c is virtual stage
    c * world + rank (len(chunks) = 1 for 1F1B). Every boundary activation
    has activation_shape (the microbatch's) and dtype; inputs go to virtual
    stage 0 (rank 0), targets and loss_fn to the last (rank world - 1).
    Message slots per channel come from simulating the schedule (the most
    messages it ever holds in flight, plus one). Building it is collective.
    """

    def __init__(self, chunks: Sequence[torch.nn.Module], microbatches: int, activation_shape: Tuple[int, ...],
                 loss_fn: Optional[Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = None,
                 schedule_kind: str = "1f1b", dtype: torch.dtype = torch.float32,
                 comm: Optional[Communicator] = None):
        self.comm = comm or Communicator()
        self.chunks = list(chunks)
        self.world, self.rank = self.comm.world, self.comm.rank
        v = len(self.chunks)
        agree("PipelineEngine", "schedules, chunk counts, microbatches or activation shapes",
              [repr((schedule_kind, v, microbatches, tuple(activation_shape), str(dtype))).encode()])
        self.ops_all = schedule(schedule_kind, self.world, microbatches, v)
        self.ops: List[Op] = self.ops_all[self.rank]
        sim = simulate(self.ops_all)
        self.ideal_bubble = sim.bubble_fraction
        self.microbatches = microbatches
        self.activation_shape = tuple(activation_shape)
        self.dtype = dtype
        self.loss_fn = loss_fn
        self.last_stage = self.world * v - 1
        # Message numbers: the order each sender sends on its channel (the
        # receiver consumes them in the same order; checked here). The
        # signals count every message since the start, so step k's numbers
        # follow on from step k - 1's (_message).
        self._act_index, self._act_per_step = self._numbering("F")
        self._grad_index, self._grad_per_step = self._numbering("B")
        self._steps = 0
        slots = max(sim.max_in_flight.values(), default=1) + 1
        numel = 1
        for s in self.activation_shape:
            numel *= s
        self._act = _Channel(slots, numel, dtype, "activation")
        self._grad = _Channel(slots, numel, dtype, "gradient")
        self.comm.barrier()

    @staticmethod
    def split(layers: Sequence[torch.nn.Module], chunks_per_rank: int = 1,
              comm: Optional[Communicator] = None) -> List[torch.nn.Sequential]:
        """This rank's chunks of a model given as its list of layers: the
        layers split evenly over world x chunks_per_rank virtual stages
        (ValueError on every rank when they do not divide)."""
        comm = comm or Communicator()
        agree("PipelineEngine.split", "layer or chunk counts", [repr((len(layers), chunks_per_rank)).encode()])
        ranges = partition_layers(len(layers), comm.world * chunks_per_rank)
        return [torch.nn.Sequential(*[layers[i] for i in ranges[c * comm.world + comm.rank]])
                for c in range(chunks_per_rank)]

    def _numbering(self, kind: str) -> Tuple[Dict[Tuple[int, int, int], int], List[int]]:
        """(sender rank, microbatch, sender chunk) -> message number within a
        step on the sender's channel of `kind` messages; and each sender's
        message count per step."""
        P = self.world
        index: Dict[Tuple[int, int, int], int] = {}
        per_step = [0] * P
        for r, ops in enumerate(self.ops_all):
            n = 0
            for op in ops:
                vs = op.chunk * P + r
                sends = vs < self.last_stage if kind == "F" else vs > 0
                if op.kind == kind and sends:
                    index[(r, op.microbatch, op.chunk)] = n
                    n += 1
            per_step[r] = n
        for r, ops in enumerate(self.ops_all):  # the receiver's order must be the sender's
            got = []
            for op in ops:
                vs = op.chunk * P + r
                if op.kind == kind and (vs > 0 if kind == "F" else vs < self.last_stage):
                    src_vs = vs - 1 if kind == "F" else vs + 1
                    got.append(index[(src_vs % P, op.microbatch, src_vs // P)])
            if got != sorted(got):
                raise ValueError(f"pipeline: rank {r} would read its {kind} messages out of order")
        return index, per_step

    def _message(self, kind: str, sender: int, microbatch: int, chunk: int) -> int:
        """The message's number since the engine was built."""
        index, per_step = ((self._act_index, self._act_per_step) if kind == "F"
                           else (self._grad_index, self._grad_per_step))
        return self._steps * per_step[sender] + index[(sender, microbatch, chunk)]

    def step(self, inputs: Sequence[torch.Tensor], targets: Sequence[torch.Tensor]) -> Tuple[List[float], StepStats]:
        """One training step over the microbatches: forwards and backwards in
        the schedule's order; gradients accumulate into the chunks'
        parameters (the loss of each microbatch is divided by the count).
        inputs are read on rank 0, targets on the last rank (others may pass
        []). Returns the losses (last rank; [] elsewhere) and what it measured."""
        P, M = self.world, self.microbatches
        if self.rank == 0 and len(inputs) != M:
            raise ValueError(f"PipelineEngine.step: {len(inputs)} inputs for {M} microbatches")
        if self.rank == P - 1 and len(targets) != M:
            raise ValueError(f"PipelineEngine.step: {len(targets)} targets for {M} microbatches")
        gpu = self.comm.gpu
        saved: Dict[Tuple[int, int], Tuple[torch.Tensor, torch.Tensor]] = {}
        loss_tensors: List[torch.Tensor] = []
        spans = []  # (start, end) events or times of the compute parts

        def clock() -> "_Mark":
            return _Mark(gpu)

        self.comm.barrier()
        begin = clock()
        for op in self.ops:
            vs = op.chunk * P + self.rank
            if op.kind == "F":
                if vs == 0:
                    x = inputs[op.microbatch].to(self.comm.device, self.dtype)
                else:
                    x = torch.empty(self.activation_shape, dtype=self.dtype, device=self.comm.device)
                    src_vs = vs - 1
                    self._act.recv(self._message("F", src_vs % P, op.microbatch, src_vs // P), src_vs % P, x)
                    x.requires_grad_(True)
                t0 = clock()
                out = self.chunks[op.chunk](x)
                if vs == self.last_stage:
                    assert self.loss_fn is not None  # checked at construction on the last stage
                    out = self.loss_fn(out, targets[op.microbatch].to(self.comm.device)) / M
                    loss_tensors.append(out.detach())
                spans.append((t0, clock()))
                if vs != self.last_stage:
                    self._act.send(out.detach(), self._message("F", self.rank, op.microbatch, op.chunk),
                                   (self.rank + 1) % P)
                saved[(op.microbatch, op.chunk)] = (x, out)
            else:
                x, out = saved.pop((op.microbatch, op.chunk))
                grad = None
                if vs != self.last_stage:
                    grad = torch.empty(self.activation_shape, dtype=self.dtype, device=self.comm.device)
                    src_vs = vs + 1
                    self._grad.recv(self._message("B", src_vs % P, op.microbatch, src_vs // P), src_vs % P, grad)
                t0 = clock()
                out.backward(grad)
                spans.append((t0, clock()))
                if vs > 0:
                    self._grad.send(x.grad, self._message("B", self.rank, op.microbatch, op.chunk),
                                    (self.rank - 1) % P)
        end = clock()
        self._steps += 1
        if gpu:
            torch.cuda.current_stream(self.comm.device).synchronize()
        compute = sum(a.until(b) for a, b in spans)
        total = begin.until(end)
        losses = [float(t) for t in loss_tensors]
        return losses, StepStats(total, compute, max(0.0, 1.0 - compute / total) if total else 0.0,
                                 self.ideal_bubble)

    def close(self) -> None:
        """Collective."""
        self.comm.barrier()
        self._act.free()
        self._grad.free()


class _Mark:
    """A point in time: a CUDA event on GPUs (the work is asynchronous),
    the host clock otherwise."""

    def __init__(self, gpu: bool):
        self.gpu = gpu
        if gpu:
            self.event = torch.cuda.Event(enable_timing=True)
            self.event.record()
        else:
            self.t = time.perf_counter()

    def until(self, later: "_Mark") -> float:
        if self.gpu:
            return self.event.elapsed_time(later.event) / 1e3
        return later.t - self.t

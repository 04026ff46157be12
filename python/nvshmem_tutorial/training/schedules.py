"""Pipeline schedules as plain data, and a simulator that checks them.

Pure Python (no torch, no runtime), so CI tests it. A schedule is, for every
rank, the ordered list of operations that rank runs: forward or backward of
one microbatch through one model chunk. The simulator runs those lists
against the dependencies between stages (a forward needs the previous
virtual stage's forward of the same microbatch; a backward needs the next
virtual stage's backward and its own forward) and reports deadlock, the
idle (bubble) fraction, and how many messages each channel holds at once,
which is how many symmetric slots the handoff needs so a send never waits
on a full channel longer than the schedule itself does.

Virtual stages: with `chunks` model chunks per rank and `ranks` ranks,
virtual stage v = chunk * ranks + rank (Megatron's interleaving), so
consecutive virtual stages sit on consecutive ranks and the last rank hands
its chunk c output to rank 0's chunk c + 1.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple


@dataclass(frozen=True)
class Op:
    """One unit of pipeline work on a rank."""
    kind: str  # "F" or "B"
    microbatch: int
    chunk: int = 0

    def __str__(self) -> str:
        return f"{self.kind}{self.microbatch}" + (f".{self.chunk}" if self.chunk else "")


def partition_layers(num_layers: int, num_stages: int) -> List[range]:
    """Layer ranges of each stage; raises ValueError unless the stages divide
    the layers evenly (uneven stages make the slowest stage the pipeline's
    clock, which is rarely what one meant)."""
    if num_stages < 1:
        raise ValueError(f"pipeline: the stage count must be >= 1, got {num_stages}")
    if num_layers < num_stages or num_layers % num_stages != 0:
        raise ValueError(f"pipeline: {num_stages} stages do not divide {num_layers} layers evenly")
    per = num_layers // num_stages
    return [range(s * per, (s + 1) * per) for s in range(num_stages)]


def one_f_one_b(ranks: int, rank: int, microbatches: int) -> List[Op]:
    """The 1F1B schedule of one rank: warm up with (ranks - rank - 1)
    forwards, then alternate one forward and one backward, then drain the
    backwards. At most ranks - rank microbatches' activations are alive."""
    _check(ranks, rank, microbatches, 1)
    warmup = min(ranks - rank - 1, microbatches)
    ops = [Op("F", m) for m in range(warmup)]
    for i in range(microbatches - warmup):
        ops += [Op("F", warmup + i), Op("B", i)]
    ops += [Op("B", m) for m in range(microbatches - warmup, microbatches)]
    return ops


def interleaved(ranks: int, rank: int, microbatches: int, chunks: int) -> List[Op]:
    """Interleaved 1F1B (Megatron's virtual pipeline): each rank holds
    `chunks` model chunks and works on groups of `ranks` microbatches, one
    chunk after the other; the warm-up is longer and the bubble shrinks by
    about 1 / chunks. Needs microbatches to be a multiple of ranks."""
    _check(ranks, rank, microbatches, chunks)
    if microbatches % ranks != 0:
        raise ValueError(f"pipeline: the interleaved schedule needs the microbatch count ({microbatches}) to be a "
                         f"multiple of the rank count ({ranks})")
    total = microbatches * chunks
    group = ranks * chunks

    def at(k: int, backward: bool) -> Tuple[int, int]:
        chunk = (k % group) // ranks
        if backward:
            chunk = chunks - 1 - chunk
        return (k // group) * ranks + k % ranks, chunk

    warmup = min((ranks - rank - 1) * 2 + (chunks - 1) * ranks, total)
    ops = [Op("F", *at(k, False)) for k in range(warmup)]
    for i in range(total - warmup):
        ops += [Op("F", *at(warmup + i, False)), Op("B", *at(i, True))]
    ops += [Op("B", *at(k, True)) for k in range(total - warmup, total)]
    return ops


def schedule(kind: str, ranks: int, microbatches: int, chunks: int = 1) -> List[List[Op]]:
    """Every rank's operation list for kind '1f1b' or 'interleaved'."""
    if kind == "1f1b":
        if chunks != 1:
            raise ValueError(f"pipeline: the 1f1b schedule has one chunk per rank, got {chunks}")
        return [one_f_one_b(ranks, r, microbatches) for r in range(ranks)]
    if kind == "interleaved":
        return [interleaved(ranks, r, microbatches, chunks) for r in range(ranks)]
    raise ValueError(f"pipeline: schedule {kind!r} is not one of '1f1b', 'interleaved'")


def _check(ranks: int, rank: int, microbatches: int, chunks: int) -> None:
    if ranks < 1 or not 0 <= rank < ranks:
        raise ValueError(f"pipeline: rank {rank} out of range for {ranks} ranks")
    if microbatches < 1 or chunks < 1:
        raise ValueError(f"pipeline: microbatches ({microbatches}) and chunks ({chunks}) must be >= 1")


@dataclass
class Simulation:
    """What simulate() found."""
    makespan: float
    busy: List[float]  # per rank
    bubble_fraction: float  # idle share of ranks x makespan
    max_in_flight: Dict[Tuple[str, int, int], int]  # (direction "act"/"grad", sender rank, receiver rank) -> messages
    order: List[List[Tuple[float, float, Op]]]  # per rank: (start, end, op)


def simulate(ops: Sequence[Sequence[Op]], forward_time: float = 1.0, backward_time: float = 2.0) -> Simulation:
    """Runs each rank's list in order, an operation starting once its inputs
    exist and its rank is free. Raises ValueError on a deadlock (a rank waits
    for an operation no rank will run before it) or on a list that does not
    run every (microbatch, chunk) forward and backward exactly once."""
    ranks = len(ops)
    chunks = 1 + max((op.chunk for rank_ops in ops for op in rank_ops), default=0)
    stages = ranks * chunks
    done: Dict[Tuple[str, int, int], float] = {}  # (kind, microbatch, virtual stage) -> finish time
    for r, rank_ops in enumerate(ops):
        seen = set()
        for op in rank_ops:
            key = (op.kind, op.microbatch, op.chunk)
            if key in seen:
                raise ValueError(f"pipeline: rank {r} runs {op} twice")
            seen.add(key)
    nxt = [0] * ranks
    clock = [0.0] * ranks
    busy = [0.0] * ranks
    order: List[List[Tuple[float, float, Op]]] = [[] for _ in range(ranks)]
    sent: Dict[Tuple[str, int, int], List[Tuple[float, float]]] = {}  # channel -> (sent, consumed)
    progress = True
    while progress:
        progress = False
        for r in range(ranks):
            while nxt[r] < len(ops[r]):
                op = ops[r][nxt[r]]
                v = op.chunk * ranks + r
                deps = []
                if op.kind == "F" and v > 0:
                    deps.append(("F", op.microbatch, v - 1))
                if op.kind == "B":
                    deps.append(("F", op.microbatch, v))
                    if v < stages - 1:
                        deps.append(("B", op.microbatch, v + 1))
                if any(d not in done for d in deps):
                    break
                start = max([clock[r]] + [done[d] for d in deps])
                end = start + (forward_time if op.kind == "F" else backward_time)
                for d in deps:
                    if d[2] != v and (d[2] % ranks) != r:  # a message between ranks
                        channel = ("act" if op.kind == "F" else "grad", d[2] % ranks, r)
                        sent.setdefault(channel, []).append((done[d], start))
                done[(op.kind, op.microbatch, v)] = end
                clock[r] = end
                busy[r] += end - start
                order[r].append((start, end, op))
                nxt[r] += 1
                progress = True
    stuck = [f"rank {r} at {ops[r][nxt[r]]}" for r in range(ranks) if nxt[r] < len(ops[r])]
    if stuck:
        raise ValueError("pipeline: the schedule deadlocks (" + ", ".join(stuck) + ")")
    microbatches = {op.microbatch for rank_ops in ops for op in rank_ops}
    for kind in "FB":
        for m in microbatches:
            for v in range(stages):
                if (kind, m, v) not in done:
                    raise ValueError(f"pipeline: no rank runs {kind} of microbatch {m} at virtual stage {v}")
    makespan = max(clock) if ranks else 0.0
    in_flight = {}
    for channel, spans in sent.items():
        events = sorted([(t0, 1) for t0, _ in spans] + [(t1, -1) for _, t1 in spans], key=lambda e: (e[0], e[1]))
        level = peak = 0
        for _, delta in events:
            level += delta
            peak = max(peak, level)
        in_flight[channel] = max(peak, 1)
    idle = sum(makespan - b for b in busy)
    return Simulation(makespan, busy, idle / (ranks * makespan) if makespan else 0.0, in_flight, order)


def ideal_bubble_fraction(ranks: int, microbatches: int, chunks: int = 1) -> float:
    """(p - 1) / (v m + p - 1): the bubble of 1F1B (v = 1) and of the
    interleaved schedule with equal forward and backward splits."""
    return (ranks - 1) / (chunks * microbatches + ranks - 1)

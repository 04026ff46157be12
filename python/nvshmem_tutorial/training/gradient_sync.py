"""Data-parallel gradient synchronisation on the symmetric heap."""
from __future__ import annotations

import contextlib
import time
from typing import Iterable, Iterator, List, Optional

import torch

from .buckets import Bucket, plan_buckets
from .comm import Communicator, SymmetricTensor, agree, fingerprint
from .hierarchical import HierarchicalAllReduce

DEFAULT_BUCKET_BYTES = 4 << 20


class GradientSync:
    """Averages gradients across data-parallel ranks, DDP-style, on our
    collectives.

    Use case: data parallelism where the gradient all-reduce is on the step's
    critical path, typically small and medium models whose buckets are
    latency-bound (tens of KiB to a few MiB): there the library's one-shot
    and LL all-reduce take one NVLink trip where a ring takes 2(n - 1).

    Gradients are packed into buckets (plan_buckets: reverse parameter order,
    at most bucket_bytes each) that live in the symmetric heap. A hook on
    each parameter copies its gradient into its bucket as soon as autograd
    has accumulated it; when a bucket is complete (and every earlier bucket
    has started, so all ranks start them in the same order) its all-reduce
    is launched, on a side stream on GPUs, while backward goes on. Which
    algorithm the library runs follows each bucket's size (its auto choice:
    LL and one-shot for small parts, two-shot or ring for large), so the
    bucket size is the knob: small buckets start early, large ones move at
    bandwidth. synchronize_gradients() waits for the buckets and writes the
    averages back into param.grad.

    Building it is collective and checks that every rank holds the same
    parameters (shapes, dtypes and values) and raises ValueError on every
    rank, naming the first parameter that differs, when they do not. One
    backward per synchronize_gradients(); inside no_sync() the hooks do
    nothing (gradient accumulation: the last backward, outside no_sync,
    must then see the accumulated gradients, as with DDP).

    hierarchical=True reduces each bucket with HierarchicalAllReduce
    (inside the node, across nodes, back inside the node).
    """

    def __init__(self, params: Iterable[torch.nn.Parameter], comm: Optional[Communicator] = None,
                 bucket_bytes: int = DEFAULT_BUCKET_BYTES, average: bool = True, overlap: bool = True,
                 hierarchical: bool = False, check_parameters: bool = True):
        self.params: List[torch.nn.Parameter] = [p for p in params if p.requires_grad]
        self.comm = comm or Communicator()
        self.average = average
        self.overlap = overlap
        if not self.params:
            raise ValueError("nvshmem_tutorial.training.GradientSync: no parameters that require grad")
        dtypes = {p.dtype for p in self.params}
        if len(dtypes) != 1:
            raise ValueError(f"nvshmem_tutorial.training.GradientSync: parameters of several dtypes {dtypes}; "
                             "make one GradientSync per dtype")
        for i, p in enumerate(self.params):
            if p.device != self.comm.device:
                raise ValueError(f"nvshmem_tutorial.training.GradientSync: parameter #{i} is on {p.device}, "
                                 f"this PE computes on {self.comm.device}")
        dtype = self.params[0].dtype
        self.buckets: List[Bucket] = plan_buckets([p.numel() for p in self.params], dtype.itemsize, bucket_bytes)
        plan = [repr((tuple(p.shape), str(p.dtype))).encode() for p in self.params]
        plan.append(repr((bucket_bytes, average, hierarchical)).encode())
        agree("GradientSync", "parameter shapes, dtypes or settings", plan)
        if check_parameters:
            agree("GradientSync", "parameter values", [fingerprint(p) for p in self.params],
                  [f"parameter #{i} {tuple(p.shape)}" for i, p in enumerate(self.params)])
        largest = max(b.numel for b in self.buckets) * dtype.itemsize
        total = sum(b.numel for b in self.buckets)
        self._flat = SymmetricTensor(total, dtype, f"gradient buckets (largest {largest} bytes)")
        self._views = []
        start = 0
        for b in self.buckets:
            self._views.append(self._flat.tensor[start:start + b.numel])
            start += b.numel
        self._reducer = HierarchicalAllReduce() if hierarchical else self.comm
        self._where = {}  # param index -> (bucket, offset)
        for bi, b in enumerate(self.buckets):
            for pi, off in zip(b.params, b.offsets):
                self._where[pi] = (bi, off)
        self._stream = torch.cuda.Stream(self.comm.device) if self.comm.gpu and overlap else None
        self._enabled = True
        self.comm_seconds = 0.0  # host time spent issuing (GPU) or running (host heap) the reductions
        self._reset()
        self._hooks = [p.register_post_accumulate_grad_hook(self._hook(i)) for i, p in enumerate(self.params)]

    def _reset(self) -> None:
        self._pending = [len(b.params) for b in self.buckets]
        self._filled: list[set[int]] = [set() for _ in self.buckets]
        self._launched = 0

    def _hook(self, index: int):
        def hook(p: torch.nn.Parameter) -> None:
            if self._enabled and index in self._where:
                self._copy_in(index, p)
                self._launch_ready()
        return hook

    def _copy_in(self, index: int, p: torch.nn.Parameter) -> None:
        bi, off = self._where[index]
        if index in self._filled[bi]:
            raise RuntimeError("nvshmem_tutorial.training.GradientSync: a second backward before "
                               "synchronize_gradients(); use no_sync() for gradient accumulation")
        dst = self._views[bi][off:off + p.numel()]
        if p.grad is None:
            dst.zero_()
        else:
            dst.copy_(p.grad.reshape(-1))
        self._filled[bi].add(index)
        self._pending[bi] -= 1

    def _launch_ready(self) -> None:
        while self._launched < len(self.buckets) and self._pending[self._launched] == 0:
            self._launch(self._launched)
            self._launched += 1

    def _launch(self, bi: int) -> None:
        t0 = time.perf_counter()
        if self._stream is not None:
            self._stream.wait_stream(torch.cuda.current_stream(self.comm.device))
            with torch.cuda.stream(self._stream):
                self._reducer.all_reduce(self._views[bi])
        else:
            self._reducer.all_reduce(self._views[bi])
        self.comm_seconds += time.perf_counter() - t0

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Backward passes inside do not reduce (gradient accumulation)."""
        self._enabled = False
        try:
            yield
        finally:
            self._enabled = True

    def synchronize_gradients(self) -> None:
        """Reduces what the hooks have not (every parameter whose hook did not
        run: unused in this step, or backward ran inside no_sync), waits for
        every bucket and leaves the average (or the sum, average=False) of
        every rank's gradient in each param.grad."""
        for bi, b in enumerate(self.buckets):
            for pi in b.params:
                if pi not in self._filled[bi]:
                    self._copy_in(pi, self.params[pi])
        self._launch_ready()
        if self._stream is not None:
            torch.cuda.current_stream(self.comm.device).wait_stream(self._stream)
        scale = 1.0 / self.comm.world if self.average else 1.0
        for bi, b in enumerate(self.buckets):
            view = self._views[bi]
            if self.average:
                view.mul_(scale)
            for pi, off in zip(b.params, b.offsets):
                p = self.params[pi]
                src = view[off:off + p.numel()].view_as(p)
                if p.grad is None:
                    p.grad = src.clone()
                else:
                    p.grad.copy_(src)
        if self._stream is not None:  # the buckets are rewritten only after these copies
            self._stream.wait_stream(torch.cuda.current_stream(self.comm.device))
        self._reset()

    def close(self) -> None:
        """Collective: removes the hooks and frees the buckets."""
        for h in self._hooks:
            h.remove()
        self._hooks = []
        self._flat.free()

"""Collectives on torch tensors with torch.distributed's names and argument
order, so that `import nvshmem_tutorial.distributed as dist` drops in for
these five calls:

    all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False)
    all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False)
    reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None, async_op=False)
    all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None, group=None, async_op=False)
    broadcast(tensor, src, group=None, async_op=False)

They run the library's collectives (nvst::coll) on the current stream,
over every PE of the job (the group must be the one the job was joined
from): over NVLink on one node; across nodes through the proxy, and then
each call waits for its kernels before returning (_done says why). Any
CUDA tensors work (they are staged through the library's symmetric
workspace); dtypes float32, bfloat16, float16, int32, int64.

The PEs' arguments are compared in the data path, at no host cost: each
collective's kernels carry a word of the call (operation, dtype, count,
root, algorithm) in the flags they exchange anyway, and PEs that made
different calls stop with an error naming both (docs/07), instead of
corrupting memory or hanging. all_to_all_single's sizes are checked pair by
pair: what a PE sends a peer must be what that peer expects.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
import torch.distributed as tdist

from . import _nvst
from .tensors import DTYPE_CODES, DTYPE_NAMES, check_tensor, current_stream, nvst_group, require_initialized


class ReduceOp:
    """Reduction names, as torch.distributed.ReduceOp's (which work too)."""

    SUM = "sum"
    MAX = "max"
    MIN = "min"
    PRODUCT = "prod"


_TORCH_OPS = [
    (tdist.ReduceOp.SUM, "sum"),
    (tdist.ReduceOp.MAX, "max"),
    (tdist.ReduceOp.MIN, "min"),
    (tdist.ReduceOp.PRODUCT, "prod"),
]
# Reductions as the compiled module's codes: our names, and torch's ops
# where they can be dict keys (others go through _op_name).
_OP_CODES: dict[Any, int] = dict(_nvst.coll.OPS)
for _op, _name in _TORCH_OPS:
    try:
        _OP_CODES[_op] = _nvst.coll.OPS[_name]
    except TypeError:
        pass


class Work:
    """What async_op=True returns: the collective is already ordered on the
    current stream; wait() makes the then-current stream wait for it."""

    def __init__(self) -> None:
        self._event = torch.cuda.Event()
        self._event.record()

    def wait(self, timeout: Any = None) -> bool:
        """Makes the current stream wait for the collective.

        Arguments:
            timeout: accepted for torch.distributed's signature; unused (the
                wait is stream-ordered and never blocks the host).

        Returns:
            True.
        """
        torch.cuda.current_stream().wait_event(self._event)
        return True

    def is_completed(self) -> bool:
        """Returns:
        whether the collective's work on the GPU has finished."""
        return self._event.query()


def _op_name(op: Any, fn: str) -> str:
    if isinstance(op, str) and op in _nvst.coll.OPS:
        return op
    for torch_op, name in _TORCH_OPS:
        try:
            if op == torch_op:
                return name
        except TypeError:
            pass
    raise ValueError(f"nvshmem_tutorial.distributed.{fn}: op {op!r} is not SUM, MAX, MIN or PRODUCT")


def _op_code(op: Any, fn: str) -> int:
    """The compiled module's code of a reduction (a dict lookup in the good case)."""
    try:
        code = _OP_CODES.get(op)
    except TypeError:  # unhashable: said by _op_name
        code = None
    return code if code is not None else _nvst.coll.OPS[_op_name(op, fn)]


def _prologue(fn: str, group: Any, names: tuple[str, ...], *tensors: torch.Tensor) -> tuple[int, int]:
    """(dtype code, this PE's GPU) of a collective's tensors (`names`: theirs,
    for the errors): CUDA tensors on this PE's GPU, contiguous, of one
    supported dtype. The good case is one pass over them; only a bad call
    goes through the checks that say what is wrong."""
    try:
        dtype = tensors[0].dtype
        code = DTYPE_CODES.get(dtype)
        device = _nvst.device()  # raises before init: said below
        if code is not None and device >= 0 and (group is None or group is tdist.group.WORLD or group is nvst_group()):
            for t in tensors:
                if t.dtype is not dtype or t.get_device() != device or not t.is_contiguous():
                    break
            else:
                return code, device
    except (AttributeError, RuntimeError):
        pass
    require_initialized(fn)
    if group is not None and group is not nvst_group() and group is not tdist.group.WORLD:
        raise ValueError(f"nvshmem_tutorial.distributed.{fn}: only the group the job was joined from "
                         "(init_from_torch's) is supported")
    for name, t in zip(names, tensors):
        check_tensor(t, fn, name, DTYPE_NAMES)
    raise TypeError(f"nvshmem_tutorial.distributed.{fn}: tensors have different dtypes "
                    + ", ".join(f"{n}={t.dtype}" for n, t in zip(names, tensors)))


def _done(async_op: bool) -> Work | None:
    """What a collective returns: a Work ordered after it on the current
    stream when async_op, else None."""
    return Work() if async_op else None


def all_reduce(tensor: torch.Tensor, op: Any = ReduceOp.SUM, group: Any = None, async_op: bool = False) -> Work | None:
    """Reduces `tensor` over every PE, in place.

    Arguments:
        tensor: a CUDA tensor (float32, bfloat16, float16, int32, int64), the
            same element count and dtype on every PE.
        op: ReduceOp.SUM/MAX/MIN/PRODUCT, torch.distributed's, or "sum",
            "max", "min", "prod".
        group: None or the group the job was joined from.
        async_op: return a Work instead of None.

    Returns:
        A Work when async_op, else None.
    """
    dt, dev = _prologue("all_reduce", group, ("tensor",), tensor)
    p = tensor.data_ptr()
    _nvst.coll.all_reduce(p, p, tensor.numel(), dt, _op_code(op, "all_reduce"), current_stream(dev))
    return _done(async_op)


def all_gather_into_tensor(
    output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: Any = None, async_op: bool = False
) -> Work | None:
    """Concatenates every PE's `input_tensor` into `output_tensor`, in rank order.

    Arguments:
        output_tensor: world size x input_tensor.numel() elements.
        input_tensor: this PE's part; the same count and dtype on every PE.
        group: None or the group the job was joined from.
        async_op: return a Work instead of None.

    Returns:
        A Work when async_op, else None.
    """
    fn = "all_gather_into_tensor"
    dt, dev = _prologue(fn, group, ("output_tensor", "input_tensor"), output_tensor, input_tensor)
    n = _nvst.n_pes()
    if output_tensor.numel() != n * input_tensor.numel():
        raise ValueError(f"nvshmem_tutorial.distributed.{fn}: output_tensor has {output_tensor.numel()} elements; "
                         f"it needs world size {n} x {input_tensor.numel()}")
    _nvst.coll.all_gather(input_tensor.data_ptr(), output_tensor.data_ptr(), input_tensor.numel(), dt,
                          current_stream(dev))
    return _done(async_op)


def reduce_scatter_tensor(
    output: torch.Tensor, input: torch.Tensor, op: Any = ReduceOp.SUM, group: Any = None, async_op: bool = False
) -> Work | None:
    """Reduces every PE's `input` and leaves part `rank` of the result in `output`.

    Arguments:
        output: this PE's part of the result.
        input: world size x output.numel() elements.
        op: as for all_reduce.
        group: None or the group the job was joined from.
        async_op: return a Work instead of None.

    Returns:
        A Work when async_op, else None.
    """
    fn = "reduce_scatter_tensor"
    dt, dev = _prologue(fn, group, ("output", "input"), output, input)
    op_code = _op_code(op, fn)
    n = _nvst.n_pes()
    if input.numel() != n * output.numel():
        raise ValueError(f"nvshmem_tutorial.distributed.{fn}: input has {input.numel()} elements; "
                         f"it needs world size {n} x {output.numel()}")
    _nvst.coll.reduce_scatter(input.data_ptr(), output.data_ptr(), output.numel(), dt, op_code, current_stream(dev))
    return _done(async_op)


def broadcast(tensor: torch.Tensor, src: int, group: Any = None, async_op: bool = False) -> Work | None:
    """Copies PE `src`'s `tensor` into `tensor` on every PE.

    Arguments:
        tensor: the data on src, the destination elsewhere.
        src: the root PE, in [0, world size).
        group: None or the group the job was joined from.
        async_op: return a Work instead of None.

    Returns:
        A Work when async_op, else None.
    """
    dt, dev = _prologue("broadcast", group, ("tensor",), tensor)
    n = _nvst.n_pes()
    if not 0 <= src < n:
        raise ValueError(f"nvshmem_tutorial.distributed.broadcast: src {src} out of range [0, {n})")
    p = tensor.data_ptr()
    _nvst.coll.broadcast(p, p, tensor.numel(), dt, src, current_stream(dev))
    return _done(async_op)


def _splits(sizes: Sequence[int] | None, total_rows: int, n: int, fn: str, name: str) -> list[int]:
    if sizes is None:
        if total_rows % n != 0:
            raise ValueError(f"nvshmem_tutorial.distributed.{fn}: {name} is None, so dim 0 ({total_rows}) must "
                             f"divide by the world size {n}")
        return [total_rows // n] * n
    sizes = [int(s) for s in sizes]
    if len(sizes) != n or any(s < 0 for s in sizes) or sum(sizes) != total_rows:
        raise ValueError(f"nvshmem_tutorial.distributed.{fn}: {name} {sizes} must be {n} non-negative sizes "
                         f"summing to dim 0 ({total_rows})")
    return sizes


def all_to_all_single(
    output: torch.Tensor,
    input: torch.Tensor,
    output_split_sizes: Sequence[int] | None = None,
    input_split_sizes: Sequence[int] | None = None,
    group: Any = None,
    async_op: bool = False,
) -> Work | None:
    """Sends part i of `input` to PE i, which receives it as part `rank` of `output`.

    Splits are in rows of dim 0, as in torch.distributed. A receiver's
    output_split_sizes must equal what each sender sends it (checked on the
    GPU: a mismatch stops with a message naming the peer).

    Arguments:
        output: the received rows, packed by source PE.
        input: the rows to send, packed by destination PE.
        output_split_sizes: rows from each PE; None: equal parts.
        input_split_sizes: rows to each PE; None: equal parts.
        group: None or the group the job was joined from.
        async_op: return a Work instead of None.

    Returns:
        A Work when async_op, else None.
    """
    fn = "all_to_all_single"
    dt, dev = _prologue(fn, group, ("output", "input"), output, input)
    n = _nvst.n_pes()
    if input.dim() == 0 or output.dim() == 0:
        raise ValueError(f"nvshmem_tutorial.distributed.{fn}: input and output need at least one dimension")
    row_in = input.numel() // max(input.shape[0], 1)
    row_out = output.numel() // max(output.shape[0], 1)
    if input.shape[0] and output.shape[0] and row_in != row_out:
        raise ValueError(f"nvshmem_tutorial.distributed.{fn}: input rows have {row_in} elements, output rows {row_out}")
    row = row_in if input.shape[0] else row_out
    send = _splits(input_split_sizes, input.shape[0], n, fn, "input_split_sizes")
    recv = _splits(output_split_sizes, output.shape[0], n, fn, "output_split_sizes")
    if input_split_sizes is None and output_split_sizes is None:
        _nvst.coll.all_to_all(input.data_ptr(), output.data_ptr(), send[0] * row, dt, current_stream(dev))
        return _done(async_op)
    displ: Callable[[list[int]], list[int]] = lambda sizes: [sum(sizes[:i]) * row for i in range(n)]  # noqa: E731
    _nvst.coll.all_to_allv(input.data_ptr(), [s * row for s in send], displ(send), output.data_ptr(),
                           [r * row for r in recv], displ(recv), dt, current_stream(dev))
    return _done(async_op)

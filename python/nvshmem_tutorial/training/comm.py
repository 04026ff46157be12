"""The runtime as the training patterns use it: collectives on a team,
symmetric tensors, put_signal and signal waits, on torch tensors.

One class serves both kinds of PE the runtime has. On a GPU heap the
tensors are CUDA tensors and every call is ordered on torch's current
stream (_nvst.coll and the *_on_stream calls). On a host heap
(NVST_HEAP=host, no GPU) they are CPU tensors over the same symmetric
memory, and the calls are the host API's, blocking; that is how the
patterns run, and are tested, on a machine without a GPU.

A pattern also agrees on its whole plan (parameter shapes, buckets,
shards) once, when it is built (agree()), so that a rank with another
model fails at once with a message about the model, before any
collective's own check (the call word in its flags) would stop it.
"""
from __future__ import annotations

import hashlib
import struct
from typing import List, Optional, Sequence

import torch

from .. import _nvst
from ..tensors import DTYPE_CODES, DTYPE_NAMES, alloc_tensor, current_stream, nvshmem_free_tensor


def require_runtime(fn: str) -> None:
    if not _nvst.initialized():
        raise RuntimeError(f"nvshmem_tutorial.training.{fn}: the runtime is not initialised "
                           "(init_from_torch, init_with_unique_id or launch first)")


def digest(parts: Sequence[bytes]) -> bytes:
    h = hashlib.sha256()
    for p in parts:
        h.update(struct.pack("<q", len(p)))
        h.update(p)
    return h.digest()


def fingerprint(t: torch.Tensor) -> bytes:
    """The bytes that identify a tensor's shape, dtype and values."""
    data = t.detach().contiguous().cpu().reshape(-1).view(torch.uint8).numpy().tobytes()
    return digest([str(tuple(t.shape)).encode(), str(t.dtype).encode(), data])


class SymmetricTensor:
    """A 1-D symmetric allocation seen as a torch tensor (CUDA on a GPU heap,
    CPU on a host heap). Collective: every PE allocates the same size."""

    def __init__(self, numel: int, dtype: torch.dtype, what: str):
        require_runtime("SymmetricTensor")
        nbytes = numel * dtype.itemsize
        free = _nvst.heap_free_bytes()
        if nbytes > free:
            raise ValueError(f"nvshmem_tutorial.training: {what} needs {nbytes} bytes of symmetric heap and "
                             f"{free} are free (raise NVST_SYMMETRIC_SIZE or make it smaller)")
        self.gpu = _nvst.device() >= 0
        self.dtype = dtype
        if self.gpu:
            self._sym = None
            self.tensor = alloc_tensor((numel,), dtype)
        else:
            self._sym = _nvst.alloc(nbytes)
            raw = self._sym.array("uint8") if nbytes else None
            self.tensor = (torch.from_numpy(raw).view(dtype) if raw is not None
                           else torch.empty(0, dtype=dtype))

    def free(self) -> None:
        """Collective."""
        if self.gpu:
            if self.tensor is not None:
                nvshmem_free_tensor(self.tensor)
        elif self._sym is not None:
            _nvst.free(self._sym)
        self.tensor = None
        self._sym = None

    def address(self, index: int = 0) -> int:
        return self.tensor.data_ptr() + index * self.dtype.itemsize

    def put_signal(self, offset: int, src: torch.Tensor, signal: "SymmetricTensor", sig_index: int, pe: int) -> None:
        """src -> this allocation at element `offset` on PE pe, then adds 1 to
        signal[sig_index] there (after the data). GPU: ordered on the current
        stream, src must stay untouched until the stream passes it; host:
        returns once src may be reused."""
        n = src.numel()
        if offset < 0 or offset + n > self.tensor.numel():
            raise ValueError(f"nvshmem_tutorial.training: {n} elements at {offset} pass the end of a symmetric "
                             f"buffer of {self.tensor.numel()}")
        if self.gpu:
            _nvst.putmem_signal_on_stream(self.address(offset), src.data_ptr(), n * src.element_size(),
                                          signal.address(sig_index), 1, True, pe, current_stream())
        else:
            _nvst.put_signal(self._sym, src.contiguous().view(torch.uint8).numpy(), signal._sym, sig_index, 1, pe,
                             add=True, offset=offset * self.dtype.itemsize)

    def signal_add(self, index: int, pe: int) -> None:
        """Adds 1 to this (int64 signal) allocation's word `index` on PE pe."""
        if self.gpu:
            _nvst.signal_op_on_stream(self.address(index), 1, True, pe, current_stream())
        else:  # the host API's signal rides on a put; an empty one carries only the signal
            _nvst.put_signal(self._sym, _EMPTY, self._sym, index, 1, pe, add=True, offset=0)

    def wait_at_least(self, index: int, value: int) -> None:
        """Until this PE's word `index` (int64 signal) >= value: on the stream
        (GPU) or here (host); the runtime's timeout bounds both."""
        if self.gpu:
            _nvst.signal_wait_until_on_stream(self.address(index), "ge", value, current_stream())
        else:
            _nvst.signal_wait_until(self._sym, index, "ge", value)


_EMPTY = torch.empty(0, dtype=torch.uint8).numpy()
_SUM = _nvst.coll.OPS["sum"]  # the compiled collectives' code of a sum


class Communicator:
    """Sum collectives over one team of the runtime (default: every PE).

    rank / world are the team's. Collectives are in place where that is
    their natural form; all run on the current stream on GPUs.
    """

    def __init__(self, team: Optional[int] = None):
        require_runtime("Communicator")
        self.team = _nvst.TEAM_WORLD if team is None else team
        self.rank = _nvst.team_my_pe(self.team)
        self.world = _nvst.team_n_pes(self.team)
        if self.rank < 0:
            raise ValueError("nvshmem_tutorial.training.Communicator: this PE is not a member of the team")
        self.gpu = _nvst.device() >= 0

    @property
    def device(self) -> torch.device:
        return torch.device(f"cuda:{_nvst.device()}") if self.gpu else torch.device("cpu")

    def _check(self, fn: str, *tensors: torch.Tensor) -> int:
        for t in tensors:
            if t.device != self.device or not t.is_contiguous() or t.dtype not in DTYPE_NAMES:
                raise ValueError(f"nvshmem_tutorial.training.{fn}: tensors must be contiguous on {self.device} "
                                 f"with a dtype of {', '.join(map(str, DTYPE_NAMES))}; got {t.dtype} on {t.device}")
        if len({t.dtype for t in tensors}) != 1:
            raise ValueError(f"nvshmem_tutorial.training.{fn}: tensors have different dtypes")
        return DTYPE_CODES[tensors[0].dtype]

    def all_reduce(self, t: torch.Tensor) -> None:
        """t <- the sum of every member's t."""
        dt = self._check("all_reduce", t)
        if self.gpu:
            _nvst.coll.all_reduce(t.data_ptr(), t.data_ptr(), t.numel(), dt, _SUM, current_stream(), self.team)
        elif t.numel():
            a = t.numpy()
            _nvst.all_reduce(a, a, "sum", self.team)

    def reduce_scatter(self, out: torch.Tensor, inp: torch.Tensor) -> None:
        """out <- this member's part of the sum of every member's inp."""
        dt = self._check("reduce_scatter", out, inp)
        if inp.numel() != out.numel() * self.world:
            raise ValueError(f"nvshmem_tutorial.training.reduce_scatter: input has {inp.numel()} elements, "
                             f"it needs {self.world} x {out.numel()}")
        if self.gpu:
            _nvst.coll.reduce_scatter(inp.data_ptr(), out.data_ptr(), out.numel(), dt, _SUM, current_stream(),
                                      self.team)
        elif out.numel():
            _nvst.reduce_scatter(inp.numpy(), out.numpy(), "sum", self.team)

    def all_gather(self, out: torch.Tensor, inp: torch.Tensor) -> None:
        """out <- every member's inp, in member order."""
        dt = self._check("all_gather", out, inp)
        if out.numel() != inp.numel() * self.world:
            raise ValueError(f"nvshmem_tutorial.training.all_gather: output has {out.numel()} elements, "
                             f"it needs {self.world} x {inp.numel()}")
        if self.gpu:
            _nvst.coll.all_gather(inp.data_ptr(), out.data_ptr(), inp.numel(), dt, current_stream(), self.team)
        elif inp.numel():
            _nvst.all_gather(inp.numpy(), out.numpy(), self.team)

    def broadcast(self, t: torch.Tensor, root: int) -> None:
        dt = self._check("broadcast", t)
        if not 0 <= root < self.world:
            raise ValueError(f"nvshmem_tutorial.training.broadcast: root {root} out of range [0, {self.world})")
        if self.gpu:
            _nvst.coll.broadcast(t.data_ptr(), t.data_ptr(), t.numel(), dt, root, current_stream(), self.team)
        elif t.numel():
            _nvst.broadcast(t.numpy(), root, self.team)

    def barrier(self) -> None:
        """Every PE of the job (waits for this GPU's work first)."""
        _nvst.barrier_all()


def agree(fn: str, what: str, items: Sequence[bytes], names: Optional[Sequence[str]] = None) -> None:
    """Collective over every PE: raises ValueError on every PE unless all of
    them pass the same items (compared by digest). The message names the
    first item that differs and the PEs that differ from PE 0."""
    require_runtime(fn)
    mine = struct.pack("<q", len(items)) + digest(items)
    everyone = _nvst.bootstrap_allgather(mine)
    if all(e == everyone[0] for e in everyone):
        return
    counts = [struct.unpack("<q", e[:8])[0] for e in everyone]
    if len(set(counts)) != 1:
        raise ValueError(f"nvshmem_tutorial.training.{fn}: the PEs have different numbers of {what} "
                         f"({', '.join(f'PE {p}: {c}' for p, c in enumerate(counts))})")
    short = b"".join(hashlib.sha256(i).digest()[:8] for i in items)
    per_item = _nvst.bootstrap_allgather(short)
    odd: List[int] = [p for p, e in enumerate(everyone) if e != everyone[0]]
    first = next(i for i in range(len(items)) if len({e[8 * i:8 * i + 8] for e in per_item}) > 1)
    label = names[first] if names else f"#{first}"
    raise ValueError(f"nvshmem_tutorial.training.{fn}: {what} differ across PEs: {label} differs "
                     f"(PEs {odd} differ from PE 0)")

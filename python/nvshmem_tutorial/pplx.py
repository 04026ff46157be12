"""nvshmem_tutorial.pplx: pplx-kernels' AllToAll on the library's
low-latency expert-parallel kernels (nvshmem_tutorial.ep).

    from nvshmem_tutorial.pplx import AllToAll   # instead of pplx_kernels.all_to_all
    ata = AllToAll.intranode(max_num_tokens, num_experts, experts_per_token, rank, world_size, dp_size,
                             hidden_dim, hidden_dim_bytes, hidden_dim_scale_bytes)
    ata.dispatch(out_expert_num_tokens, out_expert_x, out_expert_x_scale, dp_x, dp_x_scale, indices, bound_m)
    ata.combine(out_tokens, indices, weights, expert_y, bound_m)
    ata.destroy()

pplx's meaning: ranks come in data-parallel groups of dp_size consecutive
ranks that hold the same tokens, each dispatched once per group;
out_expert_x is padded per expert ([local experts, max_num_tokens x groups,
hidden]) and out_expert_num_tokens says how many rows of each are valid
(their order is arrival order); bound_m (a one-element device tensor) is
how many of dp_x's rows are tokens, read on the GPU (no host wait);
do_send / do_recv split each call into its halves. Tokens move as raw
bytes (any dtype, with or without scales; the scales' tensors of any
strides), so fp8 rows and their scales arrive bit for bit. combine
writes, for the rows below bound_m (the others keep what they hold),
out_tokens[t] = sum over k of weights[t, k] * expert_y[row of (t, k)],
summed in fp32 and rounded once to out_tokens' dtype, to every rank of
the token's group: pplx's dtype rules, expert_y float32, bfloat16 or
float16 and out_tokens bfloat16 or float16, in any pairing.

How: bf16 and fp16 expert_y rows travel as they are, one low-latency
combine that sums in fp32 and rounds once to out_tokens' dtype. float32
expert_y travels as two bf16 parts, hi and lo, whose sum is within 2^-17
of each value (relative; an fp16 result rounds at 2^-11): two combines
whose fp32 sums are added and rounded here. What differs (each checked): the job is
the torch.distributed world (the library starts it from
torch.distributed, where pplx expects NVSHMEM started by the caller);
rank and world_size must be that world's. A DP group of more than one
rank gets its result through its first rank's symmetric stage (two
barriers more). intranode() refuses a job that spans nodes; internode()
runs on any (our low-latency kernels reach other nodes through the proxy).
"""
from __future__ import annotations

from typing import Any, Callable, NoReturn

import torch
import torch.distributed as dist

from . import _nvst
from .ep import Buffer, LowLatencyHandle
from .tensors import alloc_tensor, check_tensor, current_stream, nvshmem_free_tensor

_ROW_ALIGN = 128  # elements of a bf16 row the low-latency kernels move (a multiple of 128)
OUT_DTYPES = (torch.bfloat16, torch.float16)  # pplx's out_tokens
EXPERT_Y_DTYPES = (torch.float32, torch.bfloat16, torch.float16)  # pplx's expert_y
COMBINE_ROW_DTYPES = (torch.bfloat16, torch.float16)  # what one low-latency combine moves as it is


def _fail(fn: str, msg: str, exc: type = ValueError) -> NoReturn:
    raise exc(f"nvshmem_tutorial.pplx.AllToAll.{fn}: {msg}")


# ---- the combine's arithmetic (tensors only: tested on the CPU) ----------------------
def send_parts(y: torch.Tensor) -> list[torch.Tensor]:
    """expert_y as the 16-bit rows its combines move: bf16 or fp16 as it
    is; float32 as two bf16 parts, hi and lo, with hi + lo within 2^-17 of
    each value, relative (each part rounds at 2^-9 of what it carries)."""
    if y.dtype in COMBINE_ROW_DTYPES:
        return [y]
    if y.dtype != torch.float32:
        raise TypeError(f"nvshmem_tutorial.pplx: expert_y has dtype {y.dtype}; supported: float32, bfloat16, float16")
    hi = y.to(torch.bfloat16)
    return [hi, (y - hi.float()).to(torch.bfloat16)]


def finish_sums(sums: list[torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
    """The combined rows from each part's sums: one part's, already rounded
    to dtype by the kernel; or the parts' float32 sums added and rounded
    once. Always a contiguous tensor of its own or the one given."""
    if len(sums) == 1:
        if sums[0].dtype != dtype:
            raise TypeError(f"nvshmem_tutorial.pplx: a single part's sums are {sums[0].dtype}, not {dtype}")
        return sums[0].contiguous()
    total = sums[0].float()
    for t in sums[1:]:
        total = total + t.float()
    return total.to(dtype)


def live_rows(bound_m: torch.Tensor | None, rows: int, device: torch.device) -> torch.Tensor | None:
    """[rows] bool: which of the rows are tokens (below bound_m, read on
    the GPU); None without bound_m (all are)."""
    if bound_m is None:
        return None
    return torch.arange(rows, device=device) < bound_m.to(torch.int64)


def write_live_rows(out: torch.Tensor, result: torch.Tensor, live: torch.Tensor | None) -> None:
    """out[i] = result[i] for the live rows; the others keep what they hold
    (pplx writes only rows below bound_m)."""
    if live is None:
        out.copy_(result)
    else:
        out.copy_(torch.where(live.unsqueeze(1), result, out))


class AllToAll:
    """pplx-kernels' AllToAll; make one with intranode() or internode()."""

    def __init__(self, max_num_tokens: int, num_experts: int, experts_per_token: int, rank: int, world_size: int,
                 dp_size: int, hidden_dim: int, hidden_dim_bytes: int, hidden_dim_scale_bytes: int,
                 internode: bool) -> None:
        fn = "internode" if internode else "intranode"
        for name, v in (("max_num_tokens", max_num_tokens), ("num_experts", num_experts),
                        ("experts_per_token", experts_per_token), ("world_size", world_size), ("dp_size", dp_size),
                        ("hidden_dim", hidden_dim), ("hidden_dim_bytes", hidden_dim_bytes)):
            if not isinstance(v, int) or v < 1:
                _fail(fn, f"{name} must be a positive int, got {v!r}")
        if not isinstance(hidden_dim_scale_bytes, int) or hidden_dim_scale_bytes < 0 or hidden_dim_scale_bytes % 4:
            _fail(fn, f"hidden_dim_scale_bytes must be a multiple of 4 >= 0 (float32 scales), got "
                  f"{hidden_dim_scale_bytes!r}")
        if world_size % dp_size or world_size // dp_size < 2:
            _fail(fn, f"world_size {world_size} must be a multiple of dp_size {dp_size} with at least 2 groups")
        if num_experts % world_size:
            _fail(fn, f"num_experts {num_experts} must be a multiple of world_size {world_size}")
        if not dist.is_initialized():
            _fail(fn, "torch.distributed is not initialised (the job is its world)", RuntimeError)
        if (rank, world_size) != (dist.get_rank(), dist.get_world_size()):
            _fail(fn, f"rank {rank} / world_size {world_size} must be torch.distributed's world "
                  f"({dist.get_rank()} of {dist.get_world_size()})")
        self.max_num_tokens, self.num_experts, self.experts_per_token = max_num_tokens, num_experts, experts_per_token
        self.rank, self.world_size, self.dp_size = rank, world_size, dp_size
        self.hidden_dim, self.hidden_dim_bytes, self.hidden_dim_scale_bytes = (hidden_dim, hidden_dim_bytes,
                                                                               hidden_dim_scale_bytes)
        self.num_dp = world_size // dp_size
        self.num_local_experts = num_experts // world_size
        # One 16-bit row carries a token's bytes and scales, and also a
        # result row of hidden_dim (bf16 or fp16) on the way back.
        row_bytes = hidden_dim_bytes + hidden_dim_scale_bytes
        width = max(-(-row_bytes // 2), hidden_dim)
        self._width = -(-width // _ROW_ALIGN) * _ROW_ALIGN
        size = Buffer.get_low_latency_rdma_size_hint(max_num_tokens, self._width, world_size, num_experts,
                                                     experts_per_token)
        self._buffer: Buffer | None = Buffer(None, 0, size, low_latency_mode=True)
        if not internode and _nvst.team_n_pes(_nvst.TEAM_NODE) != _nvst.n_pes():
            self._buffer.destroy()  # every rank sees the same nodes: all refuse here
            _fail(fn, "the job spans nodes: use AllToAll.internode", RuntimeError)
        self._leader = rank % dp_size == 0  # the group's rank that sends its tokens
        # A group's result reaches its other ranks through the leader's stage.
        self._stage = alloc_tensor((max_num_tokens * hidden_dim * 4,), torch.uint8) if dp_size > 1 else None
        self._handle: LowLatencyHandle | None = None
        self._recv: tuple | None = None  # (recv_x, recv_count) of the last dispatch
        self._hook = None  # a dispatch's or combine's receive half, when do_recv is still to come
        self._combine_hook: Callable[[], None] | None = None

    @classmethod
    def intranode(cls, max_num_tokens: int, num_experts: int, experts_per_token: int, rank: int, world_size: int,
                  dp_size: int, hidden_dim: int, hidden_dim_bytes: int, hidden_dim_scale_bytes: int,
                  group_name: str = "default") -> AllToAll:
        """Every rank on one node (NVLink). group_name is pplx's process
        group name; the job here is torch.distributed's world."""
        if not isinstance(group_name, str):
            _fail("intranode", f"group_name must be a str, got {group_name!r}", TypeError)
        return cls(max_num_tokens, num_experts, experts_per_token, rank, world_size, dp_size, hidden_dim,
                   hidden_dim_bytes, hidden_dim_scale_bytes, internode=False)

    @classmethod
    def internode(cls, max_num_tokens: int, num_experts: int, experts_per_token: int, rank: int, world_size: int,
                  dp_size: int, hidden_dim: int, hidden_dim_bytes: int, hidden_dim_scale_bytes: int) -> AllToAll:
        """Any job: node peers over NVLink, other nodes through the proxy."""
        return cls(max_num_tokens, num_experts, experts_per_token, rank, world_size, dp_size, hidden_dim,
                   hidden_dim_bytes, hidden_dim_scale_bytes, internode=True)

    # ---- helpers --------------------------------------------------------------------
    def _live(self, fn: str) -> Buffer:
        if self._buffer is None:
            _fail(fn, "called after destroy()", RuntimeError)
        return self._buffer

    def _routing(self, fn: str, indices: torch.Tensor, bound_m: torch.Tensor | None, rows: int) -> torch.Tensor:
        """indices [rows, K] (int32/uint32/int64) as the kernels' int64, -1
        for rows at or past bound_m and everywhere on a group's other ranks
        (their tokens are the leader's)."""
        check_tensor(indices, f"pplx.AllToAll.{fn}", "indices", [torch.int32, torch.uint32, torch.int64])
        if tuple(indices.shape) != (rows, self.experts_per_token):
            _fail(fn, f"indices must be [{rows}, {self.experts_per_token}], got {tuple(indices.shape)}")
        if rows > self.max_num_tokens:
            _fail(fn, f"{rows} tokens exceed max_num_tokens {self.max_num_tokens}")
        if bound_m is not None:
            check_tensor(bound_m, f"pplx.AllToAll.{fn}", "bound_m", [torch.int32, torch.uint32, torch.int64])
            if bound_m.numel() != 1:
                _fail(fn, f"bound_m must hold one count, got shape {tuple(bound_m.shape)}")
        idx = indices.to(torch.int64)
        if not self._leader:
            return torch.full_like(idx, -1)
        live = live_rows(bound_m, rows, idx.device)
        return idx if live is None else torch.where(live.unsqueeze(1), idx, -1)

    # ---- dispatch -------------------------------------------------------------------
    def dispatch(self, out_expert_num_tokens: torch.Tensor, out_expert_x: torch.Tensor,
                 out_expert_x_scale: torch.Tensor | None, dp_x: torch.Tensor, dp_x_scale: torch.Tensor | None,
                 indices: torch.Tensor, bound_m: torch.Tensor | None, do_send: bool = True,
                 do_recv: bool = True) -> None:
        """Sends this group's tokens to their experts' ranks (do_send) and
        fills the outputs with what arrives here (do_recv)."""
        fn = "dispatch"
        buf = self._live(fn)
        if not (do_send or do_recv):
            _fail(fn, "do_send and do_recv are both False: nothing to do")
        has_scales = self.hidden_dim_scale_bytes > 0
        if has_scales != (out_expert_x_scale is not None) or has_scales != (dp_x_scale is not None):
            _fail(fn, "out_expert_x_scale and dp_x_scale must be given exactly when hidden_dim_scale_bytes > 0")
        if do_send:
            if self._hook is not None:
                _fail(fn, "the previous dispatch's receive (do_recv=True) has not run", RuntimeError)
            where = f"pplx.AllToAll.{fn}"
            check_tensor(dp_x, where, "dp_x")
            rows = dp_x.shape[0]
            if dp_x.dim() != 2 or dp_x.shape[1] * dp_x.element_size() != self.hidden_dim_bytes:
                _fail(fn, f"dp_x must be [tokens, hidden] of {self.hidden_dim_bytes} bytes a row, got "
                      f"{tuple(dp_x.shape)} {dp_x.dtype}")
            idx = self._routing(fn, indices, bound_m, rows)
            x = self._pack(fn, dp_x, dp_x_scale, rows)
            recv_x, recv_count, handle, _, hook = buf.low_latency_dispatch(
                x, idx, self.max_num_tokens, self.num_experts, use_fp8=False, return_recv_hook=not do_recv)
            self._handle, self._recv, self._hook = handle, (recv_x, recv_count), hook
        if do_recv:
            if self._recv is None:
                _fail(fn, "do_recv without a dispatch sent first (do_send=True)", RuntimeError)
            if self._hook is not None:
                self._hook()
                self._hook = None
            self._unpack(fn, out_expert_num_tokens, out_expert_x, out_expert_x_scale)

    def _pack(self, fn: str, dp_x: torch.Tensor, dp_x_scale: torch.Tensor | None, rows: int) -> torch.Tensor:
        """This group's rows as the bf16 rows the kernels move: the token's
        bytes, then its scales' bytes, then zeros to the row width (no copy
        where the token is already such a row)."""
        raw = dp_x.view(torch.uint8).view(rows, self.hidden_dim_bytes)
        if dp_x_scale is None and self.hidden_dim_bytes == 2 * self._width:
            return raw.view(torch.bfloat16)
        packed = torch.zeros((rows, 2 * self._width), dtype=torch.uint8, device=dp_x.device)
        packed[:, :self.hidden_dim_bytes] = raw
        if dp_x_scale is not None:  # any strides, as pplx's (row- or column-major)
            check_tensor(dp_x_scale, f"pplx.AllToAll.{fn}", "dp_x_scale", [torch.float32], contiguous=False)
            if tuple(dp_x_scale.shape) != (rows, self.hidden_dim_scale_bytes // 4):
                _fail(fn, f"dp_x_scale must be [{rows}, {self.hidden_dim_scale_bytes // 4}] float32, got "
                      f"{tuple(dp_x_scale.shape)}")
            end = self.hidden_dim_bytes + self.hidden_dim_scale_bytes
            packed[:, self.hidden_dim_bytes:end] = dp_x_scale.contiguous().view(torch.uint8).view(rows, -1)
        return packed.view(torch.bfloat16)

    def _unpack(self, fn: str, out_num: torch.Tensor, out_x: torch.Tensor, out_scale: torch.Tensor | None) -> None:
        assert self._recv is not None  # _unpack follows a dispatch that set it
        recv_x, recv_count = self._recv
        where = f"pplx.AllToAll.{fn}"
        E, cap = self.num_local_experts, self.max_num_tokens * self.num_dp
        check_tensor(out_num, where, "out_expert_num_tokens", [torch.int32])
        if tuple(out_num.shape) != (E,):
            _fail(fn, f"out_expert_num_tokens must be [{E}], got {tuple(out_num.shape)}")
        check_tensor(out_x, where, "out_expert_x")
        if out_x.dim() != 3 or out_x.shape[:2] != (E, cap) or out_x[0, 0].nbytes != self.hidden_dim_bytes:
            _fail(fn, f"out_expert_x must be [{E}, {cap}, hidden] of {self.hidden_dim_bytes} bytes a row, got "
                  f"{tuple(out_x.shape)} {out_x.dtype}")
        # Every group sends each token once: no expert receives more than cap rows.
        raw = recv_x.view(torch.uint8)[:, :cap]
        out_x.view(torch.uint8).view(E, cap, -1).copy_(raw[:, :, :self.hidden_dim_bytes])
        if out_scale is not None:  # any strides, as pplx's
            check_tensor(out_scale, where, "out_expert_x_scale", [torch.float32], contiguous=False)
            if tuple(out_scale.shape) != (E, cap, self.hidden_dim_scale_bytes // 4):
                _fail(fn, f"out_expert_x_scale must be [{E}, {cap}, {self.hidden_dim_scale_bytes // 4}], got "
                      f"{tuple(out_scale.shape)}")
            end = self.hidden_dim_bytes + self.hidden_dim_scale_bytes
            out_scale.copy_(raw[:, :, self.hidden_dim_bytes:end].contiguous().view(torch.float32))
        out_num.copy_(recv_count)

    # ---- combine --------------------------------------------------------------------
    def combine(self, out_tokens: torch.Tensor, indices: torch.Tensor, weights: torch.Tensor,
                expert_y: torch.Tensor, bound_m: torch.Tensor | None, do_send: bool = True,
                do_recv: bool = True) -> None:
        """Sends each expert's results back to their tokens' ranks (do_send)
        and sums them there into out_tokens (do_recv), weighted: rows
        below bound_m are written, the others left as they are."""
        fn = "combine"
        buf = self._live(fn)
        where = f"pplx.AllToAll.{fn}"
        if not (do_send or do_recv):
            _fail(fn, "do_send and do_recv are both False: nothing to do")
        if self._handle is None:
            _fail(fn, "no dispatch to combine: call dispatch first", RuntimeError)
        check_tensor(out_tokens, where, "out_tokens", list(OUT_DTYPES))
        check_tensor(expert_y, where, "expert_y", list(EXPERT_Y_DTYPES))
        check_tensor(weights, where, "weights", [torch.float32])
        rows = indices.shape[0]
        if tuple(weights.shape) != (rows, self.experts_per_token):
            _fail(fn, f"weights must be [{rows}, {self.experts_per_token}], got {tuple(weights.shape)}")
        if out_tokens.dim() != 2 or out_tokens.shape[0] < rows or out_tokens.shape[1] != self.hidden_dim:
            _fail(fn, f"out_tokens must be [>= {rows}, {self.hidden_dim}], got {tuple(out_tokens.shape)}")
        E, cap = self.num_local_experts, self.max_num_tokens * self.num_dp
        if tuple(expert_y.shape) != (E, cap, self.hidden_dim):
            _fail(fn, f"expert_y must be [{E}, {cap}, {self.hidden_dim}], got {tuple(expert_y.shape)}")
        if do_send:
            if self._combine_hook is not None:
                _fail(fn, "the previous combine's receive (do_recv=True) has not run", RuntimeError)
            idx = self._routing(fn, indices, bound_m, rows)
            self._combine_hook = self._send_results(buf, idx, weights, expert_y, out_tokens[:rows], bound_m,
                                                    split=not do_recv)
        if do_recv:
            if self._combine_hook is None:
                _fail(fn, "do_recv without a combine sent first (do_send=True)", RuntimeError)
            hook, self._combine_hook = self._combine_hook, None
            hook()

    def _rows_of(self, y: torch.Tensor) -> torch.Tensor:
        """expert_y's rows (bf16 or fp16) as the kernels' [E, ranks x M,
        width] rows (no copy where they already are that)."""
        E, cap = self.num_local_experts, self.max_num_tokens * self.num_dp
        full = self.world_size * self.max_num_tokens
        if cap == full and self._width == self.hidden_dim:
            return y
        x = torch.zeros((E, full, self._width), dtype=y.dtype, device=y.device)
        x[:, :cap, :self.hidden_dim] = y
        return x

    def _send_results(self, buf: Buffer, idx: torch.Tensor, weights: torch.Tensor, y: torch.Tensor,
                      out: torch.Tensor, bound_m: torch.Tensor | None, split: bool) -> Callable[[], None]:
        """Launches the send half (with split, only that; else the whole
        combine); returns the rest (a function). Each part of expert_y
        (send_parts) is one combine whose fp32 sums come back rounded once
        to out's dtype (a single part) or unrounded (float32: two parts,
        added and rounded here)."""
        rows = idx.shape[0]
        parts = send_parts(y)
        single = len(parts) == 1
        direct = single and bound_m is None and self._width == self.hidden_dim and self._stage is None
        sums: list[torch.Tensor] = []
        hook = None
        for i, part in enumerate(parts):
            if direct:
                got = out
            else:
                got = torch.empty((rows, self._width), dtype=out.dtype if single else torch.float32, device=y.device)
            sums.append(got)
            # Parts share the set's receive buffer: all but the last run whole.
            _, _, hook = buf._ll_combine("combine", self._rows_of(part), idx, weights, self._handle, use_logfmt=False,
                                         zero_copy=False, async_finish=False,
                                         return_recv_hook=split and i == len(parts) - 1, out=got,
                                         combine_wait_recv_cost_stats=None, x_dtypes=COMBINE_ROW_DTYPES,
                                         out_dtype=got.dtype)

        def receive() -> None:
            if hook is not None:
                hook()
            if direct:
                return
            result = finish_sums([t[:, :self.hidden_dim] for t in sums], out.dtype)
            self._share_with_group(result)
            write_live_rows(out, result, live_rows(bound_m, rows, out.device))
        return receive

    def _share_with_group(self, result: torch.Tensor) -> None:
        """A DP group's other ranks take the leader's result."""
        if self._stage is None:
            return
        stream = current_stream()
        nbytes = result.nbytes
        if self._leader:
            self._stage[:nbytes].copy_(result.view(torch.uint8).view(-1))
        _nvst.barrier_all_on_stream(stream)
        if not self._leader:
            leader = self.rank - self.rank % self.dp_size
            _nvst.getmem_on_stream(result.data_ptr(), self._stage.data_ptr(), nbytes, leader, stream)
        _nvst.barrier_all_on_stream(stream)  # read before the leader's next result

    # ---- teardown -------------------------------------------------------------------
    def destroy(self) -> None:
        """Collective: frees the buffers. Safe to call twice."""
        if self._buffer is None:
            return
        if self._stage is not None:
            nvshmem_free_tensor(self._stage)
            self._stage = None
        self._buffer.destroy()
        self._buffer = None
        self._handle = self._recv = self._hook = self._combine_hook = None

    def __del__(self) -> None:
        # pplx destroys in the destructor; a collective free there could run
        # on one rank only, so only what is local is dropped.
        self._handle = self._recv = None


def nvshmem_init(global_rank: int, local_rank: int, world_size: int, device: Any, uid: Any = None) -> None:
    """pplx-kernels' nvshmem_init: starts NVIDIA's NVSHMEM through nvshmem4py
    (rank 0's unique ID broadcast over torch.distributed), as pplx's tests
    do before making an AllToAll. AllToAll itself needs only
    torch.distributed: it starts this library's runtime beside NVSHMEM."""
    try:
        import nvshmem.core as nvshmem
    except ImportError as e:
        raise ImportError(f"nvshmem_tutorial.pplx.nvshmem_init: nvshmem4py does not import ({e}); "
                          "pip install nvshmem4py-cu13") from e
    if not dist.is_initialized():
        raise RuntimeError("nvshmem_tutorial.pplx.nvshmem_init: torch.distributed is not initialised")
    ids = [uid if uid is not None else (nvshmem.get_unique_id() if global_rank == 0 else None)]
    dist.broadcast_object_list(ids, src=0)
    dist.barrier()
    nvshmem.init(device=device, uid=ids[0], rank=global_rank, nranks=world_size, initializer_method="uid")


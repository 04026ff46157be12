"""nvshmem_tutorial.ep: DeepEP's Buffer API (v1.2) on the library's
expert-parallel kernels (nvst::ep, chapter 9 of the book).

    import nvshmem_tutorial.ep as deep_ep      # instead of `import deep_ep`
    buffer = deep_ep.Buffer(group, num_nvl_bytes, num_rdma_bytes)

Method names, arguments, defaults and return values follow DeepEP v1.2.1:
get_dispatch_layout, dispatch, combine, low_latency_dispatch,
low_latency_combine, get_next_low_latency_combine_buffer,
clean_low_latency_buffer, get_local_buffer_tensor, get_comm_stream,
capture, is_sm90_compiled, EventOverlap, Config (positional, DeepEP's
defaults), the size hints. Handles are tuples in DeepEP's order, so code
that indexes them runs: normal mode (rank_prefix_matrix, ...,
recv_src_idx, is_token_in_rank, ...), across nodes DeepEP's internode
layout (is_token_in_rank first, recv_gbl_rank_prefix_sum fourth from
last), low latency (recv_src_info, recv_layout_range,
num_max_dispatch_tokens_per_rank, hidden, num_experts). The symmetric heap
is sized from num_nvl_bytes and num_rdma_bytes when the Buffer starts the
job (no environment variable needed). Differences, each an error that says
so rather than a silent change:
 - handle elements that describe DeepEP's channels (channel_prefix_matrix,
   send_head, the RDMA channel matrices, recv_src_meta) have no
   counterpart: our kernels do not cut tokens into channels. Reading one
   raises; passing the handle back works;
 - low-latency rows of one expert are packed in arrival order, not grouped
   by source rank: recv_layout_range (computed when read) gives each
   source's count, and its begin offsets only where the rows are grouped
   (one rank, or as it happened); otherwise reading it raises. Each row's
   source, token and top-k slot are in handle.src_info;
 - across nodes the normal mode is hierarchical, as DeepEP's (a token
   crosses to a node once, then NVLink), but its stages come out of the
   symmetric heap beside num_nvl_bytes (three more halves of it), not out
   of num_rdma_bytes; the low-latency mode is flat, as DeepEP's;
 - the dispatch computes its layout itself: the layout tensors a caller
   passes (num_tokens_per_rank, ...) are checked for shape; without
   topk_idx, is_token_in_rank says where each token goes;
 - the normal dispatch's fp8 scales are float32 [T, H / 128] of any
   strides (row- or column-major, as DeepEP's), returned row-major as
   DeepEP's; DeepEP's int32 scales (packed UE8M0) are refused;
 - num_worst_tokens pads the outputs to that many rows (topk_idx -1,
   weights 0), as DeepEP's, but the dispatch still learns the exact count
   on the host first: it saves no synchronisation;
 - Config's chunk sizes are checked as DeepEP checks them and unused (our
   kernels do not chunk); num_qps_per_rank is unused (no queue pairs);
   allow_nvlink_for_low_latency_mode=False is refused (node peers are
   always reached over NVLink); an mpi4py comm instead of a group is
   refused;
 - the low-latency buffers are sized at the first low_latency_dispatch
   (call it once before capturing a CUDA graph); num_rdma_bytes must cover
   get_low_latency_rdma_size_hint for that shape; clean_low_latency_buffer
   only checks its shape (our counters reset themselves and the normal mode
   has memory of its own, so nothing is left dirty);
 - low_latency_combine with zero_copy=True reads the tensor
   get_next_low_latency_combine_buffer gave (x is checked for shape only),
   as DeepEP's; without it, x is read in place (no copy either);
   use_logfmt=True sends LogFMT-10 as DeepEP's (our own encoding of the
   same idea, src/ep/logfmt.hpp: groups of 128 channels under 1 in
   magnitude as 10 bits a value), decoded per sending rank;
 - get_local_buffer_tensor gives the normal-mode receive region (half of
   num_nvl_bytes), or with use_rdma_buffer=True the low-latency block
   (which exists from the first low_latency_dispatch).
Normal-mode outputs are fresh tensors (copied out of the buffer); low-latency
outputs are views of the buffer, valid until the dispatch after next, as in
DeepEP, with the scales' last two dimensions column-major as DeepEP's; each
buffer set's tensors are made once, and a later call into that set returns
the same objects (DeepEP's are new objects over the same memory).
"""
import math
import os
import re

import torch
import torch.distributed as dist

from . import _nvst
from . import distributed as nd
from .bootstrap import spans_hosts
from .tensors import check_tensor, current_stream, init_from_torch, reserve_heap, tensor_at

_FP8 = getattr(torch, "float8_e4m3fn", None)
_BF16_ONLY = (torch.bfloat16,)  # DeepEP's low-latency combine: bf16 rows, bf16 result
# The low-latency combine's output formats, as the compiled module's flags
# name them (rows: 2 for fp16, else bf16).
_COMBINE_OUT_FLAGS = {torch.bfloat16: 0, torch.float16: 4, torch.float32: 8}


class Config:
    """DeepEP's Config(num_sms, nvl send chunk, nvl recv chunk, rdma send
    chunk, rdma recv chunk), with DeepEP's defaults and checks. num_sms is
    the number of blocks of the normal-mode kernels; the chunk sizes are
    checked and not used (our kernels do not chunk). threads_per_block is
    ours (the blocks' width)."""

    def __init__(self, num_sms=20, num_max_nvl_chunked_send_tokens=6, num_max_nvl_chunked_recv_tokens=256,
                 num_max_rdma_chunked_send_tokens=6, num_max_rdma_chunked_recv_tokens=256, threads_per_block=512):
        if not isinstance(num_sms, int) or num_sms < 1:
            raise ValueError(f"nvshmem_tutorial.ep.Config: num_sms must be a positive int, got {num_sms!r}")
        if threads_per_block % 32 or not 64 <= threads_per_block <= 1024:
            raise ValueError(f"nvshmem_tutorial.ep.Config: threads_per_block {threads_per_block} must be a "
                             "multiple of 32 in [64, 1024]")
        for kind, send, recv in (("nvl", num_max_nvl_chunked_send_tokens, num_max_nvl_chunked_recv_tokens),
                                 ("rdma", num_max_rdma_chunked_send_tokens, num_max_rdma_chunked_recv_tokens)):
            if not 0 < send < recv:
                raise ValueError(f"nvshmem_tutorial.ep.Config: the {kind} chunks must satisfy 0 < send < recv "
                                 f"(DeepEP's invariant), got send {send}, recv {recv}")
        self.num_sms = num_sms
        self.threads_per_block = threads_per_block
        self.num_max_nvl_chunked_send_tokens = num_max_nvl_chunked_send_tokens
        self.num_max_nvl_chunked_recv_tokens = num_max_nvl_chunked_recv_tokens
        self.num_max_rdma_chunked_send_tokens = num_max_rdma_chunked_send_tokens
        # DeepEP rounds the RDMA receive chunk up to a multiple of the send chunk.
        self.num_max_rdma_chunked_recv_tokens = (-(-num_max_rdma_chunked_recv_tokens
                                                   // num_max_rdma_chunked_send_tokens)
                                                 * num_max_rdma_chunked_send_tokens)

    def get_nvl_buffer_size_hint(self, hidden_bytes, num_ranks):
        """Bytes of num_nvl_bytes for dispatching 4096 tokens per rank of
        `hidden_bytes` each to num_ranks ranks with top-8 routing (every
        token to every rank, the worst case)."""
        hidden = hidden_bytes // 2
        return _nvst.ep.nvl_size_hint(4096 * num_ranks, hidden, 8, False)

    def get_rdma_buffer_size_hint(self, hidden_bytes, num_ranks):
        return 0  # nothing: across nodes the Buffer sizes its send stage from num_nvl_bytes


class EventOverlap:
    """DeepEP's EventOverlap: a CUDA event (or None when the call already
    made the current stream wait), plus tensors to keep alive until then."""

    def __init__(self, event=None, extra_tensors=None):
        self.event = event
        self.extra_tensors = extra_tensors

    def current_stream_wait(self):
        if self.event is not None:
            torch.cuda.current_stream().wait_event(self.event)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.current_stream_wait()


class _Later:
    """A handle element computed when it is read (see _Handle)."""

    def __repr__(self):
        return "<computed when read>"


_LATER = _Later()
# What a call that made the caller's stream wait itself returns as its event:
# one object for all of them (it holds nothing), no construction per call.
_NO_EVENT = EventOverlap(None)


class _Handle(tuple):
    """A DeepEP handle: a tuple in DeepEP's order. Elements that cost GPU
    work to build are computed when first read (so a call that only passes
    the handle back pays nothing for them); those with no counterpart here
    raise when read. What our calls need rides in attributes."""
    names: tuple[str, ...] = ()

    def __new__(cls, items, **attrs):
        h = tuple.__new__(cls, items)
        h.__dict__.update(attrs)
        return h

    def _element(self, i):
        v = tuple.__getitem__(self, i)
        if v is not _LATER:
            return v
        cache = self.__dict__.setdefault("_computed", {})
        if i not in cache:
            cache[i] = self._compute(self.names[i])
        return cache[i]

    def _compute(self, name):
        raise NotImplementedError(f"nvshmem_tutorial.ep: the handle's {name} has no counterpart here: our kernels "
                                  "do not cut tokens into channels (pass the handle back to dispatch/combine "
                                  "as it is)")

    def __getitem__(self, i):
        if isinstance(i, slice):
            return tuple(self._element(j) for j in range(len(self))[i])
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"nvshmem_tutorial.ep: handle index {i} out of range ({n} elements)")
        return self._element(i % n)

    def __iter__(self):
        return (self._element(j) for j in range(len(self)))


class DispatchHandle(_Handle):
    """What dispatch returns: DeepEP's intranode handle (rank_prefix_matrix,
    channel_prefix_matrix, recv_channel_prefix_matrix, recv_src_idx,
    is_token_in_rank, send_head), or across nodes its internode one.
    Attributes: cpp (the routing), recv_src_idx, topk_idx, topk_weights,
    num_experts, num_worst_tokens (> 0: outputs padded to this many rows)."""
    INTRANODE = ("rank_prefix_matrix", "channel_prefix_matrix", "recv_channel_prefix_matrix", "recv_src_idx",
                 "is_token_in_rank", "send_head")
    INTERNODE = ("is_token_in_rank", "rdma_channel_prefix_matrix", "gbl_channel_prefix_matrix",
                 "recv_rdma_channel_prefix_matrix", "recv_rdma_rank_prefix_sum", "recv_gbl_channel_prefix_matrix",
                 "recv_gbl_rank_prefix_sum", "recv_src_meta", "send_rdma_head", "send_nvl_head")

    @classmethod
    def make(cls, internode, recv_src_idx, is_token_in_rank, **attrs):
        names = cls.INTERNODE if internode else cls.INTRANODE
        known = {"recv_src_idx": recv_src_idx, "is_token_in_rank": is_token_in_rank}
        h = cls.__new__(cls, [_LATER if known.get(n) is None else known[n] for n in names], recv_src_idx=recv_src_idx,
                        **attrs)
        h.__dict__["names"] = names
        return h

    @property
    def num_recv_tokens(self):
        return self.cpp.num_recv_tokens

    @property
    def num_rows(self):
        """Rows of the dispatch's outputs (and of the combine's x)."""
        return self.num_worst_tokens or self.cpp.num_recv_tokens

    def _counts(self):
        n = self.cpp.n_pes
        return torch.tensor(list(self.cpp.count), dtype=torch.int32).view(n, n)  # [src, dst]

    def _compute(self, name):
        me = _nvst.my_pe()
        if name == "rank_prefix_matrix":  # [i][j]: tokens ranks 0..i send to rank j
            return self._counts().cumsum(0, dtype=torch.int32).to(self.device)
        if name == "recv_gbl_rank_prefix_sum":  # [i]: rows this rank received from ranks 0..i
            return self._counts()[:, me].cumsum(0, dtype=torch.int32).to(self.device)
        if name == "is_token_in_rank":
            n = self.cpp.n_pes
            rank_of = torch.where(self.topk_idx >= 0, self.topk_idx // (self.num_experts // n), n)
            hit = torch.zeros((self.topk_idx.shape[0], n + 1), dtype=torch.bool, device=self.device)
            return hit.scatter_(1, rank_of, True)[:, :n].contiguous()
        return super()._compute(name)


class LowLatencyHandle(_Handle):
    """What low_latency_dispatch returns: DeepEP's (recv_src_info,
    recv_layout_range, num_max_dispatch_tokens_per_rank, hidden,
    num_experts). recv_src_info [E_local, ranks x M] int32 is each row's
    token index on its source rank; recv_layout_range [E_local, ranks]
    int64 (begin << 32 | count) is computed when read. Attributes:
    buffer_index, src_info ([E_local, ranks x M, 3]: source rank, token,
    top-k slot), recv_count."""
    names = ("recv_src_info", "recv_layout_range", "num_max_dispatch_tokens_per_rank", "hidden", "num_experts")

    def _compute(self, name):
        if name != "recv_layout_range":
            return super()._compute(name)
        info, count = self.src_info, self.recv_count
        E, R, _ = info.shape
        n = _nvst.n_pes()
        valid = torch.arange(R, device=info.device).unsqueeze(0) < count.unsqueeze(1)
        src = torch.where(valid, info[:, :, 0].long(), n)
        per = torch.zeros((E, n + 1), dtype=torch.int64, device=info.device)
        per.scatter_add_(1, src, torch.ones_like(src))
        per = per[:, :n]
        begin = per.cumsum(1) - per
        # Rows land in arrival order: a begin offset exists only where each
        # source's rows are contiguous and in rank order.
        if n > 1 and bool(((src[:, 1:] < src[:, :-1]) & valid[:, 1:]).any()):
            raise NotImplementedError(
                "nvshmem_tutorial.ep: recv_layout_range cannot describe this dispatch: our low-latency rows of "
                "one expert are packed in arrival order, not grouped by source rank. Each source's count is "
                "(handle.src_info[e, :recv_count[e], 0] == rank).sum(); handle.src_info holds every row's "
                "(source rank, token, top-k slot)")
        return (begin << 32) | per


def _check_scales(fn, x_scales, T, H):
    """DeepEP's fp8 scales: float32 [T, H / 128] on this PE's GPU, of any
    strides (DeepEP's kernels take row- and column-major; ours read rows, so
    dispatch copies other layouts into rows)."""
    if isinstance(x_scales, torch.Tensor) and x_scales.dtype == torch.int32:
        _fail(fn, "x_scales is int32 (DeepEP's packed UE8M0 form): this dispatch takes float32 scales, one per 128 "
              "channels", TypeError)
    check_tensor(x_scales, f"ep.Buffer.{fn}", "x_scales", [torch.float32], contiguous=False)
    if tuple(x_scales.shape) != (T, H // 128):
        _fail(fn, f"x_scales must be [{T}, {H // 128}], got {tuple(x_scales.shape)}")


class _CurrentStream:
    """torch.cuda.stream(stream) for a block that allocates, when the caller
    already holds the current stream (`restore`): torch's context manager
    reads the current stream again on entry and exit, building a Stream
    object each time (5-7 us). When the two are one, nothing is done."""
    __slots__ = ("stream", "restore")

    def __init__(self, stream, restore):
        self.stream, self.restore = stream, restore

    def __enter__(self):
        if self.stream is not self.restore:
            torch.cuda.set_stream(self.stream)

    def __exit__(self, *exc):
        if self.stream is not self.restore:
            torch.cuda.set_stream(self.restore)


class _LowLatencyOwner:
    """What the low-latency output tensors keep alive: the C++ buffers. Not
    the Buffer: it caches those tensors (_ll_outputs), and a Buffer -> tensor ->
    Buffer cycle through DLPack is one that Python's collector cannot see,
    so the symmetric memory would never be freed. destroy() empties it."""
    __slots__ = ("ll",)

    def __init__(self, ll):
        self.ll = ll


def _fail(fn, msg, exc=ValueError):
    raise exc(f"nvshmem_tutorial.ep.Buffer.{fn}: {msg}")


class Buffer:
    """DeepEP's Buffer (see the module's docstring for what differs)."""
    num_sms = 20

    def __init__(self, group, num_nvl_bytes=0, num_rdma_bytes=0, low_latency_mode=False, num_qps_per_rank=24,
                 allow_nvlink_for_low_latency_mode=True, allow_mnnvl=False, explicitly_destroy=False, comm=None):
        """Collective over `group` (None: the world). Starts the job when it
        is not running yet, with a symmetric heap sized for num_nvl_bytes and
        num_rdma_bytes (unless NVST_SYMMETRIC_SIZE says otherwise)."""
        if group is None and comm is not None:
            _fail("__init__", "an mpi4py comm is not supported: pass a torch.distributed group")
        if num_nvl_bytes < 0 or num_rdma_bytes < 0:
            _fail("__init__", "num_nvl_bytes and num_rdma_bytes must be >= 0")
        if not allow_nvlink_for_low_latency_mode:
            _fail("__init__", "allow_nvlink_for_low_latency_mode=False is not supported: node peers are always "
                  "reached over NVLink here")
        num_nvl_bytes, num_rdma_bytes = int(num_nvl_bytes), int(num_rdma_bytes)
        # The normal mode takes num_nvl_bytes (five halves of it across
        # nodes); the low-latency buffers take up to num_rdma_bytes (about
        # twice across nodes): ep.hpp's Buffer constructor.
        nodes = spans_hosts() or "NVST_NODE_SIZE" in os.environ
        reserve_heap((5 if nodes else 2) * (num_nvl_bytes // 2) + (2 if nodes else 1) * num_rdma_bytes)
        init_from_torch(group)
        self.group = group
        self.rank = dist.get_rank(group)
        self.group_size = dist.get_world_size(group)
        if self.group_size != _nvst.n_pes():
            _fail("__init__", f"the group has {self.group_size} ranks but the job has {_nvst.n_pes()} PEs; "
                  "only the group the job was joined from is supported")
        self.num_nvl_bytes = num_nvl_bytes
        self.num_rdma_bytes = num_rdma_bytes
        self.low_latency_mode = low_latency_mode
        self.explicitly_destroy = explicitly_destroy
        self._normal = _nvst.ep.Buffer(num_nvl_bytes) if num_nvl_bytes > 0 else None
        self._ll = None  # created by the first low_latency_dispatch
        self._ll_out = {}  # (buffer set, use_fp8, use_ue8m0) -> the dispatch's output tensors: _ll_outputs
        self._ll_owner = None  # what those tensors keep alive: _LowLatencyOwner
        self._ll_shape = None
        self._ll_x_shape = None  # the combine's x: (E_local, ranks x M, H)
        self._device = _nvst.device()
        self._zero_copy_x = {}  # buffer set -> get_next_low_latency_combine_buffer's tensor
        self._comm = torch.cuda.Stream()
        # Nodes the job spans: the layout counts tokens per node across them.
        self._num_nodes = _nvst.n_pes() // _nvst.team_n_pes(_nvst.TEAM_NODE)

    # ---- DeepEP's static helpers ------------------------------------------------
    @staticmethod
    def is_sm90_compiled():
        """Whether the kernels were built for compute capability 9.0 or
        newer (CMAKE_CUDA_ARCHITECTURES)."""
        archs = [int(m) for m in re.findall(r"\d+", _nvst.cuda_architectures)]
        return any(a >= 90 for a in archs)

    @staticmethod
    def set_num_sms(new_num_sms):
        if not isinstance(new_num_sms, int) or new_num_sms < 2 or new_num_sms % 2:
            raise ValueError(f"nvshmem_tutorial.ep.Buffer.set_num_sms: the SM count must be even and >= 2 "
                             f"(DeepEP's rule), got {new_num_sms!r}")
        Buffer.num_sms = new_num_sms

    @staticmethod
    def capture():
        """An EventOverlap with an event recorded on the current stream (for
        previous_event)."""
        event = torch.cuda.Event()
        event.record()
        return EventOverlap(event)

    @staticmethod
    def get_dispatch_config(num_ranks):
        return Config(Buffer.num_sms)

    @staticmethod
    def get_combine_config(num_ranks):
        return Config(Buffer.num_sms)

    @staticmethod
    def get_low_latency_rdma_size_hint(num_max_dispatch_tokens_per_rank, hidden, num_ranks, num_experts, num_topk=8):
        """Bytes of num_rdma_bytes for low-latency mode (DeepEP's signature,
        plus num_topk, which our per-(token, expert) slots depend on)."""
        return _nvst.ep.low_latency_size_hint(num_max_dispatch_tokens_per_rank, hidden, num_ranks, num_experts,
                                              num_topk)

    def get_comm_stream(self):
        """The stream the normal-mode kernels (and async_finish calls) run on."""
        return self._comm

    def clean_low_latency_buffer(self, num_max_dispatch_tokens_per_rank, hidden, num_experts):
        """DeepEP zeroes its low-latency counters here (after normal-mode
        calls reused that memory). Ours reset themselves at every receive and
        the normal mode has memory of its own, so this only checks the shape
        against the low-latency buffers' (when they exist)."""
        if self._ll_shape is not None:
            M, H, E, _ = self._ll_shape
            if (num_max_dispatch_tokens_per_rank, hidden, num_experts) != (M, H, E):
                _fail("clean_low_latency_buffer", f"shape ({num_max_dispatch_tokens_per_rank}, {hidden}, "
                      f"{num_experts}) differs from the low-latency buffers' ({M}, {H}, {E})")

    def get_local_buffer_tensor(self, dtype, size=None, offset=0, use_rdma_buffer=False):
        """DeepEP's raw view of this rank's buffer: `size` (a shape, or None
        for all that is left) elements of `dtype` from byte `offset`. Of the
        normal-mode receive region (half of num_nvl_bytes), or with
        use_rdma_buffer=True of the low-latency memory (one block: both
        buffer sets' receive arrays, counters and signals; it exists from the
        first low_latency_dispatch). The next call of that mode overwrites it."""
        fn = "get_local_buffer_tensor"
        if not isinstance(dtype, torch.dtype):
            _fail(fn, f"dtype must be a torch.dtype, got {dtype!r}", TypeError)
        if use_rdma_buffer:
            if self._ll is None:
                _fail(fn, "no low-latency memory yet: it is sized by the first low_latency_dispatch")
            addr, nbytes = self._ll.local_ll_region()
        else:
            if self._normal is None:
                _fail(fn, "this Buffer has no normal-mode memory (num_nvl_bytes = 0)")
            addr, nbytes = self._normal.local_nvl_region()
        item = dtype.itemsize
        if not isinstance(offset, int) or not 0 <= offset <= nbytes or offset % item:
            _fail(fn, f"offset {offset!r} must be a byte offset in [0, {nbytes}] and a multiple of {item} ({dtype})")
        shape = ((nbytes - offset) // item,) if size is None else ((size,) if isinstance(size, int) else tuple(size))
        count = math.prod(int(d) for d in shape)
        if any(int(d) < 0 for d in shape) or offset + count * item > nbytes:
            _fail(fn, f"{count} elements of {dtype} from byte {offset} exceed the region's {nbytes} bytes")
        return tensor_at(addr + offset, shape, dtype, self)

    def destroy(self):
        """Collective: frees the buffers now (DeepEP's explicitly_destroy)."""
        self._normal = None
        self._ll = None
        if self._ll_owner is not None:
            self._ll_owner.ll = None  # freed now; views handed out dangle, as DeepEP's do
        self._ll_out = {}
        self._zero_copy_x = {}

    # ---- streams and events ------------------------------------------------------
    def _begin(self, previous_event):
        compute = torch.cuda.current_stream()
        if previous_event is not None and previous_event.event is not None:
            self._comm.wait_event(previous_event.event)
        else:
            self._comm.wait_stream(compute)
        return compute

    def _raw(self, stream):
        """The int the compiled module takes for `stream` (None: the caller's
        current stream on this PE's GPU, read without building a
        torch.cuda.Stream, which costs 5-7 us a call)."""
        return current_stream(self._device) if stream is None else stream.cuda_stream

    def _finish(self, compute, async_finish, tensors):
        event = torch.cuda.Event()
        event.record(self._comm)
        if not async_finish:  # the caller's stream waits: its later reuse of them is ordered
            compute.wait_event(event)
            return EventOverlap(None)
        live = [t for t in tensors if isinstance(t, torch.Tensor)]
        for t in live:
            t.record_stream(self._comm)  # allocator: in use on comm until the event
        return EventOverlap(event, live)

    # ---- layout --------------------------------------------------------------------
    def get_dispatch_layout(self, topk_idx, num_experts, previous_event=None, async_finish=False,
                            allocate_on_comm_stream=False):
        fn = "get_dispatch_layout"
        check_tensor(topk_idx, f"ep.Buffer.{fn}", "topk_idx", [torch.int64])
        if topk_idx.dim() != 2:
            _fail(fn, f"topk_idx must be [num_tokens, num_topk], got shape {tuple(topk_idx.shape)}")
        n = self.group_size
        if num_experts < n or num_experts % n:
            _fail(fn, f"num_experts {num_experts} must be a positive multiple of the {n} ranks")
        compute = self._begin(previous_event)
        dev = topk_idx.device
        with _CurrentStream(self._comm if allocate_on_comm_stream else compute, compute):
            per_rank = torch.empty(n, dtype=torch.int32, device=dev)
            per_expert = torch.empty(num_experts, dtype=torch.int32, device=dev)
            in_rank = torch.empty((topk_idx.shape[0], n), dtype=torch.bool, device=dev)
            # DeepEP's num_tokens_per_rdma_rank: tokens per node, when the job spans nodes.
            per_node = torch.empty(self._num_nodes, dtype=torch.int32, device=dev) if self._num_nodes > 1 else None
        _nvst.ep.get_dispatch_layout(topk_idx.data_ptr(), topk_idx.shape[0], topk_idx.shape[1], num_experts,
                                     per_rank.data_ptr(), per_expert.data_ptr(), in_rank.data_ptr(),
                                     self._comm.cuda_stream, per_node.data_ptr() if per_node is not None else 0)
        event = self._finish(compute, async_finish, [topk_idx, per_rank, per_expert, in_rank, per_node])
        return per_rank, per_node, per_expert, in_rank, event

    # ---- normal mode -----------------------------------------------------------
    def dispatch(self, x, handle=None, num_tokens_per_rank=None, num_tokens_per_rdma_rank=None,
                 is_token_in_rank=None, num_tokens_per_expert=None, topk_idx=None, topk_weights=None,
                 expert_alignment=1, num_worst_tokens=0, config=None, previous_event=None, async_finish=False,
                 allocate_on_comm_stream=False):
        """x: bf16 [T, H], or (fp8 e4m3 [T, H], float32 scales [T, H / 128],
        row- or column-major as DeepEP's). Returns (recv_x, recv_topk_idx,
        recv_topk_weights, num_recv_tokens_per_expert_list, handle, event);
        with a handle (cached) only recv_x and the event are returned, as in
        DeepEP. Without topk_idx each token goes where is_token_in_rank says
        (recv_topk_idx and recv_topk_weights are then None)."""
        fn = "dispatch"
        if self._normal is None:
            _fail(fn, "this Buffer has no normal-mode memory (num_nvl_bytes = 0)")
        if not isinstance(num_worst_tokens, int) or num_worst_tokens < 0:
            _fail(fn, f"num_worst_tokens must be an int >= 0, got {num_worst_tokens!r}")
        if isinstance(handle, DispatchHandle) and handle.num_worst_tokens:  # cached: padded as its first dispatch
            if num_worst_tokens not in (0, handle.num_worst_tokens):
                _fail(fn, f"num_worst_tokens {num_worst_tokens} differs from the handle's {handle.num_worst_tokens}")
            num_worst_tokens = handle.num_worst_tokens
        x, x_scales = x if isinstance(x, tuple) else (x, None)
        fp8 = x_scales is not None
        where = f"ep.Buffer.{fn}"
        check_tensor(x, where, "x", [_FP8] if fp8 else [torch.bfloat16])
        if x.dim() != 2:
            _fail(fn, f"x must be [num_tokens, hidden], got shape {tuple(x.shape)}")
        T, H = x.shape
        scales_given = x_scales
        if fp8:
            _check_scales(fn, x_scales, T, H)
        cached = handle is not None
        if cached:
            if not isinstance(handle, DispatchHandle):
                _fail(fn, "handle must be what an earlier dispatch returned", TypeError)
            topk_idx, topk_weights, num_experts = handle.topk_idx, handle.topk_weights, handle.num_experts
            cpp = handle.cpp
        else:
            if num_tokens_per_expert is None:
                _fail(fn, "num_tokens_per_expert (from get_dispatch_layout) is required without a handle")
            num_experts = num_tokens_per_expert.numel()
            n = self.group_size
            if num_experts < n or num_experts % n:
                _fail(fn, f"num_tokens_per_expert has {num_experts} experts: a positive multiple of the {n} "
                      "ranks is needed")
            for name, t, shape in (("num_tokens_per_rank", num_tokens_per_rank, (n,)),
                                   ("is_token_in_rank", is_token_in_rank, (T, n))):
                if t is not None and tuple(t.shape) != shape:
                    _fail(fn, f"{name} must have shape {shape}, got {tuple(t.shape)}")
            if topk_idx is None:
                if is_token_in_rank is None:
                    _fail(fn, "without a handle, topk_idx or is_token_in_rank must say where tokens go")
                check_tensor(is_token_in_rank, where, "is_token_in_rank", [torch.bool])
                if topk_weights is not None:
                    _fail(fn, "topk_weights needs topk_idx")
                topk_given = False
            else:
                check_tensor(topk_idx, where, "topk_idx", [torch.int64])
                if topk_idx.dim() != 2 or topk_idx.shape[0] != T:
                    _fail(fn, f"topk_idx must be [{T}, num_topk], got {tuple(topk_idx.shape)}")
                topk_given = True
            cpp = _nvst.ep.DispatchHandle()
        K = topk_idx.shape[1] if topk_idx is not None else self.group_size
        if topk_weights is not None:
            check_tensor(topk_weights, where, "topk_weights", [torch.float32])
            if tuple(topk_weights.shape) != (T, K):
                _fail(fn, f"topk_weights must be [{T}, {K}], got {tuple(topk_weights.shape)}")
        config = config or self.get_dispatch_config(self.group_size)
        compute = self._begin(previous_event)
        if (fp8 and not x_scales.is_contiguous()) or topk_idx is None:
            # Inputs derived here are made on comm, after what it waits for
            # (previous_event: the caller's stream may not have reached this
            # call yet).
            with _CurrentStream(self._comm, compute):
                if fp8 and not x_scales.is_contiguous():  # DeepEP's column-major scales; our kernels read rows
                    x_scales = x_scales.contiguous()
                if topk_idx is None:  # each token to the first expert of every rank it goes to
                    first = torch.arange(self.group_size, device=x.device, dtype=torch.int64) * \
                        (num_experts // self.group_size)
                    topk_idx = torch.where(is_token_in_rank, first, -1)
                    topk_idx.record_stream(compute)  # kept by the handle, read on the caller's stream too
        out = self._normal.dispatch(x.data_ptr(), x_scales.data_ptr() if fp8 else 0, topk_idx.data_ptr(),
                                    topk_weights.data_ptr() if topk_weights is not None else 0, T, H, K,
                                    num_experts, fp8, expert_alignment, cpp, config.num_sms,
                                    config.threads_per_block, self._comm.cuda_stream)
        R = out["num_recv_tokens"]
        W = num_worst_tokens or R  # rows of the outputs
        if R > W:  # the dispatch may still read x: let it finish before the caller can free it
            self._comm.synchronize()
            _fail(fn, f"this rank received {R} tokens, more than num_worst_tokens {num_worst_tokens}")
        # Copied out of the buffer on comm, ordered after the dispatch; a
        # cached dispatch returns only the rows (and their scales). Rows past
        # R (num_worst_tokens) are padding: no expert (-1), weight 0, source
        # -1, x and scales left as they are (DeepEP's).
        wanted = [("recv_x", (H,), x.dtype, None)]
        if fp8:
            wanted += [("recv_x_scales", (H // 128,), torch.float32, None)]
        if not cached:  # the weights only where the caller routed with them (the kernel wrote none otherwise)
            wanted += [("recv_topk_idx", (K,), torch.int64, -1), ("recv_src_idx", (), torch.int32, -1)]
            if topk_weights is not None:
                wanted += [("recv_topk_weights", (K,), torch.float32, 0)]
        got = {}
        with _CurrentStream(self._comm, compute):
            for name, row, dtype, _ in wanted:
                got[name] = torch.empty((W, *row), dtype=dtype, device=x.device)
            self._normal.copy_out([got[name].data_ptr() for name, *_ in wanted], [out[name] for name, *_ in wanted],
                                  [R * math.prod(row) * dtype.itemsize for _, row, dtype, _ in wanted],
                                  self._comm.cuda_stream)
            for name, _, _, pad in wanted:
                if pad is not None and W > R:
                    got[name][R:].fill_(pad)
        for t in got.values():
            t.record_stream(compute)  # allocated on comm, used on the caller's stream
        recv_x, recv_scales = got["recv_x"], got.get("recv_x_scales")
        event = self._finish(compute, async_finish, [x, scales_given, x_scales, topk_idx, topk_weights])
        recv = (recv_x, recv_scales) if fp8 else recv_x
        if cached:
            return recv, None, None, None, None, event
        new_handle = DispatchHandle.make(self._num_nodes > 1, got["recv_src_idx"], is_token_in_rank, cpp=cpp,
                                         topk_idx=topk_idx, topk_weights=topk_weights, num_experts=num_experts,
                                         num_worst_tokens=num_worst_tokens, device=x.device)
        # With num_worst_tokens DeepEP returns no per-expert counts (it did not
        # wait for them); so do we, to be a drop-in.
        if num_worst_tokens:
            per_expert = []
        elif topk_given:
            per_expert = list(cpp.num_recv_tokens_per_expert)
        else:  # the routing named no experts: the counts come from num_tokens_per_expert, summed over ranks
            per_expert = self._experts_received(num_tokens_per_expert, expert_alignment)
        if not topk_given:
            return recv, None, None, per_expert, new_handle, event
        return recv, got["recv_topk_idx"], got.get("recv_topk_weights"), per_expert, new_handle, event

    def _experts_received(self, num_tokens_per_expert, expert_alignment):
        """This rank's experts' token counts over all ranks, each rounded up
        to expert_alignment (collective)."""
        total = num_tokens_per_expert.to(torch.int32).contiguous().clone()
        nd.all_reduce(total)
        E_local = total.numel() // self.group_size
        mine = total[self.rank * E_local:(self.rank + 1) * E_local].tolist()
        return [-(-c // expert_alignment) * expert_alignment for c in mine]

    def combine(self, x, handle, topk_weights=None, bias=None, config=None, previous_event=None,
                async_finish=False, allocate_on_comm_stream=False):
        """x: bf16 [rows, H], one row per row the dispatch returned (its
        received tokens, or num_worst_tokens rows, of which the padding is
        not read). Returns (combined_x [T, H] bf16, combined_topk_weights or
        None, event)."""
        fn = "combine"
        where = f"ep.Buffer.{fn}"
        if self._normal is None:
            _fail(fn, "this Buffer has no normal-mode memory (num_nvl_bytes = 0)")
        if not isinstance(handle, DispatchHandle):
            _fail(fn, "handle must be what dispatch returned", TypeError)
        check_tensor(x, where, "x", [torch.bfloat16])
        R = handle.num_rows  # the received rows, or num_worst_tokens (padding rows are not read)
        if x.dim() != 2 or x.shape[0] != R:
            _fail(fn, f"x must be [{R}, hidden] (one row per row the dispatch returned), got {tuple(x.shape)}")
        H = x.shape[1]
        T, K = handle.cpp.num_tokens, handle.cpp.num_topk
        if topk_weights is not None:
            check_tensor(topk_weights, where, "topk_weights", [torch.float32])
            if tuple(topk_weights.shape) != (R, K):
                _fail(fn, f"topk_weights must be [{R}, {K}], got {tuple(topk_weights.shape)}")
        biases = list(bias) if isinstance(bias, tuple) else [bias]  # DeepEP: a tensor or a pair
        if len(biases) not in (1, 2):
            _fail(fn, f"bias must be a tensor or a pair of tensors, got {len(biases)}")
        biases += [None] * (2 - len(biases))
        for i, b in enumerate(biases):
            if b is not None:
                check_tensor(b, where, f"bias[{i}]", [torch.bfloat16])
                if tuple(b.shape) != (T, H):
                    _fail(fn, f"bias[{i}] must be [{T}, {H}], got {tuple(b.shape)}")
        config = config or self.get_combine_config(self.group_size)
        compute = self._begin(previous_event)
        with _CurrentStream(self._comm if allocate_on_comm_stream else compute, compute):
            combined = torch.empty((T, H), dtype=torch.bfloat16, device=x.device)
            combined_w = torch.empty((T, K), dtype=torch.float32, device=x.device) if topk_weights is not None else None
        self._normal.combine(x.data_ptr(), topk_weights.data_ptr() if topk_weights is not None else 0,
                             biases[0].data_ptr() if biases[0] is not None else 0, H, handle.cpp,
                             combined.data_ptr(), combined_w.data_ptr() if combined_w is not None else 0,
                             config.num_sms, config.threads_per_block, self._comm.cuda_stream,
                             biases[1].data_ptr() if biases[1] is not None else 0)
        event = self._finish(compute, async_finish, [x, topk_weights, *biases, combined, combined_w])
        return combined, combined_w, event

    # ---- low-latency mode --------------------------------------------------------
    def _low_latency_buffer(self, fn, M, H, E, K):
        shape = (M, H, E, K)
        if self._ll is None:
            need = self.get_low_latency_rdma_size_hint(M, H, self.group_size, E, K)
            if need > self.num_rdma_bytes:
                _fail(fn, f"num_rdma_bytes {self.num_rdma_bytes} is below get_low_latency_rdma_size_hint("
                      f"{M}, {H}, {self.group_size}, {E}, {K}) = {need}")
            self._ll = _nvst.ep.Buffer(0, M, H, E, K)  # collective: every rank is in this call
            self._ll_owner = _LowLatencyOwner(self._ll)
            self._ll_shape = shape
            self._ll_x_shape = (E // self.group_size, self.group_size * M, H)
        elif shape != self._ll_shape:
            _fail(fn, f"shape (tokens per rank, hidden, experts, top-k) {shape} differs from the first call's "
                  f"{self._ll_shape}")
        return self._ll

    @staticmethod
    def _receiving(owner, fn):
        """The C++ buffers for a receive hook. A hook holds the owner, not
        the buffers, so that destroy() frees them although a hook is kept."""
        if owner.ll is None:
            _fail(fn, "the hook's Buffer was destroyed (destroy()) before the hook was called")
        return owner.ll

    def _ll_outputs(self, index, use_fp8, use_ue8m0):
        """What a low_latency_dispatch into buffer set `index` returns:
        (recv_x, or (recv_x, scales), recv_count, handle). The buffers never
        move while self._ll lives, so each set's tensors and handle are made
        once (DLPack and a view: microseconds a tensor) and every later call
        into that set returns the same objects: views of the memory that the
        dispatch after next overwrites, as DeepEP's are. What the handle
        computes when read is forgotten here, since it was of an earlier
        dispatch."""
        key = (index, use_fp8, use_ue8m0)
        out = self._ll_out.get(key)
        if out is not None:
            out[2].__dict__.pop("_computed", None)
            return out
        M, H, E, _ = self._ll_shape
        E_local = E // self.group_size
        x_addr, scales_addr, count_addr, info_addr, rows = self._ll.low_latency_views(index, use_fp8)
        owner = self._ll_owner
        recv_x = tensor_at(x_addr, (E_local, rows, H), _FP8 if use_fp8 else torch.bfloat16, owner)
        if use_fp8:  # stored [E_local][columns][rows]: DeepEP's column-major scales, as a transposed view
            columns, dtype = (H // 512, torch.int32) if use_ue8m0 else (H // 128, torch.float32)
            recv_x = (recv_x, tensor_at(scales_addr, (E_local, columns, rows), dtype, owner).transpose(1, 2))
        src_info = tensor_at(info_addr, (E_local, rows, 3), torch.int32, owner)
        recv_count = tensor_at(count_addr, (E_local,), torch.int32, owner)
        handle = LowLatencyHandle((src_info[..., 1], _LATER, M, H, E), buffer_index=index, src_info=src_info,
                                  recv_count=recv_count)
        out = (recv_x, recv_count, handle)
        self._ll_out[key] = out
        return out

    def _ll_inputs(self, fn, x, topk_idx):
        """(T, H, K) of a dispatch's x [T, H] bf16 and topk_idx [T, K] int64,
        contiguous on this PE's GPU. The good case is one expression (each
        tensor attribute read costs about 0.1 us of a call's few); only a bad
        input goes through the checks that say what is wrong."""
        d = self._device
        try:
            T, H = x.shape
            T_idx, K = topk_idx.shape
            if (T == T_idx and x.dtype is torch.bfloat16 and topk_idx.dtype is torch.int64 and x.get_device() == d
                    and topk_idx.get_device() == d and x.is_contiguous() and topk_idx.is_contiguous()):
                return T, H, K
        except (AttributeError, TypeError, ValueError):  # not tensors, or not 2-D: said below
            pass
        where = f"ep.Buffer.{fn}"
        check_tensor(x, where, "x", [torch.bfloat16], d)
        check_tensor(topk_idx, where, "topk_idx", [torch.int64], d)
        _fail(fn, f"x must be [T, H] and topk_idx [T, K]; got {tuple(x.shape)} and {tuple(topk_idx.shape)}")

    def low_latency_dispatch(self, x, topk_idx, num_max_dispatch_tokens_per_rank, num_experts,
                             cumulative_local_expert_recv_stats=None, dispatch_wait_recv_cost_stats=None,
                             use_fp8=True, round_scale=False, use_ue8m0=False, async_finish=False,
                             return_recv_hook=False):
        """Returns (recv_x, recv_count, handle, event, hook). recv_x is bf16
        [E_local, ranks x M, H], or (fp8, scales): float32 [.., H / 128], or
        with use_ue8m0 int32 [.., H / 512] holding four UE8M0 exponent bytes
        each; the scales' last two dimensions are column-major (DeepEP's).
        Views of the buffer (the same tensor objects every other call). With
        return_recv_hook the data is only sent: call hook() to receive (on
        the then-current stream). dispatch_wait_recv_cost_stats (int64
        [ranks]) gains, per source rank, the GPU clock cycles the receive
        waited for it."""
        fn = "low_latency_dispatch"
        if use_ue8m0 and not (use_fp8 and round_scale):
            _fail(fn, "use_ue8m0 needs use_fp8=True and round_scale=True (UE8M0 keeps only a power of two)")
        wait_stats = 0
        if dispatch_wait_recv_cost_stats is not None:
            wait_stats = self._check_stats(fn, "dispatch_wait_recv_cost_stats", dispatch_wait_recv_cost_stats,
                                           torch.int64, self.group_size, "one per rank")
        stats = cumulative_local_expert_recv_stats
        if stats is not None:
            self._check_stats(fn, "cumulative_local_expert_recv_stats", stats, torch.int32,
                              num_experts // self.group_size, "the local experts")
        T, H, K = self._ll_inputs(fn, x, topk_idx)
        M = num_max_dispatch_tokens_per_rank
        if T > M:
            _fail(fn, f"{T} tokens exceed num_max_dispatch_tokens_per_rank {M}")
        if use_ue8m0 and H % 512:
            _fail(fn, f"use_ue8m0 packs four scales of 128 channels: hidden {H} must be a multiple of 512")
        ll = self._ll
        if ll is None or (M, H, num_experts, K) != self._ll_shape:  # the first call, or a wrong shape
            ll = self._low_latency_buffer(fn, M, H, num_experts, K)
        stream = self._comm if async_finish else None  # None: the caller's current stream
        compute = self._begin(None) if async_finish else None
        flags = (1 if use_fp8 else 0) | (2 if round_scale else 0) | (4 if use_ue8m0 else 0)
        x_at, idx_at = x.data_ptr(), topk_idx.data_ptr()
        index = ll.low_latency_dispatch(x_at, idx_at, T, H, K, num_experts, flags, self._raw(stream),
                               1 if return_recv_hook else 0, -1, wait_stats)
        recv_x, recv_count, handle = self._ll_outputs(index, use_fp8, use_ue8m0)
        if stats is not None and not return_recv_hook:  # the counts, once received, on that stream
            if stream is None:
                stats.add_(recv_count)
            else:
                with torch.cuda.stream(stream):
                    stats.add_(recv_count)
        event = (self._finish(compute, True, [x, topk_idx, stats, dispatch_wait_recv_cost_stats]) if async_finish
                 else _NO_EVENT)
        if not return_recv_hook:
            return recv_x, recv_count, handle, event, None
        owner = self._ll_owner

        def receive():
            self._receiving(owner, fn).low_latency_dispatch(x_at, idx_at, T, H, K, num_experts, flags,
                                                   current_stream(self._device), 2, index, wait_stats)
            if stats is not None:
                stats.add_(recv_count)
        return recv_x, recv_count, handle, event, receive

    def _check_stats(self, fn, name, t, dtype, n, what):
        """The address of an optional statistics tensor `dtype` [n] (0: none)."""
        if t is None:
            return 0
        check_tensor(t, f"ep.Buffer.{fn}", name, [dtype], self._device)
        if tuple(t.shape) != (n,):
            _fail(fn, f"{name} must be [{n}] ({what}), got {tuple(t.shape)}")
        return t.data_ptr()

    def get_next_low_latency_combine_buffer(self, handle):
        """DeepEP's zero-copy combine input: a bf16 [E_local, ranks x M, H]
        tensor to write the experts' output into; a combine with
        zero_copy=True then reads it (DeepEP's form). One per buffer set,
        kept by this Buffer. Our combine reads any x in place, so this saves
        nothing; it is here so that code written for DeepEP runs unchanged."""
        fn = "get_next_low_latency_combine_buffer"
        if not isinstance(handle, LowLatencyHandle):
            _fail(fn, "handle must be what low_latency_dispatch returned", TypeError)
        if self._ll is None:
            _fail(fn, "call low_latency_dispatch first")
        M, H, E, _ = self._ll_shape
        shape = (E // self.group_size, self.group_size * M, H)
        if handle.buffer_index not in self._zero_copy_x:
            self._zero_copy_x[handle.buffer_index] = torch.empty(shape, dtype=torch.bfloat16,
                                                                 device=f"cuda:{_nvst.device()}")
        return self._zero_copy_x[handle.buffer_index]

    def _ll_combine_inputs(self, fn, x, topk_idx, topk_weights, out, x_dtypes, out_dtype):
        """T of a combine's x ([E_local, ranks x M, H], a dtype of x_dtypes),
        topk_idx (int64 [T, K]), topk_weights (float32 [T, K]) and out
        (`out_dtype` [T, H], or None), contiguous on this PE's GPU. The good
        case is one expression that reads each attribute once (a read costs
        about 0.1 us of a call's few); only a bad input goes through the
        checks that say what is wrong."""
        d = self._device
        try:
            T, K = shape = topk_idx.shape
            if (K == self._ll_shape[3] and x.dtype in x_dtypes and topk_idx.dtype is torch.int64
                    and topk_weights.dtype is torch.float32 and x.shape == self._ll_x_shape
                    and topk_weights.shape == shape and x.get_device() == d and topk_idx.get_device() == d
                    and topk_weights.get_device() == d and x.is_contiguous() and topk_idx.is_contiguous()
                    and topk_weights.is_contiguous()
                    and (out is None or (out.dtype is out_dtype and out.shape == (T, self._ll_shape[1])
                                         and out.get_device() == d and out.is_contiguous()))):
                return T
        except (AttributeError, TypeError, ValueError):  # not tensors, or topk_idx not 2-D: said below
            pass
        K, H = self._ll_shape[3], self._ll_shape[1]
        where = f"ep.Buffer.{fn}"
        check_tensor(x, where, "x", list(x_dtypes), d)
        check_tensor(topk_idx, where, "topk_idx", [torch.int64], d)
        check_tensor(topk_weights, where, "topk_weights", [torch.float32], d)
        if tuple(x.shape) != self._ll_x_shape:
            _fail(fn, f"x must be [{', '.join(map(str, self._ll_x_shape))}], got {tuple(x.shape)}")
        if topk_idx.dim() != 2 or topk_idx.shape[1] != K or tuple(topk_weights.shape) != tuple(topk_idx.shape):
            _fail(fn, f"topk_idx and topk_weights must both be [T, {K}]; got {tuple(topk_idx.shape)} and "
                  f"{tuple(topk_weights.shape)}")
        T = topk_idx.shape[0]
        if out is not None:
            check_tensor(out, where, "out", [out_dtype], d)
            if tuple(out.shape) != (T, H):
                _fail(fn, f"out must be [{T}, {H}], got {tuple(out.shape)}")
        return T

    def low_latency_combine(self, x, topk_idx, topk_weights, handle, use_logfmt=False, zero_copy=False,
                            async_finish=False, return_recv_hook=False, out=None, combine_wait_recv_cost_stats=None):
        """x: bf16 [E_local, ranks x M, H], packed as dispatched. Returns
        (combined_x bf16 [T, H], event, hook). combine_wait_recv_cost_stats
        (int64 [ranks]) gains the GPU clock cycles waited for each rank.
        use_logfmt=True sends this rank's rows as LogFMT-10: groups of 128
        channels all under 1 in magnitude go as 10 bits a value (relative
        error at most 2.2 %), other groups as bf16."""
        return self._ll_combine("low_latency_combine", x, topk_idx, topk_weights, handle, use_logfmt, zero_copy,
                                async_finish, return_recv_hook, out, combine_wait_recv_cost_stats,
                                _BF16_ONLY, torch.bfloat16)

    def _ll_combine(self, fn, x, topk_idx, topk_weights, handle, use_logfmt, zero_copy, async_finish,
                    return_recv_hook, out, combine_wait_recv_cost_stats, x_dtypes, out_dtype):
        """low_latency_combine with the rows' dtype one of x_dtypes (bf16,
        fp16) and the output's out_dtype (bf16, fp16, or float32: the sums
        unrounded); nvshmem_tutorial.pplx's combine uses the wider forms."""
        if not isinstance(handle, LowLatencyHandle):
            _fail(fn, "handle must be what low_latency_dispatch returned", TypeError)
        if self._ll is None:
            _fail(fn, "call low_latency_dispatch first")
        index = handle.buffer_index
        source = x
        if zero_copy:  # DeepEP's: the data is already in the combine buffer; x gives only its shape
            source = self._zero_copy_x.get(index)
            if source is None:
                _fail(fn, "zero_copy=True needs get_next_low_latency_combine_buffer(handle), filled, first")
        wait_stats = 0
        if combine_wait_recv_cost_stats is not None:
            wait_stats = self._check_stats(fn, "combine_wait_recv_cost_stats", combine_wait_recv_cost_stats,
                                           torch.int64, self.group_size, "one per rank")
        T = self._ll_combine_inputs(fn, x, topk_idx, topk_weights, out, x_dtypes, out_dtype)
        if use_logfmt and source.dtype is not torch.bfloat16:
            _fail(fn, f"use_logfmt encodes bf16 rows; x is {source.dtype}")
        _, H, E, K = self._ll_shape
        if out is None:
            out = x.new_empty((T, H), dtype=out_dtype)  # on x's device
        stream = self._comm if async_finish else None  # None: the caller's current stream
        compute = self._begin(None) if async_finish else None
        args = (source.data_ptr(), topk_idx.data_ptr(), topk_weights.data_ptr(), T, H, K, E, index, out.data_ptr())
        flags = ((1 if use_logfmt else 0) | (2 if source.dtype is torch.float16 else 0)
                 | _COMBINE_OUT_FLAGS[out_dtype])
        self._ll.low_latency_combine(*args, self._raw(stream), 1 if return_recv_hook else 0, wait_stats, flags)
        event = (self._finish(compute, True, [x, topk_idx, topk_weights, out, combine_wait_recv_cost_stats])
                 if async_finish else _NO_EVENT)
        if not return_recv_hook:
            return out, event, None
        owner = self._ll_owner

        def receive():
            self._receiving(owner, fn).low_latency_combine(*args, current_stream(self._device), 2, wait_stats, flags)
        return out, event, receive

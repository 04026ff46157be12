"""The seed tutorial's NvshmemBuffer on this library: barrier, send/recv
and all-gather of torch tensors between the ranks of a torch.distributed
group, launched with torchrun.

send/recv go through a symmetric staging area: each rank has one slot per
peer of num_nvl_bytes / num_ranks bytes (at least 1 MiB), a data signal and
a credit signal per peer. A message larger than a slot moves in slot-sized
pieces; the sender waits (on its stream, not the host) for the receiver's
credit before reusing the slot, so nothing is overwritten before it is read.
A peer on another node is reached through the proxy transport, which the
seed's version could not do; internode_all_gather is a ring of these
send/recv. Every wait has the device timeout
(NVST_DEVICE_TIMEOUT_S): a send with no matching recv ends the job with a
message rather than hanging.
"""
import torch
import torch.distributed as dist

from . import _nvst
from . import distributed as nd
from .tensors import (
    alloc_tensor,
    check_tensor,
    current_stream,
    init_from_torch,
    nvshmem_barrier,
    nvshmem_free_tensor,
    reserve_heap,
    via_proxy,
)

_MIN_SLOT = 1 << 20


class NvshmemBuffer:
    def __init__(self, group, rank, num_ranks, num_nvl_bytes, num_rdma_bytes, low_latency_mode=False,
                 backend=""):
        # backend: as init_from_torch's ('' = the job's, NVST_BACKEND), which checks it.
        # A job this constructor starts gets a heap that holds its staging area.
        reserve_heap(2 * max(_MIN_SLOT * num_ranks, num_nvl_bytes, num_rdma_bytes) + (4 << 20))
        init_from_torch(group, backend)
        self.group = group
        self.group_size = dist.get_world_size(group)
        if rank != dist.get_rank(group) or num_ranks != self.group_size:
            raise ValueError(f"nvshmem_tutorial.NvshmemBuffer: rank {rank} / num_ranks {num_ranks} disagree with the "
                             f"group (rank {dist.get_rank(group)} of {self.group_size})")
        if num_nvl_bytes < 0 or num_rdma_bytes < 0:
            raise ValueError("nvshmem_tutorial.NvshmemBuffer: num_nvl_bytes and num_rdma_bytes must be >= 0")
        self.rank = rank
        self.num_ranks = num_ranks
        self.num_nvl_bytes = num_nvl_bytes
        self.num_rdma_bytes = num_rdma_bytes
        self.low_latency_mode = low_latency_mode
        # The seed's "RDMA ranks" are nodes: PEs that reach each other by NVLink.
        self._node_size = _nvst.team_n_pes(_nvst.TEAM_NODE)
        self.num_rdma_ranks = num_ranks // self._node_size
        slot = max(_MIN_SLOT, max(num_nvl_bytes, num_rdma_bytes) // max(num_ranks, 1)) // 16 * 16
        self.slot_bytes = slot
        self._slots = alloc_tensor((num_ranks, slot), torch.uint8)  # [src] at the receiver
        # Peers reached through the proxy, which reads from the symmetric heap
        # (a staging slot). With several nodes every PE has such a peer, so
        # all PEs make the same (collective) allocation.
        self._via_proxy = [via_proxy(p) for p in range(num_ranks)]
        self._stage = alloc_tensor((slot,), torch.uint8) if any(self._via_proxy) else None
        self._data_sig = alloc_tensor((num_ranks,), torch.int64)  # [src]: pieces that arrived
        self._credit_sig = alloc_tensor((num_ranks,), torch.int64)  # [dst]: pieces dst consumed
        self._sent = [0] * num_ranks
        self._received = [0] * num_ranks
        _nvst.coll_prepare(_nvst.TEAM_NODE)  # intranode_barrier's workspace (collective)
        nvshmem_barrier()

    def destroy(self):
        """Collective: frees the staging area."""
        for t in (self._slots, self._stage, self._data_sig, self._credit_sig):
            if t is not None:
                nvshmem_free_tensor(t)
        self._slots = self._stage = self._data_sig = self._credit_sig = None

    def get_local_device_id(self):
        return _nvst.device()

    def get_num_device_sms(self):
        return torch.cuda.get_device_properties(_nvst.device()).multi_processor_count

    def barrier(self):
        """Blocking barrier over every rank."""
        nvshmem_barrier()

    def intranode_barrier(self):
        """Blocking barrier over the ranks of this node."""
        stream = current_stream()
        _nvst.coll.barrier(stream, _nvst.TEAM_NODE)
        torch.cuda.current_stream().synchronize()

    def is_same_rdma_rank(self, rank):
        """Whether `rank` is on this rank's node (the seed: the same RDMA rank)."""
        if not 0 <= rank < self.num_ranks:
            raise ValueError(f"nvshmem_tutorial.NvshmemBuffer.is_same_rdma_rank: rank {rank} is not in "
                             f"[0, {self.num_ranks})")
        return rank // self._node_size == self.rank // self._node_size

    # ---- point to point ---------------------------------------------------------
    def _peer(self, peer, fn):
        if not 0 <= peer < self.num_ranks or peer == self.rank:
            raise ValueError(f"nvshmem_tutorial.NvshmemBuffer.{fn}: peer {peer} must be another rank in "
                             f"[0, {self.num_ranks})")

    def _sig(self, words, index):
        return words.data_ptr() + 8 * index

    def send(self, tensor, rank):
        """Sends `tensor` to `rank`'s matching recv; ordered on the current
        stream (returns before the data has arrived). Any rank: another
        node's is reached through the proxy."""
        dst_rank = rank
        check_tensor(tensor, "NvshmemBuffer.send", "tensor")
        self._peer(dst_rank, "send")
        stream = current_stream()
        data = tensor.view(-1).view(torch.uint8)
        for start in range(0, data.numel(), self.slot_bytes):
            piece = data[start:start + self.slot_bytes]
            # The slot at dst_rank is free once it has consumed every earlier piece.
            _nvst.signal_wait_until_on_stream(self._sig(self._credit_sig, dst_rank), "ge", self._sent[dst_rank],
                                              stream)
            src = piece
            if self._via_proxy[dst_rank]:
                self._stage[: piece.numel()].copy_(piece)
                src = self._stage
            _nvst.putmem_signal_on_stream(self._slots[self.rank].data_ptr(), src.data_ptr(), piece.numel(),
                                          self._sig(self._data_sig, self.rank), 1, True, dst_rank, stream)
            self._sent[dst_rank] += 1

    def recv(self, tensor, rank):
        """Receives `rank`'s matching send into `tensor` (same byte size);
        ordered on the current stream."""
        src_rank = rank
        check_tensor(tensor, "NvshmemBuffer.recv", "tensor")
        self._peer(src_rank, "recv")
        stream = current_stream()
        data = tensor.view(-1).view(torch.uint8)
        for start in range(0, data.numel(), self.slot_bytes):
            piece = data[start:start + self.slot_bytes]
            self._received[src_rank] += 1
            _nvst.signal_wait_until_on_stream(self._sig(self._data_sig, src_rank), "ge", self._received[src_rank],
                                              stream)
            piece.copy_(self._slots[src_rank, : piece.numel()])
            _nvst.signal_op_on_stream(self._sig(self._credit_sig, self.rank), 1, True, src_rank, stream)

    def intranode_send(self, tensor, rank):
        self.send(tensor, rank)

    def intranode_recv(self, tensor, rank):
        self.recv(tensor, rank)

    def internode_send(self, tensor, rank):
        self.send(tensor, rank)

    def internode_recv(self, tensor, rank):
        self.recv(tensor, rank)

    # ---- all-gather -----------------------------------------------------------------
    def all_gather_into_tensor(self, output_tensor, tensor, async_op=False):
        """output_tensor [num_ranks, ...] (or num_ranks x tensor's elements)
        <- every rank's tensor, in rank order."""
        return nd.all_gather_into_tensor(output_tensor, tensor, async_op=async_op)

    def _check_gather(self, fn, tensor_list, tensor):
        if len(tensor_list) != self.num_ranks:
            raise ValueError(f"nvshmem_tutorial.NvshmemBuffer.{fn}: tensor_list has {len(tensor_list)} "
                             f"tensors; the group has {self.num_ranks} ranks")
        check_tensor(tensor, f"NvshmemBuffer.{fn}", "tensor")
        for r, t in enumerate(tensor_list):
            if t.shape != tensor.shape or t.dtype != tensor.dtype:
                raise ValueError(f"nvshmem_tutorial.NvshmemBuffer.{fn}: tensor_list[{r}] is "
                                 f"{tuple(t.shape)} {t.dtype}; expected {tuple(tensor.shape)} {tensor.dtype}")

    def all_gather(self, tensor_list, tensor, async_op=False):
        """torch.distributed.all_gather's form: tensor_list[r] <- rank r's tensor."""
        self._check_gather("all_gather", tensor_list, tensor)
        out = torch.empty((self.num_ranks,) + tuple(tensor.shape), dtype=tensor.dtype, device=tensor.device)
        work = nd.all_gather_into_tensor(out, tensor, async_op=async_op)
        for r, t in enumerate(tensor_list):
            t.copy_(out[r])
        return work

    def intranode_all_gather(self, tensor_list, tensor, async_op=False):
        """all_gather; tensor_list may also be one tensor of num_ranks rows
        (the seed's all_gather_into_tensor passes that)."""
        if isinstance(tensor_list, torch.Tensor):
            return self.all_gather_into_tensor(tensor_list, tensor, async_op)
        return self.all_gather(tensor_list, tensor, async_op)

    def internode_all_gather(self, tensor_list, tensor, async_op=False):
        """all_gather across nodes as the seed has it: a ring of this
        buffer's send/recv (which reach other nodes through the proxy): in
        step s every rank sends its tensor to rank + s and receives
        rank - s's. (The library's GPU all_gather now reaches other nodes
        too, but has not run from Python across nodes.) All ranks of one
        node: all_gather.
        """
        if not any(self._via_proxy):
            return self.all_gather(tensor_list, tensor, async_op)
        self._check_gather("internode_all_gather", tensor_list, tensor)
        tensor_list[self.rank].copy_(tensor)
        n = self.num_ranks
        for step in range(1, n):
            dst, src = (self.rank + step) % n, (self.rank - step) % n
            # A send larger than one slot waits (on the stream) for its
            # receiver; the largest rank of every cycle of this step receives
            # first, so no cycle of ranks waits on itself.
            if self.rank < src:
                self.send(tensor, dst)
                self.recv(tensor_list[src], src)
            else:
                self.recv(tensor_list[src], src)
                self.send(tensor, dst)
        return nd.Work() if async_op else None

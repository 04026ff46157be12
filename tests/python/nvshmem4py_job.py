"""NVSHMEM started by nvshmem4py, then nvshmem_tutorial on it.

Run under torchrun where nvshmem4py-cu13 is installed:
  torchrun --nproc_per_node=N tests/python/nvshmem4py_job.py
NVST_TEST_SHARE_GPUS=1 lets ranks share one GPU (torch.distributed on gloo).

What it checks, every result against data computed here:
 - nvshmem4py starts NVSHMEM (UID bootstrap, the UID sent over torch);
   init_from_torch(backend="nvshmem") joins it instead of starting its own;
 - nvshmem4py's tensors as sources of our puts, into our symmetric tensors,
   and the reverse: our symmetric tensors (through nvshmem4py_buffer) as
   nvshmem4py's put destination and source (on this backend our heap lies
   inside NVSHMEM's);
 - nvshmem4py's tensors as the remote side of our copies: destination of
   put_tensor, of the seed's nvshmem_put_tensor (a byte count short of the
   whole) and of its async form, whole and as a slice at an offset; remote
   source of nvshmem_get_tensor and get_tensor_async. The destination is
   poisoned first, and the bytes past the count must keep the poison;
 - a plain torch CUDA tensor as the remote side of a put or a get raises
   a RuntimeError that names its address and says neither heap holds it;
 - our kernels on that NVSHMEM (NvshmemBuffer send/recv calls nvshmem_*
   from device code: the device state nvst set up for its own module);
 - nvshmem4py's own put and reduce on its tensors still work beside ours.
Prints "DONE <failures> failure(s)" per rank; exits with the failure count.
"""
import os
import sys

import numpy as np
import torch
import torch.distributed as dist
from job_checks import Checks, join_torch  # this folder (the script's own)

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
SHARE = os.environ.get("NVST_TEST_SHARE_GPUS") == "1"
DEV = join_torch(int(os.environ.get("LOCAL_RANK", "0")), SHARE)
LOCAL = DEV.index
GLOO = dist.new_group(backend="gloo")

import nvshmem.core as nvshmem  # noqa: E402 - after torch.distributed, as a job would
from cuda.core import Device  # noqa: E402

# nvshmem4py starts NVSHMEM: rank 0's unique ID goes to every rank over gloo.
device = Device(LOCAL)
device.set_current()
uid = nvshmem.get_unique_id(empty=RANK != 0)
uid_bytes = torch.from_numpy(uid._data.view(np.int8).copy())
dist.broadcast(uid_bytes, 0, group=GLOO)
uid._data.view(np.int8)[:] = uid_bytes.numpy()
nvshmem.init(device=device, uid=uid, rank=RANK, nranks=WORLD, initializer_method="uid")

import nvshmem_tutorial as nt  # noqa: E402

nt.init_from_torch(backend="nvshmem")
check = Checks(RANK, lambda: dist.barrier(group=GLOO))


def rand(n, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randn(n, generator=g).to(DEV)


@check("nvst joined the NVSHMEM that nvshmem4py started")
def _():
    assert nt.heap_kind() == "nvshmem", nt.heap_kind()
    assert nt.my_pe() == nvshmem.my_pe() == RANK and nt.n_pes() == nvshmem.n_pes() == WORLD


@check("nvshmem4py tensor -> nvst put -> nvst symmetric tensor of the next rank")
def _():
    n = 100_003
    theirs = nvshmem.tensor((n,), dtype=torch.float32)
    theirs.copy_(rand(n, 10 + RANK))
    ours = nt.alloc_tensor((n,), torch.float32)
    ours.fill_(-7)
    nt.nvshmem_barrier()
    nt.put_tensor(ours, theirs, (RANK + 1) % WORLD)
    nt.nvshmem_barrier()
    assert torch.equal(ours, rand(n, 10 + (RANK - 1) % WORLD)), "received rows differ"
    nt.nvshmem_free_tensor(ours)
    nvshmem.free_tensor(theirs)


@check("nvshmem4py tensors as the remote side: destination of our puts, source of our gets")
def _():
    n = 50_001
    peer, prev = (RANK + 1) % WORLD, (RANK - 1) % WORLD
    src = rand(n, 50 + RANK)  # a plain CUDA tensor: the local side may be any
    want = rand(n, 50 + prev)  # what the previous rank puts here
    theirs = nvshmem.tensor((n,), dtype=torch.float32)

    def put_then_check(put, what, lo=0, hi=n):
        """Poisons theirs, lets every rank `put` into its peer's, and checks
        theirs[lo:hi] holds the previous rank's src[:hi-lo], the rest poison."""
        theirs.fill_(-9)
        nt.nvshmem_barrier()  # every poison lands before any put
        put()
        nt.nvshmem_barrier()  # waits for this GPU's work, then every PE's
        got = theirs.clone()
        assert torch.equal(got[lo:hi], want[:hi - lo]), f"{what}: received values differ"
        assert bool((got[:lo] == -9).all()) and bool((got[hi:] == -9).all()), f"{what}: wrote outside [{lo}, {hi})"

    put_then_check(lambda: nt.put_tensor(theirs, src, peer), "put_tensor")
    k = n - 1234  # a byte count short of the tensors
    put_then_check(lambda: nt.nvshmem_put_tensor(theirs, src, k * 4, peer), "nvshmem_put_tensor", 0, k)
    put_then_check(lambda: nt.nvshmem_put_tensor_async(theirs, src, k * 4, peer), "nvshmem_put_tensor_async", 0, k)
    lo, m = 777, 20_000  # a slice at an offset: only [lo, lo + m) may change
    put_then_check(lambda: nt.put_tensor_async(theirs[lo:lo + m], src[:m], peer), "put_tensor_async slice",
                   lo, lo + m)

    theirs.copy_(rand(n, 60 + RANK))  # each rank's own values, read by the previous rank
    nt.nvshmem_barrier()
    got = torch.full((n,), -9.0, device=DEV)
    nt.nvshmem_get_tensor(got, theirs, k * 4, peer)
    from_peer = rand(n, 60 + peer)
    assert torch.equal(got[:k], from_peer[:k]) and bool((got[k:] == -9).all()), "nvshmem_get_tensor"
    got.fill_(-9)
    nt.get_tensor_async(got[lo:lo + m], theirs[lo:lo + m], peer)
    torch.cuda.current_stream().synchronize()
    assert torch.equal(got[lo:lo + m], from_peer[lo:lo + m]), "get_tensor_async slice"
    assert bool((got[:lo] == -9).all()) and bool((got[lo + m:] == -9).all()), "get_tensor_async wrote outside"
    nt.nvshmem_barrier()  # no peer still reads theirs
    nvshmem.free_tensor(theirs)


@check("a plain torch CUDA tensor as the remote side raises, naming its address")
def _():
    peer = (RANK + 1) % WORLD
    plain = torch.zeros(64, device=DEV)
    local = torch.ones(64, device=DEV)
    for what, call in (("put_tensor", lambda: nt.put_tensor(plain, local, peer)),
                       ("nvshmem_put_tensor_async", lambda: nt.nvshmem_put_tensor_async(plain, local, 128, peer)),
                       ("nvshmem_get_tensor", lambda: nt.nvshmem_get_tensor(local, plain, 128, peer))):
        try:
            call()
        except RuntimeError as e:
            msg = str(e)
            assert f"{plain.data_ptr():#x}" in msg and "neither" in msg and "NVSHMEM" in msg, f"{what}: {msg}"
        else:
            raise AssertionError(f"{what} accepted a tensor in neither symmetric heap")
    torch.cuda.synchronize()
    assert bool((plain == 0).all()) and bool((local == 1).all()), "a refused copy wrote something"


@check("nvst symmetric tensors in nvshmem4py's put, as destination and as source")
def _():
    n = 65_537
    stream = torch.cuda.current_stream()
    ours_dst = nt.alloc_tensor((n,), torch.float32)
    ours_src = nt.alloc_tensor((n,), torch.float32)
    ours_src.copy_(rand(n, 40 + RANK))
    ours_dst.fill_(-3)
    theirs = nvshmem.tensor((n,), dtype=torch.float32)
    theirs.fill_(-5)
    nt.nvshmem_barrier()
    peer = (RANK + 1) % WORLD
    dst_buf, src_buf = nt.nvshmem4py_buffer(ours_dst), nt.nvshmem4py_buffer(ours_src)
    nvshmem.put(dst_buf, src_buf, remote_pe=peer, stream=stream)  # ours -> ours, by nvshmem4py
    nvshmem.put(theirs, src_buf, remote_pe=peer, stream=stream)  # ours -> theirs
    nvshmem.barrier_all(stream=stream)
    stream.synchronize()
    want = rand(n, 40 + (RANK - 1) % WORLD)
    assert torch.equal(ours_dst, want), "nvshmem4py's put into our tensor"
    assert torch.equal(theirs, want), "nvshmem4py's put from our tensor"
    nt.nvshmem_barrier()
    nt.nvshmem_free_tensor(ours_dst)
    nt.nvshmem_free_tensor(ours_src)
    nvshmem.free_tensor(theirs)


@check("nvst kernels on it: NvshmemBuffer send/recv ring")
def _():
    buf = nt.NvshmemBuffer(None, RANK, WORLD, num_nvl_bytes=WORLD << 20, num_rdma_bytes=0, backend="nvshmem")
    if WORLD > 1:
        n = (3 << 20) // 2 + 5  # more than one slot
        x = rand(n, 20 + RANK).half()
        got = torch.full((n,), 9, dtype=torch.float16, device=DEV)
        if RANK % 2 == 0:
            buf.send(x, (RANK + 1) % WORLD)
            buf.recv(got, (RANK - 1) % WORLD)
        else:
            buf.recv(got, (RANK - 1) % WORLD)
            buf.send(x, (RANK + 1) % WORLD)
        torch.cuda.synchronize()
        assert torch.equal(got, rand(n, 20 + (RANK - 1) % WORLD).half()), "send/recv data differ"
    buf.barrier()
    buf.destroy()


@check("nvshmem4py's own put (and sum-reduce, a GPU per rank) still work beside nvst")
def _():
    n = 4096
    stream = torch.cuda.current_stream()
    src = nvshmem.tensor((n,), dtype=torch.float32)
    dst = nvshmem.tensor((n,), dtype=torch.float32)
    src.copy_(rand(n, 30 + RANK))
    dst.fill_(-1)
    nvshmem.barrier_all(stream=stream)
    nvshmem.put(dst, src, remote_pe=(RANK + 1) % WORLD, stream=stream)
    nvshmem.barrier_all(stream=stream)
    stream.synchronize()
    assert torch.equal(dst, rand(n, 30 + (RANK - 1) % WORLD)), "nvshmem4py put"
    # NVSHMEM's stream collectives exit the process when PEs share a GPU
    # without MPS ("not supported with limited MPG"): only with a GPU each.
    if not SHARE:
        nvshmem.reduce(nvshmem.Teams.TEAM_WORLD, dst, src, "sum", stream=stream)
        stream.synchronize()
        want = sum(rand(n, 30 + r) for r in range(WORLD))
        torch.testing.assert_close(dst, want, rtol=1e-5, atol=1e-5)
    nvshmem.free_tensor(src)
    nvshmem.free_tensor(dst)


dist.barrier(group=GLOO)
failed = check.done()
nt.finalize()
nvshmem.finalize()
dist.destroy_process_group()
sys.exit(failed)

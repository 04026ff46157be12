"""PyTorch on the runtime: joining from torch.distributed, symmetric tensors,
one-sided tensor copies.

The compiled module (_nvst) knows nothing of torch: it takes device
addresses and CUDA streams as ints. This file checks the tensors (CUDA, on
this PE's GPU, contiguous, supported dtype, sizes) and raises an exception
that says what was wrong before anything reaches the GPU. Copies are
ordered on torch's current stream; the blocking forms then wait for it.
"""
import math
import os
import socket

import torch
import torch.distributed as dist
import torch.utils.dlpack

from . import _nvst

# The dtypes the collectives reduce; raw copies take any dtype.
DTYPE_NAMES = {
    torch.float32: "float32",
    torch.bfloat16: "bfloat16",
    torch.float16: "float16",
    torch.int32: "int32",
    torch.int64: "int64",
}

# The same dtypes as the codes the compiled collectives take.
DTYPE_CODES = {dtype: _nvst.coll.DTYPES[name] for dtype, name in DTYPE_NAMES.items()}

_state = {"group": None}
_allocations: set[int] = set()  # base addresses of live nvshmem_alloc_tensor results


# torch's C accessor of the current stream: an int, without building the
# torch.cuda.Stream object that torch.cuda.current_stream() returns (5-7 us
# a call on an H100 host, as much as a small copy itself). Inductor uses it too; the fallback
# keeps older or newer torch working.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def via_proxy(pe):
    """Whether this PE reaches PE `pe` only through the proxy (another
    node): no load/store, no copy engine, no gets."""
    return _nvst.transport_to(pe).startswith("fabric")


def current_stream(device=None):
    """torch's current CUDA stream on `device` (default: torch's current
    device) as the int the compiled module takes."""
    if device is None:
        device = torch.cuda.current_device()
    if _raw_stream is not None:
        return _raw_stream(device)
    return torch.cuda.current_stream(device).cuda_stream


def check_tensor(t, fn, name, dtypes=None, device=None, contiguous=True):
    """Raises TypeError/ValueError naming `fn` and `name` unless t is a
    CUDA tensor on this PE's GPU (`device`, default asked of the runtime)
    of one of `dtypes`, contiguous unless `contiguous` is False. The good
    case is one expression; only a bad tensor goes through the checks that
    say what is wrong."""
    if device is None:
        device = _nvst.device()
    if (isinstance(t, torch.Tensor) and t.get_device() == device and (not contiguous or t.is_contiguous())
            and (dtypes is None or t.dtype in dtypes)):
        return
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"nvshmem_tutorial.{fn}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if not t.is_cuda:
        raise ValueError(f"nvshmem_tutorial.{fn}: {name} is on {t.device}; it must be a CUDA tensor")
    if t.device.index != device:
        raise ValueError(f"nvshmem_tutorial.{fn}: {name} is on {t.device}, but this PE's GPU is cuda:{device}")
    if contiguous and not t.is_contiguous():
        raise ValueError(f"nvshmem_tutorial.{fn}: {name} is not contiguous (call .contiguous() first)")
    if dtypes is not None and t.dtype not in dtypes:
        good = ", ".join(str(d).replace("torch.", "") for d in dtypes)
        raise TypeError(f"nvshmem_tutorial.{fn}: {name} has dtype {t.dtype}; supported: {good}")


def require_initialized(fn):
    """This PE's GPU; raises unless the job is up on a GPU heap."""
    if not _nvst.initialized():
        raise RuntimeError(f"nvshmem_tutorial.{fn}: call nvshmem_tutorial.init_from_torch() "
                           "(or init_with_unique_id) first")
    device = _nvst.device()
    if device < 0:
        raise RuntimeError(f"nvshmem_tutorial.{fn}: this PE has a host heap (NVST_HEAP=host); tensors need a GPU")
    return device


def _gloo_group(group):
    """A group whose collectives run on the CPU: the unique ID never goes
    through NCCL (which may not be up yet, and would need the GPU)."""
    group = dist.group.WORLD if group is None else group
    if str(dist.get_backend(group)) == "gloo":
        return group
    return dist.new_group(ranks=dist.get_process_group_ranks(group), backend="gloo")


def init_from_torch(group=None, backend=""):
    """Joins the ranks of a torch.distributed group (default: the world) into
    one nvst job on the GPU each rank has selected (torch.cuda.set_device).
    Rank 0 of the group creates the unique ID; it travels through a gloo
    group. backend: 'nvst', 'nvshmem' (NVIDIA's NVSHMEM underneath, one node;
    builds with nvshmem_backend_built() only) or '' (NVST_BACKEND, default
    nvst). Collective over the group; a second call is a no-op, or an error
    when it asks for another backend than the job runs on."""
    _nvst.check_backend(backend, "init_from_torch")
    if _nvst.initialized():
        running = "nvshmem" if _nvst.heap_kind() == "nvshmem" else "nvst"
        if backend and backend != running:
            raise RuntimeError(f"nvshmem_tutorial.init_from_torch: the job already runs on backend {running!r}; "
                               f"{backend!r} needs a new process")
        return
    if not dist.is_initialized():
        raise RuntimeError("nvshmem_tutorial.init_from_torch: torch.distributed is not initialised "
                           "(call torch.distributed.init_process_group first)")
    if not torch.cuda.is_available():
        raise RuntimeError("nvshmem_tutorial.init_from_torch: no CUDA device is visible")
    gloo = _gloo_group(group)
    rank, world = dist.get_rank(gloo), dist.get_world_size(gloo)
    hosts = [None] * world
    dist.all_gather_object(hosts, socket.gethostname(), group=gloo)
    one_host = len(set(hosts)) == 1
    ids = [None]
    if rank == 0:
        host = "" if one_host else os.environ.get("NVST_BOOTSTRAP_ADDR") or socket.gethostbyname(socket.gethostname())
        ids[0] = _nvst.get_unique_id(host)
    dist.broadcast_object_list(ids, src=dist.get_process_group_ranks(gloo)[0], group=gloo)
    mine = hosts[rank]
    os.environ["NVST_LOCAL_RANK"] = str(sum(1 for h in hosts[:rank] if h == mine))
    os.environ["NVST_LOCAL_WORLD_SIZE"] = str(hosts.count(mine))
    os.environ["NVST_DEVICE"] = str(torch.cuda.current_device())
    _nvst.init_with_unique_id(ids[0], rank, world, backend)
    _state["group"] = group


# The runtime's default heap (NVST_SYMMETRIC_SIZE unset): what collectives,
# workspaces and small tensors use beside a Buffer's own memory.
_DEFAULT_HEAP = 1 << 30


def reserve_heap(nbytes):
    """Before the job starts (init_from_torch): makes the symmetric heap the
    default plus `nbytes` (a Buffer's own memory), in whole MiB, unless
    NVST_SYMMETRIC_SIZE is set. Every rank asks for the same size, as the
    Buffer's arguments agree. Once the job runs the heap is what it is: a
    Buffer that does not fit says how much it needs."""
    if _nvst.initialized() or "NVST_SYMMETRIC_SIZE" in os.environ or nbytes <= 0:
        return
    os.environ["NVST_SYMMETRIC_SIZE"] = str(_DEFAULT_HEAP + -(-int(nbytes) // (1 << 20)) * (1 << 20))


def nvst_group():
    """The torch.distributed group the job was joined from (None = world)."""
    return _state["group"]


def tensor_at(addr, shape, dtype, owner):
    """A tensor over `addr` (this GPU's memory or a mapped peer's), no copy."""
    shape = tuple(int(s) for s in shape)
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes == 0:
        return torch.empty(shape, dtype=dtype, device=f"cuda:{_nvst.device()}")
    raw = torch.utils.dlpack.from_dlpack(_nvst.dlpack_bytes(addr, nbytes, owner))
    return raw.view(dtype).view(shape)


def alloc_tensor(shape, dtype=torch.float32):
    """Collective: a zeroed tensor in the symmetric heap (the same shape and
    dtype on every PE, checked). Free it with nvshmem_free_tensor."""
    require_initialized("alloc_tensor")
    if isinstance(shape, int):
        shape = (shape,)
    if any(int(s) < 0 for s in shape):
        raise ValueError(f"nvshmem_tutorial.alloc_tensor: negative dimension in {tuple(shape)}")
    nbytes = math.prod(shape) * dtype.itemsize
    addr = _nvst.malloc(nbytes)  # every PE's size is checked; a mismatch raises everywhere
    if addr == 0:
        return torch.empty(tuple(shape), dtype=dtype, device=f"cuda:{_nvst.device()}")
    _allocations.add(addr)
    return tensor_at(addr, shape, dtype, None)


# Every allocation starts at least this aligned (the runtime's default).
_HEAP_ALIGNMENT = 256


def nvshmem_alloc_tensor(size, alignment):
    """The seed's form. Collective: `size` bytes of the symmetric heap as a
    zeroed uint8 tensor, its address a multiple of `alignment` (a power of
    two). Free it with nvshmem_free_tensor."""
    fn = "nvshmem_alloc_tensor"
    require_initialized(fn)
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise ValueError(f"nvshmem_tutorial.{fn}: size must be a byte count >= 0, got {size!r}")
    if not isinstance(alignment, int) or alignment < 1 or alignment & (alignment - 1):
        raise ValueError(f"nvshmem_tutorial.{fn}: alignment must be a power of two, got {alignment!r}")
    if alignment <= _HEAP_ALIGNMENT or size == 0:
        return alloc_tensor((size,), torch.uint8)
    addr = _nvst.align(alignment, size)  # collective and checked as malloc; not zeroed
    _allocations.add(addr)
    t = tensor_at(addr, (size,), torch.uint8, None)
    t.zero_()
    torch.cuda.current_stream().synchronize()
    _nvst.barrier_all()  # zero everywhere before any PE's put can land
    return t


def nvshmem_free_tensor(tensor):
    """Collective: frees what nvshmem_alloc_tensor returned. Views of it
    (and of peers' copies) must not be used afterwards."""
    require_initialized("nvshmem_free_tensor")
    if tensor.numel() == 0:
        _nvst.free_addr(0)
        return
    addr = tensor.data_ptr()
    if addr not in _allocations:
        raise ValueError("nvshmem_tutorial.nvshmem_free_tensor: the tensor is not the start of a symmetric "
                         "allocation (pass what nvshmem_alloc_tensor returned)")
    _allocations.remove(addr)
    _nvst.free_addr(addr)


def peer_tensor(tensor, pe):
    """nvshmem_ptr for tensors: PE `pe`'s copy of a symmetric tensor, read
    and written by load/store over NVLink. Raises for a PE not reachable so
    (another node)."""
    require_initialized("peer_tensor")
    check_tensor(tensor, "peer_tensor", "tensor")
    if not _nvst.is_symmetric(tensor.data_ptr(), max(tensor.nbytes, 1)):
        raise ValueError("nvshmem_tutorial.peer_tensor: the tensor is not in the symmetric heap")
    addr = _nvst.peer_addr(tensor.data_ptr(), pe)
    if addr == 0:
        raise ValueError(f"nvshmem_tutorial.peer_tensor: PE {pe} is not reachable by load/store from PE "
                         f"{_nvst.my_pe()} ({_nvst.transport_to(pe)})")
    return tensor_at(addr, tensor.shape, tensor.dtype, tensor)


def nvshmem4py_buffer(tensor):
    """A symmetric tensor of ours as the cuda.core Buffer that nvshmem4py's
    put, get and their signal forms take (NVSHMEM backend only: our heap
    then lies inside NVSHMEM's). nvshmem4py takes as tensors only those it
    allocated itself, but any Buffer whose address NVSHMEM calls symmetric;
    the Buffer does not own the memory: keep the tensor alive while it is used."""
    require_initialized("nvshmem4py_buffer")
    check_tensor(tensor, "nvshmem4py_buffer", "tensor")
    if _nvst.heap_kind() != "nvshmem":
        raise RuntimeError("nvshmem_tutorial.nvshmem4py_buffer: the runtime is not on NVSHMEM (heap "
                           f"{_nvst.heap_kind()!r}); start it with NVST_BACKEND=nvshmem or "
                           "init_from_torch(backend='nvshmem')")
    if not _nvst.is_symmetric(tensor.data_ptr(), max(tensor.nbytes, 1)):
        raise ValueError("nvshmem_tutorial.nvshmem4py_buffer: the tensor is not in the symmetric heap")
    from cuda.core import Buffer  # nvshmem4py's own dependency
    return Buffer.from_handle(tensor.data_ptr(), tensor.nbytes)


def _copy(fn, copy_on_stream, dst, src, nbytes, pe, blocking):
    """One-sided copy of nbytes (None: all of src, which must match dst),
    ordered on the current stream; blocking: then waits for that stream."""
    device = require_initialized(fn)
    check_tensor(dst, fn, "dst", device=device)
    check_tensor(src, fn, "src", device=device)
    if nbytes is None:
        nbytes = src.nbytes
        if dst.nbytes != nbytes:
            raise ValueError(f"nvshmem_tutorial.{fn}: dst has {dst.nbytes} bytes, src {nbytes}")
    elif not isinstance(nbytes, int) or not 0 <= nbytes <= min(dst.nbytes, src.nbytes):
        raise ValueError(f"nvshmem_tutorial.{fn}: nbytes {nbytes!r} must be in [0, {min(dst.nbytes, src.nbytes)}] "
                         f"(dst has {dst.nbytes} bytes, src {src.nbytes})")
    copy_on_stream(dst.data_ptr(), src.data_ptr(), nbytes, pe, current_stream(device))
    if blocking:
        torch.cuda.current_stream(device).synchronize()


# Our forms: whole tensors, destination first (as torch's copy_). The remote
# side (a put's dst, a get's src) must be symmetric: ours, or on the NVSHMEM
# backend also NVSHMEM's (nvshmem4py's tensors). The runtime checks it and
# raises NvstError (a RuntimeError) naming the address otherwise.
def put_tensor_async(dst, src, pe):
    """dst (symmetric) on PE `pe` <- src (any CUDA tensor here), same bytes."""
    _copy("put_tensor_async", _nvst.putmem_on_stream, dst, src, None, pe, False)


def put_tensor(dst, src, pe):
    """Blocking: returns once the data is in PE `pe`'s dst."""
    _copy("put_tensor", _nvst.putmem_on_stream, dst, src, None, pe, True)


def get_tensor_async(dst, src, pe):
    """dst (any CUDA tensor here) <- src (symmetric) on PE `pe`."""
    _copy("get_tensor_async", _nvst.getmem_on_stream, dst, src, None, pe, False)


def get_tensor(dst, src, pe):
    _copy("get_tensor", _nvst.getmem_on_stream, dst, src, None, pe, True)


# The seed's forms: a byte count and the peer's rank last.
def nvshmem_put_tensor(remote_tensor, local_tensor, nbytes, rank):
    """The first nbytes of local_tensor into remote_tensor (symmetric) on PE
    `rank`; returns once they are there."""
    _copy("nvshmem_put_tensor", _nvst.putmem_on_stream, remote_tensor, local_tensor, nbytes, rank, True)


def nvshmem_put_tensor_async(remote_tensor, local_tensor, nbytes, rank):
    """As nvshmem_put_tensor, ordered on the current stream (no host wait)."""
    _copy("nvshmem_put_tensor_async", _nvst.putmem_on_stream, remote_tensor, local_tensor, nbytes, rank, False)


def nvshmem_get_tensor(local_tensor, remote_tensor, nbytes, rank):
    """The first nbytes of remote_tensor (symmetric) on PE `rank` into
    local_tensor; returns once they are here."""
    _copy("nvshmem_get_tensor", _nvst.getmem_on_stream, local_tensor, remote_tensor, nbytes, rank, True)


def nvshmem_get_tensor_async(local_tensor, remote_tensor, nbytes, rank):
    """As nvshmem_get_tensor, ordered on the current stream (no host wait)."""
    _copy("nvshmem_get_tensor_async", _nvst.getmem_on_stream, local_tensor, remote_tensor, nbytes, rank, False)


def nvshmem_barrier():
    """The seed's barrier: blocking, over every PE (waits for this GPU's
    work first)."""
    require_initialized("nvshmem_barrier")
    _nvst.barrier_all()


def nvshmem_barrier_async():
    """The barrier ordered on the current stream (no host wait)."""
    require_initialized("nvshmem_barrier_async")
    _nvst.barrier_all_on_stream(current_stream())


def tma_copy(input, output):
    """The seed's experiment: output <- input (CUDA tensors of the same byte
    size, on one GPU) with Hopper's bulk copy engine (cp.async.bulk, TMA):
    where the two addresses agree mod 16, all but a head and a tail of under
    16 bytes go global -> shared -> global through it; those bytes (or all,
    where they differ mod 16) one by one. Ordered on the current stream.
    Needs no running job."""
    fn = "tma_copy"
    if not isinstance(input, torch.Tensor) or not input.is_cuda:
        raise ValueError(f"nvshmem_tutorial.{fn}: input must be a CUDA tensor")
    device = input.get_device()
    check_tensor(input, fn, "input", device=device)
    check_tensor(output, fn, "output", device=device)
    if input.nbytes != output.nbytes:
        raise ValueError(f"nvshmem_tutorial.{fn}: input has {input.nbytes} bytes, output {output.nbytes}")
    if input.dtype != output.dtype:
        raise TypeError(f"nvshmem_tutorial.{fn}: input is {input.dtype}, output {output.dtype}")
    _nvst.tma_copy(output.data_ptr(), input.data_ptr(), input.nbytes, current_stream(device))

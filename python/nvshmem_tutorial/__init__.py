"""NVSHMEM-Tutorial for Python.

The compiled module is torch-free, so the package imports (and its numpy
half runs) without PyTorch:
 - the runtime's host API and the collectives on numpy arrays, with
   host-memory PEs (NVST_HEAP=host) talking through the proxy and the
   fabric transport; `launch(n, fn)` runs `fn(rank)` in n fresh processes
   joined into one job, which is how the CPU tests and examples start.
With PyTorch installed, on GPUs (launched with torchrun):
 - the seed tutorial's API, unchanged (below), and NvshmemBuffer (buffer.py);
 - init_from_torch and our tensor forms (tensors.py);
 - nvshmem_tutorial.distributed: collectives named as in torch.distributed;
 - nvshmem_tutorial.ep: DeepEP's Buffer API;
 - nvshmem_tutorial.pplx: pplx-kernels' AllToAll.

Each call has one form. The seed's names keep the seed's arguments; our
richer forms have names of their own. The seed's call (module level), what
it does here, and our form:

- get_unique_id() -> list of byte values
    rank 0 makes the job's ID; ours: make_unique_id(host) -> str
- init_with_unique_id(unique_id_vec, rank, world_size, low_latency_mode)
    joins the job, returns the PE; ours: init_from_torch(group, backend)
- nvshmem_alloc_tensor(size, alignment) -> uint8 [size]
    collective symmetric allocation; ours: alloc_tensor(shape, dtype)
- nvshmem_free_tensor(tensor)
    collective free (either form's tensor); ours: (the same)
- nvshmem_barrier()
    blocking barrier over every PE; ours: nvshmem_barrier_async() (on stream)
- nvshmem_put_tensor(remote_tensor, local_tensor, nbytes, rank)
    blocking put of nbytes to PE rank; ours: put_tensor(dst, src, pe)
- nvshmem_put_tensor_async(remote_tensor, local_tensor, nbytes, rank)
    the same on the current stream; ours: put_tensor_async(dst, src, pe)
- nvshmem_get_tensor(local_tensor, remote_tensor, nbytes, rank)
    blocking get of nbytes from PE rank; ours: get_tensor(dst, src, pe)
- nvshmem_get_tensor_async(local_tensor, remote_tensor, nbytes, rank)
    the same on the current stream; ours: get_tensor_async(dst, src, pe)
- tma_copy(input, output)
    Hopper bulk copy (cp.async.bulk); ours: -
- NvshmemBuffer(group, rank, num_ranks, num_nvl_bytes, num_rdma_bytes, low_latency_mode)
    send/recv, all-gather; ours: nvshmem_tutorial.distributed
- -
    PE `pe`'s copy as a tensor (nvshmem_ptr); ours: peer_tensor(tensor, pe)
- -
    a symmetric tensor for nvshmem4py's put/get (NVSHMEM backend); ours: nvshmem4py_buffer(tensor)
"""
import ctypes as _ctypes
import os as _os


def _preload_nvshmem():
    """A build with NVSHMEM (nvshmem_backend_built()) links
    libnvshmem_host.so.3, which the nvidia-nvshmem wheel installs where the
    loader may not look: load it by its full path (NVSHMEM_DIR/lib, else
    the wheel's). Returns whether one was found. Called only when the
    module's import could not find it, so other builds load nothing."""
    dirs = [_os.path.join(_os.environ["NVSHMEM_DIR"], "lib")] if _os.environ.get("NVSHMEM_DIR") else []
    try:
        import nvidia  # the namespace package of NVIDIA's wheels
        dirs += [_os.path.join(p, "nvshmem", "lib") for p in nvidia.__path__]
    except ImportError:
        pass
    for d in dirs:
        lib = _os.path.join(d, "libnvshmem_host.so.3")
        if _os.path.exists(lib):
            _ctypes.CDLL(lib, mode=_ctypes.RTLD_GLOBAL)
            return True
    return False


try:
    from . import _nvst  # noqa: F401
except ImportError as _e:
    if "libnvshmem_host" not in str(_e):
        raise
    try:
        if not _preload_nvshmem():
            raise _e
        from . import _nvst  # noqa: F401
    except ImportError as _e2:
        raise ImportError(f"nvshmem_tutorial was built with NVSHMEM and cannot find its host library ({_e2}): "
                          "pip install nvidia-nvshmem-cu13==3.4.5 or set NVSHMEM_DIR") from _e2
from ._nvst import (  # noqa: F401
    TEAM_NODE,
    TEAM_WORLD,
    NvstError,
    Symmetric,
    all_gather,
    all_reduce,
    alloc,
    atomic_compare_swap,
    atomic_fetch,
    atomic_fetch_add,
    atomic_swap,
    barrier_all,
    broadcast,
    coll_prepare,
    fence,
    finalize,
    free,
    heap_kind,
    init,
    initialized,
    my_pe,
    n_pes,
    nvshmem_backend_built,
    nvshmem_backend_version,
    put,
    put_signal,
    quiet,
    reduce_scatter,
    signal_wait_until,
    team_my_pe,
    team_n_pes,
    team_split_2d,
    team_split_strided,
    team_translate_pe,
    transport_to,
)
from .bootstrap import get_unique_id, init_with_unique_id, make_unique_id  # noqa: F401
from .launch import launch  # noqa: F401

try:  # the PyTorch half; absent without torch
    import torch as _torch  # noqa: F401
except ImportError:  # pragma: no cover - depends on the machine
    _torch = None
if _torch is not None:
    from .buffer import NvshmemBuffer  # noqa: F401
    from .tensors import (  # noqa: F401
        alloc_tensor,
        get_tensor,
        get_tensor_async,
        init_from_torch,
        nvshmem4py_buffer,
        nvshmem_alloc_tensor,
        nvshmem_barrier,
        nvshmem_barrier_async,
        nvshmem_free_tensor,
        nvshmem_get_tensor,
        nvshmem_get_tensor_async,
        nvshmem_put_tensor,
        nvshmem_put_tensor_async,
        peer_tensor,
        put_tensor,
        put_tensor_async,
        tma_copy,
    )

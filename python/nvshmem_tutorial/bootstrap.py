"""Starting a job from a unique ID, in the seed tutorial's form (torch-free).

    uid = get_unique_id()                      # on rank 0: a list of byte values
    ...                                        # hand it to every rank (all_gather_object, ...)
    init_with_unique_id(uid, rank, world_size, False)

The ID is the library's text ID (make_unique_id) as bytes; rank 0 listens
on the address inside it. get_unique_id() picks that address from the
launcher's environment: loopback when every rank runs on this host, else
NVST_BOOTSTRAP_ADDR or this host's name resolved.
"""
import os
import socket
import sys

from . import _nvst


def make_unique_id(host=""):
    """The library's unique ID as text (\"nvst1:host:port:cookie\"): this
    process becomes rank 0 and listens on `host` ('' = loopback, every PE on
    this host)."""
    if not isinstance(host, str):
        raise TypeError(f"nvshmem_tutorial.make_unique_id: host must be a str, got {type(host).__name__}")
    return _nvst.get_unique_id(host)


def spans_hosts():
    """Whether the launcher says the job has ranks on other hosts."""
    for world, local in (("WORLD_SIZE", "LOCAL_WORLD_SIZE"), ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE")):
        if world in os.environ and local in os.environ:
            return os.environ[world] != os.environ[local]
    return False


def get_unique_id():
    """The seed's get_unique_id: call it on rank 0 only; returns the ID as a
    list of byte values for init_with_unique_id on every rank."""
    host = ""
    if spans_hosts():
        host = os.environ.get("NVST_BOOTSTRAP_ADDR") or socket.gethostbyname(socket.gethostname())
    return list(make_unique_id(host).encode())


def _id_text(unique_id_vec):
    if isinstance(unique_id_vec, str):
        return unique_id_vec
    if isinstance(unique_id_vec, (bytes, bytearray)):
        raw = bytes(unique_id_vec)
    elif isinstance(unique_id_vec, (list, tuple)) and all(isinstance(b, int) and 0 <= b < 256
                                                           for b in unique_id_vec):
        raw = bytes(unique_id_vec)
    else:
        raise TypeError("nvshmem_tutorial.init_with_unique_id: unique_id_vec must be what get_unique_id returned "
                        f"(a list of byte values), bytes or str; got {type(unique_id_vec).__name__}")
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise ValueError("nvshmem_tutorial.init_with_unique_id: unique_id_vec is not an ID from get_unique_id "
                         "(NVSHMEM's own unique IDs are not accepted here)") from None


def init_with_unique_id(unique_id_vec, rank, world_size, low_latency_mode=False, *, backend=""):
    """The seed's init_with_unique_id: joins the job of unique_id_vec as
    `rank` of `world_size` and returns this PE's number (rank).
    low_latency_mode is accepted for the seed's callers; the library needs
    no teams of its own for it. backend: 'nvst' (ours), 'nvshmem' (NVIDIA's
    NVSHMEM underneath; builds with nvshmem_backend_built() only) or ''
    (NVST_BACKEND, default nvst). The GPU is torch's current device where
    PyTorch has set one, else the launcher's local rank."""
    uid = _id_text(unique_id_vec)
    for name, v in (("rank", rank), ("world_size", world_size)):
        if not isinstance(v, int) or isinstance(v, bool):
            raise TypeError(f"nvshmem_tutorial.init_with_unique_id: {name} must be an int, got {v!r}")
    if not isinstance(low_latency_mode, bool):
        raise TypeError(f"nvshmem_tutorial.init_with_unique_id: low_latency_mode must be a bool, got "
                        f"{low_latency_mode!r}")
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"nvshmem_tutorial.init_with_unique_id: rank {rank} is not in [0, {world_size})")
    # The launcher's local rank, where it gives one, places the PE on its node.
    for ours, theirs in (("NVST_LOCAL_RANK", "LOCAL_RANK"), ("NVST_LOCAL_WORLD_SIZE", "LOCAL_WORLD_SIZE")):
        if theirs in os.environ:
            os.environ.setdefault(ours, os.environ[theirs])
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        os.environ.setdefault("NVST_DEVICE", str(torch.cuda.current_device()))
    _nvst.init_with_unique_id(uid, rank, world_size, backend)
    return _nvst.my_pe()

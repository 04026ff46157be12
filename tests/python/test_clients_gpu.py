"""Code written for the seed tutorial, DeepEP, pplx-kernels and nvshmem4py,
on GPUs: the seed's entry points (tests/test_intranode_nvshmem.py,
tests/test_intranode_allgather.py) and its tma_copy, DeepEP's Buffer
(deep_ep_job.py), pplx's AllToAll (pplx_job.py) and nvshmem4py
(nvshmem4py_job.py, examples/pplx_on_nvshmem4py.py). Jobs of more ranks
than GPUs share them (NVST_TEST_SHARE_GPUS=1, gloo). Skips without PyTorch
or a GPU (CI has neither)."""

import pytest
from launcher import HERE, ROOT, require_gpus, torchrun

torch = pytest.importorskip("torch")


def test_seed_intranode_nvshmem():
    out = torchrun(ROOT / "tests" / "test_intranode_nvshmem.py", 2).require("DONE: put/get").stdout
    assert out.count("PASS") == 8, out  # put/get, blocking and async, two sizes


def test_seed_intranode_allgather():
    out = torchrun(ROOT / "tests" / "test_intranode_allgather.py", 2).require("DONE: all-gather").stdout
    assert out.count("PASS") == 6  # three checks on each of two ranks


def test_seed_tma_copy():
    """The seed's checks (uint8 1024 x 1024, float32 512 x 512) plus odd
    sizes and unaligned starts: equal mod 16 (a byte head and tail around
    the bulk copies) and different mod 16 (byte by byte)."""
    require_gpus(1)
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("needs a Hopper GPU")
    import nvshmem_tutorial as nt
    for shape, dtype in (((1024, 1024), torch.uint8), ((512, 512), torch.float32), ((3, 5, 7), torch.float16)):
        x = (torch.randint(0, 256, shape, dtype=torch.uint8, device="cuda") if dtype == torch.uint8
             else torch.randn(shape, device="cuda").to(dtype))
        y = torch.zeros_like(x)
        nt.tma_copy(x, y)
        torch.cuda.synchronize()
        assert torch.equal(x, y), (shape, dtype)
    base = torch.randint(0, 256, ((1 << 20) + 40,), dtype=torch.uint8, device="cuda")
    for off_in, off_out, n in ((0, 0, (1 << 20) + 7), (3, 3, 100003), (1, 5, 4099)):
        out = torch.zeros_like(base)
        nt.tma_copy(base[off_in:off_in + n], out[off_out:off_out + n])
        torch.cuda.synchronize()
        assert torch.equal(out[off_out:off_out + n], base[off_in:off_in + n]), (off_in, off_out, n)
        assert int(out[:off_out].sum()) == 0 and int(out[off_out + n:].sum()) == 0, "wrote outside its range"
    with pytest.raises(ValueError, match="bytes"):
        nt.tma_copy(torch.zeros(4, device="cuda"), torch.zeros(5, device="cuda"))


def test_deep_ep_buffer():
    torchrun(HERE / "deep_ep_job.py", 2, env_drop=("NVST_SYMMETRIC_SIZE",)).require("DONE 0 failure(s)", count=2)


@pytest.mark.parametrize("nproc", [2, 4])
def test_pplx_all_to_all(nproc):
    torchrun(HERE / "pplx_job.py", nproc).require("DONE 0 failure(s)", count=nproc)


def test_nvshmem4py_job():
    """nvshmem4py_job.py: NVSHMEM started by nvshmem4py and joined; its
    tensors as either side of our puts and gets, ours in its put."""
    pytest.importorskip("nvshmem.core")
    import nvshmem_tutorial as nt
    if not nt.nvshmem_backend_built():
        pytest.skip("built without NVSHMEM")
    # nvshmem4py starts NVSHMEM with its default heap; it must hold ours (1 GiB) too.
    torchrun(HERE / "nvshmem4py_job.py", 2, env={"NVSHMEM_SYMMETRIC_SIZE": "3G"}).require("DONE 0 failure(s)",
                                                                                          count=2)


def test_pplx_on_nvshmem4py():
    """examples/pplx_on_nvshmem4py.py: NVSHMEM started by nvshmem4py, our
    runtime joined to it, pplx-style dispatch/combine on our kernels."""
    pytest.importorskip("nvshmem.core")
    import nvshmem_tutorial as nt
    if not nt.nvshmem_backend_built():
        pytest.skip("built without NVSHMEM")
    out = torchrun(ROOT / "examples" / "pplx_on_nvshmem4py.py", 2).require("PASS").stdout
    assert out.count("PASS") == 2

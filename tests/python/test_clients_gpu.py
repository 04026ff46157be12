"""Code written for the seed tutorial, DeepEP and pplx-kernels, on GPUs:
the seed's entry points (tests/test_intranode_nvshmem.py,
tests/test_intranode_allgather.py) and its tma_copy, DeepEP's Buffer
(deep_ep_job.py) and pplx's AllToAll (pplx_job.py). Jobs of more ranks
than GPUs share them (NVST_TEST_SHARE_GPUS=1, gloo). Skips without PyTorch
or a GPU (CI has neither)."""
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def gpus():
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def torchrun(script, nproc, done, timeout=900, env_drop=()):
    if gpus() < 1:
        pytest.skip("needs a GPU")
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1",
               NVST_DEVICE_TIMEOUT_S=os.environ.get("NVST_DEVICE_TIMEOUT_S", "60"),
               PYTHONPATH=os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")]))
    if gpus() < nproc:
        env["NVST_TEST_SHARE_GPUS"] = "1"
    for name in env_drop:
        env.pop(name, None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", script]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    print(r.stdout[-30000:])
    print(r.stderr[-8000:], file=sys.stderr)
    assert r.returncode == 0, f"torchrun exited with {r.returncode}"
    assert "FAIL" not in r.stdout
    assert r.stdout.count(done) >= 1, f"{done!r} not printed"
    return r.stdout


def test_seed_intranode_nvshmem():
    out = torchrun(os.path.join(ROOT, "tests", "test_intranode_nvshmem.py"), 2, "DONE: put/get")
    assert out.count("PASS") == 8, out  # put/get, blocking and async, two sizes


def test_seed_intranode_allgather():
    out = torchrun(os.path.join(ROOT, "tests", "test_intranode_allgather.py"), 2, "DONE: all-gather")
    assert out.count("PASS") == 6  # three checks on each of two ranks


def test_seed_tma_copy():
    """The seed's checks (uint8 1024 x 1024, float32 512 x 512) plus odd
    sizes and unaligned starts: equal mod 16 (a byte head and tail around
    the bulk copies) and different mod 16 (byte by byte)."""
    if gpus() < 1 or torch.cuda.get_device_capability()[0] < 9:
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
    torchrun(os.path.join(HERE, "deep_ep_job.py"), 2, "DONE 0 failure(s)", env_drop=("NVST_SYMMETRIC_SIZE",))


@pytest.mark.parametrize("nproc", [2, 4])
def test_pplx_all_to_all(nproc):
    torchrun(os.path.join(HERE, "pplx_job.py"), nproc, "DONE 0 failure(s)")


def test_pplx_on_nvshmem4py():
    """examples/pplx_on_nvshmem4py.py: NVSHMEM started by nvshmem4py, our
    runtime joined to it, pplx-style dispatch/combine on our kernels."""
    pytest.importorskip("nvshmem.core")
    import nvshmem_tutorial as nt
    if not nt.nvshmem_backend_built():
        pytest.skip("built without NVSHMEM")
    out = torchrun(os.path.join(ROOT, "examples", "pplx_on_nvshmem4py.py"), 2, "PASS")
    assert out.count("PASS") == 2

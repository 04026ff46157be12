"""The PyTorch half on GPUs: starts tests/python/torch_job.py under torchrun
on 1, 2 and 4 GPUs (one rank: the checks that need a peer are narrowed to
what one rank can check) and requires every rank to pass every check. Skips
without PyTorch or with too few GPUs (CI has neither)."""
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_job.py")


def visible_gpus():
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@pytest.mark.parametrize("nproc", [1, 2, 4])
def test_torch_job(nproc):
    if visible_gpus() < nproc:
        pytest.skip(f"needs {nproc} GPUs, {visible_gpus()} visible")
    # NVLink multicast stays off (shared GPU hosts; see README).
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1",
               NVST_DEVICE_TIMEOUT_S=os.environ.get("NVST_DEVICE_TIMEOUT_S", "60"))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", JOB]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    print(r.stdout[-30000:])
    print(r.stderr[-8000:], file=sys.stderr)
    assert r.returncode == 0, f"torchrun exited with {r.returncode}"
    assert r.stdout.count("DONE 0 failure(s)") == nproc, "not every rank passed every check"


EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "examples")


@pytest.mark.parametrize("example", ["moe_training.py", "moe_inference_ll.py"])
def test_moe_example_checks_itself(example):
    """The MoE examples compare their results with a dense layer and exit 1
    on a mismatch; 2 ranks, sharing the GPU where there is only one."""
    if visible_gpus() < 1:
        pytest.skip("needs a GPU")
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           os.path.join(EXAMPLES, example)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    print(r.stdout[-20000:])
    print(r.stderr[-8000:], file=sys.stderr)
    assert r.returncode == 0, f"torchrun exited with {r.returncode}"
    assert "FAIL" not in r.stdout and r.stdout.count("PASS") >= 10, "a check failed or did not run"

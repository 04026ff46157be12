"""The training patterns on a GPU: training_job.py under torchrun with 2
and 4 ranks sharing one GPU (NVST_TEST_SHARE_GPUS=1, torch.distributed on
gloo). Skips without PyTorch or CUDA (CI has neither)."""
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "training_job.py")


@pytest.mark.parametrize("nproc,node_size", [(2, None), (4, None), (4, "2")])
def test_training_patterns_on_one_gpu(nproc, node_size):
    """node_size: logical nodes of that many ranks (the proxy between them)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1",
               NVST_TEST_SHARE_GPUS="1", NVST_DEVICE_TIMEOUT_S=os.environ.get("NVST_DEVICE_TIMEOUT_S", "60"))
    if node_size:
        env["NVST_NODE_SIZE"] = node_size
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", JOB]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    print(r.stdout[-30000:])
    print(r.stderr[-8000:], file=sys.stderr)
    assert r.returncode == 0, f"torchrun exited with {r.returncode}"
    assert r.stdout.count("DONE 0 failure(s)") == nproc, "not every rank passed every check"

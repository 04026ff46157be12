"""The training patterns on a GPU: training_job.py under torchrun with 2
and 4 ranks sharing one GPU (NVST_TEST_SHARE_GPUS=1, torch.distributed on
gloo). Skips without PyTorch or CUDA (CI has neither)."""
import pytest
from launcher import HERE, torchrun


@pytest.mark.parametrize("nproc,node_size", [(2, None), (4, None), (4, "2")])
def test_training_patterns_on_one_gpu(nproc, node_size):
    """node_size: logical nodes of that many ranks (the proxy between them)."""
    env = {"NVST_NODE_SIZE": node_size} if node_size else {}
    torchrun(HERE / "training_job.py", nproc, share=True, env=env).require("DONE 0 failure(s)", count=nproc)

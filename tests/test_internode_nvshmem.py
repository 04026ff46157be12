"""The seed tutorial's internode test: the same checks as
test_intranode_nvshmem.py between rank 0 and the last rank, which
scripts/run_internode_nvshmem.sh places on another node (reached through
the proxy).

    MASTER_ADDR=node0 MASTER_PORT=29500 bash scripts/run_internode_nvshmem.sh NODE_RANK
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from test_intranode_nvshmem import main  # noqa: E402

if __name__ == "__main__":
    main()

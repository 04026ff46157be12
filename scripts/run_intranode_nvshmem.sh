#!/usr/bin/env bash
# The seed tutorial's entry point: tests/test_intranode_nvshmem.py on N
# local GPUs through torchrun. Usage: scripts/run_intranode_nvshmem.sh N
set -euo pipefail
if [ "$#" -ne 1 ]; then
  echo "usage: $0 <nproc_per_node>" >&2
  exit 2
fi
cd "$(dirname "$0")/.."
exec python3 -m torch.distributed.run --standalone --nproc_per_node="$1" tests/test_intranode_nvshmem.py

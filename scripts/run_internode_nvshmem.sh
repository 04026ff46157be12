#!/usr/bin/env bash
# The seed tutorial's entry point across nodes: tests/test_internode_nvshmem.py
# through torchrun, one call per node. Usage (on every node, the same
# MASTER_ADDR and MASTER_PORT: rank 0's node and a free port there):
#   MASTER_ADDR=node0 MASTER_PORT=29500 scripts/run_internode_nvshmem.sh NODE_RANK
# NNODES (default 2) and NPROC_PER_NODE (default: this node's GPUs) size the job.
set -euo pipefail
if [ "$#" -ne 1 ]; then
  echo "usage: $0 <node_rank>  (with MASTER_ADDR and MASTER_PORT set)" >&2
  exit 2
fi
: "${MASTER_ADDR:?set MASTER_ADDR to node 0's address}"
: "${MASTER_PORT:?set MASTER_PORT to a free port on node 0}"
nproc=${NPROC_PER_NODE:-$(nvidia-smi -L | wc -l)}
cd "$(dirname "$0")/.."
exec python3 -m torch.distributed.run --nnodes="${NNODES:-2}" --node_rank="$1" --nproc_per_node="$nproc" \
  --master_addr="$MASTER_ADDR" --master_port="$MASTER_PORT" tests/test_internode_nvshmem.py

"""Hierarchical all-reduce: inside the node, across nodes, inside again."""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import torch

from .. import _nvst
from .buckets import padded
from .comm import Communicator, require_runtime

# (node team, column team) by node size. Made once per job: a team's
# collective workspace is symmetric memory and the runtime has no way to
# release a team, so every instance with the same node size shares them.
_TEAMS: Dict[int, Tuple[Communicator, Communicator]] = {}


class HierarchicalAllReduce:
    """Sums a tensor over every PE in three steps: a reduce-scatter among
    the PEs of one node (NVLink), an all-reduce of each PE's part among the
    PEs that hold the same part on the other nodes (through the proxy), and
    an all-gather inside the node again.

    Use case: data parallelism across nodes, where the network is the
    bottleneck: only 1/k of the gradient bytes leave a node of k PEs, and
    every NVLink inside the node stays busy. On one node it is a plain
    all-reduce done the long way round (use Communicator there).

    Nodes are the runtime's: a host's PEs, or logical nodes of
    NVST_NODE_SIZE PEs (which is how it runs on one GPU, the inter-node step
    then going through the proxy for real). Building it is collective over
    every PE; the first one for a node size makes the node and column teams,
    later ones reuse them.
    """

    def __init__(self, node_size: Optional[int] = None):
        require_runtime("HierarchicalAllReduce")
        world = _nvst.n_pes()
        k = node_size or _nvst.team_n_pes(_nvst.TEAM_NODE)
        if k < 1 or world % k != 0:
            raise ValueError(f"nvshmem_tutorial.training.HierarchicalAllReduce: nodes of {k} PEs do not divide "
                             f"the {world} PEs")
        if k not in _TEAMS:
            row, col = _nvst.team_split_2d(_nvst.TEAM_WORLD, k)
            for t in (row, col):
                _nvst.coll_prepare(t)
            _TEAMS[k] = (Communicator(row), Communicator(col))
        self.node, self.across = _TEAMS[k]
        self.world = world
        self._scratch: dict[Any, Any] = {}

    def all_reduce(self, t: torch.Tensor) -> None:
        """t <- the sum of every PE's t (each node's partial sums are added in
        node order, so floats differ from a flat all-reduce's last bits)."""
        k = self.node.world
        n = t.numel()
        full = padded(n, k)
        key = (full, t.dtype, t.device)
        if key not in self._scratch:
            self._scratch[key] = (torch.empty(full, dtype=t.dtype, device=t.device),
                                  torch.empty(full // k, dtype=t.dtype, device=t.device))
        buf, part = self._scratch[key]
        buf[:n].copy_(t.reshape(-1))
        buf[n:].zero_()
        self.node.reduce_scatter(part, buf)
        self.across.all_reduce(part)
        self.node.all_gather(buf, part)
        t.view(-1).copy_(buf[:n])

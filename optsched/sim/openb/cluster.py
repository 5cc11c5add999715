"""The cluster at node and GPU level: free CPU, memory and milli-GPU of every GPU.

A pod with ``num_gpu == 1`` and ``gpu_milli < 1000`` takes a share of ONE GPU; a pod with
``gpu_milli == 1000`` takes ``num_gpu`` whole GPUs of ONE node; a CPU-only pod
(``num_gpu == 0``) takes CPU and memory only. GPUs past a node's own count are padded with
0 free milli, so they never fit anything and add nothing to any sum.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from optsched.sim.openb.reader import MAX_GPUS_PER_NODE, MILLI, Nodes

#: affinity tag of a pod: 0 = CPU only (not recorded), 1..8 = that many whole GPUs, 9 = a share
SHARE_TAG = 9
N_TAGS = 10


def affinity_tag(num_gpu: int, gpu_milli: int) -> int:
    """The GpuClustering tag of a pod (0 for CPU-only pods)."""
    if num_gpu == 0:
        return 0
    if num_gpu == 1 and gpu_milli < MILLI:
        return SHARE_TAG
    return num_gpu


class PlacementError(ValueError):
    """A placement that the node cannot hold (a bug in a policy, never bad input)."""


@dataclass
class ClusterState:
    """Mutable free resources of every node and GPU."""

    nodes: Nodes
    model_names: tuple[str, ...]
    model_id: npt.NDArray[np.int64]
    n_gpu: npt.NDArray[np.int64]
    cpu_free: npt.NDArray[np.int64]
    mem_free: npt.NDArray[np.int64]
    gpu_free: npt.NDArray[np.int64]  # (nodes, 8), milli-GPU
    affinity: npt.NDArray[np.int64]  # (nodes, N_TAGS), pods of each tag on the node
    allocated_milli: int = 0
    placed: int = 0
    failed: int = 0
    log: list[tuple[int, tuple[int, ...]]] = field(default_factory=list)

    @classmethod
    def empty(cls, nodes: Nodes) -> ClusterState:
        """Every node idle."""
        names = tuple(sorted({m for m in nodes.models if m}))
        index = {m: i for i, m in enumerate(names)}
        n = len(nodes)
        gpu = np.zeros((n, MAX_GPUS_PER_NODE), dtype=np.int64)
        for i, g in enumerate(nodes.gpus):
            gpu[i, : int(g)] = MILLI
        return cls(
            nodes=nodes,
            model_names=names,
            model_id=np.array([index.get(m, -1) for m in nodes.models], dtype=np.int64),
            n_gpu=nodes.gpus.copy(),
            cpu_free=nodes.cpu_milli.copy(),
            mem_free=nodes.memory_mib.copy(),
            gpu_free=gpu,
            affinity=np.zeros((n, N_TAGS), dtype=np.int64),
        )

    @property
    def capacity_milli(self) -> int:
        """All GPUs of the cluster, milli."""
        return self.nodes.gpu_capacity_milli

    def gpu_left(self) -> npt.NDArray[np.int64]:
        """Free milli-GPU per node."""
        return self.gpu_free.sum(axis=1)

    def place(
        self, node: int, cpu: int, mem: int, num_gpu: int, gpu_milli: int, gpus: tuple[int, ...]
    ) -> None:
        """Bind one pod to ``node`` on GPUs ``gpus`` (raises :class:`PlacementError` if it cannot hold it)."""
        if self.cpu_free[node] < cpu or self.mem_free[node] < mem:
            raise PlacementError(f"node {node}: not enough CPU or memory")
        if len(gpus) != num_gpu or len(set(gpus)) != len(gpus):
            raise PlacementError(f"node {node}: {len(gpus)} GPUs given for num_gpu {num_gpu}")
        for g in gpus:
            if not 0 <= g < int(self.n_gpu[node]) or self.gpu_free[node, g] < gpu_milli:
                raise PlacementError(f"node {node}: GPU {g} cannot hold {gpu_milli} milli")
        self.cpu_free[node] -= cpu
        self.mem_free[node] -= mem
        for g in gpus:
            self.gpu_free[node, g] -= gpu_milli
        tag = affinity_tag(num_gpu, gpu_milli)
        if tag:
            self.affinity[node, tag] += 1
        self.allocated_milli += num_gpu * gpu_milli
        self.placed += 1
        self.log.append((node, gpus))


def exclusive_gpus(free_row: npt.NDArray[np.int64], k: int) -> tuple[int, ...]:
    """The ``k`` lowest-index fully free GPUs of a node (as the paper's simulator allocates them)."""
    ids = np.flatnonzero(free_row == MILLI)[:k]
    return tuple(int(i) for i in ids)


__all__ = ["N_TAGS", "SHARE_TAG", "ClusterState", "PlacementError", "affinity_tag", "exclusive_gpus"]

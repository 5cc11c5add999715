"""Node shape: how a job's GPUs, CPUs and host memory lie on nodes, one rule for every path.

A job runs on one node per *piece*, a piece being the GPUs it takes on that node, and needs
``cpu_milli`` and ``memory_mib`` on each of its nodes. With ``gpus_per_node`` the pieces are
``gpus / gpus_per_node`` pieces of ``gpus_per_node``. Otherwise the default is Lucid's
consolidating placement (what the Venus cluster ran): on a GPU type whose largest node has ``N``
GPUs, a job of at most ``N`` GPUs is one piece (one node); a larger one takes ``gpus // N`` whole
nodes and, when ``N`` does not divide it, one more node for the remaining ``gpus % N`` (16 GPUs on
8-GPU nodes: 8 + 8; 12: 8 + 4; 17: 8 + 8 + 1). A job with ``spread: true`` and every elastic job
may spread over any free GPUs of the type (no pieces). A fractional job (``gpu_milli`` below
1000) takes a share of one GPU of one node.

A topology request (``Job.topology``) puts every node of a job inside one domain of a level; a
one-node job always is, so only jobs of two or more nodes carry it into the model.

The model (:mod:`optsched.engine.formulation`), the greedy plan, decoding, the event path and the
simulator's baselines read shapes here; the checker (:mod:`optsched.engine.check`) writes its own
copy of the rule, as it does for every rule.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from optsched.schema.limits import MILLI_PER_GPU

if TYPE_CHECKING:
    from optsched.engine.state import ClusterState
    from optsched.schema.snapshot import Job

__all__ = ["NEVER_REASONS", "Shape", "default_pieces", "never_fits", "shape_of"]

NEVER_REASONS = ("gpus_per_node", "cpu", "host_memory", "topology")
"""Queue reasons of a job that no node (or topology domain) of an allowed type could ever hold,
however empty the cluster: the resource that is too small."""


@dataclass(frozen=True)
class Shape:
    """One job's shape on one GPU type."""

    gpus: int
    pieces: tuple[int, ...]
    """GPUs on each of its nodes, largest first; empty for a job that spreads over any free
    GPUs of the type."""
    cpu_milli: int = 0
    """Thousandths of a CPU needed on each node."""
    memory_mib: int = 0
    """Host memory needed on each node, MiB."""
    milli: int = MILLI_PER_GPU
    """Thousandths of a GPU per GPU: 1000 for whole GPUs, less for a fractional job."""
    level: int = -1
    """Topology level index (``ClusterState.topology_levels``) all its nodes must share; -1: none
    (also for a one-node job, which is always inside one domain)."""
    required: bool = True
    """Whether the topology request is required (else preferred)."""

    @property
    def spread(self) -> bool:
        return not self.pieces

    @property
    def nodes(self) -> int:
        """Nodes the job takes (0 for a spread job)."""
        return len(self.pieces)

    @property
    def largest(self) -> int:
        """Its largest piece (0 for a spread job)."""
        return self.pieces[0] if self.pieces else 0

    @property
    def fractional(self) -> bool:
        return self.milli < MILLI_PER_GPU

    @property
    def key(self) -> tuple[tuple[int, ...], int, int, int, int, bool]:
        """What makes two shapes interchangeable in the model."""
        return (self.pieces, self.cpu_milli, self.memory_mib, self.milli, self.level, self.required)


def default_pieces(gpus: int, largest: int) -> tuple[int, ...]:
    """The pieces of a job of ``gpus`` GPUs on nodes of at most ``largest`` GPUs: one node when
    it fits one, else whole nodes and one node for the rest.

    >>> default_pieces(4, 8), default_pieces(16, 8), default_pieces(12, 8), default_pieces(17, 8)
    ((4,), (8, 8), (8, 4), (8, 8, 1))
    """
    if largest <= 0 or gpus <= largest:
        return (gpus,)
    whole, rest = divmod(gpus, largest)
    return (largest,) * whole + ((rest,) if rest else ())


def shape_of(state: ClusterState, job: Job, gpu_type: str, gpus: int | None = None) -> Shape:
    """The shape of ``job`` started on ``gpu_type`` with ``gpus`` GPUs (default: its gang)."""
    g = job.gpus if gpus is None else gpus
    cpu = job.cpu_milli or 0
    mem = job.memory_mib or 0
    level, required = -1, True
    if job.topology is not None:
        level = state.topology_levels.index(job.topology.level)
        required = job.topology.mode == "required"
    if job.spread or job.is_elastic:
        return Shape(g, (), cpu, mem, MILLI_PER_GPU, level, required)
    if job.is_fractional:
        assert job.gpu_milli is not None
        return Shape(1, (1,), cpu, mem, job.gpu_milli)
    if job.gpus_per_node is not None:
        pieces = (job.gpus_per_node,) * (g // job.gpus_per_node)
    else:
        pieces = default_pieces(g, state.largest_node[gpu_type])
    if len(pieces) <= 1:
        level = -1
    return Shape(g, pieces, cpu, mem, MILLI_PER_GPU, level, required)


def never_fits(state: ClusterState, shape: Shape, gpu_type: str) -> str | None:
    """The resource no available node of ``gpu_type`` could ever give the job, however empty
    the cluster (a reason of :data:`NEVER_REASONS`), or ``None`` when an empty cluster would
    hold it (computed once per shape and type of a state)."""
    cache = state.shape_cache
    key = (shape.key, shape.gpus, gpu_type)
    if key not in cache:
        cache[key] = _never_fits(state, shape, gpu_type)
    return cache[key]


def _never_fits(state: ClusterState, shape: Shape, gpu_type: str) -> str | None:
    profiles = state.node_profiles.get(gpu_type, [])
    if not profiles:
        return None  # the type has no capacity: type_unavailable, decided elsewhere
    if not shape.spread:
        # the k-th largest piece needs k nodes at least that large
        sizes = state.node_sizes[gpu_type]
        if len(sizes) < shape.nodes or any(sizes[k] < p for k, p in enumerate(shape.pieces)):
            return "gpus_per_node"
        big = [pr for pr in profiles if pr[0] >= shape.pieces[-1]]
    else:
        big = profiles
    need = max(1, shape.nodes)
    cpu_ok = [pr for pr in big if pr[1] is None or pr[1] >= shape.cpu_milli]
    if sum(pr[3] for pr in cpu_ok) < need:
        return "cpu"
    fit = [pr for pr in cpu_ok if pr[2] is None or pr[2] >= shape.memory_mib]
    if sum(pr[3] for pr in fit) < need:
        return "host_memory"
    if shape.spread and sum(pr[0] * pr[3] for pr in fit) < shape.gpus:
        return "gpus_per_node"
    if shape.level >= 0 and shape.required and shape.nodes > 1:
        per_domain: dict[tuple[str, ...], list[int]] = defaultdict(list)
        for n in state.available_nodes[gpu_type]:
            if (
                (shape.spread or n.gpus >= shape.pieces[-1])
                and (n.cpu_milli is None or n.cpu_milli >= shape.cpu_milli)
                and (n.memory_mib is None or n.memory_mib >= shape.memory_mib)
            ):
                per_domain[state.domain(n.id, shape.level)].append(n.gpus)
        if not any(_holds(sorted(sz, reverse=True), shape.pieces) for sz in per_domain.values()):
            return "topology"
    return None


def _holds(sizes: list[int], pieces: tuple[int, ...]) -> bool:
    """Whether nodes of ``sizes`` GPUs (largest first) hold ``pieces`` (largest first), one
    piece a node."""
    return len(sizes) >= len(pieces) and all(sizes[k] >= p for k, p in enumerate(pieces))

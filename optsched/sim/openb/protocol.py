"""The FGD paper's replay protocol: arrivals with no departures until 130% of the GPUs arrived.

As in the paper's artifact, the workload is (1) the trace's pods in creation-time order, or, with
``order="shuffle"`` (what the artifact's run scripts use), sorted by name and shuffled with the
seed; then (2) tuned to ``ratio`` (1.3) times the cluster's GPU capacity: pods drawn uniformly
with replacement from the trace are appended while the total GPU request stays within
``ratio * capacity`` (or random pods are removed while it exceeds it). Pods then arrive one by
one; each is placed at once or fails and stays unscheduled. After every arrival that crosses a
step of ``step_pct`` percent of the capacity (and after the last one) the replay records the GPU
allocation ratio, the cluster fragmentation and the unallocated GPUs.

Ties: every policy takes the first node in node-list order among equal scores. The artifact
renames its nodes with a random rank per run (``rand.Perm`` of Go's math/rand, seeded with the
tuning seed) and its scheduler takes the smallest name among equal scores, so its ties go to a
random but fixed node order. :func:`tie_order` does the same with the seed (``node_order=
"shuffle"``, the default of :mod:`.report`); ``"list"`` keeps the list order.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from optsched.sim.openb.cluster import ClusterState
from optsched.sim.openb.frag import DEFAULT_POPULARITY, FragTracker, TypicalPods, typical_pods
from optsched.sim.openb.policies import Pod, Policy
from optsched.sim.openb.reader import MILLI, Nodes, Pods

DEFAULT_RATIO = 1.3
NODE_ORDERS = ("shuffle", "list")


def tie_order(nodes: Nodes, seed: int, node_order: str = "shuffle") -> Nodes:
    """The node list in the order ties are broken in: a permutation drawn with ``seed`` (its own
    stream, independent of the arrivals' draws) for ``"shuffle"``, the list itself for ``"list"``."""
    if node_order not in NODE_ORDERS:
        raise ValueError(f"node_order must be one of {NODE_ORDERS}, not {node_order!r}")
    if node_order == "list":
        return nodes
    rng = np.random.default_rng([seed, 1])
    return nodes.take(rng.permutation(len(nodes)))


def arrivals(
    pods: Pods, capacity_milli: int, *, ratio: float = DEFAULT_RATIO, order: str = "shuffle", seed: int = 0
) -> Pods:
    """The arrival sequence: ordered (or shuffled) trace pods tuned to ``ratio`` of capacity."""
    if order not in ("shuffle", "trace"):
        raise ValueError(f"order must be 'shuffle' or 'trace', not {order!r}")
    rng = np.random.default_rng(seed)
    if order == "shuffle":
        idx = np.array(sorted(range(len(pods)), key=lambda i: pods.names[i]), dtype=np.int64)
        idx = idx[rng.permutation(len(idx))]
    else:
        idx = np.arange(len(pods), dtype=np.int64)
    req = pods.gpu_request_milli
    target = ratio * capacity_milli
    total = int(req[idx].sum())
    seq = list(idx)
    if total > target:
        while total > target and seq:
            j = int(rng.integers(len(seq)))
            total -= int(req[seq.pop(j)])
    else:
        while True:
            j = int(rng.integers(len(pods)))
            if total + int(req[j]) > target:
                break
            total += int(req[j])
            seq.append(j)
    return pods.take(seq)


@dataclass
class Curve:
    """The recorded points of one replay (equal-length lists)."""

    arrived_pct: list[float] = field(default_factory=list)
    alloc_ratio: list[float] = field(default_factory=list)
    frag_gpus: list[float] = field(default_factory=list)
    frag_ratio: list[float] = field(default_factory=list)
    unallocated_gpus: list[float] = field(default_factory=list)
    failed_pods: list[int] = field(default_factory=list)

    def at(self, pct: float) -> int:
        """Index of the first point at or past ``pct`` arrived (the last point if none)."""
        for i, a in enumerate(self.arrived_pct):
            if a >= pct - 1e-9:
                return i
        return len(self.arrived_pct) - 1


@dataclass
class Replay:
    """Outcome of one policy on one arrival sequence."""

    policy: str
    seed: int
    pods: int
    placed: int
    failed: int
    failed_gpu_milli: int
    curve: Curve
    wall_s: float
    notes: dict[str, int] = field(default_factory=dict)
    placements: list[tuple[int, tuple[int, ...]] | None] = field(default_factory=list)


def _pod(seq: Pods, i: int) -> Pod:
    return Pod(
        int(seq.cpu_milli[i]),
        int(seq.memory_mib[i]),
        int(seq.num_gpu[i]),
        int(seq.gpu_milli[i]),
        seq.gpu_spec[i],
    )


def replay(
    nodes: Nodes,
    seq: Pods,
    policy: Policy,
    *,
    typical: TypicalPods | None = None,
    workload: Pods | None = None,
    seed: int = 0,
    step_pct: float = 1.0,
    progress: Callable[[int], None] | None = None,
) -> Replay:
    """Replay ``seq`` under ``policy``; ``typical`` defaults to the types of ``workload`` (or ``seq``)."""
    t0 = time.perf_counter()
    state = ClusterState.empty(nodes)
    tp = typical or typical_pods(
        workload if workload is not None else seq, state.model_names, DEFAULT_POPULARITY
    )
    frag = FragTracker(tp, state)
    cap = state.capacity_milli
    rng = np.random.default_rng(seed)
    curve = Curve()
    arrived = 0
    next_step = step_pct
    failed = failed_gpu = 0
    placements: list[tuple[int, tuple[int, ...]] | None] = []

    def record() -> None:
        free = cap - state.allocated_milli
        fr = frag.cluster()
        curve.arrived_pct.append(100.0 * arrived / cap)
        curve.alloc_ratio.append(state.allocated_milli / cap)
        curve.frag_gpus.append(fr / MILLI)
        curve.frag_ratio.append(fr / free if free > 0 else 0.0)
        curve.unallocated_gpus.append(free / MILLI)
        curve.failed_pods.append(failed)

    record()
    n = len(seq)
    b = max(1, int(policy.batch))
    for start in range(0, n, b):
        batch = [_pod(seq, i) for i in range(start, min(n, start + b))]
        choices = policy.place(state, frag, batch, rng)
        for pod, choice in zip(batch, choices, strict=True):
            arrived += pod.gpu_request
            if choice is None:
                failed += 1
                failed_gpu += pod.gpu_request
            else:
                node, gpus = choice
                state.place(node, pod.cpu, pod.mem, pod.num_gpu, pod.gpu_milli, gpus)
                frag.update(node)
            placements.append(choice)
            crossed = False
            while 100.0 * arrived / cap >= next_step - 1e-9:
                next_step += step_pct
                crossed = True
            if crossed:
                record()
        if progress is not None:
            progress(len(batch))
    if curve.arrived_pct[-1] != 100.0 * arrived / cap:
        record()
    notes = dict(getattr(policy, "notes", {}) or {})
    return Replay(
        policy=policy.name,
        seed=seed,
        pods=n,
        placed=state.placed,
        failed=failed,
        failed_gpu_milli=failed_gpu,
        curve=curve,
        wall_s=time.perf_counter() - t0,
        notes=notes,
        placements=placements,
    )


__all__ = ["DEFAULT_RATIO", "NODE_ORDERS", "Curve", "Replay", "arrivals", "replay", "tie_order"]

"""The FGD paper's baselines, one pod at a time, each a scoring of feasible (node, GPU) choices.

Built from the paper's descriptions (and the scoring rules its artifact documents); every score
is an integer in 0..100 as a Kubernetes score plugin returns it, and ties between the best nodes
go to the first node of the list (the paper's simulator patches the Kubernetes scheduler to take
the smallest node name, for reproducibility; openb node names sort in list order). Feasibility
(the filter) is the same for all: free CPU and memory, an allowed GPU model, and either one GPU
with ``gpu_milli`` free (a share) or ``num_gpu`` fully free GPUs.

* ``random``: a feasible node uniformly at random; a share goes to a random fitting GPU.
* ``dotprod`` (Tetris): minimise the dot product of the node's free (CPU, GPU) and the pod's
  request, each normalised by the largest node spec (128 CPUs, 8 GPUs).
* ``clustering``: prefer nodes already running pods of the same GPU kind (share / k whole GPUs),
  then the fuller node.
* ``packing``: prefer a share on an already shared GPU, then whole GPUs on a partly used node,
  then an idle node with the fewest GPUs.
* ``bestfit``: minimise the normalised free CPU and GPU left after the placement.
* ``fgd``: maximise ``sigmoid(-(F_after - F_before) / 1000)`` of the node's fragmentation
  (Fragmentation Gradient Descent); a share takes the GPU with the best such score.

Shares on a node that the node score does not pin to a GPU take the best-fit GPU (the
smallest free that fits); whole GPUs are the lowest-index fully free ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from optsched.sim.openb.cluster import N_TAGS, ClusterState, affinity_tag, exclusive_gpus
from optsched.sim.openb.frag import FragTracker
from optsched.sim.openb.reader import MILLI

MAX_SPEC_CPU = 128_000
MAX_SPEC_GPU = 8_000

IntArray = npt.NDArray[np.int64]
Choice = tuple[int, tuple[int, ...]]


@dataclass(frozen=True)
class Pod:
    """One pod's request."""

    cpu: int
    mem: int
    num_gpu: int
    gpu_milli: int
    spec: frozenset[str]

    @property
    def is_share(self) -> bool:
        return self.num_gpu == 1 and self.gpu_milli < MILLI

    @property
    def gpu_request(self) -> int:
        return self.num_gpu * self.gpu_milli


class Policy(Protocol):
    """Places pods; ``batch`` pods are decided together (1 for one-at-a-time policies)."""

    name: str
    batch: int

    def place(
        self, state: ClusterState, frag: FragTracker, pods: list[Pod], rng: np.random.Generator
    ) -> list[Choice | None]:
        """One choice (node, GPUs) or ``None`` (unschedulable) per pod, applied in order."""
        ...


def allowed_models(state: ClusterState, spec: frozenset[str]) -> npt.NDArray[np.bool_]:
    """Per node: may a pod with this ``gpu_spec`` run there."""
    if not spec:
        return np.ones(len(state.model_id), dtype=bool)
    ok_model = np.array([m in spec for m in state.model_names] + [False], dtype=bool)
    return ok_model[state.model_id]  # model_id -1 (CPU-only node) reads the final False


def feasible(state: ClusterState, pod: Pod) -> tuple[IntArray, npt.NDArray[np.bool_] | None]:
    """Feasible node indices and, for a share, the (nodes, 8) mask of GPUs that fit it."""
    ok = (state.cpu_free >= pod.cpu) & (state.mem_free >= pod.mem)
    if pod.num_gpu:
        ok &= allowed_models(state, pod.spec)
    if pod.num_gpu == 0:
        return np.flatnonzero(ok), None
    if pod.is_share:
        fits = state.gpu_free >= pod.gpu_milli
        ok &= fits.any(axis=1)
        idx = np.flatnonzero(ok)
        return idx, fits[idx]
    ok &= (state.gpu_free == MILLI).sum(axis=1) >= pod.num_gpu
    return np.flatnonzero(ok), None


def best_fit_gpu(free_row: IntArray, milli: int) -> int:
    """The GPU with the least free milli that still fits (lowest index on ties)."""
    cand = np.where(free_row >= milli, free_row, np.iinfo(np.int64).max)
    return int(np.argmin(cand))


def gpus_for(state: ClusterState, node: int, pod: Pod) -> tuple[int, ...]:
    """The GPUs a placement on ``node`` takes, best-fit for a share."""
    if pod.num_gpu == 0:
        return ()
    if pod.is_share:
        return (best_fit_gpu(state.gpu_free[node], pod.gpu_milli),)
    return exclusive_gpus(state.gpu_free[node], pod.num_gpu)


def pick_max(scores: IntArray) -> int:
    """Index of the first maximal score (the paper's scheduler takes the smallest node name)."""
    return int(np.argmax(scores))


class _PerPod:
    """A policy that places each pod of the list on its own: ``choose`` picks among the feasible
    nodes ``idx`` (``fits``: per node and GPU, where a share fits); a pod with none is left
    unplaced."""

    name = ""
    batch = 1

    def choose(
        self,
        state: ClusterState,
        frag: FragTracker,
        pod: Pod,
        idx: IntArray,
        fits: npt.NDArray[np.bool_] | None,
        rng: np.random.Generator,
    ) -> Choice:
        raise NotImplementedError

    def place(
        self, state: ClusterState, frag: FragTracker, pods: list[Pod], rng: np.random.Generator
    ) -> list[Choice | None]:
        out: list[Choice | None] = []
        for pod in pods:
            idx, fits = feasible(state, pod)
            out.append(self.choose(state, frag, pod, idx, fits, rng) if len(idx) else None)
        return out


class _Scored(_PerPod):
    """A node-scoring policy: ``score`` returns int scores of the feasible nodes."""

    def score(
        self,
        state: ClusterState,
        frag: FragTracker,
        pod: Pod,
        idx: IntArray,
        fits: npt.NDArray[np.bool_] | None,
    ) -> IntArray:
        raise NotImplementedError

    def gpus(self, state: ClusterState, node: int, pod: Pod, rng: np.random.Generator) -> tuple[int, ...]:
        return gpus_for(state, node, pod)

    def pick(self, scores: IntArray, rng: np.random.Generator) -> int:
        return pick_max(scores)

    def choose(
        self,
        state: ClusterState,
        frag: FragTracker,
        pod: Pod,
        idx: IntArray,
        fits: npt.NDArray[np.bool_] | None,
        rng: np.random.Generator,
    ) -> Choice:
        node = int(idx[self.pick(self.score(state, frag, pod, idx, fits), rng)])
        return (node, self.gpus(state, node, pod, rng))


class RandomPolicy(_Scored):
    name = "random"

    def score(
        self,
        state: ClusterState,
        frag: FragTracker,
        pod: Pod,
        idx: IntArray,
        fits: npt.NDArray[np.bool_] | None,
    ) -> IntArray:
        return np.zeros(len(idx), dtype=np.int64)

    def pick(self, scores: IntArray, rng: np.random.Generator) -> int:
        return int(rng.integers(len(scores)))

    def gpus(self, state: ClusterState, node: int, pod: Pod, rng: np.random.Generator) -> tuple[int, ...]:
        if pod.is_share:
            ok = np.flatnonzero(state.gpu_free[node] >= pod.gpu_milli)
            return (int(ok[rng.integers(len(ok))]),)
        return gpus_for(state, node, pod)


class DotProdPolicy(_Scored):
    name = "dotprod"

    def score(
        self,
        state: ClusterState,
        frag: FragTracker,
        pod: Pod,
        idx: IntArray,
        fits: npt.NDArray[np.bool_] | None,
    ) -> IntArray:
        cpu = state.cpu_free[idx] / MAX_SPEC_CPU
        gpu = state.gpu_free[idx].sum(axis=1) / MAX_SPEC_GPU
        dot = (cpu * (pod.cpu / MAX_SPEC_CPU) + gpu * (pod.gpu_request / MAX_SPEC_GPU)) / 2
        return np.floor(100 * (1 - dot)).astype(np.int64)


class ClusteringPolicy(_Scored):
    name = "clustering"

    def score(
        self,
        state: ClusterState,
        frag: FragTracker,
        pod: Pod,
        idx: IntArray,
        fits: npt.NDArray[np.bool_] | None,
    ) -> IntArray:
        tag = affinity_tag(pod.num_gpu, pod.gpu_milli)
        if tag == 0:
            return np.zeros(len(idx), dtype=np.int64)
        left = state.gpu_free[idx].sum(axis=1)
        base = 25 * (MAX_SPEC_GPU - left) // MAX_SPEC_GPU
        aff = state.affinity[idx]
        kinds = (aff[:, 1:N_TAGS] > 0).sum(axis=1)
        has = aff[:, tag] > 0
        band = np.where(has, np.where(kinds == 1, 75, 50), np.where(kinds == 0, 25, 0))
        return (base + band).astype(np.int64)


class PackingPolicy(_Scored):
    name = "packing"

    def score(
        self,
        state: ClusterState,
        frag: FragTracker,
        pod: Pod,
        idx: IntArray,
        fits: npt.NDArray[np.bool_] | None,
    ) -> IntArray:
        if pod.gpu_milli <= 0:
            return np.zeros(len(idx), dtype=np.int64)
        free = state.gpu_free[idx]
        n_gpu = state.n_gpu[idx]
        full = (free == MILLI).sum(axis=1)
        idle = full == n_gpu
        out = np.empty(len(idx), dtype=np.int64)
        out[idle] = np.maximum(33 - full[idle], full[idle])
        if pod.is_share:
            # the best-fit GPU: a used GPU if one fits, else a fully free one
            chosen = np.where(free >= pod.gpu_milli, free, np.iinfo(np.int64).max).min(axis=1)
            uses_free = chosen == MILLI
            case1 = np.maximum(100 - (chosen * 100 // MILLI) // 10, 50)
            busy = np.where(uses_free, np.maximum(50 - 1, 33), case1)
        else:
            busy = np.full(len(idx), max(50 - pod.num_gpu, 33), dtype=np.int64)
        out[~idle] = busy[~idle]
        return out


class BestFitPolicy(_Scored):
    name = "bestfit"

    def score(
        self,
        state: ClusterState,
        frag: FragTracker,
        pod: Pod,
        idx: IntArray,
        fits: npt.NDArray[np.bool_] | None,
    ) -> IntArray:
        cpu = (state.cpu_free[idx] - pod.cpu) / MAX_SPEC_CPU
        gpu = (state.gpu_free[idx].sum(axis=1) - pod.gpu_request) / MAX_SPEC_GPU
        return np.floor((1 - (0.5 * cpu + 0.5 * gpu)) * 100).astype(np.int64)


def fgd_options(
    frag: FragTracker, pod: Pod, idx: IntArray, fits: npt.NDArray[np.bool_] | None
) -> tuple[IntArray, IntArray, npt.NDArray[np.float64]]:
    """Every (node, GPU) option of a pod and the node's fragmentation change for it (milli; a
    change of rounding noise in the bits FGD's simulator computes, :meth:`FragTracker.share_change`).

    For whole-GPU and CPU-only pods the GPU is -1 (the lowest-index free GPUs are taken)."""
    if pod.is_share:
        assert fits is not None
        rows, cols = np.nonzero(fits)
        nodes = idx[rows]
        cols = cols.astype(np.int64)
        return nodes, cols, frag.share_change(nodes, cols, pod.cpu, pod.gpu_milli)
    return idx, np.full(len(idx), -1, dtype=np.int64), frag.whole_change(idx, pod.cpu, pod.num_gpu)


def sigmoid_score(delta: npt.NDArray[np.float64]) -> IntArray:
    """FGD's integer score of a fragmentation change ``delta`` (milli-GPU; lower fragmentation
    scores higher), with the simulator's float operations: ``int64(sigmoid((before - after) /
    1000) * 100)``, ``sigmoid(x) = 1 / (1 + exp(-x))``. A change of rounding noise scores 50
    below 0 and 49 above it, as there (:meth:`~optsched.sim.openb.frag.FragTracker.share_change`
    computes such changes with the simulator's operations, so the noise is the simulator's)."""
    with np.errstate(over="ignore"):
        sig = 1.0 / (1.0 + np.exp(delta / 1000.0))
    return np.floor(sig * 100.0).astype(np.int64)


class FGDPolicy(_Scored):
    name = "fgd"

    def choose(
        self,
        state: ClusterState,
        frag: FragTracker,
        pod: Pod,
        idx: IntArray,
        fits: npt.NDArray[np.bool_] | None,
        rng: np.random.Generator,
    ) -> Choice:
        nodes, gpus, delta = fgd_options(frag, pod, idx, fits)
        score = sigmoid_score(delta)
        if pod.is_share:
            # node score = its best GPU's score; that GPU is the first (lowest index) best one
            order = np.lexsort((gpus, -score, nodes))
            first = np.ones(len(order), dtype=bool)
            first[1:] = nodes[order][1:] != nodes[order][:-1]
            sel = order[first]
            k = pick_max(score[sel])
            return (int(nodes[sel][k]), (int(gpus[sel][k]),))
        node = int(nodes[pick_max(score)])
        return (node, gpus_for(state, node, pod))


class OptschedGreedy(_PerPod):
    """optsched one pod at a time: FGD's score, then consolidation, deterministic.

    Maximises FGD's integer score of the node's fragmentation change (as ``fgd``); among equal
    scores it takes the option leaving the least free GPU on the node (the fullest node that
    holds the pod, consolidating), then the lowest node and GPU index. No randomness. (Ranking
    by the exact, unrounded change instead leaves more GPUs unallocated: docs/openb.md.)
    """

    name = "optsched-1"
    batch = 1

    def choose(
        self,
        state: ClusterState,
        frag: FragTracker,
        pod: Pod,
        idx: IntArray,
        fits: npt.NDArray[np.bool_] | None,
        rng: np.random.Generator,
    ) -> Choice:
        nodes, gpus, delta = fgd_options(frag, pod, idx, fits)
        left = state.gpu_left()[nodes]
        k = int(np.lexsort((gpus, nodes, left, -sigmoid_score(delta)))[0])
        node = int(nodes[k])
        return (node, (int(gpus[k]),) if pod.is_share else gpus_for(state, node, pod))


BASELINES: dict[str, type] = {
    "random": RandomPolicy,
    "dotprod": DotProdPolicy,
    "clustering": ClusteringPolicy,
    "packing": PackingPolicy,
    "bestfit": BestFitPolicy,
    "fgd": FGDPolicy,
    "optsched-1": OptschedGreedy,
}

__all__ = [
    "BASELINES",
    "BestFitPolicy",
    "Choice",
    "ClusteringPolicy",
    "DotProdPolicy",
    "FGDPolicy",
    "OptschedGreedy",
    "PackingPolicy",
    "Pod",
    "Policy",
    "RandomPolicy",
    "feasible",
    "fgd_options",
    "gpus_for",
    "pick_max",
    "sigmoid_score",
]

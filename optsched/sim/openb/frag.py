"""The FGD paper's fragmentation measure and the cluster-level ratios.

Target workload: the pod types of the trace, a type being (cpu_milli, gpu_milli, num_gpu,
gpu_spec), with popularity p_t = share of pods of that type. As the paper's artifact does, CPU-only
pods are included and only the most popular types covering 95% of the pods are kept
(renormalised); ties in popularity order by the larger type first.

For a node with free CPU ``c``, free milli-GPU vector ``g`` and GPU model ``m``, the fragmented
GPU amount with respect to one type ``t`` is

* all of the node's free GPU ``sum(g)`` when ``t`` cannot run there at all: it asks no GPU (a
  CPU-only task uses no GPU, so every idle GPU is a fragment to it), its ``gpu_spec`` excludes
  ``m``, the node lacks CPU, or fewer than ``num_gpu`` GPUs have ``gpu_milli`` free;
* otherwise the free milli on the GPUs that each have less than ``gpu_milli`` free.

The node's fragmentation is the expectation ``F(n) = sum_t p_t * frag_t(n)`` (milli-GPU), and the
cluster's is the sum over nodes. The fragmentation ratio is cluster fragmentation over free GPU.
Host memory does not enter the measure (the paper's definition is over CPU and GPU).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from optsched.sim.openb.cluster import ClusterState
from optsched.sim.openb.reader import Pods

DEFAULT_POPULARITY = 0.95

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class TypicalPods:
    """The target workload's pod types and their popularity (sums to 1)."""

    cpu: IntArray
    milli: IntArray
    num: IntArray
    access: npt.NDArray[np.bool_]  # (types, models + 1); the last column is a CPU-only node
    p: FloatArray
    specs: tuple[frozenset[str], ...]

    def __len__(self) -> int:
        return len(self.p)

    @property
    def p_cpu_only(self) -> float:
        """Popularity of the CPU-only types (their fragment is always all free GPU)."""
        return float(self.p[self.milli == 0].sum())


def typical_pods(
    pods: Pods, model_names: tuple[str, ...], popularity: float = DEFAULT_POPULARITY
) -> TypicalPods:
    """The pod types of ``pods`` covering ``popularity`` of them, most popular first."""
    if not 0 < popularity <= 1:
        raise ValueError("popularity must be in (0, 1]")
    counts: Counter[tuple[int, int, int, str]] = Counter()
    for i in range(len(pods)):
        spec = "|".join(sorted(pods.gpu_spec[i]))
        counts[(int(pods.cpu_milli[i]), int(pods.gpu_milli[i]), int(pods.num_gpu[i]), spec)] += 1
    total = sum(counts.values())
    ranked = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
    kept: list[tuple[tuple[int, int, int, str], int]] = []
    cum = 0
    for key, n in ranked:
        if cum >= popularity * total:
            break
        kept.append((key, n))
        cum += n
    # FGD's simulator divides each count by all pods, then renormalises by the kept share
    # (``GetTypicalPods``); the same two divisions give the same bits
    p = np.array([n for _, n in kept], dtype=np.float64) / total
    if cum < total:
        p = p / (cum / total)
    specs = tuple(frozenset(s for s in k[3].split("|") if s) for k, _ in kept)
    access = np.ones((len(kept), len(model_names) + 1), dtype=bool)
    for t, allowed in enumerate(specs):
        if allowed:
            access[t, : len(model_names)] = [m in allowed for m in model_names]
            access[t, -1] = False
    return TypicalPods(
        cpu=np.array([k[0] for k, _ in kept], dtype=np.int64),
        milli=np.array([k[1] for k, _ in kept], dtype=np.int64),
        num=np.array([k[2] for k, _ in kept], dtype=np.int64),
        access=access,
        p=p,
        specs=specs,
    )


def _hs(tp: TypicalPods, gpu: IntArray) -> tuple[IntArray, IntArray]:
    """Per type and node: GPUs with >= milli_t free (H) and free milli on GPUs below milli_t (S)."""
    m = tp.milli[:, None, None]
    fits = gpu[None, :, :] >= m
    h = fits.sum(axis=2)
    s = np.where(fits, 0, gpu[None, :, :]).sum(axis=2)
    return h, s


def _value(
    tp: TypicalPods, cpu: IntArray, total: IntArray, model: IntArray, h: IntArray, s: IntArray
) -> FloatArray:
    ok = (h >= tp.num[:, None]) & (cpu[None, :] >= tp.cpu[:, None]) & tp.access[:, model]
    ok &= tp.milli[:, None] > 0
    per_type = np.where(ok, s, total[None, :])
    return np.asarray(tp.p @ per_type, dtype=np.float64)


# FGD's simulator's fragment classes (``FragRatioDataMap``), in the order it sums them
_Q1_LACK_BOTH, _Q2_LACK_GPU, _Q3_SATISFIED, _Q4_LACK_CPU, _XL_SATISFIED, _XR_LACK_CPU, _NO_ACCESS = range(7)
_SLOT = np.array([0, 1, 1, 2, 3, 4, 5])
"""Class -> its running sum; a satisfied type's fragment goes to the lack-GPU class's."""

NOISE = 1e-6
"""A fragmentation change below this (milli-GPU) is rounding noise of two equal values: real
changes are far larger (a type's popularity, at least about 1e-4, times at least one
milli-GPU). Only there do the last bits decide FGD's score (:func:`exact_value`)."""


def exact_value(
    tp: TypicalPods, cpu: IntArray, total: IntArray, model: IntArray, h: IntArray, s: IntArray
) -> FloatArray:
    """:func:`_value` with the float operations of FGD's simulator (``NodeGpuShareFragAmount``):
    per type in popularity order, ``p_t`` times the fragment is added to the type's class (a
    satisfied type's fragment to the lack-GPU class), then the classes other than satisfied
    are summed in their fixed order. The value is the same as any other order's; its last bits
    are not, and FGD's integer score of a change that is exactly 0 in value but not in bits is
    49 or 50 by them: a CPU-only pod on a node whose types only move from "CPU satisfied" to
    "lacks CPU" scores 49 there, and the simulator then picks another node."""
    cpu_ok = cpu[None, :] >= tp.cpu[:, None]
    gpu_type = (tp.milli > 0)[:, None]
    hosts = h >= tp.num[:, None]
    cls = np.select(
        [~gpu_type & cpu_ok, ~gpu_type, ~tp.access[:, model], hosts & cpu_ok, hosts, cpu_ok],
        [_XL_SATISFIED, _XR_LACK_CPU, _NO_ACCESS, _Q3_SATISFIED, _Q4_LACK_CPU, _Q2_LACK_GPU],
        default=_Q1_LACK_BOTH,
    )
    amount = tp.p[:, None] * np.where(cls == _Q3_SATISFIED, s, total[None, :]).astype(np.float64)
    per = np.zeros((len(tp), 6, len(total)), dtype=np.float64)
    np.put_along_axis(per, _SLOT[cls][:, None, :], amount[:, None, :], axis=1)
    sums = per.sum(axis=0)  # along the types, one after the other (adding 0.0 changes no bit)
    out = sums[0]
    for c in range(1, 6):
        out = out + sums[c]
    return np.asarray(out, dtype=np.float64)


def node_frag(
    tp: TypicalPods, cpu: IntArray, gpu: IntArray, model: IntArray, *, exact: bool = False
) -> FloatArray:
    """Fragmented milli-GPU of each node (``cpu``: free CPU, ``gpu``: (nodes, 8) free milli);
    ``exact``: in FGD's simulator's bits (:func:`exact_value`)."""
    h, s = _hs(tp, gpu)
    return (exact_value if exact else _value)(tp, cpu, gpu.sum(axis=1), model, h, s)


class FragTracker:
    """Keeps every node's fragmentation (and the per-type terms behind it) up to date.

    ``model`` indices of CPU-only nodes (-1) map to the last column of ``TypicalPods.access``.
    """

    def __init__(self, tp: TypicalPods, state: ClusterState) -> None:
        self.tp = tp
        self.state = state
        self.model = np.where(state.model_id < 0, tp.access.shape[1] - 1, state.model_id)
        self.h, self.s = _hs(tp, state.gpu_free)
        self.frag = _value(tp, state.cpu_free, state.gpu_left(), self.model, self.h, self.s)

    def update(self, node: int) -> None:
        """Recompute one node after a placement on it."""
        st = self.state
        h, s = _hs(self.tp, st.gpu_free[node : node + 1])
        self.h[:, node] = h[:, 0]
        self.s[:, node] = s[:, 0]
        self.frag[node] = _value(
            self.tp,
            st.cpu_free[node : node + 1],
            st.gpu_left()[node : node + 1],
            self.model[node : node + 1],
            h,
            s,
        )[0]

    def share_after(self, nodes: IntArray, gpus: IntArray, cpu: int, milli: int) -> FloatArray:
        """Node fragmentation after a share of ``milli`` on GPU ``gpus[i]`` of ``nodes[i]``."""
        return _value(self.tp, *self._share_inputs(nodes, gpus, cpu, milli))

    def whole_after(self, nodes: IntArray, cpu: int, k: int) -> FloatArray:
        """Node fragmentation after ``k`` fully free GPUs of ``nodes[i]`` (and ``cpu``) are taken."""
        return _value(self.tp, *self._whole_inputs(nodes, cpu, k))

    def share_change(self, nodes: IntArray, gpus: IntArray, cpu: int, milli: int) -> FloatArray:
        """The change of :meth:`share_after` from now (:meth:`_change`)."""
        return self._change(nodes, lambda sel: self._share_inputs(nodes[sel], gpus[sel], cpu, milli))

    def whole_change(self, nodes: IntArray, cpu: int, k: int) -> FloatArray:
        """The change of :meth:`whole_after` from now (:meth:`_change`)."""
        return self._change(nodes, lambda sel: self._whole_inputs(nodes[sel], cpu, k))

    def _change(
        self, nodes: IntArray, inputs: Callable[[slice | IntArray], tuple[IntArray, ...]]
    ) -> FloatArray:
        """Each option's fragmentation change from now (``inputs(sel)``: the after-state of the
        options ``sel``), with FGD's simulator's bits where it is rounding noise
        (:func:`exact_value` on both sides)."""
        delta = _value(self.tp, *inputs(slice(None))) - self.frag[nodes]
        noisy = np.flatnonzero(np.abs(delta) < NOISE)
        if len(noisy):
            delta[noisy] = exact_value(self.tp, *inputs(noisy)) - self._exact_now(nodes[noisy])
        return delta

    def _exact_now(self, nodes: IntArray) -> FloatArray:
        st = self.state
        return exact_value(
            self.tp, st.cpu_free[nodes], st.gpu_left()[nodes], self.model[nodes], self.h[:, nodes],
            self.s[:, nodes],
        )

    def _share_inputs(
        self, nodes: IntArray, gpus: IntArray, cpu: int, milli: int
    ) -> tuple[IntArray, IntArray, IntArray, IntArray, IntArray]:
        st, tp = self.state, self.tp
        old = st.gpu_free[nodes, gpus]
        new = old - milli
        m = tp.milli[:, None]
        h = self.h[:, nodes] - (old[None, :] >= m) + (new[None, :] >= m)
        s = (
            self.s[:, nodes]
            - np.where(old[None, :] < m, old[None, :], 0)
            + np.where(new[None, :] < m, new[None, :], 0)
        )
        total = st.gpu_left()[nodes] - milli
        return st.cpu_free[nodes] - cpu, total, self.model[nodes], h, s

    def _whole_inputs(
        self, nodes: IntArray, cpu: int, k: int
    ) -> tuple[IntArray, IntArray, IntArray, IntArray, IntArray]:
        st, tp = self.state, self.tp
        h = self.h[:, nodes] - k * (tp.milli[:, None] <= 1000)
        total = st.gpu_left()[nodes] - 1000 * k
        return st.cpu_free[nodes] - cpu, total, self.model[nodes], h, self.s[:, nodes]

    def cluster(self) -> float:
        """Cluster fragmentation, milli-GPU."""
        return float(self.frag.sum())


__all__ = [
    "DEFAULT_POPULARITY", "NOISE", "FragTracker", "TypicalPods", "exact_value", "node_frag", "typical_pods",
]

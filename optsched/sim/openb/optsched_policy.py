"""optsched in epochs: every ``batch`` arrivals, one CP-SAT model places the batch jointly.

The model grows with DISTINCT node states, not with nodes: nodes with the same GPU model, free
CPU, free memory and free milli-GPU multiset are interchangeable, so they form one class with a
count. For each pod of the batch the options are (class, GPU choice) pairs: a share may take any
distinct free value among the class's GPUs that fits, whole GPUs are the lowest-index free ones.
Each option's cost is FGD's integer score of the node's fragmentation change (:mod:`.frag`;
``100 - sigmoid_score``, the change rounded to FGD's score points of about 40 milli near zero),
so the objective is additive when every node takes at most one pod of the batch, which the model
enforces (``sum of a class's options <= its count``). It maximises placed pods first (each worth
more than all other terms), then minimises the total score lost (plus the expected-waste term
below), then the GPU left on the chosen nodes (consolidation onto fuller nodes) among options of
equal score. The rounded score with
the consolidating tie-break places better than the exact change does (measured in
``docs/openb.md``): the exact change ranks options by differences of a few milli that say
little about later pods, while the tie-break fills already used nodes first.

A share's option also pays for the change of its GPU's expected waste, ``WASTE_WEIGHT`` cost
units per milli of ``W(free after) - W(free before)`` (:func:`expected_waste`): ``W(r)`` is the
free milli a GPU with ``r`` free is expected to keep for good if the later GPU pods that fit it
arrive by the target workload's popularity. FGD's score counts a residue as fragment for every
type too large for it, in proportion to popularity; it does not see that a residue of 210
(a 470 beside a 320) fits only the rare shares of 50-160 milli and stays, while one of 530
(a 470 on an idle GPU) takes the next 470 and keeps 60.

Options are pruned exactly: per pod, only its cheapest options until their distinct classes hold
at least ``batch`` nodes can be in an optimum (at most ``batch - 1`` other pods take slots there).
The solve is deterministic: ``num_workers=1``, a fixed seed and a ``max_deterministic_time`` work
limit. If CP-SAT returns no solution in that limit, the batch is placed by ``optsched-1``'s rule
(one pod at a time) and counted in ``notes["fallback_batches"]``; a pod the model
leaves out although it was feasible is placed greedily after the batch (``notes["greedy_pods"]``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from optsched.sim.openb.cluster import ClusterState
from optsched.sim.openb.frag import FragTracker, TypicalPods
from optsched.sim.openb.policies import (
    Choice,
    OptschedGreedy,
    Pod,
    feasible,
    fgd_options,
    gpus_for,
    sigmoid_score,
)
from optsched.sim.openb.reader import MILLI

PLACE_WEIGHT = 1_000_000  # a placed pod outweighs every other term of the batch (32 x 100 x 100)
SCORE_WEIGHT = 100  # per point of FGD's integer score (0..100) lost by an option
LEFT_WEIGHT = 1  # per 100 milli-GPU left on the node (0..80): a tie-break below one score point
WASTE_WEIGHT = 3.0  # per milli of a share's GPU's expected waste change (1 score point ~ 40 milli ~ 100)
WASTE_P0 = 0.1  # popularity of fitting GPU types at which a residue is surely filled (expected_waste)


def expected_waste(tp: TypicalPods, p0: float = WASTE_P0) -> npt.NDArray[np.float64]:
    """``W[r]``, r = 0..1000: the free milli a GPU with ``r`` free is expected to keep for good.

    The GPU types of ``tp`` (CPU-only ones left out; GPU models, CPU and the number of GPUs are
    ignored) that fit ``r`` have popularity ``P(r)``. With probability ``a = min(1, P(r) / p0)``
    one of them, drawn by popularity, takes its milli and the GPU goes on from ``r - milli``;
    otherwise nothing more comes and ``r`` stays: ``W[r] = (1 - a) r + a E[W[r - milli]]``
    (``W[r] = r`` when nothing fits). A residue that only rare types fit is nearly all waste.
    """
    gpu = tp.milli > 0
    milli = tp.milli[gpu].astype(np.int64)
    p = tp.p[gpu]
    w = np.zeros(MILLI + 1)
    for r in range(MILLI + 1):
        fit = milli <= r
        pr = float(p[fit].sum())
        if pr <= 0:
            w[r] = r
            continue
        a = min(1.0, pr / p0)
        w[r] = (1 - a) * r + a * float((p[fit] * w[r - milli[fit]]).sum()) / pr
    return w


@dataclass
class OptschedEpochs:
    """The epoch policy; ``notes`` counts solves, optimal solves, fallbacks and greedy pods."""

    batch: int = 32
    work_limit: float = 2.0
    seed: int = 0
    name: str = "optsched"
    notes: dict[str, int] = field(
        default_factory=lambda: {
            "solves": 0,
            "optimal": 0,
            "fallback_batches": 0,
            "greedy_pods": 0,
            "classes_max": 0,
        }
    )
    _waste: tuple[TypicalPods, npt.NDArray[np.float64]] | None = field(default=None, repr=False)

    def place(
        self, state: ClusterState, frag: FragTracker, pods: list[Pod], rng: np.random.Generator
    ) -> list[Choice | None]:
        from ortools.sat.python import cp_model

        keys = np.concatenate(
            [
                state.model_id[:, None],
                state.cpu_free[:, None],
                state.mem_free[:, None],
                -np.sort(-state.gpu_free, axis=1),
            ],
            axis=1,
        )
        _, first, inverse, counts = np.unique(
            keys, axis=0, return_index=True, return_inverse=True, return_counts=True
        )
        inverse = inverse.reshape(-1)
        self.notes["classes_max"] = max(self.notes["classes_max"], len(first))
        members: dict[int, list[int]] = {}
        for node, cls in enumerate(inverse.tolist()):
            members.setdefault(int(cls), []).append(node)

        model = cp_model.CpModel()
        per_pod: list[list[tuple[Any, int, int, int]]] = []  # (var, class, node, gpu)
        per_class: dict[int, list[Any]] = {}
        objective = []
        left = state.gpu_left()
        if self._waste is None or self._waste[0] is not frag.tp:
            self._waste = (frag.tp, expected_waste(frag.tp))
        waste = self._waste[1]
        for p, pod in enumerate(pods):
            idx, fits = feasible(state, pod)
            options: list[tuple[Any, int, int, int]] = []
            if len(idx):
                rep_mask = np.zeros(len(state.cpu_free), dtype=bool)
                rep_mask[first] = True
                keep = rep_mask[idx]
                idx_r = idx[keep]
                fits_r = fits[keep] if fits is not None else None
                nodes, gpus, delta = fgd_options(frag, pod, idx_r, fits_r)
                if pod.is_share:  # one option per distinct free value on a node
                    vals = state.gpu_free[nodes, gpus]
                    order = np.lexsort((gpus, vals, nodes))
                    uniq = np.ones(len(order), dtype=bool)
                    uniq[1:] = (nodes[order][1:] != nodes[order][:-1]) | (vals[order][1:] != vals[order][:-1])
                    sel = order[uniq]
                    nodes, gpus, delta = nodes[sel], gpus[sel], delta[sel]
                after_left = left[nodes] - pod.gpu_request
                cost = SCORE_WEIGHT * (100 - sigmoid_score(delta)) + LEFT_WEIGHT * (after_left // 100)
                if pod.is_share:
                    old = state.gpu_free[nodes, gpus]
                    change = waste[old - pod.gpu_milli] - waste[old]
                    cost = cost + np.round(WASTE_WEIGHT * change).astype(np.int64)
                order = np.lexsort((nodes, cost))
                covered = 0
                seen: set[int] = set()
                for k in order:
                    c = int(inverse[nodes[k]])
                    var = model.new_bool_var(f"x{p}_{k}")
                    options.append((var, c, int(nodes[k]), int(gpus[k])))
                    per_class.setdefault(c, []).append(var)
                    objective.append((var, PLACE_WEIGHT - int(cost[k])))
                    if c not in seen:
                        seen.add(c)
                        covered += int(counts[c])
                    if covered >= len(pods):
                        break
                model.add_at_most_one([o[0] for o in options])
            per_pod.append(options)
        for c, vs in per_class.items():
            if len(vs) > int(counts[c]):
                model.add(sum(vs) <= int(counts[c]))
        model.maximize(sum(w * v for v, w in objective))
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = 1
        solver.parameters.random_seed = self.seed
        solver.parameters.max_deterministic_time = self.work_limit
        status = solver.solve(model)
        self.notes["solves"] += 1
        if status == cp_model.OPTIMAL:
            self.notes["optimal"] += 1
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            self.notes["fallback_batches"] += 1
            return self._greedy(state, frag, pods, rng)
        # Bind chosen classes to concrete nodes: the class's members in index order.
        used: dict[int, int] = {}
        out: list[Choice | None] = []
        pending: list[int] = []
        for p, pod in enumerate(pods):
            chosen = [o for o in per_pod[p] if solver.value(o[0])]
            if not chosen:
                out.append(None)
                if per_pod[p]:
                    pending.append(p)
                continue
            _, cl, rep, gpu = chosen[0]
            k = used.get(cl, 0)
            used[cl] = k + 1
            node = members[cl][k]
            if pod.is_share:
                # same free value as on the representative, on the member node
                value = state.gpu_free[rep, gpu]
                g = int(np.flatnonzero(state.gpu_free[node] == value)[0])
                out.append((node, (g,)))
            else:
                out.append((node, gpus_for(state, node, pod)))
        if pending:
            out = self._finish(state, frag, pods, out, pending, rng)
        return out

    def _greedy(
        self, state: ClusterState, frag: FragTracker, pods: list[Pod], rng: np.random.Generator
    ) -> list[Choice | None]:
        """``optsched-1``'s rule, pod by pod, applying each placement to a copy."""
        return self._finish(state, frag, pods, [None] * len(pods), list(range(len(pods))), rng)

    def _finish(
        self,
        state: ClusterState,
        frag: FragTracker,
        pods: list[Pod],
        out: list[Choice | None],
        todo: list[int],
        rng: np.random.Generator,
    ) -> list[Choice | None]:
        import copy

        st = copy.deepcopy(state)
        st.log = []
        fr = FragTracker(frag.tp, st)
        for p, choice in enumerate(out):
            if choice is not None:
                st.place(choice[0], pods[p].cpu, pods[p].mem, pods[p].num_gpu, pods[p].gpu_milli, choice[1])
                fr.update(choice[0])
        greedy = OptschedGreedy()
        for p in todo:
            got = greedy.place(st, fr, [pods[p]], rng)[0]
            if got is not None:
                st.place(got[0], pods[p].cpu, pods[p].mem, pods[p].num_gpu, pods[p].gpu_milli, got[1])
                fr.update(got[0])
                self.notes["greedy_pods"] += 1
            out[p] = got
        return out


__all__ = ["OptschedEpochs", "expected_waste"]

"""Partitioned epochs: split a fleet-size epoch into ``k`` parts, solve them in parallel, merge.

The design (``docs/partitioning.md`` says why each step keeps the guarantees exact):

1. **Split tenants.** Every tenant gets a *home* part (largest quota first, each to the part
   with the least quota so far), so each part's model holds about 1/k of the job classes.
2. **Split nodes.** Nodes joined by a running job (a gang over several nodes, an MPS pair) form
   one group; a group goes to the home part of the tenants holding most of it while that part
   is below its capacity target (its tenants' share of the type's quota), and free groups fill
   the parts' deficits, in a seeded order. Every running job lies inside one part.
3. **Slice every tenant's numbers.** Per (tenant, type), a part's quota slice is what the
   tenant's running jobs not on loan already hold there, and the home part gets the rest
   (largest-remainder apportionment, so the slices sum *exactly* to the quota); the borrow
   limit goes home, ``lend_limit`` and the preemption cap are apportioned the same way. No part
   can give a tenant more in-quota GPUs than its quota, and no running job in quota is over
   its slice.
4. **Route pending jobs** to their tenant's home part (the next part with the type when the
   home part has none); a gang that no part can hold is left for the coordination step.
5. **Solve the parts** with the ordinary pipeline (``solve_epoch`` on each part's snapshot)
   through :func:`optsched.parallel.run`: on Ray tasks when Ray is initialised, else in fresh
   worker interpreters (never a fork), or one after the other; a part that fails is answered
   by its greedy plan, labelled ``fallback``. Every part must answer by the parts' deadline
   (``PART_SHARE + PART_GRACE`` of the limit from the call's start, worker start included);
   when the wall clock cuts off any part, every part is answered by its greedy plan with one
   label (:data:`~optsched.engine.budget.PART_WALL_CLOCK_FALLBACK`), so the decision does not
   depend on how many parts were late.
6. **Coordinate.** The parts' starts and preemptions are merged; then, on the whole fleet, the
   queued jobs (oldest guaranteed first) are placed on the GPUs left free, inside their tenant's
   *global* idle quota or on loan from the *global* idle quota of the others; ``on_loan`` flags
   and loans are re-derived globally (a tenant over its slice in one part but under its quota
   overall borrows nothing), and the over-quota notes are recomputed on global numbers.
7. **Explain.** Every queued and every preempted job of the merged decision gets its
   explanation, computed on the whole snapshot and the merged decision
   (:func:`optsched.engine.decide.explain_decision`), and its queue reason from it; a job the
   coordination step stopped names the start it made room for.
8. **Check.** The merged decision goes through :func:`optsched.engine.check.check_decision` on
   the whole snapshot; a rejected merge falls back to the monolithic pipeline.

The status is never ``optimal``: ``feasible`` when every part's solver answered, ``fallback``
when one of them gave the greedy plan. The parts' bounds bound the *partitioned* problem only,
so the decision carries no bound; ``solver.notes`` lists every part's size, status and time.
"""

from __future__ import annotations

import logging
import math
import time
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from optsched.engine import assurance as asr
from optsched.engine.budget import (
    PART_GRACE,
    PART_SHARE,
    PART_WALL_CLOCK_FALLBACK,
    WALL_CLOCK_FALLBACK,
    Budget,
)
from optsched.engine.check import over_quota_note
from optsched.engine.explain import explain_decision
from optsched.engine.ledger import derive_loans, kept_over_quota
from optsched.engine.node_loss import lend_limits_after_node_loss
from optsched.engine.rules import cap_starved, protected, starved_types, victim_slack
from optsched.engine.state import ClusterState
from optsched.schema.decision import (
    Decision,
    JobPrediction,
    Preempt,
    PreemptReason,
    QueueReason,
    SolverInfo,
    Start,
)
from optsched.schema.snapshot import GpuRef, Job, Node, Options, Snapshot, Tenant

if TYPE_CHECKING:
    from optsched.engine.backends.base import SolveParams
    from optsched.engine.problem import EpochProblem
    from optsched.predict.base import Predictor

log = logging.getLogger("optsched")

Executor = Literal["auto", "ray", "process", "serial"]
AUTO_GPUS_PER_PART = 10_000
"""``partitions: "auto"``: one part per this many GPUs (the size one model is measured at)."""


def resolve_partitions(value: int | str | None, state: ClusterState) -> int:
    """The number of parts: an explicit count, or ``auto`` = one per ``AUTO_GPUS_PER_PART``
    GPUs of the fleet (1: solve monolithically)."""
    if value is None:
        return 1
    if value == "auto":
        gpus = sum(n.gpus for n in state.snapshot.nodes)
        return max(1, math.ceil(gpus / AUTO_GPUS_PER_PART))
    if isinstance(value, int) and value >= 1:
        return value
    raise ValueError(f"options.partitions: a count >= 1 or 'auto' (got {value!r})")


def apportion(total: int, weights: Sequence[int]) -> list[int]:
    """Largest-remainder apportionment: non-negative integers proportional to ``weights`` that
    sum exactly to ``total`` (exact integer arithmetic; ties to the lower index; all-zero
    weights: equal shares)."""
    n = len(weights)
    if total <= 0 or n == 0:
        return [0] * n
    w = [max(0, int(x)) for x in weights]
    s = sum(w)
    if s <= 0:
        w, s = [1] * n, n
    base = [total * x // s for x in w]
    rest = total - sum(base)
    order = sorted(range(n), key=lambda i: (-((total * w[i]) % s), i))
    for i in order[:rest]:
        base[i] += 1
    return base


@dataclass
class Split:
    """The parts of one epoch."""

    parts: list[Snapshot]
    node_part: dict[str, int]
    leftover: list[str]
    """Pending jobs no part can hold (left for the coordination step)."""
    seconds: float = 0.0


def _stable_hash(seed: int, key: str) -> int:
    return zlib.crc32(f"{seed}:{key}".encode())


def _node_groups(state: ClusterState) -> list[list[int]]:
    """Nodes joined by a running job's allocation (union-find), in node order."""
    snap = state.snapshot
    parent = list(range(len(snap.nodes)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    index = state.node_index
    for job in state.running():
        assert job.allocation is not None
        first = find(index[job.allocation[0].node])
        for ref in job.allocation[1:]:
            other = find(index[ref.node])
            if other != first:
                parent[other] = first
    groups: dict[int, list[int]] = {}
    for i in range(len(snap.nodes)):
        groups.setdefault(find(i), []).append(i)
    return list(groups.values())


def split(state: ClusterState, k: int, seed: int = 0, options: Options | None = None) -> Split:
    """Split ``state`` into ``k`` part snapshots (see the module docstring); linear in the
    snapshot. ``options`` become every part's options."""
    t0 = time.monotonic()
    snap = state.snapshot
    types = list(state.type_names)
    nodes = snap.nodes
    # 1. tenants to home parts, largest quota first, each to the part with the least quota
    total_q = {ten.id: sum(state.quota(ten.id, t) for t in types) for ten in snap.tenants}
    home: dict[str, int] = {}
    assigned = [0] * k
    for tid in sorted(total_q, key=lambda x: (-total_q[x], _stable_hash(seed, x))):
        p = min(range(k), key=lambda q: (assigned[q], q))
        home[tid] = p
        assigned[p] += total_q[tid]
    # 2. node groups: to the home part of the tenants holding them, while that part is below
    #    its capacity target (its tenants' share of the type's quota); free groups fill deficits
    fleet_cap = {t: 0 for t in types}
    for n in nodes:
        fleet_cap[n.gpu_type] += n.gpus
    target: dict[str, list[float]] = {}
    for t in types:
        qs = [0.0] * k
        for tid, p in home.items():
            qs[p] += state.quota(tid, t)
        tot = sum(qs)
        target[t] = [fleet_cap[t] * (x / tot if tot > 0 else 1.0 / k) for x in qs]
    groups = _node_groups(state)
    held_by: dict[int, list[int]] = {}
    for job in state.running():
        if job.id in state.host_of:
            continue
        assert job.allocation is not None
        i = state.node_index[job.allocation[0].node]
        held_by.setdefault(i, [0] * k)[home[job.tenant]] += job.gpus
    group_held = []
    for g in groups:
        h = [0] * k
        for i in g:
            for p, x in enumerate(held_by.get(i, ())):
                h[p] += x
        group_held.append(h)
    order = sorted(
        range(len(groups)),
        key=lambda x: (0 if any(group_held[x]) else 1, _stable_hash(seed, nodes[groups[x][0]].id)),
    )
    load = {t: [0] * k for t in types}
    node_part: dict[str, int] = {}
    for x in order:
        g = groups[x]
        t = nodes[g[0]].gpu_type
        gpus = sum(nodes[i].gpus for i in g)
        h = group_held[x]
        best = max(range(k), key=lambda q: (h[q], -q))
        if not h[best] or load[t][best] + gpus > target[t][best] + gpus / 2:
            best = max(range(k), key=lambda q: (target[t][q] - load[t][q], -q))
        load[t][best] += gpus
        for i in g:
            node_part[nodes[i].id] = best
    cap = {t: [0] * k for t in types}
    for n in nodes:
        if n.available:
            cap[n.gpu_type][node_part[n.id]] += n.gpus
    # 3. running jobs with their nodes; own (not on loan) use per tenant, type and part
    part_jobs: list[list[Job]] = [[] for _ in range(k)]
    own: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0] * k)
    running_gpus: dict[str, list[int]] = defaultdict(lambda: [0] * k)
    for job in state.running():
        assert job.allocation is not None
        p = node_part[job.allocation[0].node]
        part_jobs[p].append(job)
        if job.id in state.host_of:
            continue
        t = state.job_type(job)
        running_gpus[job.tenant][p] += job.gpus
        if not job.on_loan:
            own[(job.tenant, t)][p] += job.gpus
    # 4. pending jobs to their tenant's home part; if it lacks the gang's type, the next part
    #    that has it; gangs no part can hold go to the coordination step
    leftover: list[str] = []
    fits_of: dict[tuple[int, tuple[str, ...]], list[int]] = {}
    for job in state.pending():
        allowed = state.allowed_types(job)
        p = home[job.tenant]
        fits = fits_of.get((job.gpus, allowed))
        if fits is None:
            fits = [q for q in range(k) if any(cap[t][q] >= job.gpus for t in allowed)]
            fits_of[(job.gpus, allowed)] = fits
        if p in fits or (not fits and not any(fleet_cap.get(t, 0) > 0 for t in allowed)):
            part_jobs[p].append(job)  # (unplaceable anywhere: the home part says why)
        elif fits:
            part_jobs[min(fits, key=lambda q: ((q - p) % k, q))].append(job)
        else:
            leftover.append(job.id)
    # 5. tenants sliced per part: what they hold there, the rest of the quota at home
    tenants: list[list[Tenant]] = [[] for _ in range(k)]
    for ten in snap.tenants:
        quota: list[dict[str, int]] = [{} for _ in range(k)]
        borrow: list[dict[str, int]] = [{} for _ in range(k)]
        lend: list[dict[str, int]] = [{} for _ in range(k)]
        at_home = [1 if p == home[ten.id] else 0 for p in range(k)]
        for t in types:
            q = state.quota(ten.id, t)
            held = own[(ten.id, t)] if (ten.id, t) in own else [0] * k
            if sum(held) <= q:
                rest = apportion(q - sum(held), at_home)
                slices = [h + r for h, r in zip(held, rest, strict=True)]
            else:
                slices = apportion(q, held)
            bl, ll = state.borrow_limit(ten.id, t), state.lend_limit(ten.id, t)
            bls = apportion(bl, at_home) if bl is not None else None
            lls = apportion(ll, slices) if ll is not None else None
            for p in range(k):
                quota[p][t] = slices[p]
                if bls is not None:
                    borrow[p][t] = bls[p]
                if lls is not None:
                    lend[p][t] = lls[p]
        pre = ten.preemption
        caps = None
        if pre is not None and pre.max_gpus_per_epoch is not None:
            caps = apportion(pre.max_gpus_per_epoch, running_gpus[ten.id])
        for p in range(k):
            upd: dict[str, Any] = {"quota": quota[p]}
            if ten.borrow_limit is not None:
                upd["borrow_limit"] = borrow[p]
            if ten.lend_limit is not None:
                upd["lend_limit"] = lend[p]
            if caps is not None and pre is not None:
                upd["preemption"] = pre.model_copy(update={"max_gpus_per_epoch": caps[p]})
            tenants[p].append(ten.model_copy(update=upd))
    part_nodes: list[list[Node]] = [[] for _ in range(k)]
    for n in nodes:
        part_nodes[node_part[n.id]].append(n)
    parts = [
        snap.model_copy(
            update={
                "nodes": part_nodes[p],
                "tenants": tenants[p],
                "jobs": part_jobs[p],
                "workflows": None,
                "options": options,
            }
        )
        for p in range(k)
    ]
    return Split(parts, node_part, leftover, time.monotonic() - t0)


# --------------------------------------------------------------------------- solving the parts


@dataclass
class PartResult:
    """One part's decision and how long it took in its worker."""

    decision: Decision
    seconds: float
    jobs: int
    gpus: int
    cpu_seconds: float = 0.0
    """CPU seconds of the worker process for this part (what an idle core would take)."""


SolveFn = Callable[..., Decision]
"""The ordinary pipeline, :func:`optsched.engine.epoch.solve_epoch` (passed in by the caller, so
this module does not import the module that imports it; a top-level function pickles by name)."""

@dataclass(frozen=True)
class PredictorRef:
    """How a part's worker gets its predictor: plain data, never a loaded (pickled) booster.

    ``default``: the worker's own default predictor (:func:`optsched.engine.epoch.default_predictor`,
    loaded once per worker); ``models``: the LightGBM boosters of ``models_dir``, loaded once per
    worker, which must give the ``sources`` the caller's predictor has; ``object``: any other
    predictor, as the caller's object (in this process, or pickled for a worker).
    """

    kind: Literal["default", "models", "object"]
    models_dir: str | None = None
    sources: tuple[str, ...] = ()
    obj: Any = None


def predictor_ref(predictor: Predictor | None, crosses: bool) -> PredictorRef:
    """The reference a part is sent (``crosses``: to another process)."""
    if predictor is None:
        return PredictorRef("default")
    if crosses:
        from optsched.predict.lgbm import LightGBMPredictor

        if type(predictor) is LightGBMPredictor:
            srcs = tuple(sorted(b.source for b in predictor.boosters.values()))
            return PredictorRef("models", str(predictor.models_dir.resolve()), srcs)
    return PredictorRef("object", obj=predictor)


_LOADED: dict[tuple[str, tuple[str, ...]], Predictor] = {}


def load_predictor(ref: PredictorRef) -> Predictor | None:
    """The predictor ``ref`` names (``None``: the pipeline's default), loaded once per process."""
    if ref.kind == "default":
        return None
    if ref.kind == "object":
        return ref.obj
    assert ref.models_dir is not None
    key = (ref.models_dir, ref.sources)
    if key not in _LOADED:
        from optsched.predict.lgbm import LightGBMPredictor

        pred = LightGBMPredictor(ref.models_dir)
        got = tuple(sorted(b.source for b in pred.boosters.values()))
        if got != ref.sources:
            raise RuntimeError(f"the models in '{ref.models_dir}' give {got}, the caller's {ref.sources}")
        _LOADED[key] = pred
    return _LOADED[key]


def setup_worker(ref: PredictorRef, warm: Snapshot | None = None, params: SolveParams | None = None,
                 solve: SolveFn | None = None) -> None:
    """A part worker's setup (inside the parts' deadline): load the predictor, and solve
    ``warm`` (a part without jobs) once so every import and first call of the pipeline is done
    (the default predictor, ``None``, is loaded by that first call)."""
    key = (ref.kind, ref.models_dir, ref.sources, params.backend if params is not None else None)
    if key in _WARMED:  # (a Ray task runs the setup each time: once per process is enough)
        return
    pred = load_predictor(ref)
    if warm is not None and solve is not None:
        solve(warm, params=params, predictor=pred)
    _WARMED.add(key)


_WARMED: set[tuple[str, str | None, tuple[str, ...], str | None]] = set()


def solve_part(
    part: Snapshot,
    params: SolveParams,
    signal: dict[str, asr.TenantAssurance] | None,
    solve: SolveFn,
    predictor: PredictorRef | Predictor | None = None,
) -> PartResult:
    """Solve one part with the ordinary pipeline (a top-level function: runs in a worker),
    with the whole fleet's assurance ``signal`` (a tenant whose jobs wait in another part is
    not "assured" here, so its running jobs are not cheaper victims or MPS hosts)."""
    pred = load_predictor(predictor) if isinstance(predictor, PredictorRef) else predictor
    t, c = time.monotonic(), time.process_time()
    d = solve(part, params=params, assurance=signal, predictor=pred)
    return PartResult(
        d, time.monotonic() - t, len(part.jobs), sum(n.gpus for n in part.nodes), time.process_time() - c
    )


def run_parts(
    parts: list[Snapshot],
    params: SolveParams,
    executor: Executor,
    signal: dict[str, asr.TenantAssurance] | None,
    solve: SolveFn,
    predictor: Predictor | None = None,
    *,
    limit_s: float | None = None,
    deadline: float | None = None,
) -> list[PartResult]:
    """Solve every part with ``solve``, in part order, through :func:`optsched.parallel.run`:
    on Ray (``ray``, or ``auto`` when Ray is initialised), in worker processes (``process``, or
    ``auto`` without Ray), or here (``serial``). Only plain data crosses to a worker: the part's
    snapshot, the parameters, the signal and a :class:`PredictorRef` (models load in the
    worker). Every part must have answered by ``deadline`` (``time.monotonic``; default
    ``PART_GRACE`` x ``limit_s`` after the parts' own limit from now; ``limit_s``, the call's
    limit, defaults to ``params.time_limit_s / PART_SHARE``), its worker's start and setup
    included. When the wall clock cuts off any part (not answered by then, or its solver stopped
    by its own wall-clock net), **every** part is answered here by its greedy plan, labelled
    :data:`PART_WALL_CLOCK_FALLBACK`: the decision is then the same however many parts were
    late. A part that fails otherwise is answered by its greedy plan, labelled with the error."""
    from optsched import parallel

    mode = parallel.resolve_mode(executor, len(parts))
    ref = predictor_ref(predictor, crosses=mode != "serial")
    whole = params.time_limit_s / PART_SHARE if limit_s is None else limit_s
    t0 = time.monotonic()
    if deadline is None:
        deadline = t0 + params.time_limit_s + PART_GRACE * whole
    tasks = [(p, solve_part, (part, params, signal, solve, ref)) for p, part in enumerate(parts)]
    warm = parts[0].model_copy(update={"nodes": parts[0].nodes[:1], "jobs": []}) if parts else None
    setup = (setup_worker, (ref, warm, params, solve)) if mode != "serial" else None
    done, failures = parallel.run(tasks, mode=mode, setup=setup, deadline=deadline)
    late = sorted(
        [f.key for f in failures if f.timed_out]
        + [p for p, r in done.items() if r.decision.solver.fallback_reason == WALL_CLOCK_FALLBACK]
    )
    if late:
        log.info("partitions: part(s) %s cut off by the wall clock; every part greedy", late)
        waited = time.monotonic() - t0
        return [
            _greedy_part(part, params, signal, solve, predictor, PART_WALL_CLOCK_FALLBACK, waited)
            for part in parts
        ]
    for f in failures:
        why = f"part {f.key} failed ({f.error}); its greedy plan was used"
        done[f.key] = _greedy_part(parts[f.key], params, signal, solve, predictor, why, 0.0)
    return [done[p] for p in range(len(parts))]


def _greedy_part(
    part: Snapshot,
    params: SolveParams,
    signal: dict[str, asr.TenantAssurance] | None,
    solve: SolveFn,
    predictor: Predictor | None,
    reason: str,
    waited: float,
) -> PartResult:
    """The greedy plan of a part, computed here, labelled ``fallback`` with ``reason``."""
    r = solve_part(part, params.with_(backend="greedy"), signal, solve, predictor)
    d = r.decision
    note = reason if reason.startswith("partitions:") else f"partitions: {reason}"
    info = d.solver.model_copy(update={"fallback_reason": reason, "notes": [*d.solver.notes, note]})
    d = d.model_copy(update={"status": "fallback", "solver": info})
    return PartResult(d, waited + r.seconds, r.jobs, r.gpus, r.cpu_seconds)


# --------------------------------------------------------------------------- coordination


@dataclass
class _Fleet:
    """Free GPUs after the parts' decisions, bucketed per type by free count on a node."""

    state: ClusterState
    free: dict[str, list[int]] = field(default_factory=dict)
    buckets: dict[str, dict[int, dict[str, None]]] = field(default_factory=dict)
    total: dict[str, int] = field(default_factory=dict)

    @classmethod
    def build(cls, state: ClusterState, holders: set[tuple[str, int]]) -> _Fleet:
        f = cls(state)
        f.total = dict.fromkeys(state.type_names, 0)
        f.buckets = {t: defaultdict(dict) for t in state.type_names}
        pool = state.pool_gpus
        for n in state.snapshot.nodes:
            if not n.available:
                continue
            gpus = [g for g in range(n.gpus) if (n.id, g) not in holders and (n.id, g) not in pool]
            f.free[n.id] = gpus
            if gpus:
                f.buckets[n.gpu_type][len(gpus)][n.id] = None
                f.total[n.gpu_type] += len(gpus)
        return f

    def _take(self, t: str, node: str, g: int) -> list[GpuRef]:
        have = self.free[node]
        del self.buckets[t][len(have)][node]
        got, rest = have[:g], have[g:]
        self.free[node] = rest
        if rest:
            self.buckets[t][len(rest)][node] = None
        self.total[t] -= len(got)
        return [GpuRef(node=node, gpu=x) for x in got]

    def release(self, t: str, refs: Sequence[GpuRef]) -> None:
        """Give GPUs back (a preempted job's)."""
        for ref in refs:
            have = self.free.setdefault(ref.node, [])
            if have:
                del self.buckets[t][len(have)][ref.node]
            have.append(ref.gpu)
            have.sort()
            self.buckets[t][len(have)][ref.node] = None
            self.total[t] += 1

    def place(self, t: str, g: int) -> list[GpuRef]:
        """``g`` free GPUs of type ``t`` (the caller checked ``total[t] >= g``): the
        best-fitting node when one holds the gang, else the fullest nodes first."""
        b = self.buckets[t]
        sizes = sorted(s for s, ns in b.items() if ns)
        for s in sizes:
            if s >= g:
                return self._take(t, next(iter(b[s])), g)
        out: list[GpuRef] = []
        while len(out) < g:
            s = max(s for s, ns in b.items() if ns)
            out += self._take(t, next(iter(b[s])), min(s, g - len(out)))
        return out


@dataclass(frozen=True)
class _Victim:
    """What the coordination step may undo for a reclaim: a part's start on loan or of a
    best-effort job, a running job on loan, or a preemptible running job (priority)."""

    job: Job
    kind: Literal["start", "loan", "priority"]
    tenant: str
    gpus: int
    refs: tuple[GpuRef, ...]


@dataclass
class _Pick:
    """The victims chosen for one start, and the use changes they and the start make."""

    cap_left: Callable[[str], float]
    victims: list[_Victim] = field(default_factory=list)
    changes: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    chosen: set[str] = field(default_factory=set)
    taken: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    be_room: int = 0
    """GPUs best-effort priority victims may still free: those of guaranteed in-quota starts
    on the type (this one included) that no such victim freed yet."""

    def take(self, v: _Victim) -> bool:
        """Add ``v`` unless its tenant's preemption cap forbids it (priority victims), or, for
        a best-effort one, it would free GPUs no guaranteed in-quota start takes."""
        if v.kind == "priority":
            if self.taken[v.tenant] + v.gpus > self.cap_left(v.tenant):
                return False
            be = v.job.qos != "guaranteed"
            if be and v.gpus > self.be_room:
                return False
            self.taken[v.tenant] += v.gpus
            if be:
                self.be_room -= v.gpus
        self.victims.append(v)
        self.chosen.add(v.job.id)
        self.changes[v.tenant] -= v.gpus
        return True


class _Pool:
    """A type's victims, cheapest first (starts undone, then jobs on loan, then priority
    victims; fewer GPUs, less restart cost first), by tenant too; removal is lazy."""

    def __init__(self, victims: list[_Victim]) -> None:
        rank = {"start": 0, "loan": 1, "priority": 2}
        self.order = sorted(victims, key=lambda v: (rank[v.kind], v.gpus, v.job.restart_cost_s, v.job.id))
        self.by_tenant: dict[str, list[_Victim]] = defaultdict(list)
        self.tenant_gpus: dict[str, int] = defaultdict(int)
        for v in self.order:
            self.by_tenant[v.tenant].append(v)
            self.tenant_gpus[v.tenant] += v.gpus
        self.gpus = sum(v.gpus for v in self.order)
        self.gone: set[str] = set()
        self.head = 0

    def live(self) -> Iterator[_Victim]:
        while self.head < len(self.order) and self.order[self.head].job.id in self.gone:
            self.head += 1
        for v in self.order[self.head :]:
            if v.job.id not in self.gone:
                yield v

    def of(self, tenant: str) -> Iterator[_Victim]:
        return (v for v in self.by_tenant.get(tenant, ()) if v.job.id not in self.gone)

    def remove(self, v: _Victim) -> None:
        self.gone.add(v.job.id)
        self.gpus -= v.gpus
        self.tenant_gpus[v.tenant] -= v.gpus


def _queue_key(job: Job) -> tuple[int, float, str]:
    return (0 if job.qos == "guaranteed" else 1, job.submit_s, job.id)


def merge(
    state: ClusterState,
    results: list[PartResult],
    leftover: list[str],
    signal: dict[str, asr.TenantAssurance] | None = None,
) -> Decision:
    """The coordination step: merge the parts' decisions into one for the whole fleet
    (``signal``: the fleet's assurance, computed here when not given), with its explanations
    and queue reasons (:func:`explain_merged`)."""
    if signal is None:
        signal = asr.compute(state)
    d, room_for = merge_plan(state, results, leftover, signal)
    explain_merged(state, d, signal, room_for)
    return d


def explain_merged(
    state: ClusterState,
    decision: Decision,
    signal: dict[str, asr.TenantAssurance],
    room_for: dict[str, list[str]] | None = None,
) -> None:
    """Give the merged ``decision`` its explanations, computed on the whole snapshot and the
    merged decision (every queued, preempted and resized job), and its queue reasons (each the
    code of the job's explanation, as in one model). ``room_for``: per job the coordination
    step stopped, the start it made room for. Changes nothing else of the decision."""
    exps = explain_decision(state, decision, signal, room_for=room_for)
    decision.explanations = exps
    decision.queue_reasons = {jid: QueueReason(exps[jid].code) for jid in decision.queue}


def merge_plan(
    state: ClusterState,
    results: list[PartResult],
    leftover: list[str],
    signal: dict[str, asr.TenantAssurance],
) -> tuple[Decision, dict[str, list[str]]]:
    """The coordination step without explanations: the merged decision (``explanations`` and
    ``queue_reasons`` empty) and, per running job it stopped, the queued job whose start the
    stop made room for."""
    snap = state.snapshot
    room_for: dict[str, list[str]] = {}
    starts: list[Start] = []
    preempt: list[Preempt] = []
    predictions: dict[str, JobPrediction] = {}
    for r in results:
        starts += r.decision.start
        preempt += r.decision.preempt
        if r.decision.predictions:
            predictions.update(r.decision.predictions)
    stopped = {p.job for p in preempt}
    # also stop the guests of stopped hosts named in another part (never: pairs share a node)
    holders: set[tuple[str, int]] = set()
    use: dict[tuple[str, str], int] = defaultdict(int)
    own_kept: dict[tuple[str, str], int] = defaultdict(int)
    for job in state.running():
        if job.id in stopped:
            continue
        assert job.allocation is not None
        holders.update(ref.key() for ref in job.allocation)
        if job.id in state.host_of:
            continue
        t = state.job_type(job)
        use[(job.tenant, t)] += job.gpus
        if not job.on_loan:
            own_kept[(job.tenant, t)] += job.gpus
    started_ids = {s.job for s in starts}
    for s in starts:
        holders.update(ref.key() for ref in s.allocation)
        if not s.colocated_with:
            job = state.job(s.job)
            use[(job.tenant, state.node_type(s.allocation[0].node))] += job.gpus
    fleet = _Fleet.build(state, holders)

    quota = {(o, t): state.quota(o, t) for o in state.tenant_ids for t in state.type_names}
    lend_limit = {(o, t): state.lend_limit(o, t) for o in state.tenant_ids for t in state.type_names}
    lend_limit.update(lend_limits_after_node_loss(state))  # quota held for jobs a node loss stopped

    def lendable(ten: str, t: str) -> int:
        idle = quota[(ten, t)] - use[(ten, t)]
        ll = lend_limit[(ten, t)]
        return max(0, idle if ll is None else min(idle, ll))

    def excess(ten: str, t: str) -> int:
        """Use above quota that a loan must cover: what the tenant's kept jobs not on loan
        already held above quota may stay uncovered (the over-quota amendment)."""
        q = quota[(ten, t)]
        return max(0, use[(ten, t)] - q - max(0, own_kept[(ten, t)] - q))

    # per type: idle quota the tenants could lend, and use above quota to cover (kept current)
    supply = {t: sum(lendable(o, t) for o in state.tenant_ids) for t in state.type_names}
    demand = {t: sum(excess(o, t) for o in state.tenant_ids) for t in state.type_names}

    def shift(t: str, changes: dict[str, int]) -> tuple[int, int]:
        """Change of (supply, demand) on ``t`` if tenants' use changed by ``changes``."""
        ds = dd = 0
        for o, n in changes.items():
            ds -= lendable(o, t)
            dd -= excess(o, t)
            use[(o, t)] += n
            ds += lendable(o, t)
            dd += excess(o, t)
            use[(o, t)] -= n
        return ds, dd

    # on-loan running jobs a reclaim may stop: not preempted by a part, no MPS pair involved
    # and, after them, preemptible jobs not on loan (a priority preemption: within the tenant's
    # preemption cap, after its minimum runtime); never a guaranteed job inside quota
    hosts = set(state.host_of.values()) | {h for st_ in starts for h in st_.colocated_with or ()}
    found: dict[str, list[_Victim]] = defaultdict(list)
    cancelled: set[str] = set()
    for st_ in starts:
        j = state.job(st_.job)
        if (st_.on_loan or j.qos == "best_effort") and not st_.colocated_with and st_.job not in hosts:
            found[state.node_type(st_.allocation[0].node)].append(
                _Victim(j, "start", j.tenant, j.gpus, tuple(st_.allocation))
            )
    lost: dict[str, int] = defaultdict(int)
    # per type: GPUs of guaranteed in-quota starts that best-effort priority victims may free,
    # plus the type's victim slack once there is one such start (``slack`` keeps what is left)
    be_left: dict[str, int] = defaultdict(int)
    for st_ in starts:
        if not st_.on_loan and not st_.colocated_with and state.job(st_.job).qos == "guaranteed":
            be_left[state.node_type(st_.allocation[0].node)] += len(st_.allocation)
    slack = victim_slack(state)
    for t in list(be_left):
        be_left[t] += slack.pop(t, 0)
    for p in preempt:
        j = state.job(p.job)
        if p.reason == PreemptReason.PRIORITY and not j.on_loan:
            lost[j.tenant] += j.gpus
            if j.qos != "guaranteed" and p.job not in state.host_of:
                be_left[state.job_type(j)] -= j.gpus
    tenants = {ten.id: ten for ten in snap.tenants}
    for job in state.running():
        if job.id in stopped or job.id in hosts or job.id in state.host_of:
            continue
        assert job.allocation is not None
        if any(not state.node_available(r.node) for r in job.allocation):
            continue
        if not job.on_loan and (not job.is_preemptible or protected(snap, tenants[job.tenant], job)):
            continue
        found[state.job_type(job)].append(
            _Victim(job, "loan" if job.on_loan else "priority", job.tenant, job.gpus, tuple(job.allocation))
        )
    pool = {t: _Pool(vs) for t, vs in found.items()}
    reclaimed: list[Preempt] = []

    def cap_left(ten: str) -> float:
        pre = tenants[ten].preemption
        if pre is None or pre.max_gpus_per_epoch is None:
            return math.inf
        return pre.max_gpus_per_epoch - lost[ten]

    # fill: queued jobs on the leftover capacity, global quota and loans; a guaranteed job of a
    # tenant whose assurance asks for reclaim may undo starts and stop jobs anywhere in the fleet
    # best-effort jobs keep off the types cap-starved tenants' guaranteed jobs wait for
    # (rules.starved_types, invariant 8)
    off = set(starved_types(state, cap_starved(state)))
    queued = [j for j in state.pending() if j.id not in started_ids]
    queued.sort(key=_queue_key)
    added: list[Start] = []
    for rnd in range(3):
        # pass 1: guaranteed jobs of tenants due a reclaim, inside their quota only (they may stop
        # others); pass 2: every job still queued, on loan too, stopping nothing
        for first in (True, False) if rnd == 0 else (False,):
            for job in queued:
                if job.id in started_ids or job.id in cancelled:
                    continue
                due = job.qos == "guaranteed" and signal[job.tenant].reclaim
                if first and not due:
                    continue
                for t in state.allowed_types(job):
                    if t in off and job.qos != "guaranteed":
                        continue
                    g = job.gpus
                    ten = job.tenant
                    guar = job.qos == "guaranteed"
                    pick = _Pick(cap_left, be_room=be_left[t] + g + slack.get(t, 0) if guar else 0)
                    pick.changes[ten] += g
                    victims, changes, chosen, take = pick.victims, pick.changes, pick.chosen, pick.take
                    room = fleet.total.get(t, 0)
                    vp = pool.get(t)

                    if first:
                        # quota room first: the tenant's own starts of this epoch, then its own
                        # preemptible jobs (same tenant: a priority preemption)
                        qroom = quota.get((ten, t), 0) - use[(ten, t)]
                        if qroom < g and (vp is None or qroom + vp.tenant_gpus.get(ten, 0) < g):
                            continue
                        for v in vp.of(ten) if qroom < g and vp is not None else ():
                            if v.kind != "loan" and take(v):
                                room += v.gpus
                                qroom += v.gpus
                                if qroom >= g:
                                    break
                        if qroom < g:
                            continue
                    ds, dd = shift(t, changes)
                    if room < g or supply[t] + ds - (demand[t] + dd) < 0:
                        # room (and cover for the loans the start would cut) from stops, if the tenant
                        # is due a reclaim and the job is guaranteed inside its global quota
                        if not first or vp is None:
                            continue
                        others = vp.gpus - vp.tenant_gpus.get(ten, 0)
                        if room < g and room + others < g:
                            continue
                        for v in vp.live() if room < g else ():  # GPUs, cheapest stops first
                            if v.tenant != ten and v.job.id not in chosen and take(v):
                                room += v.gpus
                                if room >= g:
                                    break
                        ds, dd = shift(t, changes)
                        if room >= g and supply[t] + ds - (demand[t] + dd) < 0:
                            # loans left without cover: only a borrower's stop gives it
                            for o in sorted(x for x in state.tenant_ids if x != ten and excess(x, t) > 0):
                                for v in vp.of(o):
                                    if v.kind == "priority" or v.job.id in chosen:
                                        continue
                                    take(v)
                                    ds, dd = shift(t, changes)
                                    if supply[t] + ds - (demand[t] + dd) >= 0:
                                        break
                                if supply[t] + ds - (demand[t] + dd) >= 0:
                                    break
                        if room < g or supply[t] + ds - (demand[t] + dd) < 0:
                            continue
                    bl = state.borrow_limit(ten, t)
                    # the start may neither leave use above quota that no idle quota covers (what it
                    # takes from its tenant's lendable idle quota counts) nor pass the borrow limit
                    before_e = excess(ten, t)
                    use[(ten, t)] += g
                    after_e = excess(ten, t)
                    use[(ten, t)] -= g
                    if bl is not None and after_e > bl and after_e > before_e:
                        continue
                    supply[t] += ds
                    demand[t] += dd
                    if first:  # a guaranteed start inside quota
                        be_left[t] = pick.be_room
                        slack.pop(t, None)
                    for o, n in changes.items():
                        use[(o, t)] += n
                    for v in victims:
                        fleet.release(t, v.refs)
                        pool[t].remove(v)  # (vp)
                        if v.kind == "start":
                            cancelled.add(v.job.id)
                            continue
                        why = PreemptReason.RECLAIM if v.kind == "loan" else PreemptReason.PRIORITY
                        if v.kind == "priority":
                            own_kept[(v.tenant, t)] -= v.gpus
                            lost[v.tenant] += v.gpus
                        reclaimed.append(Preempt(job=v.job.id, reason=why, lost_s=v.job.restart_cost_s))
                        room_for[v.job.id] = [job.id]
                    alloc = fleet.place(t, g)
                    added.append(Start(job=job.id, allocation=alloc))
                    started_ids.add(job.id)
                    break
        # a tenant left above quota without cover starts nothing on top (over-quota
        # amendment): undo its starts of the type, latest in queue order first, until covered;
        # then fill again on what they held
        newly: list[Start] = []
        by_key: dict[tuple[str, str], list[Start]] = defaultdict(list)
        for x in [*starts, *added]:
            if not x.colocated_with and x.job not in cancelled:
                by_key[(state.job(x.job).tenant, state.node_type(x.allocation[0].node))].append(x)
        for xs in by_key.values():
            xs.sort(key=lambda x: _queue_key(state.job(x.job)))
        while True:
            held = {k: n - quota[k] for k, n in own_kept.items() if n > quota[k]}
            loans, uncovered = derive_loans(state, use, signal, held)
            undone = 0
            for key, gpus in uncovered.items():
                xs = by_key.get(key, [])
                while gpus > 0 and xs:
                    x = xs.pop()  # the latest in queue order
                    g = state.job(x.job).gpus
                    cancelled.add(x.job)
                    newly.append(x)
                    use[key] -= g
                    gpus -= g
                    undone += 1
            if not undone:
                break
        if not newly:
            break
        for x in newly:
            fleet.release(state.node_type(x.allocation[0].node), x.allocation)
            started_ids.discard(x.job)
        supply = {t: sum(lendable(o, t) for o in state.tenant_ids) for t in state.type_names}
        demand = {t: sum(excess(o, t) for o in state.tenant_ids) for t in state.type_names}
    starts = [x for x in [*starts, *added] if x.job not in cancelled]
    preempt += reclaimed
    starts = _relabel_loans(state, starts, own_kept)
    notes = [
        n for r in results for n in r.decision.solver.notes if not n.startswith("over-quota: ")
    ]
    notes = sorted(set(notes))
    for (ten, t), gpus in sorted(uncovered.items()):
        notes.append(over_quota_note(ten, t, gpus))
    final = {x.job for x in starts}
    queue = sorted((j for j in state.pending() if j.id not in final), key=_queue_key)
    statuses = [r.decision.status for r in results]
    status: Literal["optimal", "feasible", "fallback"] = "fallback" if "fallback" in statuses else "feasible"
    part_notes = [
        f"part {p}: {r.jobs} jobs, {r.gpus} GPUs, {r.decision.status} ({r.decision.solver.backend}), "
        f"{r.seconds:.3f} s ({r.cpu_seconds:.3f} s CPU), objective {r.decision.solver.objective}, "
        f"bound {r.decision.solver.bound}"
        for p, r in enumerate(results)
    ]
    head = (
        f"partitioned into {len(results)} parts; the coordination step started "
        f"{sum(x.job not in cancelled for x in added)} queued "
        f"job(s) on the capacity the parts left free ({len(leftover)} gang(s) no part could hold) "
        f"and stopped {len(reclaimed)} running job(s) for guaranteed jobs of tenants due a reclaim"
    )
    backends = sorted({r.decision.solver.backend for r in results})
    fallbacks = sorted({r.decision.solver.fallback_reason or "" for r in results} - {""})
    info = SolverInfo(
        backend="partitioned:" + "+".join(backends),
        seconds=0.0,
        objective=None,
        bound=None,
        gap=None,
        status_detail=head,
        fallback_reason="; ".join(fallbacks) if status == "fallback" else None,
        stage_seconds={},
        notes=[head, *part_notes, *notes],
    )
    d = Decision(
        now=snap.now,
        status=status,
        solver=info,
        start=starts,
        preempt=preempt,
        queue=[j.id for j in queue],
        queue_reasons={},
        explanations={},
        loans=loans,
        kept_over_quota=kept_over_quota(uncovered),
        assurance={t: round(signal[t].value, 6) for t in state.tenant_ids},
        assurance_state=asr.next_state(state, signal, sorted(started_ids)),
        predictions=predictions or None,
    )
    return d, room_for


def _relabel_loans(
    state: ClusterState, starts: list[Start], own_kept: dict[tuple[str, str], int]
) -> list[Start]:
    """``on_loan`` on global numbers: per (tenant, type), starts fill the quota left by the kept
    jobs not on loan (guaranteed first, then in queue order); the rest runs on loan."""
    by_key: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, s in enumerate(starts):
        if not s.colocated_with:
            job = state.job(s.job)
            by_key[(job.tenant, state.node_type(s.allocation[0].node))].append(i)
    out = list(starts)
    for (ten, t), idx in by_key.items():
        room = state.quota(ten, t) - own_kept[(ten, t)]
        for i in sorted(idx, key=lambda i: _queue_key(state.job(starts[i].job))):
            g = state.job(starts[i].job).gpus
            loan = g > room
            if not loan:
                room -= g
            if out[i].on_loan != loan:
                out[i] = out[i].model_copy(update={"on_loan": loan})
    return out


# --------------------------------------------------------------------------- the whole call


def solve_partitioned(
    state: ClusterState,
    params: SolveParams,
    k: int,
    *,
    solve: SolveFn,
    executor: Executor = "auto",
    predictor: Predictor | None = None,
    on_stage: Callable[[str, float], None] | None = None,
    t0: float | None = None,
) -> Decision:
    """Split, solve the parts with ``solve`` (:func:`optsched.engine.epoch.solve_epoch`), merge,
    explain and check (see the module docstring). ``stage_seconds`` gets ``split`` (with the
    fleet's assurance), ``part_max``, ``merge``, ``explain`` and ``check``, their ``*_cpu``
    twins, and every part's seconds. ``t0`` (``time.monotonic``, default now) is when the call
    started: the parts' deadline is ``Budget.part_deadline`` from it. Raises
    :class:`MergeRejected` when the merged decision fails the checker (the caller falls back)."""
    from optsched.engine.check import check_decision

    stage: dict[str, float] = {}
    budget = Budget(params.time_limit_s, t0=time.monotonic() if t0 is None else t0)
    part_params = params.with_(time_limit_s=budget.part_limit_s)
    t, c = time.monotonic(), time.process_time()
    sp = split(state, k, seed=params.seed)
    signal = asr.compute(state)  # the fleet's assurance, for every part and the merge
    stage["split"] = time.monotonic() - t
    stage["split_cpu"] = time.process_time() - c
    t = time.monotonic()
    results = run_parts(
        sp.parts, part_params, executor, signal, solve, predictor, limit_s=params.time_limit_s,
        deadline=budget.part_deadline,
    )
    stage["parts_wall"] = time.monotonic() - t
    stage["part_max"] = max(r.seconds for r in results)
    stage["part_cpu_max"] = max(r.cpu_seconds for r in results)
    stage["part_cpu_sum"] = sum(r.cpu_seconds for r in results)
    for p, r in enumerate(results):
        stage[f"part{p}"] = r.seconds
        stage[f"part{p}_cpu"] = r.cpu_seconds
    t, c = time.monotonic(), time.process_time()
    d, room_for = merge_plan(state, results, sp.leftover, signal)
    stage["merge"] = time.monotonic() - t
    stage["merge_cpu"] = time.process_time() - c
    t, c = time.monotonic(), time.process_time()
    explain_merged(state, d, signal, room_for)
    stage["explain"] = time.monotonic() - t
    stage["explain_cpu"] = time.process_time() - c
    t, c = time.monotonic(), time.process_time()
    bad = check_decision(state, d)
    stage["check"] = time.monotonic() - t
    stage["check_cpu"] = time.process_time() - c
    if bad:
        raise MergeRejected("; ".join(str(v) for v in bad[:5]))
    for r in results:
        for name, sec in r.decision.solver.stage_seconds.items():
            key = f"part_{name}_max"
            stage[key] = max(stage.get(key, 0.0), sec)
    d.solver.stage_seconds = {k_: round(v, 6) for k_, v in stage.items()}
    if on_stage is not None:
        for name, sec in stage.items():
            on_stage(name, sec)
    return d


class MergeRejected(Exception):
    """The merged decision failed the checker."""


def decision_value(problem: EpochProblem, state: ClusterState, decision: Decision) -> float:
    """The monolithic objective of any checked decision, job by job (each started job's own
    value, not its class's best members), so monolithic and partitioned decisions compare on
    the same scale (used by ``benchmarks/partition_bench.py``)."""
    from optsched.engine.problem import Assignment

    where: dict[str, tuple[int, int]] = {}
    for c, cls in enumerate(problem.pending):
        for m, jid in enumerate(cls.jobs):
            where[jid] = (c, m)
    run_index = {r.job: i for i, r in enumerate(problem.running)}
    guests = {(g.pending, g.running): g.value for g in problem.guests}
    types = {t: i for i, t in enumerate(problem.types)}
    w = problem.objective
    a = Assignment()
    val = 0.0
    for s in decision.start:
        if s.job not in where:
            continue
        c, m = where[s.job]
        cls = problem.pending[c]
        if s.colocated_with:
            host = run_index.get(s.colocated_with[0])
            val += guests.get((c, host), 0.0) if host is not None else 0.0
            continue
        ti = types[state.node_type(s.allocation[0].node)]
        a.add(c, ti, s.on_loan)
        val += cls.values[m]
        if ti in cls.types:
            val += cls.type_bonus[cls.types.index(ti)]
        if s.on_loan:
            val -= cls.loan_penalty
        elif cls.reclaim:
            val += problem.reclaim_bonus
    for p in decision.preempt:
        i = run_index.get(p.job)
        if i is not None:
            a.preempt.add(i)
            val -= problem.running[i].cost
    return val - w.borrow_penalty * a.borrowed(problem)

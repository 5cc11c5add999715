"""Queue order as a decision: the look-ahead plan, gang reservations and expected starts.

Two steps around the epoch's solve (see ``docs/snapshot-format.md``, *Look-ahead*):

**Before the solve** (:func:`plan_reservations`). From the predicted remaining runtimes of the
running jobs (``remaining = max(MIN_REMAINING_S, runtime_s - (now - start_s))``), per GPU type,
the longest-waiting pending gang of at least ``reserve_min_gpus`` GPUs that cannot start now gets
a *reservation* (one per type, EASY backfilling): its start ``T`` is the predicted end of the
running job that brings the type's free GPUs to its gang, and ``held = gang - (GPUs of running
jobs predicted to end by T)`` of today's free GPUs are held for it. The epoch's model is solved
on the capacity less the held GPUs (:func:`limited`); a second fill pass (:func:`backfill`) then
lets jobs predicted to end by ``T`` (and the gang itself) use the held GPUs. Pending jobs are
split into classes by whether they may backfill (``groups``), so the solver and the fill pass
see them apart.

**In node shape** (a gang of pieces on nodes: the default shape) the reservation is for nodes:
``T`` is when enough nodes are predicted to hold its pieces (per node, its free GPUs and the
predicted ends of the jobs on it; the nodes that hold them first), and each of those nodes holds
its free GPUs the piece still needs at ``T`` (``Reservation.nodes``). :func:`limited` then also
takes those GPUs out of the model's node rows (``EpochProblem.held_gpus``); the starts allowed on
them are placed there after every other start. The event path keeps the same GPUs off
(:func:`optsched.engine.admit.decide_event`).

**After the solve** (:func:`annotate`). The queued jobs are placed in time slots ``now + k *
epoch_s`` (``k = 1 .. lookahead_epochs``) on a per-type capacity profile: running and started
jobs leave at their predicted ends, reserved gangs take their GPUs at ``T``. The placement
maximises ``sum value_j * (L + 1 - k_j)`` (earlier is better, more valuable first): a greedy list
schedule in value order (earliest slot that holds the gang for its predicted runtime), improved
by a small CP-SAT model over the same slots with the greedy plan as hint (deterministic work
limit, one worker, fixed seed; the greedy plan stays when CP-SAT finds nothing better). The
decision's ``queue`` is the planned order (by planned start, then value), ``expected_start_s``
holds each planned start (a reserved gang's is ``T``), and jobs that would fit only on GPUs held
for a gang that starts before they would end are queued with reason ``reserved``.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import itertools
import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from optsched.engine.budget import lookahead_work_s
from optsched.schema.decision import QueueReason, Reservation

if TYPE_CHECKING:
    from optsched.engine.problem import Assignment, EpochProblem
    from optsched.engine.state import ClusterState
    from optsched.predict.base import Predictions
    from optsched.schema.decision import Decision
    from optsched.schema.snapshot import Snapshot

_LIFTABLE = ("capacity", "priority", "not_chosen")
"""Bindings a reservation can be the cause of (the job fits the free GPUs and its quota)."""
MIN_REMAINING_S = 60.0
"""Floor of a job's predicted remaining runtime: a job past its prediction is expected to end
soon, not to have ended."""
DEFAULT_LOOKAHEAD_EPOCHS = 6
DEFAULT_RESERVE_MIN_GPUS = 33
MAX_PLAN_TERMS = 20000
"""Slot models with more (job, type, slot, instant) capacity terms keep the greedy plan (the
model's size, never the clock, decides)."""
VALUE_SCALE = 1000
"""Integer scale of the job values in the CP-SAT slot model."""
_INT64_MIN = -(2**63)
"""The lower end of a CP-SAT ``<=`` row's domain."""


def remaining_s(runtime_s: float, now: float, start_s: float | None) -> float:
    """Predicted seconds until a job ends: its predicted runtime less the time it has run,
    at least :data:`MIN_REMAINING_S` (a pending job's is its predicted runtime)."""
    elapsed = 0.0 if start_s is None else max(0.0, now - start_s)
    return max(MIN_REMAINING_S, runtime_s - elapsed)


@dataclass(frozen=True)
class LookaheadParams:
    """The look-ahead's knobs, read from the snapshot."""

    epoch_s: float
    epochs: int
    reserve_min_gpus: int

    @classmethod
    def of(cls, snapshot: Snapshot) -> LookaheadParams:
        opts = snapshot.options
        epochs = DEFAULT_LOOKAHEAD_EPOCHS
        min_gpus = DEFAULT_RESERVE_MIN_GPUS
        if opts is not None:
            if opts.lookahead_epochs is not None:
                epochs = opts.lookahead_epochs
            if opts.reserve_min_gpus is not None:
                min_gpus = opts.reserve_min_gpus
        return cls(epoch_s=snapshot.epoch_s, epochs=epochs, reserve_min_gpus=min_gpus)

    @property
    def enabled(self) -> bool:
        return self.epochs > 0


@dataclass(frozen=True)
class Reservations:
    """The reservations of one epoch, made before the solve."""

    holds: tuple[Reservation, ...] = ()
    groups: dict[str, str] = field(default_factory=dict)
    """Pending job id -> the reserved types (comma-separated) whose held GPUs it may use: it is
    predicted to end by that reservation's start, or it is the reserved gang."""

    def held(self, types: tuple[str, ...]) -> tuple[int, ...]:
        """GPUs held per type (in ``types`` order)."""
        by: dict[str, int] = defaultdict(int)
        for h in self.holds:
            by[h.gpu_type] += h.held
        return tuple(by[t] for t in types)


def _kept_profile(
    state: ClusterState, predictions: Predictions
) -> tuple[dict[str, int], dict[str, list[tuple[float, int]]]]:
    """Free GPUs per type now (running jobs that must stop on unavailable nodes excluded) and
    the predicted (end, GPUs) of every running job holding GPUs, per type, by end."""
    snap = state.snapshot
    now = snap.now
    cap = state.capacity()
    used: dict[str, int] = defaultdict(int)
    ends: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for job in state.running():
        if job.id in state.host_of:
            continue  # an MPS guest holds no GPUs of its own
        assert job.allocation is not None
        if job.id in state.on_lost_nodes:
            continue  # stops now: its GPUs on available nodes are free
        t = state.job_type(job)
        used[t] += job.gpus
        end = now + remaining_s(predictions.jobs[job.id].runtime_s, now, job.start_s)
        ends[t].append((end, job.gpus))
    for lst in ends.values():
        lst.sort()
    return {t: cap[t] - used[t] for t in cap}, ends


@dataclass
class _NodeView:
    """One available node of a type as a reservation sees it: its free GPUs now and the predicted
    (end, GPUs there) of the running jobs on it, by end."""

    id: str
    index: int
    free: int
    ends: list[tuple[float, int]]

    def ready(self, piece: int, now: float) -> float | None:
        """When ``piece`` GPUs are predicted free here (``now`` if they are), None if never."""
        got = self.free
        if got >= piece:
            return now
        for end, g in self.ends:
            got += g
            if got >= piece:
                return end
        return None

    def released(self, at: float) -> int:
        """GPUs here of running jobs predicted to end by ``at``."""
        return sum(g for end, g in self.ends if end <= at)


def _node_views(state: ClusterState, predictions: Predictions) -> dict[str, list[_NodeView]]:
    """Per type, its available nodes (snapshot order) with their free GPUs now (running jobs
    that must stop on unavailable nodes excluded) and the predicted ends of the jobs on them. A
    GPU that holds shares is never counted free (its shares may outlive any prediction)."""
    from optsched.engine.ledger import node_records

    snap = state.snapshot
    now = snap.now
    stopped: set[str] = set()
    ends: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for job in state.running():
        if job.id in state.host_of or job.allocation is None:
            continue
        if job.id in state.on_lost_nodes:
            stopped.add(job.id)
            continue
        if job.is_fractional:
            continue
        end = now + remaining_s(predictions.jobs[job.id].runtime_s, now, job.start_s)
        per_node: dict[str, int] = {}  # (a plain dict: a Counter per running job cost a third of this)
        for r in job.allocation:
            per_node[r.node] = per_node.get(r.node, 0) + 1
        for nid, g in per_node.items():
            ends[nid].append((end, g))
    out: dict[str, list[_NodeView]] = defaultdict(list)
    for rec in node_records(state, frozenset(stopped)):
        lst = sorted(ends.get(rec.id, ()))
        out[rec.type].append(_NodeView(rec.id, rec.index, len(rec.free), lst))
    return out


_Ready = dict[int, list[tuple[float, int, _NodeView]]]
"""Piece size -> the nodes of one type's views that can ever hold it, by when (then snapshot
order): sorted once per planning call."""


def _ready(views: list[_NodeView], p: int, now: float, memo: _Ready) -> list[tuple[float, int, _NodeView]]:
    got = memo.get(p)
    if got is None:
        got = memo[p] = sorted((r, v.index, v) for v in views if (r := v.ready(p, now)) is not None)
    return got


def _node_start(
    views: list[_NodeView], pieces: tuple[int, ...], now: float, memo: _Ready | None = None
) -> tuple[float, dict[str, int]] | None:
    """The earliest predicted time ``T`` at which free nodes hold ``pieces`` (one node each) and
    the GPUs to hold per node for them: the largest pieces first, each on the node predicted to
    free it first (then snapshot order); a node holds its piece less the GPUs of running jobs
    there predicted to end by ``T``. None when the nodes can never hold them."""
    used: set[int] = set()
    chosen: list[tuple[_NodeView, int, float]] = []
    memo = {} if memo is None else memo
    for p in sorted(set(pieces), reverse=True):
        k = pieces.count(p)
        ready = list(itertools.islice((x for x in _ready(views, p, now, memo) if x[1] not in used), k))
        if len(ready) < k:
            return None
        for r, _, v in ready:
            used.add(v.index)
            chosen.append((v, p, r))
    start = max(r for _, _, r in chosen)
    held: dict[str, int] = {}
    for v, p, _ in sorted(chosen, key=lambda x: x[0].index):
        h = max(0, min(v.free, p - v.released(start)))
        if h:
            held[v.id] = h
    return start, held


def plan_reservations(state: ClusterState, predictions: Predictions, lp: LookaheadParams) -> Reservations:
    """Reservations for the longest-waiting large gangs that cannot start now (one per type).

    A gang in its node shape (pieces on nodes) starts when enough nodes are predicted to hold its
    pieces, and holds GPUs on those nodes (:func:`_node_start`, ``Reservation.nodes``); a gang
    that spreads counts GPUs per type."""
    if not lp.enabled:
        return Reservations()
    from optsched.engine.shape import shape_of

    now = state.snapshot.now
    cap = state.capacity()
    big = sorted(
        (j for j in state.pending() if j.gpus >= lp.reserve_min_gpus),
        key=lambda j: (j.submit_s, -j.gpus, j.id),
    )
    if not big:
        return Reservations()
    free, ends = _kept_profile(state, predictions)
    views: dict[str, list[_NodeView]] | None = None
    memo: dict[str, _Ready] = {}  # per type
    # a gang's node start depends only on its type and pieces: a saturated queue holds many
    # gangs of one shape (hundreds of 256-GPU jobs in one partition), each tried every call
    starts: dict[tuple[str, tuple[int, ...]], tuple[float, dict[str, int]] | None] = {}
    holds: list[Reservation] = []
    taken: set[str] = set()
    reservable = {t for t, c in cap.items() if c >= lp.reserve_min_gpus}
    for job in big:
        if taken >= reservable:
            break  # every type a gang fits holds its reservation: no later gang can get one
        types = [t for t in state.allowed_types(job) if cap.get(t, 0) >= job.gpus]
        if not types:
            continue  # it may never start
        plans: list[tuple[float, int, str, int, dict[str, int] | None]] = []
        now_ok = False
        for k, t in enumerate(types):
            shape = shape_of(state, job, t)
            if shape.pieces and not shape.fractional:
                key = (t, shape.pieces)
                if key in starts:
                    got = starts[key]
                else:
                    if views is None:
                        views = _node_views(state, predictions)
                    got = _node_start(views.get(t, []), shape.pieces, now, memo.setdefault(t, {}))
                    starts[key] = got
                if got is None:
                    continue
                if got[0] <= now:
                    now_ok = True
                    break
                plans.append((got[0], k, t, sum(got[1].values()), got[1]))
                continue
            if free[t] >= job.gpus:
                now_ok = True
                break
            got_gpus = free[t]
            start: float | None = None
            for end, g in ends[t]:
                got_gpus += g
                if got_gpus >= job.gpus:
                    start = end
                    break
            if start is None:
                continue
            released = sum(g for end, g in ends[t] if end <= start)
            plans.append((start, k, t, max(0, min(free[t], job.gpus - released)), None))
        if now_ok:
            continue  # it may start now
        best = min((x for x in plans if x[2] not in taken), default=None, key=lambda x: x[:2])
        if best is not None:
            start, _, t, held, nodes = best
            holds.append(
                Reservation(job=job.id, gpu_type=t, gpus=job.gpus, start_s=start, held=held, nodes=nodes)
            )
            taken.add(t)
    groups: dict[str, str] = {}
    if holds:
        by_type = {h.gpu_type: h for h in holds}
        for job in state.pending():
            labels = []
            for t in state.allowed_types(job):
                h = by_type.get(t)
                if h is None:
                    continue
                end = now + remaining_s(predictions.jobs[job.id].runtime_s, now, None)
                if h.job == job.id or end <= h.start_s:
                    labels.append(t)
            if labels:
                groups[job.id] = ",".join(sorted(labels))
    return Reservations(tuple(holds), groups)


def limited(problem: EpochProblem, res: Reservations, state: ClusterState | None = None) -> EpochProblem:
    """The epoch's problem on the capacity less the GPUs held for reservations; with ``state``,
    the GPUs held on nodes (``Reservation.nodes``) are also left out of the model's node rows
    and of every placement but the starts allowed on them (``EpochProblem.held_gpus``)."""
    held = res.held(problem.types)
    if not any(held):
        return problem
    # never below the kept jobs' GPUs
    cap = tuple(max(c - h, u) for c, h, u in zip(problem.capacity, held, problem.used(), strict=True))
    out = dataclasses.replace(problem, capacity=cap)
    on_nodes = [h for h in res.holds if h.nodes]
    if state is None or not on_nodes or not problem.node_records:
        return out
    return _hold_nodes(out, on_nodes, res.groups, state)


def _hold_nodes(
    problem: EpochProblem, holds: list[Reservation], groups: dict[str, str], state: ClusterState
) -> EpochProblem:
    """``problem`` with the GPUs held on nodes out of the reserved types' node rows: the held
    GPUs of a node are its highest free indices."""
    from optsched.engine.candidates import movable_holders, type_placement
    from optsched.schema.snapshot import GpuRef

    per_node: dict[str, int] = {}
    for h in holds:
        assert h.nodes is not None
        per_node.update(h.nodes)
    refs: list[GpuRef] = []
    records = []
    for rec in problem.node_records:
        k = per_node.get(rec.id, 0)
        if k:
            k = min(k, len(rec.free))
            refs += [GpuRef.model_construct(node=rec.id, gpu=g) for g in rec.free[len(rec.free) - k :]]
            rec = dataclasses.replace(rec, free=rec.free[: len(rec.free) - k])
        records.append(rec)
    reserved = {problem.types.index(h.gpu_type) for h in holds}
    placement = list(problem.placement)
    movable = movable_holders(problem.running)
    for t in sorted(reserved):
        tp = problem.placement_of(t)
        if tp is None:
            continue
        shapes = [
            (sh, len(cls.jobs))
            for cls in problem.pending
            for tt, sh in zip(cls.types, cls.shapes, strict=True)
            if tt == t and cls.shapes
        ]
        placement[t] = type_placement(state, problem.types[t], shapes, movable, tuple(records), tp.share_free)
    ok = frozenset(
        (c, t)
        for c, cls in enumerate(problem.pending)
        for t in cls.types
        if t in reserved and problem.types[t] in groups.get(cls.jobs[0], "").split(",")
    )
    return dataclasses.replace(problem, placement=tuple(placement), held_gpus=tuple(refs), hold_ok=ok)


def backfill(problem: EpochProblem, a: Assignment, res: Reservations) -> int:
    """Start, on top of ``a`` (solved on :func:`limited`), the queued jobs that fit on the held
    GPUs and may use them (predicted to end by the reservation's start, or the gang itself);
    other jobs keep off the reserved types. Returns how many jobs it started."""
    from optsched.engine.backends.greedy import fill

    reserved = {problem.types.index(h.gpu_type) for h in res.holds if h.held > 0}
    if not reserved:
        return 0
    classes = []
    for cls in problem.pending:
        may = set(res.groups.get(cls.jobs[0], "").split(","))
        keep = [k for k, t in enumerate(cls.types) if t not in reserved or problem.types[t] in may]
        if len(keep) == len(cls.types):
            classes.append(cls)
            continue
        kept_types = tuple(cls.types[k] for k in keep)
        classes.append(
            dataclasses.replace(
                cls,
                types=kept_types,
                own_types=tuple(t for t in cls.own_types if t in kept_types),
                type_bonus=tuple(cls.type_bonus[k] for k in keep),
                # the starts ``a`` already holds on the dropped types keep their shape there
                shape_types=cls.shape_types or cls.types,
            )
        )
    return fill(dataclasses.replace(problem, pending=tuple(classes)), a)


# the plan after the solve ----------------------------------------------------------------------


@dataclass
class _Item:
    job: str
    gpus: int
    types: list[int]
    spans: list[tuple[int, int, int]]
    """Per start slot k (1-based): (k, first, last) instants of the profile it occupies."""
    value: int
    rows: list[tuple[int, ...]] | None = None
    """Per allowed type (as ``types``): the profile rows a start there takes GPUs of, the
    type's own row first, then its tenant's row where the tenant's use of that type is capped
    (``_Profile.caps``); None: the type's row only."""

    def rows_of(self, pos: int) -> tuple[int, ...]:
        return self.rows[pos] if self.rows is not None else (self.types[pos],)


def _fits(row: list[int], first: int, last: int, g: int) -> bool:
    return all(row[x] >= g for x in range(first, last + 1))


def _greedy_plan(items: list[_Item], free: list[list[int]]) -> list[tuple[int, int] | None]:
    """Each item, in order, at its earliest slot and type whose instants hold it (on every
    row it takes GPUs of: the type's, and its tenant's where capped)."""
    out: list[tuple[int, int] | None] = []
    for it in items:
        got = None
        for k, first, last in it.spans:
            pos = next(
                (pos for pos in range(len(it.types))
                 if all(_fits(free[r], first, last, it.gpus) for r in it.rows_of(pos))),
                None,
            )
            if pos is not None:
                got = (k, it.types[pos])
                for r in it.rows_of(pos):
                    row = free[r]
                    for x in range(first, last + 1):
                        row[x] -= it.gpus
                break
        out.append(got)
    return out


def _score(items: list[_Item], plan: list[tuple[int, int] | None], slots: int) -> int:
    return sum(it.value * (slots + 1 - p[0]) for it, p in zip(items, plan, strict=True) if p is not None)


def _cpsat_plan(
    items: list[_Item],
    free: list[list[int]],
    slots: int,
    hint: list[tuple[int, int] | None],
    seed: int,
    work_s: float,
) -> list[tuple[int, int] | None] | None:
    """The slot model: at most one (slot, type) per item, per-type capacity at every instant of
    the profile; maximise value x earliness. None when it finds nothing better than the hint."""
    # the (slot, type) choices that fit alone, counted before any model is built
    cands: list[list[tuple[int, int, int, int, tuple[int, ...]]]] = []
    terms = 0
    for it in items:
        got = [
            (k, t, first, last, rows)
            for k, first, last in it.spans
            for pos, t in enumerate(it.types)
            for rows in (it.rows_of(pos),)
            if all(_fits(free[r], first, last, it.gpus) for r in rows)
        ]
        terms += sum((last - first + 1) * len(rows) for _, _, first, last, rows in got)
        if terms > MAX_PLAN_TERMS:
            return None
        cands.append(got)
    if not any(cands):
        return None  # nothing fits anywhere: the (empty) plan is the hint's
    from ortools.sat.python import cp_model

    # The model is written straight into its proto: one 0-1 variable per candidate (numbered in
    # item order), at most one per item, a capacity row where the candidates could overfill an
    # instant, value x earliness maximised. Through the Python API (a named variable object per
    # candidate, weighted-sum expressions) building it cost a third of its solve; the proto is
    # the same one, term for term, less the variable names the solver never reads.
    m = cp_model.CpModel()
    proto = m.proto
    use: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    rows_of: list[range] = []
    hint_values: list[int] = []
    coeffs: list[int] = []
    n = 0
    for i, (it, got) in enumerate(zip(items, cands, strict=True)):
        rows_of.append(range(n, n + len(got)))
        for k, t, first, last, rows in got:
            for r in rows:
                for x in range(first, last + 1):
                    use[(r, x)].append((it.gpus, n))
            hint_values.append(int(hint[i] == (k, t)))
            coeffs.append(-it.value * (slots + 1 - k))  # maximised: scaling -1 on the negated sum
            n += 1
    variables = proto.variables
    for _ in range(n):
        variables.add().domain.extend((0, 1))
    constraints = proto.constraints
    for span in rows_of:
        if span:
            constraints.add().at_most_one.literals.extend(span)
    for (t, x), on in sorted(use.items()):
        if sum(g for g, _ in on) > free[t][x]:
            linear = constraints.add().linear
            linear.vars.extend([v for _, v in on])
            linear.coeffs.extend([g for g, _ in on])
            linear.domain.extend((_INT64_MIN, free[t][x]))
    proto.objective.vars.extend(range(n))
    proto.objective.coeffs.extend(coeffs)
    proto.objective.scaling_factor = -1.0
    proto.solution_hint.vars.extend(range(n))
    proto.solution_hint.values.extend(hint_values)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = seed
    solver.parameters.max_deterministic_time = work_s
    wall = solver.parameters.max_time_in_seconds = max(1.0, 20 * work_s)
    from optsched.engine.backends.stdio import solver_output_to_stderr

    with solver_output_to_stderr():  # solver text never reaches stdout
        status = solver.solve(m)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    if solver.wall_time >= wall:
        # a plan cut by the wall clock (a safety net only) would depend on the load
        raise _WallCut
    if solver.objective_value <= _score(items, hint, slots) + 0.5:
        return None
    chosen = solver.response_proto.solution
    return [
        next(((k, t) for (k, t, *_), v in zip(got, span, strict=True) if chosen[v]), None)
        for got, span in zip(cands, rows_of, strict=True)
    ]


class _WallCut(Exception):
    """The slot model was stopped by the wall clock (never remembered by :func:`_cached_plan`)."""


_ItemKey = tuple[
    int, tuple[int, ...], tuple[tuple[int, int, int], ...], int, tuple[tuple[int, ...], ...] | None
]
"""An item's gpus, types, spans, value and rows (its job id does not enter the slot model)."""
_PlanKey = tuple[
    tuple[_ItemKey, ...],
    tuple[tuple[int, ...], ...],
    int,
    tuple[tuple[int, int] | None, ...],
    int,
    float,
]


@functools.lru_cache(maxsize=64)
def _cached_plan(key: _PlanKey) -> tuple[tuple[int, int] | None, ...] | None:
    """:func:`_cpsat_plan` of the inputs in ``key``, remembered (thread-safe, 64 entries).

    The slot model is a pure function of its inputs (one worker, fixed seed, deterministic work
    limit), and in a saturated cluster successive epochs often give it the very same inputs
    (the same queue against running jobs all past their predictions); solving it again gave
    the same answer at 20-40 ms a time. A run the wall clock stopped raises and is not kept."""
    items_key, free, slots, hint, seed, work_s = key
    items = [
        _Item("", g, list(types), list(spans), value, list(rows) if rows is not None else None)
        for g, types, spans, value, rows in items_key
    ]
    got = _cpsat_plan(items, [list(r) for r in free], slots, list(hint), seed, work_s)
    return tuple(got) if got is not None else None


def _plan_key(
    items: list[_Item], free: list[list[int]], slots: int, hint: list[tuple[int, int] | None],
    seed: int, work_s: float,
) -> _PlanKey:
    return (
        tuple(
            (it.gpus, tuple(it.types), tuple(it.spans), it.value,
             tuple(it.rows) if it.rows is not None else None)
            for it in items
        ),
        tuple(tuple(r) for r in free),
        slots,
        tuple(hint),
        seed,
        work_s,
    )


@dataclass
class _Profile:
    """The per-type capacity profile over the look-ahead horizon."""

    instants: list[float]
    """The slot starts ``now + k * epoch`` (k = 0 .. L) and the reserved gangs' starts, sorted."""
    slot_at: list[int]
    """Per slot k (0 .. L): the index of its start in ``instants``."""
    free: list[list[int]]
    """Per type index, per instant: the free GPUs (below zero where a gang is planned beyond them)."""
    events: list[list[tuple[float, int]]]
    """Per type index, sorted: GPUs freed (+) at predicted ends and taken (-) by reserved gangs."""
    caps: list[list[int]] = field(default_factory=list)
    """Per (tenant, type) whose use is capped (a ``borrow_limit`` on the type: at most quota
    plus that limit, 0 for a hard partition), per instant: the GPUs it may still take. Row
    ``len(free) + k`` of the plan for the k-th key of ``cap_row``."""
    cap_row: dict[tuple[str, int], int] = field(default_factory=dict)
    """(tenant, type index) -> its row in the plan (``len(free) + k``)."""


def _occupancy(
    state: ClusterState,
    decision: Decision,
    predictions: Predictions,
    holds: list[Reservation],
    cap: dict[str, int],
) -> tuple[list[tuple[str, float, float, int, str]], dict[str, int], dict[str, float]]:
    """Who holds GPUs over [start, predicted end): kept running jobs, starts, reserved gangs.

    Returns ``held_by`` (type, start, predicted end, GPUs, tenant), the GPUs free now per type (capacity
    less the kept running jobs and the starts) and the expected start of each reserved gang
    (its ``T``)."""
    snap = state.snapshot
    now = snap.now
    types = state.type_names
    stopped = {p.job for p in decision.preempt}
    held_by: list[tuple[str, float, float, int, str]] = []
    free_now = {t: cap[t] for t in types}
    for job in state.running():
        if job.id in stopped or job.id in state.host_of:
            continue
        assert job.allocation is not None
        if job.id in state.on_lost_nodes:
            continue
        t = state.job_type(job)
        end = now + remaining_s(predictions.jobs[job.id].runtime_s, now, job.start_s)
        held_by.append((t, now, end, job.gpus, job.tenant))
        free_now[t] -= job.gpus
    for s in decision.start:
        if s.colocated_with:
            continue
        t = state.node_type(s.allocation[0].node)
        end = now + remaining_s(predictions.jobs[s.job].runtime_s, now, None)
        held_by.append((t, now, end, len(s.allocation), state.job(s.job).tenant))
        free_now[t] -= len(s.allocation)
    expected: dict[str, float] = {}
    for h in holds:
        end = h.start_s + remaining_s(predictions.jobs[h.job].runtime_s, now, None)
        held_by.append((h.gpu_type, h.start_s, end, h.gpus, state.job(h.job).tenant))
        expected[h.job] = h.start_s
    return held_by, free_now, expected


def _profile(
    state: ClusterState,
    lp: LookaheadParams,
    cap: dict[str, int],
    held_by: list[tuple[str, float, float, int, str]],
    holds: list[Reservation],
) -> _Profile:
    """The profile's instants (the slot starts and the reserved gangs' starts), the free GPUs
    per type at each, the events between the instants, and the rows of the tenants whose use
    of a type is capped (``borrow_limit``): where tenants may not borrow (hard partitions) a
    queued job waits for its own tenant's jobs to end, whatever else is free."""
    now, epoch, slots = state.snapshot.now, lp.epoch_s, lp.epochs
    types = state.type_names
    tindex = {t: k for k, t in enumerate(types)}
    instants = sorted({now + k * epoch for k in range(slots + 1)} | {h.start_s for h in holds})
    slot_at = [bisect.bisect_left(instants, now + k * epoch) for k in range(slots + 1)]
    free = [[cap[t]] * len(instants) for t in types]
    # between the instants: GPUs freed (+) at predicted ends and taken (-) by reserved gangs
    events: list[list[tuple[float, int]]] = [[] for _ in types]
    cap_row: dict[tuple[str, int], int] = {}
    caps: list[list[int]] = []
    for ten in state.tenant_ids:
        for t in types:
            lim = state.borrow_limit(ten, t)
            if lim is not None:
                cap_row[(ten, tindex[t])] = len(types) + len(caps)
                caps.append([state.quota(ten, t) + lim] * len(instants))
    for tname, start, end, g, ten in held_by:
        ti = tindex[tname]
        span = range(bisect.bisect_left(instants, start), bisect.bisect_left(instants, end))
        row = free[ti]
        for x in span:
            row[x] -= g
        r = cap_row.get((ten, ti))
        if r is not None:
            crow = caps[r - len(types)]
            for x in span:
                crow[x] -= g
        events[ti].append((end, g))
        if start > now:
            events[ti].append((start, -g))
    for ev in events:
        ev.sort()
    return _Profile(instants, slot_at, free, events, caps, cap_row)


def _plan_items(
    state: ClusterState,
    decision: Decision,
    predictions: Predictions,
    density: dict[str, float],
    lp: LookaheadParams,
    holds: list[Reservation],
    cap: dict[str, int],
    prof: _Profile,
) -> list[_Item]:
    """The queued jobs to place (not the reserved gangs, not jobs no allowed type can hold), in
    queue order, each with its allowed types, its span of instants per start slot and its
    integer value (``density x gpus`` scaled to ``VALUE_SCALE``, at least 1)."""
    now, epoch, slots = state.snapshot.now, lp.epoch_s, lp.epochs
    tindex = {t: k for k, t in enumerate(state.type_names)}
    instants, slot_at = prof.instants, prof.slot_at
    held_jobs = {h.job for h in holds}
    items: list[_Item] = []
    vmax = max((density.get(j, 0.0) * state.job(j).gpus for j in decision.queue), default=0.0)
    for jid in decision.queue:
        if jid in held_jobs:
            continue
        job = state.job(jid)
        allowed = [tindex[t] for t in state.allowed_types(job) if cap.get(t, 0) >= job.gpus]
        if not allowed:
            continue
        rt = remaining_s(predictions.jobs[jid].runtime_s, now, None)
        spans = []
        for k in range(1, slots + 1):
            first = slot_at[k]
            last = bisect.bisect_left(instants, now + k * epoch + rt) - 1
            spans.append((k, first, last))
        v = density.get(jid, 0.0) * job.gpus
        value = max(1, round(VALUE_SCALE * v / vmax)) if vmax > 0 else 1
        rows: list[tuple[int, ...]] = [
            (t,) if (r := prof.cap_row.get((job.tenant, t))) is None else (t, r) for t in allowed
        ]
        items.append(_Item(jid, job.gpus, allowed, spans, value, rows if prof.cap_row else None))
    return items


def _best_plan(
    items: list[_Item], free: list[list[int]], slots: int, seed: int, time_limit_s: float
) -> tuple[list[tuple[int, int] | None], str]:
    """The placement (slot, type index) per item and how it was found: the greedy plan, or the
    CP-SAT slot model's when it is better ("greedy" or "cpsat")."""
    # where a reserved gang is planned beyond the profile's free GPUs an instant is below zero:
    # nothing else goes there
    plan = _greedy_plan(items, [list(row) for row in free])
    how = "greedy"
    if items:
        try:
            better = _cached_plan(_plan_key(items, free, slots, plan, seed, lookahead_work_s(time_limit_s)))
        except _WallCut:
            better = None
        if better is not None:
            plan, how = list(better), "cpsat"
    return plan, how


def _expected_starts(
    items: list[_Item],
    plan: list[tuple[int, int] | None],
    prof: _Profile,
    now: float,
    epoch: float,
    expected: dict[str, float],
) -> None:
    """Write each planned job's expected start into ``expected``.

    A job planned at slot k may start as soon as GPUs free up after slot k - 1 (a decision
    follows a completion): its expected start is the earliest predicted end in between from
    which its gang fits until the slot, given the jobs placed before it (plan order)."""
    final = [list(row) for row in prof.free]
    for it, p in zip(items, plan, strict=True):
        if p is not None:
            _, first, last = it.spans[p[0] - 1]
            for x in range(first, last + 1):
                final[p[1]][x] -= it.gpus
    placed = sorted(
        ((p[0], n, it, p[1]) for n, (it, p) in enumerate(zip(items, plan, strict=True)) if p is not None),
        key=lambda x: (x[0], x[1]),
    )
    claims: dict[tuple[int, int], list[tuple[float, int]]] = defaultdict(list)
    for k, _, it, ti in placed:
        lo, hi = now + (k - 1) * epoch, now + k * epoch
        ev = prof.events[ti]
        inside = ev[bisect.bisect_right(ev, (lo, math.inf)) : bisect.bisect_left(ev, (hi, -math.inf))]
        base = final[ti][prof.slot_at[k - 1]]
        # free GPUs just after each event inside (lo, hi), before this job
        level, levels = base, []
        for when, g in inside:
            level += g
            levels.append((when, level - sum(c for at, c in claims[(ti, k)] if at <= when)))
        got = hi
        for j in range(len(levels)):
            if all(f >= it.gpus for _, f in levels[j:]):
                got = levels[j][0]
                break
        if got < hi:
            claims[(ti, k)].append((got, it.gpus))
        expected[it.job] = got


def _write_plan(
    decision: Decision,
    expected: dict[str, float],
    holds: list[Reservation],
    lp: LookaheadParams,
    how: str,
) -> None:
    """Write the plan into ``decision``: ``queue`` by expected start (then the old order),
    ``expected_start_s``, ``reservations`` and the solver note."""
    order = {jid: k for k, jid in enumerate(decision.queue)}
    decision.queue = sorted(decision.queue, key=lambda j: (expected.get(j, math.inf), order[j]))
    decision.expected_start_s = {j: round(expected[j], 3) for j in decision.queue if j in expected}
    decision.reservations = holds
    decision.solver.notes.append(
        f"look-ahead: {len(decision.expected_start_s)} of {len(decision.queue)} queued job(s) planned "
        f"within {lp.epochs} epoch(s) of {lp.epoch_s:g} s ({how} plan); {len(holds)} reservation(s)"
    )


def _explain_queue(
    state: ClusterState,
    decision: Decision,
    predictions: Predictions,
    holds: list[Reservation],
    free_now: dict[str, int],
) -> None:
    """Update each queued job's explanation: its expected start, its reservation (a reserved
    gang), and the ``reserved`` reason for the jobs that wait for a reservation: they fit the
    free GPUs only with the held ones, and would not end before the reserved gang starts."""
    now = state.snapshot.now
    by_type = {h.gpu_type: h for h in holds}
    exps = decision.explanations
    for jid in decision.queue:
        e = exps.get(jid)
        if e is None:
            continue
        update: dict[str, object] = {"expected_start_s": decision.expected_start_s.get(jid)}
        own = next((h for h in holds if h.job == jid), None)
        if own is not None:
            update["text"] = (
                f"{e.text} It has a reservation: {own.held} free '{own.gpu_type}' GPUs are held for it, "
                f"and its {own.gpus} GPUs are predicted free at {own.start_s:.0f}."
            )
        job = state.job(jid)
        end = now + remaining_s(predictions.jobs[jid].runtime_s, now, None)
        for t in state.allowed_types(job):
            hold = by_type.get(t)
            if hold is None or hold.job == jid or hold.held <= 0 or e.binding not in _LIFTABLE:
                continue
            h = hold
            f = free_now[t]
            if f >= job.gpus and f - h.held < job.gpus and end > h.start_s:
                update.update(
                    code=QueueReason.RESERVED.value,
                    binding="reservation",
                    reserved_for=h.job,
                    blocked_by=[],
                    text=(
                        f"reserved for gang {h.job} at time {h.start_s:.0f}: {f} '{t}' GPUs are free, but "
                        f"{h.held} are held for its {h.gpus}-GPU start, and this job (predicted "
                        f"{end - now:.0f} s) would not end before then. " + e.text
                    ),
                )
                decision.queue_reasons[jid] = QueueReason.RESERVED
                break
        exps[jid] = e.model_copy(update=update)


def annotate(
    state: ClusterState,
    decision: Decision,
    predictions: Predictions,
    density: dict[str, float],
    lp: LookaheadParams,
    res: Reservations,
    *,
    seed: int = 0,
    time_limit_s: float = 1.0,
) -> None:
    """Plan the queued jobs over the look-ahead horizon and write the plan into ``decision``:
    ``queue`` in planned order, ``expected_start_s``, ``reservations``, the ``reserved`` queue
    reasons and each queued job's explanation's expected start."""
    if not lp.enabled or not decision.queue:
        return
    cap = state.capacity()
    queued = set(decision.queue)
    holds = [h for h in res.holds if h.job in queued]
    held_by, free_now, expected = _occupancy(state, decision, predictions, holds, cap)
    prof = _profile(state, lp, cap, held_by, holds)
    items = _plan_items(state, decision, predictions, density, lp, holds, cap, prof)
    plan, how = _best_plan(items, prof.free + prof.caps, lp.epochs, seed, time_limit_s)
    _expected_starts(items, plan, prof, state.snapshot.now, lp.epoch_s, expected)
    _write_plan(decision, expected, holds, lp, how)
    _explain_queue(state, decision, predictions, holds, free_now)

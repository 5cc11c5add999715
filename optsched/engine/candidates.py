"""Candidate generation: what the epoch's model may choose from, capacity-aware and complete.

``build_problem`` turns a validated :class:`~optsched.engine.state.ClusterState`, the predictions and
the assurance signal into an :class:`~optsched.engine.problem.EpochProblem`:

* **pending classes**: every pending job is a member of one class of interchangeable jobs
  (tenant, gang size, allowed types, QoS, priority class); members are sorted by value and the class may start
  at most ``cap`` of them, the number its gang size fits into the GPUs that could ever be free
  (capacity of its allowed types minus GPUs held by jobs that must keep running). Since members
  differ only in value, some optimal solution starts a prefix of each class, so the classes
  lose nothing: the model is the whole problem at any size.
* **running items**: kept running jobs, with the cost of preempting those that may be stopped;
* **guest candidates**: (pending shareable job, running shareable host) pairs on MPS types
  whose predicted memories fit and whose predicted host slowdown is within the host tenant's
  assurance-driven limit. A job with guest candidates forms a class of its own, since its
  pairs are its own.
* **operator controls**: a job's priority class weight scales its value (and a running job's
  preemption cost); a running job younger than its minimum runtime is no priority victim; a
  tenant's hysteresis scales the static cost its jobs' priority preemptions must be paid with,
  and its ``max_gpus_per_epoch`` becomes ``EpochProblem.preempt_cap``.
* **over-quota use** (amended invariant 4): GPUs running above quota without a loan that no
  lender can cover keep running; the tenant's classes may not add to them on that type.
* **elastic jobs** (:mod:`optsched.engine.elastic`): a pending elastic job is a group of
  singleton classes, one per allowed size; a running one carries how far it may grow and
  shrink, with the value of a step of growth and the cost of a step of shrinking.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Mapping, Sequence

import numpy as np

from optsched.engine import assurance as asr
from optsched.engine import elastic
from optsched.engine.chunks import chunks_of, levels_for
from optsched.engine.ledger import NodeRecord, has_room, node_records
from optsched.engine.node_loss import (
    borrow_limits_after_node_loss,
    lend_limits_after_node_loss,
    restart_types,
)
from optsched.engine.objective import DEFAULT_WEIGHTS, ObjectiveWeights, job_value, preemption_cost
from optsched.engine.problem import (
    EpochProblem,
    GuestCandidate,
    MovableNode,
    PendingClass,
    RunningItem,
    TypePlacement,
)
from optsched.engine.quota_tree import EMPTY, LoanMatcher, QuotaTree
from optsched.engine.rules import (
    cap_starved,
    class_weight,
    protected,
    starved_types,
    victim_slack,
)
from optsched.engine.shape import Shape, never_fits, shape_of
from optsched.engine.state import ClusterState
from optsched.predict.base import Predictions, Predictor
from optsched.schema.limits import MILLI_PER_GPU
from optsched.schema.snapshot import Job

MAX_GUEST_JOBS = 256
"""Pending shareable jobs (highest value first) whose MPS pairs are scored; if more exist, the
problem is marked incomplete (the decision is then never labelled optimal)."""
MAX_HOSTS_PER_GUEST = 6
MAX_HOSTS_SCANNED = 48
"""Per guest job, at most this many hosts (most memory room first) get a pair prediction."""

ShapeSig = tuple[int, bool, int, int, int, str, str]
"""What a job's node shape depends on besides its gang: (gpus_per_node, spread, cpu_milli,
memory_mib, gpu_milli, topology level, topology mode)."""
ClassKey = tuple[int, int, tuple[int, ...], bool, str, str, str, ShapeSig]
"""(tenant, gang, allowed types, guaranteed, singleton job or "", priority class or "", backfill
group or "", shape)."""


def _shape_sig(job: Job) -> ShapeSig:
    topo = job.topology
    return (
        job.gpus_per_node or 0, job.spread or job.is_elastic, job.cpu_milli or 0, job.memory_mib or 0,
        job.gpu_milli or 1000, topo.level if topo else "", topo.mode if topo else "",
    )


def build_problem(
    state: ClusterState,
    predictions: Predictions,
    predictor: Predictor,
    signal: dict[str, asr.TenantAssurance],
    weights: ObjectiveWeights = DEFAULT_WEIGHTS,
    groups: Mapping[str, str] | None = None,
    slack_cap: Mapping[str, int] | None = None,
) -> EpochProblem:
    """Score the candidates of one epoch (every pending job is kept).

    ``groups`` (job id -> label) splits classes further: jobs with different labels are never
    members of one class (the look-ahead's backfill groups, :mod:`optsched.engine.lookahead`).
    ``slack_cap`` (type -> GPUs) lowers the victim slack (a part of a partitioned epoch).
    """
    slack = victim_slack(state)
    sc = _scope(state, predictions, signal, weights, groups)
    run = _running_items(sc)
    hold = _holdings(sc, run.items)
    pend = _pending_members(sc, hold.kept_over)
    group_of, static_of = _elastic_members(sc, pend, hold.kept_over)
    _elastic_growth(sc, run, pend.density)
    pair_rows, complete = _guest_pairs(sc, predictor, run.items, pend)
    classes, guests, reclaim_bonus = _classes(sc, pend, hold, run.max_cost, group_of, static_of, pair_rows)
    records = node_records(state, frozenset(run.forced))
    placement, shared = _placement(sc, run.items, classes, records)
    snap = state.snapshot
    return EpochProblem(
        types=sc.types,
        tenants=sc.ten_ids,
        capacity=sc.capacity,
        quota=sc.quota,
        # quota a node loss freed from guaranteed jobs is held for them, not lent (node_loss)
        lend_limit=_held_lend(state, sc.lend),
        borrow_limit=_held_limits(borrow_limits_after_node_loss(state), state, sc.borrow),
        pending=tuple(classes),
        running=tuple(run.items),
        guests=tuple(guests),
        forced=tuple(run.forced),
        evicted=tuple(run.evicted),
        density=pend.density,
        unplaceable=tuple(pend.unplaceable),
        held_back=tuple(pend.held_back),
        no_loan=tuple(sorted(pend.restart)),  # nor any start on loan there (node_loss)
        victim_slack=tuple(
            min(s, slack_cap.get(t, s)) if slack_cap is not None else s
            for t, s in ((t, slack[t]) for t in sc.types)
        ),
        kept_over=hold.kept_over,
        deficit=hold.deficit,
        reclaim_bonus=reclaim_bonus,
        objective=sc.w,
        complete=complete,
        bound_slack=(
            sum(-negv for negv, _, _ in pend.shareable_jobs[MAX_GUEST_JOBS:]) if not complete else 0.0
        ),
        notes=tuple(_notes(state, pend, complete)),
        preempt_cap=tuple(
            t.preemption.max_gpus_per_epoch if t.preemption is not None else None for t in snap.tenants
        ),
        tree=state.tree,
        placement=placement,
        frag_scale=sc.w.fragmentation * min(pend.density.values(), default=0.0),
        shared_gpus=shared,
        node_records=records if any(tp is not None for tp in placement) else (),
        largest=tuple(state.largest_node[t] for t in sc.types),
        topology_levels=state.topology_levels,
        node_count=len(state.snapshot.nodes),
    )


@dataclasses.dataclass(frozen=True)
class _Scope:
    """The epoch's inputs and the per-type and per-tenant lookups every section reads."""

    state: ClusterState
    predictions: Predictions
    signal: dict[str, asr.TenantAssurance]
    w: ObjectiveWeights
    groups: Mapping[str, str] | None
    types: tuple[str, ...]
    tindex: dict[str, int]
    capacity: tuple[int, ...]
    speeds: list[float]
    ten_ids: tuple[str, ...]
    quota: tuple[tuple[int, ...], ...]
    borrow: tuple[tuple[int | None, ...], ...]
    lend: tuple[tuple[int | None, ...], ...]
    tweights: tuple[float, ...]
    """Assurance-driven tenant weights."""
    node_type: dict[str, int]
    share_limit: dict[str, float]
    """Per tenant: the most slowdown its hosts may take from an MPS guest."""
    delays: dict[str, float]

    @property
    def nt(self) -> int:
        return len(self.types)

    @property
    def nk(self) -> int:
        return len(self.ten_ids)


def _scope(
    state: ClusterState,
    predictions: Predictions,
    signal: dict[str, asr.TenantAssurance],
    w: ObjectiveWeights,
    groups: Mapping[str, str] | None,
) -> _Scope:
    """The lookups of one epoch: types, capacity, speeds, quotas and limits, tenant weights."""
    snap = state.snapshot
    types = state.type_names
    tindex = {t: k for k, t in enumerate(types)}
    cap_map = state.capacity()
    ten_ids = state.tenant_ids
    return _Scope(
        state=state,
        predictions=predictions,
        signal=signal,
        w=w,
        groups=groups,
        types=types,
        tindex=tindex,
        capacity=tuple(cap_map[t] for t in types),
        speeds=[snap.gpu_types[t].speed for t in types],
        ten_ids=ten_ids,
        quota=tuple(tuple(state.quota(i, t) for t in types) for i in ten_ids),
        borrow=tuple(tuple(state.borrow_limit(i, t) for t in types) for i in ten_ids),
        lend=tuple(tuple(state.lend_limit(i, t) for t in types) for i in ten_ids),
        tweights=tuple(
            asr.tenant_weight(snap.tenants[k].weight, signal[i].value) for k, i in enumerate(ten_ids)
        ),
        node_type={n.id: tindex[n.gpu_type] for n in snap.nodes},
        share_limit=asr.share_limits(signal),
        delays={i: asr.max_delay(state, i)[0] for i in ten_ids},
    )


@dataclasses.dataclass
class _Running:
    """The running jobs' section: the kept items, the jobs a node loss or an eviction stops,
    the largest preemption cost, and each elastic item's own value per GPU."""

    items: list[RunningItem]
    forced: list[str]
    evicted: list[str]
    max_cost: float
    own_density: dict[int, float]
    """Elastic running item -> its fresh value per GPU."""


def _running_items(sc: _Scope) -> _Running:
    """Every running job as a :class:`RunningItem` (preemption cost, MPS slots, elastic steps),
    except those on a lost node (``forced``) and guests whose host may no longer share
    (``evicted``)."""
    state, snap, predictions, w = sc.state, sc.state.snapshot, sc.predictions, sc.w
    types, tweights, share_limit = sc.types, sc.tweights, sc.share_limit
    running: list[RunningItem] = []
    forced: list[str] = []
    evicted: list[str] = []
    guest_on: dict[str, int] = defaultdict(int)  # host id -> GPUs already shared
    for guest_id, its_host in state.host_of.items():
        guest_on[its_host] += state.job(guest_id).gpus
    max_cost = 0.0
    node_index = state.node_index
    own_density: dict[int, float] = {}  # elastic running item -> its fresh value per GPU
    for job in state.running():
        assert job.allocation is not None
        if job.id in state.on_lost_nodes:
            forced.append(job.id)
            continue
        if asr.evicted_guest(state, job, share_limit):
            evicted.append(job.id)
            continue
        host_id = state.host_of.get(job.id)
        k = state.tenant_index[job.tenant]
        t = sc.node_type[job.allocation[0].node]
        guest = host_id is not None
        guaranteed = job.qos == "guaranteed"
        tenant = snap.tenants[k]
        # a job younger than its minimum runtime is no priority victim (reclaim still may)
        young = not guest and protected(snap, tenant, job)
        # a fractional job keeps its share: a model that counts whole GPUs cannot tell when
        # stopping shares frees a GPU (it stops only for node loss, ``forced``)
        candidate = not job.is_fractional and (
            job.on_loan or guest or (job.is_preemptible and not guaranteed and not young)
        )
        est = predictions.jobs[job.id]
        elapsed = snap.now - (job.start_s if job.start_s is not None else snap.now)
        remaining = max(0.0, est.runtime_s - elapsed)
        lost = job.restart_cost_s
        cost = preemption_cost(w, tweights[k], job.gpus, guaranteed, lost, remaining)
        static_cost = preemption_cost(w, tenant.weight, job.gpus, guaranteed, lost, remaining)
        if job.priority_class is not None:
            cw = class_weight(snap, tenant, job)
            cost *= cw
            static_cost *= cw
        if tenant.preemption is not None and not job.on_loan and not guest:
            static_cost *= 1.0 + tenant.preemption.hysteresis  # paid with (1 + h) times its cost
        max_cost = max(max_cost, cost)
        slots = 0
        if not guest and job.is_shareable and snap.gpu_types[types[t]].mps and not job.is_elastic:
            slots = 0 if guest_on.get(job.id, 0) else job.gpus  # MPS *pairs*: one guest a host
        # an elastic job sharing its GPUs through MPS keeps its size while it shares them
        step, grow_steps, shrink_steps = elastic.steps(job, candidate and not job.colocated)
        shrink = shrink_static = 0.0
        if step:
            shrink, shrink_static, own_density[len(running)] = _elastic_running_terms(sc, job, k, remaining)
        per_node: dict[int, int] = defaultdict(int)
        for ref in job.allocation:
            per_node[node_index[ref.node]] += 1
        running.append(
            RunningItem(
                job.id, k, t, job.gpus, job.on_loan, guest, candidate, cost, lost, slots, host=host_id,
                static_cost=static_cost, step=step, grow_steps=grow_steps, shrink_steps=shrink_steps,
                shrink_cost=shrink, shrink_static=shrink_static, overhead_s=job.resize_overhead_s,
                nodes=tuple(sorted(per_node.items())), alloc=tuple(job.allocation),
                cpu_milli=job.cpu_milli or 0, memory_mib=job.memory_mib or 0,
                share=(job.gpu_milli or 0) if job.is_fractional else 0,
            )
        )
    return _Running(running, forced, evicted, max_cost, own_density)


def _elastic_running_terms(sc: _Scope, job: Job, k: int, remaining: float) -> tuple[float, float, float]:
    """An elastic running job's cost of a step of shrinking (now and static, the static one
    with its tenant's hysteresis) and its own fresh value per GPU."""
    snap, w = sc.state.snapshot, sc.w
    tenant = snap.tenants[k]
    guaranteed = job.qos == "guaranteed"
    cw = class_weight(snap, tenant, job)
    # both at the static weight: a start whose static worth pays for a shrink is worth
    # more than the shrink now, so waiting never tips a job into shrinking another
    shrink = shrink_static = cw * elastic.shrink_cost(w, tenant.weight, job, guaranteed, remaining)
    if tenant.preemption is not None and not job.on_loan:
        shrink_static *= 1.0 + tenant.preemption.hysteresis
    fresh = job_value(w, sc.tweights[k], job.gpus, guaranteed, 0.0, sc.delays[job.tenant], remaining)
    return shrink, shrink_static, cw * fresh / job.gpus


@dataclasses.dataclass
class _Holdings:
    """What running jobs hold, per tenant and type, and what that leaves over quota."""

    held_own: list[list[int]]
    movable_own: list[list[int]]
    """Of ``held_own``: priority victims."""
    fixed: list[int]
    """Per type: GPUs held by jobs that must keep running."""
    kept_over: tuple[tuple[int, ...], ...]
    deficit: tuple[int, ...]


def _holdings(sc: _Scope, running: list[RunningItem]) -> _Holdings:
    """GPUs held per tenant and type (all, own, movable own), those that must keep running,
    over-quota use no lender can cover (``kept_over``) and the on-loan ``deficit``."""
    nt, nk = sc.nt, sc.nk
    held_all = [[0] * nt for _ in range(nk)]
    held_own = [[0] * nt for _ in range(nk)]
    movable_own = [[0] * nt for _ in range(nk)]  # of held_own: priority victims
    fixed = [0] * nt  # GPUs held by jobs that must keep running
    for r in running:
        if r.guest:
            continue
        held_all[r.tenant][r.type] += r.gpus
        if not r.on_loan:
            held_own[r.tenant][r.type] += r.gpus
            if r.priority_victim:
                movable_own[r.tenant][r.type] += r.gpus
        if not r.candidate:
            fixed[r.type] += r.gpus
    kept_over, short = _over_quota(
        held_all, held_own, sc.quota, sc.borrow, sc.lend, sc.ten_ids, sc.types, sc.state.tree
    )
    # where lenders cannot cover all on-loan use, some on-loan jobs must stop whatever starts;
    # which ones is the model's choice, so any of them may free GPUs that nothing uses
    on_loan_gpus = [0] * nt
    for r in running:
        if r.on_loan and not r.guest:
            on_loan_gpus[r.type] += r.gpus
    deficit = tuple(on_loan_gpus[t] if short[t] > 0 else 0 for t in range(nt))
    return _Holdings(held_own, movable_own, fixed, kept_over, deficit)


@dataclasses.dataclass
class _Pending:
    """The pending jobs' section: values, class members and what is set aside."""

    density: dict[str, float]
    static: dict[str, float]
    unplaceable: list[str]
    members: dict[ClassKey, list[tuple[float, float, str]]]
    memory: dict[str, float]
    shareable_jobs: list[tuple[float, str, ClassKey]]
    unknown_classes: set[tuple[str, str]]
    flexible: list[tuple[Job, int, float, float, str]]
    """Elastic pending jobs: (job, tenant, value, static value, priority class)."""
    off: set[int]
    """Types best-effort jobs keep off (a cap-starved tenant's, and restart types)."""
    restart: set[int]
    """Types on which guaranteed jobs a node loss stops restart next (no start on loan there)."""
    held_back: list[str]


def _pending_members(sc: _Scope, kept_over: tuple[tuple[int, ...], ...]) -> _Pending:
    """Every pending job's value and static value, sorted into the members of its class (the
    elastic ones set aside for :func:`_elastic_members`), or set aside as unplaceable or held
    back for a cap-starved tenant's guaranteed jobs."""
    state, snap, predictions, groups = sc.state, sc.state.snapshot, sc.predictions, sc.groups
    types, tindex, capacity = sc.types, sc.tindex, sc.capacity
    density: dict[str, float] = {}
    static: dict[str, float] = {}
    unplaceable: list[str] = []
    members: dict[ClassKey, list[tuple[float, float, str]]] = defaultdict(list)
    memory: dict[str, float] = {}
    shareable_jobs: list[tuple[float, str, ClassKey]] = []
    # per (tenant, gang, allowed types, shape): the usable type indices and whether one is MPS
    kinds: dict[tuple[int, int, tuple[str, ...], ShapeSig], tuple[tuple[int, ...], bool]] = {}
    unknown_classes: set[tuple[str, str]] = set()
    # elastic pending jobs: (job, tenant, value, static value, priority class), sized below
    flexible: list[tuple[Job, int, float, float, str]] = []
    starved = cap_starved(state)
    # best-effort jobs keep off the types a cap-starved tenant's guaranteed jobs wait for, and
    # those on which jobs a node loss stops restart next (node_loss)
    restart = {tindex[t] for t in restart_types(state)}
    off = {tindex[t] for t in starved_types(state, starved)} | restart
    held_back: list[str] = []
    for job in state.pending():
        k = state.tenant_index[job.tenant]
        job_types = state.allowed_types(job)  # memory-filtered: two jobs of one kind share it
        sig = _shape_sig(job)
        kind = (k, job.gpus, job_types, sig)
        got = kinds.get(kind)
        if got is None:
            usable = tuple(
                sorted(
                    tindex[t]
                    for t in job_types
                    if capacity[tindex[t]] >= job.gpus and kept_over[k][tindex[t]] == 0
                    # no node (or domain) of the type could ever hold its shape
                    and (job.is_elastic or never_fits(state, shape_of(state, job, t), t) is None)
                )
            )
            got = kinds[kind] = (usable, any(snap.gpu_types[types[t]].mps for t in usable))
        allowed, any_mps = got
        est = predictions.jobs[job.id]
        guaranteed = job.qos == "guaranteed"
        v, static[job.id], pclass = _pending_value(sc, job, k, est.runtime_s, unknown_classes)
        density[job.id] = v / job.gpus
        if off and not guaranteed and allowed:
            allowed = tuple(t for t in allowed if t not in off)
            if not allowed:
                held_back.append(job.id)  # a starved tenant's guaranteed jobs need its types
                continue
            any_mps = any(snap.gpu_types[types[t]].mps for t in allowed)
        if job.is_elastic:
            memory[job.id] = est.memory_gib
            flexible.append((job, k, v, static[job.id], pclass))
            continue
        if not allowed:
            unplaceable.append(job.id)
            continue
        group = groups.get(job.id, "") if groups else ""
        key: ClassKey = (k, job.gpus, allowed, guaranteed, "", pclass, group, sig)
        memory[job.id] = est.memory_gib
        if job.is_shareable and any_mps:
            shareable_jobs.append((-v, job.id, key))
        members[key].append((-v, job.submit_s, job.id))
    return _Pending(
        density, static, unplaceable, members, memory, shareable_jobs, unknown_classes, flexible, off,
        restart, held_back,
    )


def _pending_value(
    sc: _Scope, job: Job, k: int, runtime_s: float, unknown_classes: set[tuple[str, str]]
) -> tuple[float, float, str]:
    """A pending job's value now and its static value (both scaled by its priority class's
    weight) and its priority class ("" for none; one in no table is added to
    ``unknown_classes``)."""
    snap, w = sc.state.snapshot, sc.w
    d = sc.delays[job.tenant]
    guaranteed = job.qos == "guaranteed"
    v = job_value(w, sc.tweights[k], job.gpus, guaranteed, snap.now - job.submit_s, d, runtime_s)
    static = job_value(w, snap.tenants[k].weight, job.gpus, guaranteed, 0.0, d, runtime_s)
    pclass = ""
    if job.priority_class is not None:
        pclass = job.priority_class
        tables = (snap.tenants[k].priority_classes or {}, snap.priority_classes or {})
        if not any(pclass in table for table in tables):
            unknown_classes.add((job.tenant, pclass))
        cw = class_weight(snap, snap.tenants[k], job)
        v *= cw
        static *= cw
    return v, static, pclass


def _elastic_members(
    sc: _Scope, pend: _Pending, kept_over: tuple[tuple[int, ...], ...]
) -> tuple[dict[ClassKey, str], dict[ClassKey, float]]:
    """Each elastic pending job as one singleton class per allowed size (added to
    ``pend.members``; one with no usable type is unplaceable): each class's job (its group)
    and static value."""
    state, w, groups, tindex, capacity = sc.state, sc.w, sc.groups, sc.tindex, sc.capacity
    members, off = pend.members, pend.off
    rate = elastic.growth_rate(w, list(pend.density.values()))
    group_of: dict[ClassKey, str] = {}
    static_of: dict[ClassKey, float] = {}
    for job, k, v, sv, pclass in pend.flexible:
        guaranteed = job.qos == "guaranteed"
        placed = False
        for size in elastic.start_sizes(job):
            usable = tuple(
                sorted(
                    tindex[t]
                    for t in state.allowed_types(job)
                    if capacity[tindex[t]] >= size and kept_over[k][tindex[t]] == 0
                    and (guaranteed or tindex[t] not in off)
                )
            )
            if not usable:
                continue
            placed = True
            key = (
                k, size, usable, guaranteed, job.id, pclass, groups.get(job.id, "") if groups else "",
                _shape_sig(job),
            )
            members[key] = [(-elastic.start_value(job, size, v, rate), job.submit_s, job.id)]
            group_of[key] = job.id
            static_of[key] = elastic.static_value(job, size, sv)
        if not placed:
            pend.unplaceable.append(job.id)
    return group_of, static_of


def _elastic_growth(sc: _Scope, run: _Running, density: dict[str, float]) -> None:
    """Price a step of growth of each elastic running item that may grow: its own value per
    GPU, at most the lowest pending one, times ``elastic_grow`` (in ``run.items``)."""
    if not run.own_density:
        return
    low = min(density.values(), default=float("inf"))
    for ri, own in run.own_density.items():
        item = run.items[ri]
        if item.grow_steps:
            per_gpu = sc.w.elastic_grow * min(own, low)
            run.items[ri] = dataclasses.replace(item, grow_value=per_gpu * item.step)


def _node_holds_guest(recs: dict[str, NodeRecord], host: Job, shape: Shape) -> bool:
    """Whether every node of ``host``'s GPUs has the CPU and host memory of a guest of ``shape``
    free (:func:`~optsched.engine.ledger.has_room`)."""
    nodes = {ref.node for ref in host.allocation or ()}
    return all(nid in recs and has_room(recs[nid].cpu, recs[nid].mem, shape) for nid in nodes)


def _guest_pairs(
    sc: _Scope, predictor: Predictor, running: list[RunningItem], pend: _Pending
) -> tuple[dict[str, list[tuple[int, float, float, float]]], bool]:
    """The MPS pairs (host item, value, host speed, guest speed) of the most valuable
    shareable pending jobs, each job with pairs moved to a class of its own (in
    ``pend.members``), and whether every shareable job was scored."""
    state, snap, predictions, w = sc.state, sc.state.snapshot, sc.predictions, sc.w
    types, ten_ids, tweights, share_limit = sc.types, sc.ten_ids, sc.tweights, sc.share_limit
    members, memory, shareable_jobs = pend.members, pend.memory, pend.shareable_jobs
    hosts = sorted(
        (
            (ri, r)
            for ri, r in enumerate(running)
            if r.free_slots > 0
        ),
        key=lambda x: (predictions.jobs[x[1].job].memory_gib, x[1].job),
    )
    shareable_jobs.sort()
    complete = len(shareable_jobs) <= MAX_GUEST_JOBS or not hosts
    pair_rows: dict[str, list[tuple[int, float, float, float]]] = {}
    # the CPU and host memory free on each node as the running jobs leave it: a guest needs
    # its own on its host's nodes (decoding charges them against the plan's other starts too)
    recs = {rec.id: rec for rec in node_records(state)} if hosts else {}
    # what the scan reads per host, read once (the scan below runs per guest over every host)
    rows = [
        (ri, r.type, r.free_slots, r.tenant, predictions.jobs[r.job].memory_gib) for ri, r in hosts
    ]
    mem_cap = [snap.gpu_types[tname].memory_gib for tname in types]
    # the hosts a guest may go with at all, in the scan's order, per (GPUs, types, tenant):
    # of an allowed type, with room for the guest's GPUs, not sealed against its tenant, and
    # with a pair limit above 0 (each is a host-side fact; the guest's memory is its own),
    # found with arrays over the hosts (a few hundred keys times thousands of hosts)
    r_type = np.array([row[1] for row in rows], dtype=np.int64)
    r_slots = np.array([row[2] for row in rows], dtype=np.int64)
    r_ten = np.array([row[3] for row in rows], dtype=np.int64)
    limits: dict[tuple[int, str], list[list[float]]] = {}  # (class tenant, guest tenant) -> [host][type]
    usable: dict[tuple[int, tuple[int, ...], int, str], list[int]] = {}
    for negv, jid, key in shareable_jobs[:MAX_GUEST_JOBS] if hosts else []:
        gjob = state.job(jid)
        v = -negv
        found: list[tuple[int, float, float, float]] = []
        scanned = 0
        allowed = set(key[2])
        lim = limits.get((key[0], gjob.tenant))
        if lim is None:
            # the types the guest's tenant may not borrow on
            sealed = [state.borrow_limit(gjob.tenant, tname) == 0 for tname in types]
            # promoted when the host ends, a guest on another tenant's host of a type its tenant
            # may not borrow would hold GPUs it may not borrow: no limit there (-1)
            lim = limits[(key[0], gjob.tenant)] = [
                [
                    -1.0 if h != key[0] and sealed[t]
                    else asr.pair_limit(share_limit, ten_ids[h], gjob.tenant, sealed[t])
                    for t in range(len(types))
                ]
                for h in range(len(ten_ids))
            ]
        ukey = (gjob.gpus, key[2], key[0], gjob.tenant)
        scan = usable.get(ukey)
        if scan is None:
            ok = np.isin(r_type, key[2]) & (r_slots >= gjob.gpus)
            ok &= np.array(lim, dtype=np.float64)[r_ten, r_type] > 0.0
            scan = usable[ukey] = np.flatnonzero(ok).tolist()
        # hosts come by memory: once a type's next host leaves no room for the guest's memory,
        # none of that type's later hosts does either
        live = set(allowed)
        need_mem = memory[jid]
        node_bound = bool(gjob.cpu_milli or gjob.memory_mib)
        for k in scan:
            if scanned >= MAX_HOSTS_SCANNED or not live:
                break
            ri, t, _, ten, hmem = rows[k]
            if t not in live:
                continue
            if need_mem + hmem > mem_cap[t]:
                live.discard(t)
                continue
            r = running[ri]
            host = state.job(r.job)
            if node_bound and not _node_holds_guest(recs, host, shape_of(state, gjob, types[t])):
                continue
            scanned += 1
            limit = lim[ten][t]
            pair = predictor.predict_pair(state, host, gjob)
            if 1.0 - pair.host_speed > limit or pair.guest_speed < w.min_guest_speed:
                continue
            penalty = tweights[ten] * r.gpus * (1.0 - pair.host_speed) * w.guest_interference
            gv = v * pair.guest_speed - penalty
            if gv > 0:
                found.append((ri, gv, pair.host_speed, pair.guest_speed))
        if found:
            found.sort(key=lambda f: (-f[1], running[f[0]].job))
            pair_rows[jid] = found[:MAX_HOSTS_PER_GUEST]
            # a job with pairs of its own is a class of its own
            members[key] = [m for m in members[key] if m[2] != jid]
            own_key = (key[0], key[1], key[2], key[3], jid, key[5], key[6], key[7])
            members[own_key] = [(negv, gjob.submit_s, jid)]
    return pair_rows, complete


def _notes(state: ClusterState, pend: _Pending, complete: bool) -> list[str]:
    """The problem's notes: the quota tree's, unknown priority classes, and a cut of the MPS
    pairs scored."""
    notes = list(state.tree.notes)
    notes += [
        f"priority class '{name}' of tenant {ten} is in no priority_classes table: weight 1"
        for ten, name in sorted(pend.unknown_classes)
    ]
    if not complete:
        notes.append(
            f"MPS pairs scored for the {MAX_GUEST_JOBS} most valuable of {len(pend.shareable_jobs)} "
            "shareable pending jobs"
        )
    return notes


def _classes(
    sc: _Scope,
    pend: _Pending,
    hold: _Holdings,
    max_cost: float,
    group_of: dict[ClassKey, str],
    static_of: dict[ClassKey, float],
    pair_rows: dict[str, list[tuple[int, float, float, float]]],
) -> tuple[list[PendingClass], list[GuestCandidate], float]:
    """The pending classes (own types, reclaim bonus, cap, type bonus) in a fixed order, the
    guest candidates of the singleton ones, and the reclaim bonus."""
    w, signal, ten_ids, capacity, speeds = sc.w, sc.signal, sc.ten_ids, sc.capacity, sc.speeds
    quota = sc.quota
    members, memory, static, nt = pend.members, pend.memory, pend.static, sc.nt
    held_own, movable_own, fixed = hold.held_own, hold.movable_own, hold.fixed
    max_speed, min_speed = max(speeds), min(speeds)
    reclaim_bonus = 2.0 * max_cost + 1.0
    classes: list[PendingClass] = []
    guests: list[GuestCandidate] = []
    spread = max_speed - min_speed
    for key in sorted(members, key=lambda x: (x[0], x[1], x[2], x[3], x[5], x[6], x[7], x[4])):
        mem = sorted(members[key])
        if not mem:
            continue
        k, gpus, allowed, guaranteed, single, _, _, _ = key
        group = group_of.get(key, "")
        # a guaranteed member may also start inside quota that its tenant's own best-effort
        # jobs hold (stopping them for it: invariant 3 allows it, preemption_pays prices it)
        held = [held_own[k][t] - (movable_own[k][t] if guaranteed else 0) for t in range(nt)]
        own_types = tuple(t for t in allowed if held[t] + gpus <= quota[k][t])
        reclaim = guaranteed and signal[ten_ids[k]].reclaim and bool(own_types)
        bonus = reclaim_bonus * gpus if reclaim else 0.0  # per GPU the tenant gets back
        values = tuple(-m[0] for m in mem)  # the reclaim bonus is earned inside quota only
        room = sum(capacity[t] - fixed[t] for t in allowed)
        cap = min(len(mem), max(0, room) // gpus)
        head = values[0]
        type_bonus = tuple(
            w.type_preference * head * ((speeds[t] - min_speed) / spread if spread > 0 else 0.0)
            for t in allowed
        )
        ci = len(classes)
        jobs = tuple(m[2] for m in mem)
        classes.append(
            PendingClass(
                tenant=k,
                gpus=gpus,
                types=allowed,
                own_types=own_types,
                jobs=jobs,
                values=values,
                cap=cap,
                type_bonus=type_bonus,
                loan_penalty=w.loan_penalty * head,
                guaranteed=guaranteed,
                reclaim=reclaim,
                shareable=bool(single) and not group,
                memory_gib=max(memory[j] for j in jobs),
                static_value=static_of.get(key, min(static[j] for j in jobs)) + bonus,
                group=group,
                shapes=tuple(shape_of(sc.state, sc.state.job(jobs[0]), sc.types[t], gpus) for t in allowed),
            )
        )
        for ri, gv, hs, gs in pair_rows.get(single, []) if single else []:
            guests.append(GuestCandidate(ci, ri, gv + bonus, hs, gs))
    return classes, guests, reclaim_bonus


def _placement(
    sc: _Scope, running: list[RunningItem], classes: list[PendingClass], records: tuple[NodeRecord, ...]
) -> tuple[tuple[TypePlacement | None, ...], tuple[int, ...]]:
    """Per type, the node-level data of the model's placement rows (:class:`TypePlacement`;
    None where no waiting job's shape needs them: every start takes single GPUs anywhere), and
    per type the GPUs held by fractional jobs only. ``records`` are the available nodes as the
    jobs that keep running leave them (a node loss's stopped jobs free theirs)."""
    state, snap = sc.state, sc.state.snapshot
    nt = sc.nt
    shared = [0] * nt
    share_free = [0] * nt
    for key, used in state.gpu_shares.items():
        node = snap.nodes[state.node_index[key[0]]]
        if node.available:
            t = sc.tindex[node.gpu_type]
            shared[t] += 1
            share_free[t] += MILLI_PER_GPU - used
    shapes_on: list[list[tuple[Shape, int]]] = [[] for _ in range(nt)]
    for cls in classes:
        for t, sh in zip(cls.types, cls.shapes, strict=True):
            shapes_on[t].append((sh, len(cls.jobs)))
    movable_items = movable_holders(running)
    out: list[TypePlacement | None] = []
    for t, tname in enumerate(sc.types):
        shapes = shapes_on[t]
        if not any(_needs_nodes(sh) for sh, _ in shapes) or sc.capacity[t] == 0:
            out.append(None)
            continue
        out.append(type_placement(state, tname, shapes, movable_items, records, share_free[t]))
    return tuple(out), tuple(shared)


def movable_holders(running: Sequence[RunningItem]) -> dict[int, list[tuple[int, int]]]:
    """Node index -> (running item, GPUs it holds there) of the items that may free GPUs on it:
    preemption candidates and elastic jobs that may shrink (MPS guests hold none)."""
    out: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for r, item in enumerate(running):
        if item.guest or not (item.candidate or item.shrink_steps):
            continue
        for n, g in item.nodes:
            out[n].append((r, g))
    return out


def _needs_nodes(sh: Shape) -> bool:
    """Whether a shape asks more of a node than one free GPU somewhere on the type."""
    return (
        sh.fractional or sh.cpu_milli > 0 or sh.memory_mib > 0
        or (not sh.spread and (sh.largest > 1 or sh.nodes > 1))
    )


def type_placement(
    state: ClusterState,
    tname: str,
    shapes: list[tuple[Shape, int]],
    movable_items: dict[int, list[tuple[int, int]]],
    records: tuple[NodeRecord, ...],
    share_free: int,
) -> TypePlacement:
    """:class:`TypePlacement` of type ``tname`` for the waiting jobs' ``shapes`` (with their
    member counts), on the nodes of ``records`` (the look-ahead's reservations call it again
    with the held GPUs taken out, :func:`optsched.engine.lookahead.limited`)."""
    levels = levels_for(state.largest_node[tname])
    top = len(levels) - 1
    whole = [sh for sh, _ in shapes if not sh.spread and not sh.fractional]
    cpu_need = min((sh.cpu_milli for sh, _ in shapes), default=0)
    mem_need = min((sh.memory_mib for sh, _ in shapes), default=0)
    want_cpu = any(sh.cpu_milli for sh, _ in shapes)
    want_mem = any(sh.memory_mib for sh, _ in shapes)
    levels_req = [sh.level for sh in whole if sh.level >= 0 and sh.required and sh.nodes > 1]
    dlevel = max(set(levels_req), key=lambda x: (levels_req.count(x), -x)) if levels_req else -1
    fixed = [0] * len(levels)
    movable: list[MovableNode] = []
    domains: dict[tuple[str, ...], list[int]] = {}
    cpu_free: int | None = 0
    mem_free: int | None = 0
    for rec in records:
        if rec.type != tname:
            continue
        i, free, c_left, m_left = rec.index, len(rec.free), rec.cpu, rec.mem
        dom = state.domain(rec.id, dlevel) if dlevel >= 0 else ()
        holders = movable_items.get(i)
        if holders or free > 0:
            if c_left is None:
                cpu_free = None
            elif cpu_free is not None:
                cpu_free += max(0, c_left)
            if m_left is None:
                mem_free = None
            elif mem_free is not None:
                mem_free += max(0, m_left)
        if holders:
            movable.append(MovableNode(i, free, tuple(holders), dom))
            continue
        # a node whose CPUs or memory hold no waiting piece has no usable GPU for them
        if (c_left is not None and c_left < cpu_need) or (m_left is not None and m_left < mem_need):
            free = 0
        ch = chunks_of(free, levels)
        for ell in range(len(levels)):
            fixed[ell] += ch[ell]
        if dlevel >= 0:
            row = domains.setdefault(dom, [0] * len(levels))
            for ell in range(len(levels)):
                row[ell] += ch[ell]
    # fragmentation weights: the waiting pieces' sizes, rounded up to a chunk size
    counts = [0] * (len(levels) + 1)  # index top + 1: larger than a chunk
    for sh, n in shapes:
        for p in (sh.pieces if not sh.spread else ()):
            lev = next((ell for ell, size in enumerate(levels) if size >= p), top + 1)
            counts[lev] += n
    total = sum(counts)
    frag = tuple(
        levels[ell] * sum(counts[ell + 1 :]) / total if total else 0.0 for ell in range(len(levels))
    )
    pow2 = all(p in levels for sh in whole for p in sh.pieces)
    distinct = all(
        sh.nodes <= 1 or sh.pieces[-1] + sh.pieces[-2] > state.largest_node[tname] for sh in whole
    )
    exact = (
        pow2 and distinct and not want_cpu and not want_mem and dlevel < 0
        and not any(sh.fractional for sh, _ in shapes)
    )
    return TypePlacement(
        levels=levels,
        fixed=tuple(fixed),
        movable=tuple(movable),
        frag=frag,
        exact=exact,
        cpu_free=cpu_free if want_cpu else None,
        mem_free=mem_free if want_mem else None,
        share_free=share_free,
        domain_level=dlevel,
        domains=tuple((d, tuple(v)) for d, v in sorted(domains.items())),
    )


def _held_lend(
    state: ClusterState, lend: tuple[tuple[int | None, ...], ...]
) -> tuple[tuple[int | None, ...], ...]:
    """``lend`` with the limits of :func:`~optsched.engine.node_loss.lend_limits_after_node_loss`."""
    return _held_limits(lend_limits_after_node_loss(state), state, lend)


def _held_limits(
    held: Mapping[tuple[str, str], int], state: ClusterState, lend: tuple[tuple[int | None, ...], ...]
) -> tuple[tuple[int | None, ...], ...]:
    """``lend`` (a per tenant and type limit table) with the limits of ``held``."""
    if not held:
        return lend
    types = state.type_names
    return tuple(
        tuple(held.get((ten, t), row[k]) for k, t in enumerate(types))
        for ten, row in zip(state.tenant_ids, lend, strict=True)
    )


def _over_quota(
    held_all: list[list[int]],
    held_own: list[list[int]],
    quota: tuple[tuple[int, ...], ...],
    borrow: tuple[tuple[int | None, ...], ...],
    lend: tuple[tuple[int | None, ...], ...],
    tenants: tuple[str, ...],
    types: tuple[str, ...],
    tree: QuotaTree = EMPTY,
) -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]:
    """Over-quota use the lenders cannot cover, per tenant and type, and the on-loan deficit.

    Lenders' idle quota (capped by ``lend_limit``) covers first the use running above quota
    without a loan (tenants in snapshot order, each within its ``borrow_limit``); what stays
    uncovered is *kept over quota* (amended invariant 4). What is left covers on-loan use; the
    rest of the on-loan use is the *deficit*: those jobs must be reclaimed, whatever starts.
    With quota groups limiting a type, the cover is matched inside subtrees first, within
    every group's limits (:class:`~optsched.engine.quota_tree.LoanMatcher`).
    """
    nk, nt = len(tenants), len(types)
    kept = [[0] * nt for _ in range(nk)]
    deficit = [0] * nt
    for t in range(nt):
        if not tree.empty and tree.limited(types[t]):
            _over_quota_tree(held_all, held_own, quota, borrow, lend, t, types[t], tree, kept, deficit)
            continue
        pool = 0
        for i in range(nk):
            idle = quota[i][t] - held_all[i][t]
            if idle > 0:
                lim = lend[i][t]
                pool += idle if lim is None else min(idle, lim)
        room: list[int] = []
        for i in range(nk):
            bl = borrow[i][t]
            room.append(1 << 60 if bl is None else bl)
        for i in range(nk):
            over = held_own[i][t] - quota[i][t]
            if over <= 0:
                continue
            cover = min(over, pool, room[i])
            pool -= cover
            room[i] -= cover
            kept[i][t] = over - cover
        for i in range(nk):
            on_loan = held_all[i][t] - max(held_own[i][t], quota[i][t])
            if on_loan <= 0:
                continue
            cover = min(on_loan, pool, room[i])
            pool -= cover
            room[i] -= cover
            deficit[t] += on_loan - cover
    return tuple(tuple(r) for r in kept), tuple(deficit)


def _room(limit: int | None) -> int:
    return 1 << 60 if limit is None else limit


def _over_quota_tree(
    held_all: list[list[int]],
    held_own: list[list[int]],
    quota: tuple[tuple[int, ...], ...],
    borrow: tuple[tuple[int | None, ...], ...],
    lend: tuple[tuple[int | None, ...], ...],
    t: int,
    tname: str,
    tree: QuotaTree,
    kept: list[list[int]],
    deficit: list[int],
) -> None:
    """:func:`_over_quota` for one type under group limits (writes ``kept`` and ``deficit``)."""
    nk = len(quota)
    supply: dict[int, int] = {}
    for i in range(nk):
        idle = quota[i][t] - held_all[i][t]
        if idle > 0:
            lim = lend[i][t]
            supply[i] = idle if lim is None else min(idle, lim)
    match = LoanMatcher(tree, tname, supply, range(nk))
    room = [_room(borrow[i][t]) for i in range(nk)]
    over = [max(0, held_own[i][t] - quota[i][t]) for i in range(nk)]
    got = [0] * nk
    for _, b, g in match.cover([(i, min(over[i], room[i])) for i in range(nk) if over[i] > 0]):
        got[b] += g
    for i in range(nk):
        room[i] -= got[i]
        kept[i][t] = over[i] - got[i]
    on_loan = [held_all[i][t] - max(held_own[i][t], quota[i][t]) for i in range(nk)]
    got = [0] * nk
    for _, b, g in match.cover([(i, min(on_loan[i], room[i])) for i in range(nk) if on_loan[i] > 0]):
        got[b] += g
    deficit[t] += sum(on_loan[i] - got[i] for i in range(nk) if on_loan[i] > 0)

"""Between-epoch admission (the event path): a fast, incremental decision between epochs.

Real schedulers admit a job the moment it arrives when it fits (Kueue admits in-quota workloads
at once). :func:`decide_event` is that admission step for optsched: on an arrival or a
completion between two epochs it starts pending jobs that fit *now*, and leaves everything
else (preemptions, reclaim, MPS pairing, the order of what does not fit) to the next epoch's
full model (:func:`optsched.solve_epoch`).

What it may do, so that the next epoch's model never has to undo it:

1. **in-quota starts**: a pending job whose tenant has idle quota for its gang on an allowed
   type, and free GPUs of that type, starts there, not on loan (gang-aware best-fit placement,
   the engine's own placer). Guaranteed jobs come first, then every job by smallest estimated
   GPU-time (``runtime_s × gpus``; unknown runtimes last), then submission time and id.
2. **surplus loans** (``allow_loans``): only once no pending job that fits its own quota on a
   type is left queued, a job may start above its quota on that type, on free GPUs, when the
   idle quota of others covers it (loans derived as the engine derives them, within every
   ``borrow_limit`` and ``lend_limit``). A loan is thus never taken from a tenant with work
   of its own waiting for that type; a tenant whose guaranteed work arrives later gets its
   quota back at the next epoch (reclaim), as it would from any loan of the full model.

3. **safe MPS guests** (when a ``predictor`` is given): a job that could not start alone
   joins a running job as its MPS guest when the predicted pair is safe (:func:`_guests`:
   the same limits the full model's guest candidates obey).

4. **a guaranteed job's own room** (``preempt_own``, off by default; after the steps above): a guaranteed job
   still queued, which neither its quota and the free GPUs nor a loan could start, stops
   best-effort jobs *of its own tenant* running inside quota on an allowed type (newest first:
   the least work lost), as many as its quota room and its placement need and no more: a
   victim stays stopped only when the start takes its GPUs or needs its quota.
   Each victim is preemptible, on available nodes, no MPS host or guest, past its
   ``min_runtime_s`` and within its tenant's ``max_gpus_per_epoch``, and the GPUs stopped per
   type stay within what the decision's guaranteed in-quota starts take there plus the largest
   best-effort gang less one (the full model's ``preempt_in_quota_only_for_guaranteed``).
   Other tenants are never touched between epochs: a reclaim of lent quota waits for the epoch.
   Without it, a guaranteed job behind its own tenant's best-effort work waited for the next
   epoch (up to ``epoch_s``).

**Reservations.** While a gang of at least ``reserve_min_gpus`` GPUs waits, the event path makes
the reservations the epoch's look-ahead would (:func:`optsched.engine.lookahead.plan_reservations`,
with the predictor's runtimes) and keeps the GPUs held on nodes for a gang in its node shape
off every start that would outlive the gang's planned start: in steps 1 and 2 the other jobs
start first without them, then the jobs predicted to end before the gang starts, held GPUs
included; steps 3 and 4 leave them alone. The decision lists those reservations and the
predictions they came from (the checker verifies them). Without a waiting gang nothing is
predicted and nothing changes.

Without step 4 it never preempts; with it, nothing else. The decision's ``assurance`` is the previous
one (the signal moves once per epoch) and ``assurance_state`` counts the guaranteed jobs it
starts as met or missed without decaying the counts (decay is per epoch, see
:mod:`optsched.engine.assurance`).

Every decision passes :func:`optsched.engine.check.check_decision` (work conservation
included) before it is returned; if it does not, :class:`EventPathError` is raised and the
caller runs the full model instead. The result is a pure function of the snapshot and the
arguments: no clock, no randomness.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from optsched.engine import assurance as asr
from optsched.engine.check import check_decision, over_quota_note
from optsched.engine.ledger import NodePool, derive_loans, kept_over_quota, node_records
from optsched.engine.objective import ObjectiveWeights
from optsched.engine.rules import cap_starved, starved_types
from optsched.engine.shape import shape_of
from optsched.engine.state import ClusterState
from optsched.errors import OptschedError
from optsched.predict.base import Predictions, Predictor
from optsched.schema.decision import Decision, Preempt, PreemptReason, Reservation, SolverInfo, Start
from optsched.schema.snapshot import GpuRef, Job

__all__ = ["EVENT_BACKEND", "EventPathError", "decide_event", "event_order"]

EVENT_BACKEND = "event"
"""``solver.backend`` of an event-path decision."""


class EventPathError(OptschedError):
    """The event path could not build a decision that passes the checker (run the full model)."""


def event_order(jobs: list[Job]) -> list[Job]:
    """The event path's order: guaranteed first, then smallest estimated GPU-time, then
    submission time and id (deterministic)."""

    def key(j: Job) -> tuple[int, float, float, str]:
        rt = j.runtime_s
        work = math.inf if rt is None else rt * j.gpus
        return (0 if j.qos == "guaranteed" else 1, work, j.submit_s, j.id)

    return sorted(jobs, key=key)


def _signal(state: ClusterState) -> dict[str, asr.TenantAssurance]:
    """The previous epoch's assurance per tenant (1 when unknown), for the lender order."""
    prev = state.snapshot.assurance_state or {}
    return {ten: asr.TenantAssurance(_prev_a(prev, ten), 1.0, 1.0, 1.0, 0) for ten in state.tenant_ids}


def _prev_a(prev: Mapping[str, Mapping[str, Any]], ten: str) -> float:
    """A tenant's assurance in ``prev`` (an ``assurance_state``), 1 when unknown."""
    return float(prev.get(ten, {}).get("a", 1.0))


def sharing_tenants(
    tenant_ids: Sequence[str], prev: Mapping[str, Mapping[str, Any]] | None
) -> frozenset[str]:
    """The tenants whose running jobs may host an MPS guest of *another* tenant in the event
    path (:func:`_guests`): those whose previous assurance (``prev``, the snapshot's
    ``assurance_state``) still allows a host some slowdown
    (:func:`optsched.engine.assurance.max_host_slowdown`). Any tenant's running jobs may host
    its own guests on a type where it may not borrow (:func:`optsched.engine.assurance.pair_limit`)."""
    prev = prev or {}
    return frozenset(t for t in tenant_ids if asr.max_host_slowdown(_prev_a(prev, t)) > 0.0)


def _next_state(state: ClusterState, started: set[str]) -> dict[str, dict[str, Any]]:
    """``assurance_state`` after the event: started guaranteed jobs counted, no decay."""
    snap = state.snapshot
    prev = snap.assurance_state or {}
    counted: dict[str, list[Job]] = defaultdict(list)
    for job in state.pending():
        if job.qos == "guaranteed" and job.id in started:
            counted[job.tenant].append(job)
    return {
        ten: _tenant_next(prev.get(ten, {}), counted.get(ten, ()), state, snap.now)
        for ten in state.tenant_ids
    }


def _tenant_next(
    st: Mapping[str, Any], counted: Sequence[Job], state: ClusterState | None, now: float
) -> dict[str, Any]:
    """One tenant's ``assurance_state`` after an event that started its guaranteed jobs
    ``counted`` (``state`` is read only for them)."""
    met = float(st.get("met", 0.0))
    total = float(st.get("total", 0.0))
    missed = set(st.get("missed", []))
    if counted:
        assert state is not None
        d, _ = asr.max_delay(state, counted[0].tenant)
        for job in counted:
            m, t = asr.start_counts(job, now, d, missed)
            met += m
            total += t
            missed.discard(job.id)  # (a missed job, now started, is no longer pending)
    return {
        "a": round(float(st.get("a", 1.0)), 6),
        "met": round(met, 6),
        "total": round(total, 6),
        "missed": sorted(missed),
    }


def _carried_assurance(prev: Mapping[str, Mapping[str, Any]], ten: str) -> float:
    """The assurance an event decision reports for ``ten``: the previous epoch's, 1 when unknown."""
    return round(_prev_a(prev, ten), 6)


def quiet_event_assurance(
    tenant_ids: Sequence[str], prev: Mapping[str, Mapping[str, Any]] | None
) -> tuple[dict[str, float], dict[str, dict[str, Any]]]:
    """``assurance`` and ``assurance_state`` of an event decision that starts nothing, as
    :func:`decide_event` writes them: the previous state carried (rounded), nothing decayed.
    They depend on the previous state alone, so a host that knows no start is possible
    (``optsched.sim``'s replay) can log them without asking for the decision."""
    prev = prev or {}
    return (
        {t: _carried_assurance(prev, t) for t in tenant_ids},
        {t: _tenant_next(prev.get(t, {}), (), None, 0.0) for t in tenant_ids},
    )


def _usage(state: ClusterState) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], int]]:
    """GPUs in use per (tenant, type) by the running jobs (MPS guests not counted): all of them
    (``use``) and those not on loan (``own``)."""
    use: dict[tuple[str, str], int] = defaultdict(int)
    own: dict[tuple[str, str], int] = defaultdict(int)
    for job in state.running():
        if job.id in state.host_of:
            continue
        key = (job.tenant, state.job_type(job))
        use[key] += job.gpus
        if not job.on_loan:
            own[key] += job.gpus
    return use, own


@dataclass
class _EventLedger:
    """What the event's starts draw on, updated as jobs start."""

    state: ClusterState
    placer: NodePool
    use: dict[tuple[str, str], int]
    own: dict[tuple[str, str], int]
    signal: dict[str, asr.TenantAssurance]
    kept: dict[tuple[str, str], int]
    """Over-quota use no lender covers today (kept as it is, never grown)."""
    off: set[str]
    """Types best-effort jobs keep off (cap-starved tenants' guaranteed jobs wait for them)."""
    starts: list[Start] = field(default_factory=list)
    started: set[str] = field(default_factory=set)
    preempts: list[Preempt] = field(default_factory=list)


def _covered(led: _EventLedger, key: tuple[str, str], gpus: int) -> bool:
    """Whether ``gpus`` more GPUs of ``key`` leave every excess covered (as before); if so they
    stay counted in ``led.use``."""
    led.use[key] += gpus
    _, unc = derive_loans(led.state, led.use, led.signal, led.kept)
    ok = all(n <= led.kept.get(k, 0) for k, n in unc.items())
    if not ok:
        led.use[key] -= gpus
    return ok


def _try_start(led: _EventLedger, job: Job, on_loan: bool) -> bool:
    """Start ``job`` on the first allowed type with free GPUs where it is inside its quota (or,
    with ``on_loan``, above it and covered by others' idle quota); whether it started."""
    state = led.state
    for t in state.allowed_types(job):
        if t in led.off and job.qos != "guaranteed":
            continue
        key = (job.tenant, t)
        if key in led.kept:
            continue
        inside = led.own[key] + job.gpus <= state.quota(job.tenant, t)
        if inside == on_loan:
            continue
        if on_loan and state.borrow_limit(job.tenant, t) == 0:
            continue  # no loan can cover it (what ``_covered`` would find, without the nodes)
        shape = shape_of(state, job, t)
        if not led.placer.fits(t, shape) or not _covered(led, key, job.gpus):
            continue
        alloc = led.placer.place(t, shape)
        assert alloc is not None
        if not on_loan:
            led.own[key] += job.gpus
        led.starts.append(Start(job=job.id, allocation=alloc, on_loan=on_loan))
        led.started.add(job.id)
        return True
    return False


def _start_in_quota(led: _EventLedger, order: list[Job]) -> set[str]:
    """Step 1: the in-quota starts, in the event order. Returns the types on which an in-quota
    job stays queued."""
    state = led.state
    blocked: set[str] = set()  # types on which an in-quota job stays queued
    for job in order:
        if not _try_start(led, job, on_loan=False):
            for t in state.allowed_types(job):
                if led.own[(job.tenant, t)] + job.gpus <= state.quota(job.tenant, t):
                    blocked.add(t)
    return blocked


def _own_victims(state: ClusterState) -> dict[tuple[str, str], list[Job]]:
    """Per (tenant, type), the running best-effort jobs inside quota that a guaranteed start of
    the same tenant may stop between epochs (see step 4), newest first (least work lost), then
    id."""
    snap = state.snapshot
    hosts = set(state.host_of.values())
    out: dict[tuple[str, str], list[Job]] = defaultdict(list)
    for job in state.running():
        if job.qos == "guaranteed" or job.on_loan or job.allocation is None or not job.is_preemptible:
            continue
        t = state.job_type(job)
        if shape_of(state, job, t).fractional:
            continue  # a share frees no whole GPU
        if job.id in state.host_of or job.id in hosts or job.colocated:
            continue
        if any(not state.node_available(r.node) for r in job.allocation):
            continue
        pre = snap.tenants[state.tenant_index[job.tenant]].preemption
        minimum = job.min_runtime_s if job.min_runtime_s is not None else pre.min_runtime_s if pre else 0.0
        if job.start_s is not None and snap.now - job.start_s < minimum:
            continue
        out[(job.tenant, t)].append(job)
    for jobs in out.values():
        jobs.sort(key=lambda j: (-(j.start_s if j.start_s is not None else -math.inf), j.id))
    return out


def _gang(state: ClusterState) -> dict[str, int]:
    """Per type, the largest best-effort gang running inside quota on available nodes (not an
    MPS guest): a gang stops whole, so a start may free up to that less one GPU more than it
    takes (the checker's best-effort victim rule)."""
    gang: dict[str, int] = defaultdict(int)
    for job in state.running():
        if job.qos == "guaranteed" or job.on_loan or job.allocation is None or job.id in state.host_of:
            continue
        if any(not state.node_available(r.node) for r in job.allocation):
            continue
        t = state.job_type(job)
        gang[t] = max(gang[t], job.gpus)
    return gang


def _preempt_own(led: _EventLedger, order: list[Job]) -> int:
    """Step 4: stop a guaranteed job's own tenant's best-effort jobs for its start inside
    quota (see the module docstring); the number of jobs started so."""
    state = led.state
    snap = state.snapshot
    stopped: set[str] = set()
    freed: dict[str, int] = defaultdict(int)  # GPUs best-effort stops free, per type
    taken: dict[str, int] = defaultdict(int)  # GPUs guaranteed in-quota starts take, per type
    for st in led.starts:
        guaranteed = state.job(st.job).qos == "guaranteed"
        if guaranteed and not st.on_loan and not st.colocated_with and st.allocation:
            taken[state.node_type(st.allocation[0].node)] += len(st.allocation)
    gang = _gang(state)
    own_victims = _own_victims(state)
    capped: dict[str, int] = defaultdict(int)  # GPUs of each tenant stopped so far
    n = 0
    for job in order:
        if job.id in led.started or job.qos != "guaranteed":
            continue
        ten = snap.tenants[state.tenant_index[job.tenant]]
        cap = ten.preemption.max_gpus_per_epoch if ten.preemption is not None else None
        for t in state.allowed_types(job):
            key = (job.tenant, t)
            if key in led.kept:
                continue
            candidates = [v for v in own_victims.get(key, ()) if v.id not in stopped]
            # quota room: stopping its own jobs inside quota gives it back
            need_room = led.own[key] + job.gpus - state.quota(job.tenant, t)
            if need_room > sum(v.gpus for v in candidates):
                continue
            shape = shape_of(state, job, t)
            room = taken[t] + job.gpus + max(0, gang[t] - 1) - freed[t]
            released: list[Job] = []
            for v in candidates:
                if need_room <= 0 and led.placer.fits(t, shape):
                    break
                if v.gpus > room or (cap is not None and capped[job.tenant] + v.gpus > cap):
                    continue
                assert v.allocation is not None
                led.placer.release(v.allocation, shape_of(state, v, t))
                released.append(v)
                room -= v.gpus
                need_room -= v.gpus
            fits = need_room <= 0 and bool(released)
            alloc = led.placer.place(t, shape) if fits else None
            used = {(r.node, r.gpu) for r in alloc or ()}
            victims = [v for v in released if any((r.node, r.gpu) in used for r in v.allocation or ())]
            # the quota room the start needs beyond the victims it runs on: the next ones in order
            short = led.own[key] + job.gpus - state.quota(job.tenant, t) - sum(v.gpus for v in victims)
            for v in released:
                if v not in victims and short > 0 and alloc is not None:
                    victims.append(v)
                    short -= v.gpus
            for v in released:
                if v not in victims:  # not needed (or no room made): it runs on
                    assert v.allocation is not None
                    led.placer.take(v.allocation, shape_of(state, v, t))
            gone = sum(v.gpus for v in victims)
            led.use[key] -= gone
            if alloc is None or not _covered(led, key, job.gpus):
                led.use[key] += gone
                if alloc is not None:
                    led.placer.release(alloc, shape)
                    for v in victims:
                        assert v.allocation is not None
                        led.placer.take(v.allocation, shape_of(state, v, t))
                continue
            for v in victims:
                stopped.add(v.id)
                led.preempts.append(Preempt(job=v.id, reason=PreemptReason.PRIORITY, lost_s=v.restart_cost_s))
            freed[t] += gone
            capped[job.tenant] += gone
            led.own[key] += job.gpus - gone
            taken[t] += job.gpus
            led.starts.append(Start(job=job.id, allocation=alloc, on_loan=False))
            led.started.add(job.id)
            n += 1
            break
    return n


def _start_on_loan(led: _EventLedger, order: list[Job], blocked: set[str], hold_for_quota: bool) -> None:
    """Step 2: the surplus loans, in the event order; with ``hold_for_quota`` not for a job
    allowed on a type where an in-quota job stays queued."""
    for job in order:
        if job.id in led.started:
            continue
        if hold_for_quota and any(t in blocked for t in led.state.allowed_types(job)):
            continue
        _try_start(led, job, on_loan=True)


def _start_guests(
    led: _EventLedger, order: list[Job], predictor: Predictor, weights: ObjectiveWeights | None
) -> None:
    """Step 3: the safe MPS guests (:func:`_guests`) for the jobs still waiting."""
    guests = _guests(led.state, [j for j in order if j.id not in led.started], led.starts, predictor,
                     weights or ObjectiveWeights(), led.signal, led.placer)
    led.starts += guests
    led.started.update(s.job for s in guests)


def _event_decision(led: _EventLedger, order: list[Job]) -> Decision:
    """The decision of the event: its starts, the rest queued in the event order, the loans
    and over-quota use derived after the starts, the previous assurance and the new
    ``assurance_state``."""
    state = led.state
    snap = state.snapshot
    loans, uncovered = derive_loans(state, led.use, led.signal, led.kept)
    notes = [f"event path: {len(led.starts)} start(s) between epochs"]
    if led.preempts:
        notes.append(f"event path: {len(led.preempts)} best-effort job(s) stopped for their own "
                     "tenant's guaranteed starts inside quota")
    notes += [over_quota_note(ten, t, n) for (ten, t), n in sorted(uncovered.items())]
    queue = [j.id for j in order if j.id not in led.started]
    prev = snap.assurance_state or {}
    return Decision(
        now=snap.now,
        status="feasible",
        solver=SolverInfo(backend=EVENT_BACKEND, seconds=0.0, notes=notes),
        start=sorted(led.starts, key=lambda s: s.job),
        preempt=sorted(led.preempts, key=lambda p: p.job),
        queue=queue,
        loans=loans,
        kept_over_quota=kept_over_quota(uncovered),
        assurance={t: _carried_assurance(prev, t) for t in state.tenant_ids},
        assurance_state=_next_state(state, led.started),
    )


def _check(state: ClusterState, decision: Decision) -> None:
    """Raise :class:`EventPathError` when ``decision`` fails :func:`check_decision`."""
    bad = check_decision(state, decision)
    if bad:
        msg = "; ".join(str(v) for v in bad[:5])
        raise EventPathError(f"event path decision failed the checker: {msg}")


def decide_event(state: ClusterState, *, allow_loans: bool = True,
                 hold_for_quota: bool = True, predictor: Predictor | None = None,
                 weights: ObjectiveWeights | None = None, preempt_own: bool = False) -> Decision:
    """Start the pending jobs of ``state`` that fit now (see the module docstring).

    ``preempt_own=True`` adds step 4 (off by default: on the shipped mini trace, three seeds,
    partitioned, it raised the guaranteed tenants' QoS from 0.982 to 0.984 and cost 46
    preemptions against 36, 24.2 lost GPU-hours against 21.3 and 4% more average queueing;
    pooled it changed nothing that matters).
    ``predictor`` (the engine's pair predictor) enables MPS guests on safe pairs; ``weights``
    gives ``min_guest_speed`` (default :class:`ObjectiveWeights`). ``hold_for_quota=False``
    lets jobs borrow even while an in-quota job waits for the type (for experiments).

    Raises
    ------
    EventPathError
        The decision failed :func:`check_decision` (the caller should run the full model).
    """
    t0 = time.perf_counter()
    placer = NodePool.of(state)
    use, own = _usage(state)
    signal = _signal(state)
    _, kept = derive_loans(state, use, signal)  # over-quota use no lender covers today
    order = event_order(state.pending())
    # best-effort jobs keep off the types cap-starved tenants' guaranteed jobs wait for
    off = set(starved_types(state, cap_starved(state)))
    hold = _node_holds(state, predictor)
    led = _EventLedger(state, placer, use, own, signal, kept, off)
    if hold is None:
        blocked = _start_in_quota(led, order)
        if allow_loans:
            _start_on_loan(led, order, blocked, hold_for_quota)
    else:
        _start_with_holds(led, order, hold, allow_loans, hold_for_quota)
    if predictor is not None:
        _start_guests(led, order, predictor, weights)
    held = _take_held(placer, hold.refs) if hold is not None else []
    if preempt_own and _preempt_own(led, order):
        # a victim stopped for quota room leaves its GPUs free: jobs inside their quota take them
        _start_in_quota(led, [j for j in order if j.id not in led.started])
    placer.release(held)
    decision = _event_decision(led, order)
    if hold is not None:
        from optsched.engine.decode import _predictions

        decision.reservations = hold.holds
        decision.predictions = _predictions(hold.predictions)
        decision.solver.notes.append(
            f"event path: {sum(h.held for h in hold.holds)} GPU(s) on "
            f"{sum(len(h.nodes or {}) for h in hold.holds)} node(s) held for {len(hold.holds)} reservation(s)"
        )
    _check(state, decision)
    decision.solver.seconds = round(time.perf_counter() - t0, 6)
    return decision


@dataclass(frozen=True)
class _Holds:
    """The look-ahead's reservations of gangs in their node shape, as the event path keeps them."""

    holds: list[Reservation]
    groups: dict[str, str]
    """Pending job id -> the reserved types whose held GPUs it may use (see
    :class:`optsched.engine.lookahead.Reservations`)."""
    predictions: Predictions
    refs: list[GpuRef]
    """The held GPUs: on each held node its highest free indices, as the epoch's model holds
    them (:func:`optsched.engine.lookahead.limited`)."""


def _node_holds(state: ClusterState, predictor: Predictor | None) -> _Holds | None:
    """The reservations the epoch's look-ahead would make now for gangs in their node shape
    (:func:`optsched.engine.lookahead.plan_reservations`), so that a start between epochs never
    takes the nodes a waiting gang is promised; None when there are none. Predictions are made
    only when a pending job is large enough to get a reservation."""
    from optsched.engine.lookahead import LookaheadParams, plan_reservations

    lp = LookaheadParams.of(state.snapshot)
    if not lp.enabled or not any(j.gpus >= lp.reserve_min_gpus for j in state.pending()):
        return None
    if predictor is None:
        from optsched.engine.epoch import default_predictor

        predictor = default_predictor()
    predictions = predictor.predict_jobs(state)
    res = plan_reservations(state, predictions, lp)
    holds = [h for h in res.holds if h.nodes is not None]
    if not holds:
        return None
    free = {rec.id: rec.free for rec in node_records(state)}
    refs: list[GpuRef] = []
    for h in holds:
        for nid, k in (h.nodes or {}).items():
            gpus = free.get(nid, ())
            refs += [GpuRef.model_construct(node=nid, gpu=g) for g in gpus[len(gpus) - min(k, len(gpus)) :]]
    return _Holds(holds, res.groups, predictions, refs)


def _take_held(placer: NodePool, refs: list[GpuRef]) -> list[GpuRef]:
    """Take the held GPUs still free out of ``placer``; return them (to give back)."""
    free = [r for r in refs if placer.all_free([r])]
    placer.take(free)
    return free


def _may_use_holds(state: ClusterState, job: Job, hold: _Holds) -> bool:
    """Whether ``job`` may start on held GPUs: it allows a reserved type and is predicted to end
    before the reservation of every reserved type it allows starts (or is the gang)."""
    mine = set(hold.groups.get(job.id, "").split(","))
    reserved = [h.gpu_type for h in hold.holds if h.gpu_type in state.allowed_types(job)]
    return bool(reserved) and all(t in mine for t in reserved)


def _start_with_holds(
    led: _EventLedger, order: list[Job], hold: _Holds, allow_loans: bool, hold_for_quota: bool
) -> None:
    """Steps 1 and 2 with GPUs held for reservations: in each step the jobs that may not use
    them start first, on the other GPUs, then the jobs that may (predicted to end before the
    gang starts), on what is left, held GPUs included; each in the event order."""
    placer = led.placer
    may = [j for j in order if _may_use_holds(led.state, j, hold)]
    other = [j for j in order if not _may_use_holds(led.state, j, hold)]
    held_nodes = {placer.by_id[r.node].index for r in hold.refs if r.node in placer.by_id}
    held = _take_held(placer, hold.refs)
    blocked = _start_in_quota(led, other)
    placer.release(held)
    placer.prefer = held_nodes  # the held GPUs first: the others stay free for the loans
    blocked |= _start_in_quota(led, may)
    placer.prefer = set()
    if allow_loans:
        held = _take_held(placer, hold.refs)
        _start_on_loan(led, other, blocked, hold_for_quota)
        placer.release(held)
        placer.prefer = held_nodes
        _start_on_loan(led, may, blocked, hold_for_quota)
        placer.prefer = set()


MAX_HOSTS_SCANNED = 16
"""Per guest job, at most this many hosts (least memory first) get a pair prediction."""
MAX_GUEST_JOBS = 16
"""Per event, at most this many waiting jobs (in the event order) look for a host."""


def _guests(
    state: ClusterState,
    waiting: list[Job],
    starts: list[Start],
    predictor: Predictor,
    weights: ObjectiveWeights,
    signal: dict[str, asr.TenantAssurance],
    placer: NodePool,
) -> list[Start]:
    """MPS guests for jobs that could not start alone, on *safe* pairs only: the host runs
    alone on an MPS type, both jobs are shareable with known memory that fits together, the
    predicted host slowdown is within the pair's limit (:func:`optsched.engine.assurance.pair_limit`:
    the host tenant's assurance-driven limit for another tenant's guest) and the guest's predicted speed is
    at least ``weights.min_guest_speed``; among a job's safe hosts, the fastest pair (sum of
    both speeds, then host id) wins. The first ``MAX_GUEST_JOBS`` shareable waiting jobs of
    the event order are tried (the epoch's model considers every job). A guest of a tenant
    with ``borrow_limit`` 0 on the type shares only its own tenant's hosts. The winning host's
    node must have the guest's CPU and host memory free after the event's starts (``placer``,
    which is charged with them); else the job stays queued."""
    snap = state.snapshot
    limits = asr.share_limits(signal)
    just_started = {s.job for s in starts}
    hosts: list[Job] = []
    for job in state.running():
        if job.id in state.host_of or job.colocated or job.id in just_started:
            continue
        if not job.is_shareable or job.memory_gib is None:
            continue
        if not snap.gpu_types[state.job_type(job)].mps:
            continue
        hosts.append(job)
    hosts.sort(key=lambda h: (h.memory_gib or 0.0, h.id))
    taken: set[str] = set()
    out: list[Start] = []
    tried = 0
    for job in waiting:
        if not hosts or tried >= MAX_GUEST_JOBS:
            break
        if not job.is_shareable or job.memory_gib is None:
            continue
        tried += 1
        allowed = state.allowed_types(job)
        best: tuple[float, str, Job] | None = None
        scanned = 0
        for h in hosts:
            if scanned >= MAX_HOSTS_SCANNED:
                break
            if h.id in taken or h.gpus < job.gpus:
                continue
            t = state.job_type(h)
            if t not in allowed or job.memory_gib + (h.memory_gib or 0.0) > snap.gpu_types[t].memory_gib:
                continue
            sealed = state.borrow_limit(job.tenant, t) == 0
            if h.tenant != job.tenant and sealed:
                continue
            limit = asr.pair_limit(limits, h.tenant, job.tenant, sealed)
            if limit <= 0.0:
                continue
            scanned += 1
            pair = predictor.predict_pair(state, h, job)
            if 1.0 - pair.host_speed > limit:
                continue
            if pair.guest_speed < weights.min_guest_speed:
                continue
            score = pair.host_speed + pair.guest_speed
            if best is None or (-score, h.id) < (-best[0], best[1]):
                best = (score, h.id, h)
        if best is None:
            continue
        host = best[2]
        assert host.allocation is not None
        alloc = [GpuRef(node=r.node, gpu=r.gpu) for r in host.allocation[: job.gpus]]
        # its CPU and host memory on the host's node, after the event's starts (``placer``)
        if not placer.charge_guest(alloc, shape_of(state, job, state.job_type(host))):
            continue
        taken.add(host.id)
        out.append(Start(job=job.id, allocation=alloc, on_loan=False, colocated_with=[host.id]))
    return out

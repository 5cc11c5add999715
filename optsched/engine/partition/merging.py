"""The merge stage of a partitioned epoch: the coordination step, a second scheduler on the
whole fleet.

:func:`merge_plan` merges the parts' decisions into one for the whole fleet, in named steps:

1. **Collect** (:func:`_collect`): the parts' starts, preemptions and predictions, in part
   order.
2. **Books** (:func:`_kept_use`, :class:`_Books`): what the running jobs the parts keep and the
   parts' starts hold, the GPUs left free (:class:`~optsched.engine.ledger.NodePool`), and per
   (tenant, type) the use against the *global* quota: the idle quota the tenants could lend
   and the use above quota a loan must cover, per type.
3. **Victims** (:func:`_start_victims`, :func:`_running_victims`, :func:`_best_effort_room`):
   what a reclaim may undo: a part's start on loan or of a best-effort job, a running job on
   loan, a preemptible running job (a priority preemption, within the tenant's preemption cap,
   after its minimum runtime; best-effort ones only for the GPUs guaranteed in-quota starts
   take); never a guaranteed job inside quota.
4. **Fill** (:func:`_fill`, :func:`_start_on`): the queued jobs, oldest guaranteed first, on
   the GPUs left free (the gangs no part could hold among them). First the guaranteed jobs of
   tenants due a reclaim, inside their *global* quota, which may stop others anywhere in the
   fleet (:func:`_quota_room`, :func:`_reclaim_room`, :func:`_cover_loans`); then every job
   still queued, on loan from the *global* idle quota of the others too, stopping nothing;
   part starts a reclaim undid are queued again for this pass (a stop frees whole pieces of
   a node, often more than the reclaim's start takes). Neither passes a tenant's borrow limit
   (:func:`_within_borrow_limit`).
5. **Over-quota amendment** (:func:`_amend_over_quota`): a tenant left above quota without
   cover starts nothing on top: its starts of the type are undone, latest in queue order
   first, until covered, and the fill runs again on what they held (at most three rounds).
6. **Loans and labels**: loans are derived globally (:func:`optsched.engine.ledger.derive_loans`,
   a tenant over its slice in one part but under its quota overall borrows nothing), ``on_loan``
   is re-derived on global numbers (:func:`_relabel_loans`), and the over-quota notes are
   recomputed on global numbers (:func:`_assemble`).

:func:`explain_merged` then gives the merged decision its explanations and queue reasons,
computed on the whole snapshot; a job the coordination step stopped names the start it made
room for. :func:`merge` is both.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal

from optsched.engine import assurance as asr
from optsched.engine.check import over_quota_note
from optsched.engine.explain import explain_decision, queue_reasons
from optsched.engine.ledger import NodePool, derive_loans, kept_over_quota
from optsched.engine.node_loss import lend_limits_after_node_loss, restart_types
from optsched.engine.partition.running import PartResult
from optsched.engine.rules import cap_starved, protected, starved_types, victim_slack
from optsched.engine.shape import Shape, shape_of
from optsched.engine.state import ClusterState
from optsched.schema.decision import (
    Decision,
    JobPrediction,
    Loan,
    Preempt,
    PreemptReason,
    SolverInfo,
    Start,
)
from optsched.schema.snapshot import GpuRef, Job, Tenant


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
    decision.queue_reasons = queue_reasons(exps, decision.queue)


def _collect(results: list[PartResult]) -> tuple[list[Start], list[Preempt], dict[str, JobPrediction]]:
    """The parts' starts, preemptions and predictions, in part order."""
    starts: list[Start] = []
    preempt: list[Preempt] = []
    predictions: dict[str, JobPrediction] = {}
    for r in results:
        starts += r.decision.start
        preempt += r.decision.preempt
        if r.decision.predictions:
            predictions.update(r.decision.predictions)
    return starts, preempt, predictions


def _kept_use(
    state: ClusterState, starts: list[Start], stopped: set[str]
) -> tuple[defaultdict[tuple[str, str], int], defaultdict[tuple[str, str], int]]:
    """What the parts' decisions hold: the use per (tenant, type) of the running jobs they keep
    (not in ``stopped``) and of their starts (MPS guests not counted), and what the kept jobs
    not on loan hold per (tenant, type)."""
    use: defaultdict[tuple[str, str], int] = defaultdict(int)
    own_kept: defaultdict[tuple[str, str], int] = defaultdict(int)
    for job in state.running():
        if job.id in stopped:
            continue
        assert job.allocation is not None
        if job.id in state.host_of:
            continue
        t = state.job_type(job)
        use[(job.tenant, t)] += job.gpus
        if not job.on_loan:
            own_kept[(job.tenant, t)] += job.gpus
    for s in starts:
        if not s.colocated_with:
            job = state.job(s.job)
            use[(job.tenant, state.node_type(s.allocation[0].node))] += job.gpus
    return use, own_kept


@dataclass
class _Books:
    """The merged decision's quota accounts, on global numbers: per (tenant, type) the use, what
    the kept jobs not on loan hold (``own_kept``), the quota and the lend limit (quota a node
    loss holds for the jobs it stopped included); per type the idle quota the tenants could lend
    (``supply``) and the use above quota a loan must cover (``demand``), which the coordination
    step keeps current as it changes ``use``."""

    state: ClusterState
    use: defaultdict[tuple[str, str], int]
    own_kept: defaultdict[tuple[str, str], int]
    quota: dict[tuple[str, str], int] = field(default_factory=dict)
    lend_limit: dict[tuple[str, str], int | None] = field(default_factory=dict)
    supply: dict[str, int] = field(default_factory=dict)
    demand: dict[str, int] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        state: ClusterState,
        use: defaultdict[tuple[str, str], int],
        own_kept: defaultdict[tuple[str, str], int],
    ) -> _Books:
        """The accounts of ``use`` and ``own_kept`` (:func:`_kept_use`), supply and demand counted."""
        b = cls(state, use, own_kept)
        b.quota = {(o, t): state.quota(o, t) for o in state.tenant_ids for t in state.type_names}
        b.lend_limit = {(o, t): state.lend_limit(o, t) for o in state.tenant_ids for t in state.type_names}
        b.lend_limit.update(lend_limits_after_node_loss(state))  # quota held for jobs a node loss stopped
        b.recount()
        return b

    def lendable(self, ten: str, t: str) -> int:
        """The tenant's idle quota of the type it may lend."""
        idle = self.quota[(ten, t)] - self.use[(ten, t)]
        ll = self.lend_limit[(ten, t)]
        return max(0, idle if ll is None else min(idle, ll))

    def excess(self, ten: str, t: str) -> int:
        """Use above quota that a loan must cover: what the tenant's kept jobs not on loan
        already held above quota may stay uncovered (the over-quota amendment)."""
        q = self.quota[(ten, t)]
        return max(0, self.use[(ten, t)] - q - max(0, self.own_kept[(ten, t)] - q))

    def recount(self) -> None:
        """Supply and demand per type, from scratch."""
        tenants, types = self.state.tenant_ids, self.state.type_names
        self.supply = {t: sum(self.lendable(o, t) for o in tenants) for t in types}
        self.demand = {t: sum(self.excess(o, t) for o in tenants) for t in types}

    def shift(self, t: str, changes: dict[str, int]) -> tuple[int, int]:
        """Change of (supply, demand) on ``t`` if tenants' use changed by ``changes``."""
        ds = dd = 0
        for o, n in changes.items():
            ds -= self.lendable(o, t)
            dd -= self.excess(o, t)
            self.use[(o, t)] += n
            ds += self.lendable(o, t)
            dd += self.excess(o, t)
            self.use[(o, t)] -= n
        return ds, dd

    def covered(self, t: str, ds: int, dd: int) -> bool:
        """Whether idle quota still covers every loan on ``t`` after a (``ds``, ``dd``) shift."""
        return self.supply[t] + ds - (self.demand[t] + dd) >= 0


def _start_victims(
    state: ClusterState, starts: list[Start], hosts: set[str]
) -> defaultdict[str, list[_Victim]]:
    """Per type, the parts' starts a reclaim may undo: on loan or of a best-effort job, no MPS
    pair involved (neither a guest nor a ``hosts`` job)."""
    found: defaultdict[str, list[_Victim]] = defaultdict(list)
    for st_ in starts:
        j = state.job(st_.job)
        if (st_.on_loan or j.qos == "best_effort") and not st_.colocated_with and st_.job not in hosts:
            found[state.node_type(st_.allocation[0].node)].append(
                _Victim(j, "start", j.tenant, j.gpus, tuple(st_.allocation))
            )
    return found


def _best_effort_room(
    state: ClusterState, starts: list[Start], preempt: list[Preempt]
) -> tuple[defaultdict[str, int], defaultdict[str, int], dict[str, int]]:
    """What the parts' priority preemptions used up: the GPUs each tenant lost to them (against
    its preemption cap), and per type the GPUs best-effort priority victims may still free,
    those of the guaranteed in-quota starts plus the type's victim slack once there is one such
    start, less the best-effort jobs the parts stopped; and the victim slack of the types
    without one (``slack``, taken by the first guaranteed in-quota start of the type)."""
    lost: defaultdict[str, int] = defaultdict(int)
    be_left: defaultdict[str, int] = defaultdict(int)
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
    return lost, be_left, slack


def _keep_idle_victims(state: ClusterState, starts: list[Start], preempt: list[Preempt]) -> list[Preempt]:
    """The parts' preemptions, less best-effort priority victims whose GPUs no part's start takes
    on a type where the parts together stop more best-effort GPUs than the fleet's bound (the
    guaranteed in-quota starts plus the victim slack once: each part kept the bound with its own
    slack, and the slacks add up). Those keep running, in id order, until the bound holds (the
    merged decision is checked as a whole after; a type within the bound is left as it is)."""
    _, be_left, _ = _best_effort_room(state, starts, preempt)
    over = {t: -v for t, v in be_left.items() if v < 0}
    if not over:
        return preempt
    used = {(r.node, r.gpu) for s in starts for r in s.allocation}
    hosts = set(state.host_of.values())
    keep: set[str] = set()
    for p in sorted(preempt, key=lambda x: x.job):
        j = state.job(p.job)
        t = state.job_type(j)
        if over.get(t, 0) <= 0 or p.reason != PreemptReason.PRIORITY or j.on_loan or j.qos == "guaranteed":
            continue
        if p.job in state.host_of or p.job in hosts:
            continue
        if any((r.node, r.gpu) in used for r in j.allocation or ()):
            continue
        keep.add(p.job)
        over[t] -= j.gpus
    return [p for p in preempt if p.job not in keep]


def _running_victims(
    state: ClusterState,
    stopped: set[str],
    hosts: set[str],
    tenants: dict[str, Tenant],
    found: defaultdict[str, list[_Victim]],
) -> None:
    """Add to ``found``, per type, the running jobs a reclaim may stop: on loan, or preemptible
    and not protected (a priority preemption); not preempted by a part, on available nodes, no
    MPS pair involved. Never a guaranteed job inside quota."""
    snap = state.snapshot
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


@dataclass
class _Coordination:
    """The coordination step's working state: the accounts, the free GPUs, the victims per type,
    the preemption budgets (``lost``, ``be_left``, ``slack``: :func:`_best_effort_room`), the
    types best-effort jobs keep off (``off``: where a cap-starved tenant's guaranteed jobs
    wait, and where guaranteed jobs a node loss stops restart next, as in the model), and what
    the step did so far: the jobs started
    (the parts' starts included), its starts, the starts it undid (``cancelled``), the running
    jobs it stopped, and per stopped job the start it made room for."""

    state: ClusterState
    signal: dict[str, asr.TenantAssurance]
    books: _Books
    fleet: NodePool
    pool: dict[str, _Pool]
    tenants: dict[str, Tenant]
    lost: defaultdict[str, int]
    be_left: defaultdict[str, int]
    slack: dict[str, int]
    off: set[str]
    started_ids: set[str]
    cancelled: set[str] = field(default_factory=set)
    bumped: dict[str, Job] = field(default_factory=dict)
    """Jobs whose part start a reclaim undid, queued again: pass 2 may start them elsewhere
    (the stop frees GPUs in whole pieces, often more than the reclaim's start takes)."""
    replaced: set[str] = field(default_factory=set)
    """Bumped jobs started again by this step: their part's start is gone, ``added`` has theirs."""
    added: list[Start] = field(default_factory=list)
    reclaimed: list[Preempt] = field(default_factory=list)
    room_for: dict[str, list[str]] = field(default_factory=dict)

    def live(self, starts: list[Start]) -> list[Start]:
        """The parts' ``starts`` this step kept, then its own starts not undone."""
        kept = [x for x in starts if x.job not in self.cancelled and x.job not in self.replaced]
        return kept + [x for x in self.added if x.job not in self.cancelled]

    def cap_left(self, ten: str) -> float:
        """GPUs the tenant's preemption cap still lets this epoch stop."""
        pre = self.tenants[ten].preemption
        if pre is None or pre.max_gpus_per_epoch is None:
            return math.inf
        return pre.max_gpus_per_epoch - self.lost[ten]


def _quota_room(
    books: _Books, pick: _Pick, ten: str, t: str, g: int, vp: _Pool | None, room: int
) -> int | None:
    """Pass 1's quota check for a gang of ``g`` GPUs of tenant ``ten`` on ``t``: room inside its
    global quota, first what its use leaves, then its own victims' (its starts of this epoch,
    then its preemptible jobs: a priority preemption; never its jobs on loan), taken into
    ``pick``. The free GPUs ``room`` plus what those victims free, or ``None`` when the quota
    has no room for the gang."""
    qroom = books.quota.get((ten, t), 0) - books.use[(ten, t)]
    if qroom < g and (vp is None or qroom + vp.tenant_gpus.get(ten, 0) < g):
        return None
    for v in vp.of(ten) if qroom < g and vp is not None else ():
        if v.kind != "loan" and pick.take(v):
            room += v.gpus
            qroom += v.gpus
            if qroom >= g:
                break
    return room if qroom >= g else None


def _cover_loans(
    state: ClusterState, books: _Books, pick: _Pick, ten: str, t: str, vp: _Pool, ds: int, dd: int
) -> tuple[int, int]:
    """Cover for the loans a start of ``ten`` on ``t`` would cut: only a borrower's stop gives
    it, borrowers in id order, each one's victims cheapest first (no priority victims), until
    covered. The (supply, demand) shift of ``pick`` after them (``ds``, ``dd`` when none)."""
    for o in sorted(x for x in state.tenant_ids if x != ten and books.excess(x, t) > 0):
        for v in vp.of(o):
            if v.kind == "priority" or v.job.id in pick.chosen:
                continue
            pick.take(v)
            ds, dd = books.shift(t, pick.changes)
            if books.covered(t, ds, dd):
                break
        if books.covered(t, ds, dd):
            break
    return ds, dd


def _reclaim_room(
    state: ClusterState, books: _Books, pick: _Pick, ten: str, t: str, g: int, vp: _Pool, room: int
) -> tuple[int, int] | None:
    """Pass 1's reclaim for a guaranteed gang of ``g`` GPUs of ``ten`` inside its global quota:
    the GPUs still missing from ``room`` from other tenants' victims, cheapest first, then
    cover for the loans the start would cut (:func:`_cover_loans`), taken into ``pick``. The
    (supply, demand) shift of ``pick``, or ``None`` when no stops give both."""
    others = vp.gpus - vp.tenant_gpus.get(ten, 0)
    if room < g and room + others < g:
        return None
    for v in vp.live() if room < g else ():  # GPUs, cheapest stops first
        if v.tenant != ten and v.job.id not in pick.chosen and pick.take(v):
            room += v.gpus
            if room >= g:
                break
    ds, dd = books.shift(t, pick.changes)
    if room >= g and not books.covered(t, ds, dd):
        ds, dd = _cover_loans(state, books, pick, ten, t, vp, ds, dd)
    if room < g or not books.covered(t, ds, dd):
        return None
    return ds, dd


def _within_borrow_limit(state: ClusterState, books: _Books, ten: str, t: str, g: int) -> bool:
    """Whether ``g`` more GPUs of ``ten`` on ``t`` keep the use above quota that no idle quota
    covers (what the start takes from its tenant's lendable idle quota counts) within the
    tenant's borrow limit, or at least do not raise it."""
    bl = state.borrow_limit(ten, t)
    before_e = books.excess(ten, t)
    books.use[(ten, t)] += g
    after_e = books.excess(ten, t)
    books.use[(ten, t)] -= g
    return not (bl is not None and after_e > bl and after_e > before_e)


def _placed(c: _Coordination, job: Job, t: str, pick: _Pick) -> list[GpuRef] | None:
    """The GPUs ``job`` gets on ``t`` once ``pick``'s victims leave (taken from the fleet), or
    ``None`` (the fleet as before) when its shape does not fit the nodes even so."""
    for v in pick.victims:
        c.fleet.release(list(v.refs), shape_of(c.state, v.job, t))
    alloc = c.fleet.place(t, shape_of(c.state, job, t))
    if alloc is None:
        for v in pick.victims:
            c.fleet.take(v.refs, shape_of(c.state, v.job, t))
    return alloc


def _commit(
    c: _Coordination, job: Job, t: str, pick: _Pick, ds: int, dd: int, first: bool, alloc: list[GpuRef]
) -> None:
    """Start ``job`` on ``t`` on ``alloc`` (:func:`_placed`): the accounts take ``pick``'s
    changes, its victims are undone (starts) or stopped (their tenants' caps charged, the start
    named as what they made room for). A pass-1 start (``first``) sets the type's best-effort
    room to what ``pick`` left and uses up the type's slack."""
    books = c.books
    books.supply[t] += ds
    books.demand[t] += dd
    if first:  # a guaranteed start inside quota
        c.be_left[t] = pick.be_room
        c.slack.pop(t, None)
    for o, n in pick.changes.items():
        books.use[(o, t)] += n
    for v in pick.victims:
        c.pool[t].remove(v)
        if v.kind == "start":
            c.cancelled.add(v.job.id)
            c.started_ids.discard(v.job.id)
            c.bumped[v.job.id] = v.job
            continue
        why = PreemptReason.RECLAIM if v.kind == "loan" else PreemptReason.PRIORITY
        if v.kind == "priority":
            books.own_kept[(v.tenant, t)] -= v.gpus
            c.lost[v.tenant] += v.gpus
        c.reclaimed.append(Preempt(job=v.job.id, reason=why, lost_s=v.job.restart_cost_s))
        c.room_for[v.job.id] = [job.id]
    c.added.append(Start(job=job.id, allocation=alloc))
    c.started_ids.add(job.id)
    if c.bumped.pop(job.id, None) is not None:
        c.cancelled.discard(job.id)
        c.replaced.add(job.id)


def _start_on(c: _Coordination, job: Job, t: str, first: bool) -> bool:
    """Try to start the queued ``job`` on type ``t``: on free GPUs, and in pass 1 (``first``)
    inside its tenant's global quota with the stops that make room and keep every loan covered
    (:func:`_quota_room`, :func:`_reclaim_room`); in pass 2 with loans covered by idle quota,
    stopping nothing; never past the borrow limit. Whether it started (:func:`_commit`)."""
    books = c.books
    g = job.gpus
    ten = job.tenant
    guar = job.qos == "guaranteed"
    pick = _Pick(c.cap_left, be_room=c.be_left[t] + g + c.slack.get(t, 0) if guar else 0)
    pick.changes[ten] += g
    room = c.fleet.total.get(t, 0)
    vp = c.pool.get(t)
    if first:
        got = _quota_room(books, pick, ten, t, g, vp, room)
        if got is None:
            return False
        room = got
    ds, dd = books.shift(t, pick.changes)
    if room < g or not books.covered(t, ds, dd):
        # room (and cover for the loans the start would cut) from stops, if the tenant is due
        # a reclaim and the job is guaranteed inside its global quota
        if not first or vp is None:
            return False
        shifted = _reclaim_room(c.state, books, pick, ten, t, g, vp, room)
        if shifted is None:
            return False
        ds, dd = shifted
    if not _within_borrow_limit(c.state, books, ten, t, g):
        return False
    alloc = _placed(c, job, t, pick)
    if alloc is None:
        return False
    _commit(c, job, t, pick, ds, dd, first, alloc)
    return True


def _amend_over_quota(
    c: _Coordination, starts: list[Start]
) -> tuple[list[Loan], dict[tuple[str, str], int], list[Start]]:
    """The over-quota amendment: a tenant left above quota without cover starts nothing on top.
    Its starts of the type (the parts' ``starts`` and the step's own) are undone, latest in
    queue order first, until the loans derived globally cover it. The loans, the use per
    (tenant, type) still uncovered (kept jobs' over-quota use only), and the starts undone."""
    state, books = c.state, c.books
    newly: list[Start] = []
    by_key: dict[tuple[str, str], list[Start]] = defaultdict(list)
    for x in c.live(starts):
        if not x.colocated_with:
            by_key[(state.job(x.job).tenant, state.node_type(x.allocation[0].node))].append(x)
    for xs in by_key.values():
        xs.sort(key=lambda x: _queue_key(state.job(x.job)))
    while True:
        held = {k: n - books.quota[k] for k, n in books.own_kept.items() if n > books.quota[k]}
        loans, uncovered = derive_loans(state, books.use, c.signal, held)
        undone = 0
        for key, gpus in uncovered.items():
            xs = by_key.get(key, [])
            while gpus > 0 and xs:
                x = xs.pop()  # the latest in queue order
                g = state.job(x.job).gpus
                c.cancelled.add(x.job)
                newly.append(x)
                books.use[key] -= g
                gpus -= g
                undone += 1
        if not undone:
            return loans, uncovered, newly


def _fill(
    c: _Coordination, queued: list[Job], starts: list[Start]
) -> tuple[list[Loan], dict[tuple[str, str], int]]:
    """Start the ``queued`` jobs (in queue order) on the capacity the parts left free: pass 1,
    the guaranteed jobs of tenants due a reclaim, inside their global quota (they may stop
    others anywhere in the fleet); pass 2, every job still queued, on loan too, stopping
    nothing. Best-effort jobs keep off the types cap-starved tenants' guaranteed jobs wait for
    and those a node loss's guaranteed jobs restart on (``c.off``, invariant 8). After each
    round the over-quota amendment (:func:`_amend_over_quota`) may undo starts; their GPUs go
    back and pass 2 runs again (at most three rounds). The loans and the uncovered use of the
    last amendment.

    In pass 2 a start only takes: the fleet's free GPUs, the idle quota that covers loans and the
    room under borrow limits only shrink while it runs. So a (tenant, type, GPUs, shape) that
    failed once fails again until the pass ends, and is not tried again (at 100,000 GPUs in 20
    parts, 65,000 of the step's 88,000 tries were pass-2 failures)."""
    for rnd in range(3):
        for first in (True, False) if rnd == 0 else (False,):
            todo = queued if first else sorted([*queued, *c.bumped.values()], key=_queue_key)
            failed: set[tuple[str, str, int, Shape]] = set()
            for job in todo:
                if job.id in c.started_ids or (job.id in c.cancelled and job.id not in c.bumped):
                    continue
                due = job.qos == "guaranteed" and c.signal[job.tenant].reclaim
                if first and not due:
                    continue
                for t in c.state.allowed_types(job):
                    if t in c.off and job.qos != "guaranteed":
                        continue
                    key = None if first else (job.tenant, t, job.gpus, shape_of(c.state, job, t))
                    if key in failed:
                        continue
                    if _start_on(c, job, t, first):
                        break
                    if key is not None:
                        failed.add(key)
        loans, uncovered, newly = _amend_over_quota(c, starts)
        if not newly:
            break
        for x in newly:
            t = c.state.node_type(x.allocation[0].node)
            c.fleet.release(x.allocation, shape_of(c.state, c.state.job(x.job), t))
            c.started_ids.discard(x.job)
        c.books.recount()
    return loans, uncovered


def _assemble(
    c: _Coordination,
    results: list[PartResult],
    leftover: list[str],
    starts: list[Start],
    preempt: list[Preempt],
    loans: list[Loan],
    uncovered: dict[tuple[str, str], int],
    predictions: dict[str, JobPrediction],
) -> Decision:
    """The merged decision of ``starts`` and ``preempt`` (``explanations`` and ``queue_reasons``
    empty): every pending job not started queued in queue order, the parts' notes with the
    over-quota notes recomputed on global numbers, every part's size, status and time, the
    status ``fallback`` when a part gave its greedy plan (else ``feasible``), no bound."""
    state = c.state
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
        f"{sum(x.job not in c.cancelled for x in c.added)} queued "
        f"job(s) on the capacity the parts left free ({len(leftover)} gang(s) no part could hold) "
        f"and stopped {len(c.reclaimed)} running job(s) for guaranteed jobs of tenants due a reclaim"
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
    return Decision(
        now=state.snapshot.now,
        status=status,
        solver=info,
        start=starts,
        preempt=preempt,
        queue=[j.id for j in queue],
        queue_reasons={},
        explanations={},
        loans=loans,
        kept_over_quota=kept_over_quota(uncovered),
        assurance={t: round(c.signal[t].value, 6) for t in state.tenant_ids},
        assurance_state=asr.next_state(state, c.signal, sorted(c.started_ids)),
        predictions=predictions or None,
    )


def merge_plan(
    state: ClusterState,
    results: list[PartResult],
    leftover: list[str],
    signal: dict[str, asr.TenantAssurance],
) -> tuple[Decision, dict[str, list[str]]]:
    """The coordination step without explanations (see the module docstring): the merged
    decision (``explanations`` and ``queue_reasons`` empty) and, per running job it stopped,
    the queued job whose start the stop made room for."""
    starts, preempt, predictions = _collect(results)
    preempt = _keep_idle_victims(state, starts, preempt)
    stopped = {p.job for p in preempt}
    # also stop the guests of stopped hosts named in another part (never: pairs share a node)
    use, own_kept = _kept_use(state, starts, stopped)
    started_ids = {s.job for s in starts}
    fleet = NodePool.of(state, stopped)
    for x in starts:
        if not x.colocated_with:
            fleet.take(x.allocation, shape_of(state, state.job(x.job), state.node_type(x.allocation[0].node)))
    books = _Books.build(state, use, own_kept)
    # victims: not preempted by a part, no MPS pair involved
    hosts = set(state.host_of.values()) | {h for st_ in starts for h in st_.colocated_with or ()}
    found = _start_victims(state, starts, hosts)
    lost, be_left, slack = _best_effort_room(state, starts, preempt)
    tenants = {ten.id: ten for ten in state.snapshot.tenants}
    _running_victims(state, stopped, hosts, tenants, found)
    pool = {t: _Pool(vs) for t, vs in found.items()}
    # best-effort jobs keep off the types cap-starved tenants' guaranteed jobs wait for and those
    # a node loss's guaranteed jobs restart on (node_loss)
    off = set(starved_types(state, cap_starved(state))) | restart_types(state)
    c = _Coordination(state, signal, books, fleet, pool, tenants, lost, be_left, slack, off, started_ids)
    queued = [j for j in state.pending() if j.id not in started_ids]
    queued.sort(key=_queue_key)
    loans, uncovered = _fill(c, queued, starts)
    starts = c.live(starts)
    preempt += c.reclaimed
    starts = _relabel_loans(state, starts, books.own_kept)
    d = _assemble(c, results, leftover, starts, preempt, loans, uncovered, predictions)
    return d, c.room_for


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


"""The independent invariant checker: the executable specification of a decision.

``check_decision(state, decision)`` returns every broken invariant of the spec
(``snapshot-format-1.md``, "What every decision must hold"), written without any solver:

====  ==============================================================  ==========================
 inv  rule                                                            function
====  ==============================================================  ==========================
 1    a GPU holds one job, or on an ``mps`` type two shareable jobs   ``check_gpu_sharing``
      whose memory fits together
 2    gang all-or-nothing, one allowed type, available nodes, no      ``check_placement``
      GPU given twice, running jobs keep their allocation
 3    only preemptible / on-loan / guest / unavailable-node jobs are  ``check_preemption``
      preempted; guaranteed in-quota jobs never for another tenant
 4    per type: use within capacity, use above quota covered by       ``check_capacity_and_loans``
      loans within borrow and lend limits; lenders lend idle quota
 5    every pending job exactly once in ``start`` or ``queue``         ``check_start_or_queue``
 6    workflow plan rules                                             ``check_workflow_plan``
====  ==============================================================  ==========================
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from optsched.schema.decision import Decision, PreemptReason
from optsched.schema.snapshot import Job
from optsched.state import ClusterState, GpuKey

EPS = 1e-6


@dataclass(frozen=True)
class Violation:
    """One broken invariant."""

    invariant: int
    message: str
    ids: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"invariant {self.invariant}: {self.message}"


@dataclass(frozen=True)
class _After:
    """The cluster as the decision leaves it."""

    holders: dict[GpuKey, list[str]]
    """GPU -> job ids on it (kept running and started), host first."""
    guests: dict[str, list[str]]
    """guest job id -> host ids."""
    types: dict[str, str]
    """job id -> GPU type, for every job holding GPUs after the decision."""
    preempted: set[str]
    started: dict[str, Job]


def _after(state: ClusterState, decision: Decision) -> _After:
    preempted = {p.job for p in decision.preempt}
    holders: dict[GpuKey, list[str]] = defaultdict(list)
    guests: dict[str, list[str]] = {}
    types: dict[str, str] = {}
    for job in state.running():
        if job.id in preempted:
            continue
        assert job.allocation is not None
        types[job.id] = state.job_type(job)
        for ref in job.allocation:
            holders[ref.key()].append(job.id)
        if job.id in state.host_of:
            guests[job.id] = [state.host_of[job.id]]
    started: dict[str, Job] = {}
    for s in decision.start:
        if s.job not in state.job_index:
            continue
        job = state.job(s.job)
        started[s.job] = job
        for ref in s.allocation:
            holders[ref.key()].append(s.job)
        if s.colocated_with:
            guests[s.job] = list(s.colocated_with)
        if s.allocation and s.allocation[0].node in state.node_index:
            types[s.job] = state.node_type(s.allocation[0].node)
    # hosts first on each GPU
    for ids in holders.values():
        ids.sort(key=lambda j: j in guests)
    return _After(holders, guests, types, preempted, started)


def _memory(job_id: str, state: ClusterState, decision: Decision) -> float | None:
    job = state.job(job_id)
    if job.memory_gib is not None:
        return job.memory_gib
    if decision.predictions and job_id in decision.predictions:
        return decision.predictions[job_id].memory_gib
    return None


def check_gpu_sharing(state: ClusterState, decision: Decision, after: _After) -> list[Violation]:
    """Invariant 1."""
    out: list[Violation] = []
    started = set(after.started)
    for key, ids in sorted(after.holders.items()):
        if len(ids) <= 1 or key[0] not in state.node_index:
            continue
        where = f"GPU {key[0]}/{key[1]}"
        gtype = state.snapshot.gpu_types[state.node_type(key[0])]
        if len(ids) > 2:
            out.append(Violation(1, f"{where} holds {len(ids)} jobs", tuple(ids)))
            continue
        if not gtype.mps:
            out.append(Violation(1, f"{where} is shared on a non-MPS type", tuple(ids)))
            continue
        for j in ids:
            if not state.job(j).is_shareable:
                out.append(Violation(1, f"{where}: job '{j}' is not shareable", tuple(ids)))
        if not started.intersection(ids):
            continue  # a pair that was already running
        mems = [_memory(j, state, decision) for j in ids]
        if any(m is None for m in mems):
            out.append(
                Violation(1, f"{where}: memory of {ids} unknown, cannot prove the pair fits", tuple(ids))
            )
        elif sum(m for m in mems if m is not None) > gtype.memory_gib + EPS:
            out.append(
                Violation(
                    1,
                    f"{where}: {ids} need {sum(m for m in mems if m is not None):.1f} GiB, "
                    f"the GPU has {gtype.memory_gib:.1f}",
                    tuple(ids),
                )
            )
    return out


def check_placement(state: ClusterState, decision: Decision, after: _After) -> list[Violation]:
    """Invariant 2."""
    out: list[Violation] = []
    seen_start: set[str] = set()
    for s in decision.start:
        if s.job not in state.job_index:
            continue  # reported by invariant 5
        job = state.job(s.job)
        if s.job in seen_start:
            out.append(Violation(2, f"job '{s.job}' is started twice", (s.job,)))
            continue
        seen_start.add(s.job)
        if job.state != "pending":
            out.append(Violation(2, f"job '{s.job}' is already running", (s.job,)))
            continue
        if len(s.allocation) != job.gpus:
            out.append(
                Violation(
                    2,
                    f"job '{s.job}' gets {len(s.allocation)} GPUs, asks for {job.gpus}",
                    (s.job,),
                )
            )
        keys = [r.key() for r in s.allocation]
        if len(set(keys)) != len(keys):
            out.append(Violation(2, f"job '{s.job}' lists a GPU twice", (s.job,)))
        types: set[str] = set()
        for ref in s.allocation:
            if ref.node not in state.node_index:
                out.append(Violation(2, f"job '{s.job}' placed on unknown node '{ref.node}'", (s.job,)))
                continue
            node = state.snapshot.nodes[state.node_index[ref.node]]
            if ref.gpu >= node.gpus:
                out.append(
                    Violation(2, f"job '{s.job}' placed on missing GPU {ref.node}/{ref.gpu}", (s.job,))
                )
            if not node.available:
                out.append(Violation(2, f"job '{s.job}' placed on unavailable node '{ref.node}'", (s.job,)))
            if ref.key() in state.pool_gpus:
                out.append(
                    Violation(
                        2,
                        f"job '{s.job}' placed on workflow-pool GPU {ref.node}/{ref.gpu}",
                        (s.job,),
                    )
                )
            types.add(node.gpu_type)
        if len(types) > 1:
            out.append(Violation(2, f"job '{s.job}' mixes GPU types {sorted(types)}", (s.job,)))
        allowed = state.allowed_types(job)
        for t in types:
            if t not in allowed:
                out.append(
                    Violation(2, f"job '{s.job}' placed on type '{t}', allowed {list(allowed)}", (s.job,))
                )
        if s.colocated_with:
            for host in s.colocated_with:
                if host not in state.job_index or host == s.job:
                    out.append(Violation(2, f"job '{s.job}' names unknown host '{host}'", (s.job,)))
            for ref in s.allocation:
                others = [j for j in after.holders.get(ref.key(), []) if j != s.job]
                if not any(h in others for h in s.colocated_with):
                    out.append(
                        Violation(
                            2,
                            f"guest '{s.job}' on GPU {ref.node}/{ref.gpu} not held by its host",
                            (s.job,),
                        )
                    )
    # running jobs on unavailable nodes must be stopped
    for job in state.running():
        if job.id in after.preempted:
            continue
        assert job.allocation is not None
        bad = [r.node for r in job.allocation if not state.node_available(r.node)]
        if bad:
            out.append(Violation(2, f"running job '{job.id}' kept on unavailable node '{bad[0]}'", (job.id,)))
    # a GPU given twice to jobs that are not an MPS host/guest pair
    for key, ids in sorted(after.holders.items()):
        if len(ids) == 2:
            a, b = ids
            paired = after.guests.get(b) and a in after.guests[b]
            if not paired and not (a in after.guests and b in after.guests[a]):
                out.append(Violation(2, f"GPU {key[0]}/{key[1]} given to both '{a}' and '{b}'", (a, b)))
    return out


def check_preemption(state: ClusterState, decision: Decision, after: _After) -> list[Violation]:
    """Invariant 3."""
    out: list[Violation] = []
    seen: set[str] = set()
    for p in decision.preempt:
        if p.job not in state.job_index:
            out.append(Violation(3, f"preempts unknown job '{p.job}'", (p.job,)))
            continue
        if p.job in seen:
            out.append(Violation(3, f"preempts '{p.job}' twice", (p.job,)))
        seen.add(p.job)
        job = state.job(p.job)
        if job.state != "running":
            out.append(Violation(3, f"preempts '{p.job}', which is not running", (p.job,)))
            continue
        assert job.allocation is not None
        on_bad_node = any(not state.node_available(r.node) for r in job.allocation)
        guest = p.job in state.host_of
        if not (job.is_preemptible or on_bad_node or job.on_loan or guest):
            out.append(Violation(3, f"'{p.job}' is not preemptible", (p.job,)))
            continue
        if p.reason == PreemptReason.NODE_UNAVAILABLE and not on_bad_node:
            out.append(Violation(3, f"'{p.job}' preempted for node_unavailable on available nodes", (p.job,)))
        if p.reason == PreemptReason.RECLAIM and not job.on_loan:
            out.append(Violation(3, f"'{p.job}' reclaimed but it does not run on loan", (p.job,)))
        # a guaranteed job inside its quota is never preempted for another tenant
        if job.qos == "guaranteed" and not job.on_loan and not guest and not on_bad_node:
            freed = {r.key() for r in job.allocation}
            start_by_id = {s.job: s for s in decision.start}
            for sid, sjob in after.started.items():
                if sjob.tenant == job.tenant:
                    continue
                if freed.intersection(r.key() for r in start_by_id[sid].allocation):
                    out.append(
                        Violation(
                            3,
                            f"guaranteed in-quota job '{p.job}' of '{job.tenant}' preempted "
                            f"for '{sid}' of '{sjob.tenant}'",
                            (p.job, sid),
                        )
                    )
            if p.reason != PreemptReason.PRIORITY:
                out.append(
                    Violation(
                        3,
                        f"guaranteed in-quota job '{p.job}' preempted for '{p.reason}'",
                        (p.job,),
                    )
                )
    return out


def tenant_use(state: ClusterState, after: _After) -> dict[tuple[str, str], int]:
    """GPUs per (tenant, type) after the decision; MPS guests use no quota."""
    use: dict[tuple[str, str], int] = defaultdict(int)
    for key, ids in after.holders.items():
        hosts = [j for j in ids if j not in after.guests]
        if not hosts or key[0] not in state.node_index:
            continue
        job = state.job(hosts[0])
        use[(job.tenant, state.node_type(key[0]))] += 1
    return use


def check_capacity_and_loans(state: ClusterState, decision: Decision, after: _After) -> list[Violation]:
    """Invariant 4."""
    out: list[Violation] = []
    cap = state.capacity()
    use = tenant_use(state, after)
    for t in state.type_names:
        total = sum(v for (_, tt), v in use.items() if tt == t)
        if total > cap[t]:
            out.append(Violation(4, f"type '{t}': {total} GPUs used, capacity {cap[t]}"))
    lent_in: dict[tuple[str, str], int] = defaultdict(int)
    lent_out: dict[tuple[str, str], int] = defaultdict(int)
    for k, loan in enumerate(decision.loans):
        bad = False
        for who in (loan.lender, loan.borrower):
            if who not in state.tenant_index:
                out.append(Violation(4, f"loans[{k}]: unknown tenant '{who}'"))
                bad = True
        if loan.gpu_type not in state.snapshot.gpu_types:
            out.append(Violation(4, f"loans[{k}]: unknown GPU type '{loan.gpu_type}'"))
            bad = True
        if loan.lender == loan.borrower:
            out.append(Violation(4, f"loans[{k}]: '{loan.lender}' lends to itself"))
            bad = True
        if bad:
            continue
        lent_in[(loan.borrower, loan.gpu_type)] += loan.gpus
        lent_out[(loan.lender, loan.gpu_type)] += loan.gpus
    for ten in state.tenant_ids:
        for t in state.type_names:
            q = state.quota(ten, t)
            u = use.get((ten, t), 0)
            li, lo = lent_in[(ten, t)], lent_out[(ten, t)]
            if u > q + li:
                out.append(
                    Violation(4, f"tenant '{ten}' uses {u} '{t}' GPUs: quota {q} + loans {li}", (ten,))
                )
            bl = state.borrow_limit(ten, t)
            if bl is not None and li > bl:
                out.append(Violation(4, f"tenant '{ten}' borrows {li} '{t}' GPUs, borrow_limit {bl}", (ten,)))
            ll = state.lend_limit(ten, t)
            if ll is not None and lo > ll:
                out.append(Violation(4, f"tenant '{ten}' lends {lo} '{t}' GPUs, lend_limit {ll}", (ten,)))
            if lo > 0 and u + lo > q:
                out.append(
                    Violation(
                        4,
                        f"tenant '{ten}' lends {lo} '{t}' GPUs but uses {u} of quota {q}",
                        (ten,),
                    )
                )
    # jobs started inside quota must fit the quota (on_loan marks borrowed capacity)
    start_by_id = {s.job: s for s in decision.start}
    own_started: dict[tuple[str, str], int] = defaultdict(int)
    own_kept: dict[tuple[str, str], int] = defaultdict(int)
    for jid, jt in after.types.items():
        if jid in after.guests:
            continue
        job = state.job(jid)
        if jid in after.started:
            if not start_by_id[jid].on_loan:
                own_started[(job.tenant, jt)] += job.gpus
        elif not job.on_loan:
            own_kept[(job.tenant, jt)] += job.gpus
    for (ten, t), started in sorted(own_started.items()):
        q = state.quota(ten, t)
        if started + own_kept[(ten, t)] > q:
            out.append(
                Violation(
                    4,
                    f"tenant '{ten}' starts {started} '{t}' GPUs not on loan beyond its quota "
                    f"{q} ({own_kept[(ten, t)]} already held)",
                    (ten,),
                )
            )
    for s in decision.start:
        if s.colocated_with and s.on_loan:
            out.append(Violation(4, f"guest '{s.job}' uses no quota and cannot be on loan", (s.job,)))
    return out


def check_start_or_queue(state: ClusterState, decision: Decision) -> list[Violation]:
    """Invariant 5."""
    out: list[Violation] = []
    count: dict[str, int] = defaultdict(int)
    for s in decision.start:
        count[s.job] += 1
    for q in decision.queue:
        count[q] += 1
    for jid in sorted(count):
        if jid not in state.job_index:
            out.append(Violation(5, f"unknown job '{jid}' in start/queue", (jid,)))
        elif state.job(jid).state != "pending":
            out.append(Violation(5, f"running job '{jid}' in start/queue", (jid,)))
    for job in state.pending():
        if count[job.id] != 1:
            out.append(Violation(5, f"pending job '{job.id}' appears {count[job.id]} times", (job.id,)))
    queued = set(decision.queue)
    for jid in decision.queue_reasons:
        if jid not in queued:
            out.append(Violation(5, f"queue reason given for '{jid}', which is not queued", (jid,)))
    return out


def check_decision(state: ClusterState, decision: Decision) -> list[Violation]:
    """Every broken invariant of ``decision`` for ``state`` (empty when it is valid)."""
    out: list[Violation] = []
    if decision.now != state.snapshot.now:
        out.append(Violation(5, f"decision.now {decision.now} does not echo snapshot.now"))
    after = _after(state, decision)
    out += check_gpu_sharing(state, decision, after)
    out += check_placement(state, decision, after)
    out += check_preemption(state, decision, after)
    out += check_capacity_and_loans(state, decision, after)
    out += check_start_or_queue(state, decision)
    if decision.workflow_plan is not None:
        from optsched.workflows.check import check_workflow_plan

        out += check_workflow_plan(state, decision.workflow_plan)
    return out

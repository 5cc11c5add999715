"""Turn a solver-neutral :class:`~optsched.engine.problem.Assignment` into a :class:`Decision`.

This is where ids come back: counts per GPU type become concrete GPU indices (best-fit on one
node, else spread over the nodes with most free GPUs), loans are derived from the final use of
each tenant, and every queued job gets its reason.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Mapping

from optsched.engine import assurance as asr
from optsched.engine.check import over_quota_note
from optsched.engine.problem import Assignment, EpochProblem
from optsched.engine.state import ClusterState, GpuKey
from optsched.predict.base import Predictions
from optsched.schema.decision import (
    Decision,
    JobPrediction,
    Loan,
    Preempt,
    PreemptReason,
    QueueReason,
    SolverInfo,
    Start,
)
from optsched.schema.snapshot import GpuRef


def _free_gpus(state: ClusterState, stopped: set[str]) -> dict[str, list[int]]:
    """Free GPU indices per available node after the stopped jobs leave."""
    # state.gpu_holders lists every GPU of every running job: a GPU stays held while one of
    # its holders keeps running
    held: set[GpuKey] = {
        k for k, ids in state.gpu_holders.items() if any(j not in stopped for j in ids)
    }
    free: dict[str, list[int]] = defaultdict(list)
    for node, gpu in state.cluster_gpus():
        if (node, gpu) not in held:
            free[node].append(gpu)
    return free


def _place(free: dict[str, list[int]], nodes: list[str], gpus: int) -> list[GpuRef]:
    """Best fit on one node; else take from the nodes with most free GPUs."""
    fits = [n for n in nodes if len(free[n]) >= gpus]
    if fits:
        node = min(fits, key=lambda n: (len(free[n]), n))
        taken, free[node] = free[node][:gpus], free[node][gpus:]
        return [GpuRef(node=node, gpu=g) for g in taken]
    out: list[GpuRef] = []
    for node in sorted(nodes, key=lambda n: (-len(free[n]), n)):
        if len(out) == gpus:
            break
        take = min(gpus - len(out), len(free[node]))
        out += [GpuRef(node=node, gpu=g) for g in free[node][:take]]
        free[node] = free[node][take:]
    if len(out) != gpus:
        raise AssertionError(f"placement of {gpus} GPUs failed: capacity row violated")
    return out


class _Placer:
    """:func:`_place` for many starts without scanning every node of the type per start.

    The nodes of each type sit in buckets by their number of free GPUs, ids sorted: best fit
    is the first node of the first non-empty bucket from the gang size up; the spread order
    (most free GPUs first, then id) walks the buckets downwards. The same GPUs as
    :func:`_place`, start after start.
    """

    def __init__(self, free: dict[str, list[int]], nodes_by_type: Mapping[str, list[str]]) -> None:
        self.free = free
        self.buckets: dict[str, dict[int, list[str]]] = {}
        for t, nodes in nodes_by_type.items():
            b: dict[int, list[str]] = defaultdict(list)
            for n in nodes:
                b[len(free[n])].append(n)
            for ids in b.values():
                ids.sort()
            self.buckets[t] = b

    def _take(self, b: dict[int, list[str]], node: str, k: int) -> list[GpuRef]:
        gpus = self.free[node]
        n = len(gpus)
        taken, self.free[node] = gpus[:k], gpus[k:]
        ids = b[n]
        del ids[bisect.bisect_left(ids, node)]
        bisect.insort(b[n - k], node)
        return [GpuRef(node=node, gpu=g) for g in taken]

    def place(self, gpu_type: str, gpus: int) -> list[GpuRef]:
        b = self.buckets.setdefault(gpu_type, defaultdict(list))
        fits = [c for c, ids in b.items() if c >= gpus and ids]
        if fits:
            c = min(fits)
            return self._take(b, b[c][0], gpus)
        out: list[GpuRef] = []
        for c in sorted((c for c, ids in b.items() if c > 0 and ids), reverse=True):
            for node in list(b[c]):
                if len(out) == gpus:
                    break
                out += self._take(b, node, min(gpus - len(out), c))
            if len(out) == gpus:
                break
        if len(out) != gpus:
            raise AssertionError(f"placement of {gpus} GPUs failed: capacity row violated")
        return out


def to_decision(
    state: ClusterState,
    problem: EpochProblem,
    assignment: Assignment,
    predictions: Predictions,
    signal: dict[str, asr.TenantAssurance],
    solver: SolverInfo,
    status: str,
) -> Decision:
    snap = state.snapshot
    p = problem
    # preemptions ---------------------------------------------------------------------
    preempt: list[Preempt] = []
    for jid in p.forced:
        preempt.append(
            Preempt(
                job=jid,
                reason=PreemptReason.NODE_UNAVAILABLE,
                lost_s=state.job(jid).restart_cost_s,
            )
        )
    for jid in p.evicted:
        preempt.append(
            Preempt(job=jid, reason=PreemptReason.INTERFERENCE, lost_s=state.job(jid).restart_cost_s)
        )
    for r in sorted(assignment.preempt):
        run = p.running[r]
        if run.on_loan:
            reason = PreemptReason.RECLAIM
        elif run.guest:
            reason = PreemptReason.INTERFERENCE
        else:
            reason = PreemptReason.PRIORITY
        preempt.append(Preempt(job=run.job, reason=reason, lost_s=run.lost_s))
    stopped = {x.job for x in preempt}

    # starts: exclusive placements, largest gangs first -------------------------------------
    free = _free_gpus(state, stopped)
    nodes_by_type: dict[str, list[str]] = defaultdict(list)
    for node in snap.nodes:
        if node.available:
            nodes_by_type[node.gpu_type].append(node.id)
    starts: list[Start] = []
    plan: list[tuple[int, str, int, bool]] = []  # (gpus, job id, type, on_loan)
    for c in sorted(assignment.starts):
        cls = p.pending[c]
        k = 0
        for (ti, loan), n in sorted(assignment.starts[c].items()):
            for jid in cls.jobs[k : k + n]:
                plan.append((cls.gpus, jid, ti, loan))
            k += n
    placer = _Placer(free, nodes_by_type)
    for gpus, jid, ti, loan in sorted(plan, key=lambda x: (-x[0], x[1])):
        alloc = placer.place(p.types[ti], gpus)
        starts.append(Start(job=jid, allocation=alloc, on_loan=loan))
    # guests: GPUs of the host that hold no guest yet -----------------------------------------
    taken: set[GpuKey] = set(
        k for k, ids in state.gpu_holders.items() if len(ids) > 1 and ids[1] not in stopped
    )
    for j in sorted(assignment.guests, key=lambda j: p.pending[j].job):
        host = p.running[assignment.guests[j]]
        if host.job in stopped:
            raise AssertionError(f"guest {p.pending[j].job} placed on stopped host {host.job}")
        hjob = state.job(host.job)
        assert hjob.allocation is not None
        shared = [r for r in hjob.allocation if r.key() not in taken][: p.pending[j].gpus]
        taken.update(r.key() for r in shared)
        starts.append(
            Start(
                job=p.pending[j].job,
                allocation=[GpuRef(node=r.node, gpu=r.gpu) for r in shared],
                on_loan=False,
                colocated_with=[host.job],
            )
        )
    started = {s.job for s in starts}

    # loans from final use -----------------------------------------------------------------
    use: dict[tuple[str, str], int] = defaultdict(int)
    for job in state.running():
        if job.id in stopped or job.id in state.host_of:
            continue
        use[(job.tenant, state.job_type(job))] += job.gpus
    for s in starts:
        if not s.colocated_with:
            use[(state.job(s.job).tenant, state.node_type(s.allocation[0].node))] += len(s.allocation)
    loans, uncovered = derive_loans(state, use, signal)
    for (ten, tname), n in sorted(uncovered.items()):
        solver.notes.append(over_quota_note(ten, tname, n))

    # queue with reasons ---------------------------------------------------------------------
    cap = state.capacity()
    free_after = {t: cap[t] - sum(v for (_, tt), v in use.items() if tt == t) for t in state.type_names}
    held_before: dict[str, int] = defaultdict(int)  # host GPUs of every running job, per type
    for run in p.running:
        if not run.guest:
            held_before[p.types[run.type]] += run.gpus
    free_before = {t: cap[t] - held_before[t] for t in state.type_names}
    lent_in: dict[tuple[str, str], int] = defaultdict(int)
    for ln in loans:
        lent_in[(ln.borrower, ln.gpu_type)] += ln.gpus
    queue: list[str] = []
    reasons: dict[str, QueueReason] = {}
    pending = [j for j in state.pending() if j.id not in started]
    pending.sort(key=lambda j: (-p.density.get(j.id, 0.0), j.submit_s, j.id))
    # the reason depends on the job's tenant, gang and allowed types only: once per kind
    kinds: dict[tuple[str, int, tuple[str, ...] | None], QueueReason] = {}
    for job in pending:
        queue.append(job.id)
        kind = (job.tenant, job.gpus, None if job.gpu_types is None else tuple(job.gpu_types))
        why = kinds.get(kind)
        if why is None:
            why = kinds[kind] = _reason(state, job.id, cap, free_before, free_after, use)
        reasons[job.id] = why
    preds = {
        jid: JobPrediction(
            runtime_s=round(e.runtime_s, 3),
            memory_gib=round(e.memory_gib, 3),
            source=f"runtime:{e.runtime_source},memory:{e.memory_source}",
        )
        for jid, e in sorted(predictions.jobs.items())
    }
    return Decision(
        now=snap.now,
        status=status,
        solver=solver,
        start=sorted(starts, key=lambda s: s.job),
        preempt=preempt,
        queue=queue,
        queue_reasons=reasons,
        loans=loans,
        assurance={t: round(signal[t].value, 6) for t in state.tenant_ids},
        assurance_state=asr.next_state(state, signal, sorted(started)),
        predictions=preds,
    )


def derive_loans(
    state: ClusterState, use: dict[tuple[str, str], int], signal: dict[str, asr.TenantAssurance]
) -> tuple[list[Loan], dict[tuple[str, str], int]]:
    """Cover each tenant's use above quota with idle quota of others (most assured first).

    Returns the loans and, per (tenant, type), the use above quota that no lender could cover
    (amended invariant 4: running use kept over quota).
    """
    loans: list[Loan] = []
    uncovered: dict[tuple[str, str], int] = {}
    for t in state.type_names:
        avail: dict[str, int] = {}
        for ten in state.tenant_ids:
            idle = state.quota(ten, t) - use.get((ten, t), 0)
            lim = state.lend_limit(ten, t)
            give = idle if lim is None else min(idle, lim)
            if give > 0:
                avail[ten] = give
        order = sorted(avail, key=lambda x: (-signal[x].value, -avail[x], x))
        for ten in state.tenant_ids:
            excess = use.get((ten, t), 0) - state.quota(ten, t)
            bl = state.borrow_limit(ten, t)
            need = excess if bl is None else min(excess, bl)
            covered = 0
            for lender in order:
                if need <= 0:
                    break
                if avail[lender] <= 0 or lender == ten:
                    continue
                g = min(avail[lender], need)
                loans.append(Loan(lender=lender, borrower=ten, gpu_type=t, gpus=g))
                avail[lender] -= g
                need -= g
                covered += g
            if excess - covered > 0:
                uncovered[(ten, t)] = excess - covered
    return loans, uncovered


def _reason(
    state: ClusterState,
    job_id: str,
    cap: dict[str, int],
    free_before: dict[str, int],
    free_after: dict[str, int],
    use: dict[tuple[str, str], int],
) -> QueueReason:
    job = state.job(job_id)
    allowed = state.allowed_types(job)
    if all(cap[t] == 0 for t in allowed):
        return QueueReason.TYPE_UNAVAILABLE
    if all(cap[t] < job.gpus for t in allowed):
        return QueueReason.GANG_TOO_LARGE
    if all(free_after[t] < job.gpus for t in allowed):
        if any(free_before[t] >= job.gpus for t in allowed):
            return QueueReason.LOWER_PRIORITY
        return QueueReason.NO_CAPACITY
    # capacity exists: it is the quota that stops it
    for t in allowed:
        if free_after[t] < job.gpus:
            continue
        if use.get((job.tenant, t), 0) + job.gpus <= state.quota(job.tenant, t):
            return QueueReason.LOWER_PRIORITY
        bl = state.borrow_limit(job.tenant, t)
        if bl is not None and use.get((job.tenant, t), 0) + job.gpus - state.quota(job.tenant, t) > bl:
            return QueueReason.BORROW_LIMIT
    return QueueReason.QUOTA_AND_NO_LENDER

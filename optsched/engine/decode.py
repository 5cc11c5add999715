"""The decode stage: a solver-neutral :class:`~optsched.engine.problem.Assignment` becomes a
:class:`~optsched.schema.decision.Decision`.

Where it sits in an epoch (:func:`optsched.engine.epoch.solve_epoch`)::

    ... -> backend -> fill pass -> to_decision (here) -> check_decision -> [labelled fallback]

A backend and the fill pass answer in counts: how many members of each pending class start on
each GPU type, in quota or on loan, which running jobs stop or change size, which MPS guest
joins which host. Every plan the epoch may return (the solver's, the greedy plan, the empty
plan) comes through :func:`to_decision`, which is where ids come back: counts per GPU type
become concrete GPU indices (:class:`~optsched.engine.ledger.Placer`: best fit on one node,
else spread over the nodes with most free GPUs), loans are derived from the final use of each
tenant (:func:`~optsched.engine.ledger.derive_loans`), and the queue is ordered by value. A
shrink keeps the GPUs on the nodes where the job holds most; growth takes free GPUs on the
job's own nodes first, after every start is placed. Its last step is the explanation stage
(:mod:`optsched.engine.explain`), run on the final decision: every queued job's reason is the
code of its explanation.
"""

from __future__ import annotations

from collections import defaultdict

from optsched.engine import assurance as asr
from optsched.engine.check import over_quota_note
from optsched.engine.explain import Kind, explain, explain_held_back, queue_kind
from optsched.engine.ledger import Placer, derive_loans, free_gpus, kept_over_quota
from optsched.engine.problem import Assignment, EpochProblem
from optsched.engine.state import ClusterState, GpuKey
from optsched.predict.base import Predictions
from optsched.schema.decision import (
    Decision,
    JobPrediction,
    Preempt,
    PreemptReason,
    QueueReason,
    Resize,
    ResizeReason,
    SolverInfo,
    Start,
)
from optsched.schema.snapshot import GpuRef


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

    # shrinks keep the GPUs on the nodes where the job holds most ---------------------------
    kept_alloc: dict[str, list[GpuRef]] = {}
    released: set[GpuKey] = set()
    for r, d in sorted(assignment.resize.items()):
        run = p.running[r]
        alloc = state.job(run.job).allocation
        assert alloc is not None and r not in assignment.preempt
        if d < 0:
            per_node: dict[str, int] = defaultdict(int)
            for ref in alloc:
                per_node[ref.node] += 1
            keep = sorted(alloc, key=lambda x: (-per_node[x.node], x.node, x.gpu))[: run.gpus + d * run.step]
            kept_alloc[run.job] = sorted(keep, key=lambda x: (x.node, x.gpu))
            released.update(ref.key() for ref in alloc if ref not in keep)

    # starts: exclusive placements, largest gangs first -------------------------------------
    free = free_gpus(state, stopped, frozenset(released))
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
    placer = Placer(free, nodes_by_type)
    for gpus, jid, ti, loan in sorted(plan, key=lambda x: (-x[0], x[1])):
        alloc = placer.place(p.types[ti], gpus)
        starts.append(Start(job=jid, allocation=alloc, on_loan=loan))
    # growth: the GPUs left idle, on the job's own nodes first --------------------------------
    resizes: list[Resize] = []
    for r, d in sorted(assignment.resize.items(), key=lambda x: p.running[x[0]].job):
        run = p.running[r]
        alloc = list(state.job(run.job).allocation or [])
        tname = p.types[run.type]
        if d > 0:
            need = d * run.step
            extra: list[GpuRef] = []
            for nid in dict.fromkeys(ref.node for ref in alloc):
                extra += placer.take_on(tname, nid, need - len(extra))
            if len(extra) < need:
                extra += placer.place(tname, need - len(extra))
            new = alloc + extra
            why = ResizeReason.GROW
        else:
            new = kept_alloc[run.job]
            why = ResizeReason.SHRINK_FOR_RECLAIM if run.on_loan else ResizeReason.SHRINK_FOR_START
        resizes.append(
            Resize(
                job=run.job,
                allocation=new,
                from_gpus=run.gpus,
                to_gpus=len(new),
                reason=why,
                lost_s=run.overhead_s,
            )
        )
    new_size = {rz.job: rz.to_gpus for rz in resizes}
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
        use[(job.tenant, state.job_type(job))] += new_size.get(job.id, job.gpus)
    for s in starts:
        if not s.colocated_with:
            use[(state.job(s.job).tenant, state.node_type(s.allocation[0].node))] += len(s.allocation)
    kept = {
        (p.tenants[i], p.types[t]): n
        for i, row in enumerate(assignment.kept_over(p))
        for t, n in enumerate(row)
        if n > 0
    }
    loans, uncovered = derive_loans(state, use, signal, kept)
    for (ten, tname), n in sorted(uncovered.items()):
        solver.notes.append(over_quota_note(ten, tname, n))

    # queue with reasons: what really binds after this decision (its preemptions and starts
    # included), once per (tenant, gang, allowed types), so a reason and its explanation agree
    queue: list[str] = []
    pending = [j for j in state.pending() if j.id not in started]
    pending.sort(key=lambda j: (-p.density.get(j.id, 0.0), j.submit_s, j.id))
    kind_of: list[Kind] = []  # per queued job
    for job in pending:
        queue.append(job.id)
        kind_of.append(queue_kind(state, job))
    density = p.density
    explanations = explain(
        state, starts, preempt, use, loans, queue, kind_of, signal, resizes,
        rank=lambda j: (-density.get(j, 0.0), j), evicted=p.evicted,
    )
    if p.held_back:
        explain_held_back(state, p.held_back, explanations, queue)
    reasons = {jid: QueueReason(explanations[jid].code) for jid in queue}
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
        resize=resizes,
        queue=queue,
        queue_reasons=reasons,
        explanations=explanations,
        loans=loans,
        kept_over_quota=kept_over_quota(uncovered),
        assurance={t: round(signal[t].value, 6) for t in state.tenant_ids},
        assurance_state=asr.next_state(state, signal, sorted(started)),
        predictions=preds,
    )

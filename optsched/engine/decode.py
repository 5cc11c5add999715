"""The decode stage: a solver-neutral :class:`~optsched.engine.problem.Assignment` becomes a
:class:`~optsched.schema.decision.Decision`.

Where it sits in an epoch (:func:`optsched.engine.epoch.solve_epoch`)::

    ... -> backend -> fill pass -> to_decision (here) -> check_decision -> [labelled fallback]

A backend and the fill pass answer in counts: how many members of each pending class start on
each GPU type, in quota or on loan, which running jobs stop or change size, which MPS guest
joins which host. Every plan the epoch may return (the solver's, the greedy plan, the empty
plan) comes through :func:`to_decision`, which is where ids come back: counts per GPU type
become concrete GPU indices (:class:`~optsched.engine.ledger.NodePool`: each job's pieces on
its own nodes, by the buddy rule, with its CPU, memory, share and topology), loans are derived
from the final use of each
tenant (:func:`~optsched.engine.ledger.derive_loans`), and the queue is ordered by value. A
shrink keeps the GPUs on the nodes where the job holds most; growth takes free GPUs on the
job's own nodes first, after every start is placed. Its last step is the explanation stage
(:mod:`optsched.engine.explain`), run on the final decision: every queued job's reason is the
code of its explanation.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from optsched.engine import assurance as asr
from optsched.engine.check import over_quota_note
from optsched.engine.explain import Kind, explain, explain_held_back, queue_kind, queue_reasons
from optsched.engine.ledger import NodePool, derive_loans, kept_over_quota, shrink_keeps
from optsched.engine.problem import Assignment, EpochProblem
from optsched.engine.state import ClusterState, GpuKey
from optsched.predict.base import Predictions
from optsched.schema.decision import (
    Decision,
    Explanation,
    JobPrediction,
    Loan,
    Preempt,
    PreemptReason,
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
    """The :class:`Decision` of ``assignment``: :func:`draft_decision`, completed."""
    draft = draft_decision(state, problem, assignment, predictions, signal, solver, status)
    draft.complete()
    return draft.decision


@dataclass
class Draft:
    """A decision without its explanations, queue reasons and predictions (``decision``: every
    other field final), and ``complete``, which adds them. An epoch that places two plans and
    keeps the better (the solver's and the greedy plan) explains only the one it keeps."""

    decision: Decision
    complete: Callable[[], None]


def draft_decision(
    state: ClusterState,
    problem: EpochProblem,
    assignment: Assignment,
    predictions: Predictions,
    signal: dict[str, asr.TenantAssurance],
    solver: SolverInfo,
    status: str,
) -> Draft:
    """The :class:`Decision` of ``assignment`` (a plan for ``problem`` on ``state``), as a
    :class:`Draft`.

    The steps, in order (each a function below): who stops and why (:func:`_preemptions`);
    which GPUs each shrinking elastic job keeps (:func:`_shrinks`); the exclusive starts on the
    GPUs left free, largest gangs first (:func:`_place_starts`); the resizes, growth on the GPUs
    still idle after every start (:func:`_resizes`); the MPS guests on their hosts' GPUs
    (:func:`_place_guests`); each tenant's use after all that (:func:`_final_use`) and the loans
    that cover it, with a note in ``solver.notes`` (which this appends to) for every use above
    quota no loan covers; the jobs left queued, most valuable first (:func:`_queue`); and their
    explanations (:func:`_explain`), whose codes are the queue reasons. ``predictions`` are
    copied into the decision rounded, ``signal`` gives the assurance figures and next state.
    """
    preempt = _preemptions(state, problem, assignment)
    stopped = {x.job for x in preempt}
    kept_alloc, released = _shrinks(state, problem, assignment)
    placer = NodePool.of(state, stopped, frozenset(released), kept_alloc)
    starts, failed = _place_starts(problem, assignment, placer)
    if failed:
        raise Unplaced(failed)
    resizes = _resizes(state, problem, assignment, placer, kept_alloc)
    guests, no_room = _place_guests(state, problem, assignment, stopped, placer)
    if no_room:
        raise Unplaced([], no_room)
    starts += guests
    started = {s.job for s in starts}

    use = _final_use(state, starts, stopped, resizes)
    loans, uncovered = derive_loans(state, use, signal, _kept_over(problem, assignment))
    for (ten, tname), n in sorted(uncovered.items()):
        solver.notes.append(over_quota_note(ten, tname, n))

    queue, kind_of = _queue(state, problem, started)
    assurance, assurance_state = asr.figures(state, signal, sorted(started))
    d = Decision(
        now=state.snapshot.now,
        status=status,
        solver=solver,
        start=sorted(starts, key=lambda s: s.job),
        preempt=preempt,
        resize=resizes,
        queue=queue,
        loans=loans,
        kept_over_quota=kept_over_quota(uncovered),
        assurance=assurance,
        assurance_state=assurance_state,
    )

    def complete() -> None:
        explanations = _explain(state, problem, starts, preempt, resizes, use, loans, queue, kind_of, signal)
        d.queue_reasons = queue_reasons(explanations, queue)
        d.explanations = explanations
        d.predictions = _predictions(predictions)

    return Draft(d, complete)


def _preemptions(state: ClusterState, p: EpochProblem, assignment: Assignment) -> list[Preempt]:
    """Every job the decision stops, in this order: the jobs on unavailable nodes
    (``p.forced``), the MPS guests evicted for their host's assurance (``p.evicted``), then the
    running jobs the assignment preempts, by index: a job on loan is reclaimed, an MPS guest
    stopped for interference, any other stopped for priority."""
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
    return preempt


def _shrinks(
    state: ClusterState, p: EpochProblem, assignment: Assignment
) -> tuple[dict[str, list[GpuRef]], set[GpuKey]]:
    """Per shrinking elastic job, the GPUs it keeps (those on the nodes where it holds most,
    sorted by node and GPU), and the GPUs all shrinks give up, free for the starts."""
    kept_alloc: dict[str, list[GpuRef]] = {}
    released: set[GpuKey] = set()
    for r, d in sorted(assignment.resize.items()):
        run = p.running[r]
        alloc = state.job(run.job).allocation
        assert alloc is not None and r not in assignment.preempt
        if d < 0:
            keep = shrink_keeps(alloc, run.gpus + d * run.step)
            kept_alloc[run.job] = keep
            released.update(ref.key() for ref in alloc if ref not in keep)
    return kept_alloc, released


class Unplaced(Exception):
    """Starts the nodes could not hold (the model's node rows are a relaxation where shapes need
    CPUs, memory, topology, shares or pieces that are not powers of two): (class, type, on_loan)
    of each, one per member. The epoch takes them out of the plan and decodes again."""

    def __init__(self, failed: list[tuple[int, int, bool]], guests: list[int] | None = None) -> None:
        super().__init__(f"{len(failed) + len(guests or [])} start(s) the free nodes do not hold")
        self.failed = failed
        self.guests = guests or []
        """Pending classes of MPS guests whose host's node lacks their CPU or host memory."""


def _place_starts(
    p: EpochProblem, assignment: Assignment, placer: NodePool
) -> tuple[list[Start], list[tuple[int, int, bool]]]:
    """The exclusive starts on concrete GPUs, and the (class, type, on_loan) of each start the
    free nodes could not hold. Each class's starts per (type, loan) go to its members in value
    order; then every start is placed by ``placer``, which takes the GPUs it gives: required
    topology first, then the largest piece, the largest job and the job id first (largest
    first is what makes the chunk rows exact, :mod:`optsched.engine.chunks`)."""
    plan: list[tuple[int, int, int, str, int, int, bool, list[GpuRef] | None]] = []
    for c in sorted(assignment.starts):
        cls = p.pending[c]
        k = 0
        given: dict[int, list[list[GpuRef] | None]] = {}
        for (ti, loan), n in sorted(assignment.starts[c].items()):
            sh = cls.shape_on(ti)
            first = 0 if sh.level >= 0 and sh.required and sh.nodes > 1 else 1
            stack = given.setdefault(ti, list(assignment.placements.get((c, ti), [])))
            for jid in cls.jobs[k : k + n]:
                refs = stack.pop(0) if stack else None
                plan.append((0 if refs is not None else 1, first, -sh.largest, jid, c, ti, loan, refs))
            k += n
    starts: list[Start] = []
    failed: list[tuple[int, int, bool]] = []
    # the placement step's GPUs first (:func:`~optsched.engine.backends.greedy.place_plan`),
    # then, where a type needs no node rows, the placer's
    for _, _, _, jid, c, ti, loan, refs in sorted(plan, key=lambda x: x[:4]):
        shape = p.pending[c].shape_on(ti)
        if refs is not None:
            placer.take(refs, shape)
            alloc: list[GpuRef] | None = refs
        else:
            alloc = placer.place(p.types[ti], shape)
        if alloc is None:
            failed.append((c, ti, loan))
            continue
        starts.append(Start(job=jid, allocation=alloc, on_loan=loan))
    return starts, failed


def _resizes(
    state: ClusterState,
    p: EpochProblem,
    assignment: Assignment,
    placer: NodePool,
    kept_alloc: dict[str, list[GpuRef]],
) -> list[Resize]:
    """The resizes, by job id. A growing job takes the GPUs ``placer`` still has (every start
    placed), on its own nodes first, then wherever they are; a shrinking one keeps
    ``kept_alloc`` (:func:`_shrinks`), for a reclaim when it runs on loan, else for a start."""
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
                extra += placer.take_any(tname, need - len(extra))
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
    return resizes


def _place_guests(
    state: ClusterState, p: EpochProblem, assignment: Assignment, stopped: set[str], placer: NodePool
) -> tuple[list[Start], list[int]]:
    """The MPS guest starts, by job id: each on the first GPUs of its host's allocation that
    hold no guest (a running guest the decision stops frees its GPUs), as many as its gang,
    its CPU and host memory charged on its host's nodes (``placer``, after the exclusive starts
    and resizes took theirs: a guest shares its host's GPUs, not the node's CPU and memory);
    and the pending classes of the guests whose node cannot hold them. Raises
    ``AssertionError`` for a guest placed on a host the decision stops."""
    taken: set[GpuKey] = set(
        k for k, ids in state.gpu_holders.items() if len(ids) > 1 and ids[1] not in stopped
    )
    guests: list[Start] = []
    no_room: list[int] = []
    for j in sorted(assignment.guests, key=lambda j: p.pending[j].job):
        host = p.running[assignment.guests[j]]
        if host.job in stopped:
            raise AssertionError(f"guest {p.pending[j].job} placed on stopped host {host.job}")
        hjob = state.job(host.job)
        assert hjob.allocation is not None
        shared = [r for r in hjob.allocation if r.key() not in taken][: p.pending[j].gpus]
        taken.update(r.key() for r in shared)
        alloc = [GpuRef(node=r.node, gpu=r.gpu) for r in shared]
        shape = p.pending[j].shape_on(host.type)
        if (shape.cpu_milli or shape.memory_mib) and not placer.charge_guest(alloc, shape):
            no_room.append(j)
            continue
        guests.append(Start(job=p.pending[j].job, allocation=alloc, on_loan=False, colocated_with=[host.job]))
    return guests, no_room


def _final_use(
    state: ClusterState, starts: list[Start], stopped: set[str], resizes: list[Resize]
) -> dict[tuple[str, str], int]:
    """Per (tenant, type): the GPUs its jobs hold after the decision (the running jobs it keeps,
    at their new size, and its exclusive starts; MPS guests use no quota)."""
    new_size = {rz.job: rz.to_gpus for rz in resizes}
    use: dict[tuple[str, str], int] = defaultdict(int)
    for job in state.running():
        if job.id in stopped or job.id in state.host_of:
            continue
        use[(job.tenant, state.job_type(job))] += new_size.get(job.id, job.gpus)
    for s in starts:
        if not s.colocated_with:
            use[(state.job(s.job).tenant, state.node_type(s.allocation[0].node))] += len(s.allocation)
    return use


def _kept_over(p: EpochProblem, assignment: Assignment) -> dict[tuple[str, str], int]:
    """Per (tenant, type) with any: the use above quota the assignment keeps uncovered
    (:meth:`~optsched.engine.problem.Assignment.kept_over`), what
    :func:`~optsched.engine.ledger.derive_loans` may leave without a lender."""
    return {
        (p.tenants[i], p.types[t]): n
        for i, row in enumerate(assignment.kept_over(p))
        for t, n in enumerate(row)
        if n > 0
    }


def _queue(state: ClusterState, p: EpochProblem, started: set[str]) -> tuple[list[str], list[Kind]]:
    """The pending jobs the decision does not start, most valuable first (then oldest, then
    id), and the :data:`~optsched.engine.explain.Kind` of each, all its explanation depends on."""
    pending = [j for j in state.pending() if j.id not in started]
    pending.sort(key=lambda j: (-p.density.get(j.id, 0.0), j.submit_s, j.id))
    return [job.id for job in pending], [queue_kind(state, job) for job in pending]


def _explain(
    state: ClusterState,
    p: EpochProblem,
    starts: list[Start],
    preempt: list[Preempt],
    resizes: list[Resize],
    use: dict[tuple[str, str], int],
    loans: list[Loan],
    queue: list[str],
    kind_of: list[Kind],
    signal: dict[str, asr.TenantAssurance],
) -> dict[str, Explanation]:
    """The explanation stage on the final decision (:func:`optsched.engine.explain.explain`):
    what really binds each queued job after its preemptions and starts, computed once per kind
    so a reason and its explanation agree, jobs listed by the model's value; then the
    best-effort jobs the problem holds back for a cap-starved tenant get binding
    ``preemption_cap``."""
    density = p.density
    explanations = explain(
        state, starts, preempt, use, loans, queue, kind_of, signal, resizes,
        rank=lambda j: (-density.get(j, 0.0), j), evicted=p.evicted,
    )
    if p.held_back:
        explain_held_back(state, p.held_back, explanations, queue)
    return explanations


def _predictions(predictions: Predictions) -> dict[str, JobPrediction]:
    """Each job's runtime and memory prediction as the decision reports it: rounded to three
    decimals, with the source of each."""
    return {
        jid: JobPrediction(
            runtime_s=round(e.runtime_s, 3),
            memory_gib=round(e.memory_gib, 3),
            source=f"runtime:{e.runtime_source},memory:{e.memory_source}",
        )
        for jid, e in sorted(predictions.jobs.items())
    }

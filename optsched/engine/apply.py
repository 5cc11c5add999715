"""Apply a decision to the snapshot it was made for, exactly as an embedding scheduler would.

:func:`apply_decision` is the host's side of the epoch loop
(``snapshot -> solve_epoch -> apply_decision -> solve_epoch -> ...``) with nothing else
happening in between: no job arrives, none completes, no node changes. Hosts use it as the
reference of what a decision means; tests use it to replay epochs without a simulator.

What it does, in order:

1. **Preemptions**: every job in ``decision.preempt`` becomes pending again. It keeps its
   ``id``, ``submit_s`` (its queueing delay counts from its first submission, as the
   assurance signal expects) and everything it was submitted with; ``allocation``,
   ``start_s``, ``on_loan``, ``colocated`` and ``guest_of`` are cleared. Its
   ``restart_cost_s`` is reset to 0: the work it lost was paid at this preemption (the
   decision's ``lost_s``), and a pending job has no running work to lose. A host that charges
   a restart overhead adds it to the job's work, not to this field.
2. **Starts**: every job in ``decision.start`` becomes running on the decision's
   ``allocation`` with ``start_s = now`` and the decision's ``on_loan``. A start with
   ``colocated_with`` is an MPS guest: it gets ``colocated: true`` and ``guest_of`` its host,
   and the host gets ``colocated: true``. ``restart_cost_s`` is kept as the pending job had it.
   An elastic job's ``gpus`` becomes the size it starts on (``len(allocation)``).
2b. **Resizes**: every job in ``decision.resize`` keeps running on the resize's ``allocation``;
   its ``gpus`` becomes ``to_gpus``; ``start_s``, ``on_loan`` and the rest are kept (its progress
   is kept; the resize overhead is the host's to charge).
3. **Sharing flags**: a running job whose partner left (its host or guest was preempted)
   runs alone again: ``colocated`` becomes false; a guest whose host left keeps its GPUs, as
   the simulator does, and is marked ``on_loan`` when its tenant's own use of that GPU type
   is then above quota (so it can be reclaimed).
4. **Assurance**: the decision's ``assurance_state`` becomes the snapshot's (fed back
   unchanged, as the spec asks).
5. **Time**: ``now`` advances by ``advance_s`` (default: the snapshot's ``epoch_s``, 60 s when
   the snapshot does not say). Running jobs keep running; nothing arrives or completes.
6. **Pool**: GPUs the decision's ``pool`` lends join ``workflows.pool`` (empty, ``lent_by`` the
   lender, ``lent_since_s = now``) and returned ones leave it; workflow sessions are unchanged.

Loans are not stored in a snapshot: they follow from ``on_loan`` and the quotas, and the next
decision derives them again.

The function is pure: the input snapshot and decision are not modified.
"""

from __future__ import annotations

import copy

from optsched.schema.decision import Decision
from optsched.schema.snapshot import Device, GpuRef, Job, Snapshot

__all__ = ["apply_decision"]


def apply_decision(snapshot: Snapshot, decision: Decision, *, advance_s: float | None = None) -> Snapshot:
    """The snapshot of the next epoch after a host applied ``decision`` to ``snapshot``.

    Parameters
    ----------
    snapshot:
        The snapshot the decision was made for.
    decision:
        A decision for ``snapshot`` (as :func:`optsched.solve_epoch` returns it).
    advance_s:
        How far the clock moves; default ``snapshot.epoch_s``. Must be ``>= 0``.

    Returns
    -------
    Snapshot
        A new snapshot; ``snapshot`` and ``decision`` are left untouched.

    Raises
    ------
    ValueError
        When the decision does not fit the snapshot: another ``now``, a started job that is
        not pending, a preempted or resized job that is not running, a job named twice, an
        unknown host, or a negative ``advance_s``.
    """
    step = snapshot.epoch_s if advance_s is None else float(advance_s)
    if step < 0:
        raise ValueError(f"advance_s must be >= 0, got {step}")
    if decision.now != snapshot.now:
        raise ValueError(f"decision is for now={decision.now}, the snapshot is at now={snapshot.now}")

    jobs = [j.model_copy(deep=True) for j in snapshot.jobs]
    by_id = {j.id: j for j in jobs}
    now = snapshot.now
    seen: set[str] = set()

    # 1. preemptions --------------------------------------------------------------------
    for p in decision.preempt:
        job = by_id.get(p.job)
        if job is None or job.state != "running":
            raise ValueError(f"preempt: '{p.job}' is not a running job of the snapshot")
        if p.job in seen:
            raise ValueError(f"preempt: '{p.job}' is named twice")
        seen.add(p.job)
        job.state = "pending"
        job.allocation = None
        job.start_s = None
        job.on_loan = False
        job.colocated = False
        job.guest_of = None
        job.restart_cost_s = 0.0

    # 2. starts -------------------------------------------------------------------------
    for s in decision.start:
        job = by_id.get(s.job)
        if job is None or job.state != "pending" or s.job in seen:
            raise ValueError(f"start: '{s.job}' is not a pending job of the snapshot")
        seen.add(s.job)
        job.state = "running"
        job.allocation = [GpuRef(node=r.node, gpu=r.gpu) for r in s.allocation]
        job.start_s = now
        job.on_loan = bool(s.on_loan)
        if not s.colocated_with:
            job.gpus = len(s.allocation)
        if s.colocated_with:
            host = by_id.get(s.colocated_with[0])
            if host is None or host.state != "running":
                raise ValueError(f"start: host '{s.colocated_with[0]}' of '{s.job}' is not running")
            job.colocated = True
            job.guest_of = host.id
            host.colocated = True
        else:
            job.colocated = False
            job.guest_of = None

    # 2b. resizes -----------------------------------------------------------------------
    for rz in decision.resize:
        job = by_id.get(rz.job)
        if job is None or job.state != "running" or rz.job in seen:
            raise ValueError(f"resize: '{rz.job}' is not a running job of the snapshot kept running")
        seen.add(rz.job)
        job.allocation = [GpuRef(node=r.node, gpu=r.gpu) for r in rz.allocation]
        job.gpus = len(rz.allocation)

    # 3. partners that left -------------------------------------------------------------
    _fix_sharing(snapshot, jobs)

    update: dict[str, object] = {
        "now": now + step,
        "jobs": jobs,
        "assurance_state": copy.deepcopy(decision.assurance_state) or None,
    }
    # 6. the workflow pool's size ---------------------------------------------------------
    wf = snapshot.workflows
    if decision.pool is not None and wf is not None:
        back = {r.gpu.key() for r in decision.pool.returned}
        pool = [d.model_copy(deep=True) for d in wf.pool if d.key() not in back]
        pool += [
            Device(node=x.gpu.node, gpu=x.gpu.gpu, busy_until_s=now, lent_by=x.lender, lent_since_s=now)
            for x in decision.pool.lend
        ]
        update["workflows"] = wf.model_copy(update={"pool": pool})
    return snapshot.model_copy(update=update, deep=True)


def _fix_sharing(snapshot: Snapshot, jobs: list[Job]) -> None:
    """Clear ``colocated`` / ``guest_of`` of running jobs that share no GPU any more."""
    node_type = {n.id: n.gpu_type for n in snapshot.nodes}
    holders: dict[tuple[str, int], list[Job]] = {}
    for job in jobs:
        if job.state == "running" and job.allocation is not None:
            for r in job.allocation:
                holders.setdefault(r.key(), []).append(job)
    own_use: dict[tuple[str, str], int] = {}
    for job in jobs:
        if job.state == "running" and job.allocation and not job.on_loan and job.guest_of is None:
            key = (job.tenant, node_type[job.allocation[0].node])
            own_use[key] = own_use.get(key, 0) + job.gpus
    quota = {(t.id, g): q for t in snapshot.tenants for g, q in t.quota.items()}
    for job in jobs:
        if job.state != "running" or job.allocation is None or not job.colocated:
            continue
        if any(len(holders[r.key()]) > 1 for r in job.allocation):
            continue
        job.colocated = False
        if job.guest_of is not None:  # promoted: its host left, it keeps the GPUs
            job.guest_of = None
            key = (job.tenant, node_type[job.allocation[0].node])
            job.on_loan = own_use.get(key, 0) + job.gpus > quota.get(key, 0)
            if not job.on_loan:
                own_use[key] = own_use.get(key, 0) + job.gpus

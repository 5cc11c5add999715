"""The shared scheduling rules on ids, written once: a priority class's weight, a running
job's minimum runtime and protection from priority preemption, cap-starved tenants and the
types they starve, and the best-effort victim slack per type. The candidate builder, decoding,
the event path and the partition merge read these; the checker keeps its own copies.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from optsched.engine.state import ClusterState
from optsched.schema.snapshot import Job, Snapshot, Tenant

__all__ = [
    "CapStarved",
    "cap_starved",
    "class_weight",
    "min_runtime_s",
    "protected",
    "starved_types",
    "victim_slack",
]


def class_weight(snap: Snapshot, tenant: Tenant, job: Job) -> float:
    """Weight of the job's priority class: its tenant's table, else the snapshot's, else 1."""
    name = job.priority_class
    if name is None:
        return 1.0
    for table in (tenant.priority_classes, snap.priority_classes):
        if table is not None and name in table:
            return table[name]
    return 1.0


def min_runtime_s(tenant: Tenant, job: Job) -> float:
    """Seconds a running job must have run before a priority preemption may stop it."""
    if job.min_runtime_s is not None:
        return job.min_runtime_s
    return tenant.preemption.min_runtime_s if tenant.preemption is not None else 0.0


def protected(snap: Snapshot, tenant: Tenant, job: Job) -> bool:
    """Whether a running job is too young to be preempted for priority (not on loan)."""
    if job.on_loan or job.start_s is None:
        return False
    return snap.now - job.start_s < min_runtime_s(tenant, job)


@dataclass(frozen=True)
class CapStarved:
    """Why a tenant is cap-starved (:func:`cap_starved`), in GPUs."""

    wanted: int
    """``D``: GPUs its pending guaranteed jobs of at most ``cap`` GPUs ask for."""
    idle: int
    """``I``: its idle quota, summed over types."""
    movable: int
    """``R``: GPUs of its running jobs a priority preemption may stop."""
    cap: int
    """``c``: its ``max_gpus_per_epoch``."""


def cap_starved(state: ClusterState) -> dict[str, CapStarved]:
    """Tenants whose best-effort (non-guaranteed) pending jobs are held this epoch because their
    preemption cap rations what their guaranteed jobs need.

    A tenant with ``preemption.max_gpus_per_epoch = c`` is *cap-starved* when
    ``min(R, D - I) > c``: ``D`` is the GPUs its pending guaranteed jobs of at most ``c`` GPUs
    ask for (an elastic job at its smallest size; a larger gang is left out, since one epoch's
    preemptions cannot make room for it alone and holding for it could idle GPUs for good),
    ``I`` its idle quota summed over types (quota less the GPUs of its
    kept running jobs: MPS guests and jobs on unavailable nodes excluded), and ``R`` the GPUs of
    its kept running jobs a priority preemption may stop (preemptible, not guaranteed, not on
    loan, past their minimum runtime). Its guaranteed jobs then want more of its own GPUs than
    one decision may take from it, so preemptions go on over the next epochs; a best-effort job
    it started now would be among their victims (KAI #136: started, then preempted). Such jobs
    stay queued with reason ``preemption_cap`` until ``min(R, D - I) <= c``; invariant 8 exempts
    them.
    """
    snap = state.snapshot
    capped = {
        t.id: t.preemption.max_gpus_per_epoch
        for t in snap.tenants
        if t.preemption is not None and t.preemption.max_gpus_per_epoch is not None
    }
    if not capped:
        return {}
    use: dict[tuple[str, str], int] = defaultdict(int)
    movable: dict[str, int] = defaultdict(int)
    for job in state.running():
        if job.tenant not in capped or job.id in state.host_of:
            continue
        assert job.allocation is not None
        if job.id in state.on_lost_nodes:
            continue
        use[(job.tenant, state.job_type(job))] += job.gpus
        tenant = snap.tenants[state.tenant_index[job.tenant]]
        stoppable = job.is_preemptible and job.qos != "guaranteed" and not job.on_loan
        if stoppable and not protected(snap, tenant, job):
            movable[job.tenant] += job.gpus
    wanted: dict[str, int] = defaultdict(int)
    for job in state.pending():
        if job.tenant in capped and job.qos == "guaranteed":
            g = job.size_range[0] if job.is_elastic else job.gpus
            if g <= capped[job.tenant]:
                wanted[job.tenant] += g
    out: dict[str, CapStarved] = {}
    for ten, c in capped.items():
        idle = sum(max(0, state.quota(ten, t) - use[(ten, t)]) for t in state.type_names)
        if min(movable[ten], wanted[ten] - idle) > c:
            out[ten] = CapStarved(wanted[ten], idle, movable[ten], c)
    return out


def victim_slack(state: ClusterState) -> dict[str, int]:
    """Per GPU type, the largest gang of a best-effort job running not on loan (no MPS guest, on
    an available node) less one.

    Best-effort jobs inside quota are stopped for ``priority`` only for guaranteed starts inside
    quota, and free at most those starts' GPUs plus this slack (a gang stops whole, also for a
    smaller start); with no such start on a type they free nothing there. The model, the
    greedy plan and the partition merge read this one rule; the checker has its own copy."""
    out = {t: 0 for t in state.type_names}
    for job in state.running():
        if job.qos == "guaranteed" or job.on_loan or job.id in state.host_of or job.allocation is None:
            continue
        if any(not state.node_available(r.node) for r in job.allocation):
            continue
        t = state.job_type(job)
        out[t] = max(out[t], job.gpus - 1)
    return out


def starved_types(state: ClusterState, starved: Mapping[str, object]) -> dict[str, list[str]]:
    """GPU type -> the cap-starved tenants (:func:`cap_starved`) with quota on it, in snapshot
    order. Their guaranteed jobs take GPUs of these types over the next epochs, from anyone's
    best-effort jobs, so no best-effort job starts on them meanwhile."""
    out: dict[str, list[str]] = {}
    for ten in state.tenant_ids:
        if ten in starved:
            for t in state.type_names:
                if state.quota(ten, t) > 0:
                    out.setdefault(t, []).append(ten)
    return out

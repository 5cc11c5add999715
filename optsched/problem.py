"""EpochProblem: everything a backend may read for one epoch, solver-neutral and index-based.

``build_problem`` turns a validated :class:`~optsched.state.ClusterState`, the predictions and
the assurance signal into scored, pruned candidates:

* **pending items**: one per pending job kept after pruning, with its allowed GPU types that
  have capacity, and its value (see :func:`job_value`);
* **running items**: kept running jobs, with the cost of preempting those that may be stopped;
* **guest candidates**: (pending shareable job, running shareable host) pairs on MPS types
  whose predicted memories fit and whose predicted host slowdown is within the host tenant's
  assurance-driven limit.

There is deliberately no variable per (job, GPU) or per (job, node): the model decides counts
per GPU type, and :mod:`optsched.decide` turns them into concrete GPU indices afterwards.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from optsched import assurance as asr
from optsched.predict.base import Predictions, Predictor
from optsched.state import ClusterState

MAX_PENDING = 600
"""At most this many pending jobs enter the model; the rest stay queued (pruning)."""
GPU_BUDGET_FACTOR = 3.0
"""Keep pending jobs until their GPUs reach this many times the GPUs that could be freed."""
MAX_GUEST_JOBS = 64
MAX_HOSTS_PER_GUEST = 6
MAX_HOSTS_SCANNED = 48
"""Per guest job, at most this many hosts (most memory room first) get a pair prediction."""
MIN_GUEST_SPEED = 0.5
LOAN_PENALTY = 0.01
"""Per GPU started on loan, as a fraction of the job's value: prefer own quota."""


@dataclass(frozen=True)
class PendingItem:
    job: str
    tenant: int
    gpus: int
    types: tuple[int, ...]
    own_types: tuple[int, ...]
    """Types on which the job may start inside its tenant's own quota."""
    values: tuple[float, ...]
    """Value of starting on each type of ``types``."""
    density: float
    guaranteed: bool
    reclaim: bool
    shareable: bool
    memory_gib: float
    runtime_s: float


@dataclass(frozen=True)
class RunningItem:
    job: str
    tenant: int
    type: int
    gpus: int
    on_loan: bool
    guest: bool
    candidate: bool
    """May be preempted by the model."""
    cost: float
    lost_s: float
    free_slots: int
    """GPUs a new MPS guest may use: all of the job's GPUs if it can host and has no guest yet,
    else 0 (sharing forms pairs: one guest per host)."""
    host: str | None = None
    """For a running MPS guest: its host job (stopping the host stops the guest too)."""


@dataclass(frozen=True)
class GuestCandidate:
    pending: int
    running: int
    value: float
    host_speed: float
    guest_speed: float


@dataclass(frozen=True)
class EpochProblem:
    """The solver-neutral problem of one epoch (indices only, no I/O)."""

    types: tuple[str, ...]
    tenants: tuple[str, ...]
    capacity: tuple[int, ...]
    quota: tuple[tuple[int, ...], ...]
    borrow_limit: tuple[tuple[int | None, ...], ...]
    lend_limit: tuple[tuple[int | None, ...], ...]
    pending: tuple[PendingItem, ...]
    running: tuple[RunningItem, ...]
    guests: tuple[GuestCandidate, ...]
    forced: tuple[str, ...]
    """Running jobs that must stop (their node is unavailable)."""
    evicted: tuple[str, ...]
    """Running MPS guests stopped because their host's tenant is at risk (use (c))."""
    density: dict[str, float]
    """Value per GPU of every pending job (queue order)."""
    pruned: tuple[str, ...]
    """Pending jobs left out of the model (stay queued)."""
    reclaim_bonus: float
    weights: tuple[float, ...]
    notes: tuple[str, ...] = field(default=())


    # derived sums of the kept running jobs --------------------------------------------
    def used(self) -> list[int]:
        """Host GPUs held per type by kept running jobs (before preemptions)."""
        out = [0] * len(self.types)
        for r in self.running:
            if not r.guest:
                out[r.type] += r.gpus
        return out

    def held(self, own_only: bool) -> list[list[int]]:
        """Host GPUs per [tenant][type] held by running jobs (own quota only if asked)."""
        out = [[0] * len(self.types) for _ in self.tenants]
        for r in self.running:
            if r.guest or (own_only and r.on_loan):
                continue
            out[r.tenant][r.type] += r.gpus
        return out


@dataclass
class Assignment:
    """A solution by index: which pending items start where, guests, preemptions."""

    starts: dict[int, tuple[int, bool]] = field(default_factory=dict)
    """pending index -> (type index, on_loan)."""
    guests: dict[int, int] = field(default_factory=dict)
    """pending index -> running index of the host."""
    preempt: set[int] = field(default_factory=set)
    """running indices to stop (forced ones are not listed: they always stop)."""

    def objective(self, problem: EpochProblem) -> float:
        """The objective value of this assignment (same formula as the models)."""
        val = 0.0
        for p, (t, loan) in self.starts.items():
            item = problem.pending[p]
            v = item.values[item.types.index(t)]
            val += v - (LOAN_PENALTY * v if loan else 0.0)
        by_pair = {(g.pending, g.running): g.value for g in problem.guests}
        for p, r in self.guests.items():
            val += by_pair[(p, r)]
        for r in self.preempt:
            val -= problem.running[r].cost
        return val


def _shortness(gpu_seconds: float) -> float:
    return 3.0 / (1.0 + math.log1p(max(gpu_seconds, 0.0) / 600.0))


def job_value(
    weight: float, gpus: int, guaranteed: bool, wait_s: float, max_delay_s: float, runtime_s: float
) -> float:
    r"""Value of starting a job now.

    .. math:: v_j = W_i\, g_j^{\,\gamma}\, m_j\, (1 + u_j)\, (1 + s_j)

    with :math:`W_i` the assurance-scaled tenant weight, :math:`g_j` the gang size
    (:math:`\gamma` = ``GPU_EXPONENT``),
    (1 once the job has waited ``STARVE_AFTER`` times :math:`D_i`),
    :math:`m_j` 2 for guaranteed and 1 for best-effort jobs, the urgency
    :math:`u_j = \min(4, w_j / D_i)` (best-effort: :math:`\min(6, w_j / 2D_i)`, so a waiting
    best-effort job ages past fresh ones instead of starving), and the
    shortness :math:`s_j = 3 / (1 + \ln(1 + g_j r_j / 600))` on predicted GPU-seconds.
    """
    if guaranteed:
        urg = min(4.0, wait_s / max(max_delay_s, 1.0))
    else:
        urg = min(6.0, wait_s / max(2.0 * max_delay_s, 1.0))
    mult = GUARANTEED_MULT if guaranteed else 1.0
    # a job that has waited STARVE_AFTER times its target is worth as much per GPU as any
    exponent = 1.0 if wait_s >= STARVE_AFTER * max(max_delay_s, 1.0) else GPU_EXPONENT
    return weight * gpus**exponent * mult * (1.0 + urg) * (1.0 + _shortness(gpus * runtime_s))


def preemption_cost(weight: float, gpus: int, guaranteed: bool, lost_s: float, remaining_s: float) -> float:
    r"""Cost of stopping a running job: at least what a best-effort job of the same size is
    worth at its highest urgency, more when restarting loses work (:math:`\ell_r`) and when
    it is close to done (remaining :math:`\rho_r`), so best-effort jobs never churn each other
    out; urgent guaranteed work and reclaim still pay for it.

    .. math:: c_r = 7\, W_i\, g_r\, m_r\, (1 + \ell_r / 1800)\, (1 + 600 / (600 + \rho_r))
    """
    mult = GUARANTEED_MULT if guaranteed else 1.0
    return 7.0 * weight * gpus * mult * (1.0 + lost_s / 1800.0) * (1.0 + 600.0 / (600.0 + remaining_s))


STARVE_AFTER = 3.0
"""After this many times its tenant's max delay, a job's value grows linearly with its gang
size, so large best-effort gangs stop starving behind streams of small jobs. Full matched
Venus surrogate, seed 0 (HiGHS 0.2 s): average queueing 284 s without it, 290 / 255 / 261 /
257 s with 1 / 2 / 3 / 5; average JCT 11,095 s without, 11,080 s with 3. Over seeds 0-2 the
mean moved only from 284 to 280 s (seed 2 got worse), so this is a small effect."""
GUARANTEED_MULT = 2.0
"""Value of a guaranteed job relative to a best-effort one of the same size and wait."""
GPU_EXPONENT = 0.5
"""How a job's value grows with its gang size (1: per GPU, 0: per job). 0.5 measured best:
on the first 8,000 jobs of the imbalanced Venus surrogate (seed 0, HiGHS, 0.2 s per epoch)
average queueing 859 s -> 700 s and JCT 11,614 s -> 11,403 s against 1.0, since queueing
delay counts jobs while utilization counts GPUs."""
def build_problem(
    state: ClusterState,
    predictions: Predictions,
    predictor: Predictor,
    signal: dict[str, asr.TenantAssurance],
) -> EpochProblem:
    """Score and prune the candidates of one epoch."""
    snap = state.snapshot
    types = state.type_names
    tindex = {t: k for k, t in enumerate(types)}
    cap_map = state.capacity()
    capacity = tuple(cap_map[t] for t in types)
    speeds = [snap.gpu_types[t].speed for t in types]
    max_speed = max(speeds)
    ten_ids = state.tenant_ids
    quota = tuple(tuple(state.quota(i, t) for t in types) for i in ten_ids)
    borrow = tuple(tuple(state.borrow_limit(i, t) for t in types) for i in ten_ids)
    lend = tuple(tuple(state.lend_limit(i, t) for t in types) for i in ten_ids)
    weights = tuple(asr.tenant_weight(snap.tenants[k].weight, signal[i].value) for k, i in enumerate(ten_ids))

    # running jobs -------------------------------------------------------------------
    running: list[RunningItem] = []
    forced: list[str] = []
    evicted: list[str] = []
    guest_on: dict[str, int] = {}  # host id -> GPUs already shared
    for guest_id, host_id in state.host_of.items():
        guest_on[host_id] = guest_on.get(host_id, 0) + state.job(guest_id).gpus
    max_cost = 0.0
    for job in state.running():
        assert job.allocation is not None
        if any(not state.node_available(r.node) for r in job.allocation):
            forced.append(job.id)
            continue
        if job.id in state.host_of:
            host = state.job(state.host_of[job.id])
            if asr.max_host_slowdown(signal[host.tenant].value) <= 0.0:
                evicted.append(job.id)
                continue
        k = state.tenant_index[job.tenant]
        t = tindex[state.job_type(job)]
        guest = job.id in state.host_of
        guaranteed = job.qos == "guaranteed"
        candidate = job.on_loan or guest or (job.is_preemptible and not guaranteed)
        est = predictions.jobs[job.id]
        elapsed = snap.now - (job.start_s or snap.now)
        remaining = max(0.0, est.runtime_s - elapsed)
        lost = job.restart_cost_s
        cost = preemption_cost(weights[k], job.gpus, guaranteed, lost, remaining)
        max_cost = max(max_cost, cost)
        slots = 0
        if not guest and job.is_shareable and snap.gpu_types[types[t]].mps:
            slots = 0 if guest_on.get(job.id, 0) else job.gpus  # MPS *pairs*: one guest a host
        running.append(
            RunningItem(
                job.id,
                k,
                t,
                job.gpus,
                job.on_loan,
                guest,
                candidate,
                cost,
                lost,
                slots,
                host=state.host_of.get(job.id),
            )
        )

    # pending jobs -------------------------------------------------------------------
    held_own = [[0] * len(types) for _ in ten_ids]  # own quota held by jobs that must stay
    for r in running:
        if not r.guest and not r.on_loan and not r.candidate:
            held_own[r.tenant][r.type] += r.gpus
    freeable = sum(capacity) - sum(r.gpus for r in running if not r.guest and not r.candidate)
    items: list[PendingItem] = []
    unplaceable: list[str] = []
    density: dict[str, float] = {}
    for job in state.pending():
        k = state.tenant_index[job.tenant]
        allowed = [tindex[t] for t in state.allowed_types(job) if capacity[tindex[t]] >= job.gpus]
        est = predictions.jobs[job.id]
        d, _ = asr.max_delay(state, job.tenant)
        guaranteed = job.qos == "guaranteed"
        base = job_value(weights[k], job.gpus, guaranteed, snap.now - job.submit_s, d, est.runtime_s)
        density[job.id] = base / job.gpus
        if not allowed:
            unplaceable.append(job.id)
            continue
        own_types = tuple(t for t in allowed if held_own[k][t] + job.gpus <= quota[k][t])
        reclaim = guaranteed and signal[job.tenant].reclaim and bool(own_types)
        values = tuple(base * (0.9 + 0.1 * speeds[t] / max_speed) for t in allowed)
        items.append(
            PendingItem(
                job=job.id,
                tenant=k,
                gpus=job.gpus,
                types=tuple(allowed),
                own_types=own_types,
                values=values,
                density=base / job.gpus,
                guaranteed=guaranteed,
                reclaim=reclaim,
                shareable=job.is_shareable,
                memory_gib=est.memory_gib,
                runtime_s=est.runtime_s,
            )
        )
    reclaim_bonus = 2.0 * max_cost + 1.0
    items.sort(key=lambda it: (not it.reclaim, -it.density, it.job))
    kept: list[PendingItem] = []
    budget = GPU_BUDGET_FACTOR * max(freeable, 1) + sum(r.free_slots for r in running)
    total = 0
    pruned: list[str] = []
    for it in items:  # reclaim items first, then by value density
        if len(kept) < MAX_PENDING and total < budget:
            if it.reclaim:
                it = PendingItem(**{**it.__dict__, "values": tuple(v + reclaim_bonus for v in it.values)})
            kept.append(it)
            total += it.gpus
        else:
            pruned.append(it.job)
    notes: list[str] = []
    if pruned:
        notes.append(f"pruned {len(pruned)} low-value pending jobs from the model")

    # guest candidates ---------------------------------------------------------------
    guests: list[GuestCandidate] = []
    # hosts that may take a guest, smallest memory first (most room), sharing allowed by (c)
    host_limit = {
        ri: asr.max_host_slowdown(signal[ten_ids[r.tenant]].value) for ri, r in enumerate(running)
    }
    hosts = sorted(
        ((ri, r) for ri, r in enumerate(running) if r.free_slots > 0 and host_limit[ri] > 0),
        key=lambda x: (predictions.jobs[x[1].job].memory_gib, x[1].job),
    )
    guest_jobs = [
        (pi, it)
        for pi, it in enumerate(kept)
        if it.shareable and any(snap.gpu_types[types[t]].mps for t in it.types)
    ][:MAX_GUEST_JOBS]
    for pi, it in guest_jobs:
        gjob = state.job(it.job)
        cands: list[GuestCandidate] = []
        scanned = 0
        for ri, r in hosts:
            if scanned >= MAX_HOSTS_SCANNED:
                break
            if r.type not in it.types or r.free_slots < it.gpus:
                continue
            mem_cap = snap.gpu_types[types[r.type]].memory_gib
            if it.memory_gib + predictions.jobs[r.job].memory_gib > mem_cap:
                continue
            scanned += 1
            hjob = state.job(r.job)
            pair = predictor.predict_pair(state, hjob, gjob)
            if 1.0 - pair.host_speed > host_limit[ri] or pair.guest_speed < MIN_GUEST_SPEED:
                continue
            v = it.values[it.types.index(r.type)]
            penalty = weights[r.tenant] * r.gpus * (1.0 - pair.host_speed) * 4.0
            value = v * pair.guest_speed - penalty
            if value > 0:
                cands.append(GuestCandidate(pi, ri, value, pair.host_speed, pair.guest_speed))
        cands.sort(key=lambda c: (-c.value, running[c.running].job))
        guests.extend(cands[:MAX_HOSTS_PER_GUEST])

    return EpochProblem(
        types=types,
        tenants=ten_ids,
        capacity=capacity,
        quota=quota,
        borrow_limit=borrow,
        lend_limit=lend,
        pending=tuple(kept),
        running=tuple(running),
        guests=tuple(guests),
        forced=tuple(forced),
        evicted=tuple(evicted),
        density=density,
        pruned=tuple(pruned + unplaceable),
        reclaim_bonus=reclaim_bonus,
        weights=weights,
        notes=tuple(notes),
    )

"""The decision of one epoch (format 1).

What every field means, and the invariants a decision holds, are in ``docs/snapshot-format.md``;
each field carries a description that becomes the JSON Schema of ``optsched schema decision``.

Fields optsched adds to format 1 (see "Added fields" in ``docs/snapshot-format.md``):

* ``Decision.queue_reasons``: why each queued job did not start (a :class:`QueueReason`).
* ``Decision.explanations``: for every queued and every preempted job, what blocks it or what it
  made room for, with the numbers (an :class:`Explanation`).
* ``SolverInfo.status_detail``, ``stage_seconds``, ``notes``, ``fallback_reason``.
* ``JobPrediction.source``: where a prediction came from.
* ``Unit.session`` and ``Unit.model`` in workflow plans.
* ``Decision.resize``: size changes of running elastic jobs (a :class:`Resize`).
* ``Decision.pool``: cluster GPUs lent to the workflow pool and returned (a :class:`PoolDecision`).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from optsched.schema.snapshot import GpuRef


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PreemptReason(StrEnum):
    """Why a running job is stopped."""

    RECLAIM = "reclaim"
    """It ran on borrowed capacity whose owner takes it back."""
    PRIORITY = "priority"
    """A job of higher value (same tenant, or a guaranteed job over best-effort) needs it."""
    INTERFERENCE = "interference"
    """It is an MPS guest whose slowdown on its host is no longer acceptable."""
    NODE_UNAVAILABLE = "node_unavailable"
    """Its node was drained or failed."""


class QueueReason(StrEnum):
    """Why a pending job stays in the queue this epoch."""

    NO_CAPACITY = "no_capacity"
    """Not enough free GPUs of any allowed type, even with loans."""
    QUOTA_AND_NO_LENDER = "quota_and_no_lender"
    """Over its tenant's quota and no tenant can lend idle quota."""
    BORROW_LIMIT = "borrow_limit"
    """Over quota and the tenant's ``borrow_limit`` is reached."""
    TYPE_UNAVAILABLE = "type_unavailable"
    """None of its allowed GPU types has an available node."""
    GANG_TOO_LARGE = "gang_too_large"
    """The gang is larger than all GPUs of every allowed type."""
    LOWER_PRIORITY = "lower_priority"
    """It could fit alone, but jobs of higher value took the capacity."""
    DEADLINE = "deadline"
    """The time budget ran out before the job was considered (fallback only)."""
    RESERVED = "reserved"
    """It would fit, but only on GPUs held for a reserved gang that starts before it would end."""
    PREEMPTION_CAP = "preemption_cap"
    """A best-effort job of a tenant whose guaranteed jobs wait on preemptions its
    ``max_gpus_per_epoch`` spreads over epochs: it would be one of their next victims."""
    GPU_MEMORY = "gpu_memory"
    """Its stated ``memory_gib`` per GPU exceeds the memory of every GPU type it allows: it can
    never start here."""
    GPUS_PER_NODE = "gpus_per_node"
    """No available node (or not enough of them) of any allowed type has as many GPUs as its
    shape puts on each node: it can never start here."""
    CPU = "cpu"
    """No available node of any allowed type has the CPUs it needs on each node (``cpu_milli``)."""
    HOST_MEMORY = "host_memory"
    """No available node of any allowed type has the host memory it needs on each node
    (``memory_mib``)."""
    TOPOLOGY = "topology"
    """No domain of its required topology level has enough nodes that could hold its pieces."""
    NODE_SHAPE = "node_shape"
    """Enough free GPUs of an allowed type and quota, but no set of free nodes holds its shape now
    (its GPUs per node, CPU, host memory or topology): fragmentation."""


Binding = Literal[
    "capacity",
    "priority",
    "quota",
    "borrow_limit",
    "lend_limit",
    "no_lender",
    "over_quota_kept",
    "gang_size",
    "type_unavailable",
    "not_chosen",
    "node_unavailable",
    "assurance",
    "host_preempted",
    "interference",
    "reservation",
    "preemption_cap",
    "gpu_memory",
    "gpus_per_node",
    "cpu",
    "host_memory",
    "topology",
]
"""The constraint an explanation names (see "Explanations" in ``docs/snapshot-format.md``)."""


class Resource(_Strict):
    """A number of GPUs of one type."""

    gpu_type: str = Field(description="The GPU type.")
    gpus: int = Field(
        ge=0, description="Number of GPUs: what a queued job asks for, what a preempted job held."
    )


class TypeFit(_Strict):
    """Why a queued job does not start on one of its allowed GPU types, with the numbers after
    the decision (all counts are GPUs of ``gpu_type``)."""

    gpu_type: str = Field(description="The allowed GPU type.")
    binding: Binding = Field(description="The first constraint that keeps the job off this type.")
    missing: int = Field(
        ge=0, description="GPUs missing on the binding constraint: how far the job is from fitting here."
    )
    capacity: int = Field(description="GPUs of the type on available nodes (workflow pool excluded).")
    free: int = Field(description="GPUs of the type free after the decision.")
    started: int = Field(
        description="GPUs of the type held by jobs this decision starts (MPS guests excluded)."
    )
    kept: int = Field(description="GPUs of the type held by running jobs that keep running.")
    quota: int = Field(description="The job's tenant's quota on the type.")
    use: int = Field(description="The tenant's use of the type after the decision (MPS guests excluded).")
    idle_quota: int = Field(
        description="The tenant's quota minus its use minus what it lends of the type (negative when "
        "it runs above quota)."
    )
    borrowed: int = Field(description="GPUs of the type the tenant receives through the decision's loans.")
    to_borrow: int = Field(
        description="GPUs the tenant would have to borrow on top of its loans to start the job here "
        "(gang minus idle quota minus loans received; 0 when its quota holds the job)."
    )
    lendable: int = Field(
        description="Idle quota the other tenants could still lend on the type after the decision, "
        "within their lend_limit."
    )
    idle_elsewhere: int = Field(
        description="Idle quota of the other tenants on the type after the decision, lend_limit ignored."
    )
    borrow_room: int | None = Field(
        default=None,
        description="The tenant's borrow_limit on the type minus the loans it receives; null: no limit.",
    )
    group: str | None = Field(
        default=None,
        description="The quota group whose borrow_limit or lend_limit binds (binding borrow_limit or "
        "lend_limit at a group level, added by optsched); null: the tenants' own limits bind, or "
        "no limit does.",
    )


class Explanation(_Strict):
    """What blocks a queued job, or what a preemption made room for, in numbers that hold for the
    decision it belongs to (added by optsched)."""

    code: str = Field(
        description="The queued job's `queue_reasons` value, the preempted job's `reason`, or the "
        "resized job's `reason`."
    )
    text: str = Field(description="The explanation in plain words.")
    binding: Binding = Field(
        description="The constraint that binds: for a queued job, on its best (closest to fitting) "
        "allowed type."
    )
    tenant: str = Field(description="The job's tenant.")
    resource: Resource | None = Field(
        default=None,
        description="Queued: the best type and the gang size; preempted: the type and GPUs it held.",
    )
    types: list[TypeFit] = Field(
        default_factory=list,
        description="Queued jobs: one entry per allowed GPU type, the best (closest to fitting) first.",
    )
    blocked_by: list[str] = Field(
        default_factory=list,
        description="Queued jobs: jobs started now that hold the GPUs (binding capacity/priority) or "
        "the tenant's quota (quota bindings) on the best type, most valuable first, at most 10; "
        "binding preemption_cap: the tenant's queued guaranteed jobs the hold is for.",
    )
    made_room_for: list[str] = Field(
        default_factory=list,
        description="Preempted jobs: the jobs started now on its GPUs (or, when none, the starts that "
        "use the quota it held), and in a partitioned epoch the job the coordination step stopped it "
        "for when that starts on other GPUs; shrunk jobs: the jobs started now on the GPUs it gave up.",
    )
    lender: str | None = Field(
        default=None,
        description="Reclaimed jobs: the tenant that takes its lent quota back (its lendable idle quota "
        "on the type is lower after the decision than before).",
    )
    host: str | None = Field(
        default=None, description="Preempted MPS guests: the job whose GPUs it shared."
    )
    expected_start_s: float | None = Field(
        default=None,
        description="Queued jobs: the planned start (absolute seconds, like `now`) of the look-ahead "
        "plan, as in the decision's `expected_start_s`; null when beyond the plan's horizon (added "
        "by optsched).",
    )
    reserved_for: str | None = Field(
        default=None,
        description="Queued jobs with binding `reservation`: the gang whose reservation holds the GPUs "
        "it would use (added by optsched).",
    )


class Reservation(_Strict):
    """GPUs held back now so that a queued gang can start at its planned time (EASY backfilling)."""

    job: str = Field(description="The queued gang the GPUs are held for.")
    gpu_type: str = Field(description="The GPU type it is planned to start on.")
    gpus: int = Field(ge=1, description="Its gang size.")
    start_s: float = Field(
        allow_inf_nan=False,
        description="Its planned start (absolute seconds): the predicted time when enough running jobs "
        "of the type have ended.",
    )
    held: int = Field(
        ge=0,
        description="GPUs free now that are held for it: its gang minus the GPUs of kept running jobs "
        "predicted to end by `start_s`. Only jobs predicted to end by `start_s` may start on them.",
    )
    nodes: dict[str, int] | None = Field(
        default=None,
        description="The gang in its node shape: the nodes whose free GPUs are held, with how many GPUs "
        "each holds (they add up to `held`); the nodes are those predicted to hold its pieces first, "
        "and `held` per node is its piece less the GPUs of running jobs there predicted to end by "
        "`start_s`. Absent for a gang that spreads over any GPUs (held GPUs counted per type).",
    )


class SolverInfo(_Strict):
    """How the decision was computed."""

    backend: str = Field(
        description="The backend that produced the decision (highs, cpsat, highspy, greedy, ...)."
    )
    seconds: float = Field(description="Wall-clock seconds the whole decision took.")
    objective: float | None = Field(
        default=None, description="Objective value of the answer, if the backend has one."
    )
    bound: float | None = Field(default=None, description="Best proven bound on the objective, if known.")
    gap: float | None = Field(default=None, description="Relative gap between objective and bound, if known.")
    status_detail: str | None = Field(
        default=None, description="The backend's own status text (added by optsched)."
    )
    fallback_reason: str | None = Field(
        default=None,
        description="Why a heuristic answered instead of the solver, when status is fallback "
        "(added by optsched).",
    )
    stage_seconds: dict[str, float] = Field(
        default_factory=dict, description="Seconds spent per pipeline stage (added by optsched)."
    )
    notes: list[str] = Field(
        default_factory=list,
        description="Warnings and remarks, one per line (added by optsched); use kept above quota "
        "is also said here, as `over-quota: tenant T keeps N 'TYPE' GPUs above quota with no lender "
        "to cover them` (the typed record is `kept_over_quota`).",
    )


class Start(_Strict):
    """Start a pending job now on these GPUs."""

    job: str = Field(description="Id of a pending job.")
    allocation: list[GpuRef] = Field(
        description="The GPUs it gets: exactly its gang size, all of one allowed type."
    )
    on_loan: bool = Field(
        default=False, description="It runs on capacity borrowed from another tenant, not on its own quota."
    )
    colocated_with: list[str] | None = Field(
        default=None,
        description="MPS guests only: the host job(s) whose GPUs it shares; a guest uses no quota.",
    )


class Preempt(_Strict):
    """Stop a running job."""

    job: str = Field(description="Id of a running job.")
    reason: PreemptReason = Field(description="Why it is stopped.")
    lost_s: float = Field(default=0.0, ge=0, description="Seconds of work the stop costs (restart cost).")


class ResizeReason(StrEnum):
    """Why a running elastic job changes size."""

    GROW = "grow"
    """It takes GPUs that stay idle after every start of the decision."""
    SHRINK_FOR_RECLAIM = "shrink_for_reclaim"
    """It runs on loan and gives GPUs back to their owner instead of being reclaimed whole."""
    SHRINK_FOR_START = "shrink_for_start"
    """It gives GPUs to a start of higher value instead of being preempted whole."""


class Resize(_Strict):
    """Change the size of a running elastic job (added by optsched)."""

    job: str = Field(description="Id of a running elastic job.")
    allocation: list[GpuRef] = Field(
        description="All the GPUs it holds after the resize: a superset of its allocation when it "
        "grows (the added GPUs of the same type), a subset when it shrinks."
    )
    from_gpus: int = Field(ge=1, description="Its size before the decision (its `gpus`).")
    to_gpus: int = Field(
        ge=1, description="Its size after the decision: one of its allowed sizes, len(allocation)."
    )
    reason: ResizeReason = Field(description="Why it changes size.")
    lost_s: float = Field(
        default=0.0, ge=0, description="Seconds of progress the resize costs (its resize_overhead_s)."
    )


class Loan(_Strict):
    """Idle quota lent by one tenant to another, in force after this decision."""

    lender: str = Field(description="Id of the tenant lending idle quota.")
    borrower: str = Field(description="Id of the tenant using it.")
    gpu_type: str = Field(description="The GPU type lent.")
    gpus: int = Field(ge=1, description="Number of GPUs lent.")


class KeptOverQuota(_Strict):
    """Use a tenant keeps running above its quota on a GPU type with no loan to cover it (the
    over-quota amendment of invariant 4)."""

    tenant: str = Field(description="Id of the tenant running above its quota.")
    gpu_type: str = Field(description="The GPU type.")
    gpus: int = Field(
        ge=1, description="GPUs of its use above quota plus received loans after this decision."
    )


class JobPrediction(BaseModel):
    """What the predictors said about one job."""

    model_config = ConfigDict(extra="allow")

    runtime_s: float = Field(description="Predicted exclusive runtime, seconds.")
    memory_gib: float = Field(description="Predicted peak GPU memory per GPU, GiB.")
    source: str = Field(
        description="Where the numbers came from: `model:...`, `estimate` (the job's own) or `default`."
    )


class Unit(_Strict):
    """One schedulable unit of a workflow plan: one activation or several fused."""

    id: str = Field(description="Unique unit id.")
    session: str = Field(description="The session of the unit's activations (added by optsched).")
    activations: list[str] = Field(
        description="Activation ids run by the unit: one, or several of the same model fused, in order."
    )
    model: str = Field(description="The model the activations run (added by optsched).")
    device: GpuRef = Field(description="The pool GPU that runs the unit.")
    start_s: float = Field(description="Planned start, seconds.")
    end_s: float = Field(description="Planned end, seconds.")


class ModelAction(_Strict):
    """Load or evict a model on a serving device."""

    device: GpuRef = Field(description="The pool GPU.")
    model: str = Field(description="The model to load or evict.")
    action: Literal["load", "evict"] = Field(description="load or evict.")
    at_s: float = Field(description="When the action starts, seconds.")


class WorkflowPlan(_Strict):
    """The workflow part of a decision."""

    units: list[Unit] = Field(default_factory=list, description="What runs where and when.")
    model_actions: list[ModelAction] = Field(
        default_factory=list, description="Model loads and evictions on pool GPUs."
    )
    status: Literal["optimal", "feasible", "fallback"] | None = Field(
        default=None, description="How the plan was found, as for the decision's own status."
    )
    notes: list[str] = Field(default_factory=list, description="Warnings and remarks of the planner.")


class PoolLoan(_Strict):
    """One cluster GPU lent to the workflow serving pool from a tenant's idle quota (added by
    optsched)."""

    gpu: GpuRef = Field(description="The cluster GPU that joins the pool.")
    lender: str = Field(description="The tenant whose idle quota of the GPU's type the pool holds.")
    gpu_type: str = Field(description="The GPU's type.")


class PoolReturn(_Strict):
    """One lent pool GPU given back to the cluster (added by optsched)."""

    gpu: GpuRef = Field(description="The lent pool GPU that goes back.")
    lender: str = Field(description="The tenant whose quota it held.")
    reason: Literal["burst_passed", "owner_needs", "node_unavailable", "not_lendable"] = Field(
        description="burst_passed: the backlog drains fast enough without it; owner_needs: its lender "
        "has pending guaranteed work inside its quota; node_unavailable: its node is lost; "
        "not_lendable: the snapshot no longer allows lending it (type, lender or size cap)."
    )


class PoolDecision(_Strict):
    """How the workflow pool's size changes this epoch (added by optsched; see "Pool lending" in
    ``docs/snapshot-format.md``)."""

    lend: list[PoolLoan] = Field(default_factory=list, description="Cluster GPUs that join the pool now.")
    returned: list[PoolReturn] = Field(
        default_factory=list, description="Lent GPUs given back to the cluster now."
    )
    size: int = Field(ge=0, description="Pool GPUs after the decision, dedicated plus lent.")
    lent: dict[str, dict[str, int]] = Field(
        default_factory=dict,
        description="GPUs lent to the pool after the decision, per lender and GPU type (they count as "
        "the lender's use in the cluster part).",
    )
    backlog_s: float = Field(
        description="Predicted work of the workflow backlog, seconds on the reference GPU (speed 1)."
    )
    drain_s: float | None = Field(
        description="Fluid drain time of the backlog on the pool after the decision, seconds: the "
        "backlog (running work included) over the pool's summed speed; null: work but no pool GPU."
    )
    notes: list[str] = Field(default_factory=list, description="Why each GPU was lent or returned.")


class Decision(_Strict):
    """The output of one scheduling epoch (format 1)."""

    format: Literal[1] = Field(default=1, description="Format version, 1.")
    now: float = Field(description="The snapshot's `now`, echoed.")
    status: Literal["optimal", "feasible", "fallback"] = Field(
        description="optimal or feasible: the solver's answer; fallback: the solver gave nothing "
        "usable in time and a heuristic answered."
    )
    solver: SolverInfo = Field(
        description="Which backend answered, how long it took and how good the answer is."
    )
    start: list[Start] = Field(default_factory=list, description="Pending jobs to start now.")
    preempt: list[Preempt] = Field(default_factory=list, description="Running jobs to stop now.")
    resize: list[Resize] = Field(
        default_factory=list,
        description="Running elastic jobs that change size now (added by optsched).",
    )
    queue: list[str] = Field(
        default_factory=list, description="Every pending job not started, highest priority first."
    )
    queue_reasons: dict[str, QueueReason] = Field(
        default_factory=dict, description="Why each queued job did not start (added by optsched)."
    )
    explanations: dict[str, Explanation] = Field(
        default_factory=dict,
        description="For every queued, every preempted and every resized job: what blocks it, what "
        "it made room for or why it changed size, with numbers that hold for this decision (added "
        "by optsched).",
    )
    loans: list[Loan] = Field(
        default_factory=list, description="Idle quota lent between tenants, in force after this decision."
    )
    kept_over_quota: list[KeptOverQuota] = Field(
        default_factory=list,
        description="Per tenant and GPU type, the use it keeps above quota with no loan to cover it "
        "(added by optsched): only use that was already running above quota without a loan (a "
        "lowered quota, a lost node) and keeps running, when no lender can cover it; the decision "
        "then starts nothing on top of it for that tenant and type. `gpus` is the tenant's use "
        "minus its quota minus the loans it receives; the checker recomputes it from the "
        "allocations and verifies the rule, and every such excess must be listed here.",
    )
    assurance: dict[str, float] = Field(
        default_factory=dict,
        description="Assurance signal per tenant after this epoch, 0..1 (1 = fully assured).",
    )
    assurance_state: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Opaque per-tenant state to feed back in the next snapshot."
    )
    predictions: dict[str, JobPrediction] | None = Field(
        default=None, description="What the predictors said per job, for explanation."
    )
    workflow_plan: WorkflowPlan | None = Field(
        default=None, description="The plan for the snapshot's workflow sessions, if it has any."
    )
    expected_start_s: dict[str, float] = Field(
        default_factory=dict,
        description="Per queued job: its planned start in the look-ahead plan (absolute seconds, like "
        "`now`); a queued job beyond the plan's horizon is absent (added by optsched).",
    )
    reservations: list[Reservation] = Field(
        default_factory=list,
        description="Gangs with a reservation: GPUs held back now that only jobs predicted to end "
        "before the gang's start may use (added by optsched).",
    )
    pool: PoolDecision | None = Field(
        default=None,
        description="Cluster GPUs lent to or returned from the workflow pool (added by optsched); "
        "present when the snapshot has `workflows.pool_lending`.",
    )

"""The decision of one epoch (format 1).

Additive fields (documented in ``docs/snapshot-additions.md``):

* ``Decision.queue_reasons``: why each queued job did not start (a :class:`QueueReason`).
* ``SolverInfo.status_detail``, ``stage_seconds``, ``notes``, ``fallback_reason``.
* ``Unit.session`` and ``Unit.model`` in workflow plans.
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


class SolverInfo(_Strict):
    """How the decision was computed."""

    backend: str
    seconds: float
    objective: float | None = None
    bound: float | None = None
    gap: float | None = None
    status_detail: str | None = None
    fallback_reason: str | None = None
    stage_seconds: dict[str, float] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)


class Start(_Strict):
    """Start a pending job now on these GPUs."""

    job: str
    allocation: list[GpuRef]
    on_loan: bool = False
    colocated_with: list[str] | None = None


class Preempt(_Strict):
    """Stop a running job."""

    job: str
    reason: PreemptReason
    lost_s: float = Field(default=0.0, ge=0)


class Loan(_Strict):
    """Idle quota lent by one tenant to another, in force after this decision."""

    lender: str
    borrower: str
    gpu_type: str
    gpus: int = Field(ge=1)


class JobPrediction(BaseModel):
    """What the predictors said about one job."""

    model_config = ConfigDict(extra="allow")

    runtime_s: float
    memory_gib: float
    source: str


class Unit(_Strict):
    """One schedulable unit of a workflow plan: one activation or several fused."""

    id: str
    session: str
    activations: list[str]
    model: str
    device: GpuRef
    start_s: float
    end_s: float


class ModelAction(_Strict):
    """Load or evict a model on a serving device."""

    device: GpuRef
    model: str
    action: Literal["load", "evict"]
    at_s: float


class WorkflowPlan(_Strict):
    """The workflow part of a decision."""

    units: list[Unit] = Field(default_factory=list)
    model_actions: list[ModelAction] = Field(default_factory=list)
    status: Literal["optimal", "feasible", "fallback"] | None = None
    notes: list[str] = Field(default_factory=list)


class Decision(_Strict):
    """The output of one scheduling epoch (format 1)."""

    format: Literal[1] = 1
    now: float
    status: Literal["optimal", "feasible", "fallback"]
    solver: SolverInfo
    start: list[Start] = Field(default_factory=list)
    preempt: list[Preempt] = Field(default_factory=list)
    queue: list[str] = Field(default_factory=list)
    queue_reasons: dict[str, QueueReason] = Field(default_factory=dict)
    loans: list[Loan] = Field(default_factory=list)
    assurance: dict[str, float] = Field(default_factory=dict)
    assurance_state: dict[str, dict[str, Any]] = Field(default_factory=dict)
    predictions: dict[str, JobPrediction] | None = None
    workflow_plan: WorkflowPlan | None = None

"""Snapshot format 1: the input of one scheduling epoch.

The semantics live in the spec (``snapshot-format-1.md``); these models check the shape and
ranges of every field. Cross-references (unknown tenant, duplicated ids, ...) are checked in
:func:`optsched.state.ClusterState.from_snapshot`.

Additive fields (documented in ``docs/snapshot-additions.md``):

* ``Job.guest_of`` (running jobs): the host job whose GPUs this MPS guest shares.
* ``Model.params_b`` (workflows): parameter count in billions, for the roofline predictor.
* ``Options.num_workers``, ``Options.extra``: solver threads and backend-specific knobs.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt

FeatureValue = str | float | int | bool


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)


class GpuType(_Strict):
    """One GPU model in the fleet."""

    memory_gib: float = Field(gt=0, allow_inf_nan=False)
    mps: bool = False
    speed: float = Field(default=1.0, gt=0, allow_inf_nan=False)


class Node(_Strict):
    """A machine with ``gpus`` identical GPUs of one type."""

    id: str = Field(min_length=1)
    gpu_type: str
    gpus: int = Field(ge=1)
    available: bool = True


class TenantQos(_Strict):
    """Queueing-delay target of a tenant's guaranteed jobs."""

    max_queue_delay_s: float = Field(ge=0, allow_inf_nan=False)
    target: float = Field(default=0.95, ge=0, le=1)


class Tenant(_Strict):
    """A tenant with guaranteed quota per GPU type."""

    id: str = Field(min_length=1)
    quota: dict[str, NonNegativeInt] = Field(default_factory=dict)
    borrow_limit: dict[str, NonNegativeInt] | None = None
    lend_limit: dict[str, NonNegativeInt] | None = None
    qos: TenantQos | None = None
    weight: float = Field(default=1.0, gt=0, allow_inf_nan=False)


class GpuRef(_Strict):
    """One GPU: the node id and the index of the GPU on that node."""

    node: str
    gpu: int = Field(ge=0)

    def key(self) -> tuple[str, int]:
        return (self.node, self.gpu)


class Job(_Strict):
    """A pending or running GPU job (training or batch work)."""

    id: str = Field(min_length=1)
    tenant: str
    qos: Literal["guaranteed", "best_effort"]
    gpus: int = Field(ge=1)
    gpu_types: list[str] | None = None
    submit_s: float = Field(allow_inf_nan=False)
    state: Literal["pending", "running"]
    allocation: list[GpuRef] | None = None
    start_s: float | None = Field(default=None, allow_inf_nan=False)
    on_loan: bool = False
    colocated: bool = False
    guest_of: str | None = None
    runtime_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    memory_gib: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    shareable: bool | None = None
    preemptible: bool | None = None
    restart_cost_s: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    features: dict[str, FeatureValue] | None = None

    @property
    def is_shareable(self) -> bool:
        """``shareable`` with the spec's default (true for best_effort)."""
        if self.shareable is not None:
            return self.shareable
        return self.qos == "best_effort"

    @property
    def is_preemptible(self) -> bool:
        """``preemptible`` with the spec's default (true for best_effort)."""
        if self.preemptible is not None:
            return self.preemptible
        return self.qos == "best_effort"


class Model(_Strict):
    """An LLM served by the workflow pool."""

    memory_gib: float = Field(gt=0, allow_inf_nan=False)
    load_s: dict[str, float] | None = None
    params_b: float | None = Field(default=None, gt=0)


class Device(_Strict):
    """One GPU of the workflow serving pool."""

    node: str
    gpu: int = Field(ge=0)
    resident: list[str] = Field(default_factory=list)
    busy_until_s: float = Field(default=0.0, allow_inf_nan=False)

    def key(self) -> tuple[str, int]:
        return (self.node, self.gpu)


class Activation(_Strict):
    """One LLM call of an agent workflow."""

    id: str = Field(min_length=1)
    model: str
    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)
    after: list[str] = Field(default_factory=list)
    state: Literal["pending", "running", "done"] = "pending"
    device: GpuRef | None = None
    start_s: float | None = Field(default=None, allow_inf_nan=False)


class Session(_Strict):
    """A multi-agent workflow session: a DAG of activations."""

    id: str = Field(min_length=1)
    tenant: str
    arrival_s: float = Field(allow_inf_nan=False)
    activations: list[Activation]


class Workflows(_Strict):
    """The workflow part of a snapshot."""

    models: dict[str, Model] = Field(default_factory=dict)
    pool: list[Device] = Field(default_factory=list)
    sessions: list[Session] = Field(default_factory=list)


class Options(_Strict):
    """Solver options carried by the snapshot."""

    time_limit_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    backend: Literal["cpsat", "milp", "greedy"] | None = None
    seed: int | None = Field(default=None, ge=0)
    num_workers: int | None = Field(default=None, ge=1)
    extra: dict[str, Any] | None = None


class Snapshot(_Strict):
    """The input of one scheduling epoch (format 1)."""

    format: Literal[1]
    now: float = Field(allow_inf_nan=False)
    epoch_s: float = Field(default=60.0, gt=0, allow_inf_nan=False)
    gpu_types: dict[str, GpuType]
    nodes: list[Node]
    tenants: list[Tenant]
    jobs: list[Job] = Field(default_factory=list)
    workflows: Workflows | None = None
    assurance_state: dict[str, dict[str, Any]] | None = None
    options: Options | None = None

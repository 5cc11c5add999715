"""Snapshot format 1: the input of one scheduling epoch.

What every field means, and the invariants a decision holds, are in ``docs/snapshot-format.md``;
these models check the shape and ranges of every field and carry a description of each (they
become the JSON Schema of ``optsched schema snapshot``). Cross-references (unknown tenant,
duplicated ids, ...) are checked in :func:`optsched.engine.state.ClusterState.from_snapshot`.

Fields optsched adds to format 1 (see "Added fields" in ``docs/snapshot-format.md``):

* ``Job.guest_of`` (running jobs): the host job whose GPUs this MPS guest shares.
* ``Model.params_b`` (workflows): parameter count in billions, for the roofline predictor.
* ``Options.num_workers``, ``Options.extra``: solver threads and backend-specific knobs.
* ``Tenant.preemption``, ``Job.min_runtime_s``: operator controls against preemption thrash.
* ``Job.priority_class``, ``Tenant.priority_classes``, ``Snapshot.priority_classes``: named
  priority levels inside a tenant.
* ``Snapshot.groups``, ``Tenant.parent``: hierarchical quotas (a tree of quota groups above the
  tenants, with borrow and lend limits at every level).
* ``Job.min_gpus``, ``Job.max_gpus``, ``Job.gpus_step``, ``Job.resize_overhead_s``: elastic jobs,
  whose size the engine chooses at start and may change while they run.
* ``Workflows.pool_lending``, ``Device.lent_by``, ``Device.lent_since_s``: cluster GPUs lent to
  the serving pool from idle quota (the pool's size as a decision).
* ``Snapshot.topology``, ``Node.topology``, ``Node.cpu_milli``, ``Node.memory_mib``,
  ``Job.gpus_per_node``, ``Job.spread``, ``Job.cpu_milli``, ``Job.memory_mib``, ``Job.gpu_milli``,
  ``Job.topology``: node shape, host resources, fractional GPUs and topology ("Node shape" in
  ``docs/snapshot-format.md``).
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    Strict,
    WithJsonSchema,
    model_validator,
)
from pydantic_core import PydanticCustomError

from optsched.schema.limits import (
    MAX_ACTIVATIONS,
    MAX_ASSURANCE_HISTORY,
    MAX_CPU_MILLI,
    MAX_ELASTIC_SIZES,
    MAX_FACTOR,
    MAX_FEATURES,
    MAX_GANG,
    MAX_GPU_TYPES,
    MAX_GPUS_PER_NODE,
    MAX_GROUP_DEPTH,
    MAX_ID_LENGTH,
    MAX_JOBS,
    MAX_MEMORY_GIB,
    MAX_MEMORY_MIB,
    MAX_MODELS,
    MAX_NODES,
    MAX_PARTITIONS,
    MAX_SECONDS,
    MAX_SEED,
    MAX_SESSIONS,
    MAX_TENANTS,
    MAX_TEXT_LENGTH,
    MAX_TIME_LIMIT_S,
    MAX_TOKENS,
    MAX_TOPOLOGY_LEVELS,
    MAX_TOTAL_GPUS,
    MAX_WORKERS,
    MILLI_PER_GPU,
)

# Strict scalars: a count is a JSON integer (4; not 4.0, "4" or true), a flag a JSON boolean,
# a number a JSON number (3 and 3.0 alike; not "3" or true). Every one is bounded
# (optsched/schema/limits.py, "Size limits" in docs/snapshot-format.md).
Name = Annotated[str, Strict(), Field(min_length=1, max_length=MAX_ID_LENGTH)]
"""An id or a name (also a key of a table)."""
GpuCount = Annotated[int, Strict(), Field(ge=0, le=MAX_TOTAL_GPUS)]
"""A number of GPUs that is not one gang (a quota, a limit)."""
ClassWeight = Annotated[float, Strict(), Field(gt=0, le=MAX_FACTOR, allow_inf_nan=False)]
Seconds = Annotated[float, Strict(), Field(allow_inf_nan=False, ge=-MAX_SECONDS, le=MAX_SECONDS)]
"""A time or a duration, seconds."""


def _feature_value(value: Any) -> str | float | int | bool:
    """A job feature: a string (at most ``MAX_TEXT_LENGTH`` characters), a number or a boolean
    (one error, not one per member of a union)."""
    if isinstance(value, str):
        if len(value) > MAX_TEXT_LENGTH:
            raise PydanticCustomError(
                "limit", "at most {limit} characters", {"limit": MAX_TEXT_LENGTH}
            )
        return value
    if isinstance(value, bool | int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    raise PydanticCustomError("feature_type", "must be a string, a finite number or a boolean")


FeatureValue = Annotated[
    str | float | int | bool,
    PlainValidator(_feature_value),
    WithJsonSchema({"type": ["string", "number", "boolean"], "maxLength": MAX_TEXT_LENGTH}),
]


def _partitions(value: Any) -> int | str:
    if value == "auto" and isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_PARTITIONS:
        return value
    raise PydanticCustomError(
        "partitions", 'must be an integer from 1 to {limit}, "auto" or null', {"limit": MAX_PARTITIONS}
    )


Partitions = Annotated[
    int | Literal["auto"],
    PlainValidator(_partitions),
    WithJsonSchema(
        {"anyOf": [{"type": "integer", "minimum": 1, "maximum": MAX_PARTITIONS}, {"const": "auto"}]}
    ),
]


def _assurance_state(value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The keys the engine reads back from an opaque per-tenant state: numbers ``a``, ``met``,
    ``total``, and ``missed``, a list of job ids of bounded length."""
    for tenant, st in value.items():
        for key in ("a", "met", "total"):
            v = st.get(key)
            if v is not None and (
                isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v)
            ):
                raise PydanticCustomError(
                    "assurance_state", "must be a finite number", {"field": f"{tenant}.{key}"}
                )
        missed = st.get("missed")
        if missed is not None:
            if not isinstance(missed, list) or not all(isinstance(j, str) for j in missed):
                raise PydanticCustomError(
                    "assurance_state", "must be a list of job ids", {"field": f"{tenant}.missed"}
                )
            if len(missed) > MAX_ASSURANCE_HISTORY:
                raise PydanticCustomError(
                    "assurance_state",
                    "at most {limit} job ids",
                    {"field": f"{tenant}.missed", "limit": MAX_ASSURANCE_HISTORY},
                )
    return value


def _format(value: Any) -> Any:
    if isinstance(value, bool):  # true == 1 in Python; not in JSON
        raise PydanticCustomError("literal_error", "Input should be 1")
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)


class GpuType(_Strict):
    """One GPU model in the fleet."""

    memory_gib: float = Field(
        gt=0, le=MAX_MEMORY_GIB, strict=True, allow_inf_nan=False, description="Memory of one GPU, GiB."
    )
    mps: bool = Field(
        default=False,
        strict=True,
        description="Whether two shareable jobs may share one GPU of this type through NVIDIA MPS.",
    )
    speed: float = Field(
        default=1.0,
        gt=0,
        le=MAX_FACTOR,
        strict=True,
        allow_inf_nan=False,
        description="Throughput relative to the reference GPU (1.0); 2.0 runs a job twice as fast.",
    )


class Node(_Strict):
    """A machine with ``gpus`` identical GPUs of one type."""

    id: Name = Field(description="Unique node id.")
    gpu_type: Name = Field(description="The type of all GPUs of the node (a key of `gpu_types`).")
    gpus: int = Field(
        ge=1,
        le=MAX_GPUS_PER_NODE,
        strict=True,
        description=f"Number of GPUs on the node (at most {MAX_GPUS_PER_NODE}); they are indexed "
        "0..gpus-1.",
    )
    available: bool = Field(
        default=True,
        strict=True,
        description="False when the node is drained or failed: nothing runs or starts on it.",
    )
    cpu_milli: int | None = Field(
        default=None,
        ge=0,
        le=MAX_CPU_MILLI,
        strict=True,
        description="CPUs of the node in thousandths (added by optsched); null: not tracked, any "
        "job's CPU need fits.",
    )
    memory_mib: int | None = Field(
        default=None,
        ge=0,
        le=MAX_MEMORY_MIB,
        strict=True,
        description="Host memory of the node, MiB (added by optsched); null: not tracked.",
    )
    topology: dict[Name, Name] | None = Field(
        default=None,
        max_length=MAX_TOPOLOGY_LEVELS,
        description="The node's domain at each level of `topology.levels` (added by optsched), "
        'e.g. {"block": "b1", "rack": "r3"}; required for every declared level when the snapshot '
        "declares a topology.",
    )


class TenantQos(_Strict):
    """Queueing-delay target of a tenant's guaranteed jobs."""

    max_queue_delay_s: float = Field(
        ge=0,
        le=MAX_SECONDS,
        strict=True,
        allow_inf_nan=False,
        description="Longest queueing delay, seconds, the tenant accepts for its guaranteed jobs.",
    )
    target: float = Field(
        default=0.95,
        ge=0,
        le=1,
        strict=True,
        allow_inf_nan=False,
        description="Fraction of the tenant's guaranteed jobs that must start within max_queue_delay_s.",
    )


class TenantPreemption(_Strict):
    """Operator controls against preemption thrash (added by optsched); they bound ``priority``
    preemptions of the tenant's jobs: reclaim of on-loan jobs and jobs on lost nodes are exempt."""

    min_runtime_s: float = Field(
        default=0.0,
        ge=0,
        le=MAX_SECONDS,
        strict=True,
        allow_inf_nan=False,
        description="A running job of the tenant that has run less than this (now - start_s), "
        "seconds, is not preempted for priority (a job's own `min_runtime_s` overrides it).",
    )
    max_gpus_per_epoch: GpuCount | None = Field(
        default=None,
        description="Most GPUs of the tenant's jobs that one decision preempts for priority; null: "
        "no cap.",
    )
    hysteresis: float = Field(
        default=0.0,
        ge=0,
        le=MAX_FACTOR,
        strict=True,
        allow_inf_nan=False,
        description="h >= 0: a priority preemption of one of the tenant's jobs must be paid with "
        "(1 + h) times its static cost.",
    )


class Tenant(_Strict):
    """A tenant with guaranteed quota per GPU type."""

    id: Name = Field(description="Unique tenant id.")
    quota: dict[Name, GpuCount] = Field(
        default_factory=dict,
        max_length=MAX_GPU_TYPES,
        description="Guaranteed GPUs per GPU type; a type not listed has quota 0.",
    )
    borrow_limit: dict[Name, GpuCount] | None = Field(
        default=None,
        max_length=MAX_GPU_TYPES,
        description="Most GPUs per type the tenant may borrow above its quota; null, or a type not "
        "listed, means no limit beyond what others lend. 0 also keeps the tenant's MPS guests on "
        "its own hosts.",
    )
    lend_limit: dict[Name, GpuCount] | None = Field(
        default=None,
        max_length=MAX_GPU_TYPES,
        description="Most GPUs per type of its idle quota the tenant may lend; null, or a type not "
        "listed, means all of its idle quota.",
    )
    qos: TenantQos | None = Field(
        default=None, description="Queueing-delay target of the tenant's guaranteed jobs, if any."
    )
    weight: float = Field(
        default=1.0,
        gt=0,
        le=MAX_FACTOR,
        strict=True,
        allow_inf_nan=False,
        description="Share weight of the tenant against the others (1.0 = an equal share).",
    )
    preemption: TenantPreemption | None = Field(
        default=None,
        description="Controls against preemption thrash of the tenant's jobs (added by optsched); "
        "null: none.",
    )
    priority_classes: dict[Name, ClassWeight] | None = Field(
        default=None,
        max_length=MAX_FEATURES,
        description="Weights of named priority classes for the tenant's jobs (added by optsched); "
        "a name listed here overrides the snapshot-level table.",
    )
    parent: Name | None = Field(
        default=None,
        description="Id of the quota group the tenant belongs to (added by optsched); null: the "
        "tenant sits at the top level, under no group.",
    )


class QuotaGroup(_Strict):
    """A node of the quota tree (added by optsched): an org, team or project above tenants.

    A group holds no GPUs of its own: its quota is the sum of the quotas of the tenants below
    it (a different stated ``quota`` is noted in ``solver.notes`` and the sum is used). Its
    limits bound the loans that cross its boundary (see "Quota trees" in
    ``docs/snapshot-format.md``)."""

    id: Name = Field(description="Unique group id (not also a tenant id).")
    parent: Name | None = Field(
        default=None,
        description="Id of the enclosing group; null: a top-level group.",
    )
    quota: dict[Name, GpuCount] | None = Field(
        default=None,
        max_length=MAX_GPU_TYPES,
        description="The subtree's guaranteed GPUs per type, which is the sum of the quotas of the "
        "tenants below the group (a group holds no GPUs of its own); a type stated otherwise gets "
        "a solver note and the sum is used; null, or a type not listed: that sum.",
    )
    borrow_limit: dict[Name, GpuCount] | None = Field(
        default=None,
        max_length=MAX_GPU_TYPES,
        description="Most GPUs per type that tenants inside the group may borrow from tenants "
        "outside it, in all; null, or a type not listed: no limit.",
    )
    lend_limit: dict[Name, GpuCount] | None = Field(
        default=None,
        max_length=MAX_GPU_TYPES,
        description="Most GPUs per type of the quota of tenants inside the group that tenants "
        "outside it may borrow, in all; null, or a type not listed: no limit.",
    )


class Topology(_Strict):
    """The levels of the fleet's network topology, outermost first (added by optsched): for
    example ``["block", "rack"]``, as Slurm's topology/tree and Kueue's topology-aware
    scheduling describe them; each node is the implicit innermost level."""

    levels: list[Name] = Field(
        min_length=1,
        max_length=MAX_TOPOLOGY_LEVELS,
        description="Level names, outermost first (each node names its domain at every level).",
    )


class TopologyRequest(_Strict):
    """A job's topology request (added by optsched): all of its nodes in one domain of
    ``level``."""

    level: Name = Field(description="A level of the snapshot's `topology.levels`.")
    mode: Literal["required", "preferred"] = Field(
        default="required",
        description="required: the job starts only inside one domain of the level (Kueue's "
        "required topology, Slurm's --switches); preferred: inside one domain when it can, else "
        "across domains.",
    )


class GpuRef(_Strict):
    """One GPU: the node id and the index of the GPU on that node."""

    node: Name = Field(description="Node id.")
    gpu: int = Field(
        ge=0, lt=MAX_GPUS_PER_NODE, strict=True, description="Index of the GPU on the node, from 0."
    )

    def key(self) -> tuple[str, int]:
        return (self.node, self.gpu)


class Job(_Strict):
    """A pending or running GPU job (training or batch work)."""

    id: Name = Field(description="Unique job id.")
    tenant: Name = Field(description="Id of the tenant that owns the job.")
    qos: Literal["guaranteed", "best_effort"] = Field(
        description="guaranteed: inside its tenant's quota it is never preempted for another "
        "tenant; best_effort: may be preempted and colocated by default."
    )
    gpus: int = Field(
        ge=1,
        le=MAX_GANG,
        strict=True,
        description="Gang size: the job starts on exactly this many GPUs at once, or not at all.",
    )
    gpu_types: list[Name] | None = Field(
        default=None,
        max_length=MAX_GPU_TYPES,
        description="GPU types the job may run on; null means any type.",
    )
    submit_s: Seconds = Field(description="Submission time, seconds; not after `now`.")
    state: Literal["pending", "running"] = Field(description="pending (waiting) or running.")
    allocation: list[GpuRef] | None = Field(
        default=None,
        max_length=MAX_GANG,
        description="Running jobs only: the GPUs the job holds, exactly `gpus` of them, all of one type.",
    )
    start_s: Seconds | None = Field(
        default=None, description="Running jobs only: when the job started, seconds."
    )
    on_loan: bool = Field(
        default=False,
        strict=True,
        description="Running jobs only, and required for them: the job runs on capacity another "
        "tenant lends (as the last decision said); it may always be reclaimed. A pending job "
        "leaves it out (false).",
    )
    colocated: bool = Field(
        default=False,
        strict=True,
        description="Running jobs only: the job shares its GPUs with another job through MPS.",
    )
    guest_of: Name | None = Field(
        default=None,
        description="Running MPS guests only (added by optsched): the host job whose GPUs it shares. "
        "When unset, the earlier-started job of a colocated pair is the host.",
    )
    runtime_s: float | None = Field(
        default=None,
        gt=0,
        le=MAX_SECONDS,
        strict=True,
        allow_inf_nan=False,
        description="Runtime estimate given by the user or trace, seconds, if any (not the truth).",
    )
    memory_gib: float | None = Field(
        default=None,
        gt=0,
        le=MAX_MEMORY_GIB,
        strict=True,
        allow_inf_nan=False,
        description="Peak GPU memory per GPU, GiB, if known.",
    )
    shareable: bool | None = Field(
        default=None,
        strict=True,
        description="May be colocated with another job through MPS; null means true for best_effort "
        "and false for guaranteed.",
    )
    preemptible: bool | None = Field(
        default=None,
        strict=True,
        description="May be stopped to make room; null means true for best_effort and false for guaranteed.",
    )
    restart_cost_s: float = Field(
        default=0.0,
        ge=0,
        le=MAX_SECONDS,
        strict=True,
        allow_inf_nan=False,
        description="Seconds of work lost plus restart overhead if the job is preempted now.",
    )
    min_runtime_s: float | None = Field(
        default=None,
        ge=0,
        le=MAX_SECONDS,
        strict=True,
        allow_inf_nan=False,
        description="Running jobs: not preempted for priority before it has run this long, seconds "
        "(added by optsched); null: its tenant's `preemption.min_runtime_s`.",
    )
    priority_class: Name | None = Field(
        default=None,
        description="Named priority class of the job inside its tenant (added by optsched); its "
        "weight multiplies the job's value; null, or a name no table lists: weight 1.",
    )
    min_gpus: int | None = Field(
        default=None,
        ge=1,
        le=MAX_GANG,
        strict=True,
        description="Elastic jobs (added by optsched): the fewest GPUs the job may run on; null: "
        "`gpus` (with `max_gpus` also null the job is not elastic).",
    )
    max_gpus: int | None = Field(
        default=None,
        ge=1,
        le=MAX_GANG,
        strict=True,
        description="Elastic jobs (added by optsched): the most GPUs the job may run on; null: `gpus`.",
    )
    gpus_step: int = Field(
        default=1,
        ge=1,
        le=MAX_GANG,
        strict=True,
        description="Elastic jobs (added by optsched): allowed sizes are min_gpus, min_gpus + "
        "gpus_step, ..., max_gpus.",
    )
    resize_overhead_s: float = Field(
        default=0.0,
        ge=0,
        le=MAX_SECONDS,
        strict=True,
        allow_inf_nan=False,
        description="Elastic running jobs (added by optsched): seconds of progress a resize costs "
        "(the job checkpoints and resumes at its new size; no other work is lost).",
    )
    features: dict[Name, FeatureValue] | None = Field(
        default=None,
        max_length=MAX_FEATURES,
        description="Free-form inputs for the predictors (user, job name, ...), string or number values.",
    )
    gpus_per_node: int | None = Field(
        default=None,
        ge=1,
        le=MAX_GPUS_PER_NODE,
        strict=True,
        description="Node shape (added by optsched): the job runs on gpus / gpus_per_node nodes with "
        "exactly this many GPUs on each (a whole number of nodes); null: the default shape (a job "
        "no larger than a node runs on one node, a larger one on whole nodes plus one node for the rest).",
    )
    spread: bool = Field(
        default=False,
        strict=True,
        description="The job may spread over any GPUs of its type, node boundaries ignored (added "
        "by optsched); elastic jobs always do.",
    )
    cpu_milli: int | None = Field(
        default=None,
        ge=0,
        le=MAX_CPU_MILLI,
        strict=True,
        description="CPUs the job needs on each of its nodes, in thousandths (added by optsched); "
        "null: none.",
    )
    memory_mib: int | None = Field(
        default=None,
        ge=0,
        le=MAX_MEMORY_MIB,
        strict=True,
        description="Host memory the job needs on each of its nodes, MiB (added by optsched); null: "
        "none.",
    )
    gpu_milli: int | None = Field(
        default=None,
        ge=1,
        le=MILLI_PER_GPU,
        strict=True,
        description="A fractional job (added by optsched): the share of ONE GPU it takes, in "
        "thousandths (1-1000; gpus must be 1); shares on one GPU sum to at most 1000. null or "
        "1000: whole GPUs.",
    )
    topology: TopologyRequest | None = Field(
        default=None,
        description="All of the job's nodes in one domain of a topology level (added by optsched); "
        "null: anywhere.",
    )

    @model_validator(mode="after")
    def _running_and_sizes(self) -> Job:
        # the spec marks on_loan required (not optional) for running jobs: a producer that
        # leaves it out has not said whether the job may be reclaimed
        if self.state == "running" and "on_loan" not in self.model_fields_set:
            raise PydanticCustomError(
                "running_field",
                "a running job needs on_loan: true when it runs on capacity another tenant lends "
                "(as the last decision said), else false",
                {"field": "on_loan"},
            )
        lo, hi = self.size_range
        if lo < hi and (hi - lo) // self.gpus_step + 1 > MAX_ELASTIC_SIZES:
            raise PydanticCustomError(
                "limit",
                "at most {limit} sizes per elastic job ((max_gpus - min_gpus) // gpus_step + 1 "
                "is {got})",
                {"field": "max_gpus", "limit": MAX_ELASTIC_SIZES, "got": (hi - lo) // self.gpus_step + 1},
            )
        return self

    @property
    def is_fractional(self) -> bool:
        """Whether the job takes a share of one GPU (``gpu_milli`` below a whole GPU)."""
        return self.gpu_milli is not None and self.gpu_milli < MILLI_PER_GPU

    @property
    def is_elastic(self) -> bool:
        """Whether the job declares a size range (``min_gpus`` or ``max_gpus``) of more than one size."""
        lo, hi = self.min_gpus, self.max_gpus
        if lo is None and hi is None:
            return False  # the common case, asked for every job in every stage of a decision
        return (lo if lo is not None else self.gpus) < (hi if hi is not None else self.gpus)

    @property
    def size_range(self) -> tuple[int, int]:
        """(min, max) GPUs with the defaults (``gpus`` for an unset bound)."""
        lo = self.min_gpus if self.min_gpus is not None else self.gpus
        hi = self.max_gpus if self.max_gpus is not None else self.gpus
        return lo, hi

    def sizes(self) -> tuple[int, ...]:
        """Every size the job may run on, ascending (just ``gpus`` for a rigid job)."""
        lo, hi = self.size_range
        if lo >= hi:
            return (self.gpus,)
        return tuple(range(lo, hi + 1, self.gpus_step))

    @property
    def is_shareable(self) -> bool:
        """``shareable`` with the spec's default (true for best_effort); a fractional job shares
        its GPU by its share, never as an MPS pair."""
        if self.is_fractional:
            return False
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

    memory_gib: float = Field(
        gt=0,
        le=MAX_MEMORY_GIB,
        strict=True,
        allow_inf_nan=False,
        description="GPU memory the loaded model takes, GiB.",
    )
    load_s: dict[Name, Annotated[Seconds, Field(ge=0)]] | None = Field(
        default=None,
        max_length=MAX_GPU_TYPES,
        description="Measured seconds to load the model onto one GPU, per GPU type.",
    )
    params_b: float | None = Field(
        default=None,
        gt=0,
        le=MAX_MEMORY_GIB,
        strict=True,
        allow_inf_nan=False,
        description="Parameter count in billions (added by optsched, for the roofline predictor).",
    )


class Device(_Strict):
    """One GPU of the workflow serving pool."""

    node: Name = Field(description="Node id of the pool GPU.")
    gpu: int = Field(
        ge=0, lt=MAX_GPUS_PER_NODE, strict=True, description="Index of the GPU on the node, from 0."
    )
    resident: list[Name] = Field(
        default_factory=list,
        max_length=MAX_MODELS,
        description="Models loaded on the GPU now (keys of `workflows.models`).",
    )
    busy_until_s: Seconds = Field(
        default=0.0,
        description="When the GPU finishes the activation it runs now, seconds (ignored if in the past).",
    )
    lent_by: Name | None = Field(
        default=None,
        description="Cluster GPUs lent to the pool only (added by optsched): the tenant whose idle "
        "quota of the GPU's type the pool holds, as the last decision's `pool` said; null: a "
        "dedicated pool GPU.",
    )
    lent_since_s: Seconds | None = Field(
        default=None,
        description="Lent GPUs only (added by optsched): when the GPU joined the pool, seconds.",
    )

    def key(self) -> tuple[str, int]:
        return (self.node, self.gpu)


class Activation(_Strict):
    """One LLM call of an agent workflow."""

    id: Name = Field(description="Activation id, unique within its session.")
    model: Name = Field(description="The model the call runs (a key of `workflows.models`).")
    input_tokens: int = Field(ge=0, le=MAX_TOKENS, strict=True, description="Prompt tokens of the call.")
    output_tokens: int = Field(
        ge=0, le=MAX_TOKENS, strict=True, description="Tokens the call generates."
    )
    after: list[Name] = Field(
        default_factory=list,
        max_length=MAX_ACTIVATIONS,
        description="Ids of activations of the same session that must finish before this one starts.",
    )
    state: Literal["pending", "running", "done"] = Field(
        default="pending", description="pending, running or done."
    )
    device: GpuRef | None = Field(
        default=None, description="Running activations only: the pool GPU it runs on."
    )
    start_s: Seconds | None = Field(
        default=None, description="Running activations only: when it started, seconds."
    )


class Session(_Strict):
    """A multi-agent workflow session: a DAG of activations."""

    id: Name = Field(description="Unique session id.")
    tenant: Name = Field(description="Id of the tenant that owns the session.")
    arrival_s: Seconds = Field(description="When the session arrived, seconds; not after `now`.")
    activations: list[Activation] = Field(
        max_length=MAX_ACTIVATIONS, description="The LLM calls of the session and their dependencies."
    )


class PoolLending(_Strict):
    """Which cluster GPUs may join the serving pool under a burst, and when they go back (added
    by optsched; see "Pool lending" in ``docs/snapshot-format.md``)."""

    gpu_types: list[Name] = Field(
        min_length=1,
        max_length=MAX_GPU_TYPES,
        description="GPU types whose free cluster GPUs may be lent to the pool (keys of `gpu_types`).",
    )
    lenders: list[Name] | None = Field(
        default=None,
        max_length=MAX_TENANTS,
        description="Tenants whose idle quota may be lent to the pool; null: every tenant. A tenant's "
        "`lend_limit` bounds what it lends to tenants and to the pool together.",
    )
    min_size: GpuCount = Field(
        default=0, description="Fewest pool GPUs (dedicated plus lent): returns never go below it."
    )
    max_size: GpuCount | None = Field(
        default=None, description="Most pool GPUs (dedicated plus lent); null: no cap."
    )
    grow_drain_s: float = Field(
        default=40.0,
        gt=0,
        le=MAX_SECONDS,
        strict=True,
        allow_inf_nan=False,
        description="The pool grows while the workflow backlog's fluid drain time (predicted work "
        "over the pool's speed) exceeds this, seconds.",
    )
    return_drain_s: float = Field(
        default=25.0,
        ge=0,
        le=MAX_SECONDS,
        strict=True,
        allow_inf_nan=False,
        description="A lent GPU goes back once the drain time without it is at most this, seconds "
        "(below `grow_drain_s`: the hysteresis band).",
    )
    min_lend_s: float = Field(
        default=10.0,
        ge=0,
        le=MAX_SECONDS,
        strict=True,
        allow_inf_nan=False,
        description="A lent GPU stays at least this long, seconds, unless its owner needs it or its "
        "node is lost.",
    )
    session_value: float = Field(
        default=1.0,
        gt=0,
        le=MAX_FACTOR,
        strict=True,
        allow_inf_nan=False,
        description="Value of one second of one waiting session's latency against one GPU-second of "
        "cluster work: a GPU is lent when the session-seconds it saves over an epoch, times this, "
        "exceed the cluster GPU-seconds it forgoes plus its model-load cost.",
    )


class Workflows(_Strict):
    """The workflow part of a snapshot."""

    models: dict[Name, Model] = Field(
        default_factory=dict,
        max_length=MAX_MODELS,
        description="The models the pool can serve, by name.",
    )
    pool: list[Device] = Field(
        default_factory=list,
        max_length=MAX_TOTAL_GPUS,
        description="The GPUs that serve workflows only: no cluster job runs on them; dedicated ones "
        "count in no tenant's quota, lent ones (`lent_by`) in their lender's.",
    )
    sessions: list[Session] = Field(
        default_factory=list, max_length=MAX_SESSIONS, description="Workflow sessions with work left."
    )
    pool_lending: PoolLending | None = Field(
        default=None,
        description="Cluster GPUs that may join the pool from idle quota (added by optsched); null: "
        "the pool is fixed.",
    )


class Options(_Strict):
    """Solver options carried by the snapshot."""

    time_limit_s: float | None = Field(
        default=None,
        gt=0,
        le=MAX_TIME_LIMIT_S,
        strict=True,
        allow_inf_nan=False,
        description="Wall-clock seconds the whole decision may take (default 1).",
    )
    backend: Literal["auto", "highs", "cpsat", "highspy", "milp", "pulp", "greedy"] | None = Field(
        default=None,
        description="Solver backend; null or auto is the engine's default rule (highs when the model fits "
        "its work budget, else the labelled greedy plan); milp is an alias of highspy.",
    )
    seed: int | None = Field(
        default=None, ge=0, le=MAX_SEED, strict=True, description="Random seed of the solver."
    )
    num_workers: int | None = Field(
        default=None, ge=1, le=MAX_WORKERS, strict=True, description="Solver threads (added by optsched)."
    )
    extra: dict[Name, Any] | None = Field(
        default=None,
        max_length=MAX_FEATURES,
        description="Backend-specific native solver parameters, from an allow-list (added by optsched).",
    )
    lookahead_epochs: int | None = Field(
        default=None,
        ge=0,
        le=48,
        strict=True,
        description="Epochs (of the snapshot's `epoch_s`) the look-ahead plan covers: queued jobs get "
        "expected start times within it, and the queue follows the plan (added by optsched; default "
        "6; 0 turns the look-ahead and reservations off).",
    )
    reserve_min_gpus: int | None = Field(
        default=None,
        ge=1,
        le=MAX_GANG,
        strict=True,
        description="Smallest gang that may get a reservation: per GPU type, the longest-waiting "
        "pending gang of at least this many GPUs that cannot start now holds back GPUs for its "
        "predicted start (added by optsched; default 33).",
    )
    partitions: Partitions | None = Field(
        default=None,
        description="Split the epoch into this many parts solved in parallel and merged by a "
        "coordination step (added by optsched); auto: one part per 10,000 GPUs; null or 1: one "
        "model (see docs/partitioning.md).",
    )


class Snapshot(_Strict):
    """The input of one scheduling epoch (format 1)."""

    format: Annotated[Literal[1], BeforeValidator(_format)] = Field(
        description="Format version; only 1 is read."
    )
    now: Seconds = Field(description="The clock at the start of this epoch, seconds.")
    epoch_s: float = Field(
        default=60.0,
        gt=0,
        le=MAX_SECONDS,
        strict=True,
        allow_inf_nan=False,
        description="Seconds until the next decision: the horizon this decision plans for.",
    )
    gpu_types: dict[Name, GpuType] = Field(
        max_length=MAX_GPU_TYPES, description="The GPU types of the fleet, by name."
    )
    nodes: list[Node] = Field(
        max_length=MAX_NODES,
        description=f"The machines of the fleet (at most {MAX_NODES:,} of them, with at most "
        f"{MAX_TOTAL_GPUS:,} GPUs in all).",
    )
    tenants: list[Tenant] = Field(max_length=MAX_TENANTS, description="The tenants sharing the fleet.")
    groups: list[QuotaGroup] | None = Field(
        default=None,
        max_length=MAX_TENANTS,
        description="Quota groups above the tenants, forming a tree through their `parent` "
        "(added by optsched); null or empty: a flat list of tenants.",
    )
    jobs: list[Job] = Field(
        default_factory=list, max_length=MAX_JOBS, description="Pending and running GPU jobs."
    )
    workflows: Workflows | None = Field(
        default=None, description="Multi-agent workflow sessions on a serving pool, if any."
    )
    assurance_state: (
        Annotated[dict[Name, dict[str, Any]], AfterValidator(_assurance_state)] | None
    ) = Field(
        default=None,
        max_length=MAX_TENANTS,
        description="The previous decision's `assurance_state`, fed back unchanged; absent on the "
        "first epoch.",
    )
    priority_classes: dict[Name, ClassWeight] | None = Field(
        default=None,
        max_length=MAX_FEATURES,
        description="Weights of named priority classes for every tenant's jobs (added by optsched); "
        "a tenant's own table overrides a name.",
    )
    topology: Topology | None = Field(
        default=None,
        description="The levels of the network topology nodes name their place in (added by "
        "optsched); null: no topology.",
    )
    options: Options | None = Field(default=None, description="Solver options for this epoch.")

    @model_validator(mode="after")
    def _totals(self) -> Snapshot:
        total = sum(n.gpus for n in self.nodes)
        if total > MAX_TOTAL_GPUS:
            raise PydanticCustomError(
                "limit",
                "at most {limit} GPUs in all nodes together (got {got})",
                {"field": "nodes", "limit": MAX_TOTAL_GPUS, "got": total},
            )
        if self.workflows is not None:
            acts = sum(len(s.activations) for s in self.workflows.sessions)
            if acts > MAX_ACTIVATIONS:
                raise PydanticCustomError(
                    "limit",
                    "at most {limit} activations in all sessions together (got {got})",
                    {"field": "workflows.sessions", "limit": MAX_ACTIVATIONS, "got": acts},
                )
        if self.groups:
            _check_depth(self)
        return self


def _check_depth(snap: Snapshot) -> None:
    """At most ``MAX_GROUP_DEPTH`` groups above any tenant (unknown parents and cycles are left
    to :func:`optsched.engine.quota_tree.build_tree`, which names them)."""
    parent = {g.id: g.parent for g in snap.groups or ()}
    depth: dict[str, int] = {}
    for i, g in enumerate(snap.groups or ()):
        chain: list[str] = []
        cur: str | None = g.id
        while cur is not None and cur in parent and cur not in depth and cur not in chain:
            chain.append(cur)
            cur = parent[cur]
        base = depth.get(cur, 0) if cur is not None else 0
        for k, gid in enumerate(reversed(chain)):
            depth[gid] = base + k + 1
        if depth.get(g.id, 0) > MAX_GROUP_DEPTH:
            raise PydanticCustomError(
                "limit",
                "at most {limit} levels of quota groups",
                {"field": f"groups[{i}].parent", "limit": MAX_GROUP_DEPTH},
            )

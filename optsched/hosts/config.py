"""The Slurm adapter's configuration: a TOML file validated by pydantic.

Slurm has no notion of optsched's tenants, quotas or QoS targets; this file says how to map
Slurm's accounts and partitions onto tenants, which GPU types the ``gres`` type names stand for,
and how a job's QoS class is chosen. Every error names the field (``tenants[1].quota.a100:
unknown GPU type``); the command line exits 2 on a bad file.

Example (``docs/slurm.md`` has the whole reference)::

    cluster = "dev"
    epoch_s = 10
    time_limit_s = 1.0
    store = "state/optsched.db"

    [gpu_types.a100]            # the gres type name, as in gpu:a100:4
    memory_gib = 80
    speed = 1.0

    [[tenants]]
    id = "alpha"
    accounts = ["alpha"]        # jobs of these Slurm accounts belong to the tenant
    quota = { a100 = 4 }
    lend_limit = { a100 = 4 }
    qos = { max_queue_delay_s = 60, target = 0.95 }

    [qos]
    guaranteed = ["high"]       # Slurm QOS names whose jobs are guaranteed
    comment_prefix = "optsched:"  # --comment optsched:guaranteed overrides
    default = "best_effort"
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, ValidationError, model_validator

from optsched.engine.state import error_path
from optsched.errors import SnapshotError

QosClass = Literal["guaranteed", "best_effort"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GpuTypeConfig(_Strict):
    """One GPU type, keyed by its Slurm gres type name."""

    name: str | None = Field(
        default=None, description="The snapshot's gpu_type name; default: the gres name."
    )
    memory_gib: float = Field(gt=0, description="Memory of one GPU, GiB.")
    mps: bool = Field(default=False, description="Two jobs may share one GPU (needs Slurm's mps gres).")
    speed: float = Field(default=1.0, gt=0, description="Throughput relative to the reference GPU.")


class TenantQosConfig(_Strict):
    max_queue_delay_s: float = Field(ge=0, description="Longest wait of a guaranteed job, seconds.")
    target: float = Field(default=0.95, ge=0, le=1, description="Share of guaranteed jobs within it.")


class TenantConfig(_Strict):
    """A tenant and the Slurm accounts / partitions whose jobs are its own."""

    id: str = Field(min_length=1)
    accounts: list[str] = Field(default_factory=list, description="Slurm accounts of the tenant.")
    partitions: list[str] = Field(default_factory=list, description="Slurm partitions of the tenant.")
    quota: dict[str, NonNegativeInt] = Field(default_factory=dict, description="GPUs per gres type.")
    borrow_limit: dict[str, NonNegativeInt] | None = None
    lend_limit: dict[str, NonNegativeInt] | None = None
    qos: TenantQosConfig | None = None
    weight: float = Field(default=1.0, gt=0)
    default_qos: QosClass | None = Field(
        default=None,
        description="QoS class of this tenant's jobs when nothing else says; default [qos].default.",
    )

    @model_validator(mode="after")
    def _has_a_selector(self) -> TenantConfig:
        if not self.accounts and not self.partitions:
            raise ValueError("a tenant needs at least one of 'accounts' or 'partitions'")
        return self


class QosRule(_Strict):
    """How a job's QoS class is chosen: the comment tag first, then the Slurm QOS, then defaults."""

    guaranteed: list[str] = Field(default_factory=list, description="Slurm QOS names of guaranteed jobs.")
    best_effort: list[str] = Field(default_factory=list, description="Slurm QOS names of best-effort jobs.")
    comment_prefix: str = Field(
        default="optsched:", description="A comment 'optsched:guaranteed' or 'optsched:best_effort' decides."
    )
    default: QosClass = "best_effort"


class SlurmConfig(_Strict):
    """The whole adapter configuration."""

    cluster: str = Field(default="slurm", min_length=1, description="Cluster id in the store.")
    epoch_s: float = Field(default=30.0, gt=0, description="Seconds between decisions.")
    time_limit_s: float = Field(default=1.0, gt=0, description="Solver time limit per epoch.")
    backend: Literal["auto", "highs", "cpsat", "highspy", "milp", "pulp", "greedy"] = "auto"
    reserve_min_gpus: int | None = Field(
        default=None, ge=1, le=65536,
        description="The snapshot's options.reserve_min_gpus: the smallest gang the look-ahead "
        "reserves GPUs for (EASY backfilling); default: the engine's (33).",
    )
    store: str = Field(default="optsched-slurm.db", min_length=1, description="SQLite store path.")
    gpu_types: dict[str, GpuTypeConfig] = Field(min_length=1, description="By Slurm gres type name.")
    tenants: list[TenantConfig] = Field(min_length=1)
    qos: QosRule = Field(default_factory=QosRule)
    start_wait_s: float = Field(
        default=3.0,
        ge=0,
        description="How long a released job may take to show as running before it is re-held.",
    )
    free_wait_s: float = Field(
        default=5.0, ge=0, description="How long to wait for preempted jobs' GPUs to be free before starting."
    )
    publish_reasons: bool = Field(
        default=True,
        description="Write each started, preempted or queued job's reason (the first lines of "
        "`optsched explain`) to its Slurm AdminComment, when it changed.",
    )
    unmanaged: Literal["keep", "ignore"] = Field(
        default="keep",
        description="Running jobs of no tenant: 'keep' (their GPUs count as used) or 'ignore'.",
    )

    @model_validator(mode="after")
    def _cross_references(self) -> SlurmConfig:
        seen_ids: set[str] = set()
        owner: dict[tuple[str, str], str] = {}
        for i, t in enumerate(self.tenants):
            if t.id in seen_ids:
                raise ValueError(f"tenants[{i}].id: duplicate tenant '{t.id}'")
            seen_ids.add(t.id)
            for table in ("quota", "borrow_limit", "lend_limit"):
                for gres in getattr(t, table) or {}:
                    if gres not in self.gpu_types:
                        raise ValueError(f"tenants[{i}].{table}.{gres}: unknown GPU type (not in gpu_types)")
            for kind, names in (("account", t.accounts), ("partition", t.partitions)):
                for n in names:
                    if (kind, n) in owner:
                        raise ValueError(
                            f"tenants[{i}].{kind}s: '{n}' already belongs to tenant '{owner[kind, n]}'"
                        )
                    owner[kind, n] = t.id
        type_names: dict[str, str] = {}
        for gres, g in self.gpu_types.items():
            snap = g.name or gres
            if snap in type_names:
                raise ValueError(f"gpu_types.{gres}.name: '{snap}' is also the name of '{type_names[snap]}'")
            type_names[snap] = gres
        overlap = set(self.qos.guaranteed) & set(self.qos.best_effort)
        if overlap:
            raise ValueError(f"qos: Slurm QOS {sorted(overlap)} listed as both guaranteed and best_effort")
        return self

    def type_name(self, gres: str) -> str:
        """The snapshot gpu_type of a gres type name."""
        return self.gpu_types[gres].name or gres

    def gres_of(self, type_name: str) -> str:
        """The gres type name of a snapshot gpu_type."""
        for gres, g in self.gpu_types.items():
            if (g.name or gres) == type_name:
                return gres
        raise KeyError(type_name)


def parse_config(text: str, source: str = "config") -> SlurmConfig:
    """Parse and validate TOML text; :class:`SnapshotError` (bad input) names the field."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SnapshotError(source, f"not valid TOML: {exc}") from None
    try:
        return SlurmConfig.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = error_path(tuple(err["loc"]))
        msg = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
        more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
        path = f"{source}: {where}" if where else source
        raise SnapshotError(path, f"{msg}{more}") from None


def load_config(path: str | Path) -> SlurmConfig:
    """Read and validate a config file (errors are :class:`SnapshotError`, exit 2 on the CLI).

    A relative ``store`` path is taken relative to the config file's folder.
    """
    p = Path(path)
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise SnapshotError("", f"cannot read config '{path}': {exc}") from None
    cfg = parse_config(text, source=str(path))
    store = Path(cfg.store)
    if cfg.store != ":memory:" and not store.is_absolute():
        cfg = cfg.model_copy(update={"store": str(p.resolve().parent / store)})
    return cfg

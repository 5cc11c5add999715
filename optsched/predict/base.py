"""The predictor interface the engine reads its coefficients from."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from optsched.engine.state import ClusterState
    from optsched.schema.snapshot import Job


@dataclass(frozen=True)
class JobEstimate:
    """Predicted figures for one job.

    ``runtime_s`` is the total exclusive runtime on a speed-1.0 GPU; ``memory_gib`` the peak
    memory per GPU. ``*_source`` names where each came from: ``"model:<name>/<version>"``,
    ``"estimate"`` (the snapshot's own value), ``"default"`` (a conservative constant) or
    ``"oracle"`` (simulation only).
    """

    runtime_s: float
    memory_gib: float
    runtime_source: str
    memory_source: str


@dataclass(frozen=True)
class PairEstimate:
    """Predicted colocated speeds (colocated throughput / exclusive throughput, in (0, 1])."""

    host_speed: float
    guest_speed: float
    source: str


@dataclass(frozen=True)
class Predictions:
    """What a predictor said for the jobs of one snapshot."""

    jobs: dict[str, JobEstimate] = field(default_factory=dict)
    source: str = "fallback"


@runtime_checkable
class Predictor(Protocol):
    """Anything that can estimate job runtimes, memory and colocation speeds.

    Implementations must be deterministic: the same state gives the same predictions.
    """

    name: str

    def predict_jobs(self, state: ClusterState) -> Predictions:
        """Estimates for every job of the snapshot (pending and running)."""
        ...

    def predict_pair(self, state: ClusterState, host: Job, guest: Job) -> PairEstimate:
        """Colocated speeds of ``host`` and ``guest`` sharing GPUs through MPS."""
        ...

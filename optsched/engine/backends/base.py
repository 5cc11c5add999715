"""What every backend shares: parameters, statuses, results and the Backend protocol."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from optsched.engine.backends.names import DEFAULT_BACKEND, canonical_backend
from optsched.engine.objective import ObjectiveWeights

if TYPE_CHECKING:
    from optsched.engine.problem import Assignment, EpochProblem


WALL_CLOCK_HIT = "wall-clock limit hit"
"""What a backend's ``SolveResult.detail`` says when the wall clock, not its work limit,
ended the search (:func:`~optsched.solve_epoch` then answers with the labelled greedy plan)."""


class SolveStatus(StrEnum):
    """How a backend's solve ended."""

    OPTIMAL = "optimal"
    """Proven optimal (within the configured gap)."""
    FEASIBLE = "feasible"
    """A solution, not proven optimal (time limit)."""
    INFEASIBLE = "infeasible"
    """The model has no solution (a modelling bug: the empty decision is always feasible)."""
    NO_SOLUTION = "no_solution"
    """The limit was hit before any solution was found."""
    ERROR = "error"
    """The solver failed or returned something unexpected."""


@dataclass(frozen=True)
class SolveParams:
    """Backend-neutral knobs plus a backend-specific ``extra`` dict.

    ``time_limit_s`` is a hard promise for the whole :func:`~optsched.solve_epoch` call.
    ``backend`` is a backend's name, ``auto`` (the default rule,
    :data:`~optsched.engine.backends.DEFAULT_BACKEND`) or an alias, stored as the backend it
    names (``milp`` becomes ``highspy``).
    """

    backend: str = DEFAULT_BACKEND
    time_limit_s: float = 1.0
    seed: int = 0
    num_workers: int = 1
    extra: dict[str, Any] = field(default_factory=dict)
    objective: ObjectiveWeights = field(default_factory=ObjectiveWeights)
    """The objective's weights (``[objective]`` table of a preset)."""
    work_s: float | None = None
    """Deterministic work budget of the solver, in nominal seconds of this machine kind: each
    exact backend turns it into its own work limit (CP-SAT deterministic time, HiGHS nodes or
    iterations), so the answer does not depend on the machine's load. ``time_limit_s`` stays
    the wall-clock safety net. ``None``: the backend stops on the wall clock only."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "backend", canonical_backend(self.backend))

    @classmethod
    def from_toml(cls, path: str | Path) -> SolveParams:
        """Load a preset from ``solvers/<backend>/<name>.toml``.

        Raises
        ------
        ValueError
            For an unknown top-level key, naming it.
        """
        data = tomllib.loads(Path(path).read_text())
        allowed = {"backend", "time_limit_s", "seed", "num_workers", "extra", "objective"}
        for key in data:
            if key not in allowed:
                raise ValueError(f"{path}: unknown key '{key}' (allowed: {sorted(allowed)})")
        if "objective" in data:
            data["objective"] = ObjectiveWeights.from_dict(data["objective"], where=f"{path}: objective")
        return cls(**data)

    def with_(self, **changes: Any) -> SolveParams:
        return replace(self, **changes)

    def check(self) -> None:
        """The time knobs are numbers the backends can turn into limits: ``time_limit_s`` in
        ``(0, MAX_TIME_LIMIT_S]`` (the bound ``options.time_limit_s`` has), ``work_s`` ``None`` or
        finite and ``>= 0``. An infinite or huge limit overflowed the backends' node and
        iteration limits and ``select`` timeouts (a traceback, then the greedy plan).

        Raises
        ------
        ValueError
            Naming the knob and the value.
        """
        from optsched.schema.limits import MAX_TIME_LIMIT_S

        t = self.time_limit_s
        if isinstance(t, bool) or not isinstance(t, int | float) or not 0 < t <= MAX_TIME_LIMIT_S:
            raise ValueError(
                f"time_limit_s: a number of seconds > 0, got {t!r} (at most {MAX_TIME_LIMIT_S:g})"
            )
        w = self.work_s
        if w is not None and (
            isinstance(w, bool) or not isinstance(w, int | float) or not 0 <= w <= MAX_TIME_LIMIT_S
        ):
            raise ValueError(
                f"work_s: None or a number of seconds >= 0 and <= {MAX_TIME_LIMIT_S:g}, got {w!r}"
            )


def check_extra(extra: dict[str, Any], allowed: set[str], backend: str) -> None:
    """Reject a backend-specific option the backend does not know, naming it.

    Raises
    ------
    ValueError
        For the first key of ``extra`` not in ``allowed``.
    """
    for key in extra:
        if key not in allowed:
            raise ValueError(
                f"solver option '{key}' is not a known {backend} parameter (allowed: {sorted(allowed)})"
            )


@dataclass
class SolveResult:
    """What a backend returns."""

    status: SolveStatus
    backend: str
    seconds: float
    assignment: Assignment | None = None
    objective: float | None = None
    bound: float | None = None
    detail: str = ""

    @property
    def gap(self) -> float | None:
        if self.objective is None or self.bound is None:
            return None
        return abs(self.bound - self.objective) / max(1.0, abs(self.bound))


class Backend(Protocol):
    """Turns an :class:`~optsched.engine.problem.EpochProblem` into a :class:`SolveResult`."""

    name: ClassVar[str]

    @classmethod
    def is_available(cls) -> bool: ...

    def solve(
        self, problem: EpochProblem, params: SolveParams, hint: Assignment | None = None
    ) -> SolveResult: ...

"""CP-SAT backend: translates the neutral :class:`~optsched.formulation.LinearModel`.

Objective coefficients are scaled to integers (CP-SAT needs them) with a factor chosen so the
largest is about ``1e6``; the reported objective is recomputed in the original units. The
greedy assignment is passed as a hint. The deadline is kept with ``max_time_in_seconds`` plus
a timer thread that calls ``stop_search`` if the solver overshoots.
"""

from __future__ import annotations

import threading
import time
import warnings
from typing import Any, ClassVar

from optsched.backends.base import SolveParams, SolveResult, SolveStatus
from optsched.errors import NumericScaleWarning
from optsched.formulation import build_model, from_assignment, is_feasible, solved
from optsched.problem import Assignment, EpochProblem

SCALE_TARGET = 1e6
ALLOWED_EXTRA = {
    "num_search_workers",
    "linearization_level",
    "relative_gap_limit",
    "absolute_gap_limit",
    "cp_model_presolve",
    "symmetry_level",
    "log_search_progress",
    "search_branching",
    "interleave_search",
    "repair_hint",
    "fix_variables_to_their_hinted_value",
    "use_lns_only",
    "stop_after_first_solution",
}


def map_status(code: Any) -> SolveStatus:
    """CP-SAT's status -> :class:`SolveStatus` (``ERROR`` for anything unexpected)."""
    from ortools.sat.python import cp_model

    return {
        cp_model.OPTIMAL: SolveStatus.OPTIMAL,
        cp_model.FEASIBLE: SolveStatus.FEASIBLE,
        cp_model.INFEASIBLE: SolveStatus.INFEASIBLE,
        cp_model.UNKNOWN: SolveStatus.NO_SOLUTION,
        cp_model.MODEL_INVALID: SolveStatus.ERROR,
    }.get(code, SolveStatus.ERROR)


def check_extra(extra: dict[str, Any], allowed: set[str], backend: str) -> None:
    for key in extra:
        if key not in allowed:
            raise ValueError(
                f"solver option '{key}' is not a known {backend} parameter (allowed: {sorted(allowed)})"
            )


class CpSatBackend:
    name: ClassVar[str] = "cpsat"

    @classmethod
    def is_available(cls) -> bool:
        try:
            import ortools.sat.python.cp_model  # noqa: F401
        except ImportError:  # pragma: no cover
            return False
        return True

    def solve(
        self, problem: EpochProblem, params: SolveParams, hint: Assignment | None = None
    ) -> SolveResult:
        from ortools.sat.python import cp_model

        check_extra(params.extra, ALLOWED_EXTRA, self.name)
        t0 = time.monotonic()
        lin = build_model(problem)
        model = cp_model.CpModel()
        xs = [model.new_int_var(lin.lb[k], lin.ub[k], lin.names[k]) for k in range(lin.n)]
        for row in lin.rows:
            expr = sum(c * xs[v] for v, c in row.coefs.items())
            if row.lo == float("-inf"):
                model.add(expr <= int(row.hi))
            elif row.hi == float("inf"):
                model.add(expr >= int(row.lo))
            else:
                model.add_linear_constraint(expr, int(row.lo), int(row.hi))
        biggest = max((abs(c) for c in lin.obj), default=1.0) or 1.0
        smallest = min((abs(c) for c in lin.obj if c != 0), default=1.0)
        if biggest / smallest > 1e9:
            warnings.warn(
                f"objective coefficients span {biggest / smallest:.1e}; small ones are lost",
                NumericScaleWarning,
                stacklevel=2,
            )
        scale = SCALE_TARGET / biggest
        model.maximize(sum(round(c * scale) * xs[k] for k, c in enumerate(lin.obj) if round(c * scale) != 0))
        if hint is not None:
            x0 = from_assignment(lin, problem, hint)
            if is_feasible(lin, x0):
                for k, v in enumerate(x0):
                    model.add_hint(xs[k], v)
        solver = cp_model.CpSolver()
        budget = max(0.01, params.time_limit_s - (time.monotonic() - t0))
        solver.parameters.max_time_in_seconds = budget
        solver.parameters.num_workers = max(1, params.num_workers)
        solver.parameters.random_seed = params.seed
        solver.parameters.relative_gap_limit = 1e-4
        for key, value in params.extra.items():
            setattr(solver.parameters, key, value)
        timer = threading.Timer(budget + 0.05, solver.stop_search)
        timer.daemon = True
        timer.start()
        try:
            code = solver.solve(model)
        finally:
            timer.cancel()
        status = map_status(code)
        seconds = time.monotonic() - t0
        if status not in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE):
            return SolveResult(status, self.name, seconds, detail=solver.status_name(code))
        values = [solver.value(x) for x in xs]
        return solved(
            lin,
            problem,
            values,
            status,
            self.name,
            seconds,
            solver.best_objective_bound / scale,
            solver.status_name(code),
        )

"""CP-SAT backend: translates the neutral :class:`~optsched.engine.formulation.LinearModel`.

Objective coefficients are scaled to integers (CP-SAT needs them) with the smallest factor
that keeps every nonzero coefficient nonzero and every coefficient within 0.5 % of its value
(:func:`integer_objective`); the reported objective is recomputed in the original units. The
greedy assignment is passed as a hint.

Determinism: the search stops on CP-SAT's *deterministic time* (``max_deterministic_time``,
``DET_PER_S`` units per nominal second of ``params.work_s``), with a fixed worker count
(interleaved in one thread, so the order of work never depends on the machine's load) and a
fixed seed, so the same problem gives the same answer on an idle or a loaded machine. The wall
clock (``max_time_in_seconds`` plus a timer that calls ``stop_search``) is only a safety net;
when it stops the search the result's ``detail`` says ``wall-clock limit hit``.
"""

from __future__ import annotations

import math
import threading
import time
import warnings
from typing import Any, ClassVar

from optsched.engine.backends.base import SolveParams, SolveResult, SolveStatus, check_extra
from optsched.engine.backends.stdio import solver_output_to_stderr
from optsched.engine.formulation import build_model, from_assignment, is_feasible, solved
from optsched.engine.problem import Assignment, EpochProblem
from optsched.errors import NumericScaleWarning

DET_PER_S = 0.3
"""CP-SAT deterministic time units per nominal second of work (calibrated in
``docs/benchmarks.md``: on this 2-core machine kind one unit took about 3 s of wall time at Venus
and medium size with the interleaved workers below)."""
WORKERS = 4
"""Interleaved search workers (one thread; deterministic)."""
MAX_SCALED = 2**50
"""Largest scaled coefficient we accept (CP-SAT's objective is int64)."""
REL_PRECISION = 0.005
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
    "max_deterministic_time",
    "num_workers",
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


def integer_objective(coefs: list[float]) -> tuple[list[int], float, str | None]:
    """Integer coefficients ``round(c * scale)`` and ``scale``.

    ``scale`` is the smallest power of two that keeps every nonzero coefficient nonzero and
    within ``REL_PRECISION`` of its value; if that would pass ``MAX_SCALED``, the largest
    admissible scale is used and the returned message says how many coefficients were lost.
    """
    nonzero = [abs(c) for c in coefs if c != 0]
    if not nonzero:
        return [0] * len(coefs), 1.0, None
    smallest, biggest = min(nonzero), max(nonzero)
    need = 1.0 / (REL_PRECISION * smallest)
    scale = 2.0 ** math.ceil(math.log2(need))
    msg = None
    if biggest * scale > MAX_SCALED:
        scale = 2.0 ** math.floor(math.log2(MAX_SCALED / biggest))
    ints = [round(c * scale) for c in coefs]
    lost = sum(1 for c, k in zip(coefs, ints, strict=True) if c != 0 and k == 0)
    if lost:
        msg = f"objective coefficients span {biggest / smallest:.1e}: {lost} rounded to zero"
    return ints, scale, msg


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
        big = 2**62
        weighted_sum = cp_model.LinearExpr.weighted_sum
        for row in lin.rows:
            expr = weighted_sum([xs[v] for v in row.coefs], list(row.coefs.values()))
            lo = -big if row.lo == float("-inf") else int(row.lo)
            hi = big if row.hi == float("inf") else int(row.hi)
            model.add_linear_constraint(expr, lo, hi)
        ints, scale, lost = integer_objective(lin.obj)
        if lost:
            warnings.warn(lost, NumericScaleWarning, stacklevel=2)
        nz = [v for v, k in enumerate(ints) if k != 0]
        model.maximize(weighted_sum([xs[v] for v in nz], [ints[v] for v in nz]))
        rounding = sum(
            abs(c * scale - k) * max(abs(lin.lb[v]), abs(lin.ub[v]))
            for v, (c, k) in enumerate(zip(lin.obj, ints, strict=True))
        )
        if hint is not None:
            x0 = from_assignment(lin, problem, hint)
            if is_feasible(lin, x0):
                for k, v in enumerate(x0):
                    model.add_hint(xs[k], v)
        solver = cp_model.CpSolver()
        budget = max(0.01, params.time_limit_s - (time.monotonic() - t0))
        solver.parameters.max_time_in_seconds = budget
        if params.work_s is not None:
            solver.parameters.max_deterministic_time = max(0.001, params.work_s * DET_PER_S)
        workers = max(1, params.num_workers)
        if workers == 1:
            solver.parameters.num_workers = WORKERS
            solver.parameters.interleave_search = True
        else:  # parallel threads: faster on many cores, not reproducible under load
            solver.parameters.num_workers = workers
        solver.parameters.random_seed = params.seed
        solver.parameters.relative_gap_limit = 1e-4
        for key, value in params.extra.items():
            setattr(solver.parameters, key, value)
        stopped = threading.Event()

        def stop() -> None:
            stopped.set()
            solver.stop_search()

        timer = threading.Timer(budget + 0.05, stop)
        timer.daemon = True
        timer.start()
        try:
            with solver_output_to_stderr():
                code = solver.solve(model)
        finally:
            timer.cancel()
        status = map_status(code)
        seconds = time.monotonic() - t0
        # a search that ended unproven before its deterministic budget was spent was stopped by
        # the clock (CP-SAT's own max_time_in_seconds or the timer)
        wall = stopped.is_set() or (
            status not in (SolveStatus.OPTIMAL, SolveStatus.INFEASIBLE)
            and (params.work_s is None or solver.deterministic_time < params.work_s * DET_PER_S * 0.999)
        )
        detail = solver.status_name(code) + (" (wall-clock limit hit)" if wall else "")
        detail += f"; deterministic time {solver.deterministic_time:.3f}"
        if lost:
            detail += f"; {lost}"
        if status not in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE):
            return SolveResult(status, self.name, seconds, detail=detail)
        values = [solver.value(x) for x in xs]
        return solved(
            lin,
            problem,
            values,
            status,
            self.name,
            seconds,
            # a valid bound in original units: the scaled bound plus the largest rounding error
            (solver.best_objective_bound + rounding) / scale,
            detail,
        )

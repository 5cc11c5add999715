"""HiGHS through OR-Tools MathOpt: the default exact backend, in-process and deterministic.

OR-Tools bundles HiGHS, so this backend needs no extra package and no worker process (the
separate ``highspy`` build clashes with OR-Tools' symbols in one interpreter; the ``highspy``
backend runs it in a worker process instead). It translates the same neutral
:class:`~optsched.engine.formulation.LinearModel` as every other exact backend.

Determinism: HiGHS's branch and bound runs serially with a fixed seed and stops on a branch-and-bound *node
limit* derived from ``params.work_s`` (``NODES_PER_S`` nodes per nominal second), never on
measured time, so the same problem gives the same answer on an idle or a loaded machine. The
wall-clock ``time_limit`` is a safety net set to the time left in the call; when it ends the
search the result's ``detail`` says ``wall-clock limit hit``.
"""

from __future__ import annotations

import datetime
import math
import threading
import time
from typing import Any, ClassVar

from optsched.engine.backends.base import SolveParams, SolveResult, SolveStatus, check_extra
from optsched.engine.backends.stdio import solver_output_to_stderr
from optsched.engine.formulation import build_model, from_assignment, is_feasible, solved
from optsched.engine.problem import Assignment, EpochProblem

NODES_PER_S = 2000
"""Branch-and-bound nodes per nominal second of work (calibrated in ``docs/benchmarks.md``)."""
MIN_NODES = 50
REL_GAP = 1e-4
ALLOWED_EXTRA = {"mip_rel_gap", "node_limit", "presolve", "mip_heuristic_effort"}


def map_status(reason: Any, has_solution: bool) -> SolveStatus:
    """MathOpt's termination reason -> :class:`SolveStatus` (``ERROR`` for anything unexpected)."""
    from ortools.math_opt.python import mathopt

    tr = mathopt.TerminationReason
    if reason == tr.OPTIMAL:
        return SolveStatus.OPTIMAL
    if reason in (tr.INFEASIBLE, tr.INFEASIBLE_OR_UNBOUNDED):
        return SolveStatus.INFEASIBLE
    if reason in (tr.FEASIBLE, tr.NO_SOLUTION_FOUND):
        return SolveStatus.FEASIBLE if has_solution else SolveStatus.NO_SOLUTION
    return SolveStatus.ERROR


class HighsBackend:
    """HiGHS (bundled with OR-Tools) on the neutral model."""

    name: ClassVar[str] = "highs"

    @classmethod
    def is_available(cls) -> bool:
        try:
            from ortools.math_opt.python import mathopt  # noqa: F401
        except ImportError:  # pragma: no cover
            return False
        return True

    def solve(
        self, problem: EpochProblem, params: SolveParams, hint: Assignment | None = None
    ) -> SolveResult:
        from ortools.math_opt.python import mathopt
        from ortools.util.python.solve_interrupter import SolveInterrupter

        check_extra(params.extra, ALLOWED_EXTRA, self.name)
        t0 = time.monotonic()
        lin = build_model(problem)
        model = mathopt.Model(name="optsched-epoch")
        xs = [
            model.add_integer_variable(lb=lin.lb[k], ub=lin.ub[k], name=lin.names[k]) for k in range(lin.n)
        ]
        for row in lin.rows:
            expr = mathopt.fast_sum(c * xs[v] for v, c in row.coefs.items())
            lo = -float("inf") if row.lo == float("-inf") else row.lo
            model.add_linear_constraint(lb=lo, ub=row.hi, expr=expr, name=row.family)
        model.maximize(mathopt.fast_sum(c * xs[k] for k, c in enumerate(lin.obj) if c != 0))
        extra = dict(params.extra)
        nodes = int(extra.pop("node_limit", 0)) or None
        if nodes is None and params.work_s is not None:
            nodes = max(MIN_NODES, round(params.work_s * NODES_PER_S))
        budget = max(0.01, params.time_limit_s - (time.monotonic() - t0))
        sp = mathopt.SolveParameters(
            time_limit=datetime.timedelta(seconds=budget),
            random_seed=params.seed,
            relative_gap_tolerance=float(extra.pop("mip_rel_gap", REL_GAP)),
            node_limit=nodes,
        )
        for key, value in extra.items():
            if isinstance(value, bool):
                sp.highs.bool_options[key] = value
            elif isinstance(value, int):
                sp.highs.int_options[key] = value
            elif isinstance(value, float):
                sp.highs.double_options[key] = value
            else:
                sp.highs.string_options[key] = str(value)
        mp = None
        if hint is not None:
            x0 = from_assignment(lin, problem, hint)
            if is_feasible(lin, x0):
                mp = mathopt.ModelSolveParameters(
                    solution_hints=[mathopt.SolutionHint(variable_values=dict(zip(xs, x0, strict=True)))]
                )
        # HiGHS checks its own time limit only now and then: the interrupter is the safety net
        interrupter = SolveInterrupter()
        stopped = threading.Event()

        def stop() -> None:
            stopped.set()
            interrupter.interrupt()

        timer = threading.Timer(budget + 0.02, stop)
        timer.daemon = True
        timer.start()
        try:
            with solver_output_to_stderr():
                res = mathopt.solve(
                    model, mathopt.SolverType.HIGHS, params=sp, model_params=mp, interrupter=interrupter
                )
        finally:
            timer.cancel()
        seconds = time.monotonic() - t0
        has = res.has_primal_feasible_solution()
        status = map_status(res.termination.reason, has)
        limit = res.termination.limit
        wall = limit in (mathopt.Limit.TIME, mathopt.Limit.INTERRUPTED) or stopped.is_set()
        detail = str(res.termination.detail or res.termination.reason.name)
        if wall:
            detail += " (wall-clock limit hit)"
        elif limit is not None:
            detail += f" ({limit.name.lower()} limit {nodes})"
        if status not in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE):
            return SolveResult(status, self.name, seconds, detail=detail)
        sol = res.variable_values()
        values = [sol[x] for x in xs]
        bound: float | None = res.termination.objective_bounds.dual_bound
        if bound is None or not math.isfinite(bound):
            bound = None  # interrupted before the root LP gave a bound
        return solved(lin, problem, values, status, self.name, seconds, bound, detail)

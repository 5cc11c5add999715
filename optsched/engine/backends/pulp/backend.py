"""PuLP backend: translates the neutral :class:`~optsched.engine.formulation.LinearModel` into a PuLP
problem and solves it with the MILP solver named in ``params.extra["solver"]`` (default
``PULP_CBC_CMD``, the CBC binary that ships with PuLP; ``COIN_CMD``, ``HiGHS_CMD``,
``GUROBI_CMD``, ``CPLEX_CMD``, ``SCIP_CMD``... when installed).

``[extra]`` is checked against an allow-list (:data:`ALLOWED_EXTRA`) and against what the
chosen PuLP solver class accepts; an unknown key is an error naming it. The greedy warm start
is passed as initial values when the solver supports ``warmStart``.

Determinism: one thread (for CBC, no ``-threads`` option at all: CBC then searches in its main
thread, where ``-threads 1`` would start one search thread whose start can stall for 10 s),
and a deterministic work limit where the solver has one: a node limit
(``maxNodes``) of ``NODES_PER_S`` nodes per nominal second of ``params.work_s`` (or of
``time_limit_s / budget.WALL_SAFETY`` when the caller gives no work budget); for CBC also a fixed
random seed (``randomCbcSeed = params.seed + 1``: CBC reads 0 as "seed from the time of day").
``timeLimit`` (the wall clock) is only a safety net; when it ends the search ``detail`` says
``wall-clock limit hit``. PuLP reports no bound: an optimal answer gets the bound its relative
gap allows (``objective * (1 + gapRel)``), a feasible one none. A solver without a node limit
stops on the wall clock only, and ``detail`` says that too. ``HiGHS`` (PuLP's in-process
highspy interface) is refused: highspy and OR-Tools cannot share an interpreter; use the
``highspy`` backend or ``HiGHS_CMD``.

The PuLP problem is built and solved in a persistent worker process (``worker.py``, run by
:class:`~optsched.engine.backends.process.WorkerProcess`): PuLP waits for its solver binary
without a timeout, so a solver that overshoots its ``timeLimit`` is abandoned at the deadline by
killing the worker's process group, binary included, and the call still returns in time.
"""

from __future__ import annotations

import inspect
import re
import time
from typing import Any, ClassVar

from optsched.engine.backends.base import (
    WALL_CLOCK_HIT,
    SolveParams,
    SolveResult,
    SolveStatus,
    check_extra,
)
from optsched.engine.backends.process import WorkerProcess, ask
from optsched.engine.backends.pulp.worker import import_pulp as import_pulp
from optsched.engine.budget import default_work_s
from optsched.engine.formulation import (
    build_model,
    from_assignment,
    is_feasible,
    solved,
    to_assignment,
)
from optsched.engine.problem import Assignment, EpochProblem

DEFAULT_SOLVER = "PULP_CBC_CMD"
ALLOWED_EXTRA = {
    "solver",
    "msg",
    "threads",
    "gapRel",
    "gapAbs",
    "maxNodes",
    "presolve",
    "cuts",
    "strong",
    "warmStart",
}
"""Keys of ``[extra]``: ``solver`` picks the PuLP solver class; the others are passed to its
constructor (each only if that class takes it)."""
GENERIC_KEYS = {"msg", "threads", "gapRel", "gapAbs", "warmStart"}
"""Keys every PuLP solver takes, also those whose constructor only has ``**kwargs``."""
REFUSED_SOLVERS = {
    "HiGHS": "highspy cannot share an interpreter with OR-Tools; use backend 'highspy' or 'HiGHS_CMD'"
}
NODES_PER_S = 800.0
"""Branch-and-bound nodes per nominal second. Calibrated with CBC 2.10 (PuLP 3.3's binary, one
thread) on a 2-core machine of the kind the engine runs on, on Venus-size snapshots
(``optsched generate --size venus --seed 1,2,3,5,7``, the harder pre-class model): 760-1230
nodes per second after a root node of about 0.03 s."""
GAP_REL = 1e-4
"""Default relative gap, as for the other exact backends."""
CBC_SOLVERS = ("PULP_CBC_CMD", "COIN_CMD")
"""PuLP's solver classes that run CBC."""
WORKER = WorkerProcess("optsched.engine.backends.pulp.worker")
"""The PuLP worker of this Python process (PuLP and its solver binary run there)."""


def warm_up(wait: bool = True) -> None:
    """Start the worker process ahead of the first solve; with ``wait``, until PuLP is loaded."""
    WORKER.warm_up(wait)


def map_status(status: int, sol_status: int) -> SolveStatus:
    """PuLP's ``(LpProblem.status, LpProblem.sol_status)`` -> :class:`SolveStatus`.

    ``status`` is one of ``pulp.LpStatus`` (1 optimal, 0 not solved, -1 infeasible,
    -2 unbounded, -3 undefined), ``sol_status`` one of ``pulp.LpSolution`` (1 optimal,
    2 integer feasible, 0 none found, -1 infeasible, -2 unbounded). CBC stopped by a limit
    with an incumbent reports status 1 with sol_status 2, hence both are read.
    """
    pulp = import_pulp()

    if status == pulp.LpStatusUnbounded or sol_status == pulp.LpSolutionUnbounded:
        return SolveStatus.ERROR  # every variable is bounded: an unbounded answer is a bug
    if status == pulp.LpStatusInfeasible or sol_status == pulp.LpSolutionInfeasible:
        return SolveStatus.INFEASIBLE
    if status == pulp.LpStatusOptimal and sol_status == pulp.LpSolutionOptimal:
        return SolveStatus.OPTIMAL
    stopped = status in (pulp.LpStatusOptimal, pulp.LpStatusNotSolved)
    if stopped and sol_status == pulp.LpSolutionIntegerFeasible:
        return SolveStatus.FEASIBLE
    if status == pulp.LpStatusNotSolved and sol_status == pulp.LpSolutionNoSolutionFound:
        return SolveStatus.NO_SOLUTION
    return SolveStatus.ERROR


def work_s(params: SolveParams) -> float:
    """The deterministic work budget in nominal seconds."""
    return default_work_s(params.time_limit_s, params.work_s)


def solver_class(name: str) -> Any:
    """The PuLP solver class called ``name``.

    Raises
    ------
    ValueError
        For a name PuLP does not know or one this backend refuses, naming it.
    """
    pulp = import_pulp()

    if name in REFUSED_SOLVERS:
        raise ValueError(f"pulp solver '{name}' is not supported here: {REFUSED_SOLVERS[name]}")
    known = sorted(set(pulp.listSolvers()) - set(REFUSED_SOLVERS))
    if name not in known:
        raise ValueError(f"unknown pulp solver '{name}' (known: {known})")
    return getattr(pulp, name)


def accepted_keys(cls: Any) -> set[str]:
    """Constructor keywords of a PuLP solver class (plus the generic ones if it takes
    ``**kwargs``)."""
    params = inspect.signature(cls.__init__).parameters
    keys = {k for k, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        keys |= GENERIC_KEYS
    return keys


def check_options(extra: dict[str, Any]) -> tuple[str, Any, dict[str, Any]]:
    """``(solver name, class, constructor options)`` from ``[extra]``, every key checked."""
    check_extra(extra, ALLOWED_EXTRA, "pulp")
    name = str(extra.get("solver", DEFAULT_SOLVER))
    cls = solver_class(name)
    accepted = accepted_keys(cls)
    opts = {k: v for k, v in extra.items() if k != "solver"}
    for key in opts:
        if key not in accepted:
            raise ValueError(f"solver option '{key}' is not taken by pulp solver {name}")
    if opts.get("threads", 1) != 1:
        raise ValueError("solver option 'threads' must be 1 (a parallel search is not deterministic)")
    return name, cls, opts


_CBC_RESULT = re.compile(r"^Result - (.*)$", re.MULTILINE)


def cbc_result(log_text: str) -> str | None:
    """CBC's own stop reason (``Result - ...`` line of its log), if any."""
    found = _CBC_RESULT.findall(log_text)
    return found[-1].strip() if found else None


class PulpBackend:
    name: ClassVar[str] = "pulp"

    @classmethod
    def is_available(cls) -> bool:
        import importlib.util

        return importlib.util.find_spec("pulp") is not None

    def solve(
        self, problem: EpochProblem, params: SolveParams, hint: Assignment | None = None
    ) -> SolveResult:
        solver_name, cls, opts = check_options(params.extra)
        t0 = time.monotonic()
        deadline = t0 + params.time_limit_s
        lin = build_model(problem)
        accepted = accepted_keys(cls)
        warm = bool(opts.pop("warmStart", True)) and "warmStart" in accepted
        start = None
        if warm and hint is not None:
            x0 = from_assignment(lin, problem, hint)
            if is_feasible(lin, x0):
                start = x0
        work = work_s(params)
        node_limit: int | None = None
        if "maxNodes" in opts:
            node_limit = int(opts.pop("maxNodes"))
        elif "maxNodes" in accepted:
            node_limit = max(1, int(NODES_PER_S * work))
        kwargs: dict[str, Any] = {"msg": False, "gapRel": GAP_REL, **opts, "threads": 1}
        if solver_name in CBC_SOLVERS:
            # CBC searches in the calling thread unless told a thread count; with ``-threads 1``
            # it starts one search thread, and that start can sit in a 10 s timed wait (CBC
            # 2.10.3, about one solve in 75 on a busy 2-core machine: "Thread 0 used 0 times,
            # waiting to start 10.000116"), which held a 2 s call for 10 s
            del kwargs["threads"]
            kwargs["options"] = [f"randomCbcSeed {params.seed + 1}"]
        if start is not None:
            kwargs["warmStart"] = True
        if node_limit is not None:
            kwargs["maxNodes"] = node_limit
        job: dict[str, Any] = {
            **lin.arrays(),
            "start": start,
            "solver": solver_name,
            "kwargs": kwargs,
            "log": "logPath" in accepted,
        }
        answer = ask(WORKER, job, deadline, t0, self.name, solver_name)
        if isinstance(answer, SolveResult):
            return answer
        (kind, out), seconds = answer
        if kind != "ok":
            return SolveResult(SolveStatus.ERROR, self.name, seconds, detail=str(out))
        if out["unavailable"]:
            detail = f"{solver_name} is not available"
            return SolveResult(SolveStatus.ERROR, self.name, seconds, detail=detail)
        if out["error"] is not None:
            hit = f"; {WALL_CLOCK_HIT}" if out["solve_seconds"] >= 0.95 * out["wall"] else ""
            return SolveResult(
                SolveStatus.ERROR, self.name, seconds,
                detail=f"{solver_name} gave no solution ({out['error']}){hit}",
            )
        status = map_status(out["status"], out["sol_status"])
        detail = self._detail(
            solver_name, out, status, node_limit, work, out["solve_seconds"], out["wall"]
        )
        if status not in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE):
            return SolveResult(status, self.name, seconds, detail=detail)
        values = out["values"]
        bound = None
        if status == SolveStatus.OPTIMAL:
            # PuLP does not report the solver's bound; "optimal" means within the relative gap
            obj = to_assignment(lin, problem, values).objective(problem)
            # in the model's units (``solved`` adds the objective's constant)
            bound = obj - lin.offset + float(kwargs.get("gapRel") or 0.0) * abs(obj)
        return solved(lin, problem, values, status, self.name, seconds, bound, detail)

    @staticmethod
    def _detail(
        solver_name: str,
        out: dict[str, Any],
        status: SolveStatus,
        node_limit: int | None,
        work: float,
        solve_seconds: float,
        wall: float,
    ) -> str:
        pulp = import_pulp()
        status_text = pulp.LpStatus.get(out["status"], out["status"])
        solution_text = pulp.LpSolution.get(out["sol_status"], out["sol_status"])
        base = f"{solver_name}: {status_text} / {solution_text}"
        result = cbc_result(out["log"])
        if result is not None:
            base += f" ({result})"
            hit_wall = "time" in result.lower()
        else:
            hit_wall = status != SolveStatus.OPTIMAL and solve_seconds >= 0.95 * wall
        if hit_wall:
            return f"{base}; {WALL_CLOCK_HIT}"
        if node_limit is None:
            return f"{base}; {solver_name} has no node limit here: it stops on the wall clock only"
        if status == SolveStatus.OPTIMAL:
            return base
        return f"{base}; stopped at the deterministic work limit ({node_limit} nodes = {work:.3f} nominal s)"

"""HiGHS MILP backend over the neutral model, in a persistent worker process.

The worker (``worker.py``, run by :class:`~optsched.engine.backends.process.WorkerProcess`) is
started once per Python process and reused; a solve that runs past the deadline is abandoned
by killing the worker (a fresh one starts on the next call), so
``time_limit_s`` holds even when HiGHS overshoots its own limit.

Determinism: the search runs in one thread with ``random_seed = params.seed`` and stops on a
deterministic work budget, ``params.work_s`` nominal seconds (when the caller gives none,
``time_limit_s / budget.WALL_SAFETY``), counted by the worker's :class:`WorkMeter`. The same problem
and parameters then give the same answer from a fresh or a warm process, on an idle or a loaded
machine. The wall clock (HiGHS's ``time_limit``, then killing the worker) is only a safety net;
when it ends the search the result's ``detail`` says ``wall-clock limit hit``.
"""

from __future__ import annotations

import importlib.util
import time
from typing import Any, ClassVar

from optsched.engine.backends.base import (
    WALL_CLOCK_HIT,
    SolveParams,
    SolveResult,
    SolveStatus,
    check_extra,
)
from optsched.engine.backends.highspy.worker import ALLOWED_OPTIONS, ROOT_CHECKS_PER_S, TREE_CHECKS_PER_S
from optsched.engine.backends.process import WorkerProcess, ask
from optsched.engine.budget import default_work_s
from optsched.engine.formulation import build_model, from_assignment, is_feasible, solved
from optsched.engine.problem import Assignment, EpochProblem

WORKER = WorkerProcess("optsched.engine.backends.highspy.worker")
"""The HiGHS worker of this Python process."""


def map_status(model_status: str, has_solution: bool) -> SolveStatus:
    """HiGHS model status text -> :class:`SolveStatus`."""
    if model_status == "Optimal":
        return SolveStatus.OPTIMAL
    if model_status == "Infeasible":
        return SolveStatus.INFEASIBLE
    if model_status in (
        "Time limit reached",
        "Iteration limit reached",
        "Interrupted by user",
        "Solution limit reached",
        "Objective bound",
        "Objective target",
    ):
        return SolveStatus.FEASIBLE if has_solution else SolveStatus.NO_SOLUTION
    return SolveStatus.ERROR


def warm_up(wait: bool = True) -> None:
    """Start the worker process ahead of the first solve (it takes a fraction of a second);
    with ``wait``, block until it has HiGHS loaded."""
    WORKER.warm_up(wait)


def work_s(params: SolveParams) -> float:
    """The deterministic work budget in nominal seconds (see ``worker.WorkMeter``)."""
    return default_work_s(params.time_limit_s, params.work_s)


def describe_stop(payload: dict[str, Any]) -> str:
    """What ended the search, for ``SolveResult.detail``."""
    status = str(payload["model_status"])
    if payload.get("stop") == "wall_clock":
        return f"{status} ({WALL_CLOCK_HIT})"
    if payload.get("stop") == "work":
        root, tree = payload["checks"]
        return (
            f"stopped at the deterministic work limit ({payload['work_s']:.3f} nominal s: "
            f"{root} root + {tree} tree checks at {ROOT_CHECKS_PER_S:g}/{TREE_CHECKS_PER_S:g} per s, "
            f"{payload['nodes']} nodes)"
        )
    return status


class HighspyBackend:
    name: ClassVar[str] = "highspy"

    @classmethod
    def is_available(cls) -> bool:
        return importlib.util.find_spec("highspy") is not None

    def solve(
        self, problem: EpochProblem, params: SolveParams, hint: Assignment | None = None
    ) -> SolveResult:
        check_extra(params.extra, ALLOWED_OPTIONS, self.name)
        t0 = time.monotonic()
        deadline = t0 + params.time_limit_s
        lin = build_model(problem)
        start = None
        if hint is not None:
            x0 = from_assignment(lin, problem, hint)
            if is_feasible(lin, x0):
                start = x0
        job: dict[str, Any] = {
            **lin.arrays(),
            "start": start,
            "seed": params.seed,
            "options": dict(params.extra),
            "work_s": work_s(params),
        }
        answer = ask(WORKER, job, deadline, t0, self.name, "HiGHS")
        if isinstance(answer, SolveResult):
            return answer
        (kind, payload), seconds = answer
        if kind != "ok":
            return SolveResult(SolveStatus.ERROR, self.name, seconds, detail=str(payload))
        status = map_status(payload["model_status"], payload["x"] is not None)
        detail = describe_stop(payload)
        if payload["x"] is None or status not in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE):
            return SolveResult(status, self.name, seconds, detail=detail)
        values = [round(v) for v in payload["x"]]
        return solved(lin, problem, values, status, self.name, seconds, payload["bound"], detail)

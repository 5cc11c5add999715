"""Determinism under load: when the wall-clock safety net stops a solver (or leaves it no time),
the decision is the deterministic greedy plan with one fixed label, whatever the solver had
found by then, so two runs of the same input give the same decision however loaded the machine.

Load is simulated deterministically: each backend is handed an exhausted wall clock (its net
fires at once) with a work budget far beyond it, and the engine's own budget is told that no
wall time is left; no test depends on how fast this machine is."""

from __future__ import annotations

import json
from typing import Any

import pytest

import optsched
from optsched.engine import budget as budget_mod
from optsched.engine.backends import get_backend
from optsched.engine.backends.base import SolveParams, SolveResult
from optsched.engine.budget import WALL_CLOCK_FALLBACK, Budget
from optsched.engine.check import check_decision
from optsched.engine.problem import EpochProblem
from optsched.engine.state import ClusterState, load_state
from optsched.instances import generate
from optsched.predict.fallback import EstimatePredictor

PRED = EstimatePredictor()
EXACT = ["highs", "cpsat", "milp", "pulp"]


def _decision(d: optsched.Decision) -> str:
    """The decision as JSON without its two timing fields (``solver.seconds``, ``stage_seconds``)."""
    data = json.loads(d.model_dump_json(exclude_none=True))
    data["solver"].pop("seconds")
    data["solver"].pop("stage_seconds")
    return json.dumps(data, sort_keys=True)


def _hurry(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """The backend's wall clock is spent before it starts; its deterministic budget is not."""
    cls = type(get_backend(name))
    real = cls.solve

    def hurried(self: Any, problem: EpochProblem, params: SolveParams, hint: Any = None) -> SolveResult:
        return real(self, problem, params.with_(time_limit_s=0.001, work_s=50.0), hint)

    monkeypatch.setattr(cls, "solve", hurried)


def _solve(state: ClusterState, backend: str) -> optsched.Decision:
    return optsched.solve_epoch(state, params=SolveParams(backend=backend, time_limit_s=5.0), predictor=PRED)


@pytest.fixture(scope="module")
def venus() -> ClusterState:
    return load_state(generate("venus", 7))


@pytest.mark.parametrize("name", EXACT)
def test_a_wall_clock_stop_gives_the_same_labelled_greedy_plan_every_time(
    name: str, venus: ClusterState, monkeypatch: pytest.MonkeyPatch
) -> None:
    greedy = _solve(venus, "greedy")
    _hurry(monkeypatch, name)
    first, second = _solve(venus, name), _solve(venus, name)
    assert _decision(first) == _decision(second)
    assert first.status == "fallback"
    assert first.solver.backend == "greedy"
    assert first.solver.fallback_reason == WALL_CLOCK_FALLBACK
    assert first.solver.status_detail is None and first.solver.bound is None
    assert check_decision(venus, first) == []
    # the plan is the greedy backend's, whatever the solver had found when it was stopped
    for field in ("start", "preempt", "resize", "loans", "queue"):
        assert getattr(first, field) == getattr(greedy, field), field


def test_no_wall_time_left_and_a_stopped_solver_give_one_decision(
    venus: ClusterState, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the two ways the net fires on a loaded machine (before the solver starts, or during its
    # search) must not be told apart by the decision either
    with monkeypatch.context() as m:
        _hurry(m, "highs")
        stopped = _solve(venus, "highs")
    with monkeypatch.context() as m:
        m.setattr(Budget, "solver_wall_s", lambda self: 0.0)
        no_time = _solve(venus, "highs")
    assert no_time.solver.fallback_reason == WALL_CLOCK_FALLBACK
    assert _decision(no_time) == _decision(stopped)


def test_a_solver_within_its_work_budget_is_not_the_fallback(venus: ClusterState) -> None:
    # the other side of the rule: with wall time to spare (a limit no load reaches, the default
    # limit's work budget) the exact answer stands
    work = Budget(1.0, len(venus.snapshot.jobs)).solver_work_s
    params = SolveParams(backend="highs", time_limit_s=300.0, work_s=work)
    d = optsched.solve_epoch(venus, params=params, predictor=PRED)
    assert d.status in ("optimal", "feasible")
    assert d.solver.backend == "highs" and d.solver.fallback_reason is None


def test_the_budget_hands_out_shares_of_the_limit_without_the_clock() -> None:
    b = Budget(2.0, jobs=1000, workflows=False, t0=0.0)
    assert b.deadline == 2.0
    assert b.solver_work_s == pytest.approx(0.6 * 2.0 - 40e-6 * 1000)
    assert b.reserve_s == pytest.approx(0.1 * 2.0 + 150e-6 * 1000)
    # past 1,000 jobs each further job keeps 60 us
    assert Budget(1.0, jobs=3000, t0=0.0).reserve_s == pytest.approx(0.1 + 150e-6 * 1000 + 60e-6 * 2000)
    assert b.workflow_wall_s == 0.0
    assert b.part_limit_s == pytest.approx(1.4)
    assert b.lookahead_work_s == pytest.approx(0.1)
    wf = Budget(2.0, jobs=1000, workflows=True, t0=0.0)
    assert wf.solver_work_s == pytest.approx((0.6 - 0.4) * 2.0 - 40e-6 * 1000)
    assert wf.workflow_wall_s == pytest.approx(0.8) and wf.workflow_work_s == pytest.approx(0.4)
    assert Budget(1.0, jobs=10**6, t0=0.0).solver_work_s == 0.02  # never below the floor
    # past 3,000 jobs each further job takes 130 us of the work (10,000 GPUs: 10,662 jobs)
    assert Budget(1.0, jobs=3000, t0=0.0).solver_work_s == pytest.approx(0.6 - 40e-6 * 3000)
    assert Budget(3.0, jobs=10_662, t0=0.0).solver_work_s == pytest.approx(
        1.8 - 40e-6 * 3000 - 130e-6 * 7662)
    assert Budget(1.0, work_s=3.0, t0=0.0).solver_work_s == 3.0  # an explicit budget wins


def test_the_reserve_after_the_solver_stretches_with_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """The solver's wall-clock net keeps the stages after it inside the limit on a loaded
    machine: their reserve is stretched by wall time over CPU time since the call began."""
    clock = {"wall": 10.0, "cpu": 5.0}
    monkeypatch.setattr(budget_mod.time, "monotonic", lambda: clock["wall"])
    monkeypatch.setattr(budget_mod.time, "process_time", lambda: clock["cpu"])
    b = Budget(2.0, jobs=1000, t0=10.0, cpu0=5.0)
    assert b.slowdown() == 1.0  # nothing measured yet
    clock.update(wall=10.4, cpu=5.1)  # 0.4 s of wall for 0.1 s of CPU: a 4x slower machine
    assert b.slowdown() == pytest.approx(4.0)
    assert b.solver_wall_s() == pytest.approx(2.0 - 0.4 - 4.0 * b.reserve_s)
    clock.update(wall=10.2, cpu=5.2)  # idle: as much CPU as wall
    assert b.slowdown() == 1.0
    assert b.solver_wall_s() == pytest.approx(2.0 - 0.2 - b.reserve_s)
    clock.update(wall=20.0, cpu=5.1)
    assert b.slowdown() == budget_mod.MAX_SLOWDOWN  # never stretched past the cap
    clock.update(wall=10.0, cpu=5.6)  # threads: more CPU than wall is never below 1
    assert b.slowdown() == 1.0


@pytest.mark.parametrize("late", [True, False])
def test_cbc_that_writes_no_solution_is_a_wall_clock_stop_only_when_the_clock_ran_out(
    late: bool, venus: ClusterState, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CBC stopped by a tiny time limit can exit before writing its solution file, and PuLP then
    raises: that is the wall-clock case (the fixed label) when the limit was spent, a solver
    error (named) when it was not."""
    from optsched.engine.backends.pulp import backend as pulp_backend

    def no_solution(job: dict[str, Any], deadline: float) -> tuple[str, Any]:
        # what the PuLP worker answers when PuLP raised PulpSolverError after the solver ran
        # ``spent`` of its ``wall`` seconds
        wall = 1.0
        spent = 1.05 * wall if late else 0.1 * wall
        error = "Pulp: Error while trying to execute"
        return "ok", {"unavailable": False, "error": error, "solve_seconds": spent, "wall": wall}

    monkeypatch.setattr(pulp_backend.WORKER, "call", no_solution)
    d = _solve(venus, "pulp")
    assert d.status == "fallback"
    assert not check_decision(venus, d)
    if late:
        assert d.solver.fallback_reason == WALL_CLOCK_FALLBACK
    else:
        assert d.solver.fallback_reason is not None
        assert "gave no solution" in d.solver.fallback_reason
        assert d.solver.fallback_reason != WALL_CLOCK_FALLBACK


def test_a_call_past_its_limit_warns_on_the_log_and_keeps_its_decision(
    venus: ClusterState, caplog: pytest.LogCaptureFixture
) -> None:
    # a limit no pipeline meets: the labelled greedy plan comes late, and the log (not the
    # decision, which stays the same on any machine) says so and what to do
    with caplog.at_level("WARNING", logger="optsched"):
        d = optsched.solve_epoch(venus, params=SolveParams(time_limit_s=1e-4), predictor=PRED)
    assert d.status == "fallback" and d.solver.fallback_reason == WALL_CLOCK_FALLBACK
    assert d.solver.seconds > 1e-4
    warned = [r.getMessage() for r in caplog.records if "over the time limit" in r.getMessage()]
    assert len(warned) == 1 and "raise time_limit_s" in warned[0]
    assert f"({len(venus.snapshot.jobs)} jobs)" in warned[0]
    assert not any("over the time limit" in n for n in d.solver.notes)
    assert check_decision(venus, d) == []

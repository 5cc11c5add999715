"""The planner and every baseline return plans that pass invariant 6, within the deadline."""

from __future__ import annotations

import time

import pytest

from optsched.engine.workflows.check import check_workflow_plan
from optsched.engine.workflows.planner import PlannerConfig, plan_workflows
from optsched.schema.decision import WorkflowPlan
from optsched.sim.workflows.baselines import ALL_POLICIES, get_policy
from tests.engine.workflows.conftest import random_snapshot


@pytest.mark.parametrize("seed", range(6))
def test_planner_plans_pass_invariant_6(seed: int) -> None:
    state = random_snapshot(seed)
    plan = plan_workflows(state, time_limit_s=1.0, seed=seed)
    assert check_workflow_plan(state, plan) == []
    planned = {(u.session, a) for u in plan.units for a in u.activations}
    pending = {
        (s.id, a.id)
        for s in state.snapshot.workflows.sessions  # type: ignore[union-attr]
        for a in s.activations
        if a.state == "pending"
    }
    assert planned == pending


@pytest.mark.parametrize("name", ALL_POLICIES)
def test_every_policy_passes_invariant_6(name: str) -> None:
    for seed in (11, 12):
        state = random_snapshot(seed, n_sessions=5)
        plan = get_policy(name, planner_config=PlannerConfig(window=16))(state, 0.5, seed)
        assert check_workflow_plan(state, plan) == [], name


def test_planner_is_deterministic() -> None:
    state = random_snapshot(3)
    cfg = PlannerConfig(window=12)
    a = plan_workflows(state, time_limit_s=2.0, seed=1, config=cfg)
    b = plan_workflows(state, time_limit_s=2.0, seed=1, config=cfg)
    assert a.model_dump(exclude={"notes"}) == b.model_dump(exclude={"notes"})


def test_planner_respects_a_tiny_deadline_with_a_labelled_fallback() -> None:
    state = random_snapshot(4, n_sessions=10)
    t = time.monotonic()
    plan = plan_workflows(state, time_limit_s=0.001, seed=0)
    assert time.monotonic() - t < 0.5
    assert plan.status == "fallback"
    assert check_workflow_plan(state, plan) == []


def test_planner_uses_cpsat_when_time_allows() -> None:
    state = random_snapshot(5, n_sessions=3)
    plan = plan_workflows(state, time_limit_s=2.0, seed=0, config=PlannerConfig(window=20))
    assert plan.status in ("optimal", "feasible")
    assert any("CP-SAT" in n for n in plan.notes)


def test_fusion_happens_for_map_siblings() -> None:
    state = random_snapshot(6, n_sessions=4, running=False, scenario="mapreduce")
    plan = plan_workflows(state, time_limit_s=1.0, seed=0)
    assert check_workflow_plan(state, plan) == []
    assert any(len(u.activations) > 1 for u in plan.units)


def test_no_workflow_work_gives_empty_plan() -> None:
    state = random_snapshot(7, n_sessions=1)
    wf = state.snapshot.workflows
    assert wf is not None
    for s in wf.sessions:
        for a in s.activations:
            a.state = "done"
            a.device = None
            a.start_s = None
    plan = plan_workflows(state, time_limit_s=0.5)
    assert isinstance(plan, WorkflowPlan)
    assert plan.units == []

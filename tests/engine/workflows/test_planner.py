"""The planner and every baseline return plans that pass invariant 6, within the deadline."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

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


ROOT = Path(__file__).resolve().parents[3]
_PLAN_IN_FRESH_INTERPRETER = (
    "from pathlib import Path\n"
    "from optsched.engine.state import load_state\n"
    "from optsched.engine.workflows.planner import plan_workflows\n"
    "state = load_state(Path('tests/data/workflows/mapreduce_seed1.json').read_text())\n"
    # deterministic work binds long before the wall-clock safety net
    "plan = plan_workflows(state, time_limit_s=120.0, work_s=1.0, seed=0)\n"
    "print(plan.model_dump_json(exclude={'notes'}))\n"
)


def test_planner_plan_does_not_depend_on_the_string_hash_seed() -> None:
    # the CP-SAT model is built in the same order in every interpreter (a set of activation
    # keys iterated in hash order once gave two different plans for hash seeds 1 and 2)
    plans = []
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        proc = subprocess.run(
            [sys.executable, "-c", _PLAN_IN_FRESH_INTERPRETER],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        plans.append(proc.stdout.strip().splitlines()[-1])
    assert '"units":[]' not in plans[0]
    assert plans[0] == plans[1]


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

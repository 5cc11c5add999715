"""Every shipped workflow snapshot loads and gets a plan that passes invariant 6."""

from __future__ import annotations

from pathlib import Path

import pytest

from optsched.engine.state import load_state
from optsched.engine.workflows.check import check_workflow_plan
from optsched.engine.workflows.planner import PlannerConfig, plan_workflows

FILES = sorted((Path(__file__).parents[3] / "instances" / "workflows").glob("*.json"))


def test_instances_exist() -> None:
    assert len(FILES) >= 3


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_instance_plans(path: Path) -> None:
    state = load_state(path.read_text())
    plan = plan_workflows(state, time_limit_s=1.0, seed=0, config=PlannerConfig(window=12))
    assert check_workflow_plan(state, plan) == []
    assert plan.units

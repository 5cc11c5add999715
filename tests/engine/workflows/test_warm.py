"""Which models stay warm: the keep-warm rule of the planner's greedy on small made-up pools."""

from __future__ import annotations

from typing import Any

import pytest

from optsched.engine.state import ClusterState, load_state
from optsched.engine.workflows.check import check_workflow_plan
from optsched.engine.workflows.greedy import OURS_GREEDY, list_schedule
from optsched.engine.workflows.problem import build_workflow_problem
from optsched.engine.workflows.warm import WARM_WINDOW_S, model_arrival_rate, next_use_gap_s
from optsched.schema.decision import WorkflowPlan

NOW = 500.0
SMALL, MID = "llama-3.2-1b", "llama-3.1-8b"
LOAD = {SMALL: 1.0, MID: 5.0}


def _session(sid: str, arrival: float, model: str, state: str = "done") -> dict[str, Any]:
    return {
        "id": sid,
        "tenant": "t",
        "arrival_s": arrival,
        "activations": [
            {"id": "a", "model": model, "input_tokens": 1000, "output_tokens": 200, "state": "done"},
            {"id": "b", "model": model, "input_tokens": 1000, "output_tokens": 200, "state": state,
             "after": ["a"]},
        ],
    }


def _state(sessions: list[dict[str, Any]], resident: list[list[str]]) -> ClusterState:
    """One h100 pool GPU per entry of ``resident``, idle, with those models loaded."""
    return load_state(
        {
            "format": 1,
            "now": NOW,
            "gpu_types": {"h100": {"memory_gib": 80}},
            "nodes": [{"id": "p", "gpu_type": "h100", "gpus": len(resident)}],
            "tenants": [{"id": "t"}],
            "workflows": {
                "models": {
                    SMALL: {"memory_gib": 3.0, "params_b": 1.2, "load_s": {"h100": LOAD[SMALL]}},
                    MID: {"memory_gib": 18.5, "params_b": 8.0, "load_s": {"h100": LOAD[MID]}},
                },
                "pool": [{"node": "p", "gpu": g, "resident": r} for g, r in enumerate(resident)],
                "sessions": sessions,
            },
        }
    )


def _plan(state: ClusterState) -> WorkflowPlan:
    prob = build_workflow_problem(state)
    plan = list_schedule(prob, OURS_GREEDY).to_plan(prob, "feasible")
    assert check_workflow_plan(state, plan) == []
    return plan


def _evictions(plan: WorkflowPlan) -> list[tuple[int, str, float]]:
    return sorted((a.device.gpu, a.model, a.at_s) for a in plan.model_actions if a.action == "evict")


def _recent(n: int, model: str) -> list[dict[str, Any]]:
    """``n`` sessions inside the rate window that use ``model``; one activation still pending,
    so the planner has work (it runs on GPU 0, where ``model`` is resident)."""
    out = [_session(f"r{i}", NOW - 1.0 - 0.5 * i, model) for i in range(n)]
    out[0] = _session("r0", NOW - 1.0, model, state="pending")
    return out


def test_gap_is_holders_over_the_arrival_rate() -> None:
    assert next_use_gap_s(2, 0.5) == 4.0
    assert next_use_gap_s(1, 0.0) == float("inf")
    state = _state([_session("old", NOW - WARM_WINDOW_S - 1.0, MID), *_recent(3, SMALL)], [[SMALL]])
    # the old session is outside the window; three recent ones use the small model
    assert model_arrival_rate(build_workflow_problem(state)) == {SMALL: 3 / WARM_WINDOW_S}


def test_a_model_no_recent_session_uses_is_evicted_now() -> None:
    """GPU 1 holds the 8B model, and no session of the last 30 s uses it: its next use is
    unknown (infinitely far), so it goes at once. GPU 0 holds the small model that 31 recent
    sessions use (gap 30 / 31 s, under its 1 s reload): kept."""
    state = _state(_recent(31, SMALL), [[SMALL], [MID]])
    plan = _plan(state)
    assert [u.device.gpu for u in plan.units] == [0]
    assert _evictions(plan) == [(1, MID, NOW)]


@pytest.mark.parametrize(("n", "kept"), [(6, False), (7, True)])
def test_kept_when_the_reload_costs_more_than_waiting(n: int, kept: bool) -> None:
    """The 8B model (5 s reload) on an idle GPU; ``n`` sessions that use it arrived in the
    last 30 s. Its predicted next use is 30 / n s away: 5.0 s for six (not before the reload
    cost is repaid: evicted), 4.3 s for seven (kept warm)."""
    state = _state(_recent(n, MID), [[MID], [MID]])
    plan = _plan(state)
    # GPU 0 runs the pending call; both GPUs end the plan with the model: two holders, so the
    # gap is 2 x 30 / n: 10 s for six, 8.6 s for seven -- both past 5 s, both evicted
    assert {(g, m) for g, m, _ in _evictions(plan)} == {(0, MID), (1, MID)}
    state1 = _state(_recent(n, MID), [[MID]])
    plan1 = _plan(state1)
    # one holder: the gap is 30 / n
    assert _evictions(plan1) == ([] if kept else [(0, MID, plan1.units[0].end_s)])


def test_a_model_is_evicted_only_after_its_last_planned_use() -> None:
    """A pending call on the 8B model, no recent arrival: the model goes right after that call
    ends, not before (the eviction is at the unit's end)."""
    sessions = [_session("s", NOW - 100.0, MID, state="pending")]
    state = _state(sessions, [[MID]])
    plan = _plan(state)
    assert len(plan.units) == 1
    assert _evictions(plan) == [(0, MID, plan.units[0].end_s)]


def test_baselines_keep_every_model_warm() -> None:
    """The rule belongs to the planner's greedy: a baseline policy evicts for memory only."""
    from dataclasses import replace

    state = _state([_session("s", NOW - 100.0, MID, state="pending")], [[MID], [SMALL]])
    prob = build_workflow_problem(state)
    plan = list_schedule(prob, replace(OURS_GREEDY, keep_warm=False)).to_plan(prob, "feasible")
    assert _evictions(plan) == []


def test_with_nothing_pending_the_planner_still_lets_cold_models_go() -> None:
    """No pending activation: the planner returns no unit, but the 8B model nobody recent uses
    goes at once, while the small model 31 recent sessions use (gap under its 1 s reload) stays;
    with ``keep_warm`` off it keeps both, as before the rule."""
    from optsched.engine.workflows.planner import PlannerConfig, plan_workflows

    recent = [_session(f"r{i}", NOW - 1.0 - 0.5 * i, SMALL) for i in range(31)]
    state = _state(recent, [[SMALL], [MID]])
    plan = plan_workflows(state, time_limit_s=1.0)
    assert plan.units == [] and plan.status == "optimal"
    assert _evictions(plan) == [(1, MID, NOW)]
    assert check_workflow_plan(state, plan) == []
    off = plan_workflows(state, time_limit_s=1.0, config=PlannerConfig(keep_warm=False))
    assert off.units == [] and off.model_actions == []


def test_the_simulators_greedy_lets_cold_models_go_with_nothing_pending() -> None:
    """The simulator's ``greedy`` policy applies the rule as the planner does when no activation
    is pending (the tail of a burst); a baseline without the rule still returns an empty plan."""
    from optsched.sim.workflows.baselines import get_policy

    recent = [_session(f"r{i}", NOW - 1.0 - 0.5 * i, SMALL) for i in range(31)]
    state = _state(recent, [[SMALL], [MID]])
    plan = get_policy("greedy")(state, 1.0, 0)
    assert plan.units == [] and _evictions(plan) == [(1, MID, NOW)]
    assert check_workflow_plan(state, plan) == []
    assert get_policy("autellix")(state, 1.0, 0).model_actions == []

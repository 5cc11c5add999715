"""Invariant 6: one hand-built bad plan per rule, and a good plan the checker accepts."""

from __future__ import annotations

from typing import Any

import pytest

from optsched.engine.state import ClusterState, load_state
from optsched.engine.workflows.check import check_workflow_plan, model_load_s
from optsched.schema.decision import ModelAction, Unit, WorkflowPlan
from optsched.schema.snapshot import GpuRef


def _snapshot() -> dict[str, Any]:
    """Two pool GPUs (A100 80 GiB, L4 24 GiB); models small (16 GiB), big (70 GiB)."""
    return {
        "format": 1,
        "now": 100.0,
        "gpu_types": {"A100": {"memory_gib": 80}, "L4": {"memory_gib": 24}},
        "nodes": [
            {"id": "n1", "gpu_type": "A100", "gpus": 1},
            {"id": "n2", "gpu_type": "L4", "gpus": 1},
        ],
        "tenants": [{"id": "t"}],
        "workflows": {
            "models": {
                "small": {"memory_gib": 16, "load_s": {"A100": 2.0, "L4": 4.0}},
                "big": {"memory_gib": 70, "load_s": {"A100": 10.0}},
            },
            "pool": [
                {"node": "n1", "gpu": 0, "resident": ["small"], "busy_until_s": 105.0},
                {"node": "n2", "gpu": 0, "resident": []},
            ],
            "sessions": [
                {
                    "id": "s1",
                    "tenant": "t",
                    "arrival_s": 90.0,
                    "activations": [
                        {
                            "id": "r",
                            "model": "small",
                            "input_tokens": 100,
                            "output_tokens": 10,
                            "state": "running",
                            "device": {"node": "n1", "gpu": 0},
                            "start_s": 99.0,
                        },
                        {
                            "id": "a",
                            "model": "small",
                            "input_tokens": 100,
                            "output_tokens": 50,
                            "after": ["r"],
                        },
                        {
                            "id": "b",
                            "model": "small",
                            "input_tokens": 100,
                            "output_tokens": 50,
                            "after": ["r"],
                        },
                        {
                            "id": "c",
                            "model": "big",
                            "input_tokens": 500,
                            "output_tokens": 100,
                            "after": ["a", "b"],
                        },
                        {
                            "id": "d",
                            "model": "small",
                            "input_tokens": 10,
                            "output_tokens": 10,
                            "after": ["a"],
                        },
                    ],
                },
                {
                    "id": "s2",
                    "tenant": "t",
                    "arrival_s": 95.0,
                    "activations": [
                        {"id": "x", "model": "small", "input_tokens": 10, "output_tokens": 10},
                        {
                            "id": "done",
                            "model": "small",
                            "input_tokens": 10,
                            "output_tokens": 10,
                            "state": "done",
                        },
                    ],
                },
            ],
        },
    }


@pytest.fixture
def state() -> ClusterState:
    return load_state(_snapshot())


N1 = GpuRef(node="n1", gpu=0)
N2 = GpuRef(node="n2", gpu=0)


def _u(uid: str, sid: str, acts: list[str], model: str, dev: GpuRef, s: float, e: float) -> Unit:
    return Unit(id=uid, session=sid, activations=acts, model=model, device=dev, start_s=s, end_s=e)


def good_plan() -> WorkflowPlan:
    """Layout: n1 runs the fused a+b (105-110), then d (110-112), then evicts small at 112 and
    loads big (ready at 122) for c (122-130). n2 loads small at 100 (ready 104) and runs x.
    """
    return WorkflowPlan(
        units=[
            _u("u1", "s1", ["a", "b"], "small", N1, 105.0, 110.0),
            _u("u2", "s1", ["d"], "small", N1, 110.0, 112.0),
            _u("u3", "s1", ["c"], "big", N1, 122.0, 130.0),
            _u("u4", "s2", ["x"], "small", N2, 104.0, 106.0),
        ],
        model_actions=[
            ModelAction(device=N1, model="small", action="evict", at_s=112.0),
            ModelAction(device=N1, model="big", action="load", at_s=112.0),
            ModelAction(device=N2, model="small", action="load", at_s=100.0),
        ],
    )


def _edit(plan: WorkflowPlan, **units: dict[str, Any]) -> WorkflowPlan:
    out = plan.model_copy(deep=True)
    for i, u in enumerate(out.units):
        if u.id in units:
            out.units[i] = u.model_copy(update=units[u.id])
    return out


def test_good_plan_passes(state: ClusterState) -> None:
    assert check_workflow_plan(state, good_plan()) == []


def test_load_time_from_snapshot_or_default(state: ClusterState) -> None:
    assert model_load_s(state, "small", "L4") == 4.0
    assert model_load_s(state, "big", "L4") == pytest.approx(70 / 2.0)


def _msgs(state: ClusterState, plan: WorkflowPlan) -> str:
    v = check_workflow_plan(state, plan)
    assert v, "the checker accepted a bad plan"
    assert all(x.invariant == 6 for x in v)
    return " | ".join(x.message for x in v)


def test_dependency_on_unit_violated(state: ClusterState) -> None:
    plan = _edit(good_plan(), u2={"start_s": 108.0, "end_s": 109.0})  # d before u1 ends
    plan = _edit(plan, u1={"start_s": 105.0, "end_s": 108.5})
    plan.units[1] = plan.units[1].model_copy(update={"device": N2, "start_s": 107.0, "end_s": 108.0})
    assert "before unit 'u1'" in _msgs(state, plan)


def test_dependency_on_running_activation_violated(state: ClusterState) -> None:
    plan = _edit(good_plan(), u1={"device": N2, "start_s": 104.0, "end_s": 104.5})
    plan = _edit(plan, u4={"start_s": 104.5, "end_s": 105.0})
    assert "before running 'r' ends" in _msgs(state, plan)


def test_unplanned_dependency(state: ClusterState) -> None:
    plan = good_plan()
    plan.units = [u for u in plan.units if u.id != "u1"]
    assert "is not planned" in _msgs(state, plan)


def test_overlap_on_device(state: ClusterState) -> None:
    plan = _edit(good_plan(), u2={"start_s": 108.0, "end_s": 111.0})
    plan = _edit(plan, u1={"start_s": 105.0, "end_s": 109.0})
    assert "overlap" in _msgs(state, plan)


def test_start_before_busy_until(state: ClusterState) -> None:
    plan = good_plan()
    plan.units.append(_u("u5", "s2", ["x"], "small", N1, 101.0, 102.0))
    plan.units = [u for u in plan.units if u.id != "u4"]
    assert "busy until 105" in _msgs(state, plan)


def test_model_not_loaded(state: ClusterState) -> None:
    plan = good_plan()
    plan.model_actions = [a for a in plan.model_actions if a.device != N2]
    assert "while it is not loaded" in _msgs(state, plan)


def test_load_not_finished_before_start(state: ClusterState) -> None:
    plan = _edit(good_plan(), u3={"start_s": 115.0, "end_s": 123.0})
    assert "while it is not loaded" in _msgs(state, plan)


def test_evicted_during_use(state: ClusterState) -> None:
    plan = good_plan()
    plan.model_actions[0] = plan.model_actions[0].model_copy(update={"at_s": 111.0})
    plan.model_actions[1] = plan.model_actions[1].model_copy(update={"at_s": 111.0})
    assert "while it is not loaded" in _msgs(state, plan)


def test_evict_under_running_activation(state: ClusterState) -> None:
    plan = WorkflowPlan(model_actions=[ModelAction(device=N1, model="small", action="evict", at_s=100.0)])
    assert "still runs on it" in _msgs(state, plan)


def test_memory_exceeded(state: ClusterState) -> None:
    plan = good_plan()
    plan.model_actions = [a for a in plan.model_actions if a.action != "evict"]
    assert "GiB of models" in _msgs(state, plan)


def test_memory_exceeded_on_small_gpu(state: ClusterState) -> None:
    plan = WorkflowPlan(model_actions=[ModelAction(device=N2, model="big", action="load", at_s=100.0)])
    assert "the GPU has 24.0" in _msgs(state, plan)


def test_fusion_across_models(state: ClusterState) -> None:
    plan = good_plan()
    plan.units = [u for u in plan.units if u.id != "u3"]
    plan = _edit(plan, u2={"activations": ["d", "c"]})
    assert "fuses 'c' of model 'big'" in _msgs(state, plan)


def test_fusion_across_sessions(state: ClusterState) -> None:
    plan = good_plan()
    plan.units = [u for u in plan.units if u.id != "u4"]
    plan = _edit(plan, u2={"activations": ["d", "x"]})
    assert "unknown activation 'x'" in _msgs(state, plan)


def test_fusion_out_of_order(state: ClusterState) -> None:
    plan = good_plan()
    plan.units = [u for u in plan.units if u.id != "u2"]
    plan = _edit(plan, u1={"activations": ["d", "a", "b"]})
    assert "comes before its dependency 'a'" in _msgs(state, plan)


def test_planned_twice(state: ClusterState) -> None:
    plan = good_plan()
    plan.units.append(_u("u9", "s2", ["x"], "small", N2, 107.0, 108.0))
    assert "planned twice" in _msgs(state, plan)


def test_duplicate_unit_id(state: ClusterState) -> None:
    plan = _edit(good_plan(), u4={"id": "u1"})
    assert "used twice" in _msgs(state, plan)


def test_not_pending(state: ClusterState) -> None:
    plan = good_plan()
    plan.units.append(_u("u9", "s2", ["done"], "small", N2, 107.0, 108.0))
    assert "which is done" in _msgs(state, plan)


def test_not_a_pool_device(state: ClusterState) -> None:
    plan = _edit(good_plan(), u4={"device": GpuRef(node="n9", gpu=0)})
    assert "not a pool GPU" in _msgs(state, plan)


def test_end_not_after_start(state: ClusterState) -> None:
    plan = _edit(good_plan(), u4={"end_s": 104.0})
    assert "<= start" in _msgs(state, plan)


def test_starts_before_now(state: ClusterState) -> None:
    plan = _edit(good_plan(), u4={"start_s": 90.0})
    assert "before now" in _msgs(state, plan)


def test_load_while_resident_and_evict_absent(state: ClusterState) -> None:
    plan = WorkflowPlan(
        model_actions=[
            ModelAction(device=N1, model="small", action="load", at_s=120.0),
            ModelAction(device=N2, model="big", action="evict", at_s=120.0),
        ]
    )
    msgs = _msgs(state, plan)
    assert "already there" in msgs
    assert "not there" in msgs


def test_unknown_session(state: ClusterState) -> None:
    plan = _edit(good_plan(), u4={"session": "nope"})
    assert "unknown session" in _msgs(state, plan)

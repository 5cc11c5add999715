"""A job's stated ``memory_gib`` is its peak GPU memory per GPU: a GPU type with less memory can
never run it. No path starts it there, a job with no type left is queued for ``gpu_memory``
with an explanation naming both numbers, and the checker flags a decision that starts it."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from optsched import solve_epoch
from optsched.cli import main
from optsched.engine.admit import decide_event
from optsched.engine.backends.base import SolveParams
from optsched.engine.check import check_decision
from optsched.engine.state import ClusterState, load_state
from optsched.predict.fallback import EstimatePredictor
from optsched.schema.decision import Decision, Start
from optsched.schema.snapshot import GpuRef
from optsched.sim.policies import POLICIES, make_policy
from optsched.testing import assert_decision_valid, cluster, pending

FALLBACK = EstimatePredictor()


def too_big() -> dict[str, Any]:
    """An idle 8-GPU A100 (80 GiB) node; 'big' needs 500 GiB per GPU, 'small' fits."""
    snap = cluster()
    snap["jobs"] = [
        pending("big", "a", 1, submit_s=100.0, memory_gib=500.0),
        pending("small", "a", 1, submit_s=200.0, memory_gib=40.0),
    ]
    return snap


def two_types() -> dict[str, Any]:
    """Idle V100 (32 GiB) and A100 (80 GiB) nodes; 'mid' allows both and needs 60 GiB per GPU."""
    snap = cluster(
        types={"V100": (32.0, False), "A100": (80.0, True)},
        nodes={"v0": ("V100", 8), "a0": ("A100", 2)},
        tenants={"a": {"V100": 8, "A100": 2}},
    )
    snap["jobs"] = [
        pending("mid", "a", 2, submit_s=100.0, memory_gib=60.0, gpu_types=["V100", "A100"]),
    ]
    return snap


def solve(snap: dict[str, Any], backend: str) -> tuple[ClusterState, Decision]:
    state = load_state(copy.deepcopy(snap))
    d = solve_epoch(state, params=SolveParams(backend=backend, time_limit_s=2.0), predictor=FALLBACK)
    assert_decision_valid(state, d)
    return state, d


def test_allowed_types_drop_types_too_small_for_the_stated_memory() -> None:
    state = load_state(two_types())
    assert state.allowed_types(state.job("mid")) == ("A100",)
    assert state.declared_types(state.job("mid")) == ("V100", "A100")
    state = load_state(too_big())
    assert state.allowed_types(state.job("big")) == ()
    assert state.allowed_types(state.job("small")) == ("A100",)
    # a predicted memory does not count: a job that states none may use every type
    snap = too_big()
    snap["jobs"][0]["memory_gib"] = None
    state = load_state(snap)
    assert state.allowed_types(state.job("big")) == ("A100",)


def test_a_job_larger_than_every_gpu_is_queued_for_gpu_memory(backend: str) -> None:
    _, d = solve(too_big(), backend)
    assert [s.job for s in d.start] == ["small"]
    assert d.queue == ["big"]
    assert d.queue_reasons["big"].value == "gpu_memory"
    e = d.explanations["big"]
    assert e.code == "gpu_memory" and e.binding == "gpu_memory"
    assert "500.0 GiB per GPU" in e.text and "the largest GPU it allows has 80.0 GiB" in e.text
    assert [(f.gpu_type, f.binding, f.missing) for f in e.types] == [("A100", "gpu_memory", 1)]


def test_a_job_allowing_two_types_starts_only_on_the_one_with_enough_memory(backend: str) -> None:
    state, d = solve(two_types(), backend)
    assert [s.job for s in d.start] == ["mid"]
    assert {state.node_type(r.node) for r in d.start[0].allocation} == {"A100"}


def test_when_the_large_type_is_full_the_explanation_names_the_small_ones_memory(backend: str) -> None:
    snap = two_types()
    snap["nodes"][1]["available"] = False  # no A100 left: 'mid' waits, the V100s are too small
    _, d = solve(snap, backend)
    assert d.queue == ["mid"] and not d.start
    e = d.explanations["mid"]
    assert d.queue_reasons["mid"].value == "type_unavailable"  # the A100s may come back
    got = [(f.gpu_type, f.binding) for f in e.types]
    assert got == [("A100", "type_unavailable"), ("V100", "gpu_memory")]
    assert "'V100': 32.0 GiB per GPU, less than the 60.0 GiB it needs per GPU" in e.text


def test_the_event_path_and_the_partitioned_solve_never_start_it() -> None:
    state = load_state(too_big())
    d = decide_event(state)
    assert [s.job for s in d.start] == ["small"] and d.queue == ["big"]
    assert not check_decision(state, d)
    snap = too_big()
    snap["nodes"] = [{"id": f"n{k}", "gpu_type": "A100", "gpus": 8} for k in range(2)]
    snap["tenants"][1]["quota"] = {"A100": 4}
    state = load_state(snap)
    params = SolveParams(backend="greedy", time_limit_s=2.0)
    d = solve_epoch(state, params=params, predictor=FALLBACK, partitions=2)
    assert_decision_valid(state, d)
    assert d.solver.notes[0].startswith("partitioned into 2 parts")
    assert "big" in d.queue and d.queue_reasons["big"].value == "gpu_memory"


@pytest.mark.parametrize("policy", [p for p in POLICIES if p != "optsched"])
def test_simulator_baselines_never_start_it(policy: str) -> None:
    # (work conservation is optsched's promise, not a baseline's: strict FIFO waits behind 'big')
    state = load_state(two_types())
    d = make_policy(policy).decide(state.snapshot, state)
    assert not check_decision(state, d, work_conserving=False)
    assert [s.job for s in d.start] == ["mid"]
    assert {state.node_type(r.node) for r in d.start[0].allocation} == {"A100"}
    state = load_state(too_big())
    d = make_policy(policy).decide(state.snapshot, state)
    assert not check_decision(state, d, work_conserving=False)
    assert "big" in d.queue and "big" not in {s.job for s in d.start}


def test_the_checker_flags_a_start_on_a_type_too_small_and_does_not_demand_it() -> None:
    state = load_state(too_big())
    good = decide_event(state)  # starts 'small' on one GPU, queues 'big'
    assert good.queue == ["big"] and len(good.start) == 1
    used = good.start[0].allocation[0].gpu
    gpu = next(g for g in range(8) if g != used)
    big = Start(job="big", allocation=[GpuRef(node="n0", gpu=gpu)], on_loan=False)
    bad = good.model_copy(update={"start": [big, *good.start], "queue": []})
    got = [(v.invariant, v.ids) for v in check_decision(state, bad)]
    assert got == [(2, ("big",))]
    msg = str(check_decision(state, bad)[0])
    assert "500.0 GiB per GPU" in msg and "'A100' with 80.0 GiB" in msg
    # queued with 7 free A100s and idle quota: not a work-conservation violation
    assert check_decision(state, good) == []
    # the same job with no stated memory must start (the rule is about stated memory only)
    snap = too_big()
    snap["jobs"][0]["memory_gib"] = None
    state = load_state(snap)
    assert [v.invariant for v in check_decision(state, good)] == [8]


def test_optsched_explain_prints_the_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sp, dp = tmp_path / "s.json", tmp_path / "d.json"
    sp.write_text(json.dumps(too_big()))
    assert main(["solve", str(sp), "-o", str(dp), "--predictor", "fallback"]) == 0
    capsys.readouterr()
    assert main(["explain", str(sp), str(dp), "big"]) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert "queued (gpu_memory)" in out
    assert "500.0 GiB per GPU" in out and "80.0 GiB" in out

"""What a host can depend on, whatever happens inside the engine: the same decision from fresh
processes, a valid decision for awkward but valid input on every backend, a labelled fallback
when a part fails (workflow planner, checker, backend), a status that tells the truth, work
conservation after every backend, and the exact backends inside the simulator."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import optsched
from optsched.engine.backends import available_backends, get_backend
from optsched.engine.backends.base import SolveParams, SolveResult, SolveStatus
from optsched.engine.budget import WALL_CLOCK_FALLBACK
from optsched.engine.check import check_decision, check_work_conservation, over_quota_note
from optsched.engine.problem import Assignment, EpochProblem
from optsched.engine.state import ClusterState, load_state
from optsched.instances import generate
from optsched.predict.fallback import EstimatePredictor
from optsched.schema.decision import Decision, GpuRef, Unit, WorkflowPlan
from optsched.testing import cluster, pending, running
from tests import builders
from tests.conftest import DATA, ROOT

BACKENDS = available_backends()
EXACT = [b for b in BACKENDS if b != "greedy"]
IN_PROCESS = ["highs", "cpsat"]
PRED = EstimatePredictor()


def solve(snap: Any, backend: str, limit: float = 2.0) -> tuple[ClusterState, Decision]:
    state = snap if isinstance(snap, ClusterState) else load_state(snap)
    d = optsched.solve_epoch(state, params=SolveParams(backend=backend, time_limit_s=limit), predictor=PRED)
    return state, d


def test_every_backend_is_installed() -> None:
    # ".[all,test]" installs every extra: a missing backend is an install problem, not a skip
    assert {"highs", "cpsat", "highspy", "pulp", "greedy"} <= set(BACKENDS)


# --- determinism at Venus size from fresh processes --------------------------------------------


def _plan(d: dict[str, Any]) -> dict[str, Any]:
    """What a host acts on (the timing fields ``solver.seconds`` and ``stage_seconds`` vary)."""
    return {
        "start": d["start"],
        "preempt": d["preempt"],
        "loans": d["loans"],
        "queue": d["queue"],
        "status": d["status"],
        "objective": d["solver"]["objective"],
    }


def test_same_decision_from_two_fresh_processes_and_in_process(tmp_path: Path) -> None:
    gen = subprocess.run(
        [sys.executable, "-m", "optsched.cli", "generate", "--size", "venus", "--seed", "3"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert gen.returncode == 0, gen.stderr[-2000:]
    snap = json.loads(gen.stdout)
    assert snap == generate("venus", 3)
    # the default backend and predictor; a limit with room for a loaded 2-core machine (the
    # work budget, not the clock, decides where the solver stops; a run the net stopped would
    # be the greedy plan: tests/behaviour/test_determinism_load.py)
    snap["options"] = {"time_limit_s": 20.0}
    path = tmp_path / "venus3.json"
    path.write_text(json.dumps(snap))
    runs: list[dict[str, Any]] = []
    for k in range(2):
        out = tmp_path / f"decision{k}.json"
        proc = subprocess.run(
            [sys.executable, "-m", "optsched.cli", "solve", str(path), "-o", str(out)],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=ROOT,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        runs.append(json.loads(out.read_text()))
    for _ in range(2):
        d = optsched.solve_epoch(json.loads(path.read_text()))
        runs.append(json.loads(d.model_dump_json(exclude_none=True)))
    state = load_state(snap)
    first = runs[0]
    assert first["start"], "nothing started: the comparison would be trivial"
    assert check_decision(state, Decision.model_validate(first)) == []
    for k, other in enumerate(runs[1:], start=1):
        assert other["solver"].get("fallback_reason") is None, f"run {k}: {other['solver']}"
        assert _plan(other) == _plan(first), f"run {k} differs from run 0"


# --- awkward valid input on every backend -----------------------------------------------------


def over_quota_snapshot() -> dict[str, Any]:
    """The shared over-quota case (:func:`tests.builders.over_quota_snapshot`) and a pending
    best-effort job of b."""
    snap = builders.over_quota_snapshot()
    snap["jobs"].append(pending("b-more", "b", 1, submit_s=9_500.0, qos="best_effort"))
    return snap


def _n1_lost() -> dict[str, Any]:
    """Two 8-GPU A100 nodes, n1 failed; tenants a and b with 8 GPUs of quota each, no jobs."""
    snap = cluster(
        types={"A100": (80.0, True)},
        nodes={"n0": ("A100", 8), "n1": ("A100", 8)},
        tenants={"a": {"A100": 8}, "b": {"A100": 8}},
    )
    snap["nodes"][1]["available"] = False
    return snap


def lost_node_snapshot() -> dict[str, Any]:
    """Node n1 failed: the fleet holds 8 GPUs for 16 GPUs of quota, and jobs still run on n1.

    Both tenants are due a reclaim, and the reclaim bonus is per GPU started inside quota, so a
    4-GPU job of b would now be worth stopping b's own best-effort ``b-run`` for (4 GPUs of b's
    guaranteed work instead of a's 2); b's job takes 6 GPUs, which n0 cannot give it even then."""
    snap = _n1_lost()
    snap["jobs"] = [
        running("a-lost", "a", [("n1", g) for g in range(4)], start_s=1_000.0),
        running("b-lost", "b", [("n1", 4), ("n1", 5)], start_s=1_000.0, qos="best_effort"),
        running("a-run", "a", [("n0", g) for g in range(4)], start_s=1_000.0),
        running("b-run", "b", [("n0", 4), ("n0", 5)], start_s=1_000.0, qos="best_effort"),
        pending("a-two", "a", 2, submit_s=9_000.0),
        pending("b-six", "b", 6, submit_s=9_000.0),
    ]
    return snap


@pytest.mark.parametrize("name", BACKENDS)
def test_over_quota_gets_a_decision_with_the_note_on_every_backend(name: str) -> None:
    state, d = solve(over_quota_snapshot(), name)
    assert check_decision(state, d) == []
    assert over_quota_note("a", "A100", 2) in d.solver.notes
    assert d.preempt == []
    assert not any(s.job == "a-a100" for s in d.start)  # nothing on top of the kept use
    assert "a-a100" in d.queue
    assert [(s.job, s.allocation[0].node) for s in d.start if s.job == "a-any"] == [("a-any", "v0")]


@pytest.mark.parametrize("name", BACKENDS)
def test_lost_node_gets_a_decision_on_every_backend(name: str) -> None:
    state, d = solve(lost_node_snapshot(), name)
    assert check_decision(state, d) == []
    assert sorted((p.job, p.reason) for p in d.preempt) == [
        ("a-lost", "node_unavailable"),
        ("b-lost", "node_unavailable"),
    ]
    assert all(r.node == "n0" for s in d.start for r in s.allocation)
    # 2 GPUs are left on n0: a's 2-GPU job fits inside its quota; b's 6-GPU job cannot, not
    # even by stopping b-run (4 GPUs), so nothing but the lost jobs stops
    assert [s.job for s in d.start] == ["a-two"]
    assert d.queue == ["b-six"]


def straddling_loss_snapshot() -> dict[str, Any]:
    """Node n1 failed under a 16-GPU job that also holds all of n0: the node loss stops it,
    and n0's 8 GPUs are free again (a 4-GPU node shape and 1-GPU jobs wait for them)."""
    snap = _n1_lost()
    snap["jobs"] = [
        running("wide", "b", [(n, g) for n in ("n0", "n1") for g in range(8)], start_s=1_000.0,
                qos="best_effort"),
        pending("a-four", "a", 4, submit_s=9_000.0),
        pending("b-one", "b", 1, submit_s=9_000.0),
        pending("b-two", "b", 2, submit_s=9_000.0),
    ]
    return snap


@pytest.mark.parametrize("name", BACKENDS)
def test_gpus_a_node_loss_frees_on_a_live_node_are_placed(name: str) -> None:
    """The placement rows and the node records count the stopped job's GPUs on n0 as free (they
    counted them as held, so every start stayed queued and the checker refused the decision)."""
    state, d = solve(straddling_loss_snapshot(), name)
    assert check_decision(state, d) == []
    assert [(p.job, p.reason) for p in d.preempt] == [("wide", "node_unavailable")]
    assert sorted(s.job for s in d.start) == ["a-four", "b-one", "b-two"]
    assert all(r.node == "n0" for s in d.start for r in s.allocation)
    assert d.queue == []


# --- the workflow part's own fallback -------------------------------------------------------------

WORKFLOW = DATA / "workflows" / "mapreduce_seed1.json"


def test_workflow_planner_that_raises_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    from optsched.engine.workflows import planner

    def boom(*args: Any, **kwargs: Any) -> WorkflowPlan:
        raise RuntimeError("planner exploded")

    monkeypatch.setattr(planner, "plan_workflows", boom)
    state = load_state(WORKFLOW.read_text())
    d = optsched.solve_epoch(state, params=SolveParams(backend="highs", time_limit_s=2.0), predictor=PRED)
    assert check_decision(state, d) == []
    assert d.workflow_plan is not None and d.workflow_plan.status == "fallback"
    assert d.workflow_plan.units == []
    assert d.status == "fallback"
    assert "workflows: workflow planner raised RuntimeError: planner exploded" in d.solver.notes


def test_workflow_plan_that_fails_invariant_6_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    from optsched.engine.workflows import planner

    def broken(*args: Any, **kwargs: Any) -> WorkflowPlan:
        unit = Unit(
            id="u0",
            session="nobody",
            activations=["no-such-activation"],
            model="no-such-model",
            device=GpuRef(node="h100-0", gpu=0),
            start_s=0.0,
            end_s=-1.0,
        )
        return WorkflowPlan(units=[unit], status="optimal")

    monkeypatch.setattr(planner, "plan_workflows", broken)
    state = load_state(WORKFLOW.read_text())
    d = optsched.solve_epoch(state, params=SolveParams(backend="highs", time_limit_s=2.0), predictor=PRED)
    assert check_decision(state, d) == []
    assert d.workflow_plan is not None and d.workflow_plan.status == "fallback"
    assert d.workflow_plan.units == []
    assert d.status == "fallback"
    assert any(n.startswith("workflows: workflow plan failed invariant 6") for n in d.solver.notes)


# --- the checker's and the backend's fallbacks ------------------------------------------------------


def busy_tiny() -> dict[str, Any]:
    snap = generate("tiny", 3)
    return snap


@pytest.mark.parametrize("name", IN_PROCESS)
def test_a_decoded_answer_the_checker_rejects_falls_back_to_the_greedy_plan(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from optsched.engine import decode

    real = decode.draft_decision
    calls: list[str] = []

    def corrupt_first(*args: Any, **kwargs: Any) -> decode.Draft:
        draft = real(*args, **kwargs)
        d = draft.decision
        calls.append(d.solver.backend)
        if len(calls) == 1:
            state: ClusterState = args[0]
            # start the first job on GPUs a running job holds (invariants 1 and 2)
            held = next(j for j in state.running() if j.allocation)
            assert held.allocation is not None
            d.start[0].allocation = [GpuRef(node=held.allocation[0].node, gpu=held.allocation[0].gpu)] * len(
                d.start[0].allocation
            )
        return draft

    monkeypatch.setattr(decode, "draft_decision", corrupt_first)
    state, d = solve(busy_tiny(), name)
    assert calls[0] == name and len(calls) == 2
    assert check_decision(state, d) == []
    assert d.status == "fallback"
    assert d.solver.backend == "greedy"
    reason = d.solver.fallback_reason or ""
    assert reason.startswith(f"{name} answer failed the checker: invariant"), reason


@pytest.mark.parametrize("name", IN_PROCESS)
def test_a_backend_answer_that_over_starts_falls_back(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # tenant a (A100 quota 2, nobody to lend) has four 1-GPU jobs and 8 free GPUs: a backend
    # that starts all four inside quota breaks invariant 4; the checker must catch it
    snap = cluster(nodes={"n0": ("A100", 8)}, tenants={"a": {"A100": 2}, "b": {}})
    snap["jobs"] = [pending(f"j{k}", "a", 1, submit_s=9_000.0 + k) for k in range(4)]
    cls = type(get_backend(name))

    def over_start(self: Any, problem: EpochProblem, params: SolveParams, hint: Any = None) -> SolveResult:
        a = Assignment()
        for c, pc in enumerate(problem.pending):
            a.add(c, pc.types[0], False, len(pc.jobs))
        return SolveResult(SolveStatus.OPTIMAL, name, 0.0, assignment=a, objective=None, detail="patched")

    monkeypatch.setattr(cls, "solve", over_start)
    state, d = solve(snap, name)
    assert check_decision(state, d) == []
    assert d.status == "fallback"
    reason = d.solver.fallback_reason or ""
    assert reason.startswith(f"{name} answer failed the checker: invariant 4"), reason
    assert sorted(s.job for s in d.start) == ["j0", "j1"]


@pytest.mark.parametrize("name", EXACT)
def test_a_backend_crash_gives_a_labelled_fallback(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    cls = type(get_backend(name))

    def boom(self: Any, *args: Any, **kwargs: Any) -> SolveResult:
        raise RuntimeError("solver exploded")

    monkeypatch.setattr(cls, "solve", boom)
    state, d = solve(busy_tiny(), name)
    assert check_decision(state, d) == []
    assert d.status == "fallback" and d.solver.backend == "greedy"
    assert d.solver.fallback_reason == f"{name} raised RuntimeError: solver exploded"


# --- status truth -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", EXACT)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_optimal_means_proven_optimal(name: str, seed: int) -> None:
    state, d = solve(generate("tiny", seed), name)
    assert check_decision(state, d) == []
    assert d.status == "optimal", (d.solver.status_detail, d.solver.fallback_reason, d.solver.notes)
    assert d.solver.gap is not None and d.solver.gap <= 1e-4
    assert d.solver.bound is not None and d.solver.objective is not None
    assert d.solver.bound >= d.solver.objective - 1e-6


def test_an_incomplete_model_is_never_called_optimal(monkeypatch: pytest.MonkeyPatch) -> None:
    from optsched.engine import candidates

    snap = cluster(nodes={"n0": ("A100", 2)}, tenants={"a": {"A100": 2}})
    snap["jobs"] = [
        running("h0", "a", [("n0", 0)], start_s=1_000.0, qos="best_effort"),
        running("h1", "a", [("n0", 1)], start_s=1_000.0, qos="best_effort"),
        *(pending(f"g{k}", "a", 1, submit_s=9_000.0 + k, qos="best_effort") for k in range(3)),
    ]
    monkeypatch.setattr(candidates, "MAX_GUEST_JOBS", 1)
    state, d = solve(snap, "highs")
    assert check_decision(state, d) == []
    assert any("MPS pairs scored for the 1 most valuable of 3" in n for n in d.solver.notes)
    assert d.status == "feasible"


@pytest.mark.parametrize("name", IN_PROCESS)
def test_a_wall_clock_stop_is_never_optimal_and_says_so(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # a large deterministic budget but almost no wall time: the safety net must stop the solver
    cls = type(get_backend(name))
    real = cls.solve

    def hurried(self: Any, problem: EpochProblem, params: SolveParams, hint: Any = None) -> SolveResult:
        return real(self, problem, params.with_(time_limit_s=0.001, work_s=50.0), hint)

    monkeypatch.setattr(cls, "solve", hurried)
    state, d = solve(generate("venus", 0), name, limit=5.0)
    assert check_decision(state, d) == []
    # whatever the solver had found, the answer is the greedy plan with the one label
    assert d.status == "fallback" and d.solver.backend == "greedy"
    assert d.solver.fallback_reason == WALL_CLOCK_FALLBACK


@pytest.fixture(scope="module")
def venus_problem() -> EpochProblem:
    from optsched.engine import assurance as asr
    from optsched.engine.candidates import build_problem

    state = load_state(generate("venus", 0))
    return build_problem(state, PRED.predict_jobs(state), PRED, asr.compute(state))


@pytest.mark.parametrize("name", IN_PROCESS)
def test_a_backend_stopped_by_the_wall_clock_always_says_so(name: str, venus_problem: EpochProblem) -> None:
    # a deterministic budget far beyond a 50 ms wall clock: every stop is the clock's, and the
    # result must say so (the engine then answers with the greedy plan, WALL_CLOCK_FALLBACK)
    backend = get_backend(name)
    unlabelled = []
    for k in range(30):
        res = backend.solve(venus_problem, SolveParams(backend=name, time_limit_s=0.05, work_s=50.0))
        assert res.status != SolveStatus.OPTIMAL
        if "wall-clock limit hit" not in res.detail:
            unlabelled.append((k, res.status.value, res.detail))
    assert unlabelled == []


@pytest.mark.parametrize("name", EXACT)
def test_a_tiny_budget_is_a_labelled_fallback(name: str) -> None:
    state, d = solve(generate("venus", 1), name, limit=0.001)
    assert check_decision(state, d) == []
    assert d.status == "fallback"
    assert d.solver.fallback_reason == WALL_CLOCK_FALLBACK


# --- work conservation after every backend ----------------------------------------------------------


@pytest.mark.parametrize("name", BACKENDS)
@pytest.mark.parametrize(("size", "seed"), [("tiny", 20), ("tiny", 21), ("tiny", 22), ("venus", 2)])
def test_work_conservation_after_every_backend(name: str, size: str, seed: int) -> None:
    state, d = solve(generate(size, seed), name)  # type: ignore[arg-type]
    assert check_work_conservation(state, d) == []
    assert check_decision(state, d) == []
    assert {s.job for s in d.start} | set(d.queue) == {j.id for j in state.pending()}


# --- the exact backends inside the simulator -----------------------------------------------------------


@pytest.mark.parametrize("name", IN_PROCESS)
def test_exact_backends_inside_the_simulator(name: str) -> None:
    from optsched.sim.cluster import GroundTruth, SimConfig, Simulator
    from optsched.sim.metrics import summarize
    from optsched.sim.policies import make_policy
    from optsched.sim.trace import load_trace

    trace = load_trace("mini", max_jobs=200)
    # no event decisions: every decision is the full model's (the event path has its own tests)
    cfg = SimConfig(events=False)
    assert cfg.check  # the simulator itself raises on a decision that fails the checker
    truth = GroundTruth(trace, 0, cfg)
    policy = make_policy(
        "optsched",
        seed=0,
        truth=truth,
        options={"backend": name, "time_limit_s": 0.5, "predictor": "fallback"},
    )
    seen: list[tuple[Any, Decision]] = []
    log = Simulator(
        trace, policy, seed=0, config=cfg, truth=truth, on_decision=lambda s, d: seen.append((s, d))
    ).run()
    assert len(seen) == len(log.decisions["t"]) > 0
    for snap, d in seen:
        assert check_decision(ClusterState.from_snapshot(snap), d) == [], snap.now
    assert sum(len(d.start) for _, d in seen) >= len(trace.jobs)
    assert summarize(log)["unfinished"] == 0
    # tiny epochs: the exact backend itself answers every one (no fallback to the greedy plan)
    fell_back = [(s.now, d.solver.fallback_reason) for s, d in seen if d.status == "fallback"]
    # ("fallback" means the solver had nothing usable in time: docs/snapshot-format.md)
    assert fell_back == []
    assert {d.solver.backend for _, d in seen} == {name}

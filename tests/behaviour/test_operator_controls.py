"""Operator controls of the epoch model (``docs/snapshot-format.md``, "Preemption controls" and
"Priority classes"): minimum runtime, a per-tenant cap on GPUs preempted per epoch, hysteresis
of priority preemptions, and priority classes inside a tenant. Every scenario is solved by the
exact backends and the greedy plan, with exact expected starts and preemptions, and every
decision passes the checker."""

from __future__ import annotations

import math
from typing import Any

import pytest

from optsched.engine import assurance as asr
from optsched.engine.apply import apply_decision
from optsched.engine.backends.base import SolveParams
from optsched.engine.candidates import build_problem
from optsched.engine.check import check_decision
from optsched.engine.epoch import solve_epoch
from optsched.engine.formulation import PAY_SCALE, build_model
from optsched.engine.problem import EpochProblem
from optsched.engine.state import ClusterState, load_state
from optsched.predict.fallback import EstimatePredictor
from optsched.schema.decision import Decision, Preempt, PreemptReason
from optsched.schema.snapshot import Job, Snapshot, Tenant, TenantPreemption
from optsched.testing import assert_decision_valid, cluster, pending, running

PRED = EstimatePredictor()
BACKENDS = ["highs", "cpsat", "greedy"]
NOW = 10_000.0


def solve(snap: dict[str, Any] | Snapshot, backend: str) -> Decision:
    d = solve_epoch(snap, params=SolveParams(backend=backend, time_limit_s=5.0), predictor=PRED)
    assert_decision_valid(load_state(snap if isinstance(snap, dict) else snap.model_dump()), d)
    return d


def preempted(d: Decision) -> list[tuple[str, str]]:
    return sorted((p.job, p.reason.value) for p in d.preempt)


def started(d: Decision) -> list[str]:
    return sorted(s.job for s in d.start)


def problem_of(snap: dict[str, Any]) -> EpochProblem:
    state = load_state(snap)
    return build_problem(state, PRED.predict_jobs(state), PRED, asr.compute(state))


def oversubscribed(b_preemption: dict[str, Any] | None = None) -> dict[str, Any]:
    """8 GPUs, quotas a 6 and b 6 (oversubscribed): a runs 4 guaranteed jobs, b runs 4
    best-effort 1-GPU jobs inside its quota that started 100, 1000, 3000 and 6000 s ago (the
    younger, the more work left, the cheaper to stop). A guaranteed start of a inside its quota
    needs a priority preemption of b's jobs."""
    snap = cluster(tenants={"a": {"A100": 6}, "b": {"A100": 6}})
    if b_preemption is not None:
        snap["tenants"][1]["preemption"] = b_preemption
    snap["jobs"] = [running(f"a{g}", "a", [("n0", 4 + g)], start_s=1_000.0) for g in range(4)]
    for g, ago in enumerate((100.0, 1_000.0, 3_000.0, 6_000.0)):
        snap["jobs"].append(
            running(f"be{g}", "b", [("n0", g)], start_s=NOW - ago, qos="best_effort", restart_cost_s=60.0)
        )
    return snap


def with_pending(snap: dict[str, Any], n: int, tenant: str = "a", **kw: Any) -> dict[str, Any]:
    for k in range(n):
        snap["jobs"].append(pending(f"g{k}", tenant, 1, submit_s=NOW - 10.0, runtime_s=60.0, **kw))
    return snap


# --- minimum runtime ------------------------------------------------------------------------


@pytest.mark.parametrize("engine", BACKENDS)
def test_min_runtime_protects_young_jobs_from_priority_preemption(engine: str) -> None:
    # without the knob the youngest (cheapest) job is stopped
    d = solve(with_pending(oversubscribed(), 1), engine)
    assert preempted(d) == [("be0", "priority")] and started(d) == ["g0"]
    # be0 (100 s) and be1 (1000 s) ran less than 2000 s: the next cheapest, be2, is stopped
    d = solve(with_pending(oversubscribed({"min_runtime_s": 2_000.0}), 1), engine)
    assert preempted(d) == [("be2", "priority")] and started(d) == ["g0"]
    # a job's own minimum overrides its tenant's: be2 and be3 protected too, nothing stops
    snap = with_pending(oversubscribed({"min_runtime_s": 2_000.0}), 1)
    for job in snap["jobs"]:
        if job["id"] in ("be2", "be3"):
            job["min_runtime_s"] = 7_000.0
    d = solve(snap, engine)
    assert preempted(d) == [] and started(d) == [] and d.queue == ["g0"]
    # and a job's own 0 lifts its tenant's minimum
    snap = with_pending(oversubscribed({"min_runtime_s": 2_000.0}), 1)
    snap["jobs"][4]["min_runtime_s"] = 0.0
    d = solve(snap, engine)
    assert preempted(d) == [("be0", "priority")]


@pytest.mark.parametrize("engine", BACKENDS)
def test_min_runtime_does_not_stop_reclaim_of_loans(engine: str) -> None:
    # b lends nothing here: b's young job runs on loan from a, a takes its quota back
    snap = cluster(tenants={"a": {"A100": 4}, "b": {"A100": 4}})
    snap["tenants"][1]["preemption"] = {"min_runtime_s": 10_000.0, "max_gpus_per_epoch": 0}
    snap["jobs"] = [running(f"b{g}", "b", [("n0", 4 + g)], start_s=1_000.0) for g in range(4)]
    snap["jobs"] += [running(f"a{g}", "a", [("n0", g)], start_s=1_000.0) for g in range(3)]
    snap["jobs"].append(
        running("loan", "b", [("n0", 3)], start_s=NOW - 10.0, qos="best_effort", on_loan=True)
    )
    d = solve(with_pending(snap, 1), engine)
    assert preempted(d) == [("loan", "reclaim")] and started(d) == ["g0"]


# --- cap per tenant and epoch ---------------------------------------------------------------


@pytest.mark.parametrize("engine", BACKENDS)
def test_cap_bounds_gpus_preempted_per_epoch(engine: str) -> None:
    d = solve(with_pending(oversubscribed(), 2), engine)
    assert preempted(d) == [("be0", "priority"), ("be1", "priority")] and started(d) == ["g0", "g1"]
    d = solve(with_pending(oversubscribed({"max_gpus_per_epoch": 1}), 2), engine)
    assert preempted(d) == [("be0", "priority")] and started(d) == ["g0"] and d.queue == ["g1"]
    d = solve(with_pending(oversubscribed({"max_gpus_per_epoch": 0}), 2), engine)
    assert preempted(d) == [] and started(d) == []


def test_cap_is_one_model_row_per_capped_tenant() -> None:
    p = problem_of(with_pending(oversubscribed({"max_gpus_per_epoch": 1}), 2))
    assert p.preempt_cap == (None, 1)
    rows = [r for r in build_model(p).rows if r.family.startswith("preemption_cap")]
    assert [(r.family, sorted(r.coefs.values()), r.hi) for r in rows] == [
        ("preemption_cap[b]", [1, 1, 1, 1], 1)
    ]
    # no field, no row
    p = problem_of(with_pending(oversubscribed(), 2))
    assert p.preempt_cap == (None, None)
    assert not [r for r in build_model(p).rows if r.family.startswith("preemption_cap")]


# --- hysteresis -----------------------------------------------------------------------------


@pytest.mark.parametrize("engine", BACKENDS)
def test_hysteresis_raises_what_a_priority_preemption_must_be_paid_with(engine: str) -> None:
    # be0's static cost is 7.35, g0's static value 7.48: 1.01 times the cost still pays ...
    d = solve(with_pending(oversubscribed({"hysteresis": 0.01}), 1), engine)
    assert preempted(d) == [("be0", "priority")] and started(d) == ["g0"]
    # ... 1.5 times does not
    d = solve(with_pending(oversubscribed({"hysteresis": 0.5}), 1), engine)
    assert preempted(d) == [] and started(d) == [] and d.queue == ["g0"]


def test_hysteresis_scales_the_preemption_pays_coefficients() -> None:
    plain = problem_of(with_pending(oversubscribed(), 1))
    hyst = problem_of(with_pending(oversubscribed({"hysteresis": 0.5}), 1))
    for r0, r1 in zip(plain.running, hyst.running, strict=True):
        factor = 1.5 if r0.candidate else 1.0
        assert r1.static_cost == pytest.approx(factor * r0.static_cost)
    m = build_model(hyst)
    (pays,) = [r for r in m.rows if r.family == "preemption_pays[A100]"]
    for r, v in m.preempt.items():
        assert pays.coefs[v] == math.ceil(PAY_SCALE * 1.5 * plain.running[r].static_cost)


# --- the checker ----------------------------------------------------------------------------


def _tamper(snap: dict[str, Any], victims: list[str]) -> tuple[ClusterState, Decision]:
    state = load_state(snap)
    d = solve(with_pending(oversubscribed(), 2), "highs")
    d = d.model_copy(
        update={
            "preempt": [Preempt(job=j, reason=PreemptReason.PRIORITY, lost_s=60.0) for j in victims],
        }
    )
    return state, d


def test_checker_reports_min_runtime_and_cap_exactly() -> None:
    snap = with_pending(oversubscribed({"min_runtime_s": 2_000.0, "max_gpus_per_epoch": 1}), 2)
    state, d = _tamper(snap, ["be0", "be1"])
    msgs = [str(v) for v in check_decision(state, d) if v.invariant == 3]
    assert msgs == [
        "invariant 3 (preemption): min-runtime: 'be0' preempted after 100 s, its minimum runtime is 2000 s",
        "invariant 3 (preemption): min-runtime: 'be1' preempted after 1000 s, its minimum runtime is 2000 s",
        "invariant 3 (preemption): preemption-cap: tenant 'b' has 2 GPUs preempted, max_gpus_per_epoch 1",
    ]
    # the same decision without the knobs breaks neither
    state, d = _tamper(with_pending(oversubscribed(), 2), ["be0", "be1"])
    assert [v for v in check_decision(state, d) if v.invariant == 3] == []
    # old enough and within the cap: valid
    state, d = _tamper(snap, ["be2"])
    assert [v for v in check_decision(state, d) if v.invariant == 3] == []


# --- priority classes -----------------------------------------------------------------------


@pytest.mark.parametrize("engine", BACKENDS)
def test_priority_class_orders_starts_inside_a_tenant(engine: str) -> None:
    # one free GPU inside a's quota; "old" waited longer, "new" is of class high
    def snap(tables: str) -> dict[str, Any]:
        s = cluster(tenants={"a": {"A100": 1}, "b": {"A100": 7}})
        s["jobs"] = [running(f"b{g}", "b", [("n0", 1 + g)], start_s=1_000.0) for g in range(7)]
        s["jobs"].append(pending("old", "a", 1, submit_s=NOW - 300.0))
        s["jobs"].append(pending("new", "a", 1, submit_s=NOW - 10.0, priority_class="high"))
        if tables == "tenant":
            s["tenants"][0]["priority_classes"] = {"high": 4.0}
        elif tables == "snapshot":
            s["priority_classes"] = {"high": 4.0}
        elif tables == "both":
            s["priority_classes"] = {"high": 4.0}
            s["tenants"][0]["priority_classes"] = {"high": 0.5}  # the tenant's table wins
        return s

    d = solve(snap("none"), engine)
    assert started(d) == ["old"]  # an unknown name weighs 1, and the decision says so
    assert "priority class 'high' of tenant a is in no priority_classes table: weight 1" in d.solver.notes
    assert started(solve(snap("tenant"), engine)) == ["new"]
    assert started(solve(snap("snapshot"), engine)) == ["new"]
    assert started(solve(snap("both"), engine)) == ["old"]
    d = solve(snap("tenant"), engine)
    assert d.queue == ["old"]


def test_priority_class_is_part_of_the_class_key() -> None:
    s = with_pending(oversubscribed(), 2)
    s["jobs"].append(pending("h0", "a", 1, submit_s=NOW - 10.0, runtime_s=60.0, priority_class="high"))
    s["tenants"][0]["priority_classes"] = {"high": 2.0}
    p = problem_of(s)
    assert sorted(c.jobs for c in p.pending) == [("g0", "g1"), ("h0",)]
    (high,) = [c for c in p.pending if c.jobs == ("h0",)]
    (low,) = [c for c in p.pending if c.jobs == ("g0", "g1")]
    assert high.values[0] == pytest.approx(2.0 * low.values[0])
    assert high.static_value == pytest.approx(2.0 * low.static_value)


@pytest.mark.parametrize("engine", BACKENDS)
def test_priority_class_decides_which_job_of_a_tenant_is_preempted(engine: str) -> None:
    # be0 is the cheapest victim; of class "keep" (weight 3) it costs more than g0 is worth
    s = with_pending(oversubscribed(), 1)
    s["tenants"][1]["priority_classes"] = {"keep": 3.0}
    s["jobs"][4]["priority_class"] = "keep"
    d = solve(s, engine)
    assert preempted(d) == [("be1", "priority")] and started(d) == ["g0"]


@pytest.mark.parametrize("engine", BACKENDS)
def test_priority_class_never_preempts_another_tenants_guaranteed_in_quota_work(engine: str) -> None:
    # the fleet is full of guaranteed in-quota jobs (a's marked preemptible): b's job of a
    # class weighing 1000 still waits, nothing is preempted
    s = cluster(tenants={"a": {"A100": 6}, "b": {"A100": 6}})
    s["priority_classes"] = {"top": 1_000.0}
    s["jobs"] = [running(f"a{g}", "a", [("n0", g)], start_s=NOW - 100.0, preemptible=True) for g in range(4)]
    s["jobs"] += [running(f"b{g}", "b", [("n0", 4 + g)], start_s=1_000.0) for g in range(4)]
    s["jobs"].append(pending("urgent", "b", 1, submit_s=NOW - 10.0, priority_class="top"))
    d = solve(s, engine)
    assert preempted(d) == [] and started(d) == [] and d.queue == ["urgent"]


# --- oscillating demand ---------------------------------------------------------------------


def _oscillate(knobs: bool, backend: str) -> tuple[list[tuple[int, str, str, int, float]], float]:
    """Two tenants (quota 6 each on 8 GPUs) keep best-effort work queued. In turn, a burst of 3
    short guaranteed jobs of one tenant arrives (epoch 4k for a, 4k + 2 for b) and ends the
    next epoch, when queued best-effort work refills the GPUs: each burst finds the fleet full.
    The jobs checkpoint, so each preemption loses 60 s (the host sets ``restart_cost_s``).
    Returns every preemption (epoch, job, reason, GPUs, how long it had run) and the lost work
    (sum of ``lost_s`` of the preempted jobs)."""
    snap = cluster(types={"A100": (80.0, False)}, tenants={"a": {"A100": 6}, "b": {"A100": 6}}, now=0.0)
    if knobs:
        for t in snap["tenants"]:
            t["preemption"] = {"min_runtime_s": MIN_RUNTIME, "max_gpus_per_epoch": CAP, "hysteresis": 0.0}
    snap["jobs"] = [
        pending(f"{t}-be{k}", t, 1, submit_s=0.0, qos="best_effort", runtime_s=1e5, restart_cost_s=60.0)
        for t in "ab"
        for k in range(5)
    ]
    cur = Snapshot.model_validate(snap)
    events: list[tuple[int, str, str, int, float]] = []
    lost = 0.0
    for epoch in range(16):
        d = solve(cur, backend)
        for p in d.preempt:
            job = next(j for j in cur.jobs if j.id == p.job)
            assert job.start_s is not None
            events.append((epoch, p.job, p.reason.value, job.gpus, cur.now - job.start_s))
            lost += p.lost_s
        cur = apply_decision(cur, d)
        jobs = [j for j in cur.jobs if "-g" not in j.id]  # the running burst (if any) ends
        for j in jobs:  # the jobs checkpoint: a restart loses 60 s whenever it comes
            if j.state == "running":
                j.restart_cost_s = 60.0
        if epoch % 2 == 1:  # the next burst arrives
            who = "a" if epoch % 4 == 3 else "b"
            jobs += [
                Job.model_validate(pending(f"{who}-g{epoch}-{k}", who, 1, submit_s=cur.now, runtime_s=60.0))
                for k in range(3)
            ]
        cur = cur.model_copy(update={"jobs": jobs})
    return events, lost


MIN_RUNTIME, CAP = 300.0, 2


@pytest.mark.parametrize("engine", ["highs", "greedy"])
def test_oscillating_demand_preempts_less_with_the_knobs(engine: str) -> None:
    plain, lost_plain = _oscillate(False, engine)
    ctrl, lost_ctrl = _oscillate(True, engine)
    assert sum(1 for e in plain if e[2] == "priority") >= 6, "the scenario must thrash without the knobs"
    per_epoch: dict[tuple[int, str], int] = {}
    for epoch, job, reason, gpus, ran in ctrl:
        if reason != "priority":
            continue  # reclaim of loans is exempt from both
        assert ran >= MIN_RUNTIME, (job, ran)
        key = (epoch, job.split("-")[0])
        per_epoch[key] = per_epoch.get(key, 0) + gpus
    assert all(g <= CAP for g in per_epoch.values()), per_epoch
    assert lost_ctrl < lost_plain


def test_schema_fields_default_to_no_control() -> None:
    t = Tenant(id="a")
    assert t.preemption is None and t.priority_classes is None
    assert TenantPreemption() == TenantPreemption(min_runtime_s=0.0, max_gpus_per_epoch=None, hysteresis=0.0)


# --- a cap that rations a tenant's own guaranteed work ---------------------------------------


def rationed() -> dict[str, Any]:
    """8 GPUs, tenant a (quota 8, cap 2 GPUs per epoch) runs 5 best-effort 1-GPU jobs; 3 GPUs
    are free; 3 guaranteed 2-GPU jobs of a and one best-effort 1-GPU job ``x`` of a wait.
    D = 6 (guaranteed GPUs), I = 3 (idle quota), R = 5 (preemptible): min(5, 3) > 2, so a is
    cap-starved: one decision may free 2 GPUs, its guaranteed jobs want 3 more than its idle
    quota."""
    snap = cluster(tenants={"a": {"A100": 8}})
    snap["tenants"][0]["preemption"] = {"max_gpus_per_epoch": 2}
    snap["jobs"] = [
        running(f"be{g}", "a", [("n0", g)], start_s=NOW - 5_000.0 + 100.0 * g, qos="best_effort",
                restart_cost_s=60.0)
        for g in range(5)
    ]
    snap["jobs"] += [pending(f"g{k}", "a", 2, submit_s=NOW - 10.0, runtime_s=60.0) for k in range(3)]
    snap["jobs"].append(pending("x", "a", 1, submit_s=NOW - 10.0, runtime_s=600.0, qos="best_effort"))
    return snap


@pytest.mark.parametrize("engine", BACKENDS)
def test_cap_starved_tenant_holds_its_best_effort_starts(engine: str) -> None:
    from optsched.engine.rules import cap_starved

    snap = rationed()
    starved = cap_starved(load_state(snap))
    a = starved["a"]
    assert list(starved) == ["a"] and (a.wanted, a.idle, a.movable, a.cap) == (6, 3, 5, 2)
    d = solve(snap, engine)
    # one 1-GPU victim, two guaranteed starts on 3 free + 1 freed GPUs; x waits: started now,
    # it would be the cheapest victim for the last guaranteed job next epoch
    assert len([p for p in d.preempt if p.reason == PreemptReason.PRIORITY]) == 1
    assert sorted(s.job for s in d.start) in (["g0", "g1"], ["g0", "g2"], ["g1", "g2"])
    assert "x" in d.queue and d.queue_reasons["x"].value == "preemption_cap"
    e = d.explanations["x"]
    assert e.binding == "preemption_cap" and e.code == "preemption_cap"
    assert "max_gpus_per_epoch frees at most 2" in e.text
    waiting = [g for g in ("g0", "g1", "g2") if g in d.queue]
    assert e.blocked_by == waiting and len(waiting) == 1
    # the next epochs: no job the run started is ever stopped, and no decision preempts more
    # than the cap
    started_by_run: set[str] = set(started(d))
    snap_m = apply_decision(load_state(snap).snapshot, d)
    for _ in range(3):
        snap_m = snap_m.model_copy(update={"now": snap_m.now + snap_m.epoch_s})
        state = ClusterState.from_snapshot(snap_m)
        d = solve(snap_m, engine)
        stopped = {p.job for p in d.preempt}
        assert not stopped & started_by_run, f"stopped {stopped & started_by_run}"
        assert sum(state.job(j).gpus for j in stopped) <= 2
        started_by_run |= set(started(d))
        snap_m = apply_decision(state.snapshot, d)


def test_the_checker_exempts_only_cap_starved_tenants() -> None:
    from optsched.engine.check import check_work_conservation
    from optsched.engine.rules import cap_starved
    from optsched.schema.decision import SolverInfo

    # a decision that starts nothing: 3 GPUs free, 3 of a's quota idle
    nothing = Decision(
        now=NOW, status="feasible", solver=SolverInfo(backend="test", seconds=0.0), start=[],
        preempt=[], queue=["g0", "g1", "g2", "x"], loans=[], assurance={"a": 1.0},
    )
    snap = rationed()
    flagged = [v.ids for v in check_work_conservation(load_state(snap), nothing)]
    assert flagged == [("g0",), ("g1",), ("g2",)]  # x may wait: a is cap-starved
    # with a cap of 3, min(R, D - I) = 3 is within one decision's preemptions: x must start too
    snap["tenants"][0]["preemption"] = {"max_gpus_per_epoch": 3}
    state = load_state(snap)
    assert cap_starved(state) == {}
    flagged = [v.ids for v in check_work_conservation(state, nothing)]
    assert flagged == [("g0",), ("g1",), ("g2",), ("x",)]


@pytest.mark.parametrize("seed", range(6))
def test_engine_and_checker_agree_on_who_is_cap_starved(seed: int) -> None:
    import random

    from optsched.engine.check import _cap_starved
    from optsched.engine.rules import cap_starved
    from optsched.instances import generate

    rng = random.Random(seed)
    snap = generate("venus", seed)
    for t in snap["tenants"]:
        t["preemption"] = {
            "max_gpus_per_epoch": rng.choice((1, 4, 8, 32)),
            "min_runtime_s": rng.choice((0.0, 600.0)),
        }
    state = load_state(snap)
    assert set(cap_starved(state)) == _cap_starved(state)
    assert _cap_starved(state), "a Venus-size snapshot with small caps has a cap-starved tenant"

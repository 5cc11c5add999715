"""The event path (optsched.engine.admit.decide_event): hand-checked small snapshots."""

from __future__ import annotations

from typing import Any

import pytest

from optsched.engine.admit import EVENT_BACKEND, EventPathError, decide_event, event_order
from optsched.engine.check import check_decision
from optsched.engine.state import ClusterState
from optsched.schema.snapshot import Snapshot
from optsched.testing import cluster, pending, running


def state_of(snap: dict[str, Any]) -> ClusterState:
    return ClusterState.from_snapshot(Snapshot.model_validate(snap))


def two_nodes(**kw: Any) -> dict[str, Any]:
    """Two 4-GPU nodes, tenants a and b with quota 4 each."""
    return cluster(nodes={"n0": ("A100", 4), "n1": ("A100", 4)}, **kw)


def test_in_quota_job_starts_at_once_gang_on_one_node() -> None:
    snap = two_nodes()
    snap["jobs"] = [pending("j1", "a", 4, submit_s=9_000.0)]
    d = decide_event(state_of(snap))
    assert [s.job for s in d.start] == ["j1"]
    s = d.start[0]
    assert not s.on_loan and not s.colocated_with
    assert len({r.node for r in s.allocation}) == 1  # best fit: one node holds the gang
    assert d.queue == [] and d.preempt == [] and d.loans == []
    assert d.solver.backend == EVENT_BACKEND and d.status == "feasible"
    assert check_decision(state_of(snap), d) == []


def test_best_fit_picks_the_fullest_node_that_holds_the_gang() -> None:
    snap = two_nodes()
    snap["jobs"] = [
        running("r1", "b", [("n1", 0), ("n1", 1)], start_s=5_000.0),
        pending("j1", "a", 2, submit_s=9_000.0),
    ]
    d = decide_event(state_of(snap))
    assert {r.node for r in d.start[0].allocation} == {"n1"}


def test_over_quota_job_borrows_only_surplus_and_declares_the_loan() -> None:
    snap = two_nodes()
    snap["jobs"] = [pending("big", "a", 6, submit_s=9_000.0, qos="best_effort")]
    d = decide_event(state_of(snap))
    assert [s.job for s in d.start] == ["big"] and d.start[0].on_loan
    assert [(ln.lender, ln.borrower, ln.gpus) for ln in d.loans] == [("b", "a", 2)]


def test_job_over_quota_waits_when_no_gpu_is_free() -> None:
    # a holds its 4, b holds 2 of its 4: b's 2-GPU job fits its quota and starts; b's 4-GPU job
    # (b would hold 8) and a's best-effort job are above quota and no GPU is left for a loan
    snap = two_nodes()
    snap["jobs"] = [
        running("ra", "a", [("n0", g) for g in range(4)], start_s=5_000.0),
        running("rb", "b", [("n1", 0), ("n1", 1)], start_s=5_000.0),
        pending("b2", "b", 2, submit_s=9_100.0, runtime_s=99_999.0),
        pending("b4", "b", 4, submit_s=9_000.0),
        pending("a2", "a", 2, submit_s=8_000.0, qos="best_effort"),
    ]
    st = state_of(snap)
    d = decide_event(st)
    assert [s.job for s in d.start] == ["b2"] and not d.start[0].on_loan
    assert d.queue == ["b4", "a2"]
    assert check_decision(st, d) == []


def test_blocked_in_quota_job_keeps_free_gpus_from_borrowers() -> None:
    # 3 GPUs free; b's guaranteed 4-GPU job fits b's quota (b holds 0) but not the free GPUs;
    # a's best-effort 2-GPU job would borrow b's idle quota: the event path leaves it queued
    snap = two_nodes()
    snap["jobs"] = [
        running("ra", "a", [("n0", g) for g in range(4)], start_s=5_000.0),
        running("rl", "a", [("n1", 0)], start_s=5_000.0, qos="best_effort", on_loan=True),
        pending("b4", "b", 4, submit_s=9_000.0),
        pending("a2", "a", 2, submit_s=8_000.0, qos="best_effort"),
    ]
    snap["assurance_state"] = None
    st = state_of(snap)
    d = decide_event(st)
    assert d.start == []
    assert sorted(d.queue) == ["a2", "b4"]
    assert [(ln.lender, ln.borrower, ln.gpus) for ln in d.loans] == [("b", "a", 1)]
    assert check_decision(st, d) == []
    # without the hold, a2 borrows 2 of b's idle quota on the free GPUs
    d2 = decide_event(st, hold_for_quota=False)
    assert [(s.job, s.on_loan) for s in d2.start] == [("a2", True)]
    assert [(ln.lender, ln.borrower, ln.gpus) for ln in d2.loans] == [("b", "a", 3)]
    assert check_decision(st, d2) == []


def test_never_preempts_and_never_pairs() -> None:
    snap = two_nodes()
    snap["jobs"] = [
        running("ra", "a", [("n0", g) for g in range(4)], start_s=5_000.0),
        running("rb", "b", [("n1", g) for g in range(4)], start_s=5_000.0,
                qos="best_effort", shareable=True),
        pending("a1", "a", 1, submit_s=9_000.0, shareable=True),
    ]
    d = decide_event(state_of(snap))
    assert d.start == [] and d.preempt == [] and d.queue == ["a1"]


def test_order_guaranteed_then_smallest_gpu_time() -> None:
    snap = two_nodes()
    snap["jobs"] = [
        pending("be", "a", 1, submit_s=1.0, qos="best_effort", runtime_s=10.0),
        pending("long", "a", 1, submit_s=2.0, runtime_s=10_000.0),
        pending("short", "a", 2, submit_s=3.0, runtime_s=100.0),
        pending("unknown", "a", 1, submit_s=0.0, runtime_s=None),
    ]
    st = state_of(snap)
    assert [j.id for j in event_order(st.pending())] == ["short", "long", "unknown", "be"]
    # quota 4 for a: short (2) + long (1) + unknown (1) in quota, be borrows 1 of b's
    d = decide_event(st)
    assert {s.job for s in d.start} == {"short", "long", "unknown", "be"}
    assert [s.job for s in d.start if s.on_loan] == ["be"]


def test_no_loans_when_borrowing_is_forbidden() -> None:
    snap = two_nodes()
    snap["tenants"][0]["borrow_limit"] = {"A100": 0}
    snap["jobs"] = [pending("big", "a", 6, submit_s=9_000.0, qos="best_effort")]
    d = decide_event(state_of(snap))
    assert d.start == [] and d.queue == ["big"] and d.loans == []
    d2 = decide_event(state_of(two_nodes() | {"jobs": snap["jobs"]}), allow_loans=False)
    assert d2.start == []


def test_assurance_state_counts_started_guaranteed_jobs_without_decay() -> None:
    snap = two_nodes(max_delay_s=600.0)
    snap["assurance_state"] = {
        "a": {"a": 0.7, "met": 2.0, "total": 4.0, "missed": ["late"]},
        "b": {"a": 1.0, "met": 1.0, "total": 1.0, "missed": []},
    }
    snap["jobs"] = [
        pending("ok", "a", 1, submit_s=9_800.0),  # waited 200 s <= 600 s
        pending("slow", "a", 1, submit_s=9_000.0),  # waited 1,000 s > 600 s
        pending("late", "a", 1, submit_s=8_000.0),  # already counted as missed
    ]
    d = decide_event(state_of(snap))
    assert {s.job for s in d.start} == {"ok", "slow", "late"}
    assert d.assurance == {"a": 0.7, "b": 1.0}
    assert d.assurance_state is not None
    assert d.assurance_state["a"] == {"a": 0.7, "met": 3.0, "total": 6.0, "missed": []}
    assert d.assurance_state["b"] == {"a": 1.0, "met": 1.0, "total": 1.0, "missed": []}


def test_deterministic() -> None:
    snap = cluster(nodes={f"n{k}": ("A100", 8) for k in range(4)},
                   tenants={"a": {"A100": 12}, "b": {"A100": 12}, "c": {"A100": 8}})
    snap["jobs"] = [
        running("r0", "c", [("n1", 0), ("n1", 1), ("n1", 2)], start_s=1_000.0),
        *[pending(f"p{k}", "abc"[k % 3], 1 + k % 5, submit_s=1_000.0 + k,
                  qos="best_effort" if k % 4 == 0 else "guaranteed", runtime_s=100.0 * (1 + k % 7))
          for k in range(20)],
    ]
    a = decide_event(state_of(snap)).model_dump()
    b = decide_event(state_of(snap)).model_dump()
    a["solver"].pop("seconds")
    b["solver"].pop("seconds")
    assert a == b
    st = state_of(snap)
    d = decide_event(st)
    assert check_decision(st, d) == []
    assert sum(len(s.allocation) for s in d.start) <= 29


def test_checker_failure_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    from optsched.engine import admit
    from optsched.engine.violations import Violation

    monkeypatch.setattr(admit, "check_decision", lambda st, d: [Violation(5, "forced")])
    snap = two_nodes()
    snap["jobs"] = [pending("j1", "a", 1, submit_s=9_000.0)]
    with pytest.raises(EventPathError, match="forced"):
        decide_event(state_of(snap))


class FixedPairs:
    """A pair predictor with fixed speeds per (host, guest)."""

    def __init__(self, speeds: dict[tuple[str, str], tuple[float, float]]) -> None:
        self.speeds = speeds
        self.asked: list[tuple[str, str]] = []

    def predict_jobs(self, state: ClusterState) -> Any:  # pragma: no cover - not used
        raise AssertionError("the event path predicts pairs only")

    def predict_pair(self, state: ClusterState, host: Any, guest: Any) -> Any:
        from optsched.predict.base import PairEstimate

        self.asked.append((host.id, guest.id))
        hs, gs = self.speeds[(host.id, guest.id)]
        return PairEstimate(hs, gs, "test")


def full_with_hosts() -> dict[str, Any]:
    snap = two_nodes()
    snap["jobs"] = [
        running("h0", "a", [("n0", g) for g in range(4)], start_s=5_000.0, shareable=True,
                memory_gib=30.0),
        running("h1", "b", [("n1", g) for g in range(4)], start_s=5_000.0, shareable=True,
                memory_gib=10.0),
        pending("g", "a", 2, submit_s=9_000.0, shareable=True, memory_gib=20.0),
    ]
    return snap


def test_guest_on_the_fastest_safe_pair() -> None:
    pred = FixedPairs({("h0", "g"): (0.9, 0.9), ("h1", "g"): (0.95, 0.9)})
    st = state_of(full_with_hosts())
    d = decide_event(st, predictor=pred)
    assert [(s.job, s.colocated_with, len(s.allocation)) for s in d.start] == [("g", ["h1"], 2)]
    assert {r.node for r in d.start[0].allocation} == {"n1"} and not d.start[0].on_loan
    assert check_decision(st, d) == []
    # least memory first: h1 (10 GiB) is asked before h0 (30 GiB)
    assert pred.asked == [("h1", "g"), ("h0", "g")]
    assert decide_event(st).start == []  # no predictor, no guests


def test_unsafe_pairs_are_refused() -> None:
    st = state_of(full_with_hosts())
    # host slowdown 0.4 > the 0.35 allowed at full assurance; guest speed 0.4 < 0.5
    pred = FixedPairs({("h0", "g"): (0.6, 0.9), ("h1", "g"): (0.95, 0.4)})
    d = decide_event(st, predictor=pred)
    assert d.start == [] and d.queue == ["g"]
    # memory: 20 + 70 > 80 GiB on h1; a low-assurance tenant shares nothing with another
    # tenant's job (b's g is not even predicted on a's h0)
    snap = full_with_hosts()
    snap["jobs"][1]["memory_gib"] = 70.0
    snap["jobs"][2]["tenant"] = "b"
    snap["assurance_state"] = {"a": {"a": 0.4, "met": 0.0, "total": 0.0, "missed": []}}
    pred = FixedPairs({("h0", "g"): (1.0, 1.0), ("h1", "g"): (1.0, 1.0)})
    assert decide_event(state_of(snap), predictor=pred).start == []
    assert pred.asked == []
    # ... nor its own job while it may borrow, but does once it may not (assurance.pair_limit)
    snap["jobs"][2]["tenant"] = "a"
    assert decide_event(state_of(snap), predictor=pred).start == []
    snap["tenants"][0]["borrow_limit"] = {t: 0 for t in snap["gpu_types"]}
    st = state_of(snap)
    d = decide_event(st, predictor=pred)
    assert [(s.job, s.colocated_with) for s in d.start] == [("g", ["h0"])]
    assert pred.asked == [("h0", "g")] and check_decision(st, d) == []


def _a_full_of_its_best_effort() -> dict[str, Any]:
    """Two 4-GPU nodes: tenant a runs two 2-GPU best-effort jobs inside its quota on n0 (the
    newer one started at 8,000 s), b a 4-GPU guaranteed job on n1; a's 2-GPU guaranteed job
    arrives. Nothing is free."""
    snap = two_nodes()
    snap["jobs"] = [
        running("old", "a", [("n0", 0), ("n0", 1)], start_s=5_000.0, qos="best_effort"),
        running("new", "a", [("n0", 2), ("n0", 3)], start_s=8_000.0, qos="best_effort"),
        running("b1", "b", [("n1", g) for g in range(4)], start_s=5_000.0),
        pending("g", "a", 2, submit_s=9_500.0),
    ]
    return snap


def test_a_guaranteed_job_stops_its_own_tenants_newest_best_effort_job_and_only_that() -> None:
    snap = _a_full_of_its_best_effort()
    st = state_of(snap)
    d = decide_event(st, preempt_own=True)
    assert [(p.job, p.reason.value) for p in d.preempt] == [("new", "priority")]
    assert [s.job for s in d.start] == ["g"] and not d.start[0].on_loan
    assert {(r.node, r.gpu) for r in d.start[0].allocation} == {("n0", 2), ("n0", 3)}
    assert d.queue == []
    assert any("stopped for their own tenant's guaranteed starts" in n for n in d.solver.notes)
    assert check_decision(st, d) == []


def test_the_event_path_by_default_leaves_the_guaranteed_job_queued() -> None:
    snap = _a_full_of_its_best_effort()
    d = decide_event(state_of(snap))
    assert d.preempt == [] and d.start == [] and d.queue == ["g"]


def test_a_best_effort_job_inside_its_minimum_runtime_is_not_stopped() -> None:
    snap = _a_full_of_its_best_effort()
    snap["jobs"][1]["min_runtime_s"] = 5_000.0  # "new" has run 2,000 s of its 5,000
    st = state_of(snap)
    d = decide_event(st, preempt_own=True)
    assert [p.job for p in d.preempt] == ["old"]  # the next newest, past its minimum
    assert check_decision(st, d) == []


def test_the_event_path_never_stops_another_tenants_job() -> None:
    # a's quota is idle but b's best-effort job runs there on loan: taking it back is a
    # reclaim, which waits for the epoch's model
    snap = two_nodes()
    snap["jobs"] = [
        running("b1", "b", [("n1", g) for g in range(4)], start_s=5_000.0),
        running("bl", "b", [("n0", g) for g in range(4)], start_s=8_000.0, qos="best_effort", on_loan=True),
        pending("g", "a", 2, submit_s=9_500.0),
    ]
    d = decide_event(state_of(snap), preempt_own=True)
    assert d.preempt == [] and d.start == [] and d.queue == ["g"]


def test_a_stop_that_would_not_make_room_is_undone() -> None:
    # a's 4-GPU guaranteed job fits a's quota only if both its 2-GPU best-effort jobs stop, but
    # they sit on two nodes: no node can be emptied for the 4-GPU gang, so nothing stops
    snap = two_nodes()
    snap["jobs"] = [
        running("x", "a", [("n0", 0), ("n0", 1)], start_s=5_000.0, qos="best_effort"),
        running("y", "a", [("n1", 0), ("n1", 1)], start_s=8_000.0, qos="best_effort"),
        running("b1", "b", [("n0", 2), ("n0", 3)], start_s=5_000.0),
        running("b2", "b", [("n1", 2), ("n1", 3)], start_s=5_000.0),
        pending("g", "a", 4, submit_s=9_500.0),
    ]
    d = decide_event(state_of(snap), preempt_own=True)
    assert d.preempt == [] and d.start == [] and d.queue == ["g"]


def test_a_guaranteed_job_that_can_borrow_borrows_rather_than_stop_its_own_work() -> None:
    # a's quota is full of its best-effort jobs, but b's idle quota has 2 free GPUs on n1: the
    # guaranteed job starts there on loan, and nothing is stopped
    snap = two_nodes()
    snap["jobs"] = [
        running("old", "a", [("n0", 0), ("n0", 1)], start_s=5_000.0, qos="best_effort"),
        running("new", "a", [("n0", 2), ("n0", 3)], start_s=8_000.0, qos="best_effort"),
        running("b1", "b", [("n1", 0), ("n1", 1)], start_s=5_000.0),
        pending("g", "a", 2, submit_s=9_500.0),
    ]
    st = state_of(snap)
    d = decide_event(st, preempt_own=True)
    assert d.preempt == [] and [(s.job, s.on_loan) for s in d.start] == [("g", True)]
    assert check_decision(st, d) == []


def test_a_victim_stopped_for_quota_room_leaves_gpus_that_jobs_inside_quota_take() -> None:
    # a holds its quota of 4 with a 4-GPU best-effort job on n0; b holds n1 with 4 guaranteed
    # GPUs (its quota). a's 2-GPU guaranteed job cannot borrow (no idle quota) and stops a's
    # job; the 2 GPUs it does not need go to a's next job inside quota
    snap = two_nodes()
    snap["jobs"] = [
        running("be4", "a", [("n0", g) for g in range(4)], start_s=8_000.0, qos="best_effort"),
        running("b1", "b", [("n1", g) for g in range(4)], start_s=5_000.0),
        pending("g", "a", 2, submit_s=9_500.0),
        pending("be2", "a", 2, submit_s=9_600.0, qos="best_effort"),
    ]
    st = state_of(snap)
    d = decide_event(st, preempt_own=True)
    assert [p.job for p in d.preempt] == ["be4"]
    assert sorted((s.job, s.on_loan) for s in d.start) == [("be2", False), ("g", False)]
    assert check_decision(st, d) == []

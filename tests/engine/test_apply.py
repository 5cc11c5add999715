"""``apply_decision``: a decision applied as a host would, on hand-made snapshots."""

from __future__ import annotations

from typing import Any

import pytest

from optsched.engine.apply import apply_decision
from optsched.engine.backends.base import SolveParams
from optsched.engine.state import ClusterState, parse_snapshot
from optsched.instances import generate
from optsched.schema.decision import Decision, Preempt, PreemptReason, SolverInfo, Start
from optsched.schema.snapshot import GpuRef, Snapshot
from optsched.testing import cluster, pending, running

NOW = 10_000.0


def decision(**fields: Any) -> Decision:
    return Decision(now=NOW, status="feasible", solver=SolverInfo(backend="test", seconds=0.0), **fields)


def refs(*gpus: tuple[str, int]) -> list[GpuRef]:
    return [GpuRef(node=n, gpu=g) for n, g in gpus]


def snapshot(*jobs: dict[str, Any], **state: Any) -> Snapshot:
    snap = cluster(now=NOW)
    snap["jobs"] = list(jobs)
    snap.update(state)
    return parse_snapshot(snap)


def applied(snap: Snapshot, d: Decision, **kw: Any) -> Snapshot:
    """Apply, check the result validates, and that the input was not touched."""
    before = snap.model_dump()
    out = apply_decision(snap, d, **kw)
    assert snap.model_dump() == before, "apply_decision modified its input"
    ClusterState.from_snapshot(out)
    return out


def job(snap: Snapshot, job_id: str) -> Any:
    return next(j for j in snap.jobs if j.id == job_id)


def test_a_start_becomes_running_at_now_and_the_clock_advances_one_epoch() -> None:
    snap = snapshot(pending("p", "a", 2, submit_s=NOW - 100))
    out = applied(snap, decision(start=[Start(job="p", allocation=refs(("n0", 0), ("n0", 1)))]))
    p = job(out, "p")
    assert p.state == "running"
    assert [r.key() for r in p.allocation] == [("n0", 0), ("n0", 1)]
    assert p.start_s == NOW
    assert p.submit_s == NOW - 100
    assert not p.on_loan and not p.colocated and p.guest_of is None
    assert out.now == NOW + snap.epoch_s == NOW + 60.0


def test_advance_s_overrides_the_epoch_and_must_not_be_negative() -> None:
    snap = snapshot(pending("p", "a", 1, submit_s=NOW))
    assert applied(snap, decision(queue=["p"]), advance_s=5.0).now == NOW + 5.0
    assert applied(snap, decision(queue=["p"]), advance_s=0).now == NOW
    with pytest.raises(ValueError, match="advance_s"):
        apply_decision(snap, decision(), advance_s=-1.0)


def test_a_start_on_loan_is_marked_on_loan() -> None:
    snap = snapshot(
        running("a1", "a", [("n0", k) for k in range(4)], start_s=NOW - 500),
        pending("a2", "a", 2, submit_s=NOW - 50),
    )
    out = applied(
        snap, decision(start=[Start(job="a2", allocation=refs(("n0", 4), ("n0", 5)), on_loan=True)])
    )
    assert job(out, "a2").on_loan
    assert not job(out, "a1").on_loan


def test_a_preempted_job_is_pending_again_with_its_submit_time_and_no_restart_cost() -> None:
    snap = snapshot(
        running(
            "b1",
            "b",
            [("n0", 0), ("n0", 1)],
            start_s=NOW - 500,
            qos="best_effort",
            on_loan=True,
            restart_cost_s=240.0,
            submit_s=NOW - 900,
        ),
        pending("a1", "a", 2, submit_s=NOW - 700),
    )
    d = decision(
        start=[Start(job="a1", allocation=refs(("n0", 0), ("n0", 1)))],
        preempt=[Preempt(job="b1", reason=PreemptReason.RECLAIM, lost_s=240.0)],
    )
    out = applied(snap, d)
    b1 = job(out, "b1")
    assert b1.state == "pending"
    assert b1.submit_s == NOW - 900
    assert b1.allocation is None and b1.start_s is None
    assert not b1.on_loan and not b1.colocated
    assert b1.restart_cost_s == 0.0
    assert b1.qos == "best_effort" and b1.runtime_s == 36000.0
    assert job(out, "a1").state == "running"


def test_a_guest_shares_its_host_and_both_are_marked_colocated() -> None:
    snap = snapshot(
        running("h", "a", [("n0", 0)], start_s=NOW - 500, qos="best_effort", shareable=True),
        pending("g", "b", 1, submit_s=NOW - 30, qos="best_effort"),
    )
    out = applied(snap, decision(start=[Start(job="g", allocation=refs(("n0", 0)), colocated_with=["h"])]))
    g, h = job(out, "g"), job(out, "h")
    assert g.state == "running" and g.colocated and g.guest_of == "h" and not g.on_loan
    assert h.colocated and h.guest_of is None
    assert ClusterState.from_snapshot(out).host_of == {"g": "h"}


def test_stopping_a_guest_leaves_its_host_alone_and_stopping_both_frees_the_gpu() -> None:
    host = running(
        "h", "a", [("n0", 0)], start_s=NOW - 500, qos="best_effort", shareable=True, colocated=True
    )
    guest = running("g", "b", [("n0", 0)], start_s=NOW - 400, qos="best_effort", colocated=True, guest_of="h")
    snap = snapshot(host, guest)
    out = applied(snap, decision(preempt=[Preempt(job="g", reason=PreemptReason.INTERFERENCE)]))
    assert not job(out, "h").colocated and job(out, "g").state == "pending"
    out = applied(
        snap,
        decision(
            preempt=[
                Preempt(job="h", reason=PreemptReason.PRIORITY),
                Preempt(job="g", reason=PreemptReason.PRIORITY),
            ]
        ),
    )
    assert {j.state for j in out.jobs} == {"pending"}


def test_a_guest_whose_host_stops_keeps_its_gpus_alone_on_loan_above_quota() -> None:
    """Not a decision the engine makes (stopping a host stops its guest), but a host may:
    the guest keeps its GPUs, as in the simulator, and is on loan when above its quota."""
    full = [("n0", k) for k in range(1, 5)]
    snap = snapshot(
        running("h", "a", [("n0", 0)], start_s=NOW - 500, qos="best_effort", shareable=True, colocated=True),
        running("g", "b", [("n0", 0)], start_s=NOW - 400, qos="best_effort", colocated=True, guest_of="h"),
        running("b-own", "b", full, start_s=NOW - 900),
    )
    out = applied(snap, decision(preempt=[Preempt(job="h", reason=PreemptReason.PRIORITY)]))
    g = job(out, "g")
    assert g.state == "running" and not g.colocated and g.guest_of is None and g.on_loan


def test_the_assurance_state_is_fed_back_unchanged() -> None:
    state = {"a": {"a": 0.5, "met": 1.0, "total": 2.0, "missed": ["x"]}}
    snap = snapshot(pending("p", "a", 1, submit_s=NOW), assurance_state={"a": {"a": 0.9}})
    d = decision(queue=["p"], assurance_state=state)
    out = applied(snap, d)
    assert out.assurance_state == state
    out.assurance_state["a"]["missed"].append("y")  # type: ignore[index]
    assert d.assurance_state["a"]["missed"] == ["x"], "the result shares state with the decision"
    assert applied(snap, decision(queue=["p"])).assurance_state is None


@pytest.mark.parametrize(
    ("d", "match"),
    [
        (decision(start=[Start(job="r", allocation=refs(("n0", 1)))]), "not a pending job"),
        (decision(start=[Start(job="nope", allocation=refs(("n0", 1)))]), "not a pending job"),
        (decision(preempt=[Preempt(job="p", reason=PreemptReason.PRIORITY)]), "not a running job"),
        (Decision(now=NOW + 1, status="feasible", solver=SolverInfo(backend="t", seconds=0)), "now="),
    ],
)
def test_a_decision_that_does_not_fit_the_snapshot_is_rejected(d: Decision, match: str) -> None:
    snap = snapshot(running("r", "a", [("n0", 0)], start_s=NOW - 10), pending("p", "a", 1, submit_s=NOW))
    with pytest.raises(ValueError, match=match):
        apply_decision(snap, d)


def test_a_solved_generated_epoch_applies_to_a_valid_snapshot() -> None:
    from optsched.engine.epoch import solve_epoch

    snap = parse_snapshot(generate("tiny", 3))
    d = solve_epoch(snap, params=SolveParams(backend="greedy"))
    out = applied(snap, d)
    started = {s.job for s in d.start}
    stopped = {p.job for p in d.preempt}
    assert started and all(job(out, j).state == "running" for j in started)
    assert all(job(out, j).state == "pending" for j in stopped)
    assert out.now == snap.now + 60.0
    assert out.assurance_state == d.assurance_state

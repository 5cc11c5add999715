"""borrow_limit 0 keeps a tenant's MPS guests on its own hosts (invariant 4)."""

from __future__ import annotations

from typing import Any

from optsched import solve_epoch
from optsched.engine.backends.base import SolveParams
from optsched.engine.check import check_decision
from optsched.engine.state import ClusterState
from optsched.schema.decision import Decision, SolverInfo, Start
from optsched.schema.snapshot import GpuRef, Snapshot
from optsched.testing import cluster, pending, running


def snap(borrow: int | None) -> dict[str, Any]:
    s = cluster(nodes={"n0": ("A100", 2)}, tenants={"a": {"A100": 2}, "b": {"A100": 0}})
    if borrow is not None:
        s["tenants"][1]["borrow_limit"] = {"A100": borrow}
    s["jobs"] = [
        running("h", "a", [("n0", 0), ("n0", 1)], start_s=5_000.0, shareable=True,
                memory_gib=10.0),
        pending("g", "b", 1, submit_s=9_000.0, qos="best_effort", shareable=True,
                memory_gib=10.0),
    ]
    return s


def state(s: dict[str, Any]) -> ClusterState:
    return ClusterState.from_snapshot(Snapshot.model_validate(s))


def guest_decision(st: ClusterState) -> Decision:
    return Decision(
        now=st.snapshot.now, status="feasible", solver=SolverInfo(backend="hand", seconds=0.0),
        start=[Start(job="g", allocation=[GpuRef(node="n0", gpu=0)], colocated_with=["h"])],
    )


def test_checker_rejects_a_cross_tenant_guest_of_a_tenant_that_may_not_borrow() -> None:
    st = state(snap(0))
    bad = check_decision(st, guest_decision(st))
    assert [v.invariant for v in bad] == [4]
    assert "borrow_limit 0" in bad[0].message and "'h'" in bad[0].message
    for ok in (None, 1):
        st = state(snap(ok))
        assert check_decision(st, guest_decision(st)) == []


def test_engine_pairs_across_tenants_only_when_the_guest_may_borrow() -> None:
    params = SolveParams(backend="greedy", time_limit_s=1.0)
    d = solve_epoch(state(snap(None)), params=params)
    assert [(s.job, s.colocated_with) for s in d.start] == [("g", ["h"])]
    d = solve_epoch(state(snap(0)), params=params)
    assert d.start == [] and d.queue == ["g"]

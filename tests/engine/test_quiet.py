"""The assurance figures of a decision that changes nothing (``assurance.quiet_figures``,
``admit.quiet_event_assurance``): what a host that knows nothing can start logs without asking
(the simulator's partitioned replays), checked against the decisions the engine makes."""

from __future__ import annotations

from typing import Any

from optsched.engine.admit import decide_event, quiet_event_assurance
from optsched.engine.assurance import quiet_figures
from optsched.engine.epoch import solve_epoch
from optsched.engine.state import ClusterState, parse_snapshot
from optsched.schema.decision import PreemptReason
from optsched.testing import cluster, pending, running

NOW = 10_000.0


def _full_cluster(wait_s: float, assurance_state: dict[str, Any] | None = None) -> ClusterState:
    """One 8-GPU node, tenants a and b with 4 GPUs of quota each and all of it in use: a's
    best-effort host ``h`` (1 GPU, b's guest ``g`` on it) and guaranteed ``a-own`` (3 GPUs),
    b's ``b-own`` (4 GPUs); a's guaranteed ``p`` (4 GPUs) has waited ``wait_s``."""
    snap = cluster(now=NOW)
    snap["jobs"] = [
        running("h", "a", [("n0", 0)], start_s=NOW - 500, qos="best_effort", shareable=True,
                colocated=True),
        running("g", "b", [("n0", 0)], start_s=NOW - 400, qos="best_effort", colocated=True,
                guest_of="h"),
        running("a-own", "a", [("n0", k) for k in (1, 2, 3)], start_s=NOW - 900),
        running("b-own", "b", [("n0", k) for k in (4, 5, 6, 7)], start_s=NOW - 900),
        pending("p", "a", 4, submit_s=NOW - wait_s),
    ]
    if assurance_state is not None:
        snap["assurance_state"] = assurance_state
    return ClusterState.from_snapshot(parse_snapshot(snap))


def test_an_epoch_that_starts_nothing_carries_the_quiet_figures() -> None:
    prev = {"a": {"a": 0.9, "met": 3.0, "total": 4.0, "missed": []}, "b": {"a": 1.0}}
    state = _full_cluster(wait_s=60.0, assurance_state=prev)
    d = solve_epoch(state)
    assert not d.start and not d.preempt and not d.resize
    assert quiet_figures(state) == (d.assurance, d.assurance_state)


def test_an_epoch_that_evicts_a_guest_has_no_quiet_figures() -> None:
    # a's guaranteed job has waited past its 600 s delay: a's assurance falls below the share
    # threshold, so its host may take no guest, and the epoch stops b's guest without a start
    state = _full_cluster(wait_s=1_000.0)
    d = solve_epoch(state)
    assert not d.start
    assert [(p.job, p.reason) for p in d.preempt] == [("g", PreemptReason.INTERFERENCE)]
    assert quiet_figures(state) is None


def test_an_event_that_starts_nothing_carries_the_previous_state() -> None:
    prev = {"a": {"a": 0.81234567, "met": 2.00000001, "total": 3.0, "missed": ["x", "p"]}}
    state = _full_cluster(wait_s=60.0, assurance_state=prev)
    d = decide_event(state)
    assert not d.start and not d.preempt
    assert quiet_event_assurance(state.tenant_ids, prev) == (d.assurance, d.assurance_state)
    assert d.assurance == {"a": 0.812346, "b": 1.0}
    assert d.assurance_state["b"] == {"a": 1.0, "met": 0.0, "total": 0.0, "missed": []}
    assert quiet_event_assurance(("a",), None) == ({"a": 1.0}, {"a": {"a": 1.0, "met": 0.0, "total": 0.0,
                                                                     "missed": []}})

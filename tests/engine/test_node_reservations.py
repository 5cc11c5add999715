"""Gang reservations in node shape: the look-ahead holds whole nodes, the model, the fill pass
and the event path keep every start that outlives the reservation off them."""

from __future__ import annotations

from typing import Any

from optsched.engine.admit import decide_event
from optsched.engine.check import check_decision
from optsched.engine.epoch import solve_epoch
from optsched.engine.state import ClusterState
from optsched.predict.fallback import EstimatePredictor
from optsched.schema.decision import Decision, QueueReason, Reservation
from optsched.schema.snapshot import Snapshot
from optsched.testing import cluster, pending, running

NOW = 10_000.0


def _run(jid: str, node: str, gpus: int, remaining: float, elapsed: float = 1000.0) -> dict[str, Any]:
    return running(
        jid, "a", [(node, g) for g in range(gpus)], start_s=NOW - elapsed, runtime_s=elapsed + remaining
    )


def node_snapshot(*jobs: dict[str, Any], spread_gang: bool = False) -> dict[str, Any]:
    """Six 8-GPU nodes. n0 and n1 are full until now + 600 and + 1200; n2 and n3 have 4 GPUs
    free, the other 4 held until now + 900 (n2) and + 5000 (n3); n4 and n5 are full for
    longer. A 24-GPU gang (three whole nodes) waits longest: n0, n2 and n1 are predicted to be
    whole first, so it starts at now + 1200 and holds n2's 4 free GPUs (n0's and n1's jobs end
    by then). Counting GPUs per type, it would hold 4 GPUs anywhere."""
    snap = cluster(nodes={f"n{i}": ("A100", 8) for i in range(6)}, tenants={"a": {"A100": 56}}, now=NOW)
    snap["epoch_s"] = 300.0
    gang = pending("gang", "a", 24, submit_s=1000.0, qos="best_effort")
    if spread_gang:
        gang["spread"] = True
    snap["jobs"] = [
        _run("r0", "n0", 8, 600),
        _run("r1", "n1", 8, 1200),
        _run("r2", "n2", 4, 900),
        _run("r3", "n3", 4, 5000),
        _run("r4", "n4", 8, 7000),
        _run("r5", "n5", 8, 8000),
        gang,
        *jobs,
    ]
    snap["options"] = {"reserve_min_gpus": 16}
    return snap


def _state(snap: dict[str, Any]) -> ClusterState:
    return ClusterState.from_snapshot(Snapshot.model_validate(snap))


def _solve(snap: dict[str, Any]) -> tuple[ClusterState, Decision]:
    state = _state(snap)
    return state, solve_epoch(state, predictor=EstimatePredictor())


def _nodes(d: Decision, job: str) -> set[str]:
    return {r.node for s in d.start if s.job == job for r in s.allocation}


HELD = Reservation(job="gang", gpu_type="A100", gpus=24, start_s=NOW + 1200, held=4, nodes={"n2": 4})


def test_reservation_holds_the_nodes_predicted_whole_first_and_keeps_long_jobs_off() -> None:
    # two 4-GPU jobs that outlive the gang's start: 8 GPUs are free (4 on n2, 4 on n3), but
    # n2's are the gang's, so one starts on n3 and the other waits for the reservation
    state, d = _solve(node_snapshot(
        pending("long", "a", 4, submit_s=4000.0, runtime_s=7200.0),
        pending("long2", "a", 4, submit_s=4500.0, runtime_s=7200.0),
    ))
    assert check_decision(state, d) == []
    assert d.reservations == [HELD]
    assert [s.job for s in d.start] == ["long"]
    assert _nodes(d, "long") == {"n3"}
    assert d.queue_reasons["long2"] == QueueReason.RESERVED
    e = d.explanations["long2"]
    assert e.binding == "reservation" and e.reserved_for == "gang"
    assert d.expected_start_s["gang"] == NOW + 1200


def test_a_job_that_ends_before_the_gang_starts_is_backfilled_on_the_held_node() -> None:
    state, d = _solve(node_snapshot(
        pending("long", "a", 4, submit_s=4000.0, runtime_s=7200.0),
        pending("short", "a", 4, submit_s=5000.0, runtime_s=1000.0),
    ))
    assert check_decision(state, d) == []
    assert d.reservations == [HELD]
    assert sorted(s.job for s in d.start) == ["long", "short"]
    assert _nodes(d, "long") == {"n3"} and _nodes(d, "short") == {"n2"}


def test_the_checker_rejects_a_long_start_on_a_held_node() -> None:
    state, d = _solve(node_snapshot(
        pending("long", "a", 4, submit_s=4000.0, runtime_s=7200.0),
        pending("short", "a", 4, submit_s=5000.0, runtime_s=1000.0),
    ))
    swapped = d.model_copy(deep=True)
    for s in swapped.start:
        s.job = {"long": "short", "short": "long"}[s.job]
    bad = check_decision(state, swapped)
    assert [(v.invariant, v.ids) for v in bad] == [(8, ("gang",))]
    assert "4 GPUs of 'n2' are held for it, but only 0 stay free" in bad[0].message


def test_event_path_keeps_an_arrival_off_the_held_node() -> None:
    """Between epochs: the arrival that outlives the gang's start takes n3, the one predicted to
    end before it the held n2, and the decision states the reservation it kept."""
    state = _state(node_snapshot(
        pending("long", "a", 4, submit_s=9990.0, runtime_s=7200.0),
        pending("short", "a", 4, submit_s=9995.0, runtime_s=1000.0),
    ))
    d = decide_event(state, predictor=EstimatePredictor())
    assert d.solver.backend == "event"
    assert d.reservations == [HELD]
    assert _nodes(d, "long") == {"n3"} and _nodes(d, "short") == {"n2"}
    assert check_decision(state, d) == []


def test_event_path_leaves_a_long_arrival_queued_rather_than_take_the_held_node() -> None:
    state = _state(node_snapshot(
        pending("long", "a", 4, submit_s=9990.0, runtime_s=7200.0),
        pending("long2", "a", 4, submit_s=9995.0, runtime_s=7200.0),
    ))
    d = decide_event(state, predictor=EstimatePredictor())
    assert [s.job for s in d.start] == ["long"] and _nodes(d, "long") == {"n3"}
    assert d.queue == ["long2", "gang"]
    assert d.reservations == [HELD]
    assert check_decision(state, d) == []
    # without the reservation the checker would call "long2" startable
    bare = d.model_copy(update={"reservations": []})
    assert [(v.invariant, v.ids) for v in check_decision(state, bare)] == [(8, ("long2",))]


def test_a_gang_that_spreads_is_reserved_by_counting_gpus_as_before() -> None:
    """No node shape (``spread``): the reservation counts GPUs per type and names no nodes,
    as it did before reservations knew nodes; the event path holds nothing for it."""
    snap = node_snapshot(pending("long", "a", 4, submit_s=4000.0, runtime_s=7200.0), spread_gang=True)
    state, d = _solve(snap)
    assert check_decision(state, d) == []
    assert d.reservations == [Reservation(job="gang", gpu_type="A100", gpus=24, start_s=NOW + 1200, held=4)]
    d2 = decide_event(_state(snap), predictor=EstimatePredictor())
    assert d2.reservations == [] and d2.predictions is None


def test_a_gang_that_fits_free_gpus_but_not_whole_nodes_gets_a_reservation() -> None:
    """8 GPUs are free, but on two nodes: an 8-GPU gang cannot start. Counting GPUs per type
    it could, so it got no reservation and every small job could take its GPUs."""
    snap = node_snapshot(pending("long", "a", 4, submit_s=4000.0, runtime_s=7200.0))
    snap["jobs"] = [j for j in snap["jobs"] if j["id"] != "gang"]
    snap["jobs"].append(pending("gang8", "a", 8, submit_s=1000.0, qos="best_effort"))
    snap["options"] = {"reserve_min_gpus": 8}
    state, d = _solve(snap)
    assert check_decision(state, d) == []
    # n0 is whole first (now + 600): its job ends by then, so no free GPU there is held
    assert d.reservations == [
        Reservation(job="gang8", gpu_type="A100", gpus=8, start_s=NOW + 600, held=0, nodes={})
    ]


def test_same_snapshot_same_decision_with_held_nodes() -> None:
    def strip(d: Decision) -> dict[str, Any]:
        out = d.model_dump(mode="json")
        out["solver"].pop("seconds")
        out["solver"].pop("stage_seconds")
        return out

    jobs = (
        pending("long", "a", 4, submit_s=4000.0, runtime_s=7200.0),
        pending("short", "a", 4, submit_s=5000.0, runtime_s=1000.0),
    )
    assert strip(_solve(node_snapshot(*jobs))[1]) == strip(_solve(node_snapshot(*jobs))[1])
    ev = [strip(decide_event(_state(node_snapshot(*jobs)), predictor=EstimatePredictor())) for _ in range(2)]
    assert ev[0] == ev[1]


def test_a_share_kept_off_whole_nodes_held_for_a_gang_is_no_idle_capacity() -> None:
    # node-shaped medium seed 3: four whole H100 nodes are held for a 64-GPU gang and their 32
    # GPUs are the type's only free ones; jobs asking 750 thousandths of a GPU wait with reason
    # `reserved`. The checker read each node's largest free share without the hold, called them
    # idle capacity (invariant 8), and every plan of the fallback chain failed: an internal error
    import optsched
    from optsched.engine.backends.base import SolveParams
    from optsched.engine.check import check_decision
    from optsched.engine.epoch import default_predictor
    from optsched.engine.state import load_state
    from optsched.instances import generate

    state = load_state(generate("medium", 3, shapes=True))
    params = SolveParams(backend="greedy", time_limit_s=60)
    d = optsched.solve_epoch(state, params=params, predictor=default_predictor())
    assert check_decision(state, d) == []
    assert any(r.nodes for r in d.reservations)
    waiting = [j for j in d.queue if state.job(j).is_fractional and d.queue_reasons[j].value == "reserved"]
    assert waiting

"""Issue 12: queue order as a decision, with a look-ahead (reservations, expected starts)."""

from __future__ import annotations

from typing import Any

import pytest

from optsched.engine.check import check_decision
from optsched.engine.epoch import solve_epoch
from optsched.engine.explain import describe_job
from optsched.engine.lookahead import _cpsat_plan, _greedy_plan, _Item, _score
from optsched.engine.state import ClusterState
from optsched.predict.fallback import EstimatePredictor
from optsched.schema.decision import Decision, QueueReason, Reservation
from optsched.schema.snapshot import Snapshot
from optsched.testing import cluster, pending, running

NOW = 10_000.0


def _run(jid: str, node: str, remaining: float, elapsed: float = 1000.0) -> dict[str, Any]:
    return running(
        jid, "a", [(node, g) for g in range(8)], start_s=NOW - elapsed, runtime_s=elapsed + remaining
    )


def gang_snapshot(backend: str = "auto") -> dict[str, Any]:
    """40 GPUs, 8 free; running jobs predicted to end in 600, 1200, 3000 and 5000 s. A 32-GPU
    gang waits longest: 8 + 8 + 8 + 8 GPUs are free by now + 3000, and the 24 GPUs of the jobs
    ending by then leave 8 of today's free GPUs to hold for it."""
    snap = cluster(nodes={f"n{i}": ("A100", 8) for i in range(5)}, tenants={"a": {"A100": 40}}, now=NOW)
    snap["epoch_s"] = 300.0
    snap["jobs"] = [
        _run("r1", "n0", 600),
        _run("r2", "n1", 1200),
        _run("r3", "n2", 3000),
        _run("r4", "n3", 5000),
        pending("gang", "a", 32, submit_s=1000.0, qos="best_effort"),
        pending("short", "a", 4, submit_s=5000.0, runtime_s=1000.0),
        pending("long", "a", 4, submit_s=4000.0, runtime_s=7200.0),
        pending("small2", "a", 8, submit_s=6000.0, runtime_s=600.0),
    ]
    snap["options"] = {"backend": backend, "reserve_min_gpus": 16}
    return snap


def _solve(snap: dict[str, Any]) -> tuple[ClusterState, Decision]:
    state = ClusterState.from_snapshot(Snapshot.model_validate(snap))
    return state, solve_epoch(state, predictor=EstimatePredictor())


def test_gang_reservation_holds_long_jobs_and_backfills_short_ones(backend: str) -> None:
    state, d = _solve(gang_snapshot(backend))
    assert check_decision(state, d) == []
    assert d.reservations == [
        Reservation(job="gang", gpu_type="A100", gpus=32, start_s=NOW + 3000, held=8, nodes={"n4": 8})
    ]
    # "short" (1000 s) ends before the gang starts: backfilled on held GPUs; "long" (7200 s)
    # would delay it and waits, although 4 GPUs are free and its tenant has idle quota
    assert [s.job for s in d.start] == ["short"]
    assert d.queue_reasons["long"] == QueueReason.RESERVED
    e = d.explanations["long"]
    assert e.binding == "reservation" and e.reserved_for == "gang" and e.blocked_by == []
    assert e.text.startswith(f"reserved for gang gang at time {NOW + 3000:.0f}: 4 'A100' GPUs are free")
    # hand-computed plan: slots now + 300 k, k = 1..6; "small2" (8 GPUs, 600 s) needs r1's 8
    # GPUs (free from now + 600, since "short" holds 4 of the 8 free until now + 1000); "long"
    # overlaps the gang's start, where no GPU is left: beyond the horizon
    assert d.expected_start_s == {"small2": NOW + 600, "gang": NOW + 3000}
    assert d.queue == ["small2", "gang", "long"]
    assert d.explanations["small2"].expected_start_s == NOW + 600
    assert d.explanations["gang"].text.endswith(
        f"It has a reservation: 8 free 'A100' GPUs are held for it, and its 32 GPUs are predicted free "
        f"at {NOW + 3000:.0f}."
    )
    assert d.explanations["long"].expected_start_s is None


def test_without_reservations_the_checker_flags_the_held_job() -> None:
    state, d = _solve(gang_snapshot())
    bare = d.model_copy(update={"reservations": []})
    bad = check_decision(state, bare)
    assert [(v.invariant, v.ids) for v in bad] == [(8, ("long",))]


def test_checker_rejects_a_long_start_on_held_gpus() -> None:
    state, d = _solve(gang_snapshot())
    swapped = d.model_copy(deep=True)
    start = next(s for s in swapped.start if s.job == "short")
    start.job = "long"
    swapped.queue = [j if j != "long" else "short" for j in swapped.queue]
    swapped.queue_reasons.pop("long")
    swapped.explanations.pop("long")
    bad = check_decision(state, swapped)
    msgs = [str(v) for v in bad]
    assert any(v.invariant == 8 and v.ids == ("gang",) and "only 4 stay free" in str(v) for v in bad), msgs
    # and "short", which would end before the gang, may not wait for it
    assert any(v.invariant == 8 and v.ids == ("short",) for v in bad), msgs


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"held": 9, "nodes": {"n4": 9}}, "needs at most 8"),
        ({"held": 9}, "its nodes hold 8 GPUs, not 9"),
        # n0's job is predicted to end by the gang's start: its 8 GPUs are the gang's already
        ({"nodes": {"n0": 8}}, "on 'n0', but its largest piece of 8 needs at most 0"),
        ({"nodes": {"n4": 4, "n0": 4}}, "on 'n0'"),
        ({"nodes": None, "held": 9}, "needs at most 8"),  # without nodes: counted per type
        ({"gpus": 16}, "the job's gang is 32"),
        ({"start_s": NOW}, "is not after now"),
        ({"job": "r1"}, "is not queued"),
        ({"gpu_type": "H100"}, "cannot hold the job"),
    ],
)
def test_checker_rejects_malformed_reservations(change: dict[str, Any], needle: str) -> None:
    state, d = _solve(gang_snapshot())
    r = d.reservations[0].model_copy(update=change)
    bad = check_decision(state, d.model_copy(update={"reservations": [r]}))
    assert any(v.invariant == 8 and needle in v.message for v in bad), [str(v) for v in bad]


def test_expected_start_for_a_job_not_queued_is_rejected() -> None:
    state, d = _solve(gang_snapshot())
    bad = check_decision(state, d.model_copy(update={"expected_start_s": {"short": NOW + 300}}))
    assert [(v.invariant, v.ids) for v in bad] == [(5, ("short",))]


def small_snapshot(epochs: int | None) -> dict[str, Any]:
    """8 GPUs, all held by a job predicted to end in 700 s; slots every 300 s."""
    snap = cluster(nodes={"n0": ("A100", 8)}, tenants={"a": {"A100": 8}}, now=NOW)
    snap["epoch_s"] = 300.0
    snap["jobs"] = [
        _run("r", "n0", 700),
        pending("p1", "a", 4, submit_s=100.0, runtime_s=300.0),
        pending("p2", "a", 4, submit_s=200.0, runtime_s=300.0),
        pending("p3", "a", 8, submit_s=300.0, runtime_s=3000.0),
    ]
    snap["options"] = {"lookahead_epochs": epochs} if epochs is not None else {}
    return snap


def test_expected_starts_by_hand() -> None:
    # r leaves at now + 700: p1 and p2 are planned together in the first slot after it
    # (now + 900), and may start when r ends (now + 700); planned till now + 1200, when p3 gets
    # all 8 GPUs. (p3 first would hold every GPU until now + 3900 and push p1 and p2 out of the
    # horizon: worth less.)
    state, d = _solve(small_snapshot(4))
    assert check_decision(state, d) == []
    assert d.expected_start_s == {"p1": NOW + 700, "p2": NOW + 700, "p3": NOW + 1200}
    assert set(d.queue[:2]) == {"p1", "p2"} and d.queue[2] == "p3"
    assert d.reservations == []
    lines = describe_job(state, d, "p3")
    assert f"expected start: {NOW + 1200:g} (in 1200 s, look-ahead plan)" in lines


def test_a_job_beyond_the_horizon_has_no_expected_start() -> None:
    # three slots end at now + 900: p3's slot (now + 1200) is beyond them
    state, d = _solve(small_snapshot(3))
    assert d.expected_start_s == {"p1": NOW + 700, "p2": NOW + 700}
    assert d.queue[2] == "p3"
    assert d.explanations["p3"].expected_start_s is None
    assert "expected start: beyond the look-ahead plan's horizon" in describe_job(state, d, "p3")


def test_lookahead_off_keeps_the_value_order() -> None:
    _, off = _solve(small_snapshot(0))
    assert off.expected_start_s == {} and off.reservations == []
    _, on = _solve(small_snapshot(None))  # the default: 6 epochs
    assert on.expected_start_s == {"p1": NOW + 700, "p2": NOW + 700, "p3": NOW + 1200}
    off_gang = gang_snapshot()
    off_gang["options"]["lookahead_epochs"] = 0
    state, d = _solve(off_gang)
    # no reservation: the 8 free GPUs (one node) go to queued jobs that fit, the most valuable
    # use of them (small2 alone is worth more than short and long together, and each GPU a
    # reclaim start takes back earns the same bonus)
    assert d.reservations == [] and sum(len(s.allocation) for s in d.start) == 8
    assert {s.job for s in d.start} == {"small2"}
    assert check_decision(state, d) == []


def test_reserve_min_gpus_option() -> None:
    snap = gang_snapshot()
    snap["options"]["reserve_min_gpus"] = 33
    _, d = _solve(snap)
    assert d.reservations == []


def test_same_snapshot_same_decision() -> None:
    def strip(d: Decision) -> dict[str, Any]:
        out = d.model_dump(mode="json")
        out["solver"].pop("seconds")
        out["solver"].pop("stage_seconds")
        return out

    a = strip(_solve(gang_snapshot("cpsat"))[1])
    b = strip(_solve(gang_snapshot("cpsat"))[1])
    assert a == b


def test_slot_model_beats_the_value_ordered_list_schedule() -> None:
    # 8 GPUs at each of 3 slots; A (worth 3, 8 GPUs) first in value order takes slot 1, pushing
    # B and C (worth 2 each, 4 GPUs) to slot 2: 3*3 + 2*2 + 2*2 = 17. B and C first: 18.
    spans = [(k, k, k) for k in (1, 2, 3)]
    items = [_Item("A", 8, [0], spans, 3), _Item("B", 4, [0], spans, 2), _Item("C", 4, [0], spans, 2)]
    free = [[8, 8, 8, 8]]
    greedy = _greedy_plan(items, [list(free[0])])
    assert greedy == [(1, 0), (2, 0), (2, 0)] and _score(items, greedy, 3) == 17
    best = _cpsat_plan(items, free, 3, greedy, seed=0, work_s=1.0)
    assert best == [(2, 0), (1, 0), (1, 0)] and _score(items, best, 3) == 18
    # nothing better than an optimal hint: None (the hint stays)
    assert _cpsat_plan(items, free, 3, best, seed=0, work_s=1.0) is None


@pytest.mark.parametrize(
    ("size", "seed", "reserved"), [("tiny", 0, 1), ("tiny", 3, 0), ("venus", 1, 0), ("medium", 0, 1)]
)
def test_generated_snapshots_with_reservations_pass_the_checker(size: str, seed: int, reserved: int) -> None:
    from optsched.instances import generate

    snap = generate(size, seed=seed)  # type: ignore[arg-type]
    snap["options"] = {**(snap.get("options") or {}), "reserve_min_gpus": 2, "backend": "greedy"}
    state, d = _solve(snap)
    assert check_decision(state, d) == []
    assert set(d.expected_start_s) <= set(d.queue)
    assert len(d.reservations) == reserved
    held = {r.job for r in d.reservations}
    assert held <= set(d.queue) and len({r.gpu_type for r in d.reservations}) == len(d.reservations)
    # the planned order: announced starts first, in time order
    times = [d.expected_start_s[j] for j in d.queue if j in d.expected_start_s]
    assert times == sorted(times)
    assert d.queue[: len(times)] == [j for j in d.queue if j in d.expected_start_s]


def test_generated_reservation_case_on_every_backend(backend: str) -> None:
    from optsched.instances import generate

    snap = generate("tiny", seed=0)
    snap["options"] = {**(snap.get("options") or {}), "reserve_min_gpus": 2, "backend": backend}
    state, d = _solve(snap)
    assert len(d.reservations) == 1
    assert check_decision(state, d) == []


def test_plan_waits_for_its_own_tenants_gpus_in_a_hard_partition() -> None:
    # tenant a may not borrow (borrow_limit 0): its 8-GPU partition is held by r until
    # now + 1000, so its queued 4-GPU job cannot be planned on the 8 idle GPUs of b's quota
    # (n1) in the first slots; it is planned in the slot after r ends (now + 1200) and may
    # start when r ends. b's job takes 4 of n1's GPUs now.
    snap = cluster(nodes={"n0": ("A100", 8), "n1": ("A100", 8)}, tenants={"a": {"A100": 8}, "b": {"A100": 8}},
                   now=NOW)
    snap["tenants"][0]["borrow_limit"] = {"A100": 0}
    snap["epoch_s"] = 300.0
    snap["jobs"] = [
        running("r", "a", [("n0", g) for g in range(8)], start_s=NOW - 1000, runtime_s=2000.0),
        pending("pa", "a", 4, submit_s=5000.0, runtime_s=600.0),
        pending("pb", "b", 4, submit_s=6000.0, runtime_s=600.0),
    ]
    state, d = _solve(snap)
    assert check_decision(state, d) == []
    assert [s.job for s in d.start] == ["pb"]
    assert d.queue == ["pa"]
    assert d.expected_start_s == {"pa": NOW + 1000}
    # the same plan without the cap would have put it in the first slot, on n1's free GPUs
    from optsched.engine.lookahead import _greedy_plan as plan

    spans = [(k, k, 6) for k in range(1, 7)]
    free = [[4] * 7]
    capped = [[0, 0, 0, 0, 8, 8, 8]]  # a's partition: free from the 4th instant
    item = _Item("pa", 4, [0], spans, 1, [(0, 1)])
    assert plan([item], [list(free[0]), list(capped[0])]) == [(4, 0)]
    assert plan([_Item("pa", 4, [0], spans, 1)], [list(free[0])]) == [(1, 0)]


def test_slot_model_answers_are_remembered_by_their_inputs() -> None:
    # the slot model is a pure function of its inputs: the same inputs again are answered from
    # memory, with the answer a fresh solve gives (and so is the whole decision)
    from optsched.engine.lookahead import _cached_plan

    _cached_plan.cache_clear()
    spans = [(1, 0, 1), (2, 1, 2), (3, 2, 2)]
    free = [[8, 8, 8]]
    items = [_Item("A", 8, [0], spans, 3), _Item("B", 4, [0], spans, 2), _Item("C", 4, [0], spans, 2)]
    greedy = _greedy_plan(items, [list(free[0])])
    fresh = _cpsat_plan(items, free, 3, greedy, seed=0, work_s=1.0)
    assert fresh is not None
    key = (tuple((it.gpus, tuple(it.types), tuple(it.spans), it.value, None) for it in items),
           ((8, 8, 8),), 3, tuple(greedy), 0, 1.0)
    assert _cached_plan(key) == tuple(fresh)
    assert _cached_plan(key) == tuple(fresh) and _cached_plan.cache_info().hits == 1
    _cached_plan.cache_clear()
    first = _solve(gang_snapshot("cpsat"))[1]
    second = _solve(gang_snapshot("cpsat"))[1]
    assert _cached_plan.cache_info().hits >= 1
    assert first.queue == second.queue and first.expected_start_s == second.expected_start_s

"""Partitioned epochs (optsched.engine.partition): the split keeps every number exact, the merged
decision passes the checker, the coordination step settles what crosses parts, and the answer
does not depend on where the parts run."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from optsched import solve_epoch
from optsched.engine import partition as P
from optsched.engine.backends.base import SolveParams
from optsched.engine.check import check_decision
from optsched.engine.state import ClusterState, parse_snapshot
from optsched.instances import generate
from optsched.testing import assert_decision_valid, cluster, pending
from tests.conftest import DATA


def state_of(data: dict[str, Any]) -> ClusterState:
    return ClusterState.from_snapshot(parse_snapshot(json.dumps(data)))


@pytest.fixture(scope="module")
def fleet() -> ClusterState:
    return state_of(generate("fleet", seed=3, gpus=1600))


GREEDY = SolveParams(backend="greedy", time_limit_s=2.0)


def dump(d: Any) -> dict[str, Any]:
    return d.model_dump(exclude={"solver"})


@pytest.mark.parametrize(
    ("total", "weights", "expected"),
    [
        (10, [1, 1, 1], [4, 3, 3]),
        (7, [0, 5, 2], [0, 5, 2]),
        (5, [0, 0], [3, 2]),
        (0, [3, 1], [0, 0]),
        (100, [1, 2, 3, 4], [10, 20, 30, 40]),
        (3, [1, 1, 0, 1], [1, 1, 0, 1]),
    ],
)
def test_apportion_is_exact_and_proportional(total: int, weights: list[int], expected: list[int]) -> None:
    assert P.apportion(total, weights) == expected


def test_resolve_partitions(fleet: ClusterState) -> None:
    assert P.resolve_partitions(None, fleet) == 1
    assert P.resolve_partitions(3, fleet) == 3
    assert P.resolve_partitions("auto", fleet) == 1  # 1,600 GPUs: one part per 10,000
    big = state_of(generate("fleet", seed=0, gpus=160))
    assert P.resolve_partitions("auto", big) == 1
    with pytest.raises(ValueError, match="partitions"):
        P.resolve_partitions(0, fleet)


@pytest.mark.parametrize("k", [2, 3, 5])
def test_split_keeps_every_number_exact(fleet: ClusterState, k: int) -> None:
    sp = P.split(fleet, k, seed=7)
    snap = fleet.snapshot
    assert len(sp.parts) == k
    # every node in exactly one part, and the part says so
    seen = Counter(n.id for part in sp.parts for n in part.nodes)
    assert seen == Counter(n.id for n in snap.nodes)
    for p, part in enumerate(sp.parts):
        assert all(sp.node_part[n.id] == p for n in part.nodes)
    # every job exactly once (pending ones possibly left for the coordination step)
    ids = Counter(j.id for part in sp.parts for j in part.jobs) + Counter(sp.leftover)
    assert ids == Counter(j.id for j in snap.jobs)
    part_states = [ClusterState.from_snapshot(part) for part in sp.parts]  # each part is valid
    for p, part in enumerate(sp.parts):
        for j in part.jobs:
            if j.allocation is not None:
                assert {sp.node_part[r.node] for r in j.allocation} == {p}
    # quota slices, lend limits and preemption caps sum exactly to the tenant's numbers
    for ten in snap.tenants:
        for t in fleet.type_names:
            assert sum(ps.quota(ten.id, t) for ps in part_states) == fleet.quota(ten.id, t)
            ll = fleet.lend_limit(ten.id, t)
            if ll is not None:
                assert sum(ps.lend_limit(ten.id, t) or 0 for ps in part_states) == ll
    # no running job in quota is over its part's slice: old in-quota use stays in quota
    for ps in part_states:
        own: Counter[tuple[str, str]] = Counter()
        for j in ps.running():
            if not j.on_loan and j.id not in ps.host_of:
                own[(j.tenant, ps.job_type(j))] += j.gpus
        for (ten_id, t), g in own.items():
            assert g <= ps.quota(ten_id, t)
    # the split is a pure function of the snapshot and the seed
    again = P.split(fleet, k, seed=7)
    assert again.node_part == sp.node_part
    def ids(s: P.Split) -> list[list[str]]:
        return [[j.id for j in part.jobs] for part in s.parts]

    assert ids(again) == ids(sp)


@pytest.mark.parametrize("k", [2, 4])
def test_partitioned_decision_passes_the_checker(fleet: ClusterState, k: int) -> None:
    d = solve_epoch(fleet, params=GREEDY, partitions=k, executor="serial")
    assert_decision_valid(fleet, d)
    assert d.status != "optimal"
    assert d.solver.backend.startswith("partitioned:")
    assert d.solver.notes[0].startswith(f"partitioned into {k} parts")
    assert sum(n.startswith("part ") for n in d.solver.notes) == k
    assert {"split", "part_max", "merge", "check"} <= set(d.solver.stage_seconds)
    started = {s.job for s in d.start}
    assert started.isdisjoint(d.queue)
    assert started | set(d.queue) == {j.id for j in fleet.pending()}
    assert set(d.queue_reasons) == set(d.queue)


def test_processes_and_serial_give_the_same_decision(fleet: ClusterState) -> None:
    a = solve_epoch(fleet, params=GREEDY, partitions=3, executor="serial")
    b = solve_epoch(fleet, params=GREEDY, partitions=3, executor="process")
    assert dump(a) == dump(b)


def test_snapshot_option_and_auto_one_part(fleet: ClusterState) -> None:
    data = generate("fleet", seed=3, gpus=1600)
    data["options"] = {"partitions": 2, "backend": "greedy", "time_limit_s": 2.0}
    d = solve_epoch(data, executor="serial")
    assert d.solver.backend.startswith("partitioned:")
    assert dump(d) == dump(solve_epoch(fleet, params=GREEDY, partitions=2, executor="serial"))
    data["options"]["partitions"] = "auto"  # 1,600 GPUs: one model
    assert not solve_epoch(data).solver.backend.startswith("partitioned")
    data["options"]["partitions"] = 0
    with pytest.raises(ValueError, match="partitions"):
        solve_epoch(data)


def _two_part_snapshot() -> dict[str, Any]:
    """a (16 GPUs of quota, nothing pending), b (8) and c (0): c shares b's home part, whose
    only node b's guaranteed job takes; a's part has 16 free GPUs that only a loan can use."""
    data = cluster(
        nodes={"n0": ("A100", 8), "n1": ("A100", 8), "n2": ("A100", 8)},
        tenants={"a": {"A100": 16}, "b": {"A100": 8}, "c": {"A100": 0}},
    )
    data["jobs"] = [
        pending("b1", "b", 8, submit_s=9_000.0),
        pending("c1", "c", 8, submit_s=8_000.0, qos="best_effort"),
    ]
    return data


def test_coordination_lends_across_parts() -> None:
    st = state_of(_two_part_snapshot())
    sp = P.split(st, 2)
    home_c = next(p for p, part in enumerate(sp.parts) if any(j.id == "c1" for j in part.jobs))
    assert any(j.id == "b1" for j in sp.parts[home_c].jobs)
    assert sum(n.gpus for n in sp.parts[home_c].nodes) == 8
    parts = P.run_parts(sp.parts, GREEDY, "serial", None, solve_epoch)
    assert "c1" in parts[home_c].decision.queue  # no lender inside its part
    d = solve_epoch(st, params=GREEDY, partitions=2, executor="serial")
    assert_decision_valid(st, d)
    starts = {s.job: s for s in d.start}
    assert set(starts) == {"b1", "c1"}
    assert starts["c1"].on_loan and not starts["b1"].on_loan
    assert [(x.lender, x.borrower, x.gpus) for x in d.loans] == [("a", "c", 8)]
    assert "started 1 queued job(s)" in d.solver.notes[0]


def test_gang_larger_than_every_part_starts_in_the_coordination_step() -> None:
    data = cluster(
        nodes={f"n{i}": ("A100", 8) for i in range(4)},
        tenants={"a": {"A100": 16}, "b": {"A100": 16}},
    )
    data["jobs"] = [pending("big", "a", 24, submit_s=9_000.0), pending("s1", "b", 4, submit_s=9_500.0)]
    st = state_of(data)
    sp = P.split(st, 2)
    assert sp.leftover == ["big"]  # each part holds 16 GPUs
    d = solve_epoch(st, params=GREEDY, partitions=2, executor="serial")
    assert_decision_valid(st, d)
    starts = {s.job: s for s in d.start}
    assert set(starts) == {"big", "s1"}
    assert len({r.node for r in starts["big"].allocation}) == 3
    assert starts["big"].on_loan  # 24 GPUs on a quota of 16: 8 borrowed from b
    assert [(x.lender, x.borrower, x.gpus) for x in d.loans] == [("b", "a", 8)]


def test_a_rejected_merge_falls_back_to_one_model(monkeypatch: pytest.MonkeyPatch) -> None:
    st = state_of(_two_part_snapshot())

    def broken(state: ClusterState, *args: Any) -> Any:
        d, room_for = real(state, *args)
        d.start = d.start + d.start[:1]  # a job started twice: invariant 2 and 5
        return d, room_for

    real = P.merge_plan
    monkeypatch.setattr(P, "merge_plan", broken)
    d = solve_epoch(st, params=GREEDY, partitions=2, executor="serial")
    assert_decision_valid(st, d)
    assert not d.solver.backend.startswith("partitioned")
    assert any(n.startswith("partitions: the merged decision failed the checker") for n in d.solver.notes)


def test_decision_value_scores_one_model_as_its_objective(fleet: ClusterState) -> None:
    from optsched.engine.epoch import _prepare, default_predictor

    d = solve_epoch(fleet, params=GREEDY)
    problem = _prepare(fleet, GREEDY, default_predictor(), {}).problem
    # the greedy plan starts the best members of every class: job by job equals by class
    assert P.decision_value(problem, fleet, d) == pytest.approx(d.solver.objective, rel=1e-9)
    assert not check_decision(fleet, d)


def _part(state: ClusterState, start: list[Any], queue: list[str]) -> P.PartResult:
    """A part's answer, written by hand (what a part that cannot see the lender would say)."""
    from optsched.schema.decision import Decision, SolverInfo

    d = Decision(now=state.snapshot.now, status="feasible", solver=SolverInfo(backend="greedy", seconds=0.0),
                 start=start, queue=queue)
    return P.PartResult(d, 0.0, len(state.snapshot.jobs), 8)


def _reclaim_snapshot(running_on_loan: bool) -> dict[str, Any]:
    from optsched.testing import running

    data = cluster(nodes={"n0": ("A100", 8)}, tenants={"a": {"A100": 8}, "b": {"A100": 0}})
    data["jobs"] = [pending("a1", "a", 8, submit_s=1_000.0)]  # waited 9,000 s of a 600 s target
    if running_on_loan:
        data["jobs"].append(running("r1", "b", [("n0", g) for g in range(8)], start_s=9_000.0,
                                    qos="best_effort", on_loan=True))
    else:
        data["jobs"].append(pending("b1", "b", 8, submit_s=9_000.0, qos="best_effort"))
    return data


def test_coordination_takes_back_a_start_on_loan_for_a_reclaim() -> None:
    from optsched.engine import assurance as asr
    from optsched.schema.decision import Start

    st = state_of(_reclaim_snapshot(running_on_loan=False))
    assert asr.compute(st)["a"].reclaim
    alloc = [{"node": "n0", "gpu": g} for g in range(8)]
    part = _part(st, [Start.model_validate({"job": "b1", "allocation": alloc, "on_loan": True})], ["a1"])
    d = P.merge(st, [part], [])
    assert_decision_valid(st, d)
    assert [s.job for s in d.start] == ["a1"] and not d.start[0].on_loan
    assert d.queue == ["b1"] and d.loans == [] and d.preempt == []


def test_coordination_reclaims_a_running_job_on_loan() -> None:
    st = state_of(_reclaim_snapshot(running_on_loan=True))
    d = P.merge(st, [_part(st, [], ["a1"])], [])
    assert_decision_valid(st, d)
    assert [s.job for s in d.start] == ["a1"]
    assert [(p.job, p.reason.value) for p in d.preempt] == [("r1", "reclaim")]
    assert d.queue == [] and d.loans == []
    assert "stopped 1 running job(s)" in d.solver.notes[0]


@pytest.mark.parametrize("cap", [None, 4])
def test_coordination_makes_quota_room_from_the_tenants_own_jobs(cap: int | None) -> None:
    from optsched.testing import running

    data = cluster(nodes={"n0": ("A100", 8)}, tenants={"a": {"A100": 8}})
    if cap is not None:
        data["tenants"][0]["preemption"] = {"max_gpus_per_epoch": cap}
    data["jobs"] = [
        pending("a1", "a", 8, submit_s=1_000.0),
        running("r1", "a", [("n0", g) for g in range(8)], start_s=9_000.0, qos="best_effort"),
    ]
    st = state_of(data)
    d = P.merge(st, [_part(st, [], ["a1"])], [])
    assert_decision_valid(st, d)
    if cap is None:
        assert [s.job for s in d.start] == ["a1"]
        assert [(p.job, p.reason.value) for p in d.preempt] == [("r1", "priority")]
    else:  # the cap (4 GPUs) forbids stopping the 8-GPU job
        assert d.start == [] and d.preempt == [] and d.queue == ["a1"]


INSTANCE_DIR = DATA / "tiny"


@pytest.mark.parametrize("name", [*sorted(p.stem for p in INSTANCE_DIR.glob("*.json")), "venus", "medium"])
@pytest.mark.parametrize("k", [2, 3])
def test_merged_decisions_pass_without_falling_back(name: str, k: int) -> None:
    if name in ("venus", "medium"):
        data = generate(name, seed=1)  # type: ignore[arg-type]
    else:
        data = json.loads((INSTANCE_DIR / f"{name}.json").read_text())
    st = state_of(data)
    d = solve_epoch(st, params=GREEDY, partitions=k, executor="serial")
    assert d.solver.backend.startswith("partitioned:"), d.solver.notes  # the merge was accepted
    assert_decision_valid(st, d)
    assert d.status in ("feasible", "fallback")


def test_solve_command_partitions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.cli.test_cli import run

    p = tmp_path / "f.json"
    p.write_text(json.dumps(generate("fleet", seed=2, gpus=800)))
    code, out, _ = run(["solve", str(p), "--backend", "greedy", "--predictor", "fallback",
                        "--partitions", "2"], capsys)
    assert code == 0
    d = json.loads(out)
    assert d["solver"]["backend"] == "partitioned:greedy" and d["status"] == "fallback"
    code, _, err = run(["solve", str(p), "--partitions", "0"], capsys)
    assert code == 2 and "--partitions" in err


def test_a_given_predictor_reaches_every_part(fleet: ClusterState) -> None:
    from optsched.predict.fallback import EstimatePredictor

    d = solve_epoch(fleet, params=GREEDY, partitions=2, executor="serial", predictor=EstimatePredictor())
    assert d.predictions is not None
    sources = {p.source for p in d.predictions.values()}
    assert sources and not any("model" in x for x in sources)
    default = solve_epoch(fleet, params=GREEDY, partitions=2, executor="serial")  # the trained models
    assert default.predictions is not None
    assert any("model" in p.source for p in default.predictions.values())


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_limits_caps_and_over_quota_merge_without_falling_back(seed: int) -> None:
    """Borrow and lend limits, preemption caps, minimum runtimes, priority classes, lost nodes
    and quotas cut below running use (kept over quota): the merge is still accepted."""
    import random

    rnd = random.Random(seed)
    data = generate("fleet", seed=seed, gpus=1600)
    types = list(data["gpu_types"])
    for t in data["tenants"]:
        if rnd.random() < 0.3:
            t["borrow_limit"] = {ty: rnd.randint(0, 40) for ty in types}
        if rnd.random() < 0.3:
            t["lend_limit"] = {ty: rnd.randint(0, 40) for ty in types}
        if rnd.random() < 0.3:
            cap, least = rnd.randint(0, 16), rnd.choice([0, 3600])
            t["preemption"] = {"max_gpus_per_epoch": cap, "min_runtime_s": least}
        if rnd.random() < 0.2:
            t["quota"] = {ty: q // 3 for ty, q in t["quota"].items()}
    for n in data["nodes"]:
        if rnd.random() < 0.02:
            n["available"] = False
    data["priority_classes"] = {"high": 3.0, "low": 0.5}
    for j in data["jobs"]:
        if rnd.random() < 0.2:
            j["priority_class"] = rnd.choice(["high", "low"])
    st = state_of(data)
    for k in (2, 5):
        d = solve_epoch(st, params=GREEDY, partitions=k, executor="serial")
        assert d.solver.backend.startswith("partitioned:"), [n for n in d.solver.notes if "partitions" in n]
        assert_decision_valid(st, d)


def test_a_crashing_part_falls_back_to_one_model(
    monkeypatch: pytest.MonkeyPatch, fleet: ClusterState
) -> None:
    def crash(*args: Any, **kw: Any) -> Any:
        raise RuntimeError("worker lost")

    monkeypatch.setattr(P, "run_parts", crash)
    d = solve_epoch(fleet, params=GREEDY, partitions=2, executor="serial")
    assert_decision_valid(fleet, d)
    assert not d.solver.backend.startswith("partitioned")
    assert "partitions: RuntimeError: worker lost; solved as one model" in d.solver.notes


def test_unknown_executor_is_refused() -> None:
    with pytest.raises(ValueError, match="executor"):
        P.run_parts([], GREEDY, "threads", None, solve_epoch)  # type: ignore[arg-type]


@pytest.mark.parametrize(("gpus", "k", "seed"), [(3200, 4, 2), (2400, 2, 1)])
def test_the_parts_share_the_fleets_victim_slack(gpus: int, k: int, seed: int) -> None:
    # best-effort jobs inside quota free at most the guaranteed in-quota starts' GPUs plus one
    # slack per type; with each part's own slack the merged decision of 3200 GPUs in 4 parts
    # freed 301 V100 GPUs where 300 may be freed, failed the checker and was solved as one model
    from optsched.engine.partition.splitting import split
    from optsched.engine.rules import victim_slack

    st = state_of(generate("fleet", seed=seed, gpus=gpus))
    sp = split(st, k)
    assert sp.slack is not None and len(sp.slack) == k
    fleet = victim_slack(st)
    for t, s in fleet.items():
        got = [part[t] for part in sp.slack]
        assert sorted(got) == [0] * (k - 1) + [s], (t, got)  # one part holds it whole
        if s:
            p = got.index(s)  # the part holding the gang that sets it
            part_state = state_of(json.loads(sp.parts[p].model_dump_json()))
            assert victim_slack(part_state)[t] == s
    d = solve_epoch(st, params=GREEDY, partitions=k, executor="serial")
    assert d.solver.backend.startswith("partitioned:"), d.solver.notes
    assert check_decision(st, d) == []

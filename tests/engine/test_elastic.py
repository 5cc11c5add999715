"""Elastic jobs: size ranges in the snapshot, sizes chosen by the one epoch model, resizes in
the decision, the checker's rules for them, apply_decision, and stability over many epochs."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from optsched.cli import main
from optsched.engine.apply import apply_decision
from optsched.engine.backends.base import SolveParams
from optsched.engine.check import check_decision, over_quota_note
from optsched.engine.epoch import solve_epoch
from optsched.engine.state import ClusterState, load_state, parse_snapshot
from optsched.errors import SnapshotError
from optsched.instances import generate
from optsched.predict.fallback import EstimatePredictor
from optsched.schema.decision import Decision
from optsched.schema.snapshot import Snapshot
from optsched.testing import assert_decision_valid, cluster, pending, running
from tests.behaviour.test_stability import _triggers
from tests.conftest import DATA

EXACT = ("highs", "cpsat", "pulp")
PREDICTOR = EstimatePredictor()


def solve(snap: dict[str, Any] | Snapshot, backend: str = "highs") -> tuple[ClusterState, Decision]:
    state = ClusterState.from_snapshot(snap) if isinstance(snap, Snapshot) else load_state(snap)
    d = solve_epoch(state, params=SolveParams(backend=backend, time_limit_s=5.0), predictor=PREDICTOR)
    assert_decision_valid(state, d)
    return state, d


def alloc(node: str, gpus: range | list[int]) -> list[tuple[str, int]]:
    return [(node, g) for g in gpus]


# ---------------------------------------------------------------- snapshot validation


def _one_job(**fields: Any) -> dict[str, Any]:
    s = cluster()
    s["jobs"] = [pending("e", "a", 4, submit_s=0.0, **fields)]
    return s


@pytest.mark.parametrize(
    ("fields", "path"),
    [
        ({"min_gpus": 5}, "jobs[0].min_gpus"),
        ({"max_gpus": 3}, "jobs[0].max_gpus"),
        ({"min_gpus": 1, "max_gpus": 8, "gpus_step": 2}, "jobs[0].gpus_step"),
        ({"min_gpus": 1, "max_gpus": 7, "gpus_step": 2}, "jobs[0].gpus"),
        ({"gpus_step": 2}, "jobs[0].gpus_step"),
        ({"resize_overhead_s": 5.0}, "jobs[0].resize_overhead_s"),
    ],
)
def test_bad_size_ranges_name_the_field(fields: dict[str, Any], path: str) -> None:
    with pytest.raises(SnapshotError) as err:
        load_state(_one_job(**fields))
    assert err.value.path == path


@pytest.mark.parametrize(
    ("fields", "path"),
    [({"min_gpus": 0}, "jobs[0].min_gpus"), ({"gpus_step": 0}, "jobs[0].gpus_step")],
)
def test_out_of_range_fields_are_shape_errors(fields: dict[str, Any], path: str) -> None:
    with pytest.raises(SnapshotError) as err:
        parse_snapshot(_one_job(**fields))
    assert err.value.path == path


def test_an_elastic_job_sharing_its_gpus_keeps_its_size() -> None:
    """An elastic MPS pair already running is valid input; neither job is resized while they
    share, though idle GPUs wait; a new elastic job is never made a guest."""
    s = cluster(tenants={"a": {"A100": 8}, "b": {"A100": 0}})
    s["jobs"] = [
        running("h", "a", alloc("n0", [0]), start_s=1.0, qos="best_effort", colocated=True, max_gpus=4),
        running("g", "a", alloc("n0", [0]), start_s=2.0, qos="best_effort", colocated=True, max_gpus=2),
        pending("p", "a", 1, submit_s=0.0, qos="best_effort", max_gpus=2, memory_gib=1.0),
    ]
    s["jobs"][0]["memory_gib"] = s["jobs"][1]["memory_gib"] = 1.0
    for backend in EXACT:
        _, d = solve(s, backend)
        assert not d.resize and not d.preempt
        assert [(x.job, x.colocated_with) for x in d.start] == [("p", None)]


def test_sizes_of_a_job() -> None:
    snap = parse_snapshot(_one_job(min_gpus=2, max_gpus=8, gpus_step=2))
    job = snap.jobs[0]
    assert job.is_elastic and job.sizes() == (2, 4, 6, 8) and job.size_range == (2, 8)
    rigid = parse_snapshot(_one_job()).jobs[0]
    assert not rigid.is_elastic and rigid.sizes() == (4,)


# ---------------------------------------------------------------- reclaim: shrink beats evict


@pytest.mark.parametrize("solver", [*EXACT, "greedy"])
def test_shrinking_an_elastic_job_on_loan_loses_less_work_than_evicting_it(
    solver: str, tiny: Callable[[str], dict[str, Any]]
) -> None:
    """vision takes back 2 of the 4 GPUs it lent to nlp's best-effort sweep. Elastic, the sweep
    shrinks to 2 and pays its 60 s resize overhead on 2 GPUs; rigid, it is evicted and loses
    its 1800 s of work since the last checkpoint on 4 GPUs."""
    snap = tiny("elastic-reclaim")
    state, d = solve(snap, solver)
    assert [s.job for s in d.start] == ["vis-train"] and not d.preempt
    (rz,) = d.resize
    assert (rz.job, rz.from_gpus, rz.to_gpus, rz.reason.value, rz.lost_s) == (
        "nlp-sweep",
        4,
        2,
        "shrink_for_reclaim",
        60.0,
    )
    sweep = state.job("nlp-sweep")
    assert sweep.allocation is not None
    kept = {r.key() for r in rz.allocation}
    assert kept < {r.key() for r in sweep.allocation}
    given = {r.key() for r in sweep.allocation} - kept
    assert given == {r.key() for r in d.start[0].allocation}  # vision starts on what it gave back
    shrink_lost_gpu_s = rz.lost_s * rz.to_gpus
    e = d.explanations["nlp-sweep"]
    assert e.code == "shrink_for_reclaim" and e.made_room_for == ["vis-train"]

    rigid = copy.deepcopy(snap)
    for job in rigid["jobs"]:
        for f in ("min_gpus", "max_gpus", "resize_overhead_s"):
            job.pop(f, None)
    _, d2 = solve(rigid, solver)
    assert not d2.resize
    (p,) = d2.preempt
    assert (p.job, p.reason.value, p.lost_s) == ("nlp-sweep", "reclaim", 1800.0)
    evict_lost_gpu_s = p.lost_s * 4
    assert (shrink_lost_gpu_s, evict_lost_gpu_s) == (120.0, 7200.0)


def test_a_shrink_that_frees_too_little_is_no_way_out(tiny: Callable[[str], dict[str, Any]]) -> None:
    """With min_gpus 3 the sweep cannot give back 2 GPUs: it is reclaimed whole."""
    snap = tiny("elastic-reclaim")
    snap["jobs"][1]["min_gpus"] = 3
    _, d = solve(snap)
    assert not d.resize and [(p.job, p.reason.value) for p in d.preempt] == [("nlp-sweep", "reclaim")]


def test_shrink_for_a_start_inside_quota() -> None:
    """Quotas oversubscribe the node: b's best-effort elastic job holds all 8 GPUs inside b's
    quota; a's guaranteed job (priority class weight 3) needs 4 inside a's quota. Its static
    worth pays for 4 GPUs at the cost of a shrink, not for a preemption: the job shrinks."""
    s = cluster(tenants={"a": {"A100": 8}, "b": {"A100": 8}})
    s["priority_classes"] = {"high": 3.0}
    s["jobs"] = [
        running(
            "be",
            "b",
            alloc("n0", range(8)),
            start_s=100.0,
            qos="best_effort",
            min_gpus=2,
            restart_cost_s=900.0,
            resize_overhead_s=30.0,
            runtime_s=50000.0,
        ),
        pending("g", "a", 4, submit_s=9000.0, priority_class="high"),
    ]
    for backend in EXACT:
        _, d = solve(s, backend)
        assert not d.preempt, backend
        assert [(r.job, r.to_gpus, r.reason.value, r.lost_s) for r in d.resize] == [
            ("be", 4, "shrink_for_start", 30.0)
        ]
        assert [(x.job, len(x.allocation), x.on_loan) for x in d.start] == [("g", 4, False)]
        assert d.explanations["be"].made_room_for == ["g"]


# ---------------------------------------------------------------- sizes at start, growth


def test_the_model_chooses_start_sizes_and_grows_into_idle_gpus(
    tiny: Callable[[str], dict[str, Any]],
) -> None:
    snap = tiny("elastic-grow")
    for backend in EXACT:
        state, d = solve(snap, backend)
        starts = {s.job: len(s.allocation) for s in d.start}
        grown = {r.job: (r.from_gpus, r.to_gpus, r.reason.value) for r in d.resize}
        assert set(starts) == {"res-finetune"} and starts["res-finetune"] in (4, 6)
        # the 8 free GPUs all go to research: a start of 4 to 6 and growth of the rest
        extra = sum(t - f for f, t, _ in grown.values())
        assert starts["res-finetune"] + extra == 8, backend
        assert all(reason == "grow" for _, _, reason in grown.values())
        for r in d.resize:
            before = {x.key() for x in state.job(r.job).allocation or []}
            assert before < {x.key() for x in r.allocation}
            assert not ({x.key() for x in r.allocation} - before) & set(state.gpu_holders)
            assert "grows" in d.explanations[r.job].text


def test_only_jobs_that_may_shrink_take_gpus_beyond_their_request() -> None:
    """Guaranteed jobs inside quota could never give GPUs back: with 8 idle GPUs they start on
    and keep their requested size; best-effort ones take the rest."""
    s = cluster(tenants={"a": {"A100": 8}, "b": {"A100": 0}})
    s["jobs"] = [
        running("g-run", "a", alloc("n0", [0, 1]), start_s=100.0, max_gpus=4),
        pending("g-new", "a", 2, submit_s=9000.0, max_gpus=4),
    ]
    for backend in EXACT:
        _, d = solve(s, backend)
        assert [(x.job, len(x.allocation)) for x in d.start] == [("g-new", 2)] and not d.resize
    s["jobs"][0]["qos"] = s["jobs"][1]["qos"] = "best_effort"
    for backend in EXACT:
        _, d = solve(s, backend)
        grown = sum(r.to_gpus - r.from_gpus for r in d.resize)
        assert sum(len(x.allocation) for x in d.start) + grown == 6, backend


def test_growth_never_takes_gpus_a_pending_job_could_start_on(
    tiny: Callable[[str], dict[str, Any]],
) -> None:
    """prod's pending rigid job needs 6 of the 8 idle GPUs (borrowed from research's idle
    quota): it starts, and research's elastic jobs get only what it leaves."""
    snap = tiny("elastic-grow")
    snap["jobs"].append(pending("prod-batch", "prod", 6, submit_s=4000.0, qos="best_effort"))
    for backend in EXACT:
        _, d = solve(snap, backend)
        starts = {s.job: len(s.allocation) for s in d.start}
        assert starts.get("prod-batch") == 6, backend
        extra = sum(r.to_gpus - r.from_gpus for r in d.resize)
        assert starts.get("res-finetune", 0) + extra <= 2


def test_a_pending_elastic_job_starts_at_its_smallest_size_when_that_is_all_that_fits() -> None:
    s = cluster(tenants={"a": {"A100": 8}, "b": {"A100": 0}})
    s["jobs"] = [
        running("r", "a", alloc("n0", range(6)), start_s=100.0),
        pending("e", "a", 4, submit_s=9000.0, min_gpus=2, max_gpus=6, gpus_step=2),
    ]
    for backend in (*EXACT, "greedy"):
        _, d = solve(s, backend)
        assert [(x.job, len(x.allocation)) for x in d.start] == [("e", 2)], backend


def test_a_queued_elastic_job_is_explained_at_its_smallest_size() -> None:
    s = cluster(tenants={"a": {"A100": 8}, "b": {"A100": 0}})
    s["jobs"] = [
        running("r", "a", alloc("n0", range(7)), start_s=100.0),
        pending("e", "a", 4, submit_s=9000.0, min_gpus=2, max_gpus=6, gpus_step=2),
    ]
    _, d = solve(s)
    assert d.queue == ["e"]
    e = d.explanations["e"]
    assert e.resource is not None and e.resource.gpus == 2 and e.types[0].missing == 1


# ---------------------------------------------------------------- checker rules


def _checked_snapshot() -> dict[str, Any]:
    """Tenant a: elastic best-effort 'el' (2 GPUs, sizes 1..4) and rigid 'rg' on n0; tenant b:
    on-loan elastic 'lo' (borrowed from a) and guaranteed elastic 'gu'; GPUs n0/6-7 idle."""
    s = cluster(tenants={"a": {"A100": 7}, "b": {"A100": 1}})
    s["jobs"] = [
        running("el", "a", alloc("n0", [0, 1]), start_s=100.0, qos="best_effort", min_gpus=1, max_gpus=4),
        running("rg", "a", alloc("n0", [2]), start_s=100.0, qos="best_effort"),
        running(
            "lo",
            "b",
            alloc("n0", [3, 4]),
            start_s=100.0,
            qos="best_effort",
            min_gpus=1,
            max_gpus=2,
            on_loan=True,
        ),
        running("gu", "b", alloc("n0", [5]), start_s=100.0, min_gpus=1, max_gpus=2),
    ]
    return s


def _violations(s: dict[str, Any], **decision: Any) -> list[tuple[int, str]]:
    state = load_state(s)
    loans = [{"lender": "a", "borrower": "b", "gpu_type": "A100", "gpus": 2}]
    d = Decision.model_validate(
        {"now": s["now"], "status": "feasible", "solver": {"backend": "t", "seconds": 0}, "loans": loans}
        | decision
    )
    return [(v.invariant, v.message) for v in check_decision(state, d, work_conserving=False)]


def _rz(job: str, gpus: list[int], frm: int, reason: str) -> dict[str, Any]:
    return {
        "job": job,
        "allocation": [{"node": "n0", "gpu": g} for g in gpus],
        "from_gpus": frm,
        "to_gpus": len(gpus),
        "reason": reason,
    }


def test_a_valid_resize_passes_the_checker() -> None:
    s = _checked_snapshot()
    assert _violations(s, resize=[_rz("el", [0, 1, 6, 7], 2, "grow")]) == []
    assert _violations(s, resize=[_rz("el", [1], 2, "shrink_for_start")]) == []
    assert _violations(s, resize=[_rz("lo", [4], 2, "shrink_for_reclaim")]) == []


BAD_RESIZES: list[tuple[str, dict[str, Any], int, str]] = [
    ("not elastic", {"resize": [_rz("rg", [2, 6], 1, "grow")]}, 2, "not elastic"),
    ("above max", {"resize": [_rz("lo", [3, 4, 6], 2, "grow")]}, 2, "allowed sizes 1..2"),
    ("unknown job", {"resize": [_rz("ghost", [6], 1, "grow")]}, 2, "not a running job"),
    ("twice", {"resize": [_rz("el", [0, 1, 6], 2, "grow"), _rz("el", [0, 1, 7], 2, "grow")]}, 2, "twice"),
    (
        "preempted and resized",
        {"resize": [_rz("el", [0], 2, "shrink_for_start")], "preempt": [{"job": "el", "reason": "priority"}]},
        2,
        "both preempted and resized",
    ),
    ("wrong from", {"resize": [_rz("el", [0, 1, 6], 3, "grow")]}, 2, "says from 3"),
    (
        "wrong to",
        {"resize": [_rz("el", [0, 1, 6], 2, "grow") | {"to_gpus": 4}]},
        2,
        "says to 4",
    ),
    ("no change", {"resize": [_rz("el", [0, 6], 2, "grow")]}, 2, "does not change its size"),
    ("grow drops a GPU", {"resize": [_rz("el", [0, 6, 7], 2, "grow")]}, 2, "drops GPUs"),
    ("grow onto a held GPU", {"resize": [_rz("el", [0, 1, 2], 2, "grow")]}, 2, "held in the snapshot"),
    ("grow onto a missing GPU", {"resize": [_rz("el", [0, 1, 9], 2, "grow")]}, 2, "missing GPU"),
    ("grow with a shrink reason", {"resize": [_rz("el", [0, 1, 6], 2, "shrink_for_start")]}, 2, "grows but"),
    ("shrink with the grow reason", {"resize": [_rz("el", [0], 2, "grow")]}, 2, "shrinks but"),
    ("shrink onto other GPUs", {"resize": [_rz("el", [6], 2, "shrink_for_start")]}, 2, "does not hold"),
    (
        "shrink of a job that may not be preempted",
        {"resize": [_rz("gu", [5], 1, "grow") | {"from_gpus": 1}]},
        2,
        "does not change",
    ),
    (
        "reclaim of a job not on loan",
        {"resize": [_rz("el", [0], 2, "shrink_for_reclaim")]},
        3,
        "not run on loan",
    ),
]


@pytest.mark.parametrize(
    ("name", "decision", "invariant", "text"), BAD_RESIZES, ids=[b[0] for b in BAD_RESIZES]
)
def test_bad_resizes_are_rejected(name: str, decision: dict[str, Any], invariant: int, text: str) -> None:
    found = _violations(_checked_snapshot(), **decision)
    assert any(n == invariant and text in msg for n, msg in found), (name, found)


def test_shrinking_a_job_that_may_not_be_preempted_is_rejected() -> None:
    s = _checked_snapshot()
    s["jobs"][3]["gpus"] = 2
    s["jobs"][3]["allocation"].append({"node": "n0", "gpu": 6})
    found = _violations(s, resize=[_rz("gu", [5], 2, "shrink_for_start")])
    assert any(n == 3 and "may not be preempted" in m for n, m in found), found


def test_growth_counts_in_quota_and_capacity() -> None:
    s = _checked_snapshot()
    s["tenants"][0]["quota"]["A100"] = 5  # a holds 3 and lends 2; growing el by 2 exceeds it
    assert _violations(s) == []
    found = _violations(s, resize=[_rz("el", [0, 1, 6, 7], 2, "grow")])
    assert any(n == 4 and "tenant 'a' lends 2 'A100' GPUs but uses 5 of quota 5" in m for n, m in found), (
        found
    )


def test_use_kept_over_quota_does_not_grow() -> None:
    """a runs 2 GPUs on a quota of 1 and nobody can lend: the extra GPU may stay (noted), a
    grown one is new use above quota."""
    s = cluster(tenants={"a": {"A100": 1}, "b": {"A100": 0}})
    s["jobs"] = [running("el", "a", alloc("n0", [0, 1]), start_s=1.0, qos="best_effort", max_gpus=4)]
    state = load_state(s)

    def found(gpus: list[int], kept: int) -> list[str]:
        d = Decision.model_validate(
            {
                "now": s["now"],
                "status": "feasible",
                "solver": {"backend": "t", "seconds": 0, "notes": [over_quota_note("a", "A100", kept)]},
                "kept_over_quota": [{"tenant": "a", "gpu_type": "A100", "gpus": kept}],
                "resize": [_rz("el", gpus, 2, "grow")] if len(gpus) != 2 else [],
            }
        )
        return [v.message for v in check_decision(state, d, work_conserving=False)]

    assert found([0, 1], 1) == []
    assert any("tenant 'a' uses 3 'A100' GPUs: quota 1 + loans 0" in m for m in found([0, 1, 2], 2))


def test_a_start_of_an_elastic_job_at_a_size_off_its_grid_is_rejected() -> None:
    s = _checked_snapshot()
    s["jobs"].append(pending("pe", "a", 2, submit_s=0.0, min_gpus=2, max_gpus=6, gpus_step=2))
    queue: list[str] = []
    ok = _violations(
        s, start=[{"job": "pe", "allocation": [{"node": "n0", "gpu": g} for g in (6, 7)]}], queue=queue
    )
    assert ok == []
    s["nodes"][0]["gpus"] = 12
    bad = _violations(
        s, start=[{"job": "pe", "allocation": [{"node": "n0", "gpu": g} for g in (6, 7, 8)]}], queue=queue
    )
    assert any(n == 2 and "allowed sizes 2..6 in steps of 2" in m for n, m in bad), bad


def test_min_runtime_and_preemption_cap_count_shrinks() -> None:
    s = _checked_snapshot()
    s["jobs"][0]["min_runtime_s"] = 1e9
    found = _violations(s, resize=[_rz("el", [0], 2, "shrink_for_start")])
    assert any(n == 3 and "min-runtime: 'el' shrunk" in m for n, m in found), found
    s = _checked_snapshot()
    s["tenants"][0]["preemption"] = {"max_gpus_per_epoch": 1}
    s["jobs"][0]["allocation"].append({"node": "n0", "gpu": 6})
    s["jobs"][0]["gpus"] = 3
    found = _violations(s, resize=[_rz("el", [0], 3, "shrink_for_start")])
    assert any(n == 3 and "preemption-cap: tenant 'a' has 2" in m for n, m in found), found


def test_a_guaranteed_in_quota_job_is_not_shrunk_for_another_tenant() -> None:
    s = _checked_snapshot()
    s["jobs"][3].update(
        gpus=2, preemptible=True, allocation=[{"node": "n0", "gpu": 5}, {"node": "n0", "gpu": 6}]
    )
    s["jobs"].append(pending("ap", "a", 1, submit_s=0.0))
    found = _violations(
        s,
        resize=[_rz("gu", [5], 2, "shrink_for_start")],
        start=[{"job": "ap", "allocation": [{"node": "n0", "gpu": 6}]}],
    )
    assert any(n == 3 and "guaranteed in-quota job 'gu' of 'b' shrunk for 'ap'" in m for n, m in found), found


def test_work_conservation_looks_at_the_smallest_size() -> None:
    s = _checked_snapshot()
    s["jobs"].append(pending("pe", "a", 4, submit_s=0.0, min_gpus=2, max_gpus=4, gpus_step=2))
    state = load_state(s)
    d = Decision.model_validate(
        {"now": s["now"], "status": "feasible", "solver": {"backend": "t", "seconds": 0}, "queue": ["pe"]}
    )
    found = [v for v in check_decision(state, d) if v.invariant == 8]
    assert [v.ids for v in found] == [("pe",)]


# ---------------------------------------------------------------- apply_decision


def test_apply_decision_applies_resizes_and_start_sizes(tiny: Callable[[str], dict[str, Any]]) -> None:
    state, d = solve(tiny("elastic-grow"))
    nxt = apply_decision(state.snapshot, d)
    by_id = {j.id: j for j in nxt.jobs}
    for r in d.resize:
        job = by_id[r.job]
        assert job.gpus == r.to_gpus and [x.key() for x in job.allocation or []] == [
            x.key() for x in r.allocation
        ]
        assert job.start_s == state.job(r.job).start_s
    for s in d.start:
        assert by_id[s.job].gpus == len(s.allocation) and by_id[s.job].state == "running"
    ClusterState.from_snapshot(nxt)  # still a valid snapshot
    bad = d.model_copy(update={"resize": [d.resize[0].model_copy(update={"job": "res-finetune"})]})
    with pytest.raises(ValueError, match="resize"):
        apply_decision(state.snapshot, bad)


# ---------------------------------------------------------------- stability


def run_elastic_epochs(snap: Snapshot, backend: str, epochs: int) -> int:
    """Solve, apply, advance with nothing else changing. Once settled (as in
    tests/behaviour/test_stability.py) nothing starts, stops or resizes, and no job is ever resized one
    way and then the other unless an assurance trigger moved in between. Returns the resizes."""
    last_dir: dict[str, tuple[int, tuple[Any, ...]]] = {}
    settled_from, last, count = 2, None, 0
    for e in range(epochs):
        state = ClusterState.from_snapshot(snap)
        trig = _triggers(state)
        if last is not None and trig != last:
            settled_from = max(settled_from, e + 2)
        last = trig
        _, d = solve(snap, backend)
        for r in d.resize:
            way = 1 if r.to_gpus > r.from_gpus else -1
            before = last_dir.get(r.job)
            assert before is None or before[0] == way or before[1] != trig, (
                f"epoch {e}: {r.job} resized {way} after {before[0]} with nothing changed"
            )
            last_dir[r.job] = (way, trig)
            count += 1
        if e >= settled_from:
            moved = [p.job for p in d.preempt] + [s.job for s in d.start if not s.colocated_with]
            moved += [r.job for r in d.resize]
            assert not moved, f"epoch {e} (settled since {settled_from}): moved {moved[:10]}"
        snap = apply_decision(state.snapshot, d)
    assert settled_from <= epochs - 10
    return count


@pytest.mark.parametrize(("solver", "seed"), [("highs", 0), ("highs", 1), ("highs", 2), ("greedy", 3)])
def test_elastic_jobs_do_not_thrash(solver: str, seed: int) -> None:
    run_elastic_epochs(parse_snapshot(generate("tiny", seed, elastic=0.6)), solver, 100)


def _with_idle_gpus(seed: int) -> dict[str, Any]:
    """A generated tiny snapshot, 60% of its jobs elastic, with every third running job gone
    (MPS pairs kept): idle GPUs to grow into and to start on."""
    s = generate("tiny", seed, elastic=0.6)
    s["jobs"] = [
        j
        for k, j in enumerate(s["jobs"])
        if not (j["state"] == "running" and not j.get("colocated") and k % 3 == 0)
    ]
    return s


@pytest.mark.parametrize(
    ("solver", "seed"), [("highs", 0), ("highs", 1), ("cpsat", 0), ("greedy", 0), ("greedy", 10)]
)
def test_elastic_jobs_with_idle_gpus_do_not_thrash(solver: str, seed: int) -> None:
    assert run_elastic_epochs(parse_snapshot(_with_idle_gpus(seed)), solver, 100) >= 1


@pytest.mark.parametrize("solver", ["highs", "greedy"])
def test_idle_gpus_are_grown_into_once_and_kept(solver: str, tiny: Callable[[str], dict[str, Any]]) -> None:
    assert run_elastic_epochs(parse_snapshot(tiny("elastic-grow")), solver, 30) >= 1


# ---------------------------------------------------------------- generate, CLI


def test_generate_makes_a_share_of_jobs_elastic_and_leaves_the_rest_alone() -> None:
    plain = generate("tiny", 5)
    el = generate("tiny", 5, elastic=0.5)
    strip = copy.deepcopy(el)
    n = 0
    for j in strip["jobs"]:
        if "min_gpus" in j:
            n += 1
            assert j["min_gpus"] == max(1, j["gpus"] // 2) and j["max_gpus"] == 2 * j["gpus"]
            assert j.get("gpus_step", 1) == (j["gpus"] // 2 if j["gpus"] >= 4 else 1)
            for f in ("min_gpus", "max_gpus", "gpus_step", "resize_overhead_s"):
                j.pop(f, None)
    assert strip == plain and 0 < n < len(el["jobs"])
    load_state(el)
    with pytest.raises(ValueError, match="elastic"):
        generate("tiny", 5, elastic=1.5)


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(args)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out + err


@pytest.mark.parametrize("name", ["elastic-reclaim", "elastic-grow"])
def test_cli_solve_and_check_elastic_instances(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = DATA / "tiny" / f"{name}.json"
    out = tmp_path / "d.json"
    code, text = run(["solve", str(path), "-o", str(out), "--predictor", "fallback"], capsys)
    assert code == 0, text
    d = json.loads(out.read_text())
    assert d["resize"], "the instance exists to show a resize"
    code, text = run(["check", str(path), str(out)], capsys)
    assert code == 0 and "ok" in text
    code, text = run(["explain", str(path), str(out), d["resize"][0]["job"]], capsys)
    assert code == 0 and "resized" in text, text
    # a resize the checker must reject: growth onto a GPU the job already holds, listed twice
    rz = d["resize"][0]
    rz["allocation"] = [rz["allocation"][0]] * rz["to_gpus"]
    out.write_text(json.dumps(d))
    code, text = run(["check", str(path), str(out)], capsys)
    assert code == 1 and "lists a GPU twice" in text


def test_cli_generate_elastic(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "s.json"
    code, text = run(["generate", "--seed", "2", "--elastic", "0.5", "-o", str(out)], capsys)
    assert code == 0, text
    assert any("min_gpus" in j for j in json.loads(out.read_text())["jobs"])
    code, text = run(["generate", "--elastic", "2"], capsys)
    assert code == 2 and "--elastic" in text

"""Explanations on partitioned decisions: every queued and every preempted job of a merged
decision is explained on the whole snapshot, with numbers that hold for the merged decision
(recomputed by ``tests/engine/test_explain.py``'s oracle), a preemption made by the coordination step
names the start it made room for, and the explanations change nothing else of the decision."""

from __future__ import annotations

import copy
import json
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from optsched import solve_epoch
from optsched.engine import assurance as asr
from optsched.engine import partition as P
from optsched.engine.backends.base import SolveParams
from optsched.engine.budget import Budget
from optsched.engine.state import ClusterState, parse_snapshot
from optsched.instances import generate
from optsched.predict.fallback import EstimatePredictor
from optsched.schema.decision import Decision
from optsched.testing import assert_decision_valid, cluster, pending, running
from tests.engine.test_explain import After, loosen, run, verify

GREEDY = SolveParams(backend="greedy", time_limit_s=2.0)

# (GPUs, parts, seed, variant): "plain" as generated; "loose": half the running jobs dropped
# and tight borrow/lend limits; "tight": quotas cut below running use, preemption caps, lost nodes
CASES = [(2400, 2, 1, "plain"), (3200, 4, 2, "plain"), (2000, 3, 0, "loose"), (2000, 2, 4, "tight")]


REACHES = {
    "plain": {"priority", "no_lender"},
    "loose": {"borrow_limit", "no_lender"},
    "tight": {"capacity", "over_quota_kept"},
}
"""Queued bindings each variant reaches (so the checks below run on them)."""

Case = tuple[dict[str, Any], ClusterState, Decision, str]


def tighten(snap: dict[str, Any], seed: int) -> dict[str, Any]:
    rnd = random.Random(seed)
    s = copy.deepcopy(snap)
    for t in s["tenants"]:
        if rnd.random() < 0.3:
            cap, least = rnd.randint(0, 16), rnd.choice([0, 3600])
            t["preemption"] = {"max_gpus_per_epoch": cap, "min_runtime_s": least}
        if rnd.random() < 0.3:
            t["quota"] = {ty: q // 3 for ty, q in t["quota"].items()}
    for n in s["nodes"]:
        if rnd.random() < 0.03:
            n["available"] = False
    # gangs of half a type's GPUs: the running jobs that keep running hold what they need
    cap: dict[str, int] = defaultdict(int)
    for n in s["nodes"]:
        cap[n["gpu_type"]] += n["gpus"] if n.get("available", True) else 0
    big = max(cap, key=lambda t: (cap[t], t))
    for i in range(3):
        ten = s["tenants"][i]["id"]
        s["jobs"].append(pending(f"big{i}", ten, cap[big] // 2, submit_s=s["now"] - 60.0, gpu_types=[big]))
    return s


def state_of(data: dict[str, Any]) -> ClusterState:
    return ClusterState.from_snapshot(parse_snapshot(json.dumps(data)))


def reclaim_for(st: ClusterState) -> set[str]:
    """The pending jobs the coordination step may stop running jobs for: guaranteed, of a
    tenant whose assurance asks for a reclaim (docs/partitioning.md, pass 1)."""
    signal = asr.compute(st)
    return {j.id for j in st.pending() if j.qos == "guaranteed" and signal[j.tenant].reclaim}


def partitioned(snap: dict[str, Any], k: int) -> tuple[ClusterState, Decision]:
    st = state_of(snap)
    d = solve_epoch(st, params=GREEDY, partitions=k, executor="serial", predictor=EstimatePredictor())
    assert d.solver.backend.startswith("partitioned:"), d.solver.notes  # the merge was accepted
    return st, d


def _case_id(c: tuple[int, int, int, str]) -> str:
    return f"{c[0]}gpus-k{c[1]}-seed{c[2]}-{c[3]}"


@pytest.fixture(scope="module", params=CASES, ids=_case_id)
def case(request: pytest.FixtureRequest) -> Case:
    gpus, k, seed, variant = request.param
    snap = generate("fleet", seed=seed, gpus=gpus)
    if variant == "loose":
        snap = loosen(snap, seed)
    elif variant == "tight":
        snap = tighten(snap, seed)
    st, d = partitioned(snap, k)
    return snap, st, d, variant


def test_every_queued_and_preempted_job_is_explained_and_every_number_holds(
    case: Case,
) -> None:
    snap, st, d, _ = case
    assert_decision_valid(st, d)
    assert d.queue and d.preempt
    # the oracle recomputes every TypeFit, binding, blocked_by, lender and made_room_for from the
    # snapshot and the merged decision alone; it also asserts explanations == queued | preempted
    seen = verify(snap, d, reclaim_for(st))
    assert {c for c, _ in seen} >= {"priority"} and seen
    assert set(d.queue_reasons) == set(d.queue)
    assert all(d.queue_reasons[j].value == d.explanations[j].code for j in d.queue)


def test_the_binding_a_queued_job_names_really_binds(
    case: Case,
) -> None:
    """Stated directly (the oracle checks the same and more): a capacity-side binding means too
    few free GPUs of the type after the merged decision, a quota-side one that the tenant's idle
    quota plus its loans fall short of the gang and nobody lends the rest."""
    snap, st, d, variant = case
    a = After(snap, d)
    free = {t: a.cap[t] - sum(v for (_, tt), v in a.use.items() if tt == t) for t in a.types}
    checked: dict[str, int] = defaultdict(int)
    for jid in d.queue:
        e = d.explanations[jid]
        job = st.job(jid)
        g = job.size_range[0] if job.is_elastic else job.gpus
        f = e.types[0]
        t, ten = f.gpu_type, job.tenant
        assert e.resource is not None and (e.resource.gpu_type, e.resource.gpus) == (t, g)
        if f.binding in ("capacity", "priority"):
            assert f.free == free[t] < g
        elif f.binding in ("no_lender", "lend_limit", "borrow_limit", "over_quota_kept"):
            assert free[t] >= g
            idle = a.quota(ten, t) - a.use[(ten, t)] - a.lent_out[(ten, t)]
            assert (f.quota, f.use, f.idle_quota, f.borrowed) == (
                a.quota(ten, t), a.use[(ten, t)], idle, a.lent_in[(ten, t)]
            )
            assert f.to_borrow == g - idle - a.lent_in[(ten, t)] > 0
            if f.binding == "no_lender":
                assert f.lendable < f.to_borrow
        elif f.binding == "gang_size":
            assert a.cap[t] < g
        checked[f.binding] += 1
    assert sum(checked.values()) == len(d.queue)
    assert REACHES[variant] <= set(checked), checked


def test_preemptions_of_the_coordination_step_name_what_they_made_room_for() -> None:
    """On the fleet, the coordination step stops running jobs for guaranteed jobs of tenants
    due a reclaim; each such stop names a job started now (of such a tenant, on its type) even
    where that job starts on other GPUs."""
    snap = generate("fleet", seed=3, gpus=3000)
    st, d = partitioned(snap, 3)
    due = reclaim_for(st)
    started = {s.job for s in d.start}
    elsewhere = [e for e in d.explanations.values() if "stopping it makes room for" in e.text]
    assert elsewhere
    a = After(snap, d)
    for e in elsewhere:
        assert e.code in ("reclaim", "priority") and e.resource is not None
        tail = e.text.split("stopping it makes room for ", 1)[1]
        named = {j for j in e.made_room_for if f"{j} ({st.job(j).tenant}" in tail}
        assert named and named <= due & started & set(a.started[e.resource.gpu_type])
        assert f"started now on other '{e.resource.gpu_type}' GPUs" in tail
    verify(snap, d, due)


def test_explanations_change_nothing_else(case: Case) -> None:
    """The merged decision is the same with and without its explanations (starts, preemptions,
    loans, queue, assurance): explaining is a read-only step after the merge."""
    _, st, d, _ = case
    k = int(d.solver.notes[0].split()[2])
    sp = P.split(st, k, seed=GREEDY.seed)
    signal = asr.compute(st)
    part = GREEDY.with_(time_limit_s=Budget(GREEDY.time_limit_s).part_limit_s)
    results = P.run_parts(sp.parts, part, "serial", signal, solve_epoch, EstimatePredictor(), slack=sp.slack)
    plain, room_for = P.merge_plan(st, results, sp.leftover, signal)
    assert plain.explanations == {} and plain.queue_reasons == {}
    full = P.merge(st, results, sp.leftover, signal)
    skip = {"solver", "explanations", "queue_reasons"}
    assert plain.model_dump(exclude=skip) == full.model_dump(exclude=skip)
    assert d.model_dump(exclude=skip) == full.model_dump(exclude=skip)  # solve_epoch's own run
    assert full.explanations == d.explanations
    stopped = {p.job for p in full.preempt}
    assert set(room_for) <= stopped
    # every job the coordination step stopped names the job it stopped it for when that started
    started = {s.job for s in full.start}
    for jid, (ben,) in room_for.items():
        assert (ben in full.explanations[jid].made_room_for) == (ben in started)


def test_explanations_are_deterministic() -> None:
    snap = generate("fleet", seed=1, gpus=2000)
    _, a = partitioned(copy.deepcopy(snap), 2)
    _, b = partitioned(copy.deepcopy(snap), 2)
    assert a.explanations and a.model_dump(include={"explanations", "queue_reasons"}) == b.model_dump(
        include={"explanations", "queue_reasons"}
    )


def _elsewhere_snapshot() -> dict[str, Any]:
    """a (quota 8) runs 4 GPUs on n0 and lends its 4 idle GPUs to b, which runs them on n1; a's
    4-GPU guaranteed gang has waited past its target. 8 GPUs are free, but starting it uses the
    quota b borrows, so b's job is reclaimed, and the gang goes to the best-fitting node, n0."""
    data = cluster(nodes={"n0": ("A100", 8), "n1": ("A100", 8)}, tenants={"a": {"A100": 8}, "b": {"A100": 0}})
    data["jobs"] = [
        running("a-run", "a", [("n0", g) for g in range(4)], start_s=9_000.0),
        running("b-loan", "b", [("n1", g) for g in range(4)], start_s=9_000.0, qos="best_effort",
                on_loan=True),
        pending("a1", "a", 4, submit_s=1_000.0),
    ]
    return data


def test_a_reclaim_for_a_start_elsewhere_names_the_start_and_the_lender() -> None:
    from optsched.schema.decision import Decision as D
    from optsched.schema.decision import SolverInfo

    st = state_of(_elsewhere_snapshot())
    assert asr.compute(st)["a"].reclaim
    info = SolverInfo(backend="greedy", seconds=0.0)
    part = P.PartResult(D(now=st.snapshot.now, status="feasible", solver=info, queue=["a1"]), 0.0, 3, 16)
    d = P.merge(st, [part], [])
    assert_decision_valid(st, d)
    assert [(p.job, p.reason.value) for p in d.preempt] == [("b-loan", "reclaim")]
    (s,) = d.start
    assert s.job == "a1" and {r.node for r in s.allocation} == {"n0"}  # not on b-loan's GPUs
    e = d.explanations["b-loan"]
    assert e.code == "reclaim" and e.binding == "quota" and e.lender == "a"
    assert e.made_room_for == ["a1"]
    assert "a takes its quota back: it uses 8 of its 8 'A100' quota after this decision, 4 before" in e.text
    assert "stopping it makes room for a1 (a) started now on other 'A100' GPUs" in e.text
    verify(_elsewhere_snapshot(), d, {"a1"})


def test_explain_command_on_a_partitioned_decision(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snap = generate("fleet", seed=2, gpus=1600)
    sp, dp = tmp_path / "s.json", tmp_path / "d.json"
    sp.write_text(json.dumps(snap))
    args = ["solve", str(sp), "-o", str(dp), "--backend", "greedy", "--predictor", "fallback"]
    args += ["--partitions", "2"]
    assert run(args, capsys)[0] == 0
    d = Decision.model_validate_json(dp.read_text())
    assert d.solver.backend.startswith("partitioned:") and d.queue and d.preempt
    verify(snap, d, reclaim_for(state_of(snap)))
    q = d.queue[0]
    code, out, _ = run(["explain", str(sp), str(dp), q], capsys)
    assert code == 0 and f"queued ({d.queue_reasons[q].value}), binding: {d.explanations[q].binding}" in out
    assert d.explanations[q].text in out
    for f in d.explanations[q].types:
        assert f"'{f.gpu_type}': {f.binding}, {f.missing} missing" in out
    for p in d.preempt[:3]:
        code, out, _ = run(["explain", str(sp), str(dp), p.job], capsys)
        assert code == 0 and f"preempted ({p.reason.value})" in out
        made = d.explanations[p.job].made_room_for
        assert (f"made room for: {', '.join(made)}" in out) == bool(made)


@pytest.mark.parametrize(("size", "seed"), [("tiny", 0), ("tiny", 3), ("venus", 1)])
def test_explain_decision_reproduces_one_models_explanations(size: str, seed: int) -> None:
    """What explaining needed from the epoch's problem (value order, evicted MPS guests, use
    before the decision, held-back jobs) comes from the state and the decision alone: with the
    problem's value order, ``explain_decision`` gives one model's explanations exactly."""
    from optsched.engine.epoch import _prepare
    from optsched.engine.explain import explain_decision

    snap = loosen(generate(size, seed), seed)  # type: ignore[arg-type]
    snap["options"] = {"lookahead_epochs": 0}  # the look-ahead rewrites some explanations
    st = state_of(snap)
    d = solve_epoch(st, predictor=EstimatePredictor())
    assert not d.solver.backend.startswith("partitioned") and d.explanations
    density = _prepare(st, GREEDY, EstimatePredictor(), {}).problem.density
    again = explain_decision(st, d, asr.compute(st), rank=lambda j: (-density.get(j, 0.0), j))
    assert again == d.explanations

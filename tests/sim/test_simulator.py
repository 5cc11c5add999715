"""Simulator mechanics, checked against hand-computed results."""

from __future__ import annotations

import dataclasses

import pytest

from optsched.engine.state import ClusterState
from optsched.schema.decision import Decision, SolverInfo, Start
from optsched.schema.snapshot import GpuRef, Snapshot
from optsched.sim.clock import EventQueue, Kind
from optsched.sim.cluster import SimConfig, SimulationError, Simulator
from optsched.sim.metrics import summarize, utilization
from optsched.sim.policies import make_policy
from optsched.sim.synthetic import synthetic_interference, synthetic_profiles
from optsched.sim.trace import GuaranteeRule, TenantSpec, Trace, TraceJob
from tests.sim.conftest import EXACT, make_trace


def test_three_job_trace_gives_hand_computed_metrics(three_jobs: Trace) -> None:
    # FIFO on one 4-GPU node: A (2 GPUs, 0 -> 100), B (2 GPUs, 10 -> 60); C needs all 4 and
    # waits for A: it starts at 100 and ends at 130.
    log = Simulator(three_jobs, make_policy("fifo"), config=EXACT).run()
    m = summarize(log)
    assert log.jobs["start_s"] == [0.0, 10.0, 100.0]
    assert log.jobs["end_s"] == [100.0, 60.0, 130.0]
    assert m["avg_queue_delay_s"] == pytest.approx(80 / 3)
    assert m["p95_queue_delay_s"] == pytest.approx(72.0)  # linear: 0 + 0.9 * 80
    assert m["avg_jct_s"] == pytest.approx((100 + 50 + 110) / 3)
    assert m["p95_jct_s"] == pytest.approx(109.0)  # 100 + 0.9 * 10
    # window [0, 20] (first to last submission): A 2x20 + B 2x10 GPU-s of 4x20
    assert m["utilization"] == pytest.approx(60 / 80)
    assert m["useful_utilization"] == pytest.approx(60 / 80)
    # whole run: (200 + 100 + 120) / (4 x 130)
    assert utilization(log, (0.0, 130.0)) == pytest.approx(420 / 520)
    # all three guaranteed, max delay 60 s: C waited 80 s
    assert m["qos_compliance"] == pytest.approx(2 / 3)
    assert m["preemptions"] == 0
    assert m["lost_gpu_hours"] == 0
    # decisions at 0, 10, 20 (C queued), 60 (C still blocked) and 100
    assert log.decisions["t"] == [0.0, 10.0, 20.0, 60.0, 100.0]
    assert m["unfinished"] == 0


def test_guarantee_rule_labels_jobs_beyond_quota_best_effort() -> None:
    jobs = [
        TraceJob("A", "t1", 2, 0.0, 100.0),
        TraceJob("B", "t1", 2, 10.0, 50.0),
        TraceJob("C", "t1", 4, 20.0, 30.0),  # A and B still active: 4 + 4 > 4
        TraceJob("D", "t1", 2, 100.0, 30.0),  # A ended at 100, B at 60
    ]
    tenants = {"t1": TenantSpec("t1", {"V100": 4})}
    got = {j.id: j.qos for j in GuaranteeRule().apply(jobs, tenants)}
    assert got == {"A": "guaranteed", "B": "guaranteed", "C": "best_effort",
                   "D": "guaranteed"}
    half = {j.id: j.qos for j in GuaranteeRule(fraction=0.5).apply(jobs, tenants)}
    assert half == {"A": "guaranteed", "B": "best_effort", "C": "best_effort",
                    "D": "guaranteed"}
    assert {j.qos for j in GuaranteeRule("none").apply(jobs, tenants)} == {"best_effort"}


def test_event_ties_are_ordered_by_kind_then_insertion() -> None:
    q = EventQueue()
    q.push(5.0, Kind.DECIDE, 0)
    q.push(5.0, Kind.ARRIVAL, 1)
    q.push(5.0, Kind.ARRIVAL, 2)
    q.push(5.0, Kind.COMPLETION, 3)
    q.push(1.0, Kind.DECIDE, 4)
    q.push(5.0, Kind.ARRIVAL, 0)
    order = [(q.pop().job) for _ in range(6)]
    assert order == [4, 3, 1, 2, 0, 0]


def test_same_time_arrivals_start_in_trace_order() -> None:
    # two 2-GPU jobs arrive together on a 2-GPU node: the first (by id) starts first
    jobs = [TraceJob("x2", "t1", 2, 0.0, 10.0), TraceJob("x1", "t1", 2, 0.0, 10.0)]
    tr = make_trace(jobs, [TenantSpec("t1", {"V100": 2})], gpus=2)
    log = Simulator(tr, make_policy("fifo"), config=EXACT).run()
    starts = dict(zip(log.jobs["id"], log.jobs["start_s"], strict=True))
    assert starts == {"x1": 0.0, "x2": 10.0}


def test_mps_pair_progresses_at_the_interference_models_speeds() -> None:
    # a hand-built trace carries no interference model: the ground truth uses the synthetic one
    inter = synthetic_interference()
    a_key, b_key = synthetic_profiles()[4].key, synthetic_profiles()[5].key
    sa, sb = inter.pair_speeds(a_key, b_key)
    assert sa < 1.0 and sb < 1.0  # utilisations 79.4 + 93.0 oversubscribe the GPU
    jobs = [
        TraceJob("A", "t1", 1, 0.0, 100.0, profile=a_key, memory_gib=3.0),
        TraceJob("B", "t1", 1, 0.0, 40.0, profile=b_key, memory_gib=4.0),
    ]
    tr = make_trace(jobs, [TenantSpec("t1", {"V100": 1})], gpus=1)
    log = Simulator(tr, make_policy("gandiva"), config=EXACT).run()
    end = dict(zip(log.jobs["id"], log.jobs["end_s"], strict=True))
    # B (guest) finishes at 40 / sb; A ran at sa until then, alone afterwards
    tb = 40.0 / sb
    assert end["B"] == pytest.approx(tb)
    assert end["A"] == pytest.approx(tb + (100.0 - sa * tb))
    hosts = [h for h in log.segments["host"] if not h]
    assert len(hosts) == 1  # one guest segment


def test_preemption_loses_work_since_checkpoint_and_pays_restart() -> None:
    # Kueue: tenant b borrows a's idle GPU; a's job arrives at 50 and reclaims it.
    cfg = dataclasses.replace(EXACT, checkpoint_s=30.0, restart_overhead_s=5.0)
    jobs = [
        TraceJob("b1", "b", 1, 0.0, 100.0),
        TraceJob("b2", "b", 1, 0.0, 100.0),
        TraceJob("a1", "a", 1, 50.0, 10.0),
    ]
    tenants = [TenantSpec("a", {"V100": 1}), TenantSpec("b", {"V100": 1})]
    tr = make_trace(jobs, tenants, gpus=2)
    log = Simulator(tr, make_policy("kueue"), config=cfg).run()
    m = summarize(log)
    assert m["preemptions"] == 1 and m["loans_reclaimed"] == 1 and m["loans_made"] == 2
    assert log.preemptions["reason"] == ["reclaim"]
    # b2 ran 50 s since its start at 0: checkpoint at 30, so 20 s are lost
    assert log.preemptions["lost_s"] == [20.0]
    assert m["lost_gpu_hours"] == pytest.approx(20 / 3600)
    end = dict(zip(log.jobs["id"], log.jobs["end_s"], strict=True))
    # a1 runs 50 -> 60; b2 restarts at 60 with 100 - 30 + 5 = 75 s of work left
    assert end["a1"] == 60.0
    assert end["b2"] == pytest.approx(135.0)


class _Bad:
    name = "bad"

    def decide(self, snapshot: Snapshot, state: ClusterState) -> Decision:
        # starts every pending job on GPU 0 of the first node: a double use
        node = snapshot.nodes[0].id
        return Decision(
            now=snapshot.now,
            status="feasible",
            solver=SolverInfo(backend="bad", seconds=0.0),
            start=[Start(job=j.id, allocation=[GpuRef(node=node, gpu=0)] * j.gpus)
                   for j in state.pending()],
        )


def test_a_violating_decision_is_an_error(three_jobs: Trace) -> None:
    with pytest.raises(SimulationError, match="violation"):
        Simulator(three_jobs, _Bad(), config=EXACT).run()


def test_optsched_decisions_are_checked_once_by_the_engine(
    three_jobs: Trace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """optsched checks itself (epoch and event path) on the simulator's state: the simulator's
    own check of the same decision is not run again, and the engine's ran for every decision."""
    import optsched.engine.admit as admit
    import optsched.engine.check as check
    import optsched.sim.cluster as cluster

    calls: list[int] = []
    real = check.check_decision

    def counted(state: ClusterState, decision: Decision, **kw: bool) -> list[object]:
        calls.append(1)
        return real(state, decision, **kw)  # type: ignore[return-value]

    def never(*_: object, **__: object) -> list[object]:
        raise AssertionError("the simulator re-checked a decision the engine had checked")

    monkeypatch.setattr(check, "check_decision", counted)
    monkeypatch.setattr(admit, "check_decision", counted)
    monkeypatch.setattr(cluster, "check_decision", never)
    sim = Simulator(three_jobs, make_policy("optsched"), config=EXACT)
    sim.run()
    decided = sum(1 for s in sim.log.decisions["seconds"] if s > 0)
    assert decided > 0 and len(calls) >= decided


def test_oracle_runtime_mode_shows_truth_and_default_shows_estimate() -> None:
    jobs = [TraceJob("A", "t1", 1, 0.0, 100.0, estimate_s=70.0),
            TraceJob("B", "t1", 1, 0.0, 100.0, estimate_s=70.0)]
    tr = make_trace(jobs, [TenantSpec("t1", {"V100": 1})], gpus=1)
    seen: list[float | None] = []

    def grab(snap: Snapshot, _: Decision) -> None:
        seen.extend(j.runtime_s for j in snap.jobs)

    Simulator(tr, make_policy("fifo"), config=EXACT, on_decision=grab).run()
    assert set(seen) == {70.0}
    seen.clear()
    cfg = dataclasses.replace(EXACT, oracle_runtime=True)
    Simulator(tr, make_policy("fifo"), config=cfg, on_decision=grab).run()
    assert set(seen) == {100.0}


def test_seeded_truth_is_reproducible_and_seed_dependent() -> None:
    jobs = [TraceJob(f"j{k}", "t1", 1, float(k), 100.0) for k in range(5)]
    tr = make_trace(jobs, [TenantSpec("t1", {"V100": 4})])
    cfg = SimConfig(use_history=False)
    a = Simulator(tr, make_policy("fifo"), seed=1, config=cfg).run()
    b = Simulator(tr, make_policy("fifo"), seed=1, config=cfg).run()
    c = Simulator(tr, make_policy("fifo"), seed=2, config=cfg).run()
    assert a.jobs == b.jobs and a.segments == b.segments
    assert a.jobs["end_s"] != c.jobs["end_s"]


def _elastic_reclaim(elastic: bool) -> Trace:
    """b runs a guaranteed 4-GPU job on its quota and a best-effort 4-GPU sweep on a's idle
    quota; at t=1000 a's 2-GPU job arrives and takes 2 GPUs back."""
    sweep = {"min_gpus": 2, "max_gpus": 4} if elastic else {}
    jobs = [
        TraceJob("b-big", "b", 4, 0.0, 100000.0),
        TraceJob("b-sweep", "b", 4, 0.0, 10000.0, **sweep),  # type: ignore[arg-type]
        TraceJob("a1", "a", 2, 1000.0, 100000.0),
    ]
    tenants = [TenantSpec("a", {"V100": 4}), TenantSpec("b", {"V100": 4})]
    trace = make_trace(jobs, tenants, gpus=8)  # beyond b's quota, the sweep is best-effort
    assert [j.qos for j in trace.jobs] == ["guaranteed", "best_effort", "guaranteed"]
    return trace


def test_shrinking_an_elastic_job_loses_less_work_than_evicting_it() -> None:
    """a takes 2 GPUs back (when the engine reclaims, at the same time T in both runs): the
    elastic sweep shrinks to 2 and loses its 30 s resize overhead on 2 GPUs (60 GPU-s); the
    rigid one, never checkpointed, is evicted and loses its T seconds of work on 4 GPUs."""
    cfg = dataclasses.replace(
        EXACT, checkpoint_s=0.0, resize_overhead_s=30.0, max_sim_s=30000.0, guaranteed_shareable=False
    )
    lost, when = {}, {}
    for elastic in (True, False):
        log = Simulator(_elastic_reclaim(elastic), make_policy("optsched"), config=cfg).run()
        i = log.jobs["id"].index("b-sweep")
        lost[elastic] = log.jobs["lost_work_gpu_s"][i]
        if elastic:
            assert log.preemptions["job"] == []
            assert log.resizes["job"] == [i] and log.resizes["reason"] == ["shrink_for_reclaim"]
            assert (log.resizes["from_gpus"], log.resizes["to_gpus"]) == ([4], [2])
            (t,) = when[elastic] = log.resizes["t"]
            # 4t of its 40000 GPU-s done by then; the rest plus the 30 s pause at 2 GPUs, at a
            # rate linear in its size
            assert log.jobs["end_s"][i] == pytest.approx(t + (40000.0 - 4 * t + 60.0) / 2)
        else:
            assert log.preemptions["reason"] == ["reclaim"] and log.resizes["job"] == []
            (t,) = when[elastic] = log.preemptions["t"]
    assert when[True] == when[False] and t >= 1000.0
    assert lost == {True: 60.0, False: 4 * t}

"""Lucid-like and AntMan-like baselines on hand-checked small snapshots."""

from __future__ import annotations

from typing import Any

from optsched.engine.check import check_decision
from optsched.engine.state import ClusterState
from optsched.schema.decision import Decision
from optsched.schema.snapshot import Snapshot
from optsched.sim.policies import AntManPolicy, LucidPolicy
from optsched.sim.profiles import Interference, Profile
from optsched.testing import cluster, pending, running

# three profiles with share scores 0 (tiny), 1 (medium), 2 (jumbo)
KEYS = {0: ("tiny", "d", 32, 0), 1: ("medium", "d", 32, 0), 2: ("jumbo", "d", 32, 0)}
PROFILES = Interference(
    {k: Profile(k, 30.0 + 30 * lab, 8.0, lab) for lab, k in KEYS.items()}, {}, source="test")


def feats(label: int) -> dict[str, Any]:
    m, d, b, a = KEYS[label]
    return {"features": {"model": m, "dataset": d, "batchsize": b, "amp": a}}


def decide(policy: Any, snap: dict[str, Any]) -> tuple[ClusterState, Decision]:
    st = ClusterState.from_snapshot(Snapshot.model_validate(snap))
    d = policy.decide(st.snapshot, st)
    assert check_decision(st, d, work_conserving=False) == []
    return st, d


def lucid(**kw: Any) -> LucidPolicy:
    pol = LucidPolicy(interference=PROFILES, **kw)
    return pol


def busy(snap: dict[str, Any], now: float, n: int = 20) -> None:
    """Make ``n`` jobs look recently submitted, so packing is on (rate above 2 per bin)."""
    for k in range(n):
        snap["jobs"].append(pending(f"old{k}", "a", 64, submit_s=now - 60.0 * k - 1,
                                    runtime_s=1e6, **feats(2)))


def test_lucid_packs_first_on_a_same_size_host_when_scores_add_to_two() -> None:
    snap = cluster(nodes={"n0": ("A100", 4), "n1": ("A100", 4)}, now=10_000.0)
    snap["jobs"] = [
        running("h", "a", [("n0", 0), ("n0", 1)], start_s=1_000.0, runtime_s=3600.0,
                shareable=True, **feats(1)),
        pending("g", "a", 2, submit_s=9_990.0, runtime_s=3000.0, shareable=True, **feats(1)),
    ]
    busy(snap, 10_000.0)
    _, d = decide(lucid(), snap)
    start = {s.job: s for s in d.start}
    # medium + medium = 2 <= 2 and priority 6,000 <= 2 × 7,200: packed although 6 GPUs are free
    assert start["g"].colocated_with == ["h"]


def test_lucid_rules_that_refuse_a_pair() -> None:
    base = cluster(nodes={"n0": ("A100", 4), "n1": ("A100", 4)}, now=10_000.0)
    host = running("h", "a", [("n0", 0), ("n0", 1)], start_s=1_000.0, runtime_s=3600.0,
                   shareable=True, **feats(1))
    cases = {
        "score": pending("g", "a", 2, submit_s=9_990.0, runtime_s=100.0, shareable=True,
                         **feats(2)),  # 1 + 2 > 2
        "size": pending("g", "a", 1, submit_s=9_990.0, runtime_s=100.0, shareable=True,
                        **feats(0)),  # 1 GPU vs a 2-GPU host
        "priority": pending("g", "a", 2, submit_s=9_990.0, runtime_s=8000.0, shareable=True,
                            **feats(0)),  # 16,000 > 2 × 7,200
    }
    for why, job in cases.items():
        snap = dict(base)
        snap["jobs"] = [host, job]
        busy(snap, 10_000.0)
        _, d = decide(lucid(), snap)
        start = {s.job: s for s in d.start}
        assert "g" in start and not start["g"].colocated_with, why  # started alone instead


def test_lucid_switches_packing_off_under_low_load_and_then_blocks() -> None:
    snap = cluster(nodes={"n0": ("A100", 4)}, tenants={"a": {"A100": 4}}, now=100_000.0)
    snap["jobs"] = [
        running("h", "a", [("n0", 0), ("n0", 1)], start_s=1_000.0, runtime_s=3600.0,
                shareable=True, **feats(0)),
        pending("big", "a", 4, submit_s=99_000.0, runtime_s=10.0, shareable=True, **feats(0)),
        pending("g", "a", 2, submit_s=99_990.0, runtime_s=3000.0, shareable=True, **feats(0)),
    ]
    pol = lucid()
    # two arrivals in the last five 10-minute bins: 0.4 per bin <= 2, packing off
    assert not pol.packing_on(Snapshot.model_validate(snap))
    _, d = decide(lucid(), snap)
    # priority order big (40) before g (6,000); big does not fit and blocks g
    assert d.start == [] and d.queue == ["big", "g"]
    busy(snap, 100_000.0)
    _, d = decide(lucid(), snap)
    assert {s.job: s.colocated_with for s in d.start} == {"g": ["h"]}


def test_antman_guaranteed_job_preempts_opportunistic_work_for_its_quota() -> None:
    snap = cluster(nodes={"n0": ("A100", 4)}, tenants={"a": {"A100": 2}, "b": {"A100": 2}})
    snap["jobs"] = [
        running("bo", "b", [("n0", 0), ("n0", 1), ("n0", 2)], start_s=5_000.0,
                qos="best_effort", on_loan=True),
        running("bx", "b", [("n0", 3)], start_s=6_000.0, qos="best_effort"),
        pending("ag", "a", 2, submit_s=9_000.0),
    ]
    # bo holds 3 with 1 on loan from a: the loan-holder goes first (and frees enough)
    snap["jobs"][0]["on_loan"] = True
    _, d = decide(AntManPolicy(), snap)
    assert [(p.job, p.reason) for p in d.preempt] == [("bo", "reclaim")]
    assert [s.job for s in d.start] == ["ag"] and not d.start[0].on_loan


def test_antman_opportunistic_jobs_use_idle_gpus_then_squeeze_in() -> None:
    snap = cluster(nodes={"n0": ("A100", 4)}, tenants={"a": {"A100": 2}, "b": {"A100": 2}})
    snap["jobs"] = [
        running("ag", "a", [("n0", 0), ("n0", 1)], start_s=5_000.0, memory_gib=20.0,
                shareable=True),
        pending("o1", "b", 3, submit_s=9_000.0, qos="best_effort", memory_gib=10.0),
        pending("o2", "b", 2, submit_s=9_100.0, qos="best_effort", memory_gib=10.0),
    ]
    _, d = decide(AntManPolicy(), snap)
    # o1 (3 GPUs) does not fit the 2 idle GPUs: it is squeezed in? no host holds 3 GPUs;
    # o2 takes the 2 idle GPUs inside b's quota
    start = {s.job: s for s in d.start}
    assert set(start) == {"o2"} and not start["o2"].colocated_with
    snap["jobs"][2]["gpus"] = 2
    snap["jobs"].append(pending("o3", "b", 2, submit_s=9_200.0, qos="best_effort",
                                memory_gib=10.0))
    snap["jobs"][1]["gpus"] = 1
    _, d = decide(AntManPolicy(), snap)
    start = {s.job: s for s in d.start}
    # o1 (1 GPU) and o2 (2 GPUs) start alone on the idle GPUs? o1 first (FIFO) takes one,
    # o2 does not fit the one left and is squeezed onto a host (ag: 60 GiB of room)
    assert not start["o1"].colocated_with
    assert start["o2"].colocated_with == ["ag"]
    assert "o3" not in start or start["o3"].colocated_with


def test_antman_never_preempts_guaranteed_work() -> None:
    snap = cluster(nodes={"n0": ("A100", 4)}, tenants={"a": {"A100": 2}, "b": {"A100": 2}})
    snap["jobs"] = [
        running("bg", "b", [("n0", 0), ("n0", 1), ("n0", 2), ("n0", 3)], start_s=5_000.0,
                on_loan=True),
        pending("ag", "a", 2, submit_s=9_000.0),
    ]
    _, d = decide(AntManPolicy(), snap)
    # bg is guaranteed but on loan: the checker allows reclaiming it, and AntMan does
    assert [p.job for p in d.preempt] == ["bg"] and [s.job for s in d.start] == ["ag"]
    snap["jobs"][0]["on_loan"] = False
    snap["tenants"][1]["quota"] = {"A100": 4}
    snap["tenants"][0]["quota"] = {"A100": 0}
    _, d = decide(AntManPolicy(), snap)
    assert d.preempt == [] and d.start == []


def test_antman_reclaiming_a_host_stops_its_guest_by_priority() -> None:
    snap = cluster(nodes={"n0": ("A100", 2)}, tenants={"a": {"A100": 2}, "b": {"A100": 0}})
    snap["jobs"] = [
        running("bo", "b", [("n0", 0), ("n0", 1)], start_s=5_000.0, qos="best_effort",
                on_loan=True, shareable=True, colocated=True),
        running("bg", "b", [("n0", 0)], start_s=6_000.0, qos="best_effort", shareable=True,
                colocated=True, guest_of="bo"),
        pending("ag", "a", 2, submit_s=9_000.0),
    ]
    _, d = decide(AntManPolicy(), snap)
    assert sorted((p.job, p.reason) for p in d.preempt) == [("bg", "priority"), ("bo", "reclaim")]
    assert [s.job for s in d.start] == ["ag"]

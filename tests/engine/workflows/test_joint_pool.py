"""The serving pool's size as a decision: lending idle cluster quota to the workflow pool."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from optsched.engine.backends.base import SolveParams
from optsched.engine.check import check_decision
from optsched.engine.epoch import solve_epoch
from optsched.engine.state import load_state
from optsched.engine.workflows.check import check_pool_decision, effective_state
from optsched.engine.workflows.pool import backlog, decide_pool
from optsched.errors import SnapshotError
from optsched.schema.decision import Decision, PoolLoan, PoolReturn
from optsched.schema.snapshot import GpuRef
from optsched.sim.workflows.workloads import MODELS

NOW = 1000.0
PARAMS = SolveParams(backend="greedy", time_limit_s=2.0, seed=0)


def _burst(n: int, per: int = 6) -> list[dict[str, Any]]:
    """``n`` sessions of ``per`` independent 8B calls each (2,000 prompt, 400 output tokens)."""
    return [
        {
            "id": f"s{i}",
            "tenant": "a",
            "arrival_s": NOW - 1.0,
            "activations": [
                {"id": f"x{k}", "model": "llama-3.1-8b", "input_tokens": 2000, "output_tokens": 400}
                for k in range(per)
            ],
        }
        for i in range(n)
    ]


def snapshot(*, sessions: int = 20, lending: bool = True, **over: Any) -> dict[str, Any]:
    """Two a100 nodes of 8 GPUs (tenants a: quota 10, b: quota 6); one dedicated h100 pool GPU.

    Tenant ``a`` runs a 4-GPU guaranteed job on node c0 (GPUs 0-3); the rest is free.
    """
    snap: dict[str, Any] = {
        "format": 1,
        "now": NOW,
        "epoch_s": 10.0,
        "gpu_types": {"a100": {"memory_gib": 80}, "h100": {"memory_gib": 80}},
        "nodes": [
            {"id": "c0", "gpu_type": "a100", "gpus": 8},
            {"id": "c1", "gpu_type": "a100", "gpus": 8},
            {"id": "p0", "gpu_type": "h100", "gpus": 1},
        ],
        "tenants": [{"id": "a", "quota": {"a100": 10}}, {"id": "b", "quota": {"a100": 6}}],
        "jobs": [
            {
                "id": "ja",
                "tenant": "a",
                "qos": "guaranteed",
                "gpus": 4,
                "submit_s": 0.0,
                "state": "running",
                "allocation": [{"node": "c0", "gpu": g} for g in range(4)],
                "start_s": 10.0,
                "on_loan": False,
                "runtime_s": 5000.0,
            }
        ],
        "workflows": {
            "models": {
                m.name: {
                    "memory_gib": m.memory_gib,
                    "params_b": m.params_b,
                    "load_s": {"a100": 5.0, "h100": 5.0},
                }
                for m in MODELS
            },
            "pool": [{"node": "p0", "gpu": 0, "resident": ["llama-3.1-8b"]}],
            "sessions": _burst(sessions),
        },
    }
    if lending:
        snap["workflows"]["pool_lending"] = {"gpu_types": ["a100"], "min_lend_s": 20.0}
    for k, v in over.items():
        snap[k] = v
    return snap


def _lent(snap: dict[str, Any], gpus: list[tuple[str, int, str]], since: float = NOW - 100.0) -> None:
    for node, g, who in gpus:
        snap["workflows"]["pool"].append(
            {"node": node, "gpu": g, "resident": ["llama-3.1-8b"], "lent_by": who, "lent_since_s": since}
        )


def _solve(snap: dict[str, Any]) -> Decision:
    return solve_epoch(copy.deepcopy(snap), params=PARAMS)


# ------------------------------------------------------------------ growing under a burst
def test_pool_grows_under_a_burst_from_idle_quota_only() -> None:
    snap = snapshot()
    d = _solve(snap)
    assert d.pool is not None
    lend = d.pool.lend
    assert lend, d.pool.notes
    state = load_state(snap)
    keys = [x.gpu.key() for x in lend]
    assert len(set(keys)) == len(keys)
    for x in lend:
        assert x.gpu.key() not in state.gpu_holders  # free GPUs only
        assert x.gpu_type == "a100"
    # idle quota: a has 10 - 4 = 6 idle, b has 6; no more than 12 lent, each within its own
    per = d.pool.lent
    assert per.get("a", {}).get("a100", 0) <= 6
    assert per.get("b", {}).get("a100", 0) <= 6
    assert d.pool.size == 1 + len(lend)
    # the most fragmented node first: c0 (4 free) before c1 (8 free)
    assert lend[0].gpu.node == "c0"
    # the planner uses the grown pool in the same call
    assert d.workflow_plan is not None
    used = {u.device.key() for u in d.workflow_plan.units}
    assert used & set(keys)
    # the drain time falls with the lent GPUs
    assert d.pool.drain_s is not None
    assert d.pool.drain_s < backlog(state).drain_s()
    assert check_decision(state, d) == []


def test_no_growth_when_the_backlog_drains_fast() -> None:
    snap = snapshot()
    snap["workflows"]["sessions"] = _burst(1, per=2)  # about 11 s of work; grow_drain_s is 30
    d = _solve(snap)
    assert d.pool is not None
    assert d.pool.lend == [] and d.pool.returned == []
    assert d.pool.size == 1


def test_max_size_and_lenders_bound_growth() -> None:
    snap = snapshot()
    snap["workflows"]["pool_lending"].update({"max_size": 3, "lenders": ["b"]})
    d = _solve(snap)
    assert d.pool is not None
    assert d.pool.size == 3
    assert {x.lender for x in d.pool.lend} == {"b"}


def test_lend_limit_bounds_pool_lending() -> None:
    snap = snapshot()
    snap["tenants"][0]["lend_limit"] = {"a100": 1}
    snap["tenants"][1]["lend_limit"] = {"a100": 2}
    d = _solve(snap)
    assert d.pool is not None
    assert d.pool.lent == {"a": {"a100": 1}, "b": {"a100": 2}}


# ------------------------------------------------------------------ owner first
def test_guaranteed_in_quota_work_is_never_displaced() -> None:
    """Tenant a queues a guaranteed 6-GPU job within its quota (4 + 6 = 10): its idle quota is
    not lent, the job starts, and only b's quota goes to the pool."""
    snap = snapshot()
    snap["jobs"].append(
        {"id": "jq", "tenant": "a", "qos": "guaranteed", "gpus": 6, "submit_s": NOW - 5, "state": "pending",
         "gpu_types": ["a100"], "runtime_s": 600.0}
    )
    d = _solve(snap)
    assert d.pool is not None
    assert "a" not in d.pool.lent
    assert d.pool.lend  # b still lends
    assert "jq" in {s.job for s in d.start}
    assert d.preempt == []
    assert check_decision(load_state(snap), d) == []


def test_gpus_go_back_when_the_owner_needs_them() -> None:
    """a lent 4 GPUs; now a queues a guaranteed 4-GPU job that fits its quota only without the
    pool's GPUs: enough of them go back, in the same call, and the job starts."""
    snap = snapshot(sessions=20)
    _lent(snap, [("c0", 4, "a"), ("c0", 5, "a"), ("c0", 6, "a"), ("c0", 7, "a")])
    # b uses all of c1 with its own quota (6) and 2 borrowed from a's idle quota
    snap["jobs"].append(
        {"id": "jb", "tenant": "b", "qos": "best_effort", "gpus": 2, "submit_s": 0.0, "state": "running",
         "allocation": [{"node": "c1", "gpu": g} for g in (6, 7)], "start_s": 10.0, "on_loan": True}
    )
    snap["jobs"].append(
        {"id": "jb6", "tenant": "b", "qos": "guaranteed", "gpus": 6, "submit_s": 0.0, "state": "running",
         "allocation": [{"node": "c1", "gpu": g} for g in range(6)], "start_s": 10.0, "on_loan": False}
    )
    snap["jobs"].append(
        {"id": "jq", "tenant": "a", "qos": "guaranteed", "gpus": 4, "submit_s": NOW - 5, "state": "pending",
         "gpu_types": ["a100"], "runtime_s": 600.0}
    )
    state = load_state(snap)
    d = _solve(snap)
    assert d.pool is not None
    back = [r for r in d.pool.returned if r.reason == "owner_needs"]
    # a: quota 10, use 4, 4 in the pool, 2 lent to b; no free a100 left: the 4-GPU job needs
    # all 4 back (2 for its quota, 2 more for room, so b's borrowed job is not reclaimed)
    assert len(back) == 4 and all(r.lender == "a" for r in back)
    assert d.pool.lend == []
    assert "jq" in {s.job for s in d.start}
    on = {ref.key() for s in d.start if s.job == "jq" for ref in s.allocation}
    assert on <= {r.gpu.key() for r in back}
    assert d.preempt == []  # b's borrowed job keeps running: the pool gives the GPUs back
    assert check_decision(state, d) == []


def test_busy_lent_gpu_is_not_returned_until_idle() -> None:
    snap = snapshot(sessions=0)
    _lent(snap, [("c0", 4, "a")])
    snap["workflows"]["pool"][-1]["busy_until_s"] = NOW + 3.0
    snap["workflows"]["sessions"] = _burst(1, per=1)
    act = snap["workflows"]["sessions"][0]["activations"][0]
    act.update({"state": "running", "device": {"node": "c0", "gpu": 4}, "start_s": NOW - 1})
    d = _solve(snap)
    assert d.pool is not None and d.pool.returned == []
    snap["workflows"]["pool"][-1]["busy_until_s"] = 0.0
    snap["workflows"]["sessions"] = []
    d = _solve(snap)
    assert d.pool is not None
    assert [(r.gpu.key(), r.reason) for r in d.pool.returned] == [(("c0", 4), "burst_passed")]


# ------------------------------------------------------------------ returning when the burst passes
def test_gpus_return_when_the_burst_passes_with_hysteresis() -> None:
    snap = snapshot(sessions=0)
    _lent(snap, [("c0", 4, "a"), ("c0", 5, "b")])
    snap["workflows"]["pool"][-1]["lent_since_s"] = NOW - 5.0  # lent 5 s ago: min_lend_s is 20
    d = _solve(snap)
    assert d.pool is not None
    assert [(r.gpu.key(), r.reason) for r in d.pool.returned] == [(("c0", 4), "burst_passed")]
    assert d.pool.size == 2 and d.pool.lent == {"b": {"a100": 1}}
    # the cluster sees the returned GPU again and b's lent GPU as used
    eff = effective_state(load_state(snap), d.pool)
    assert ("c0", 4) not in eff.pool_gpus and ("c0", 5) in eff.pool_gpus
    assert eff.quota("b", "a100") == 5 and eff.quota("a", "a100") == 10


def test_hysteresis_band_neither_grows_nor_returns() -> None:
    """A drain time between return_drain_s and grow_drain_s keeps the lent GPU and lends no more."""
    snap = snapshot(sessions=3)
    _lent(snap, [("c0", 4, "a")])
    state = load_state(snap)
    d0 = backlog(state).drain_s()
    pl = snap["workflows"]["pool_lending"]
    pl["return_drain_s"], pl["grow_drain_s"] = d0 / 2, d0 * 2
    d = _solve(snap)
    assert d.pool is not None and d.pool.lend == [] and d.pool.returned == []
    assert d.pool.lent == {"a": {"a100": 1}}


def test_lent_gpus_count_as_their_lenders_use() -> None:
    """b lends all 6 of its quota: its queued best-effort job cannot borrow a's quota beyond a's idle
    quota, and the lent GPUs never carry a cluster job."""
    snap = snapshot(sessions=0, lending=False)
    _lent(snap, [("c1", g, "b") for g in range(6)])
    snap["workflows"]["sessions"] = _burst(1, per=1)
    snap["workflows"]["pool"][1]["busy_until_s"] = NOW + 5
    act = snap["workflows"]["sessions"][0]["activations"][0]
    act.update({"state": "running", "device": {"node": "c1", "gpu": 0}, "start_s": NOW - 1})
    for g in range(1, 6):
        snap["workflows"]["pool"][1 + g]["busy_until_s"] = NOW + 5  # busy: none goes back
    snap["jobs"].append(
        {"id": "jx", "tenant": "b", "qos": "best_effort", "gpus": 2, "submit_s": NOW - 5, "state": "pending",
         "runtime_s": 100.0}
    )
    state = load_state(snap)
    d = _solve(snap)
    assert d.pool is not None and d.pool.returned == [] and d.pool.lent == {"b": {"a100": 6}}
    pool_keys = {("c1", g) for g in range(6)}
    for s in d.start:
        assert not {r.key() for r in s.allocation} & pool_keys
        assert s.on_loan  # b's own quota is all in the pool
    assert check_decision(state, d) == []


# ------------------------------------------------------------------ the checker
def _good() -> tuple[dict[str, Any], Decision]:
    snap = snapshot()
    snap["workflows"]["pool_lending"]["max_size"] = 5  # c1/4..7 stay free
    return snap, _solve(snap)


def _violations(snap: dict[str, Any], d: Decision) -> list[str]:
    return [v.message for v in check_pool_decision(load_state(snap), d)]


def test_checker_accepts_the_engine_decision() -> None:
    snap, d = _good()
    assert _violations(snap, d) == []


@pytest.mark.parametrize(
    ("gpu", "lender", "expect"),
    [
        (("c0", 0), "a", "held by running job"),
        (("p0", 0), "a", "already in the pool"),
        (("c9", 0), "a", "unknown GPU"),
        (("c1", 7), "zz", "unknown tenant"),
    ],
)
def test_checker_rejects_a_bad_pool_loan(gpu: tuple[str, int], lender: str, expect: str) -> None:
    snap, d = _good()
    assert d.pool is not None
    d.pool.lend.append(PoolLoan(gpu=GpuRef(node=gpu[0], gpu=gpu[1]), lender=lender, gpu_type="a100"))
    d.pool.size += 1
    msgs = _violations(snap, d)
    assert any(expect in m for m in msgs), msgs
    assert check_decision(load_state(snap), d)


def test_checker_rejects_lending_beyond_idle_quota() -> None:
    """a has 6 idle a100 quota: a seventh GPU lent by a breaks the idle-quota rule."""
    snap = snapshot()
    snap["workflows"]["pool_lending"]["lenders"] = ["a"]
    d = _solve(snap)
    assert d.pool is not None and d.pool.lent == {"a": {"a100": 6}}
    taken = {x.gpu.key() for x in d.pool.lend}
    free = next(("c1", g) for g in range(8) if ("c1", g) not in taken)
    d.pool.lend.append(PoolLoan(gpu=GpuRef(node=free[0], gpu=free[1]), lender="a", gpu_type="a100"))
    d.pool.size += 1
    d.pool.lent = {"a": {"a100": 7}}
    msgs = _violations(snap, d)
    assert any("beyond its quota 10" in m for m in msgs), msgs


def test_checker_rejects_lending_while_the_owner_waits() -> None:
    snap = snapshot()
    snap["jobs"].append(
        {"id": "jq", "tenant": "a", "qos": "guaranteed", "gpus": 2, "submit_s": NOW - 5, "state": "pending",
         "gpu_types": ["a100"]}
    )
    d = _solve(snap)
    assert d.pool is not None
    # pretend the job stayed queued and a lent one GPU
    d.start = [s for s in d.start if s.job != "jq"]
    d.queue = ["jq", *d.queue]
    taken = {x.gpu.key() for x in d.pool.lend}
    free = next(("c1", g) for g in range(8) if ("c1", g) not in taken)
    d.pool.lend.append(PoolLoan(gpu=GpuRef(node=free[0], gpu=free[1]), lender="a", gpu_type="a100"))
    d.pool.size += 1
    d.pool.lent.setdefault("a", {})["a100"] = d.pool.lent.get("a", {}).get("a100", 0) + 1
    msgs = _violations(snap, d)
    assert any("waits within its quota" in m for m in msgs), msgs


def test_checker_rejects_a_busy_return_and_a_wrong_size() -> None:
    snap = snapshot(sessions=0)
    _lent(snap, [("c0", 4, "a")])
    snap["workflows"]["pool"][-1]["busy_until_s"] = NOW + 3.0
    d = _solve(snap)
    assert d.pool is not None and d.pool.returned == []
    d.pool.returned.append(PoolReturn(gpu=GpuRef(node="c0", gpu=4), lender="a", reason="burst_passed"))
    msgs = _violations(snap, d)
    assert any("still busy" in m for m in msgs), msgs
    d.pool.returned = [PoolReturn(gpu=GpuRef(node="p0", gpu=0), lender="a", reason="burst_passed")]
    msgs = _violations(snap, d)
    assert any("not a lent pool GPU" in m for m in msgs), msgs
    d.pool.returned = []
    d.pool.size = 5
    msgs = _violations(snap, d)
    assert any("pool.size is 5" in m for m in msgs), msgs


def test_checker_rejects_lending_without_pool_lending() -> None:
    snap = snapshot(lending=False)
    d = _solve(snap)
    assert d.pool is None
    d.pool = decide_pool(load_state(snapshot()))
    assert d.pool is not None and d.pool.lend
    msgs = _violations(snap, d)
    assert any("no workflows.pool_lending" in m for m in msgs), msgs


# ------------------------------------------------------------------ input and determinism
def test_bad_lending_input_names_the_field() -> None:
    snap = snapshot()
    _lent(snap, [("c0", 4, "nobody")])
    with pytest.raises(SnapshotError) as e:
        load_state(snap)
    assert e.value.path == "workflows.pool[1].lent_by"
    snap = snapshot()
    _lent(snap, [("c1", g, "b") for g in range(7)])  # b's quota is 6
    with pytest.raises(SnapshotError) as e:
        load_state(snap)
    assert e.value.path == "workflows.pool[7].lent_by"
    snap = snapshot()
    snap["workflows"]["pool_lending"]["gpu_types"] = ["tpu"]
    with pytest.raises(SnapshotError) as e:
        load_state(snap)
    assert e.value.path == "workflows.pool_lending.gpu_types[0]"


def test_same_snapshot_same_pool_decision() -> None:
    snap = snapshot()
    a, b = _solve(snap), _solve(snap)
    assert a.pool is not None and b.pool is not None
    assert a.pool.model_dump() == b.pool.model_dump()
    assert [s.model_dump() for s in a.start] == [s.model_dump() for s in b.start]


def test_apply_decision_moves_gpus_into_and_out_of_the_pool() -> None:
    from optsched.engine.apply import apply_decision
    from optsched.schema.snapshot import Snapshot

    snap = snapshot()
    d = _solve(snap)
    assert d.pool is not None and d.pool.lend
    nxt = apply_decision(Snapshot.model_validate(snap), d, advance_s=10.0)
    assert nxt.workflows is not None
    lent = {dev.key(): dev for dev in nxt.workflows.pool if dev.lent_by is not None}
    assert set(lent) == {x.gpu.key() for x in d.pool.lend}
    assert all(dev.lent_since_s == NOW for dev in lent.values())
    # the next epoch: the burst is over, the GPUs (lent 10 s ago, min_lend_s 20) stay; later they go
    nxt.workflows.sessions = []
    d2 = solve_epoch(nxt, params=PARAMS)
    assert d2.pool is not None and d2.pool.returned == []
    later = apply_decision(nxt, d2, advance_s=20.0)
    d3 = solve_epoch(later, params=PARAMS)
    assert d3.pool is not None
    assert {r.gpu.key() for r in d3.pool.returned} == set(lent)
    assert all(r.reason == "burst_passed" for r in d3.pool.returned)
    assert check_decision(load_state(later.model_dump()), d3) == []


def test_lent_gpus_go_back_when_lending_is_withdrawn_or_the_node_is_lost() -> None:
    snap = snapshot(lending=False)
    _lent(snap, [("c0", 4, "a"), ("c1", 0, "b")])
    snap["workflows"]["pool"][-1]["busy_until_s"] = NOW + 30.0  # busy, but its node is lost
    snap["nodes"][1]["available"] = False
    d = _solve(snap)
    assert d.pool is not None
    got = {(r.gpu.key(), r.reason) for r in d.pool.returned}
    assert got == {(("c0", 4), "not_lendable"), (("c1", 0), "node_unavailable")}
    assert d.pool.size == 1 and d.pool.lent == {}
    assert check_decision(load_state(snap), d) == []


def test_pool_never_grows_beyond_the_activations_left() -> None:
    """Three long calls: the drain time is far above grow_drain_s, but no more than three GPUs
    can be busy at once, so the pool grows to three and no further."""
    snap = snapshot()
    sessions = _burst(1, per=3)
    for a in sessions[0]["activations"]:
        a["output_tokens"] = 20000
    snap["workflows"]["sessions"] = sessions
    state = load_state(snap)
    assert backlog(state).drain_s() > 40.0
    d = _solve(snap)
    assert d.pool is not None
    assert d.pool.size == 3 and len(d.pool.lend) == 2


def _chain(n: int, output_tokens: int = 20000) -> list[dict[str, Any]]:
    """One session of ``n`` long 8B calls, each after the previous one: one can run at a time."""
    acts: list[dict[str, Any]] = []
    for k in range(n):
        acts.append({"id": f"x{k}", "model": "llama-3.1-8b", "input_tokens": 2000,
                     "output_tokens": output_tokens, "after": [f"x{k - 1}"] if k else []})
    return [{"id": "c", "tenant": "a", "arrival_s": NOW - 1.0, "activations": acts}]


def test_no_lending_for_work_that_cannot_run_yet() -> None:
    """Four long calls in a chain: the drain time is far above grow_drain_s and four activations
    are left, but only the first can run now, so a lent GPU would only wait: none is lent."""
    snap = snapshot()
    snap["workflows"]["sessions"] = _chain(4)
    state = load_state(snap)
    bl = backlog(state)
    assert bl.drain_s() > 40.0 and bl.activations == 4 and bl.width == 1
    d = _solve(snap)
    assert d.pool is not None
    assert d.pool.lend == [] and d.pool.size == 1


def test_idle_lent_gpus_beyond_the_runnable_work_go_back() -> None:
    """The same chain with two idle lent GPUs (lent long ago): the backlog still drains slowly
    (no burst_passed by drain time), but one activation can run now and the pool has three
    GPUs, so both lent GPUs go back, slowest and most recent first."""
    snap = snapshot()
    snap["workflows"]["sessions"] = _chain(4)
    _lent(snap, [("c0", 4, "a"), ("c0", 5, "b")])
    snap["workflows"]["pool"][-1]["lent_since_s"] = NOW - 50.0
    state = load_state(snap)
    assert backlog(state).drain_s() > snap["workflows"]["pool_lending"].get("return_drain_s", 25.0)
    d = _solve(snap)
    assert d.pool is not None
    assert [(r.gpu.key(), r.reason) for r in d.pool.returned] == [
        (("c0", 5), "burst_passed"),
        (("c0", 4), "burst_passed"),
    ]
    assert d.pool.size == 1 and d.pool.lend == []


def test_width_counts_running_and_ready_activations() -> None:
    """x0 done, x1 running, x2 after x1 (not ready), x3 with no dependency (ready): width 2."""
    snap = snapshot()
    sessions = _chain(4)
    acts = sessions[0]["activations"]
    acts[0]["state"] = "done"
    acts[1].update({"state": "running", "device": {"node": "p0", "gpu": 0}, "start_s": NOW - 1.0})
    acts[3]["after"] = []
    snap["workflows"]["sessions"] = sessions
    snap["workflows"]["pool"][0]["busy_until_s"] = NOW + 30.0
    bl = backlog(load_state(snap))
    assert (bl.activations, bl.width, bl.waiting) == (3, 2, 1)

"""Head-of-line blocking per queue: one queue for the pooled cluster, one per tenant whose
quota is a hard partition (``--mode partitioned``), as Lucid's simulator keeps one queue per
virtual cluster (docs/fidelity.md, rule 1). Hand-computed start times on one 4-GPU node."""

from __future__ import annotations

import dataclasses

import pytest

from optsched.schema.decision import Decision
from optsched.sim.cluster import Simulator
from optsched.sim.policies import make_policy
from optsched.sim.trace import TenantSpec, Trace, TraceJob
from tests.sim.conftest import EXACT, make_trace


def _starts(trace: Trace, policy: str, mode: str) -> dict[str, float | None]:
    cfg = dataclasses.replace(EXACT, mode=mode)
    log = Simulator(trace, make_policy(policy), config=cfg).run()
    return dict(zip(log.jobs["id"], log.jobs["start_s"], strict=True))


@pytest.fixture
def blocked_head() -> Trace:
    """A1 holds 3 of the 4 GPUs until 100; A2 (2 GPUs) fits neither A's quota of 3 nor the
    one free GPU until then; B1 (1 GPU, B's quota 1) fits the free GPU from its submission."""
    jobs = [
        TraceJob("A1", "A", 3, 0.0, 100.0),
        TraceJob("A2", "A", 2, 10.0, 50.0),
        TraceJob("B1", "B", 1, 20.0, 30.0),
    ]
    return make_trace(jobs, [TenantSpec("A", {"V100": 3}), TenantSpec("B", {"V100": 1})])


def test_partitioned_fifo_blocks_only_the_tenant_whose_head_does_not_fit(
        blocked_head: Trace) -> None:
    assert _starts(blocked_head, "fifo", "partitioned") == {"A1": 0.0, "A2": 100.0, "B1": 20.0}


def test_pooled_fifo_still_blocks_the_whole_cluster(blocked_head: Trace) -> None:
    # A2 is the cluster's head: B1 waits behind it although one GPU is free
    assert _starts(blocked_head, "fifo", "pooled") == {"A1": 0.0, "A2": 100.0, "B1": 100.0}


def test_partitioned_fifo_keeps_a_tenants_own_queue_blocked() -> None:
    # A2 (2 GPUs) does not fit A's quota of 3 while A1 holds 2; A3 (1 GPU) would fit A's quota
    # and the free GPUs but waits behind A2, its own tenant's head; B1 starts at once
    jobs = [
        TraceJob("A1", "A", 2, 0.0, 100.0),
        TraceJob("A2", "A", 2, 10.0, 50.0),
        TraceJob("A3", "A", 1, 20.0, 10.0),
        TraceJob("B1", "B", 1, 30.0, 10.0),
    ]
    trace = make_trace(jobs, [TenantSpec("A", {"V100": 3}), TenantSpec("B", {"V100": 1})])
    assert _starts(trace, "fifo", "partitioned") == {
        "A1": 0.0, "A2": 100.0, "A3": 100.0, "B1": 30.0}


def test_partitioned_lucid_without_packing_blocks_per_tenant() -> None:
    # three arrivals: Lucid-like's packing is off (low load), so its queue is strict priority
    # (estimate x GPUs): A2 (50) before B1 (200). A2 does not fit A's quota of 2 while A1 runs;
    # in partitioned mode that blocks only A, so B1 starts at its submission
    jobs = [
        TraceJob("A1", "A", 2, 0.0, 100.0, estimate_s=100.0),
        TraceJob("A2", "A", 1, 10.0, 50.0, estimate_s=50.0),
        TraceJob("B1", "B", 2, 20.0, 30.0, estimate_s=100.0),
    ]
    trace = make_trace(jobs, [TenantSpec("A", {"V100": 2}), TenantSpec("B", {"V100": 2})])
    assert _starts(trace, "lucid", "partitioned") == {"A1": 0.0, "A2": 100.0, "B1": 20.0}


def test_pooled_lucid_without_packing_blocks_behind_the_head() -> None:
    # A1 holds 3 of the 4 GPUs; A2 (priority 100) needs 2 and blocks B1 (priority 200, 1 GPU)
    jobs = [
        TraceJob("A1", "A", 3, 0.0, 100.0, estimate_s=100.0),
        TraceJob("A2", "A", 2, 10.0, 50.0, estimate_s=50.0),
        TraceJob("B1", "B", 1, 20.0, 30.0, estimate_s=200.0),
    ]
    trace = make_trace(jobs, [TenantSpec("A", {"V100": 3}), TenantSpec("B", {"V100": 1})])
    assert _starts(trace, "lucid", "pooled") == {"A1": 0.0, "A2": 100.0, "B1": 100.0}


@pytest.mark.parametrize(("placement", "node"), [("buddy", "n0"), ("best_fit", "n1")])
def test_placement_option_chooses_the_node_of_a_one_node_job(placement: str, node: str) -> None:
    # j1, j2, j3 start in this order under both policies (FIFO: ids; Lucid-like: estimate x
    # GPUs 6, 9, 10); at t=20, n0 has 6 free GPUs (j1 ended, j3 holds 2) and n1 has 5 (j2
    # holds 3): the buddy rule puts j4's 2 GPUs on n0 (leaving a whole 4-chunk), best fit on
    # n1 (Lucid's rule)
    jobs = [
        TraceJob("j1", "t", 6, 0.0, 10.0, estimate_s=1.0),
        TraceJob("j2", "t", 3, 0.0, 1000.0, estimate_s=3.0),
        TraceJob("j3", "t", 2, 0.0, 1000.0, estimate_s=5.0),
        TraceJob("j4", "t", 2, 20.0, 10.0, estimate_s=5.0),
    ]
    trace = make_trace(jobs, [TenantSpec("t", {"V100": 16})], gpus=8, nodes=2)
    where: dict[str, set[str]] = {}

    def keep(snap: object, d: Decision) -> None:
        for s in d.start:
            where[s.job] = {r.node for r in s.allocation}

    for policy in ("fifo", "lucid"):
        where.clear()
        pol = make_policy(policy, options={"placement": placement})
        Simulator(trace, pol, config=EXACT, on_decision=keep).run()
        assert where == {"j1": {"n0"}, "j2": {"n1"}, "j3": {"n0"}, "j4": {node}}, policy


def test_placement_option_is_checked() -> None:
    with pytest.raises(ValueError, match="unknown placement"):
        make_policy("fifo", options={"placement": "spread"})
    with pytest.raises(ValueError, match="takes no options"):
        make_policy("sjf", options={"placement": "best_fit"})
    with pytest.raises(ValueError, match="only the option 'placement'"):
        make_policy("lucid", options={"backend": "greedy"})

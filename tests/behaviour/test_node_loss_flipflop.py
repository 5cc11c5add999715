"""No flip-flop after a node loss: the decision that stops guaranteed jobs on a lost node
starts nothing on loan on the types they restart on (``optsched.engine.node_loss``).

The minimal situation of the Venus run that flip-flopped (``test_stability``'s node-loss run,
epoch 40): the cluster is full; the loss frees quota of ``a`` inside which its waiting ``pa``
may start, and a start inside quota may stop on-loan jobs for GPUs. Holding the lent quota
(no net new loan) left ``b`` free to swap: reclaim its own on-loan best-effort job and start its
guaranteed ``pb`` on loan in its place. At the next decision ``a``'s stopped jobs restart and
take the GPUs back from on-loan jobs, so a job started on loan there is reclaimed one epoch
after it started.
"""

from __future__ import annotations

from typing import Any

import pytest

from optsched.engine.apply import apply_decision
from optsched.engine.backends.base import SolveParams
from optsched.engine.budget import WALL_SAFETY
from optsched.engine.epoch import solve_epoch
from optsched.engine.state import ClusterState, parse_snapshot
from optsched.predict.fallback import EstimatePredictor
from optsched.testing import assert_decision_valid

BACKENDS = {
    "greedy": SolveParams(backend="greedy"),
    "highs": SolveParams(backend="highs", time_limit_s=60.0, work_s=2.0 / WALL_SAFETY),
    "cpsat": SolveParams(backend="cpsat", time_limit_s=60.0, work_s=0.5 / WALL_SAFETY),
}


def _running(
    job: str, tenant: str, qos: str, gpus: int, node: str, first: int, on_loan: bool = False
) -> dict[str, Any]:
    return {
        "id": job,
        "tenant": tenant,
        "qos": qos,
        "gpus": gpus,
        "submit_s": 0.0,
        "state": "running",
        "start_s": 10.0,
        "on_loan": on_loan,
        "allocation": [{"node": node, "gpu": first + g} for g in range(gpus)],
    }


def _pending(job: str, tenant: str, gpus: int) -> dict[str, Any]:
    return {
        "id": job,
        "tenant": tenant,
        "qos": "guaranteed",
        "gpus": gpus,
        "submit_s": 0.0,
        "state": "pending",
    }


def _snapshot() -> dict[str, Any]:
    """n0 (down) holds ``a``'s guaranteed ga1, ga2; n1 and n2 are full: ``b`` runs gb inside
    its quota and three best-effort jobs on loan from ``c``. ``a`` and ``b`` have waited past
    their queue-delay target (assurance asks for reclaim)."""
    waited = {"max_queue_delay_s": 100.0}
    return {
        "format": 1,
        "now": 1000.0,
        "gpu_types": {"A100": {"memory_gib": 80, "mps": False}},
        "nodes": [
            {"id": "n0", "gpu_type": "A100", "gpus": 4, "available": False},
            {"id": "n1", "gpu_type": "A100", "gpus": 8},
            {"id": "n2", "gpu_type": "A100", "gpus": 8},
        ],
        "tenants": [
            {"id": "a", "quota": {"A100": 6}, "qos": waited},
            {"id": "b", "quota": {"A100": 2}, "qos": waited},
            {"id": "c", "quota": {"A100": 14}},
        ],
        "jobs": [
            _running("ga1", "a", "guaranteed", 2, "n0", 0),
            _running("ga2", "a", "guaranteed", 2, "n0", 2),
            _running("gb", "b", "guaranteed", 2, "n1", 0),
            _running("bb1", "b", "best_effort", 2, "n1", 2, on_loan=True),
            _running("bb2", "b", "best_effort", 2, "n1", 4, on_loan=True),
            _running("bb3", "b", "best_effort", 2, "n1", 6, on_loan=True),
            _running("gc", "c", "guaranteed", 4, "n2", 0),
            _running("cb", "c", "best_effort", 4, "n2", 4),
            _pending("pa", "a", 4),
            _pending("pb", "b", 2),
        ],
    }


@pytest.mark.parametrize("backend_name", sorted(BACKENDS))
def test_a_node_loss_decision_starts_nothing_on_loan_where_its_jobs_restart(backend_name: str) -> None:
    params = BACKENDS[backend_name]
    predictor = EstimatePredictor()
    state = ClusterState.from_snapshot(parse_snapshot(_snapshot()))
    d = solve_epoch(state, params=params, predictor=predictor)
    assert_decision_valid(state, d)
    assert {p.job for p in d.preempt if p.reason == "node_unavailable"} == {"ga1", "ga2"}
    assert [s.job for s in d.start if s.on_loan] == []  # pb may not swap in for bb on loan
    assert "pa" in {s.job for s in d.start}  # a start inside quota stays allowed
    started = {s.job for s in d.start}
    state = ClusterState.from_snapshot(apply_decision(state.snapshot, d))
    d = solve_epoch(state, params=params, predictor=predictor)
    assert_decision_valid(state, d)
    assert started.isdisjoint(p.job for p in d.preempt)  # no flip-flop
    assert {"ga1"} <= {s.job for s in d.start}  # a's stopped jobs restart

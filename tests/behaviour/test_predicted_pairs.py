"""Predictions reach the model: with the shipped LightGBM models, jobs without memory figures
get a predicted memory and form MPS pairs (issue: dependable decisions)."""

from __future__ import annotations

from optsched import solve_epoch
from optsched.engine.backends.base import SolveParams
from optsched.engine.state import load_state
from optsched.predict.lgbm import LightGBMPredictor
from optsched.testing import assert_decision_valid, cluster, pending, running
from tests.conftest import ROOT


def _snapshot() -> dict[str, object]:
    # one tenant, an MPS type, every GPU held by shareable best-effort jobs: the only way to
    # start the waiting best-effort jobs is as MPS guests; nobody states its memory
    snap = cluster(types={"A100": (80.0, True)}, nodes={"n1": ("A100", 4)}, tenants={"t": {"A100": 4}})
    no_memory = {"memory_gib": None, "qos": "best_effort"}
    snap["jobs"] = [
        running(f"host{k}", "t", [("n1", k)], start_s=0.0, **no_memory) for k in range(4)
    ] + [pending(f"guest{k}", "t", 1, submit_s=0.0, **no_memory) for k in range(2)]
    return snap


def test_shipped_memory_model_lets_jobs_without_memory_pair() -> None:
    pred = LightGBMPredictor(ROOT / "models")
    assert "memory" in pred.boosters  # the shipped models are what this test exercises
    snap = _snapshot()
    state = load_state(snap)
    est = pred.predict_jobs(state).jobs
    assert all(e.memory_source == "model:memory/v1" and e.memory_gib < 40 for e in est.values())
    d = solve_epoch(state, params=SolveParams(backend="highs", time_limit_s=2.0), predictor=pred)
    assert_decision_valid(state, d)
    guests = {s.job: s.colocated_with for s in d.start}
    assert set(guests) == {"guest0", "guest1"}
    assert all(c and c[0].startswith("host") for c in guests.values())
    assert len({c[0] for c in guests.values() if c}) == 2  # pairs: one guest per host

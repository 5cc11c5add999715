"""Property tests: random valid snapshots -> every backend's decision passes the checker."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from optsched import solve_epoch
from optsched.engine.backends import available_backends
from optsched.engine.backends.base import SolveParams
from optsched.engine.state import load_state, parse_snapshot
from optsched.instances import generate
from optsched.predict.fallback import EstimatePredictor
from optsched.testing import assert_decision_valid

settings.register_profile(
    "ci", derandomize=True, deadline=None, max_examples=25, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("ci")

PRED = EstimatePredictor()


@st.composite
def snapshots(draw: st.DrawFn) -> dict[str, Any]:
    snap = generate("tiny", draw(st.integers(0, 10_000)))
    # perturb what the generator keeps fixed: drained nodes, limits, assurance history
    for node in snap["nodes"]:
        if draw(st.booleans()) and draw(st.booleans()):
            node["available"] = False
    for ten in snap["tenants"]:
        if draw(st.booleans()):
            ten["borrow_limit"] = {t: draw(st.integers(0, 4)) for t in snap["gpu_types"]}
        if draw(st.booleans()):
            ten["lend_limit"] = {t: draw(st.integers(0, 4)) for t in snap["gpu_types"]}
    snap["assurance_state"] = {
        t["id"]: {"a": draw(st.floats(0, 1)), "met": 1.0, "total": draw(st.floats(1, 5))}
        for t in snap["tenants"]
    }
    return snap


@given(snapshots(), st.sampled_from(available_backends()))
def test_every_backend_decision_passes_the_checker(snap: dict[str, Any], backend: str) -> None:
    state = load_state(snap)
    d = solve_epoch(state, params=SolveParams(backend=backend, time_limit_s=2.0), predictor=PRED)
    assert_decision_valid(state, d)
    assert set(d.assurance) == set(state.tenant_ids)
    assert all(0.0 <= a <= 1.0 for a in d.assurance.values())


@given(snapshots())
def test_json_round_trip_is_the_identity(snap: dict[str, Any]) -> None:
    parsed = parse_snapshot(snap)
    assert parse_snapshot(parsed.model_dump_json()) == parsed

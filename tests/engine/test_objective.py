"""The one objective: typed weights from presets, one scoring function for every plan."""

from __future__ import annotations

from pathlib import Path

import pytest

from optsched.engine import assurance as asr
from optsched.engine.backends.base import SolveParams
from optsched.engine.backends.cpsat.backend import integer_objective
from optsched.engine.backends.greedy import greedy_assignment
from optsched.engine.candidates import build_problem
from optsched.engine.epoch import solve_epoch
from optsched.engine.formulation import build_model, from_assignment
from optsched.engine.objective import ObjectiveWeights, job_value, value
from optsched.engine.state import load_state
from optsched.instances import generate
from optsched.predict.fallback import EstimatePredictor

PRED = EstimatePredictor()


def _problem(weights: ObjectiveWeights, size: str = "tiny", seed: int = 2):  # type: ignore[no-untyped-def]
    state = load_state(generate(size, seed))  # type: ignore[arg-type]
    return build_problem(state, PRED.predict_jobs(state), PRED, asr.compute(state), weights)


def test_preset_objective_table_is_typed_and_names_bad_keys(tmp_path: Path) -> None:
    p = tmp_path / "w.toml"
    p.write_text('backend = "highs"\n[objective]\nguaranteed_mult = 3\n')
    assert SolveParams.from_toml(p).objective.guaranteed_mult == 3.0
    p.write_text('backend = "highs"\n[objective]\nguaranted_mult = 3\n')
    with pytest.raises(ValueError, match=r"objective\.guaranted_mult: unknown objective weight"):
        SolveParams.from_toml(p)
    p.write_text('backend = "highs"\n[objective]\nloan_penalty = -1\n')
    with pytest.raises(ValueError, match=r"objective\.loan_penalty: must be a finite number >= 0"):
        SolveParams.from_toml(p)


def test_job_value_follows_its_weights() -> None:
    w = ObjectiveWeights()
    base = job_value(w, 1.0, 4, True, 0.0, 600.0, 600.0)
    # guaranteed_mult scales guaranteed jobs linearly; gpu_exponent 0.5 -> sqrt(4) = 2
    assert job_value(ObjectiveWeights(guaranteed_mult=4.0), 1.0, 4, True, 0.0, 600.0, 600.0) == pytest.approx(
        2 * base
    )
    assert job_value(w, 1.0, 4, False, 0.0, 600.0, 600.0) == pytest.approx(base / 2)
    assert job_value(ObjectiveWeights(gpu_exponent=1.0), 1.0, 4, True, 0.0, 600.0, 600.0) == pytest.approx(
        2 * base
    )


def test_model_objective_equals_the_scoring_function() -> None:
    """The linear model's objective (with its constant, the fragmentation of the nodes nothing
    can change) at a plan's vector is exactly ``objective.value`` of it."""
    for seed in range(4):
        p = _problem(ObjectiveWeights(), seed=seed)
        a = greedy_assignment(p)
        m = build_model(p)
        x = from_assignment(m, p, a)
        model_value = m.offset + sum(c * v for c, v in zip(m.obj, x, strict=True))
        assert model_value == pytest.approx(value(p, a), rel=1e-9, abs=1e-9)


def test_weights_reach_the_decision() -> None:
    snap = generate("tiny", 3)
    d1 = solve_epoch(snap, params=SolveParams(backend="highs", time_limit_s=2.0), predictor=PRED)
    d2 = solve_epoch(
        snap,
        params=SolveParams(backend="highs", time_limit_s=2.0, objective=ObjectiveWeights(shortness=0.0)),
        predictor=PRED,
    )
    assert d1.solver.objective is not None and d2.solver.objective is not None
    assert d2.solver.objective < d1.solver.objective  # no shortness bonus: every value smaller


def test_cpsat_scaling_keeps_every_nonzero_coefficient() -> None:
    coefs = [1e-3, -0.01, 12345.678, 0.0, -7.5]
    ints, scale, lost = integer_objective(coefs)
    assert lost is None
    assert all((c == 0) == (k == 0) for c, k in zip(coefs, ints, strict=True))
    for c, k in zip(coefs, ints, strict=True):
        if c:
            assert abs(k / scale - c) <= 0.005 * abs(c) + 1e-12
    # a range no int64 objective can hold is reported, not silently zeroed
    ints, _, lost = integer_objective([1e-12, 1e9])
    assert lost is not None and "rounded to zero" in lost

from __future__ import annotations

from pathlib import Path

import pytest

from optsched import solve_epoch
from optsched.engine.backends import available_backends
from optsched.engine.backends.base import SolveParams
from optsched.engine.state import load_state
from optsched.instances import generate
from optsched.predict.fallback import EstimatePredictor
from optsched.testing import assert_decision_valid
from tests.conftest import ROOT

PRESETS = sorted((ROOT / "solvers").rglob("*.toml"))


@pytest.mark.parametrize("path", PRESETS, ids=[f"{p.parent.name}/{p.name}" for p in PRESETS])
def test_every_preset_is_accepted_by_its_backend(path: Path) -> None:
    params = SolveParams.from_toml(path)
    assert params.backend == path.parent.name
    # ".[all]" installs every backend: a missing one is a broken install, never a skip
    assert params.backend == "auto" or params.backend in available_backends()
    state = load_state(generate("tiny", 4))
    d = solve_epoch(
        state, params=params.with_(time_limit_s=min(params.time_limit_s, 1.0)), predictor=EstimatePredictor()
    )
    assert_decision_valid(state, d)
    assert d.solver.fallback_reason is None or params.backend == "greedy"


def test_unknown_key_is_named(tmp_path: Path) -> None:
    p = tmp_path / "x.toml"
    p.write_text('backend = "cpsat"\ntime_limt_s = 1\n')
    with pytest.raises(ValueError, match="time_limt_s"):
        SolveParams.from_toml(p)


@pytest.mark.parametrize("name", ["cpsat", "highspy", "pulp"])
def test_unknown_native_option_is_named(name: str) -> None:
    assert name in available_backends()
    params = SolveParams(backend=name, time_limit_s=1.0, extra={"max_tim": 3})
    with pytest.raises(ValueError, match="max_tim"):
        solve_epoch(generate("tiny", 1), params=params, predictor=EstimatePredictor())

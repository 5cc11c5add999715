"""A time limit the backends cannot turn into limits is refused up front, naming the knob: an
infinite or huge ``--time-limit`` (or ``SolveParams.time_limit_s``) overflowed HiGHS's node
limit, CBC's node limit and the MILP worker's ``select`` timeout (a traceback on stderr, then
the greedy plan, exit 0). The bound is the one ``options.time_limit_s`` has in the schema."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from optsched.engine.backends.base import SolveParams
from optsched.engine.epoch import solve_epoch
from optsched.instances import generate
from optsched.schema.limits import MAX_TIME_LIMIT_S

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "optsched.cli", *args], capture_output=True, text=True, cwd=cwd,
        env=ENV, timeout=120, check=False,
    )


@pytest.mark.parametrize("value", ["inf", "1e308", "nan", "86401"])
def test_solve_refuses_a_time_limit_the_backends_cannot_use(tmp_path: Path, value: str) -> None:
    (tmp_path / "s.json").write_text(__import__("json").dumps(generate("tiny", seed=117)))
    res = _cli(tmp_path, "solve", "s.json", "--time-limit", value, "--backend", "highs", "-o", "d.json")
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith("error: --time-limit: must be > 0 and at most 86400 seconds"), res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.json"]  # nothing written


@pytest.mark.parametrize("value", ["inf", "1e12"])
def test_a_preset_with_an_unusable_time_limit_is_refused(tmp_path: Path, value: str) -> None:
    (tmp_path / "s.json").write_text(__import__("json").dumps(generate("tiny", seed=117)))
    (tmp_path / "p.toml").write_text(f'backend = "highs"\ntime_limit_s = {value}\n')
    res = _cli(tmp_path, "solve", "s.json", "--solver-config", "p.toml")
    assert res.returncode == 2, res.stderr
    assert "time_limit_s: a number of seconds > 0, got" in res.stderr and "(at most 86400)" in res.stderr
    assert res.stdout == "" and "Traceback" not in res.stderr


def test_simulate_refuses_a_time_limit_over_the_bound(tmp_path: Path) -> None:
    res = _cli(tmp_path, "simulate", "--trace", "mini", "--time-limit-s", "1e9", "--out", "o")
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip() == "error: --time-limit-s: at most 86400 seconds"
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("changes", "name"),
    [
        ({"time_limit_s": math.inf}, "time_limit_s"),
        ({"time_limit_s": 1e308}, "time_limit_s"),
        ({"time_limit_s": math.nan}, "time_limit_s"),
        ({"time_limit_s": 0.0}, "time_limit_s"),
        ({"time_limit_s": True}, "time_limit_s"),
        ({"time_limit_s": 1.0, "work_s": math.inf}, "work_s"),
        ({"time_limit_s": 1.0, "work_s": -1.0}, "work_s"),
    ],
)
def test_solve_epoch_names_an_unusable_time_knob(changes: dict[str, float], name: str) -> None:
    with pytest.raises(ValueError, match=f"^{name}: "):
        solve_epoch(generate("tiny", seed=117), params=SolveParams(backend="highs", **changes))


@pytest.mark.parametrize("name", ["highs", "pulp"])
def test_the_largest_time_limit_still_solves(name: str, caplog: pytest.LogCaptureFixture) -> None:
    d = solve_epoch(
        generate("tiny", seed=117), params=SolveParams(backend=name, time_limit_s=MAX_TIME_LIMIT_S)
    )
    assert d.status == "optimal", d.solver.fallback_reason
    assert not [r for r in caplog.records if r.exc_info], caplog.text

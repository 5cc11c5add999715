"""Sweeps without Ray (optsched.sim.sweep): spec files, one pool for a whole study, retries and
reported failures; the Ray path is in tests/test_ray.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from optsched.cli import app
from optsched.parallel import run as run_tasks
from optsched.sim.runner import RunSpec, clean, run_many
from optsched.sim.sweep import SweepSpec, run_specs, run_sweep, specs_for

TIMING = {"sim_seconds", "cpu_seconds", "command"}


def untimed(x: object) -> object:
    """A summary without the measured seconds (the only fields that may differ between runs)."""
    if isinstance(x, dict):
        return {k: untimed(v) for k, v in x.items() if k not in TIMING}
    if isinstance(x, list):
        return [untimed(v) for v in x]
    return x


SPEC = """
traces = ["mini"]
policies = ["fifo", "kueue"]
seeds = [0, 1]

[settings.short]
max_jobs = 60
epoch_s = 300

[settings.slow_restart]
max_jobs = 60
restart_overhead_s = 600
"""


def test_spec_file_validation_names_the_field(tmp_path: Path) -> None:
    p = tmp_path / "s.toml"
    p.write_text(SPEC)
    spec = SweepSpec.load(p)
    assert list(spec.settings) == ["short", "slow_restart"]
    assert spec.settings["slow_restart"].restart_overhead_s == 600
    p.write_text(SPEC.replace("max_jobs = 60\nepoch_s", "max_jobz = 60\nepoch_s"))
    with pytest.raises(ValueError, match=r"settings\.short\.max_jobz: Extra inputs"):
        SweepSpec.load(p)
    p.write_text(SPEC.replace('"kueue"', '"nope"'))
    with pytest.raises(ValueError, match=r"policies\.1: unknown policy 'nope'"):
        SweepSpec.load(p)
    p.write_text("traces = [")
    with pytest.raises(ValueError, match="not TOML"):
        SweepSpec.load(p)


def test_sweep_runs_every_group_and_matches_simulate(tmp_path: Path) -> None:
    p = tmp_path / "s.toml"
    p.write_text(SPEC)
    spec = SweepSpec.load(p)
    seen: list[tuple[str, str, int]] = []
    index, failures = run_sweep(spec, tmp_path / "out", on_done=lambda k, m: seen.append(
        (k[1], k[2].policy, k[2].seed)))
    assert failures == []
    assert len(seen) == 8 and len(set(seen)) == 8
    assert [(g["trace"], g["setting"], g["runs"]) for g in index["groups"]] == [
        ("mini", "short", 4), ("mini", "slow_restart", 4)]
    assert json.loads((tmp_path / "out" / "sweep.json").read_text())["failures"] == []
    for name, setting in spec.settings.items():
        folder = tmp_path / "out" / "mini" / name
        got = json.loads((folder / "summary.json").read_text())
        assert (folder / "summary.md").exists()
        assert (folder / "runs" / "kueue" / "seed1" / "jobs.csv.gz").exists()
        want = run_many(specs_for("mini", setting, spec.policies, spec.seeds))
        assert untimed(got) == untimed(json.loads(json.dumps(clean(want))))  # NaN -> null as written
    # the two settings differ where they should
    a = json.loads((tmp_path / "out" / "mini" / "short" / "summary.json").read_text())
    b = json.loads((tmp_path / "out" / "mini" / "slow_restart" / "summary.json").read_text())
    assert a["config"]["restart_overhead_s"] == 60 and b["config"]["restart_overhead_s"] == 600


def _flaky(marker: str) -> str:
    """Fails on its first call (leaves a marker file), succeeds on the next."""
    path = Path(marker)
    if not path.exists():
        path.write_text("1")
        raise RuntimeError("transient failure")
    return "ok"


def _broken(x: int) -> int:
    raise ValueError(f"bad task {x}")


def test_failed_tasks_are_retried_then_reported(tmp_path: Path) -> None:
    failed: list[tuple[object, str]] = []
    done: list[object] = []
    results, failures = run_tasks(
        [("flaky", _flaky, (str(tmp_path / "m"),)), ("broken", _broken, (7,)), ("fine", abs, (-3,))],
        mode="serial",
        retries=1,
        on_done=lambda k, r: done.append(k),
        on_fail=lambda k, e: failed.append((k, e)),
    )
    assert results == {"flaky": "ok", "fine": 3}
    assert [f.key for f in failures] == ["broken"]
    assert failures[0].error == "ValueError: bad task 7"
    assert failed == [("broken", "ValueError: bad task 7")]
    assert done == ["flaky", "fine"]
    _, failures = run_tasks([("flaky", _flaky, (str(tmp_path / "m2"),))], mode="serial", retries=0)
    assert [f.error for f in failures] == ["RuntimeError: transient failure"]


def test_a_failing_replay_is_listed_not_lost(tmp_path: Path) -> None:
    specs = [RunSpec(trace="mini", policy="fifo", seed=0, max_jobs=40),
             RunSpec(trace=str(tmp_path / "missing.csv"), policy="fifo", seed=1, max_jobs=40)]
    summary, failures = run_specs(specs, tmp_path / "o", retries=0)
    assert [f.key for f in failures] == [1]
    assert summary["seeds"] == [0]
    assert (tmp_path / "o" / "runs" / "fifo" / "seed0" / "meta.json").exists()




def test_sweep_command(tmp_path: Path) -> None:
    p = tmp_path / "s.toml"
    p.write_text(SPEC.replace('"fifo", "kueue"', '"fifo"').replace("seeds = [0, 1]", "seeds = [0]"))
    res = CliRunner().invoke(app, ["sweep", str(p), "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    assert "mini / short: 1/1 runs" in res.output
    p.write_text("traces = []\npolicies = ['fifo']\nseeds = [0]\n")
    res = CliRunner().invoke(app, ["sweep", str(p), "--out", str(tmp_path / "out2")])
    assert res.exit_code == 2
    assert "traces" in res.output


def test_process_pool_gives_the_same_results_and_reports_failures(tmp_path: Path) -> None:
    tasks = [("flaky", _flaky, (str(tmp_path / "m"),)), ("broken", _broken, (5,)), ("fine", abs, (-2,))]
    results, failures = run_tasks(tasks, mode="process", workers=2, retries=1)
    assert results == {"flaky": "ok", "fine": 2}
    assert [(f.key, f.error) for f in failures] == [("broken", "ValueError: bad task 5")]

"""The Ray paths (optional extra ``ray``): sweeps on Ray equal the sequential run, failures are
retried and reported, and partitioned epochs on Ray tasks equal the serial answer. One local Ray
(2 CPUs) is started for the module and shut down after it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from optsched import solve_epoch
from optsched.engine.backends.base import SolveParams
from optsched.engine.state import ClusterState, parse_snapshot
from optsched.instances import generate
from optsched.parallel import run as run_tasks
from optsched.sim.runner import TABLES, RunSpec, run_dir, run_many
from optsched.sim.sweep import run_specs

ray = pytest.importorskip("ray", reason="ray is not installed (the optional 'ray' extra)")

TIMED_TABLE = "decisions"  # its seconds columns are measured times; every other table is exact


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        yield
    finally:
        ray.shutdown()


def untimed(x: object) -> object:
    if isinstance(x, dict):
        return {k: untimed(v) for k, v in x.items() if k not in {"sim_seconds", "cpu_seconds"}}
    if isinstance(x, list):
        return [untimed(v) for v in x]
    return x


def test_sweep_on_ray_equals_the_sequential_run(local_ray: None, tmp_path: Path) -> None:
    specs = [RunSpec(trace="mini", policy=p, seed=s, max_jobs=60,
                     policy_options={"backend": "greedy", "time_limit_s": 0.5} if p == "optsched" else {})
             for p in ("fifo", "optsched") for s in (0, 1)]
    seq = run_many(specs, out=tmp_path / "seq")
    seen: list[tuple[str, int]] = []
    on_ray, failures = run_specs(specs, tmp_path / "ray", use_ray=True,
                                 on_done=lambda s, m: seen.append((s.policy, s.seed)))
    assert failures == []
    assert sorted(seen) == sorted((s.policy, s.seed) for s in specs)
    assert untimed(json.loads(json.dumps(on_ray))) == untimed(json.loads(json.dumps(seq)))
    for s in specs:
        for table in TABLES:
            if table == TIMED_TABLE:
                continue
            a = (run_dir(tmp_path / "seq", s.policy, s.seed) / f"{table}.csv.gz").read_bytes()
            b = (run_dir(tmp_path / "ray", s.policy, s.seed) / f"{table}.csv.gz").read_bytes()
            assert a == b, (s.policy, s.seed, table)


def _flaky(marker: str) -> str:
    path = Path(marker)
    if not path.exists():
        path.write_text("1")
        raise RuntimeError("transient failure")
    return "ok"


def _broken(x: int) -> int:
    raise ValueError(f"bad task {x}")


def test_ray_tasks_are_retried_and_failures_reported(local_ray: None, tmp_path: Path) -> None:
    failed: list[object] = []
    results, failures = run_tasks(
        [("flaky", _flaky, (str(tmp_path / "m"),)), ("broken", _broken, (3,))],
        mode="ray", retries=1, on_fail=lambda k, e: failed.append(k),
    )
    assert results == {"flaky": "ok"}
    assert [f.key for f in failures] == ["broken"] == failed
    assert "bad task 3" in failures[0].error


def test_partitioned_epoch_on_ray_equals_serial(local_ray: None) -> None:
    st = ClusterState.from_snapshot(parse_snapshot(json.dumps(generate("fleet", seed=5, gpus=1200))))
    params = SolveParams(backend="greedy", time_limit_s=2.0)
    a = solve_epoch(st, params=params, partitions=3, executor="ray")
    b = solve_epoch(st, params=params, partitions=3, executor="serial")
    assert a.model_dump(exclude={"solver"}) == b.model_dump(exclude={"solver"})
    # "auto" runs on Ray when it is initialised
    c = solve_epoch(st, params=params, partitions=3)
    assert c.model_dump(exclude={"solver"}) == b.model_dump(exclude={"solver"})


def test_workflow_experiment_on_ray_equals_sequential(local_ray: None) -> None:
    from optsched.sim.sweep import run_workflow_experiment
    from optsched.sim.workflows.experiment import Experiment, run_experiment

    exp = Experiment(scenario="react", arrivals="poisson", policies=("fcfs-lru", "heft"), seeds=(0, 1),
                     sessions=3, window_s=20.0)
    seq, _ = run_experiment(exp)
    par, _, failures = run_workflow_experiment(exp)
    assert failures == []

    def strip(x: object) -> object:
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if not k.startswith("planner_seconds")}
        if isinstance(x, list):
            return [strip(v) for v in x]
        return x

    assert strip(par) == strip(seq)


def test_simulate_command_with_ray_equals_without(local_ray: None, tmp_path: Path) -> None:
    import typer
    from typer.testing import CliRunner

    from optsched.cli.simulate import register

    app = typer.Typer()
    register(app)

    @app.callback()
    def _root() -> None:
        pass

    args = ["simulate", "--trace", "mini", "--policies", "fifo,kueue", "--seeds", "0,1", "--max-jobs", "60"]
    a = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "seq")])
    b = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "ray"), "--ray", "local"])
    assert a.exit_code == 0 and b.exit_code == 0, (a.output, b.output)

    def summary(folder: str) -> object:
        data = json.loads((tmp_path / folder / "summary.json").read_text())
        data.pop("command")
        return untimed(data)

    assert summary("seq") == summary("ray")
    for png in ("utilization.png", "cdf_queue_delay_jct.png", "assurance.png"):
        assert (tmp_path / "seq" / png).read_bytes() == (tmp_path / "ray" / png).read_bytes()

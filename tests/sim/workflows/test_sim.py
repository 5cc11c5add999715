"""Workloads, simulator, offline bound and the command line, without any trace data."""

from __future__ import annotations

import json
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from optsched.cli.workflows import register
from optsched.engine.workflows.planner import PlannerConfig
from optsched.sim.workflows.baselines import ALL_POLICIES, get_policy
from optsched.sim.workflows.offline import offline_bound
from optsched.sim.workflows.sim import WorkflowSimConfig, WorkflowSimulator
from optsched.sim.workflows.workloads import (
    MODELS,
    SCENARIOS,
    arrivals,
    burst_window,
    make_sessions,
)

SMALL_POOL = (("h100", 1), ("a100", 1), ("l40s", 1), ("a10g", 1))


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenarios_are_dags_over_known_models(scenario: str) -> None:
    sessions = make_sessions(scenario, [0.0, 1.0, 2.0, 3.0], seed=3)
    names = {m.name for m in MODELS}
    for s in sessions:
        g: nx.DiGraph = nx.DiGraph()
        ids = [a["id"] for a in s.activations]
        assert len(ids) == len(set(ids))
        for a in s.activations:
            assert a["model"] in names
            g.add_node(a["id"])
            for dep in a["after"]:
                assert dep in ids
                g.add_edge(dep, a["id"])
        assert nx.is_directed_acyclic_graph(g)
    assert make_sessions(scenario, [0.0, 1.0], seed=3)[0] == sessions[0]


def test_arrivals_are_seeded_and_bursty() -> None:
    a = arrivals("bursty", 60, 120.0, seed=1)
    assert np.array_equal(a, arrivals("bursty", 60, 120.0, seed=1))
    gaps = np.diff(a)
    assert gaps.std() / gaps.mean() > 1.5  # burstier than Poisson (CV 1)
    p = np.diff(arrivals("poisson", 400, 400.0, seed=1))
    assert 0.8 < p.std() / p.mean() < 1.2


def test_burst_window_keeps_the_burst() -> None:
    rng = np.random.default_rng(0)
    stamps = np.sort(np.concatenate([rng.uniform(0, 1000, 200), 500 + rng.uniform(0, 3, 300)]))
    w = burst_window(stamps, 50, seed=0, window_s=100.0)
    assert len(w) == 50
    assert (np.diff(w) >= 0).all()
    assert np.histogram(w, bins=10)[0].max() >= 20


def _run(policy: str, seed: int = 0, n: int = 6) -> dict[str, float]:
    ss = make_sessions("mixed", list(arrivals("bursty", n, 20.0, seed)), seed)
    cfg = WorkflowSimConfig(pool=SMALL_POOL, planner_time_s=0.3)
    pol = get_policy(policy, planner_config=PlannerConfig(window=10))
    return WorkflowSimulator(ss, pol, name=policy, seed=seed, config=cfg).run().summary()


@pytest.mark.parametrize("policy", ALL_POLICIES)
def test_every_policy_completes_with_valid_plans(policy: str) -> None:
    s = _run(policy)
    assert s["violations"] == 0
    assert s["makespan_s"] > 0
    assert s["p50_latency_s"] <= s["p95_latency_s"] <= s["p99_latency_s"] <= s["makespan_s"] + 1e-6
    assert s["gpu_seconds_per_session"] == pytest.approx(
        s["gpu_compute_s_per_session"] + s["gpu_loading_s_per_session"] + s["gpu_idle_resident_s_per_session"]
    )
    assert s["loads"] >= 1  # the pool starts empty


def test_simulation_is_deterministic() -> None:
    a, b = _run("heft", seed=2), _run("heft", seed=2)
    a.pop("planner_seconds"), b.pop("planner_seconds")
    a.pop("planner_seconds_max"), b.pop("planner_seconds_max")
    assert a == b


def test_fusion_and_load_ahead_save_compute_against_heft() -> None:
    ours = [_run("greedy", seed=s, n=8)["gpu_compute_s_per_session"] for s in (0, 1)]
    heft = [_run("heft", seed=s, n=8)["gpu_compute_s_per_session"] for s in (0, 1)]
    assert sum(ours) < sum(heft)


def test_offline_bound_is_a_lower_bound_without_noise() -> None:
    ss = make_sessions("mixed", list(arrivals("bursty", 3, 10.0, 0)), 0)
    cfg = WorkflowSimConfig(pool=(("h100", 1), ("l40s", 1)), type_sigma=0.0, unit_sigma=0.0, load_sigma=0.0)
    ob = offline_bound(ss, config=cfg, time_limit_s=2.0)
    assert ob.bound_s <= ob.makespan_s + 0.05
    for name in ("heft", "greedy"):
        mk = WorkflowSimulator(ss, get_policy(name), name=name, config=cfg).run().makespan_s
        assert mk >= ob.bound_s - 0.05


def test_cli_simulate_writes_summary(tmp_path: Path) -> None:
    main = typer.Typer()

    @main.callback()
    def _root() -> None:
        """test root"""

    register(main)
    out = tmp_path / "run"
    res = CliRunner().invoke(
        main,
        [
            "workflows",
            "simulate",
            "--scenario",
            "mapreduce",
            "--arrivals",
            "bursty",
            "--policies",
            "heft,autellix,cpsat",
            "--seeds",
            "0,1",
            "--sessions",
            "4",
            "--window-s",
            "20",
            "--planner-time-s",
            "0.3",
            "--window",
            "8",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "summary.json").read_text())
    for name in ("heft", "autellix", "cpsat"):
        p = summary["policies"][name]
        for key in (
            "makespan_s",
            "p50_latency_s",
            "p95_latency_s",
            "p99_latency_s",
            "loads",
            "evictions",
            "planner_seconds",
        ):
            assert key in p
        assert set(p["gpu_seconds_per_session"]) == {"total", "compute", "loading", "idle_resident"}
        assert p["invariant6_violations"] == 0
    assert "cpsat" in summary["vs_best_non_fcfs_baseline"]
    assert (out / "summary.md").read_text().startswith("Scenario `mapreduce`")
    assert (out / "comparison.png").stat().st_size > 1000


def test_cli_rejects_unknown_policy(tmp_path: Path) -> None:
    main = typer.Typer()

    @main.callback()
    def _root() -> None:
        """test root"""

    register(main)
    res = CliRunner().invoke(
        main, ["workflows", "simulate", "--arrivals", "bursty", "--policies", "magic", "--out", str(tmp_path)]
    )
    assert res.exit_code != 0

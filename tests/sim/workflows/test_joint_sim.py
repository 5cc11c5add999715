"""The joint simulator: training cluster beside workflow bursts, one solve_epoch per cluster epoch."""

from __future__ import annotations

import pytest

from optsched.sim.workflows.baselines import get_policy
from optsched.sim.workflows.joint import JointConfig, JointResult, JointSimulator, _work, fluid_makespan_bound
from optsched.sim.workflows.sim import WorkflowSimConfig
from optsched.sim.workflows.workloads import arrivals, make_sessions


def _run(mode: str) -> tuple[JointSimulator, JointResult]:
    arr = arrivals("bursty", 6, 10.0, seed=1)
    sessions = make_sessions("mapreduce", list(arr), 1)
    sim = JointSimulator(
        sessions,
        get_policy("greedy"),
        name="greedy",
        seed=1,
        config=WorkflowSimConfig(pool=(("h100", 1),), planner_time_s=0.2),
        joint=JointConfig(
            mode=mode,  # type: ignore[arg-type]
            warmup_s=1200.0,
            warmup_epoch_s=600.0,
            horizon_s=240.0,
            backend="greedy",
        ),
    )
    return sim, sim.run_joint()


def test_joint_pool_grows_returns_and_beats_the_fixed_split() -> None:
    sim, res = _run("joint")
    _, fixed = _run("fixed")
    assert res.workflows.violations == 0 and fixed.workflows.violations == 0
    assert res.pool["loans"] > 0
    assert fixed.pool["loans"] == 0
    assert res.pool["max_pool_gpus"] > 1
    # every lent GPU went back once the burst had passed (before the horizon)
    assert sim.lent == {}
    assert all(b > a for a, b in sim.lent_log)
    # no training job ever held a GPU while the pool held it
    assert sim.conflicts == 0
    assert res.workflows.makespan_s < fixed.workflows.makespan_s


def test_fluid_bound_is_work_over_speed_or_the_critical_path() -> None:
    arr = arrivals("bursty", 6, 10.0, seed=1)
    sessions = make_sessions("mapreduce", list(arr), 1)
    work = _work(sessions)
    fast = fluid_makespan_bound(sessions, 1e9)  # the critical-path term alone
    t0 = min(s.arrival_s for s in sessions)
    assert fast >= max(s.arrival_s for s in sessions) - t0
    for speed in (0.5, 1.0, 4.0):
        assert fluid_makespan_bound(sessions, speed) == pytest.approx(max(work / speed, fast))


def test_joint_simulation_is_deterministic() -> None:
    a_sim, a = _run("joint")
    b_sim, b = _run("joint")
    assert a.workflows.makespan_s == b.workflows.makespan_s
    assert a_sim.lent_log == b_sim.lent_log
    assert a.training == b.training

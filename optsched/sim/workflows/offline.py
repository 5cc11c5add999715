"""The CP-SAT offline optimum / lower bound of a small workload (all arrivals known).

Every session is visible from the first arrival on, with its arrival as release time; the pool
starts empty-handed as the simulator's does; durations are the predictor's (the ground truth
when the simulation runs without noise). CP-SAT minimises the makespan over the whole workload
(one window, no tail) and reports its solution and its proven lower bound.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from optsched.engine.state import ClusterState
from optsched.engine.workflows.greedy import OURS_GREEDY, list_schedule
from optsched.engine.workflows.planner import SCALE, PlannerConfig, _solve_window
from optsched.engine.workflows.problem import _forecast, build_workflow_problem
from optsched.schema.decision import WorkflowPlan
from optsched.sim.workflows.sim import WorkflowSimConfig, WorkflowSimulator
from optsched.sim.workflows.workloads import SessionSpec


@dataclass(frozen=True)
class OfflineResult:
    makespan_s: float
    """Best makespan CP-SAT found (predicted durations)."""
    bound_s: float
    """Proven lower bound on the makespan."""
    greedy_makespan_s: float
    status: str


def _no_policy(state: ClusterState, limit: float, seed: int) -> WorkflowPlan:
    del state, limit, seed
    return WorkflowPlan()


def offline_bound(
    sessions: list[SessionSpec],
    *,
    config: WorkflowSimConfig | None = None,
    time_limit_s: float = 20.0,
    seed: int = 0,
) -> OfflineResult:
    cfg = config or WorkflowSimConfig()
    sim = WorkflowSimulator(sessions, _no_policy, name="offline", seed=seed, config=cfg)
    t0 = min(s.arrival_s for s in sessions)
    t_last = max(s.arrival_s for s in sessions)
    state = ClusterState.from_snapshot(sim.snapshot(t_last))
    prob = build_workflow_problem(state, sim.pred)
    prob.now = t0
    for d in prob.devices:
        d.free_at = t0
    for key, a in prob.acts.items():
        a.release = prob.session_arrival[key[0]]
    _forecast(prob, sim.pred)
    greedy = list_schedule(prob, OURS_GREEDY)
    g_mk = max(p.end for p in greedy.placed) - t0
    pc = PlannerConfig(
        window=len(prob.acts) + 1,
        beta_tail=1.0,
        gamma_gpu=0.0,
        completion_weight=0.0,
        keep_bonus=False,
        load_penalty=0.0,
        tail_estimate=False,
    )
    out: list[float] = []
    res = _solve_window(prob, greedy, pc, time_limit_s, seed, replace(OURS_GREEDY), bound=out)
    if res is None:
        return OfflineResult(g_mk, 0.0, g_mk, "no solution")
    sched, status, _ = res
    mk = max(p.end for p in sched.placed) - t0
    bound = out[1] / (10.0 * SCALE)
    return OfflineResult(makespan_s=mk, bound_s=bound, greedy_makespan_s=g_mk, status=status)

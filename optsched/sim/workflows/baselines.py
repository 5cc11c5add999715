"""Baseline policies behind the planner's interface ``(state, time_limit_s, seed) -> plan``.

All are list schedulers (:mod:`optsched.engine.workflows.greedy`) over the same predictor, differing
in the order of ready units, placement, eviction and load timing; none fuses activations or
loads ahead (that is what the planner adds):

* ``fcfs-lru`` — first come first served by session arrival, the device that frees first
  (setup-unaware), an LRU model cache, loads on demand;
* ``heft`` — setup-aware HEFT: upward rank order, earliest finish time including the model
  load (the HEFT insertion of a setup term);
* ``peft`` — setup-aware PEFT: optimistic-cost-table rank, placement minimising
  finish + OCT;
* ``sllm`` — ServerlessLLM-style loading-aware placement: FCFS order, the device with the
  earliest estimated *startup* (queue wait + load time, resident models win);
* ``autellix`` — Autellix-like program-level least-attained-service: the session with the
  least service so far goes first, earliest-finish placement;
* ``greedy`` — the planner's own greedy (fusion, load-ahead, SRPT sessions) without CP-SAT;
* ``cpsat`` — the planner (:func:`optsched.engine.workflows.planner.plan_workflows`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from optsched.engine.state import ClusterState
from optsched.engine.workflows.greedy import OURS_GREEDY, ListPolicy, list_schedule
from optsched.engine.workflows.planner import PlannerConfig, plan_workflows
from optsched.engine.workflows.problem import build_workflow_problem
from optsched.schema.decision import WorkflowPlan
from optsched.sim.workflows.names import ALL_POLICIES

Policy = Callable[[ClusterState, float, int], WorkflowPlan]

LIST_POLICIES: dict[str, ListPolicy] = {
    "fcfs-lru": ListPolicy("fcfs-lru", order="fcfs", placement="first_free", eviction="lru"),
    "heft": ListPolicy("heft", order="heft", placement="eft", eviction="lru"),
    "peft": ListPolicy("peft", order="peft", placement="peft", eviction="lru"),
    "sllm": ListPolicy("sllm", order="fcfs", placement="est", eviction="lru"),
    "autellix": ListPolicy("autellix", order="las", placement="eft", eviction="lru"),
    "greedy": OURS_GREEDY,
}


def list_policy(policy: ListPolicy) -> Policy:
    def run(state: ClusterState, time_limit_s: float, seed: int) -> WorkflowPlan:
        del time_limit_s, seed  # deterministic and fast
        prob = build_workflow_problem(state, fusion=policy.fusion)
        if not prob.acts and not policy.keep_warm:
            return WorkflowPlan(status="feasible")
        # with nothing pending the keep-warm rule still decides which resident models go
        return list_schedule(prob, policy).to_plan(prob, "feasible", [policy.name])

    return run


def get_policy(name: str, *, planner_config: PlannerConfig | None = None) -> Policy:
    """The policy called ``name`` (one of :data:`ALL_POLICIES`)."""
    if name == "cpsat":
        cfg = planner_config or PlannerConfig()

        def cpsat(state: ClusterState, time_limit_s: float, seed: int) -> WorkflowPlan:
            return plan_workflows(state, time_limit_s=time_limit_s, seed=seed, config=cfg)

        return cpsat
    if name not in LIST_POLICIES:
        raise ValueError(f"unknown policy '{name}', choose from {ALL_POLICIES}")
    pol = LIST_POLICIES[name]
    if name == "greedy" and planner_config is not None:
        pol = replace(pol, fusion=planner_config.fusion)
    return list_policy(pol)

"""Multi-agent LLM workflow planning on a heterogeneous serving pool (issue 5).

Modules:

* :mod:`optsched.workflows.check` — invariant 6 of the spec, without any solver.
* :mod:`optsched.workflows.predictor` — per GPU type latency / memory / load time.
* :mod:`optsched.workflows.construct` — units (fusion alternatives) and lifecycle options.
* :mod:`optsched.workflows.planner` — CP-SAT scheduler with a greedy fallback
  (:func:`plan_workflows`, the entry point of ``solve_epoch``).
* :mod:`optsched.workflows.baselines` — FCFS+LRU, HEFT, PEFT, ServerlessLLM-style, Autellix-like.
* :mod:`optsched.workflows.sim` — the workflow simulator and its scenarios.
"""

from __future__ import annotations

from optsched.workflows.check import check_workflow_plan

__all__ = ["check_workflow_plan"]

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

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from optsched.workflows.check import check_workflow_plan


def __getattr__(name: str) -> Any:
    # loaded on first use: ``import optsched.workflows.names`` (the command line) stays cheap
    if name == "check_workflow_plan":
        from optsched.workflows.check import check_workflow_plan

        return check_workflow_plan
    raise AttributeError(f"module 'optsched.workflows' has no attribute {name!r}")

__all__ = ["check_workflow_plan"]

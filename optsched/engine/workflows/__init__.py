"""The workflow stage of an epoch: multi-agent LLM sessions planned on a heterogeneous serving
pool (issue 5). ``solve_epoch`` runs it after the cluster part.

Modules, in the order the stage runs:

* :mod:`optsched.engine.workflows.pool` — the serving pool's size (loans from the cluster).
* :mod:`optsched.engine.workflows.construct` — units (fusion alternatives) and lifecycle options.
* :mod:`optsched.engine.workflows.problem` — the planning problem of one epoch (on the activation
  predictor, :mod:`optsched.predict.activation`).
* :mod:`optsched.engine.workflows.planner` — CP-SAT scheduler with a greedy fallback
  (:func:`plan_workflows`, the entry point of ``solve_epoch``).
* :mod:`optsched.engine.workflows.greedy` — the list scheduler the fallback and the baselines use.
* :mod:`optsched.engine.workflows.check` — invariant 6 of the spec, without any solver.

The workflow simulator, its workloads and the baselines it compares are experiments, in
:mod:`optsched.sim.workflows`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from optsched.engine.workflows.check import check_workflow_plan


def __getattr__(name: str) -> Any:
    # loaded on first use: importing the package costs nothing until a name is asked for
    if name == "check_workflow_plan":
        from optsched.engine.workflows.check import check_workflow_plan

        return check_workflow_plan
    raise AttributeError(f"module 'optsched.engine.workflows' has no attribute {name!r}")

__all__ = ["check_workflow_plan"]

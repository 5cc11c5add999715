"""Workflow experiments: the simulator of multi-agent LLM sessions on a serving pool, its
workloads and the baselines it compares with the engine's planner
(:mod:`optsched.engine.workflows`).

Modules:

* :mod:`optsched.sim.workflows.names` — scenario, arrival and policy names (no numpy, no solver).
* :mod:`optsched.sim.workflows.workloads` — scenarios, models, pool and arrival processes.
* :mod:`optsched.sim.workflows.baselines` — FCFS+LRU, HEFT, PEFT, ServerlessLLM-style, Autellix-like.
* :mod:`optsched.sim.workflows.sim` — the discrete-event workflow simulator.
* :mod:`optsched.sim.workflows.offline` — the offline optimum / lower bound of small workloads.
* :mod:`optsched.sim.workflows.experiment` — policies x seeds, summaries and plots.
* :mod:`optsched.sim.workflows.joint` — the serving pool beside a training cluster, one
  ``solve_epoch`` per cluster epoch.

See ``docs/workflows.md``.
"""

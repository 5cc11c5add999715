"""The names the workflow commands offer, importable without numpy, networkx or a solver."""

from __future__ import annotations

SCENARIOS = ("react", "mapreduce", "debate", "taskbench", "mixed")
"""Workflow shapes :func:`optsched.sim.workflows.workloads.make_sessions` builds."""
ARRIVALS = ("azure-code", "poisson", "bursty")
"""Session arrival processes :func:`optsched.sim.workflows.workloads.arrivals` draws."""
BASELINES = ("fcfs-lru", "heft", "peft", "sllm", "autellix")
"""The list-scheduling baselines of :mod:`optsched.sim.workflows.baselines`."""
ALL_POLICIES = (*BASELINES, "greedy", "cpsat")
"""Every policy :func:`optsched.sim.workflows.baselines.get_policy` knows."""

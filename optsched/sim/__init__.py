"""Trace-driven cluster simulator, baseline policies and metrics.

Public API::

    from optsched.sim import load_trace, run_one, RunSpec, summarize, load_log

    trace = load_trace("mini")                       # the shipped mini trace
    log = run_one(RunSpec(trace="mini", policy="kueue", seed=0), trace)
    print(summarize(log)["avg_queue_delay_s"])

See ``docs/simulator.md`` for the model, the policies and the metrics.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from optsched.sim.cluster import EventLog, GroundTruth, SimConfig, SimulationError, Simulator
    from optsched.sim.metrics import (
        SUMMARY_KEYS,
        jcts,
        per_tenant,
        qos_compliance,
        queue_delays,
        summarize,
        useful_utilization,
        utilization,
        utilization_series,
    )
    from optsched.sim.names import POLICIES
    from optsched.sim.policies import DecisionBuilder, OraclePredictor, make_policy
    from optsched.sim.runner import RunSpec, load_log, run_many, run_one, save_log
    from optsched.sim.trace import (
        GuaranteeRule,
        TenantSpec,
        Trace,
        TraceJob,
        load_trace,
        read_openb,
        read_venus,
    )

# Submodules load on first use, so ``import optsched.sim.names`` (the command line) does not
# pay for numpy and the simulator.
_LAZY: dict[str, str] = {
    "DecisionBuilder": "optsched.sim.policies",
    "EventLog": "optsched.sim.cluster",
    "GroundTruth": "optsched.sim.cluster",
    "GuaranteeRule": "optsched.sim.trace",
    "OraclePredictor": "optsched.sim.policies",
    "POLICIES": "optsched.sim.names",
    "RunSpec": "optsched.sim.runner",
    "SUMMARY_KEYS": "optsched.sim.metrics",
    "SimConfig": "optsched.sim.cluster",
    "SimulationError": "optsched.sim.cluster",
    "Simulator": "optsched.sim.cluster",
    "TenantSpec": "optsched.sim.trace",
    "Trace": "optsched.sim.trace",
    "TraceJob": "optsched.sim.trace",
    "jcts": "optsched.sim.metrics",
    "load_log": "optsched.sim.runner",
    "load_trace": "optsched.sim.trace",
    "make_policy": "optsched.sim.policies",
    "per_tenant": "optsched.sim.metrics",
    "qos_compliance": "optsched.sim.metrics",
    "queue_delays": "optsched.sim.metrics",
    "read_openb": "optsched.sim.trace",
    "read_venus": "optsched.sim.trace",
    "run_many": "optsched.sim.runner",
    "run_one": "optsched.sim.runner",
    "save_log": "optsched.sim.runner",
    "summarize": "optsched.sim.metrics",
    "useful_utilization": "optsched.sim.metrics",
    "utilization": "optsched.sim.metrics",
    "utilization_series": "optsched.sim.metrics",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'optsched.sim' has no attribute {name!r}")


__all__ = [
    "POLICIES",
    "SUMMARY_KEYS",
    "DecisionBuilder",
    "EventLog",
    "GroundTruth",
    "GuaranteeRule",
    "OraclePredictor",
    "RunSpec",
    "SimConfig",
    "SimulationError",
    "Simulator",
    "TenantSpec",
    "Trace",
    "TraceJob",
    "jcts",
    "load_log",
    "load_trace",
    "make_policy",
    "per_tenant",
    "qos_compliance",
    "queue_delays",
    "read_openb",
    "read_venus",
    "run_many",
    "run_one",
    "save_log",
    "summarize",
    "useful_utilization",
    "utilization",
    "utilization_series",
]

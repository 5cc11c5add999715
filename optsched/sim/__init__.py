"""Trace-driven cluster simulator, baseline policies and metrics.

Public API::

    from optsched.sim import load_trace, run_one, RunSpec, summarize, load_log

    trace = load_trace("mini")                       # the shipped mini trace
    log = run_one(RunSpec(trace="mini", policy="kueue", seed=0), trace)
    print(summarize(log)["avg_queue_delay_s"])

See ``docs/simulator.md`` for the model, the policies and the metrics.
"""

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
from optsched.sim.policies import POLICIES, DecisionBuilder, OraclePredictor, make_policy
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

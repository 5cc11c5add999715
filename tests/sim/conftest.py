from __future__ import annotations

import pytest

from optsched.sim.cluster import SimConfig
from optsched.sim.trace import GpuTypeSpec, GuaranteeRule, NodeSpec, TenantSpec, Trace, TraceJob

EXACT = SimConfig(epoch_s=1000.0, min_gap_s=0.0, runtime_jitter=0.0, pair_jitter=0.0,
                  restart_overhead_s=0.0, checkpoint_s=0.0, use_history=False)
"""No jitter, decisions at every event: results can be computed by hand."""


def make_trace(jobs: list[TraceJob], tenants: list[TenantSpec], gpus: int = 4,
               nodes: int = 1, rule: GuaranteeRule | None = None) -> Trace:
    ten = {t.id: t for t in tenants}
    labelled = (rule or GuaranteeRule()).apply(jobs, ten)
    return Trace(
        name="hand",
        jobs=tuple(labelled),
        tenants=tuple(tenants),
        gpu_types=(GpuTypeSpec("V100", 32.0, True),),
        nodes=tuple(NodeSpec(f"n{k}", "V100", gpus) for k in range(nodes)),
    )


@pytest.fixture(autouse=True)
def _no_shared_traces(tmp_path_factory: pytest.TempPathFactory,
                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never read the real traces path: the default traces folder is an empty one."""
    monkeypatch.setenv("OPTSCHED_TRACES", str(tmp_path_factory.mktemp("no_traces")))


@pytest.fixture
def three_jobs() -> Trace:
    jobs = [
        TraceJob("A", "t1", 2, 0.0, 100.0),
        TraceJob("B", "t1", 2, 10.0, 50.0),
        TraceJob("C", "t1", 4, 20.0, 30.0),
    ]
    return make_trace(jobs, [TenantSpec("t1", {"V100": 4}, max_queue_delay_s=60.0)],
                      rule=GuaranteeRule("all"))

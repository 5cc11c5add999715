"""Small snapshot builders and assertions for tests, docs and notebooks (no hypothesis here)."""

from __future__ import annotations

from typing import Any

from optsched.engine.check import check_decision
from optsched.engine.state import ClusterState
from optsched.schema.decision import Decision


def cluster(
    *,
    types: dict[str, tuple[float, bool]] | None = None,
    nodes: dict[str, tuple[str, int]] | None = None,
    tenants: dict[str, dict[str, int]] | None = None,
    now: float = 10_000.0,
    max_delay_s: float = 600.0,
) -> dict[str, Any]:
    """A snapshot dict with no jobs. ``types``: name -> (memory GiB, mps);
    ``nodes``: id -> (type, gpus); ``tenants``: id -> quota per type."""
    types = types or {"A100": (80.0, True)}
    nodes = nodes or {"n0": ("A100", 8)}
    tenants = tenants or {"a": {"A100": 4}, "b": {"A100": 4}}
    return {
        "format": 1,
        "now": now,
        "gpu_types": {t: {"memory_gib": m, "mps": mps} for t, (m, mps) in types.items()},
        "nodes": [{"id": n, "gpu_type": t, "gpus": g} for n, (t, g) in nodes.items()],
        "tenants": [
            {"id": t, "quota": q, "qos": {"max_queue_delay_s": max_delay_s, "target": 0.95}}
            for t, q in tenants.items()
        ],
        "jobs": [],
    }


def pending(job_id: str, tenant: str, gpus: int, *, submit_s: float, **extra: Any) -> dict[str, Any]:
    """A pending job dict (guaranteed unless ``qos`` says otherwise)."""
    job: dict[str, Any] = {
        "id": job_id,
        "tenant": tenant,
        "qos": "guaranteed",
        "gpus": gpus,
        "submit_s": submit_s,
        "state": "pending",
        "runtime_s": 3600.0,
        "memory_gib": 10.0,
    }
    job.update(extra)
    return job


def running(
    job_id: str, tenant: str, gpus: list[tuple[str, int]], *, start_s: float, **extra: Any
) -> dict[str, Any]:
    """A running job dict on the given (node, gpu) pairs."""
    job: dict[str, Any] = {
        "id": job_id,
        "tenant": tenant,
        "qos": "guaranteed",
        "gpus": len(gpus),
        "submit_s": start_s,
        "state": "running",
        "start_s": start_s,
        "allocation": [{"node": n, "gpu": g} for n, g in gpus],
        "on_loan": False,
        "runtime_s": 36000.0,
        "memory_gib": 10.0,
    }
    job.update(extra)
    return job


def assert_decision_valid(state: ClusterState, decision: Decision) -> None:
    """Raise ``AssertionError`` listing every broken invariant."""
    violations = check_decision(state, decision)
    assert not violations, "\n".join(str(v) for v in violations)

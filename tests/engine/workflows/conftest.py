"""Shared builders: random workflow snapshots from the shipped generators (no trace data)."""

from __future__ import annotations

from typing import Any

import numpy as np

from optsched.engine.state import ClusterState, load_state
from optsched.sim.workflows.workloads import MODELS, make_sessions


def random_snapshot(
    seed: int, n_sessions: int = 6, *, running: bool = True, scenario: str = "mixed"
) -> ClusterState:
    """A pool of four GPU types with random residency, sessions in random progress."""
    rng = np.random.default_rng(seed)
    now = 100.0
    sessions = make_sessions(scenario, sorted(rng.uniform(50, 100, n_sessions)), seed)
    types = {"h100": 80.0, "a100": 80.0, "l40s": 48.0, "a10g": 24.0}
    nodes = [{"id": f"n-{t}", "gpu_type": t, "gpus": 2} for t in types]
    pool: list[dict[str, Any]] = []
    mem = {m.name: m.memory_gib for m in MODELS}
    for t, cap in types.items():
        for g in range(2):
            res: list[str] = []
            for m in rng.permutation([m.name for m in MODELS]):
                if rng.random() < 0.4 and sum(mem[x] for x in res) + mem[str(m)] <= cap:
                    res.append(str(m))
            pool.append(
                {
                    "node": f"n-{t}",
                    "gpu": g,
                    "resident": res,
                    "busy_until_s": float(now + rng.uniform(0, 5)) if rng.random() < 0.3 else 0.0,
                }
            )
    wf_sessions: list[dict[str, Any]] = []
    for s in sessions:
        acts = []
        done: set[str] = set()
        for a in s.activations:  # generators emit activations in topological order
            row = dict(a)
            state = "pending"
            if all(d in done for d in a["after"]) and rng.random() < 0.3:
                state = "done"
                done.add(a["id"])
            row["state"] = state
            acts.append(row)
        if running:
            for row in acts:
                if row["state"] != "pending" or not all(d in done for d in row["after"]):
                    continue
                cands = [
                    p
                    for p in pool
                    if row["model"] in p["resident"]
                    and not any(
                        x.get("device") == {"node": p["node"], "gpu": p["gpu"]}
                        for ss in wf_sessions
                        for x in ss["activations"]
                    )
                ]
                if cands and rng.random() < 0.5:
                    p = cands[0]
                    row["state"] = "running"
                    row["device"] = {"node": p["node"], "gpu": p["gpu"]}
                    row["start_s"] = now - 1.0
                    p["busy_until_s"] = max(p["busy_until_s"], now + 2.0)
                break
        wf_sessions.append({"id": s.id, "tenant": "t", "arrival_s": s.arrival_s, "activations": acts})
    models = {
        m.name: {
            "memory_gib": m.memory_gib,
            "params_b": m.params_b,
            "load_s": {t: round(1.0 + m.memory_gib / 3.0, 3) for t in types},
        }
        for m in MODELS
    }
    return load_state(
        {
            "format": 1,
            "now": now,
            "gpu_types": {t: {"memory_gib": c} for t, c in types.items()},
            "nodes": nodes,
            "tenants": [{"id": "t"}],
            "workflows": {"models": models, "pool": pool, "sessions": wf_sessions},
        }
    )

"""Random small snapshots whose on-loan jobs lenders can no longer cover (forced reclaims).

A ``tiny`` generated snapshot (:func:`optsched.instances.generate`) that runs jobs on loan is
mutated the ways a live cluster gets there: an operator lowers the quota of tenants (lenders
among them), or a lender's own jobs arrive and now run on the GPUs its idle quota stood for.
Only snapshots in which some on-loan use is left uncovered are kept (``EpochProblem.deficit``
non-zero on some type). Deterministic: the same seed gives the same snapshot.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Iterator
from typing import Any

from optsched.engine import assurance as asr
from optsched.engine.candidates import build_problem
from optsched.engine.problem import EpochProblem
from optsched.engine.state import ClusterState, parse_snapshot
from optsched.instances import generate
from optsched.predict.fallback import EstimatePredictor

PREDICTOR = EstimatePredictor()


def _lender_jobs(snap: dict[str, Any], rng: random.Random) -> None:
    """Lenders' own jobs arrive: each tenant with idle quota on a type that carries on-loan jobs
    may get running jobs (guaranteed, inside its quota) on the type's free GPUs."""
    node_type = {n["id"]: n["gpu_type"] for n in snap["nodes"] if n.get("available", True)}
    held = {(r["node"], r["gpu"]) for j in snap["jobs"] if j["state"] == "running" for r in j["allocation"]}
    free = sorted(
        (n["id"], g) for n in snap["nodes"] if n["id"] in node_type for g in range(n["gpus"])
        if (n["id"], g) not in held
    )
    loaned = {node_type.get(j["allocation"][0]["node"]) for j in snap["jobs"]
              if j["state"] == "running" and j.get("on_loan")}
    use: dict[tuple[str, str], int] = {}
    for j in snap["jobs"]:
        if j["state"] == "running" and not j.get("colocated"):
            key = (j["tenant"], node_type.get(j["allocation"][0]["node"], ""))
            use[key] = use.get(key, 0) + j["gpus"]
    k = 0
    for ten in snap["tenants"]:
        for t in sorted(x for x in loaned if x is not None):
            idle = ten["quota"].get(t, 0) - use.get((ten["id"], t), 0)
            spots = [f for f in free if node_type[f[0]] == t]
            n = min(idle, len(spots), rng.randint(0, max(0, idle)))
            if n <= 0:
                continue
            alloc = spots[:n]
            free = [f for f in free if f not in alloc]
            start = snap["now"] - rng.uniform(60, 5000)
            snap["jobs"].append(
                {
                    "id": f"lender{k:03d}",
                    "tenant": ten["id"],
                    "qos": "guaranteed",
                    "gpus": n,
                    "state": "running",
                    "submit_s": round(start - 100, 1),
                    "start_s": round(start, 1),
                    "allocation": [{"node": a, "gpu": g} for a, g in alloc],
                    "on_loan": False,
                    "runtime_s": 7200.0,
                    "memory_gib": 10.0,
                }
            )
            use[(ten["id"], t)] = use.get((ten["id"], t), 0) + n
            k += 1


def _lower_quotas(snap: dict[str, Any], rng: random.Random) -> None:
    """An operator lowers some tenants' quotas (half of the (tenant, type) pairs, by a random
    amount)."""
    for ten in snap["tenants"]:
        for t in sorted(ten["quota"]):
            if rng.random() < 0.5:
                ten["quota"][t] = max(0, ten["quota"][t] - rng.randint(0, ten["quota"][t]))


def mutated(seed: int) -> dict[str, Any] | None:
    """A mutated ``tiny`` snapshot for ``seed``, or None when it runs nothing on loan."""
    rng = random.Random(seed)
    snap = copy.deepcopy(generate("tiny", seed=seed))
    if not any(j["state"] == "running" and j.get("on_loan") for j in snap["jobs"]):
        return None
    how = rng.random()
    if how < 0.4:
        _lower_quotas(snap, rng)
    elif how < 0.7:
        _lender_jobs(snap, rng)
    else:
        _lender_jobs(snap, rng)
        _lower_quotas(snap, rng)
    return snap


def problem_of(snap: dict[str, Any]) -> tuple[ClusterState, EpochProblem]:
    """The snapshot's state and epoch problem (fallback predictor, the snapshot's assurance)."""
    state = ClusterState.from_snapshot(parse_snapshot(snap))
    p = build_problem(state, PREDICTOR.predict_jobs(state), PREDICTOR, asr.compute(state))
    return state, p


def uncoverable(count: int, start: int = 0) -> Iterator[tuple[int, dict[str, Any]]]:
    """The first ``count`` seeds from ``start`` on whose mutated snapshot leaves on-loan use no
    lender covers, with the snapshots."""
    seed, found = start, 0
    while found < count:
        snap = mutated(seed)
        if snap is not None and any(problem_of(snap)[1].deficit):
            yield seed, snap
            found += 1
        seed += 1

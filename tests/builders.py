"""Hand-built inputs shared by the engine tests: the neutral model's pieces
(:class:`PendingClass`, :class:`RunningItem`, :class:`EpochProblem`, one GPU type) and small
snapshots."""

from __future__ import annotations

import itertools
from dataclasses import fields
from typing import Any

from optsched.engine.problem import EpochProblem, GuestCandidate, PendingClass, RunningItem
from optsched.testing import cluster, pending, running

_ids = itertools.count()


def pending_class(
    tenant: int,
    gpus: int,
    values: tuple[float, ...],
    *,
    own: bool = True,
    cap: int | None = None,
    loan_penalty: float = 0.5,
    guaranteed: bool = True,
    **kw: Any,
) -> PendingClass:
    """A class of pending jobs of one tenant and size on type 0, one member per value (unique
    job ids, as in a snapshot); ``own``: the tenant has quota on type 0."""
    base: dict[str, Any] = {
        "tenant": tenant,
        "gpus": gpus,
        "types": (0,),
        "own_types": (0,) if own else (),
        "jobs": tuple(f"p{next(_ids)}" for _ in values),
        "values": values,
        "cap": len(values) if cap is None else cap,
        "type_bonus": (0.0,),
        "loan_penalty": loan_penalty,
        "guaranteed": guaranteed,
        "reclaim": False,
        "shareable": False,
        "memory_gib": 4.0,
    }
    base.update(kw)
    return PendingClass(**base)


def running_item(job: str, tenant: int, gpus: int, **kw: Any) -> RunningItem:
    """A running job on type 0, in quota, not a preemption candidate unless ``kw`` says so."""
    base: dict[str, Any] = {
        "job": job,
        "tenant": tenant,
        "type": 0,
        "gpus": gpus,
        "on_loan": False,
        "guest": False,
        "candidate": False,
        "cost": 0.0,
        "lost_s": 0.0,
        "free_slots": 0,
    }
    base.update(kw)
    return RunningItem(**base)


def epoch_problem(
    capacity: int,
    quota: tuple[int, ...],
    classes: tuple[PendingClass, ...] = (),
    running_: tuple[RunningItem, ...] = (),
    guests: tuple[GuestCandidate, ...] = (),
    *,
    lend_limit: tuple[int | None, ...] | None = None,
    borrow_limit: tuple[int | None, ...] | None = None,
    kept_over: tuple[int, ...] | None = None,
    deficit: int = 0,
) -> EpochProblem:
    """One GPU type (``A100``, ``capacity`` free GPUs), ``len(quota)`` tenants ``t0``, ``t1``, ..."""
    nk = len(quota)
    given: dict[str, Any] = {
        "types": ("A100",),
        "tenants": tuple(f"t{i}" for i in range(nk)),
        "capacity": (capacity,),
        "quota": tuple((q,) for q in quota),
        "borrow_limit": tuple((b,) for b in (borrow_limit or (None,) * nk)),
        "lend_limit": tuple((x,) for x in (lend_limit or (None,) * nk)),
        "pending": classes,
        "running": running_,
        "guests": guests,
        "forced": (),
        "evicted": (),
        "density": {},
        "unplaceable": (),
        "kept_over": tuple((k,) for k in (kept_over or (0,) * nk)),
        "deficit": (deficit,),
        "reclaim_bonus": 0.0,
        # the largest best-effort gang not on loan less one (candidates stand for best effort)
        "victim_slack": (max((r.gpus - 1 for r in running_ if r.priority_victim), default=0),),
    }
    assert set(given) <= {f.name for f in fields(EpochProblem)}
    return EpochProblem(**given)


def over_quota_snapshot() -> dict[str, Any]:
    """a's A100 quota was lowered to 2 while it runs 4 guaranteed GPUs; b uses all of its quota
    (nobody can lend); a still has idle V100 quota. Pending: one A100 job and one any-type job
    of a."""
    snap = cluster(
        types={"A100": (80.0, False), "V100": (32.0, False)},
        nodes={"n0": ("A100", 12), "v0": ("V100", 4)},
        tenants={"a": {"A100": 2, "V100": 2}, "b": {"A100": 6}},
    )
    snap["jobs"] = [
        running("a-run", "a", [("n0", g) for g in range(4)], start_s=1_000.0),
        running("b-run", "b", [("n0", g) for g in range(4, 10)], start_s=1_000.0),
        pending("a-a100", "a", 1, submit_s=9_000.0, gpu_types=["A100"]),
        pending("a-any", "a", 1, submit_s=9_000.0),
    ]
    return snap

"""The split stage of a partitioned epoch: how many parts, and each part's snapshot.

:func:`split` cuts one epoch into ``k`` part snapshots, linear in the snapshot and a pure
function of it and the seed (``docs/partitioning.md``, "The split", says why each step keeps
the guarantees exact):

1. **Home parts** (:func:`_home_parts`): every tenant gets one, largest quota first, each to
   the part with the least quota so far, so each part's model holds about 1/k of the job
   classes.
2. **Nodes** (:func:`_node_parts`): nodes joined by a running job (a gang over several nodes,
   an MPS pair) form one group; a group goes to the home part of the tenants holding most of
   it while that part is below its capacity target (its tenants' share of the type's quota),
   and free groups fill the parts' deficits, in a seeded order. Every running job lies inside
   one part (:func:`_running_jobs`).
3. **Pending jobs** (:func:`_route_pending`) go to their tenant's home part (the next part
   with the type when the home part has none); a gang that no part can hold is left for the
   coordination step.
4. **Tenants' numbers** (:func:`_slice_tenant`): per (tenant, type), a part's quota slice is
   what the tenant's running jobs not on loan already hold there, and the home part gets the
   rest (largest-remainder :func:`apportion`, so the slices sum *exactly* to the quota); the
   borrow limit goes home, ``lend_limit`` and the preemption cap are apportioned the same way.
   No part can give a tenant more in-quota GPUs than its quota, and no running job in quota is
   over its slice.
"""

from __future__ import annotations

import math
import time
import zlib
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from optsched.engine.rules import victim_slack
from optsched.engine.state import ClusterState
from optsched.schema.snapshot import Job, Node, Options, Snapshot, Tenant

AUTO_GPUS_PER_PART = 10_000
"""``partitions: "auto"``: one part per this many GPUs (the size one model is measured at)."""


def resolve_partitions(value: int | str | None, state: ClusterState) -> int:
    """The number of parts: an explicit count, or ``auto`` = one per ``AUTO_GPUS_PER_PART``
    GPUs of the fleet (1: solve monolithically)."""
    if value is None:
        return 1
    if value == "auto":
        gpus = sum(n.gpus for n in state.snapshot.nodes)
        return max(1, math.ceil(gpus / AUTO_GPUS_PER_PART))
    if isinstance(value, int) and value >= 1:
        return value
    raise ValueError(f"options.partitions: a count >= 1 or 'auto' (got {value!r})")


def apportion(total: int, weights: Sequence[int]) -> list[int]:
    """Largest-remainder apportionment: non-negative integers proportional to ``weights`` that
    sum exactly to ``total`` (exact integer arithmetic; ties to the lower index; all-zero
    weights: equal shares)."""
    n = len(weights)
    if total <= 0 or n == 0:
        return [0] * n
    w = [max(0, int(x)) for x in weights]
    s = sum(w)
    if s <= 0:
        w, s = [1] * n, n
    base = [total * x // s for x in w]
    rest = total - sum(base)
    order = sorted(range(n), key=lambda i: (-((total * w[i]) % s), i))
    for i in order[:rest]:
        base[i] += 1
    return base


@dataclass
class Split:
    """The parts of one epoch."""

    parts: list[Snapshot]
    node_part: dict[str, int]
    leftover: list[str]
    """Pending jobs no part can hold (left for the coordination step)."""
    seconds: float = 0.0
    slack: list[dict[str, int]] | None = None
    """Per part, the victim slack per type it may use (:func:`part_slack`)."""


def _stable_hash(seed: int, key: str) -> int:
    return zlib.crc32(f"{seed}:{key}".encode())


def _node_groups(state: ClusterState) -> list[list[int]]:
    """Nodes joined by a running job's allocation (union-find), in node order."""
    snap = state.snapshot
    parent = list(range(len(snap.nodes)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    index = state.node_index
    for job in state.running():
        assert job.allocation is not None
        first = find(index[job.allocation[0].node])
        for ref in job.allocation[1:]:
            other = find(index[ref.node])
            if other != first:
                parent[other] = first
    groups: dict[int, list[int]] = {}
    for i in range(len(snap.nodes)):
        groups.setdefault(find(i), []).append(i)
    return list(groups.values())


def _home_parts(state: ClusterState, k: int, seed: int, types: list[str]) -> dict[str, int]:
    """Every tenant's home part: largest total quota first (seeded ties), each to the part
    with the least quota so far."""
    total_q = {ten.id: sum(state.quota(ten.id, t) for t in types) for ten in state.snapshot.tenants}
    home: dict[str, int] = {}
    assigned = [0] * k
    for tid in sorted(total_q, key=lambda x: (-total_q[x], _stable_hash(seed, x))):
        p = min(range(k), key=lambda q: (assigned[q], q))
        home[tid] = p
        assigned[p] += total_q[tid]
    return home


def _node_parts(
    state: ClusterState, k: int, seed: int, types: list[str], home: dict[str, int], fleet_cap: dict[str, int]
) -> dict[str, int]:
    """Every node's part: node groups (:func:`_node_groups`) go to the home part of the tenants
    holding most of them while that part is below its capacity target (its tenants' share of
    the type's quota, ``fleet_cap`` the type's GPUs); free groups, in a seeded order, fill the
    parts' deficits."""
    nodes = state.snapshot.nodes
    target: dict[str, list[float]] = {}
    for t in types:
        qs = [0.0] * k
        for tid, p in home.items():
            qs[p] += state.quota(tid, t)
        tot = sum(qs)
        target[t] = [fleet_cap[t] * (x / tot if tot > 0 else 1.0 / k) for x in qs]
    groups = _node_groups(state)
    held_by: dict[int, list[int]] = {}
    for job in state.running():
        if job.id in state.host_of:
            continue
        assert job.allocation is not None
        i = state.node_index[job.allocation[0].node]
        held_by.setdefault(i, [0] * k)[home[job.tenant]] += job.gpus
    group_held = []
    for g in groups:
        h = [0] * k
        for i in g:
            for p, x in enumerate(held_by.get(i, ())):
                h[p] += x
        group_held.append(h)
    order = sorted(
        range(len(groups)),
        key=lambda x: (0 if any(group_held[x]) else 1, _stable_hash(seed, nodes[groups[x][0]].id)),
    )
    load = {t: [0] * k for t in types}
    node_part: dict[str, int] = {}
    for x in order:
        g = groups[x]
        t = nodes[g[0]].gpu_type
        gpus = sum(nodes[i].gpus for i in g)
        h = group_held[x]
        best = max(range(k), key=lambda q: (h[q], -q))
        if not h[best] or load[t][best] + gpus > target[t][best] + gpus / 2:
            best = max(range(k), key=lambda q: (target[t][q] - load[t][q], -q))
        load[t][best] += gpus
        for i in g:
            node_part[nodes[i].id] = best
    return node_part


def _running_jobs(
    state: ClusterState, k: int, node_part: dict[str, int], part_jobs: list[list[Job]]
) -> tuple[dict[tuple[str, str], list[int]], dict[str, list[int]]]:
    """Put every running job into its nodes' part (appended to ``part_jobs``); return the GPUs
    per (tenant, type) and part that jobs not on loan hold (MPS guests not counted), and the
    GPUs per tenant and part that its running jobs hold."""
    own: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0] * k)
    running_gpus: dict[str, list[int]] = defaultdict(lambda: [0] * k)
    for job in state.running():
        assert job.allocation is not None
        p = node_part[job.allocation[0].node]
        part_jobs[p].append(job)
        if job.id in state.host_of:
            continue
        t = state.job_type(job)
        running_gpus[job.tenant][p] += job.gpus
        if not job.on_loan:
            own[(job.tenant, t)][p] += job.gpus
    return own, running_gpus


def _route_pending(
    state: ClusterState,
    k: int,
    home: dict[str, int],
    cap: dict[str, list[int]],
    fleet_cap: dict[str, int],
    part_jobs: list[list[Job]],
) -> list[str]:
    """Put every pending job into its tenant's home part, or, when no node there can hold the
    gang on an allowed type (``cap``: available GPUs per type and part), into the next part
    that can (appended to ``part_jobs``); return the gangs no part can hold but the fleet has
    the type for (left for the coordination step). A job the fleet has no type for stays at
    home, whose model says why it waits."""
    leftover: list[str] = []
    fits_of: dict[tuple[int, tuple[str, ...]], list[int]] = {}
    for job in state.pending():
        allowed = state.allowed_types(job)
        p = home[job.tenant]
        fits = fits_of.get((job.gpus, allowed))
        if fits is None:
            fits = [q for q in range(k) if any(cap[t][q] >= job.gpus for t in allowed)]
            fits_of[(job.gpus, allowed)] = fits
        if p in fits or (not fits and not any(fleet_cap.get(t, 0) > 0 for t in allowed)):
            part_jobs[p].append(job)  # (unplaceable anywhere: the home part says why)
        elif fits:
            part_jobs[min(fits, key=lambda q: ((q - p) % k, q))].append(job)
        else:
            leftover.append(job.id)
    return leftover


def _slice_tenant(
    state: ClusterState,
    ten: Tenant,
    k: int,
    home: int,
    types: list[str],
    own: dict[tuple[str, str], list[int]],
    running_gpus: list[int],
) -> list[Tenant]:
    """``ten`` as each part sees it: per type, the quota slice is what its jobs not on loan
    hold in the part (``own``) plus, at ``home``, the rest (over quota: the quota apportioned
    to what they hold); the borrow limit goes home, the lend limit is apportioned to the
    slices, the preemption cap to the GPUs its running jobs hold per part (``running_gpus``)."""
    quota: list[dict[str, int]] = [{} for _ in range(k)]
    borrow: list[dict[str, int]] = [{} for _ in range(k)]
    lend: list[dict[str, int]] = [{} for _ in range(k)]
    at_home = [1 if p == home else 0 for p in range(k)]
    for t in types:
        q = state.quota(ten.id, t)
        held = own[(ten.id, t)] if (ten.id, t) in own else [0] * k
        if sum(held) <= q:
            rest = apportion(q - sum(held), at_home)
            slices = [h + r for h, r in zip(held, rest, strict=True)]
        else:
            slices = apportion(q, held)
        bl, ll = state.borrow_limit(ten.id, t), state.lend_limit(ten.id, t)
        bls = apportion(bl, at_home) if bl is not None else None
        lls = apportion(ll, slices) if ll is not None else None
        for p in range(k):
            quota[p][t] = slices[p]
            if bls is not None:
                borrow[p][t] = bls[p]
            if lls is not None:
                lend[p][t] = lls[p]
    pre = ten.preemption
    caps = None
    if pre is not None and pre.max_gpus_per_epoch is not None:
        caps = apportion(pre.max_gpus_per_epoch, running_gpus)
    out: list[Tenant] = []
    for p in range(k):
        upd: dict[str, Any] = {"quota": quota[p]}
        if ten.borrow_limit is not None:
            upd["borrow_limit"] = borrow[p]
        if ten.lend_limit is not None:
            upd["lend_limit"] = lend[p]
        if caps is not None and pre is not None:
            upd["preemption"] = pre.model_copy(update={"max_gpus_per_epoch": caps[p]})
        out.append(ten.model_copy(update=upd))
    return out


def split(state: ClusterState, k: int, seed: int = 0, options: Options | None = None) -> Split:
    """Split ``state`` into ``k`` part snapshots (see the module docstring); linear in the
    snapshot. ``options`` become every part's options."""
    t0 = time.monotonic()
    snap = state.snapshot
    types = list(state.type_names)
    nodes = snap.nodes
    home = _home_parts(state, k, seed, types)
    fleet_cap = {t: 0 for t in types}
    for n in nodes:
        fleet_cap[n.gpu_type] += n.gpus
    node_part = _node_parts(state, k, seed, types, home, fleet_cap)
    cap = {t: [0] * k for t in types}
    for n in nodes:
        if n.available:
            cap[n.gpu_type][node_part[n.id]] += n.gpus
    part_jobs: list[list[Job]] = [[] for _ in range(k)]
    own, running_gpus = _running_jobs(state, k, node_part, part_jobs)
    leftover = _route_pending(state, k, home, cap, fleet_cap, part_jobs)
    tenants: list[list[Tenant]] = [[] for _ in range(k)]
    for ten in snap.tenants:
        sliced = _slice_tenant(state, ten, k, home[ten.id], types, own, running_gpus[ten.id])
        for p in range(k):
            tenants[p].append(sliced[p])
    part_nodes: list[list[Node]] = [[] for _ in range(k)]
    for n in nodes:
        part_nodes[node_part[n.id]].append(n)
    parts = [
        snap.model_copy(
            update={
                "nodes": part_nodes[p],
                "tenants": tenants[p],
                "jobs": part_jobs[p],
                "workflows": None,
                "options": options,
            }
        )
        for p in range(k)
    ]
    return Split(parts, node_part, leftover, time.monotonic() - t0, part_slack(state, k, node_part))


def part_slack(state: ClusterState, k: int, node_part: dict[str, int]) -> list[dict[str, int]]:
    """Per part, the victim slack per type (:func:`~optsched.engine.rules.victim_slack`) its
    model may use: the fleet's, in the part holding the best-effort gang that sets it (the first
    in snapshot order), 0 in the others. The fleet has one slack per type (best-effort jobs
    inside quota free at most the guaranteed in-quota starts' GPUs plus it); each part's own
    would add up to more, and the merged decision would fail invariant 3."""
    slack = victim_slack(state)
    owner: dict[str, int] = {}
    for job in state.running():
        if job.qos == "guaranteed" or job.on_loan or job.id in state.host_of or job.allocation is None:
            continue
        t = state.job_type(job)
        if (
            t not in owner and slack.get(t, 0) > 0 and job.gpus - 1 == slack[t]
            and all(state.node_available(r.node) for r in job.allocation)
        ):
            owner[t] = node_part[job.allocation[0].node]
    return [{t: (s if owner.get(t) == p else 0) for t, s in slack.items()} for p in range(k)]

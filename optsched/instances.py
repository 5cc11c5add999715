"""Random valid snapshots for instances, tests and benchmarks (``optsched generate``).

Sizes:

* ``tiny``: 2 types, 4 nodes, 3 tenants, a dozen jobs;
* ``venus``: the simulated Venus cluster of Lucid (135 nodes x 8 GPUs, 15 tenants sized as
  Venus' virtual clusters), about 600 running and 500 pending jobs;
* ``large``: 10,000 GPUs of three types, 40 tenants, 5,000 pending jobs;
* ``fleet``: ``gpus`` GPUs (any multiple of 8 up to 100,000 and beyond) of the same three types,
  one tenant per 250 GPUs (at least 20), one pending job per two GPUs; built by
  :func:`generate_fleet` in time linear in the fleet (buckets of nodes by free GPUs), so a
  100,000-GPU snapshot takes seconds.

``tree=True`` (``optsched generate --tree``) adds a quota tree (orgs -> teams -> tenants, with
group borrow and lend limits) above the same tenants.

Job sizes follow Venus' skew (most jobs 1 GPU, a tail of 8-64 GPU gangs), runtimes are
lognormal around Venus' median, and running jobs fill roughly 85% of the GPUs, some of them on
loan and some as MPS pairs, so every model feature is exercised.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

Size = Literal["tiny", "venus", "medium", "large", "fleet"]
FLEET_NODES = {"medium": 312, "large": 1250}
"""8-GPU nodes of the multi-type fleets: ~2,500 GPUs / 1,250 pending and ~10,000 GPUs / 5,000
pending."""

VENUS_VCS = {
    "vcJsw": 32,
    "vcvGl": 20,
    "vcKeu": 12,
    "vcYVn": 11,
    "vcefl": 10,
    "vcEwI": 9,
    "vcHvQ": 8,
    "vcLTP": 8,
    "vc8Gr": 6,
    "vcWoR": 5,
    "vcKrE": 4,
    "vchbv": 4,
    "vchA3": 3,
    "vcvlY": 2,
    "vcgkz": 1,
}
GANG_SIZES = np.array([1, 2, 4, 8, 16, 32, 64])
GANG_PROBS = np.array([0.55, 0.12, 0.12, 0.14, 0.04, 0.02, 0.01])
RUNNING_GANG_PROBS = np.array([0.8, 0.1, 0.05, 0.045, 0.005, 0.0, 0.0])
"""Running jobs skew smaller (big gangs finish or wait), giving ~600 running at Venus size."""


@dataclass(frozen=True)
class _Spec:
    types: dict[str, dict[str, Any]]
    nodes_per_type: dict[str, int]
    gpus_per_node: int
    tenants: dict[str, int]  # tenant -> nodes of quota (spread over types)
    running_fill: float
    pending: int


def _spec(size: Size, rng: np.random.Generator) -> _Spec:
    if size == "tiny":
        return _Spec(
            {
                "A100": {"memory_gib": 80, "mps": True, "speed": 1.0},
                "V100": {"memory_gib": 32, "mps": False, "speed": 0.55},
            },
            {"A100": 2, "V100": 2},
            4,
            {"t0": 2, "t1": 1, "t2": 1},
            0.6,
            8,
        )
    if size == "venus":
        return _Spec(
            {"V100": {"memory_gib": 32, "mps": True, "speed": 1.0}},
            {"V100": 135},
            8,
            dict(VENUS_VCS),
            0.85,
            500,
        )
    nodes = FLEET_NODES[size]
    n_tenants = 40 if size == "large" else 20
    tenants = {f"team{k:02d}": int(n) for k, n in enumerate(rng.integers(5, 60, size=n_tenants))}
    scale = nodes / sum(tenants.values())
    tenants = {k: max(1, round(v * scale)) for k, v in tenants.items()}
    total = sum(tenants.values())
    return _Spec(
        {
            "H100": {"memory_gib": 80, "mps": True, "speed": 1.0},
            "A100": {"memory_gib": 80, "mps": True, "speed": 0.6},
            "V100": {"memory_gib": 32, "mps": False, "speed": 0.3},
        },
        {"H100": total // 4, "A100": total // 2, "V100": total - total // 4 - total // 2},
        8,
        tenants,
        0.85,
        5000 if size == "large" else 1250,
    )



def _set_running(
    j: dict[str, Any], alloc: list[dict[str, Any]], over: bool, now: float, rng: np.random.Generator
) -> None:
    """Make a generated job run on ``alloc``: started up to 20,000 s ago, submitted up to 3,000 s
    before that; a job placed above its tenant's quota runs on loan, as best-effort."""
    start = now - float(rng.uniform(0, 20000))
    j.update(
        {
            "allocation": alloc,
            "start_s": round(start, 1),
            "on_loan": over,
            "submit_s": round(start - float(rng.uniform(0, 3000)), 1),
        }
    )
    if over:
        j["qos"] = "best_effort"


def _mps_hosts(
    jobs: list[dict[str, Any]], type_of: dict[str, str], mps_types: set[str]
) -> list[dict[str, Any]]:
    """Running best-effort jobs on an MPS type with a known memory below 12 GiB: hosts a small
    guest may share."""
    return [
        j
        for j in jobs
        if j["qos"] == "best_effort"
        and type_of[j["allocation"][0]["node"]] in mps_types
        and j["memory_gib"] is not None
        and j["memory_gib"] < 12
    ]


def _set_guest(g: dict[str, Any], h: dict[str, Any]) -> None:
    """Make ``g`` a 1-GPU best-effort MPS guest on the first GPU of host ``h`` (both shareable)."""
    g.update(
        {
            "qos": "best_effort",
            "gpus": 1,
            "gpu_types": None,
            "memory_gib": 4.0,
            "allocation": [h["allocation"][0]],
            "start_s": h["start_s"],
            "on_loan": False,
            "submit_s": h["submit_s"],
            "colocated": True,
            "guest_of": h["id"],
            "shareable": True,
        }
    )
    h["colocated"] = h["shareable"] = True

def quota_tree(snap: dict[str, Any], seed: int = 0) -> dict[str, Any]:
    """Put the tenants of ``snap`` under a 3-level quota tree (in place; returns ``snap``).

    Tenants are the projects, split in tenant order over at least two orgs (about four tenants
    each), two to a team (``org<k>`` -> ``org<k>.team<j>`` -> tenants). Orgs state their
    quota (the sum of their tenants'); each group gets, at random, a ``borrow_limit`` and a
    ``lend_limit`` on some types of half its subtree quota, never below what the running loans
    need across the group (so no limit forces a reclaim on the first epoch). Its own random
    stream (from ``seed``), so the flat part is the same as without a tree.
    """
    rng = np.random.default_rng([seed, 7919])
    tenants = snap["tenants"]
    types = list(snap["gpu_types"])
    groups: list[dict[str, Any]] = []
    teams: list[tuple[str, list[dict[str, Any]]]] = []
    n_orgs = max(2, -(-len(tenants) // 4)) if len(tenants) > 1 else 1
    per_org = -(-len(tenants) // n_orgs)
    for o in range(n_orgs):
        org = f"org{o}"
        in_org = tenants[o * per_org : (o + 1) * per_org]
        if not in_org:
            continue
        groups.append({"id": org, "parent": None})
        for k in range(0, len(in_org), 2):
            team = f"{org}.team{k // 2}"
            groups.append({"id": team, "parent": org})
            members = in_org[k : k + 2]
            for ten in members:
                ten["parent"] = team
            teams.append((team, members))
    below: dict[str, list[dict[str, Any]]] = {g["id"]: [] for g in groups}
    for team, members in teams:
        below[team] += members
        below[team.split(".")[0]] += members
    into, out = _tree_flows(snap, groups)
    for k, grp in enumerate(groups):
        quota = {t: sum(m["quota"].get(t, 0) for m in below[grp["id"]]) for t in types}
        if grp["parent"] is None:
            grp["quota"] = quota
        for name, prob, flow in (("borrow_limit", 0.5, into), ("lend_limit", 0.4, out)):
            if rng.random() < prob:
                picked = [t for t in types if rng.random() < 0.6] or types[:1]
                # never below what the running loans already need across the group
                grp[name] = {t: max(quota[t] // 2, flow.get((k, t), 0)) for t in picked}
    snap["groups"] = groups
    return snap


def _tree_flows(
    snap: dict[str, Any], groups: list[dict[str, Any]]
) -> tuple[dict[tuple[int, str], int], dict[tuple[int, str], int]]:
    """The loans running use needs across each group (inside first, no group limits), so the
    generated limits never force a reclaim on the first epoch."""
    from optsched.engine.quota_tree import LoanMatcher, build_tree, group_flows
    from optsched.schema.snapshot import Snapshot

    tree = build_tree(Snapshot.model_validate({**snap, "groups": groups}))
    node_type = {n["id"]: n["gpu_type"] for n in snap["nodes"]}
    tix = {t["id"]: i for i, t in enumerate(snap["tenants"])}
    held: dict[tuple[int, str], int] = {}
    for j in snap["jobs"]:
        if j["state"] == "running" and not j.get("guest_of"):
            key = (tix[j["tenant"]], node_type[j["allocation"][0]["node"]])
            held[key] = held.get(key, 0) + j["gpus"]
    loans: list[tuple[int, int, str, int]] = []
    for t in snap["gpu_types"]:
        supply: dict[int, int] = {}
        demands: list[tuple[int, int]] = []
        for i, ten in enumerate(snap["tenants"]):
            idle = ten["quota"].get(t, 0) - held.get((i, t), 0)
            lim = (ten.get("lend_limit") or {}).get(t)
            if idle > 0:
                supply[i] = idle if lim is None else min(idle, lim)
            elif idle < 0:
                demands.append((i, -idle))
        matched = LoanMatcher(tree, t, supply, range(len(snap["tenants"]))).cover(demands)
        loans += [(lender, b, t, g) for lender, b, g in matched]
    return group_flows(tree, loans)


def generate(
    size: Size = "tiny",
    seed: int = 0,
    now: float = 86400.0,
    tree: bool = False,
    elastic: float = 0.0,
    gpus: int | None = None,
    shapes: bool = False,
) -> dict[str, Any]:
    """A valid format-1 snapshot as a JSON-ready dict.

    ``shapes``: node shape in full (:func:`with_shapes`): CPUs, host memory and a two-level
    topology on the nodes; per-node CPU and memory needs, explicit ``gpus_per_node``, topology
    requests and fractional shares on the jobs; running jobs laid out by their shape.

    ``tree``: with a quota tree above the tenants (:func:`quota_tree`). ``elastic`` in [0, 1]:
    the share of jobs (MPS pairs excepted) made elastic, drawn from a generator of their own, so
    the rest of the snapshot is the same as with ``elastic=0``: sizes from ``max(1, gpus // 2)``
    to ``2 gpus``, in steps of ``gpus // 2`` for even gangs of 4 or more (else 1), a resize
    overhead of 10-120 s. ``gpus``: the fleet size, ``fleet`` only (:func:`generate_fleet`).
    """
    if size == "fleet":
        return generate_fleet(gpus if gpus is not None else 10_000, seed=seed, now=now)
    if gpus is not None:
        raise ValueError("gpus: only the 'fleet' size takes a GPU count")
    if tree:
        return quota_tree(generate(size, seed, now, elastic=elastic, shapes=shapes), seed)
    if shapes:
        return with_shapes(generate(size, seed, now, elastic=elastic), seed)
    if not 0.0 <= elastic <= 1.0:
        raise ValueError(f"elastic: a share in [0, 1], got {elastic}")
    rng = np.random.default_rng(seed)
    spec = _spec(size, rng)
    type_names = list(spec.types)
    nodes: list[dict[str, Any]] = []
    for t in type_names:
        for k in range(spec.nodes_per_type[t]):
            nodes.append({"id": f"{t.lower()}-{k:04d}", "gpu_type": t, "gpus": spec.gpus_per_node})
    if size != "tiny" and len(nodes) > 10:
        nodes[int(rng.integers(len(nodes)))]["available"] = False
    # quotas: each tenant's nodes spread over types in proportion to the fleet
    total_nodes = sum(spec.nodes_per_type.values())
    tenant_nodes = sum(spec.tenants.values())
    tenants: list[dict[str, Any]] = []
    for tid, n in spec.tenants.items():
        quota = {}
        for t in type_names:
            share = spec.nodes_per_type[t] / total_nodes * n * total_nodes / tenant_nodes
            quota[t] = int(share * spec.gpus_per_node)
        delay = float(rng.choice([600, 1800, 3600, 7200]))
        tenants.append(
            {
                "id": tid,
                "quota": quota,
                "borrow_limit": None,
                "lend_limit": None if rng.random() < 0.8 else {type_names[0]: quota[type_names[0]] // 2},
                "qos": {"max_queue_delay_s": delay, "target": 0.95},
                "weight": 1.0,
            }
        )
    tids = list(spec.tenants)
    tprob = np.array([spec.tenants[t] for t in tids], dtype=float)
    tprob /= tprob.sum()

    def job_fields(k: int, state: str) -> dict[str, Any]:
        probs = RUNNING_GANG_PROBS if state == "running" and size != "tiny" else GANG_PROBS
        g = int(rng.choice(GANG_SIZES, p=probs))
        ten = str(rng.choice(tids, p=tprob))
        guaranteed = rng.random() < 0.6
        rt = float(np.clip(rng.lognormal(np.log(900), 1.8), 30, 30 * 86400))
        known = rng.random() < 0.7
        return {
            "id": f"{state[0]}{k:05d}",
            "tenant": ten,
            "qos": "guaranteed" if guaranteed else "best_effort",
            "gpus": g,
            "gpu_types": None if rng.random() < 0.7 else [str(rng.choice(type_names))],
            "state": state,
            "runtime_s": round(rt, 1) if known else None,
            "memory_gib": round(float(rng.uniform(2, 30)), 1) if rng.random() < 0.8 else None,
            "restart_cost_s": round(float(rng.uniform(0, 600)), 1),
            "features": {
                "user": f"u{int(rng.integers(0, 200)):03d}",
                "name": f"job-{int(rng.integers(0, 50))}",
            },
        }

    # running jobs: fill each type, respecting quotas (own) or marking on loan
    free = {n["id"]: list(range(n["gpus"])) for n in nodes if n.get("available", True)}
    node_type = {n["id"]: n["gpu_type"] for n in nodes}
    use: dict[tuple[str, str], int] = {}
    quotas = {(t["id"], ty): t["quota"][ty] for t in tenants for ty in type_names}
    lendable = {ty: sum(quotas[(t, ty)] for t in tids) for ty in type_names}
    jobs: list[dict[str, Any]] = []
    target = spec.running_fill * sum(len(v) for v in free.values())
    placed = 0
    k = 0
    attempts = 0
    while placed < target and attempts < 20000:
        attempts += 1
        j = job_fields(k, "running")
        allowed = j["gpu_types"] or type_names
        cands = [n for n in free if node_type[n] in allowed and len(free[n]) >= j["gpus"]]
        if not cands and j["gpus"] > spec.gpus_per_node:
            cands = [n for n in free if node_type[n] in allowed and free[n]]
        if not cands:
            continue
        ty = node_type[cands[0]]
        cands = [n for n in cands if node_type[n] == ty]
        u = use.get((j["tenant"], ty), 0)
        over = u + j["gpus"] > quotas[(j["tenant"], ty)]
        if over and (
            lendable[ty] - sum(use.get((t, ty), 0) for t in tids) < j["gpus"] or j["qos"] == "guaranteed"
        ):
            continue
        alloc: list[dict[str, Any]] = []
        for n in sorted(cands, key=lambda n: -len(free[n])):
            take = min(j["gpus"] - len(alloc), len(free[n]))
            alloc += [{"node": n, "gpu": g} for g in free[n][:take]]
            free[n] = free[n][take:]
            if len(alloc) == j["gpus"]:
                break
        if len(alloc) < j["gpus"]:
            continue
        use[(j["tenant"], ty)] = u + j["gpus"]
        j["gpu_types"] = j["gpu_types"] if j["gpu_types"] is None or ty in j["gpu_types"] else None
        _set_running(j, alloc, over, now, rng)
        jobs.append(j)
        placed += j["gpus"]
        k += 1
    # a few MPS pairs: a small best-effort guest on a shareable best-effort host
    hosts = _mps_hosts(jobs, node_type, {t for t in type_names if spec.types[t]["mps"]})
    for h in hosts[: max(1, len(hosts) // 10)]:
        g = job_fields(k, "running")
        k += 1
        _set_guest(g, h)
        jobs.append(g)
    for p in range(spec.pending):
        j = job_fields(p, "pending")
        j["submit_s"] = round(now - float(rng.exponential(2400)), 1)
        jobs.append(j)
    if elastic > 0:
        erng = np.random.default_rng([seed, 11])
        for j in jobs:
            if erng.random() >= elastic or j.get("colocated"):
                continue
            g = j["gpus"]
            j["min_gpus"] = max(1, g // 2)
            j["max_gpus"] = 2 * g
            if g >= 4 and g % 2 == 0:
                j["gpus_step"] = g // 2  # data-parallel sizes: 4, 8, 12, 16 for a gang of 8
            j["resize_overhead_s"] = round(float(erng.uniform(10, 120)), 1)
    return {
        "format": 1,
        "now": now,
        "epoch_s": 60.0,
        "gpu_types": spec.types,
        "nodes": nodes,
        "tenants": tenants,
        "jobs": jobs,
    }


CPU_PER_GPU_MILLI = 12_000
"""Generated nodes: 12 CPUs per GPU (96 on an 8-GPU node, as DGX-class nodes have)."""
MEMORY_PER_GPU_MIB = 128 * 1024
"""Generated nodes: 128 GiB of host memory per GPU."""
RACK_NODES = 8
"""Generated topology: nodes per rack; ``BLOCK_RACKS`` racks per block."""
BLOCK_RACKS = 4


def with_shapes(snap: dict[str, Any], seed: int = 0) -> dict[str, Any]:
    """``snap`` with node shape in full (from a generator of its own, so the rest stays as it
    was): nodes get CPUs and host memory (:data:`CPU_PER_GPU_MILLI`, :data:`MEMORY_PER_GPU_MIB`)
    and a place in a ``block > rack`` topology (:data:`RACK_NODES` nodes a rack,
    :data:`BLOCK_RACKS` racks a block, per GPU type); every job needs 4-14 CPUs and 32-160 GiB of
    host memory per GPU on each of its nodes; a fifth of the pending multi-node jobs require one
    rack or one block and a tenth prefer one; a tenth of the pending 2-8 GPU jobs state
    ``gpus_per_node`` (half the gang on each of two nodes, where that is a whole number); a
    twentieth of the 1-GPU best-effort jobs are fractional shares (250, 500 or 750 thousandths);
    and running jobs are laid out again by their shape (node by node, most free first), those
    that no longer fit dropped."""
    rng = np.random.default_rng([seed, 19])
    snap = {**snap, "nodes": [dict(n) for n in snap["nodes"]], "jobs": [dict(j) for j in snap["jobs"]]}
    snap["topology"] = {"levels": ["block", "rack"]}
    per_type: dict[str, int] = {}
    for n in snap["nodes"]:
        k = per_type.get(n["gpu_type"], 0)
        per_type[n["gpu_type"]] = k + 1
        rack = k // RACK_NODES
        n["cpu_milli"] = CPU_PER_GPU_MILLI * n["gpus"]
        n["memory_mib"] = MEMORY_PER_GPU_MIB * n["gpus"]
        n["topology"] = {"block": f"{n['gpu_type'].lower()}-b{rack // BLOCK_RACKS}", "rack": f"r{rack}"}
    largest = max(n["gpus"] for n in snap["nodes"])
    for j in snap["jobs"]:
        if j.get("guest_of"):
            continue  # an MPS guest lives in its host's allocation
        g = j["gpus"]
        j["cpu_milli"] = int(rng.integers(4, 15)) * 1000 * min(g, largest)
        j["memory_mib"] = int(rng.integers(32, 161)) * 1024 * min(g, largest)
        if j["state"] != "pending" or j.get("min_gpus") is not None or j.get("max_gpus") is not None:
            continue
        u = rng.random()
        if g > largest and u < 0.3:
            level = "rack" if g <= RACK_NODES * largest else "block"
            j["topology"] = {"level": level, "mode": "required" if u < 0.2 else "preferred"}
        elif 2 <= g <= largest and g % 2 == 0 and u < 0.1:
            j["gpus_per_node"] = g // 2
        elif g == 1 and j["qos"] == "best_effort" and u < 0.05:
            j["gpu_milli"] = int(rng.choice([250, 500, 750]))
    _lay_out_running(snap)
    return snap


def _lay_out_running(snap: dict[str, Any]) -> None:
    """Lay the running jobs out again by their default shape (MPS guests on their hosts'
    GPUs); a job whose shape no longer fits the nodes, with its guests, is dropped."""
    nodes = [n for n in snap["nodes"] if n.get("available", True)]
    free = {n["id"]: list(range(n["gpus"])) for n in nodes}
    cpu = {n["id"]: n["cpu_milli"] for n in nodes}
    mem = {n["id"]: n["memory_mib"] for n in nodes}
    of_type: dict[str, list[str]] = {}
    for n in nodes:
        of_type.setdefault(n["gpu_type"], []).append(n["id"])
    largest = {t: max(n["gpus"] for n in snap["nodes"] if n["gpu_type"] == t) for t in of_type}
    keep: list[dict[str, Any]] = []
    placed: dict[str, list[dict[str, Any]]] = {}
    for j in snap["jobs"]:
        if j["state"] != "running" or j.get("guest_of"):
            continue
        t = next(n["gpu_type"] for n in snap["nodes"] if n["id"] == j["allocation"][0]["node"])
        g, big = j["gpus"], largest[t]
        pieces = [g] if g <= big else [big] * (g // big) + ([g % big] if g % big else [])
        alloc: list[dict[str, Any]] = []
        used: list[str] = []
        for piece in pieces:
            fits = [
                nid for nid in of_type[t]
                if nid not in used and len(free[nid]) >= piece
                and cpu[nid] >= j["cpu_milli"] and mem[nid] >= j["memory_mib"]
            ]
            if not fits:
                break
            nid = min(fits, key=lambda x: (len(free[x]), x))
            used.append(nid)
            alloc += [{"node": nid, "gpu": gpu} for gpu in free[nid][:piece]]
        if len(alloc) < g:
            continue
        for nid in used:
            take = sum(1 for a in alloc if a["node"] == nid)
            free[nid] = free[nid][take:]
            cpu[nid] -= j["cpu_milli"]
            mem[nid] -= j["memory_mib"]
        j["allocation"] = alloc
        placed[j["id"]] = alloc
        keep.append(j)
    for j in snap["jobs"]:
        if j["state"] == "running" and j.get("guest_of"):
            host = placed.get(j["guest_of"])
            if host is not None:
                j["allocation"] = [host[0]]
                keep.append(j)
        elif j["state"] == "pending":
            keep.append(j)
    snap["jobs"] = keep


FLEET_TYPES: dict[str, dict[str, Any]] = {
    "H100": {"memory_gib": 80, "mps": True, "speed": 1.0},
    "A100": {"memory_gib": 80, "mps": True, "speed": 0.6},
    "V100": {"memory_gib": 32, "mps": False, "speed": 0.3},
}


def generate_fleet(gpus: int, seed: int = 0, now: float = 86400.0) -> dict[str, Any]:
    """A fleet-scale snapshot of ``gpus`` GPUs (8 per node; a quarter H100, half A100, a quarter
    V100), one tenant per 250 GPUs (at least 20), ``gpus // 2`` pending jobs and running jobs on
    about 85% of the GPUs (some on loan, a few MPS pairs), with the same job mix as ``large``.

    Linear in the fleet: random fields are drawn as arrays, and running jobs are placed from
    per-type buckets of nodes keyed by their free GPUs (best fit for gangs up to a node, whole
    free nodes for larger gangs), never by scanning the node list.
    """
    if gpus < 64 or gpus % 8:
        raise ValueError(f"gpus: a fleet has a multiple of 8 GPUs, at least 64 (got {gpus})")
    rng = np.random.default_rng(seed)
    per_node = 8
    n_nodes = gpus // per_node
    names = list(FLEET_TYPES)
    counts = {"H100": n_nodes // 4, "A100": n_nodes // 2}
    counts["V100"] = n_nodes - counts["H100"] - counts["A100"]
    nodes: list[dict[str, Any]] = []
    for t in names:
        nodes += [{"id": f"{t.lower()}-{k:05d}", "gpu_type": t, "gpus": per_node} for k in range(counts[t])]
    down = int(rng.integers(n_nodes))
    nodes[down]["available"] = False
    n_ten = max(20, gpus // 250)
    weights = rng.integers(5, 60, size=n_ten).astype(float)
    tids = [f"team{k:03d}" for k in range(n_ten)]
    tenants: list[dict[str, Any]] = []
    quota_of: dict[tuple[str, str], int] = {}
    for k, tid in enumerate(tids):
        quota = {t: int(weights[k] / weights.sum() * counts[t] * per_node) for t in names}
        quota_of.update({(tid, t): q for t, q in quota.items()})
        tenants.append(
            {
                "id": tid,
                "quota": quota,
                "borrow_limit": None,
                "lend_limit": None if rng.random() < 0.8 else {names[0]: quota[names[0]] // 2},
                "qos": {"max_queue_delay_s": float(rng.choice([600, 1800, 3600, 7200])), "target": 0.95},
                "weight": 1.0,
            }
        )
    tprob = weights / weights.sum()

    def draw(n: int, state: str) -> list[dict[str, Any]]:
        probs = RUNNING_GANG_PROBS if state == "running" else GANG_PROBS
        gang = rng.choice(GANG_SIZES, size=n, p=probs)
        ten = rng.choice(n_ten, size=n, p=tprob)
        guaranteed = rng.random(n) < 0.6
        rt = np.clip(rng.lognormal(np.log(900), 1.8, size=n), 30, 30 * 86400)
        known = rng.random(n) < 0.7
        mem = rng.uniform(2, 30, size=n)
        has_mem = rng.random(n) < 0.8
        restrict = rng.random(n) < 0.3
        only = rng.integers(0, len(names), size=n)
        restart = rng.uniform(0, 600, size=n)
        user = rng.integers(0, 200, size=n)
        jname = rng.integers(0, 50, size=n)
        return [
            {
                "id": f"{state[0]}{k:06d}",
                "tenant": tids[int(ten[k])],
                "qos": "guaranteed" if guaranteed[k] else "best_effort",
                "gpus": int(gang[k]),
                "gpu_types": [names[int(only[k])]] if restrict[k] else None,
                "state": state,
                "runtime_s": round(float(rt[k]), 1) if known[k] else None,
                "memory_gib": round(float(mem[k]), 1) if has_mem[k] else None,
                "restart_cost_s": round(float(restart[k]), 1),
                "features": {"user": f"u{int(user[k]):03d}", "name": f"job-{int(jname[k])}"},
            }
            for k in range(n)
        ]

    # buckets[t][f]: available nodes of type t with f free GPUs (dict as an ordered set)
    buckets: dict[str, list[dict[str, None]]] = {t: [{} for _ in range(per_node + 1)] for t in names}
    free: dict[str, list[int]] = {}
    for n in nodes:
        if n.get("available", True):
            free[n["id"]] = list(range(per_node))
            buckets[n["gpu_type"]][per_node][n["id"]] = None
    type_of = {n["id"]: n["gpu_type"] for n in nodes}
    cap = {t: sum(per_node for n in nodes if n["gpu_type"] == t and n.get("available", True)) for t in names}
    lendable = {t: sum(quota_of[(tid, t)] for tid in tids) for t in names}
    used = dict.fromkeys(names, 0)
    use: dict[tuple[str, str], int] = {}

    def take(node: str, g: int) -> list[dict[str, Any]]:
        t, f = type_of[node], len(free[node])
        del buckets[t][f][node]
        got, free[node] = free[node][:g], free[node][g:]
        buckets[t][f - g][node] = None
        return [{"node": node, "gpu": x} for x in got]

    def place(t: str, g: int) -> list[dict[str, Any]] | None:
        b = buckets[t]
        if g <= per_node:
            for f in range(g, per_node + 1):
                if b[f]:
                    return take(next(iter(b[f])), g)
            return None
        if len(b[per_node]) * per_node < g:
            return None
        alloc: list[dict[str, Any]] = []
        while len(alloc) < g:
            alloc += take(next(iter(b[per_node])), min(per_node, g - len(alloc)))
        return alloc

    target = 0.85 * sum(cap.values())
    jobs: list[dict[str, Any]] = []
    placed = 0
    batch = draw(int(target), "running")
    for j in batch:
        if placed >= target:
            break
        allowed = j["gpu_types"] or names
        t = allowed[int(rng.integers(len(allowed)))]
        g = j["gpus"]
        if used[t] + g > cap[t]:
            continue
        u = use.get((j["tenant"], t), 0)
        over = u + g > quota_of[(j["tenant"], t)]
        if over and (lendable[t] - used[t] < g or j["qos"] == "guaranteed"):
            continue
        alloc = place(t, g)
        if alloc is None:
            continue
        use[(j["tenant"], t)] = u + g
        used[t] += g
        _set_running(j, alloc, over, now, rng)
        jobs.append(j)
        placed += g
    hosts = _mps_hosts(jobs, type_of, {t for t in names if FLEET_TYPES[t]["mps"]})
    guests = draw(max(1, len(hosts) // 10), "running")
    for k, (h, g) in enumerate(zip(hosts, guests, strict=False)):
        g["id"] = f"g{k:06d}"
        _set_guest(g, h)
        jobs.append(g)
    pending = draw(gpus // 2, "pending")
    waits = rng.exponential(2400, size=len(pending))
    for j, w in zip(pending, waits, strict=True):
        j["submit_s"] = round(now - float(w), 1)
    jobs += pending
    return {
        "format": 1,
        "now": now,
        "epoch_s": 60.0,
        "gpu_types": FLEET_TYPES,
        "nodes": nodes,
        "tenants": tenants,
        "jobs": jobs,
    }

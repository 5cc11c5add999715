"""ClusterState: a validated, index-based view of one :class:`~optsched.schema.Snapshot`.

``ClusterState.from_snapshot`` runs the semantic checks of the spec's invariant 7 (unknown
tenant or GPU type, duplicated ids, running jobs without a full allocation, a GPU given twice,
``submit_s > now``, ...) and raises :class:`~optsched.errors.SnapshotError` naming the field.
"""

from __future__ import annotations

import functools
import itertools
import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
from pydantic import ValidationError

from optsched.engine.quota_tree import EMPTY, QuotaTree, build_tree
from optsched.errors import SnapshotError, validation_error
from optsched.errors import error_path as _error_path
from optsched.schema.snapshot import Job, Node, Snapshot

GpuKey = tuple[str, int]
MEMORY_EPS = 1e-9
"""GiB of slack when a job's stated memory per GPU is compared with a GPU type's."""


def error_path(loc: tuple[int | str, ...]) -> str:
    """A pydantic error location as a field path: ``('jobs', 3, 'gpus')`` -> ``jobs[3].gpus``."""
    return _error_path(loc)


def parse_snapshot(data: str | bytes | dict[str, Any]) -> Snapshot:
    """Parse JSON text or a dict into a :class:`Snapshot`.

    Raises
    ------
    SnapshotError
        With the path of the first offending field (shape errors) or ``""`` for bad JSON.
    """
    try:
        if isinstance(data, dict):
            return Snapshot.model_validate(data)
        return Snapshot.model_validate_json(data)
    except ValidationError as exc:
        raise validation_error(exc, Snapshot) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SnapshotError("", f"malformed JSON: {exc}") from None


@dataclass(frozen=True)
class ClusterState:
    """Validated, derived lookups of one snapshot. Build with :meth:`from_snapshot`."""

    snapshot: Snapshot
    type_names: tuple[str, ...]
    tenant_ids: tuple[str, ...]
    tenant_index: dict[str, int]
    job_index: dict[str, int]
    node_index: dict[str, int]
    pool_gpus: frozenset[GpuKey]
    """GPUs of the workflow serving pool: never given to cluster jobs."""
    gpu_holders: dict[GpuKey, tuple[str, ...]] = field(default_factory=dict)
    """Running job ids on each GPU (host first)."""
    host_of: dict[str, str] = field(default_factory=dict)
    """Running MPS guest -> its host job."""
    tree: QuotaTree = EMPTY
    """The quota groups above the tenants (``Snapshot.groups``); empty for a flat snapshot."""
    gpu_shares: dict[GpuKey, int] = field(default_factory=dict)
    """GPUs held by fractional running jobs only -> the thousandths of the GPU they take
    together (at most 1000); such a GPU is in ``gpu_holders`` too, with every job on it."""
    shape_cache: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)
    """Results of :func:`optsched.engine.shape.never_fits` for this state, by shape and type, and
    of :func:`optsched.engine.ledger.node_records` by stopped jobs."""

    # ---------------------------------------------------------------- construction
    @classmethod
    def from_snapshot(cls, snapshot: Snapshot) -> ClusterState:
        """Check cross-references and build the lookups.

        Raises
        ------
        SnapshotError
            Naming the first inconsistent field.
        """
        snap = snapshot
        types = snap.gpu_types
        if not types:
            raise SnapshotError("gpu_types", "at least one GPU type is required")

        levels = _topology_levels(snap)
        node_index: dict[str, int] = {}
        for i, node in enumerate(snap.nodes):
            if node.id in node_index:
                raise SnapshotError(f"nodes[{i}].id", f"duplicated node id '{node.id}'")
            if node.gpu_type not in types:
                raise SnapshotError(f"nodes[{i}].gpu_type", f"unknown GPU type '{node.gpu_type}'")
            _validate_node_topology(node.topology, levels, i)
            node_index[node.id] = i

        tenant_index: dict[str, int] = {}
        for i, ten in enumerate(snap.tenants):
            if ten.id in tenant_index:
                raise SnapshotError(f"tenants[{i}].id", f"duplicated tenant id '{ten.id}'")
            tenant_index[ten.id] = i
            for name in ("quota", "borrow_limit", "lend_limit"):
                for key in getattr(ten, name) or {}:
                    if key not in types:
                        raise SnapshotError(f"tenants[{i}].{name}.{key}", f"unknown GPU type '{key}'")

        tree = build_tree(snap)

        pool: set[GpuKey] = set()
        if snap.workflows is not None:
            pool = _validate_workflows(snap, node_index)

        node_gpus = {n.id: n.gpus for n in snap.nodes}
        node_types = {n.id: n.gpu_type for n in snap.nodes}
        tenants_known = tenant_index.keys()
        now = snap.now

        job_index: dict[str, int] = {}
        first: dict[GpuKey, int] = {}
        """Each held GPU -> the index of the first job on it, in the order the GPUs appear."""
        shared: dict[GpuKey, list[int]] = {}
        """GPUs held by two or more jobs -> all of them, in snapshot order."""

        def hold(key: GpuKey, i: int) -> None:
            if key in first:
                shared.setdefault(key, [first[key]]).append(i)
            else:
                first[key] = i

        for i, job in enumerate(snap.jobs):
            if job.id in job_index:
                raise SnapshotError(f"jobs[{i}].id", f"duplicated job id '{job.id}'")
            job_index[job.id] = i
            if job.tenant not in tenants_known:
                raise SnapshotError(f"jobs[{i}].tenant", f"unknown tenant '{job.tenant}'")
            allowed = job.gpu_types
            if allowed is not None:
                if not allowed:
                    raise SnapshotError(f"jobs[{i}].gpu_types", "empty list; use null for any type")
                for k, t in enumerate(allowed):
                    if t not in types:
                        raise SnapshotError(f"jobs[{i}].gpu_types[{k}]", f"unknown GPU type '{t}'")
            if job.submit_s > now:
                raise SnapshotError(
                    f"jobs[{i}].submit_s", f"submitted in the future ({job.submit_s} > now {snap.now})"
                )
            _validate_elastic(job, i)
            _validate_shape(job, i, levels)
            if job.state == "pending":
                if (job.allocation, job.start_s, job.guest_of) != (None, None, None):  # (named on a fault)
                    for name in ("allocation", "start_s", "guest_of"):
                        if getattr(job, name) is not None:
                            raise SnapshotError(f"jobs[{i}].{name}", "only running jobs have this field")
                if job.on_loan or job.colocated:
                    raise SnapshotError(
                        f"jobs[{i}].{'on_loan' if job.on_loan else 'colocated'}",
                        "only running jobs have this field",
                    )
                continue
            # running
            p = f"jobs[{i}]"
            alloc = job.allocation
            if alloc is None:
                raise SnapshotError(f"{p}.allocation", "a running job needs its allocation")
            if len(alloc) != job.gpus:
                raise SnapshotError(
                    f"{p}.allocation",
                    f"has {len(alloc)} GPUs but the job asks for {job.gpus}",
                )
            if job.start_s is None:
                raise SnapshotError(f"{p}.start_s", "a running job needs its start time")
            if job.start_s > now:
                raise SnapshotError(f"{p}.start_s", f"start in the future ({job.start_s} > now)")
            if job.start_s < job.submit_s:
                raise SnapshotError(f"{p}.start_s", "starts before it was submitted")
            keys = [(ref.node, ref.gpu) for ref in alloc]
            if _allocation_ok(keys, node_gpus, node_types, allowed, pool):
                if first.keys().isdisjoint(keys):
                    first.update(zip(keys, itertools.repeat(i)))  # no GPU shared so far: in bulk
                else:
                    for key in keys:
                        hold(key, i)
                continue
            # something is wrong with it: the GPU-by-GPU walk below names the first fault
            seen: set[GpuKey] = set()
            jtype: str | None = None
            for k, ref in enumerate(alloc):
                nid, gpu = ref.node, ref.gpu
                n_gpus = node_gpus.get(nid)
                if n_gpus is None:
                    raise SnapshotError(f"{p}.allocation[{k}].node", f"unknown node '{nid}'")
                if gpu >= n_gpus:
                    raise SnapshotError(
                        f"{p}.allocation[{k}].gpu",
                        f"GPU index {gpu} out of range for node '{nid}' ({n_gpus} GPUs)",
                    )
                key = (nid, gpu)
                if key in seen:
                    raise SnapshotError(f"{p}.allocation[{k}]", f"GPU {nid}/{gpu} listed twice")
                seen.add(key)
                if key in pool:
                    raise SnapshotError(
                        f"{p}.allocation[{k}]", f"GPU {nid}/{gpu} belongs to the workflow pool"
                    )
                t = node_types[nid]
                if jtype is None:
                    jtype = t
                elif t != jtype:
                    raise SnapshotError(f"{p}.allocation[{k}]", f"mixes GPU types '{jtype}' and '{t}'")
                if allowed is not None and t not in allowed:
                    raise SnapshotError(f"{p}.allocation[{k}]", f"GPU type '{t}' is not allowed for this job")
                hold(key, i)

        host_of: dict[str, str] = {}
        for i, job in enumerate(snap.jobs):
            if job.guest_of is None:
                continue
            if job.guest_of not in job_index or snap.jobs[job_index[job.guest_of]].state != "running":
                raise SnapshotError(f"jobs[{i}].guest_of", f"unknown running job '{job.guest_of}'")

        jobs = snap.jobs
        alone = [(job.id,) for job in jobs]
        # every GPU held as if by its first job alone (the common case), then the GPUs shared or
        # held by fractional jobs, in the same order, put right
        gpu_holders: dict[GpuKey, tuple[str, ...]] = {key: alone[i] for key, i in first.items()}
        gpu_shares: dict[GpuKey, int] = {}
        fractional_jobs = {x for x, job in enumerate(jobs) if job.is_fractional}
        special = (
            [key for key, i in first.items() if key in shared or i in fractional_jobs]
            if shared or fractional_jobs
            else []
        )
        pairs: dict[tuple[Any, ...], tuple[str, str]] = {}
        """(GPU type, job indices) of an MPS pair found sound -> its (host, guest)."""
        for key in special:
            idxs = shared.get(key) or [first[key]]
            fractional = [x in fractional_jobs for x in idxs]
            if any(fractional):
                gpu_shares[key] = _shares(snap, key, idxs, fractional)
                gpu_holders[key] = tuple(snap.jobs[x].id for x in idxs)
                continue
            if len(idxs) == 1:
                gpu_holders[key] = (snap.jobs[idxs[0]].id,)
                continue
            t = snap.nodes[node_index[key[0]]].gpu_type
            pair = (t, *idxs)
            known = pairs.get(pair)
            if known is not None:  # the same two jobs on another GPU of the type: sound already
                gpu_holders[key] = known
                continue
            i = idxs[-1]
            where = f"jobs[{i}].allocation"
            if len(idxs) > 2:
                raise SnapshotError(where, f"GPU {key[0]}/{key[1]} is given to {len(idxs)} jobs")
            a, b = (snap.jobs[x] for x in idxs)
            if not types[t].mps:
                raise SnapshotError(where, f"GPU {key[0]}/{key[1]} is given twice on non-MPS type '{t}'")
            if not (a.colocated and b.colocated and a.is_shareable and b.is_shareable):
                raise SnapshotError(
                    where,
                    f"GPU {key[0]}/{key[1]} is given twice but '{a.id}' and '{b.id}' "
                    "are not both colocated and shareable",
                )
            host, guest = _host_guest(a, b)
            if guest.guest_of not in (None, host.id):
                raise SnapshotError(where, f"'{guest.id}' shares GPUs with '{host.id}', not its host")
            host_of[guest.id] = host.id
            gpu_holders[key] = pairs[pair] = (host.id, guest.id)

        snap = _settle_loans(snap, node_types, host_of)
        return cls(
            snapshot=snap,
            type_names=tuple(types),
            tenant_ids=tuple(t.id for t in snap.tenants),
            tenant_index=tenant_index,
            job_index=job_index,
            node_index=node_index,
            pool_gpus=frozenset(pool),
            gpu_holders=gpu_holders,
            host_of=host_of,
            tree=tree,
            gpu_shares=gpu_shares,
        )

    # ---------------------------------------------------------------- lookups
    # Derived lookups are computed once per state (``functools.cached_property`` writes the
    # instance ``__dict__`` directly, so it works on this frozen dataclass): the pipeline asks
    # for them from every stage, and a large snapshot has thousands of jobs.
    def job(self, job_id: str) -> Job:
        return self.snapshot.jobs[self.job_index[job_id]]

    @functools.cached_property
    def _node_types(self) -> dict[str, str]:
        return {n.id: n.gpu_type for n in self.snapshot.nodes}

    def node_type(self, node_id: str) -> str:
        return self._node_types[node_id]

    def node_available(self, node_id: str) -> bool:
        return self.snapshot.nodes[self.node_index[node_id]].available

    def declared_types(self, job: Job) -> tuple[str, ...]:
        """The GPU types the job lists (``gpu_types``), every type of the fleet when it lists none."""
        return tuple(job.gpu_types) if job.gpu_types is not None else self.type_names

    def memory_fits(self, job: Job, gpu_type: str) -> bool:
        """Whether a GPU of ``gpu_type`` holds the job's stated peak memory per GPU (``memory_gib``;
        a job that states none fits everywhere, predictions do not count)."""
        mem = job.memory_gib
        return mem is None or mem <= self.snapshot.gpu_types[gpu_type].memory_gib + MEMORY_EPS

    @functools.cached_property
    def _smallest_memory(self) -> float:
        return min(t.memory_gib for t in self.snapshot.gpu_types.values())

    def allowed_types(self, job: Job) -> tuple[str, ...]:
        """The GPU types the job may run on: its declared types (:meth:`declared_types`) whose
        GPUs hold its stated memory per GPU (:meth:`memory_fits`). The one rule every path
        (model, greedy, event path, partitions, simulator baselines) reads, so none starts a job
        on a type too small for it; empty when no declared type is large enough (the job is
        queued for ``gpu_memory``). A running job keeps its own type (the host runs it there)."""
        declared = tuple(job.gpu_types) if job.gpu_types is not None else self.type_names
        mem = job.memory_gib
        if mem is None or mem <= self._smallest_memory + MEMORY_EPS:
            return declared
        own = self.job_type(job) if job.state == "running" else None
        return tuple(t for t in declared if t == own or self.memory_fits(job, t))

    @functools.cached_property
    def _cluster_gpus(self) -> tuple[GpuKey, ...]:
        out: list[GpuKey] = []
        pool = self.pool_gpus
        for node in self.snapshot.nodes:
            if not node.available:
                continue
            if pool:
                out.extend((node.id, g) for g in range(node.gpus) if (node.id, g) not in pool)
            else:
                out.extend((node.id, g) for g in range(node.gpus))
        return tuple(out)

    def cluster_gpus(self) -> list[GpuKey]:
        """Every GPU on an available node that is not in the workflow pool (a fresh list)."""
        return list(self._cluster_gpus)

    def capacity(self) -> dict[str, int]:
        """Cluster GPUs per type on available nodes (pool excluded); a fresh dict."""
        return dict(self._capacity)

    @functools.cached_property
    def _capacity(self) -> dict[str, int]:
        cap = {t: 0 for t in self.type_names}
        pool = self.pool_gpus
        for node in self.snapshot.nodes:
            if not node.available:
                continue
            n = node.gpus
            if pool:
                n -= sum(1 for g in range(node.gpus) if (node.id, g) in pool)
            cap[node.gpu_type] += n
        return cap

    def quota(self, tenant: str, gpu_type: str) -> int:
        return self.snapshot.tenants[self.tenant_index[tenant]].quota.get(gpu_type, 0)

    def borrow_limit(self, tenant: str, gpu_type: str) -> int | None:
        """GPUs above quota the tenant may borrow; ``None`` = no limit (null or type absent)."""
        lim = self.snapshot.tenants[self.tenant_index[tenant]].borrow_limit
        return None if lim is None else lim.get(gpu_type)

    def lend_limit(self, tenant: str, gpu_type: str) -> int | None:
        """Idle quota the tenant may lend; ``None`` = all of it (null or type absent)."""
        lim = self.snapshot.tenants[self.tenant_index[tenant]].lend_limit
        return None if lim is None else lim.get(gpu_type)

    @functools.cached_property
    def _running(self) -> tuple[Job, ...]:
        return tuple(j for j in self.snapshot.jobs if j.state == "running")

    @functools.cached_property
    def _pending(self) -> tuple[Job, ...]:
        return tuple(j for j in self.snapshot.jobs if j.state == "pending")

    def running(self) -> list[Job]:
        """Running jobs in snapshot order (a fresh list)."""
        return list(self._running)

    @functools.cached_property
    def on_lost_nodes(self) -> frozenset[str]:
        """Running jobs holding a GPU on an unavailable node: every stage stops them (node loss)."""
        down = {n.id for n in self.snapshot.nodes if not n.available}
        if not down:
            return frozenset()
        return frozenset(j.id for j in self._running if any(r.node in down for r in j.allocation or ()))

    def pending(self) -> list[Job]:
        """Pending jobs in snapshot order (a fresh list)."""
        return list(self._pending)

    def job_type(self, job: Job) -> str:
        """GPU type of a running job."""
        assert job.allocation is not None, f"job {job.id} is not running"
        return self._node_types[job.allocation[0].node]

    @functools.cached_property
    def topology_levels(self) -> tuple[str, ...]:
        """The snapshot's topology levels, outermost first (empty: no topology)."""
        return _topology_levels(self.snapshot)

    @functools.cached_property
    def largest_node(self) -> dict[str, int]:
        """Per GPU type: the most GPUs one node of that type has (every node, available or not;
        0 for a type without nodes), what a job's default node shape is measured against
        (:func:`optsched.engine.shape.shape_of`)."""
        out = {t: 0 for t in self.type_names}
        for n in self.snapshot.nodes:
            out[n.gpu_type] = max(out[n.gpu_type], n.gpus)
        return out

    @functools.cached_property
    def available_nodes(self) -> dict[str, list[Node]]:
        """Per GPU type: its available nodes, in snapshot order."""
        out: dict[str, list[Node]] = {t: [] for t in self.type_names}
        for n in self.snapshot.nodes:
            if n.available:
                out[n.gpu_type].append(n)
        return out

    @functools.cached_property
    def node_sizes(self) -> dict[str, list[int]]:
        """Per GPU type: the GPU counts of its available nodes, largest first."""
        return {t: sorted((n.gpus for n in ns), reverse=True) for t, ns in self.available_nodes.items()}

    @functools.cached_property
    def node_profiles(self) -> dict[str, list[tuple[int, int | None, int | None, int]]]:
        """Per GPU type: its available nodes grouped by (GPUs, CPU thousandths, host memory
        MiB), with how many nodes have each: what an empty cluster could give a job, in a few
        rows rather than one per node."""
        out: dict[str, list[tuple[int, int | None, int | None, int]]] = {}
        for t, ns in self.available_nodes.items():
            count: dict[tuple[int, int | None, int | None], int] = defaultdict(int)
            for n in ns:
                count[(n.gpus, n.cpu_milli, n.memory_mib)] += 1
            out[t] = [(g, c, m, k) for (g, c, m), k in count.items()]
        return out

    def domain(self, node_id: str, level: int) -> tuple[str, ...]:
        """The node's domain at topology level ``level`` (an index of ``topology_levels``): the
        names of its domains from the outermost level down to that one, so a domain is named by
        its whole path."""
        topo = self.snapshot.nodes[self.node_index[node_id]].topology or {}
        return tuple(topo[name] for name in self.topology_levels[: level + 1])


def _allocation_ok(
    keys: list[GpuKey],
    node_gpus: dict[str, int],
    node_types: dict[str, str],
    allowed: list[str] | None,
    pool: set[GpuKey],
) -> bool:
    """Whether a running job's GPUs are all sound at once: known nodes, indices in range, no GPU
    twice, none of the workflow pool, one GPU type and an allowed one. Checked in bulk (a
    snapshot holds a running GPU per busy GPU of the cluster, and this is asked for every one of
    them at every decision); on False the caller walks the GPUs to name the first fault."""
    nodes = {n for n, _ in keys}
    if len(nodes) == 1:  # the common case: one node, checked without the per-GPU generators
        (node,) = nodes
        size = node_gpus.get(node)
        if size is None or len(set(keys)) != len(keys) or max(g for _, g in keys) >= size:
            return False
        return (allowed is None or node_types[node] in allowed) and (not pool or pool.isdisjoint(keys))
    if not node_gpus.keys() >= nodes or len(set(keys)) != len(keys):
        return False
    if not all(g < node_gpus[n] for n, g in keys):
        return False
    types = {node_types[n] for n in nodes}
    if len(types) != 1 or (allowed is not None and not types <= set(allowed)):
        return False
    return not pool or pool.isdisjoint(keys)


def _validate_elastic(job: Job, i: int) -> None:
    """Elastic fields: ``min_gpus <= gpus <= max_gpus``, sizes on the ``gpus_step`` grid."""
    p = f"jobs[{i}]"
    elastic = job.min_gpus is not None or job.max_gpus is not None
    if not elastic:
        if job.gpus_step != 1:
            raise SnapshotError(f"{p}.gpus_step", "only elastic jobs (min_gpus/max_gpus) have a step")
        if job.resize_overhead_s:
            raise SnapshotError(f"{p}.resize_overhead_s", "only elastic jobs (min_gpus/max_gpus) resize")
        return
    lo, hi = job.size_range
    if lo > job.gpus:
        raise SnapshotError(f"{p}.min_gpus", f"min_gpus {lo} is above gpus {job.gpus}")
    if hi < job.gpus:
        raise SnapshotError(f"{p}.max_gpus", f"max_gpus {hi} is below gpus {job.gpus}")
    if (hi - lo) % job.gpus_step:
        raise SnapshotError(
            f"{p}.gpus_step", f"gpus_step {job.gpus_step} does not divide max_gpus - min_gpus = {hi - lo}"
        )
    if (job.gpus - lo) % job.gpus_step:
        raise SnapshotError(
            f"{p}.gpus",
            f"gpus {job.gpus} is not an allowed size (min_gpus {lo} + a multiple of gpus_step "
            f"{job.gpus_step})",
        )


def _topology_levels(snap: Snapshot) -> tuple[str, ...]:
    """The declared topology levels; a level named twice is refused."""
    if snap.topology is None:
        return ()
    levels = tuple(snap.topology.levels)
    for k, name in enumerate(levels):
        if name in levels[:k]:
            raise SnapshotError(f"topology.levels[{k}]", f"level '{name}' is declared twice")
    return levels


def _validate_node_topology(topo: dict[str, str] | None, levels: tuple[str, ...], i: int) -> None:
    """A node names its domain at every declared level, and at no other."""
    if topo is None:
        if levels:
            raise SnapshotError(
                f"nodes[{i}].topology", f"missing: the snapshot declares levels {list(levels)}"
            )
        return
    for name in topo:
        if name not in levels:
            raise SnapshotError(f"nodes[{i}].topology.{name}", f"undeclared topology level '{name}'")
    for name in levels:
        if name not in topo:
            raise SnapshotError(f"nodes[{i}].topology", f"missing level '{name}'")


def _validate_shape(job: Job, i: int, levels: tuple[str, ...]) -> None:
    """Node shape, fractional GPUs and topology requests of one job."""
    p = f"jobs[{i}]"
    if job.gpu_milli is not None:
        if job.gpus != 1:
            raise SnapshotError(
                f"{p}.gpu_milli",
                f"a fractional job takes a share of one GPU (gpus must be 1, got {job.gpus})",
            )
        if job.is_elastic:
            raise SnapshotError(f"{p}.gpu_milli", "an elastic job takes whole GPUs")
    if job.gpus_per_node is not None:
        if job.spread:
            raise SnapshotError(f"{p}.gpus_per_node", "a job that spreads (spread: true) has no node shape")
        if job.is_elastic:
            raise SnapshotError(
                f"{p}.gpus_per_node", "an elastic job spreads over nodes: it has no node shape"
            )
        if job.gpus % job.gpus_per_node:
            raise SnapshotError(
                f"{p}.gpus_per_node",
                f"gpus {job.gpus} is not a whole number of nodes of {job.gpus_per_node} GPUs",
            )
    if job.topology is not None and job.topology.level not in levels:
        raise SnapshotError(f"{p}.topology.level", f"undeclared topology level '{job.topology.level}'")


def _shares(snap: Snapshot, key: GpuKey, idxs: list[int], fractional: list[bool]) -> int:
    """The thousandths of GPU ``key`` its fractional running jobs take; a GPU that holds a
    fractional job holds fractional jobs only, whose shares sum to at most 1000."""
    from optsched.schema.limits import MILLI_PER_GPU

    where = f"jobs[{idxs[-1]}].allocation"
    if not all(fractional):
        whole = next(snap.jobs[x].id for x, f in zip(idxs, fractional, strict=True) if not f)
        raise SnapshotError(
            where, f"GPU {key[0]}/{key[1]} holds a fractional job and '{whole}', which takes whole GPUs"
        )
    total = sum(snap.jobs[x].gpu_milli or 0 for x in idxs)
    if total > MILLI_PER_GPU:
        raise SnapshotError(
            where, f"GPU {key[0]}/{key[1]}: the shares on it sum to {total} > {MILLI_PER_GPU}"
        )
    return total


def _host_guest(a: Job, b: Job) -> tuple[Job, Job]:
    if a.guest_of == b.id:
        return b, a
    if b.guest_of == a.id:
        return a, b
    ka = (a.start_s or 0.0, a.id)
    kb = (b.start_s or 0.0, b.id)
    return (a, b) if ka <= kb else (b, a)


def _validate_workflows(snap: Snapshot, node_index: dict[str, int]) -> set[GpuKey]:
    wf = snap.workflows
    assert wf is not None
    pool: set[GpuKey] = set()
    for i, dev in enumerate(wf.pool):
        p = f"workflows.pool[{i}]"
        if dev.node not in node_index:
            raise SnapshotError(f"{p}.node", f"unknown node '{dev.node}'")
        node = snap.nodes[node_index[dev.node]]
        if dev.gpu >= node.gpus:
            raise SnapshotError(f"{p}.gpu", f"GPU index {dev.gpu} out of range for node '{dev.node}'")
        if dev.key() in pool:
            raise SnapshotError(p, f"GPU {dev.node}/{dev.gpu} listed twice in the pool")
        pool.add(dev.key())
        mem = 0.0
        for k, m in enumerate(dev.resident):
            if m not in wf.models:
                raise SnapshotError(f"{p}.resident[{k}]", f"unknown model '{m}'")
            mem += wf.models[m].memory_gib
        if len(set(dev.resident)) != len(dev.resident):
            raise SnapshotError(f"{p}.resident", "a model is listed twice")
        if mem > snap.gpu_types[node.gpu_type].memory_gib + 1e-9:
            raise SnapshotError(f"{p}.resident", "resident models exceed the GPU's memory")
    _validate_lending(snap, node_index)
    for name, model in wf.models.items():
        for t in model.load_s or {}:
            if t not in snap.gpu_types:
                raise SnapshotError(f"workflows.models.{name}.load_s.{t}", f"unknown GPU type '{t}'")
    tenants = {t.id for t in snap.tenants}
    sessions: set[str] = set()
    for i, ses in enumerate(wf.sessions):
        p = f"workflows.sessions[{i}]"
        if ses.id in sessions:
            raise SnapshotError(f"{p}.id", f"duplicated session id '{ses.id}'")
        sessions.add(ses.id)
        if ses.tenant not in tenants:
            raise SnapshotError(f"{p}.tenant", f"unknown tenant '{ses.tenant}'")
        if ses.arrival_s > snap.now:
            raise SnapshotError(f"{p}.arrival_s", "arrives in the future")
        ids: dict[str, int] = {}
        for k, act in enumerate(ses.activations):
            if act.id in ids:
                raise SnapshotError(f"{p}.activations[{k}].id", f"duplicated activation id '{act.id}'")
            ids[act.id] = k
        graph: nx.DiGraph = nx.DiGraph()
        graph.add_nodes_from(ids)
        for k, act in enumerate(ses.activations):
            ap = f"{p}.activations[{k}]"
            if act.model not in wf.models:
                raise SnapshotError(f"{ap}.model", f"unknown model '{act.model}'")
            for di, dep in enumerate(act.after):
                if dep not in ids:
                    raise SnapshotError(f"{ap}.after[{di}]", f"unknown activation '{dep}'")
                graph.add_edge(dep, act.id)
            if act.state == "running":
                if act.device is None or act.start_s is None:
                    raise SnapshotError(f"{ap}.device", "a running activation needs device and start_s")
                if act.device.key() not in pool:
                    raise SnapshotError(f"{ap}.device", "device is not in the workflow pool")
                if act.start_s > snap.now:
                    raise SnapshotError(f"{ap}.start_s", "start in the future")
            for dep in act.after:
                dstate = ses.activations[ids[dep]].state
                if act.state in ("running", "done") and dstate != "done":
                    raise SnapshotError(f"{ap}.state", f"'{act.state}' before its dependency '{dep}' is done")
        if not nx.is_directed_acyclic_graph(graph):
            raise SnapshotError(f"{p}.activations", "dependencies form a cycle")
    return pool


def _validate_lending(snap: Snapshot, node_index: dict[str, int]) -> None:
    """Lent pool GPUs (``lent_by``) and ``pool_lending`` name known tenants and types, and a
    tenant's lent GPUs of a type fit in its quota of that type."""
    wf = snap.workflows
    assert wf is not None
    quota = {t.id: t.quota for t in snap.tenants}
    lent: dict[tuple[str, str], int] = defaultdict(int)
    for i, dev in enumerate(wf.pool):
        p = f"workflows.pool[{i}]"
        if dev.lent_by is None:
            if dev.lent_since_s is not None:
                raise SnapshotError(f"{p}.lent_since_s", "only lent GPUs (lent_by) have this field")
            continue
        if dev.lent_by not in quota:
            raise SnapshotError(f"{p}.lent_by", f"unknown tenant '{dev.lent_by}'")
        if dev.lent_since_s is not None and dev.lent_since_s > snap.now:
            raise SnapshotError(f"{p}.lent_since_s", "lent in the future")
        t = snap.nodes[node_index[dev.node]].gpu_type
        lent[(dev.lent_by, t)] += 1
        if lent[(dev.lent_by, t)] > quota[dev.lent_by].get(t, 0):
            raise SnapshotError(
                f"{p}.lent_by",
                f"tenant '{dev.lent_by}' lends {lent[(dev.lent_by, t)]} '{t}' GPUs to the pool, "
                f"beyond its quota {quota[dev.lent_by].get(t, 0)}",
            )
    pl = wf.pool_lending
    if pl is None:
        return
    for k, t in enumerate(pl.gpu_types):
        if t not in snap.gpu_types:
            raise SnapshotError(f"workflows.pool_lending.gpu_types[{k}]", f"unknown GPU type '{t}'")
    for k, ten in enumerate(pl.lenders or []):
        if ten not in quota:
            raise SnapshotError(f"workflows.pool_lending.lenders[{k}]", f"unknown tenant '{ten}'")
    if pl.max_size is not None and pl.max_size < pl.min_size:
        raise SnapshotError("workflows.pool_lending.max_size", "smaller than min_size")
    if pl.return_drain_s > pl.grow_drain_s:
        raise SnapshotError("workflows.pool_lending.return_drain_s", "larger than grow_drain_s")


def load_state(data: str | bytes | dict[str, Any]) -> ClusterState:
    """Parse and validate a snapshot in one step."""
    return ClusterState.from_snapshot(parse_snapshot(data))


def _settle_loans(snap: Snapshot, node_types: dict[str, str], host_of: dict[str, str]) -> Snapshot:
    """The snapshot with stale ``on_loan`` flags cleared.

    A running job keeps the ``on_loan`` flag it started with, but its tenant's own use may drop
    later (a job inside its quota ends or is stopped): then the tenant's quota holds the job and
    it is no longer borrowing. Per (tenant, type), while the quota less the GPUs of the tenant's
    running jobs not on loan (MPS guests excluded) holds one of its on-loan jobs, that job is
    taken as inside quota: guaranteed jobs first, then by start time, then id. Without this a
    job could be reclaimed for a lender and start again inside its own quota one epoch later.
    """
    own: dict[tuple[str, str], int] = defaultdict(int)
    loaned: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, job in enumerate(snap.jobs):
        if job.state != "running" or job.id in host_of or job.allocation is None:
            continue
        key = (job.tenant, node_types[job.allocation[0].node])
        if job.on_loan:
            loaned[key].append(i)
        else:
            own[key] += job.gpus
    if not loaned:
        return snap
    quota = {t.id: t.quota for t in snap.tenants}
    settled: list[int] = []
    for key, idxs in loaned.items():
        room = quota[key[0]].get(key[1], 0) - own[key]
        if room <= 0:
            continue
        idxs.sort(key=lambda i: (snap.jobs[i].qos != "guaranteed", snap.jobs[i].start_s, snap.jobs[i].id))
        for i in idxs:
            g = snap.jobs[i].gpus
            if g <= room:
                room -= g
                settled.append(i)
    if not settled:
        return snap
    jobs = list(snap.jobs)
    for i in settled:
        jobs[i] = jobs[i].model_copy(update={"on_loan": False})
    return snap.model_copy(update={"jobs": jobs})

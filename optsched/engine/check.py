"""The independent invariant checker: the executable form of ``docs/snapshot-format.md``.

``check_decision(state, decision)`` returns every broken invariant of a decision (section
"What every decision holds" of that page), written without any solver:

==  ==================  =================================================  =============================
 #  name                rule                                               function
==  ==================  =================================================  =============================
 1  gpu-sharing         a GPU holds one job, or on an ``mps`` type two     ``check_gpu_sharing``
                        shareable jobs whose memory fits together, or
                        fractional jobs whose shares sum to at most 1000
 2  placement           gang all-or-nothing, one allowed type, available   ``check_placement``
                        nodes, no GPU given twice, running jobs keep theirs ``check_resize``
                        (a type with less memory per GPU than a started
                        job's stated ``memory_gib`` is not allowed;
                        elastic jobs: one allowed size; a resize grows
                        onto GPUs free in the snapshot or keeps a subset)
 3  preemption          only preemptible / on-loan / guest / unavailable-  ``check_preemption``
                        node jobs are preempted; guaranteed in-quota jobs
                        never for another tenant; operator controls
                        (``min-runtime``, ``preemption-cap``); the same
                        for shrinking an elastic job; in-quota best-      ``check_best_effort_victims``
                        effort jobs only for guaranteed in-quota starts
                        (the engine's rule, with invariant 8)
 4  capacity-and-loans  per type: use within capacity, use above quota     ``check_capacity_and_loans``
                        covered by loans within borrow and lend limits,
                        at every level of the quota tree (group
                        borrow/lend limits, subtree use: ``_check_groups``),
                        lenders lend idle quota; old over-quota use may
                        stay when no lender can cover it (listed in
                        ``kept_over_quota``, verified against the rule)
 5  start-or-queue      every pending job exactly once in ``start`` or     ``check_start_or_queue``
                        ``queue``
 6  workflow-plan       workflow plan rules                                ``check_workflow_plan``
 8  work-conservation   no pending job stays queued while free GPUs of an  ``check_work_conservation``
                        allowed type (large enough for its stated memory)  ``check_reservations``
                        hold it in its node shape, with its CPU and host
                        memory, and its tenant's idle quota could
                        hold it, unless they are held for a reservation
                        that starts before it would end; reservations
                        are well formed and no start that outlives one
                        uses its held GPUs
 9  pool-lending        cluster GPUs lent to the workflow pool are free,   ``check_pool_decision``
                        of allowed types and lenders, from idle quota
                        within lend limits; returns are idle lent GPUs
 10 node-shape          a start lies on one distinct node per piece of     ``check_node_shape``
                        its shape, inside one domain of a required
                        topology level; nodes that get a start or a grown
                        job hold the CPU and host memory of their jobs
==  ==================  =================================================  =============================

With lent pool GPUs or a ``pool`` decision, invariants 1-8 are checked on the cluster as the
pool decision leaves it (``optsched.engine.workflows.check.effective_state``: lent GPUs are pool GPUs
and count in their lender's quota as use).

Invariant 7 (bad input is rejected) is checked when the snapshot is read
(:meth:`optsched.engine.state.ClusterState.from_snapshot`), not here.
"""

from __future__ import annotations

import functools
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from operator import itemgetter

from optsched.engine.quota_tree import group_flows
from optsched.engine.state import ClusterState, GpuKey
from optsched.engine.violations import INVARIANT_NAMES, Violation
from optsched.engine.workflows.check import (
    check_pool_decision,
    check_workflow_plan,
    effective_state,
    lent_devices,
)
from optsched.schema.decision import Decision, PreemptReason, Reservation, ResizeReason, Start
from optsched.schema.limits import MILLI_PER_GPU
from optsched.schema.snapshot import GpuRef, GpuType, Job

__all__ = [
    "INVARIANT_NAMES",
    "Violation",
    "check_best_effort_victims",
    "check_capacity_and_loans",
    "check_decision",
    "check_gpu_sharing",
    "check_node_shape",
    "check_placement",
    "check_preemption",
    "check_reservations",
    "check_resize",
    "check_start_or_queue",
    "check_work_conservation",
    "over_quota_note",
    "tenant_use",
]

EPS = 1e-6

def over_quota_note(tenant: str, gpu_type: str, gpus: int) -> str:
    """The ``solver.notes`` line a decision carries for use kept above quota (amended invariant 4),
    for people: the checker reads the typed ``Decision.kept_over_quota`` instead.

    ``over_quota_note("a", "A100", 3)`` is
    ``"over-quota: tenant a keeps 3 'A100' GPUs above quota with no lender to cover them"``.
    """
    return (
        f"over-quota: tenant {tenant} keeps {gpus} '{gpu_type}' GPUs above quota "
        "with no lender to cover them"
    )


def _declared_over_quota(
    state: ClusterState, decision: Decision, out: list[Violation]
) -> dict[tuple[str, str], int]:
    """(tenant, GPU type) -> GPUs that ``decision.kept_over_quota`` declares kept over quota;
    unknown names and repeated pairs are reported in ``out`` (and the repeats left out)."""
    declared: dict[tuple[str, str], int] = {}
    for k, entry in enumerate(decision.kept_over_quota):
        where = f"kept_over_quota[{k}]"
        if entry.tenant not in state.tenant_index:
            out.append(Violation(4, f"{where}: unknown tenant '{entry.tenant}'", (entry.tenant,)))
            continue
        if entry.gpu_type not in state.snapshot.gpu_types:
            out.append(Violation(4, f"{where}: unknown GPU type '{entry.gpu_type}'", (entry.tenant,)))
            continue
        key = (entry.tenant, entry.gpu_type)
        if key in declared:
            msg = f"{where}: tenant '{entry.tenant}' on '{entry.gpu_type}' is listed twice"
            out.append(Violation(4, msg, (entry.tenant,)))
            continue
        declared[key] = entry.gpus
    return declared


@dataclass(frozen=True)
class _After:
    """The cluster as the decision leaves it."""

    holders: dict[GpuKey, list[str]]
    """GPU -> job ids on it (kept running and started), host first."""
    guests: dict[str, list[str]]
    """guest job id -> host ids."""
    types: dict[str, str]
    """job id -> GPU type, for every job holding GPUs after the decision."""
    preempted: set[str]
    started: dict[str, Job]
    use: dict[tuple[str, str], int]
    """(tenant, type) -> GPUs held after the decision, MPS guests excluded (see :func:`tenant_use`)."""
    sizes: dict[str, int]
    """job id -> GPUs it holds after the decision, for every kept running and started job."""
    state: ClusterState
    node_types: dict[str, str]
    """node id -> its GPU type, for every node of the snapshot."""
    tenant_of: dict[str, str]
    """job id -> its tenant, for every running and started job (every job in ``holders``)."""
    milli_of: dict[str, int]
    """job id -> its ``gpu_milli``, for the fractional jobs among those of ``tenant_of``."""
    run_facts: dict[str, tuple[str, bool, int, str]]
    """running job id -> (``qos``, ``on_loan``, ``gpus``, GPU type) as the snapshot has them."""
    start_loan: dict[str, bool]
    """started job id -> ``on_loan`` of its last entry in ``decision.start``."""
    colocated: list[Start]
    """The entries of ``decision.start`` with ``colocated_with``, in order (known jobs or not)."""
    start_rows: list[tuple[int, Start, Job, list[GpuKey]]]
    """(index in ``decision.start``, the entry, its job, its GPUs) for each entry of a known job,
    in order: the checks read the GPUs from here rather than from the entries again."""

    @functools.cached_property
    def shared(self) -> list[tuple[GpuKey, list[str]]]:
        """GPUs held by more than one job, in GPU order."""
        return sorted((k, list(ids)) for k, ids in self.holders.items() if len(ids) > 1)

    @functools.cached_property
    def on_node(self) -> dict[str, set[str]]:
        """node id -> the jobs holding GPUs on it after the decision."""
        out: dict[str, set[str]] = defaultdict(set)
        last: object = None
        last_node = ""
        for (node, _), ids in self.holders.items():
            if ids is last and node == last_node:
                continue  # the next GPU of the same kept job on the same node: nothing new
            out[node].update(ids)
            last, last_node = ids, node
        return out

    @functools.cached_property
    def unavailable(self) -> frozenset[str]:
        """The ids of the snapshot's unavailable nodes."""
        return frozenset(n.id for n in self.state.snapshot.nodes if not n.available)

    @functools.cached_property
    def lost(self) -> frozenset[str]:
        """The running jobs with a GPU on an unavailable node: those the snapshot's GPUs of such
        nodes hold (every GPU of a running job is in ``ClusterState.gpu_holders``)."""
        state = self.state
        holders0 = state.gpu_holders
        out: set[str] = set()
        for n in state.snapshot.nodes:
            if not n.available:
                for g in range(n.gpus):
                    out.update(holders0.get((n.id, g), ()))
        return frozenset(out)

    @functools.cached_property
    def free_share(self) -> dict[GpuKey, int]:
        """Every GPU on an available node outside the workflow pool -> the thousandths of it no
        job holds after the decision (1000 free, 0 for a GPU a whole-GPU job holds)."""
        state = self.state
        out: dict[GpuKey, int] = {}
        share_left: dict[tuple[str, ...], int] = {}
        pool = state.pool_gpus
        holders = self.holders
        milli = self.milli_of
        for n in state.snapshot.nodes:
            if not n.available:
                continue
            nid = n.id
            for g in range(n.gpus):
                key = (nid, g)
                if pool and key in pool:
                    continue
                ids = holders.get(key)
                if not ids:
                    out[key] = MILLI_PER_GPU
                    continue
                if len(ids) == 1:
                    m = milli.get(ids[0])
                    out[key] = 0 if m is None else MILLI_PER_GPU - m
                    continue
                sig = tuple(ids)
                left = share_left.get(sig)
                if left is None:  # the same jobs on the next GPU leave the same share
                    if all(j in milli for j in ids):
                        left = MILLI_PER_GPU - sum(milli[j] for j in ids)
                    else:
                        left = 0
                    share_left[sig] = left
                out[key] = left
        return out

    @functools.cached_property
    def free_nodes(self) -> dict[str, list[tuple[str, int, int]]]:
        """GPU type -> (node, whole GPUs free, largest free share of one GPU) for each available
        node of the type with something free after the decision."""
        whole: dict[str, int] = defaultdict(int)
        best: dict[str, int] = defaultdict(int)
        for (node, _), left in self.free_share.items():
            if left >= MILLI_PER_GPU:
                whole[node] += 1
            best[node] = max(best[node], left)
        out: dict[str, list[tuple[str, int, int]]] = defaultdict(list)
        node_types = self.node_types
        for node, share in best.items():
            if share > 0:
                out[node_types[node]].append((node, whole[node], share))
        return out

    @functools.cached_property
    def partial_share(self) -> dict[str, int]:
        """node id -> the largest free share of one of its GPUs that is not wholly free."""
        out: dict[str, int] = defaultdict(int)
        for (node, _), left in self.free_share.items():
            if left < MILLI_PER_GPU:
                out[node] = max(out[node], left)
        return out

    @functools.cached_property
    def host_left(self) -> dict[str, tuple[int | None, int | None]]:
        """node id -> (CPU thousandths, host MiB) left after the decision (None: not tracked)."""
        state = self.state
        jobs_of = state.snapshot.jobs
        jix = state.job_index
        out: dict[str, tuple[int | None, int | None]] = {}
        for n in state.snapshot.nodes:
            ncpu, nmem = n.cpu_milli, n.memory_mib
            if ncpu is None and nmem is None:
                out[n.id] = (None, None)  # neither tracked: its jobs need not be looked at
                continue
            jobs = [jobs_of[jix[j]] for j in self.on_node.get(n.id, ())]
            cpu = None if ncpu is None else ncpu - sum(j.cpu_milli or 0 for j in jobs)
            mem = None if nmem is None else nmem - sum(j.memory_mib or 0 for j in jobs)
            out[n.id] = (cpu, mem)
        return out

    @functools.cached_property
    def held_per_node(self) -> Counter[str]:
        """node id -> the GPUs of it in ``holders`` (any node named, known or not)."""
        return Counter(map(itemgetter(0), self.holders))

    @functools.cached_property
    def free_after(self) -> dict[str, int]:
        """:func:`_free_after`, computed once."""
        return _free_after(self.state, self)


def _resized(state: ClusterState, decision: Decision) -> dict[str, list[GpuRef]]:
    """The new allocation of every running job the decision resizes (first entry per job)."""
    out: dict[str, list[GpuRef]] = {}
    for rz in decision.resize:
        if rz.job in state.job_index and state.job(rz.job).state == "running":
            out.setdefault(rz.job, list(rz.allocation))
    return out


def _after(state: ClusterState, decision: Decision) -> _After:
    preempted = {p.job for p in decision.preempt}
    # start from the snapshot's GPU holders (host first on a shared GPU) and change only the
    # GPUs of preempted, resized and started jobs: a decision touches few of a large cluster's GPUs
    holders: dict[GpuKey, list[str]] = dict(state.gpu_holders)  # type: ignore[arg-type]
    guests: dict[str, list[str]] = {}
    types: dict[str, str] = {}
    host_of = state.host_of
    shared: list[GpuKey] = []  # GPUs given to a job while another holds them
    node_types = {n.id: n.gpu_type for n in state.snapshot.nodes}
    resized = _resized(state, decision)
    sizes: dict[str, int] = {}
    # each job's tenant and share, read once here (a large snapshot's jobs are slow to revisit)
    tenant_of: dict[str, str] = {}
    milli_of: dict[str, int] = {}
    run_facts: dict[str, tuple[str, bool, int, str]] = {}
    start_loan: dict[str, bool] = {}
    colocated: list[Start] = []
    start_rows: list[tuple[int, Start, Job, list[GpuKey]]] = []

    def release(jid: str, refs: list[GpuRef]) -> None:
        for ref in refs:
            key = (ref.node, ref.gpu)
            ids = holders.get(key)
            if ids is None:
                continue
            if len(ids) == 1 and ids[0] == jid:  # the common case: it held the GPU alone
                del holders[key]
                continue
            left = [j for j in ids if j != jid]
            if left:
                holders[key] = left
            else:
                del holders[key]

    def take(jid: str, keys: list[GpuKey]) -> None:
        for key in keys:
            ids = holders.get(key)
            if ids:
                holders[key] = [*ids, jid]
                shared.append(key)
            else:
                holders[key] = [jid]

    for job in state.running():
        jid = job.id
        alloc = job.allocation
        assert alloc is not None
        tenant_of[jid] = job.tenant
        jt = node_types[alloc[0].node]
        run_facts[jid] = (job.qos, job.on_loan, job.gpus, jt)
        m = job.gpu_milli
        if m is not None and m < MILLI_PER_GPU:
            milli_of[jid] = m
        if jid in preempted:
            release(jid, alloc)
            continue
        types[jid] = jt
        if jid in resized:
            release(jid, alloc)
            take(jid, [(ref.node, ref.gpu) for ref in resized[jid]])
            sizes[jid] = len(resized[jid])
        else:
            sizes[jid] = len(alloc)
        if jid in host_of:
            guests[jid] = [host_of[jid]]
    started: dict[str, Job] = {}
    jobs = state.snapshot.jobs
    jix = state.job_index
    for k, s in enumerate(decision.start):
        sj = s.job
        if s.colocated_with:
            colocated.append(s)
        i = jix.get(sj)
        if i is None:
            continue
        job = jobs[i]
        started[sj] = job
        start_loan[sj] = s.on_loan
        tenant_of[sj] = job.tenant
        m = job.gpu_milli
        if m is not None and m < MILLI_PER_GPU:
            milli_of[sj] = m
        alloc = s.allocation
        sizes[sj] = len(alloc)
        keys = [(ref.node, ref.gpu) for ref in alloc]
        start_rows.append((k, s, job, keys))
        take(sj, keys)
        if s.colocated_with:
            guests[sj] = list(s.colocated_with)
        if keys and (t := node_types.get(keys[0][0])) is not None:
            types[sj] = t
    # hosts first on each GPU given to a job while another held it (any other GPU the decision
    # gives holds one job, or none)
    for key in shared:
        ids = holders.get(key)
        if ids is not None and len(ids) > 1:
            ids.sort(key=lambda j: j in guests)
    use = _use(state, holders, guests, node_types, tenant_of, milli_of)
    return _After(
        holders,
        guests,
        types,
        preempted,
        started,
        use,
        sizes,
        state,
        node_types,
        tenant_of,
        milli_of,
        run_facts,
        start_loan,
        colocated,
        start_rows,
    )


def _shared(after: _After) -> list[tuple[GpuKey, list[str]]]:
    """GPUs held by more than one job after the decision, in GPU order (computed once)."""
    return after.shared


def _memory(job_id: str, state: ClusterState, decision: Decision) -> float | None:
    job = state.job(job_id)
    if job.memory_gib is not None:
        return job.memory_gib
    if decision.predictions and job_id in decision.predictions:
        return decision.predictions[job_id].memory_gib
    return None


def _declared_types(state: ClusterState, job: Job) -> tuple[str, ...]:
    """The types a job lists, every type when it lists none (read from the job, not the engine)."""
    return tuple(job.gpu_types) if job.gpu_types is not None else state.type_names


def _too_small(state: ClusterState, job: Job, gpu_type: str) -> float | None:
    """The GiB per GPU of ``gpu_type`` when it is below the job's *stated* ``memory_gib`` (such a
    type can never hold the job; predictions do not count), else None."""
    has = state.snapshot.gpu_types[gpu_type].memory_gib
    mem = job.memory_gib
    return has if mem is not None and mem > has + EPS else None


def _usable_types(state: ClusterState, job: Job) -> list[str]:
    """Declared types whose GPUs hold the job's stated memory: where it could start."""
    return [t for t in _declared_types(state, job) if _too_small(state, job, t) is None]


def check_gpu_sharing(state: ClusterState, decision: Decision, after: _After) -> list[Violation]:
    """Invariant 1.

    Whether a shared GPU is sound depends on its type and the jobs on it, not on which GPU it
    is: a (type, jobs) found sound is not checked again on the next GPU the same jobs share (an
    MPS pair of 8-GPU jobs shares 8 GPUs); every GPU that breaks the invariant is reported."""
    out: list[Violation] = []
    started = set(after.started)
    sound: set[tuple[str, tuple[str, ...]]] = set()
    for key, ids in _shared(after):
        if key[0] not in state.node_index:
            continue
        t = state.node_type(key[0])
        sig = (t, tuple(ids))
        if sig in sound:
            continue
        where = f"GPU {key[0]}/{key[1]}"
        bad = _sharing_faults(state, decision, where, state.snapshot.gpu_types[t], ids, started)
        if bad:
            out += bad
        else:
            sound.add(sig)
    return out


def _sharing_faults(
    state: ClusterState, decision: Decision, where: str, gtype: GpuType, ids: list[str], started: set[str]
) -> list[Violation]:
    """Invariant 1 on one shared GPU (``where``) of type ``gtype`` held by ``ids``."""
    out: list[Violation] = []
    fractional = [state.job(j).is_fractional for j in ids]
    if any(fractional):
        if not all(fractional):
            whole = next(j for j, f in zip(ids, fractional, strict=True) if not f)
            msg = f"{where} holds fractional jobs and '{whole}', which takes whole GPUs"
            out.append(Violation(1, msg, tuple(ids)))
        elif (total := sum(state.job(j).gpu_milli or 0 for j in ids)) > MILLI_PER_GPU:
            msg = f"{where}: the shares of {ids} sum to {total} > {MILLI_PER_GPU}"
            out.append(Violation(1, msg, tuple(ids)))
        return out
    if len(ids) > 2:
        out.append(Violation(1, f"{where} holds {len(ids)} jobs", tuple(ids)))
        return out
    if not gtype.mps:
        out.append(Violation(1, f"{where} is shared on a non-MPS type", tuple(ids)))
        return out
    for j in ids:
        if not state.job(j).is_shareable:
            out.append(Violation(1, f"{where}: job '{j}' is not shareable", tuple(ids)))
    if not started.intersection(ids):
        return out  # a pair that was already running
    mems = [_memory(j, state, decision) for j in ids]
    if any(m is None for m in mems):
        out.append(
            Violation(1, f"{where}: memory of {ids} unknown, cannot prove the pair fits", tuple(ids))
        )
    elif sum(m for m in mems if m is not None) > gtype.memory_gib + EPS:
        out.append(
            Violation(
                1,
                f"{where}: {ids} need {sum(m for m in mems if m is not None):.1f} GiB, "
                f"the GPU has {gtype.memory_gib:.1f}",
                tuple(ids),
            )
        )
    return out


def check_placement(state: ClusterState, decision: Decision, after: _After) -> list[Violation]:
    """Invariant 2."""
    out: list[Violation] = []
    seen_start: set[str] = set()
    jix = state.job_index
    jobs = state.snapshot.jobs
    nix = state.node_index
    nodes = state.snapshot.nodes
    pool = state.pool_gpus
    type_mem = {name: gt.memory_gib for name, gt in state.snapshot.gpu_types.items()}
    for _, s, job, keys in after.start_rows:  # (a start of an unknown job is invariant 5's)
        sj = s.job
        if sj in seen_start:
            out.append(Violation(2, f"job '{sj}' is started twice", (sj,)))
            continue
        seen_start.add(sj)
        if job.state != "pending":
            out.append(Violation(2, f"job '{sj}' is already running", (sj,)))
            continue
        alloc = s.allocation
        n_alloc = len(alloc)
        # a rigid job's only size is its gang (``Job.sizes``)
        if (n_alloc != job.gpus or job.min_gpus is not None or job.max_gpus is not None) and (
            n_alloc not in job.sizes()
        ):
            lo, hi = job.size_range
            asks = f"asks for {job.gpus}" if not job.is_elastic else (
                f"allowed sizes {lo}..{hi} in steps of {job.gpus_step}"
            )
            out.append(Violation(2, f"job '{sj}' gets {n_alloc} GPUs, {asks}", (sj,)))
        if n_alloc > 1 and len(set(keys)) != n_alloc:
            out.append(Violation(2, f"job '{sj}' lists a GPU twice", (sj,)))
        types: set[str] = set()
        for key in keys:
            rn, rg = key
            ni = nix.get(rn)
            if ni is None:
                out.append(Violation(2, f"job '{sj}' placed on unknown node '{rn}'", (sj,)))
                continue
            node = nodes[ni]
            if rg >= node.gpus:
                out.append(Violation(2, f"job '{sj}' placed on missing GPU {rn}/{rg}", (sj,)))
            if not node.available:
                out.append(Violation(2, f"job '{sj}' placed on unavailable node '{rn}'", (sj,)))
            if pool and key in pool:
                out.append(Violation(2, f"job '{sj}' placed on workflow-pool GPU {rn}/{rg}", (sj,)))
            types.add(node.gpu_type)
        if len(types) > 1:
            out.append(Violation(2, f"job '{sj}' mixes GPU types {sorted(types)}", (sj,)))
        allowed = tuple(job.gpu_types) if job.gpu_types is not None else state.type_names
        mem = job.memory_gib
        for t in types:
            if t not in allowed:
                out.append(Violation(2, f"job '{sj}' placed on type '{t}', allowed {list(allowed)}", (sj,)))
            elif not s.colocated_with and mem is not None and mem > (has := type_mem[t]) + EPS:
                # (an MPS guest's memory is checked with its host's, invariant 1; ``_too_small``)
                out.append(
                    Violation(
                        2,
                        f"job '{sj}' needs {mem:.1f} GiB per GPU, placed on type '{t}' with {has:.1f} GiB",
                        (sj,),
                    )
                )
        if s.colocated_with:
            for host in s.colocated_with:
                if host not in jix or host == sj:
                    out.append(Violation(2, f"job '{sj}' names unknown host '{host}'", (sj,)))
            for ref in alloc:
                others = [j for j in after.holders.get(ref.key(), []) if j != sj]
                if not any(h in others for h in s.colocated_with):
                    out.append(
                        Violation(
                            2,
                            f"guest '{sj}' on GPU {ref.node}/{ref.gpu} not held by its host",
                            (sj,),
                        )
                    )
    # running jobs on unavailable nodes must be stopped: those the snapshot's GPUs of such nodes
    # hold (every GPU of a running job is in ``gpu_holders``), in snapshot order
    unavailable = after.unavailable
    if unavailable:
        for jid in sorted(after.lost, key=jix.__getitem__):
            if jid in after.preempted:
                continue
            job = jobs[jix[jid]]
            assert job.allocation is not None
            bad = [r.node for r in job.allocation if r.node in unavailable]
            if bad:
                out.append(Violation(2, f"running job '{jid}' kept on unavailable node '{bad[0]}'", (jid,)))
    # a GPU given twice to jobs that are not an MPS host/guest pair (each pair asked once)
    fine: set[tuple[str, ...]] = set()
    for key, ids in _shared(after):
        if len(ids) != 2 or (pair := tuple(ids)) in fine:
            continue
        a, b = ids
        if any(state.job(j).is_fractional for j in ids) or (  # shares: invariant 1
            (after.guests.get(b) and a in after.guests[b]) or (a in after.guests and b in after.guests[a])
        ):
            fine.add(pair)
        else:
            out.append(Violation(2, f"GPU {key[0]}/{key[1]} given to both '{a}' and '{b}'", (a, b)))
    return out


def _pieces(state: ClusterState, job: Job, gpu_type: str) -> tuple[int, ...] | None:
    """The GPUs a job takes on each of its nodes on ``gpu_type``, largest first (the format's
    shape rule, restated); None for a job that may spread (``spread``, elastic)."""
    if job.spread or job.is_elastic:
        return None
    if job.is_fractional:
        return (1,)
    if job.gpus_per_node is not None:
        return (job.gpus_per_node,) * (job.gpus // job.gpus_per_node)
    largest = state.largest_node.get(gpu_type, 0)  # the snapshot's largest node of the type
    if job.gpus <= largest or largest == 0:
        return (job.gpus,)
    return (largest,) * (job.gpus // largest) + ((job.gpus % largest,) if job.gpus % largest else ())


def _domain(state: ClusterState, node_id: str, level: str) -> tuple[str, ...]:
    """A node's domain at ``level``: its domain names from the outermost level down to it."""
    levels = state.snapshot.topology.levels if state.snapshot.topology else []
    topo = state.snapshot.nodes[state.node_index[node_id]].topology or {}
    return tuple(topo.get(name, "") for name in levels[: levels.index(level) + 1])


def _host_fits(job: Job, left: tuple[int | None, int | None]) -> bool:
    """Whether a node with ``left`` (CPU, MiB) free holds the job's per-node CPU and memory."""
    cpu, mem = left
    return (cpu is None or cpu >= (job.cpu_milli or 0)) and (mem is None or mem >= (job.memory_mib or 0))


def check_node_shape(state: ClusterState, decision: Decision, after: _After) -> list[Violation]:
    """Invariant 10 (node-shape): every start lies on nodes as its shape says (one distinct node
    per piece, each with the piece's GPUs), inside one domain of a ``required`` topology level,
    and every node that gets a start or a grown job holds the CPU and host memory of all its
    jobs after the decision."""
    out: list[Violation] = []
    touched: set[str] = set()
    nix = state.node_index
    node_types = after.node_types
    for _, s, job, keys in after.start_rows:  # the starts of known jobs
        if not keys or s.colocated_with:
            continue
        if len(keys) == 1:  # one GPU: one node
            node = keys[0][0]
            if node not in nix:
                continue  # invariant 2
            touched.add(node)
            got: tuple[int, ...] = (1,)
            spread = False
        else:
            on = [key[0] for key in keys]
            if any(n not in nix for n in on):
                continue  # invariant 2
            per_node: dict[str, int] = defaultdict(int)
            for n in on:
                per_node[n] += 1
            touched.update(per_node)
            node = on[0]
            got = tuple(sorted(per_node.values(), reverse=True))
            spread = len(per_node) > 1
        if len(keys) == job.gpus:
            pieces = _pieces(state, job, node_types[node])
            if pieces is not None and got != pieces:
                out.append(
                    Violation(
                        10,
                        f"job '{s.job}' gets {'+'.join(map(str, got))} GPUs on {len(got)} node(s), its "
                        f"shape is {'+'.join(map(str, pieces))}",
                        (s.job,),
                    )
                )
        topo = job.topology
        if spread and topo is not None and topo.mode == "required":
            domains = {_domain(state, n, topo.level) for n in per_node}
            if len(domains) > 1:
                out.append(
                    Violation(
                        10,
                        f"job '{s.job}' requires one '{topo.level}' domain, gets nodes in {len(domains)}",
                        (s.job,),
                    )
                )
    for rz in decision.resize:
        if rz.job in state.job_index and rz.to_gpus > rz.from_gpus:
            touched.update(r.node for r in rz.allocation)
    host_left = after.host_left
    # a node that tracks neither CPUs nor host memory never lacks them
    for node in sorted(n for n in touched if n in host_left and host_left[n] != (None, None)):
        cpu, mem = host_left[node]
        for what, left in (("CPU thousandths", cpu), ("host memory MiB", mem)):
            if left is not None and left < 0:
                jobs = tuple(sorted(after.on_node.get(node, ())))
                msg = f"node '{node}': its jobs need {-left} {what} more than it has"
                out.append(Violation(10, msg, jobs))
    return out


def _fits_alone(
    state: ClusterState,
    after: _After,
    job: Job,
    gpu_type: str,
    gpus: int,
    held: Mapping[str, int] | None = None,
) -> bool:
    """Whether the free GPUs, CPUs and host memory after the decision hold ``job`` (at ``gpus``
    GPUs) in its shape on available nodes of ``gpu_type`` (invariant 8's test); ``held``: whole
    GPUs per node that it may not use (held for a reservation)."""
    nodes = [
        (n, max(0, free - held.get(n, 0)) if held else free, share)
        for n, free, share in after.free_nodes.get(gpu_type, ())
        if _host_fits(job, after.host_left[n])
    ]
    if job.is_fractional:
        # a node whose whole free GPUs are all held offers only its partly used GPUs' shares
        partial = after.partial_share
        return any(
            (share if free > 0 or not held else partial.get(n, 0)) >= (job.gpu_milli or 0)
            for n, free, share in nodes
        )
    pieces = _pieces(state, job, gpu_type)
    if pieces is None:
        return sum(free for _, free, _ in nodes) >= gpus
    topo = job.topology
    groups: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for n, free, _ in nodes:
        if free < pieces[-1]:
            continue
        key = _domain(state, n, topo.level) if topo and topo.mode == "required" and len(pieces) > 1 else ()
        groups[key].append(free)
    for sizes in groups.values():
        sizes.sort(reverse=True)
        if len(sizes) >= len(pieces) and all(sizes[k] >= p for k, p in enumerate(pieces)):
            return True
    return False


def check_resize(state: ClusterState, decision: Decision, after: _After) -> list[Violation]:
    """Invariants 2 and 3 for ``decision.resize``: a resized job is a running elastic job, not
    preempted, not sharing GPUs, resized once, to one of its allowed sizes; growth adds GPUs of
    its type on available nodes that no job held in the snapshot; a shrink keeps a subset of its
    GPUs and, like a preemption, needs a job that may be preempted (or runs on loan, for
    ``shrink_for_reclaim``), and never gives a guaranteed in-quota job's GPUs to another tenant.
    """
    out: list[Violation] = []
    seen: set[str] = set()
    if not decision.resize:
        return out
    start_on: dict[GpuKey, list[str]] = defaultdict(list)
    for s in decision.start:
        if s.job in after.started:
            for ref in s.allocation:
                start_on[ref.key()].append(s.job)
    for rz in decision.resize:
        jid = rz.job
        if jid not in state.job_index or state.job(jid).state != "running":
            out.append(Violation(2, f"resizes '{jid}', which is not a running job", (jid,)))
            continue
        if jid in seen:
            out.append(Violation(2, f"resizes '{jid}' twice", (jid,)))
            continue
        seen.add(jid)
        job = state.job(jid)
        assert job.allocation is not None
        if jid in after.preempted:
            out.append(Violation(2, f"'{jid}' is both preempted and resized", (jid,)))
        if not job.is_elastic:
            out.append(Violation(2, f"resizes '{jid}', which is not elastic", (jid,)))
            continue
        if job.colocated:
            out.append(Violation(2, f"resizes '{jid}', which shares its GPUs through MPS", (jid,)))
        lo, hi = job.size_range
        if rz.from_gpus != job.gpus:
            msg = f"resize of '{jid}' says from {rz.from_gpus} GPUs, it holds {job.gpus}"
            out.append(Violation(2, msg, (jid,)))
        if rz.to_gpus != len(rz.allocation):
            msg = f"resize of '{jid}' says to {rz.to_gpus} GPUs, its allocation has {len(rz.allocation)}"
            out.append(Violation(2, msg, (jid,)))
        n = len(rz.allocation)
        if n not in job.sizes():
            out.append(
                Violation(
                    2,
                    f"'{jid}' resized to {n} GPUs, allowed sizes {lo}..{hi} in steps of {job.gpus_step}",
                    (jid,),
                )
            )
        old = [r.key() for r in job.allocation]
        new = [r.key() for r in rz.allocation]
        if len(set(new)) != len(new):
            out.append(Violation(2, f"resize of '{jid}' lists a GPU twice", (jid,)))
        if n == job.gpus:
            out.append(Violation(2, f"resize of '{jid}' does not change its size", (jid,)))
            continue
        t = state.job_type(job)
        if n > job.gpus:
            if rz.reason != ResizeReason.GROW:
                out.append(Violation(2, f"'{jid}' grows but the reason is '{rz.reason.value}'", (jid,)))
            if not set(old) <= set(new):
                out.append(Violation(2, f"'{jid}' grows but drops GPUs it holds", (jid,)))
            for ref in rz.allocation:
                key = ref.key()
                if key in old:
                    continue
                i = state.node_index.get(ref.node)
                if i is None or ref.gpu >= state.snapshot.nodes[i].gpus:
                    out.append(Violation(2, f"'{jid}' grows onto missing GPU {ref.node}/{ref.gpu}", (jid,)))
                    continue
                node = state.snapshot.nodes[i]
                where = f"GPU {ref.node}/{ref.gpu}"
                if not node.available or key in state.pool_gpus:
                    out.append(Violation(2, f"'{jid}' grows onto unavailable {where}", (jid,)))
                if node.gpu_type != t:
                    msg = f"'{jid}' grows onto type '{node.gpu_type}', it runs on '{t}'"
                    out.append(Violation(2, msg, (jid,)))
                if key in state.gpu_holders:
                    out.append(
                        Violation(
                            2,
                            f"'{jid}' grows onto GPU {ref.node}/{ref.gpu}, held in the snapshot (growth "
                            "takes idle GPUs only)",
                            (jid,),
                        )
                    )
            continue
        # shrink
        if rz.reason == ResizeReason.GROW:
            out.append(Violation(2, f"'{jid}' shrinks but the reason is 'grow'", (jid,)))
        if not set(new) <= set(old):
            out.append(Violation(2, f"'{jid}' shrinks onto GPUs it does not hold", (jid,)))
        if not (job.is_preemptible or job.on_loan):
            out.append(Violation(3, f"'{jid}' is shrunk but may not be preempted", (jid,)))
        if rz.reason == ResizeReason.SHRINK_FOR_RECLAIM and not job.on_loan:
            out.append(Violation(3, f"'{jid}' shrunk for reclaim but it does not run on loan", (jid,)))
        if job.qos == "guaranteed" and not job.on_loan:
            gone = set(old) - set(new)
            for sid in sorted({x for k in gone for x in start_on.get(k, ())}):
                if after.started[sid].tenant != job.tenant:
                    out.append(
                        Violation(
                            3,
                            f"guaranteed in-quota job '{jid}' of '{job.tenant}' shrunk for '{sid}' "
                            f"of '{after.started[sid].tenant}'",
                            (jid, sid),
                        )
                    )
    return out


def check_preemption(state: ClusterState, decision: Decision, after: _After) -> list[Violation]:
    """Invariant 3."""
    out: list[Violation] = []
    seen: set[str] = set()
    jix = state.job_index
    jobs = state.snapshot.jobs
    unavailable = after.unavailable
    host_of = state.host_of
    node_unavailable, reclaim, priority = (
        PreemptReason.NODE_UNAVAILABLE,
        PreemptReason.RECLAIM,
        PreemptReason.PRIORITY,
    )
    # the GPUs of guaranteed in-quota victims -> the started jobs placed on them, and the order
    # of the starts (built once, not per preempt, and only for the GPUs asked about)
    start_on: dict[GpuKey, list[str]] | None = None
    start_order: dict[str, int] = {}

    def starts_on() -> dict[GpuKey, list[str]]:
        wanted: set[GpuKey] = set()
        for p in decision.preempt:
            i = jix.get(p.job)
            if i is None:
                continue
            job = jobs[i]
            if job.state != "running" or job.qos != "guaranteed" or job.on_loan or p.job in host_of:
                continue
            assert job.allocation is not None
            wanted.update((r.node, r.gpu) for r in job.allocation)
        on: dict[GpuKey, list[str]] = defaultdict(list)
        for k, s, _, keys in after.start_rows:  # the starts of known jobs: those started
            start_order.setdefault(s.job, k)
            for key in keys:
                if key in wanted:
                    on[key].append(s.job)
        return on

    for p in decision.preempt:
        pj = p.job
        i = jix.get(pj)
        if i is None:
            out.append(Violation(3, f"preempts unknown job '{pj}'", (pj,)))
            continue
        if pj in seen:
            out.append(Violation(3, f"preempts '{pj}' twice", (pj,)))
        seen.add(pj)
        job = jobs[i]
        if job.state != "running":
            out.append(Violation(3, f"preempts '{pj}', which is not running", (pj,)))
            continue
        assert job.allocation is not None
        on_bad_node = bool(unavailable) and pj in after.lost  # a GPU on an unavailable node
        guest = pj in host_of
        if not (job.is_preemptible or on_bad_node or job.on_loan or guest):
            out.append(Violation(3, f"'{pj}' is not preemptible", (pj,)))
            continue
        reason = p.reason
        if reason == node_unavailable and not on_bad_node:
            out.append(Violation(3, f"'{pj}' preempted for node_unavailable on available nodes", (pj,)))
        if reason == reclaim and not job.on_loan:
            out.append(Violation(3, f"'{pj}' reclaimed but it does not run on loan", (pj,)))
        # a guaranteed job inside its quota is never preempted for another tenant
        if job.qos == "guaranteed" and not job.on_loan and not guest and not on_bad_node:
            if start_on is None:
                start_on = starts_on()
            takers = {sid for r in job.allocation for sid in start_on.get((r.node, r.gpu), ())}
            for sid in sorted(takers, key=start_order.__getitem__):
                sjob = after.started[sid]
                if sjob.tenant != job.tenant:
                    out.append(
                        Violation(
                            3,
                            f"guaranteed in-quota job '{pj}' of '{job.tenant}' preempted "
                            f"for '{sid}' of '{sjob.tenant}'",
                            (pj, sid),
                        )
                    )
            if reason != priority:
                out.append(
                    Violation(
                        3,
                        f"guaranteed in-quota job '{pj}' preempted for '{reason}'",
                        (pj,),
                    )
                )
    out += _check_operator_controls(state, decision, after.lost)
    return out


def check_best_effort_victims(
    state: ClusterState, decision: Decision, after: _After | None = None
) -> list[Violation]:
    """Invariant 3, the engine's own rule (``docs/snapshot-format.md``, "What a preemption is
    for"): a best-effort job running inside its tenant's quota is stopped only for a guaranteed
    start inside quota. Per GPU type, the GPUs freed by such jobs preempted for ``priority``
    (not on loan, not MPS guests, on available nodes; a ``shrink_for_start`` of one counts the
    GPUs it gives up) are at most the GPUs of the decision's guaranteed starts with
    ``on_loan`` false on that type (MPS guests left out), plus, once there is such a start, the
    largest gang of a best-effort job running not on loan on that type less one (a gang stops
    whole, also for a smaller start); with no such start, none."""
    freed: dict[str, int] = defaultdict(int)
    victims: dict[str, list[str]] = defaultdict(list)
    priority = PreemptReason.PRIORITY
    stops: list[tuple[str, int | None]] = [(p.job, None) for p in decision.preempt if p.reason == priority]
    stops += [
        (rz.job, rz.from_gpus - len(rz.allocation))
        for rz in decision.resize
        if rz.reason == ResizeReason.SHRINK_FOR_START and rz.from_gpus > len(rz.allocation)
    ]
    if not stops:
        return []
    if after is None:
        after = _after(state, decision)
    host_of = state.host_of
    run_facts = after.run_facts  # every running job, with its type
    lost = after.lost  # running jobs with a GPU on an unavailable node
    for jid, gone in stops:
        facts = run_facts.get(jid)
        if facts is None:
            continue  # unknown, or not running
        qos, on_loan, gpus, t = facts
        if qos == "guaranteed" or on_loan or jid in host_of or jid in lost:
            continue
        freed[t] += gpus if gone is None else gone
        victims[t].append(jid)
    if not freed:
        return []
    taken: dict[str, int] = defaultdict(int)
    node_types = after.node_types
    for _, st, job, keys in after.start_rows:  # the starts of known jobs
        if st.on_loan or st.colocated_with or not keys:
            continue
        if job.qos == "guaranteed":
            taken[node_types[keys[0][0]]] += len(keys)
    gang: dict[str, int] = defaultdict(int)  # largest best-effort gang not on loan, per type
    wanted = {t for t in freed if taken[t] > 0}  # the only types whose gang is read below
    for jid, (qos, on_loan, gpus, t) in run_facts.items() if wanted else ():
        if qos == "guaranteed" or on_loan or t not in wanted or jid in host_of or jid in lost:
            continue
        if gpus > gang[t]:
            gang[t] = gpus
    allowed = {t: taken[t] + max(0, gang[t] - 1) if taken[t] > 0 else 0 for t in freed}
    return [
        Violation(
            3,
            f"best-effort in-quota jobs {sorted(victims[t])[:5]} free {g} '{t}' GPUs for priority, "
            f"guaranteed starts inside quota take {taken[t]} (at most {allowed[t]} may be freed)",
            tuple(sorted(victims[t])),
        )
        for t, g in sorted(freed.items())
        if g > allowed[t]
    ]


def _check_operator_controls(
    state: ClusterState, decision: Decision, on_lost: Collection[str]
) -> list[Violation]:
    """Invariant 3, operator controls: ``min-runtime`` (a job that has run less than its minimum
    runtime is not preempted) and ``preemption-cap`` (a tenant's preempted GPUs per decision
    stay within ``max_gpus_per_epoch``). Both count priority victims only: reclaim of on-loan
    jobs, jobs on unavailable nodes and MPS guests are exempt. Shrinking an elastic job for a
    start counts as preempting the GPUs it gives up. ``on_lost``: the running jobs with a GPU on an
    unavailable node (:attr:`_After.lost`)."""
    snap = state.snapshot
    out: list[Violation] = []
    lost: dict[str, int] = defaultdict(int)
    seen: set[str] = set()
    # (job, GPUs it gives up or None for all of them, what happens to it)
    stops: list[tuple[str, int | None, str]] = [(p.job, None, "preempted") for p in decision.preempt]
    stops += [
        (rz.job, rz.from_gpus - len(rz.allocation), "shrunk")
        for rz in decision.resize
        if rz.reason == ResizeReason.SHRINK_FOR_START and rz.from_gpus > len(rz.allocation)
    ]
    jix = state.job_index
    jobs = snap.jobs
    host_of = state.host_of
    # per tenant: the minimum runtime of its preemption controls (0 without them)
    floor = {
        t.id: t.preemption.min_runtime_s if t.preemption is not None else 0.0 for t in snap.tenants
    }
    now = snap.now
    for jid, gone, verb in stops:
        i = jix.get(jid)
        if i is None or (gone is None and jid in seen):
            continue
        if gone is None:
            seen.add(jid)
        job = jobs[i]
        if job.state != "running" or job.allocation is None or job.on_loan or jid in host_of:
            continue
        if jid in on_lost:
            continue
        minimum = job.min_runtime_s if job.min_runtime_s is not None else floor[job.tenant]
        ran = now - job.start_s if job.start_s is not None else None
        if ran is not None and ran < minimum:
            out.append(
                Violation(
                    3,
                    f"min-runtime: '{jid}' {verb} after {ran:g} s, its minimum runtime is {minimum:g} s",
                    (jid,),
                )
            )
        lost[job.tenant] += job.gpus if gone is None else gone
    for ten in snap.tenants:
        cap = ten.preemption.max_gpus_per_epoch if ten.preemption is not None else None
        if cap is not None and lost[ten.id] > cap:
            out.append(
                Violation(
                    3,
                    f"preemption-cap: tenant '{ten.id}' has {lost[ten.id]} GPUs preempted, "
                    f"max_gpus_per_epoch {cap}",
                    (ten.id,),
                )
            )
    return out


def tenant_use(state: ClusterState, after: _After) -> dict[tuple[str, str], int]:
    """GPUs per (tenant, type) after the decision; MPS guests use no quota. A fresh dict."""
    return defaultdict(int, after.use)


def _use(
    state: ClusterState,
    holders: dict[GpuKey, list[str]],
    guests: dict[str, list[str]],
    node_type: dict[str, str],
    tenant: dict[str, str],
    fractional: Collection[str],
) -> dict[tuple[str, str], int]:
    """Each GPU counts once, for the tenant of its host (its first holder that is no guest); a
    GPU holding fractional jobs counts once for each of them (a fractional job is one GPU of its
    tenant's quota). ``node_type``: node id -> GPU type; ``tenant``: job id -> tenant, for every
    job in ``holders``; ``fractional``: the fractional ones among them."""
    use: dict[tuple[str, str], int] = defaultdict(int)
    for key, ids in holders.items():
        t = node_type.get(key[0])
        if t is None:
            continue
        first = ids[0]
        if first in fractional:
            for j in ids:
                use[(tenant[j], t)] += 1
            continue
        if first not in guests:
            use[(tenant[first], t)] += 1
            continue
        host = next((j for j in ids if j not in guests), None)
        if host is None:
            continue
        use[(tenant[host], t)] += 1
    return use


def _loan_totals(
    state: ClusterState, decision: Decision, out: list[Violation] | None = None
) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], int]]:
    """GPUs received and lent per (tenant, type) by the well-formed loans of ``decision``.

    Malformed loans (unknown tenant or type, a tenant lending to itself) are left out and, when
    ``out`` is given, reported there.
    """
    lent_in: dict[tuple[str, str], int] = defaultdict(int)
    lent_out: dict[tuple[str, str], int] = defaultdict(int)
    for k, loan in enumerate(decision.loans):
        bad = False
        for who in (loan.lender, loan.borrower):
            if who not in state.tenant_index:
                if out is not None:
                    out.append(Violation(4, f"loans[{k}]: unknown tenant '{who}'", (who,)))
                bad = True
        if loan.gpu_type not in state.snapshot.gpu_types:
            if out is not None:
                out.append(Violation(4, f"loans[{k}]: unknown GPU type '{loan.gpu_type}'"))
            bad = True
        if loan.lender == loan.borrower:
            if out is not None:
                out.append(Violation(4, f"loans[{k}]: '{loan.lender}' lends to itself", (loan.lender,)))
            bad = True
        if bad:
            continue
        lent_in[(loan.borrower, loan.gpu_type)] += loan.gpus
        lent_out[(loan.lender, loan.gpu_type)] += loan.gpus
    return lent_in, lent_out


def _good_loans(state: ClusterState, decision: Decision) -> list[tuple[int, int, str, int]]:
    """The well-formed loans of ``decision`` as (lender index, borrower index, type, GPUs)."""
    tix = state.tenant_index
    return [
        (tix[ln.lender], tix[ln.borrower], ln.gpu_type, ln.gpus)
        for ln in decision.loans
        if ln.lender in tix
        and ln.borrower in tix
        and ln.lender != ln.borrower
        and ln.gpu_type in state.snapshot.gpu_types
    ]


def _check_groups(
    state: ClusterState,
    use: dict[tuple[str, str], int],
    into: dict[tuple[int, str], int],
    outof: dict[tuple[int, str], int],
    kept_ok: dict[tuple[str, str], int],
) -> list[Violation]:
    """Invariant 4 at every level of the quota tree, per group and type:

    * ``group-borrow-limit``: GPUs lent into the group by tenants outside it are within its
      ``borrow_limit``;
    * ``group-lend-limit``: GPUs lent by tenants inside it to tenants outside it are within its
      ``lend_limit``;
    * ``group-use``: the subtree's use is within its quota (the sum of its tenants' quotas) plus
      what flows in minus what flows out, plus the use its tenants keep over quota (amended
      invariant 4).
    """
    out: list[Violation] = []
    tree = state.tree
    ids = state.tenant_ids
    for g, node in enumerate(tree.groups):
        for t in state.type_names:
            gi, go = into.get((g, t), 0), outof.get((g, t), 0)
            bl, ll = tree.borrow_limit(g, t), tree.lend_limit(g, t)
            if bl is not None and gi > bl:
                out.append(
                    Violation(
                        4,
                        f"group '{node.id}' borrows {gi} '{t}' GPUs from tenants outside it, "
                        f"borrow_limit {bl}",
                        (node.id,),
                    )
                )
            if ll is not None and go > ll:
                out.append(
                    Violation(
                        4,
                        f"group '{node.id}' lends {go} '{t}' GPUs to tenants outside it, lend_limit {ll}",
                        (node.id,),
                    )
                )
            members = [ids[i] for i in node.members]
            u = sum(use.get((m, t), 0) for m in members)
            q = sum(state.quota(m, t) for m in members)
            kept = sum(kept_ok.get((m, t), 0) for m in members)
            if u > q + gi - go + kept:
                more = f" + {kept} kept over quota" if kept else ""
                out.append(
                    Violation(
                        4,
                        f"group '{node.id}' uses {u} '{t}' GPUs: quota {q} + {gi} lent in - {go} lent "
                        f"out{more}",
                        (node.id,),
                    )
                )
    return out


def check_capacity_and_loans(state: ClusterState, decision: Decision, after: _After) -> list[Violation]:
    """Invariant 4 (capacity-and-loans), with the over-quota amendment.

    A tenant whose use of a type exceeds its quota plus the loans it receives breaks the
    invariant, unless all of these hold (the use is *kept over quota*):

    (i) the uncovered excess is no larger than what the tenant's kept running jobs not on loan
        already held above its quota in the snapshot (old use, not new);
    (ii) the decision starts no non-guest job of that tenant on that type;
    (iii) no lender could cover it: every other tenant's lendable idle quota on the type
          (quota minus its use after the decision, within ``lend_limit``, minus what it already
          lends, within the room left under the limits of the quota groups the loan would
          cross) is zero, or the tenant's ``borrow_limit`` is reached;
    (iv) ``decision.kept_over_quota`` lists that tenant and type with exactly that excess.

    Conversely, every entry of ``kept_over_quota`` must be such an excess: the checker
    recomputes it from the allocations and loans and never takes the field's word for it.
    """
    out: list[Violation] = []
    cap = state.capacity()
    use = after.use
    total: dict[str, int] = defaultdict(int)  # GPUs held (a GPU of fractional jobs once)
    node_types = after.node_types
    for node, held in after.held_per_node.items():
        if node in node_types:
            total[node_types[node]] += held
    for t in state.type_names:
        if total[t] > cap[t]:
            out.append(Violation(4, f"type '{t}': {total[t]} GPUs used, capacity {cap[t]}"))
    lent_in, lent_out = _loan_totals(state, decision, out)

    # per (tenant, type): GPUs of kept running jobs not on loan, and non-guest starts
    start_loan = after.start_loan  # the last entry of each started job, as ``{s.job: s}`` keeps
    own_started: dict[tuple[str, str], int] = defaultdict(int)
    own_kept: dict[tuple[str, str], int] = defaultdict(int)
    own_old: dict[tuple[str, str], int] = defaultdict(int)  # of it, GPUs held in the snapshot
    starts: dict[tuple[str, str], list[str]] = defaultdict(list)
    guests, started_jobs, sizes = after.guests, after.started, after.sizes
    tenant_of, run_facts = after.tenant_of, after.run_facts
    for jid, jt in after.types.items():
        if jid in guests:
            continue
        key = (tenant_of[jid], jt)
        if jid in started_jobs:
            starts[key].append(jid)
            if not start_loan[jid]:
                # a rigid job counts its gang (a wrong allocation size is invariant 2's)
                job = started_jobs[jid]
                own_started[key] += sizes[jid] if job.is_elastic else job.gpus
            continue
        _, on_loan, gpus, _ = run_facts[jid]  # a kept running job
        if not on_loan:
            size = sizes[jid]
            own_kept[key] += size
            own_old[key] += gpus if gpus < size else size  # growth is new use

    def lendable(ten: str, t: str) -> int:
        """Idle quota ``ten`` could still lend on ``t`` after the decision."""
        lo = lent_out[(ten, t)]
        idle = state.quota(ten, t) - use.get((ten, t), 0) - lo
        ll = state.lend_limit(ten, t)
        return idle if ll is None else min(idle, ll - lo)

    declared = _declared_over_quota(state, decision, out)
    tree = state.tree
    into, outof = group_flows(tree, _good_loans(state, decision))
    tix = state.tenant_index

    def reach(lender: str, borrower: str, t: str) -> int:
        """What ``lender`` could still lend ``borrower`` on ``t``: its lendable idle quota, within
        the room left under the limits of every quota group the loan would cross."""
        give = lendable(lender, t)
        go, gi = tree.crossing(tix[lender], tix[borrower])
        for g in go:
            ll = tree.lend_limit(g, t)
            if ll is not None:
                give = min(give, ll - outof.get((g, t), 0))
        for g in gi:
            bl = tree.borrow_limit(g, t)
            if bl is not None:
                give = min(give, bl - into.get((g, t), 0))
        return give

    kept_ok: dict[tuple[str, str], int] = defaultdict(int)  # excess allowed as kept over quota
    for ten in state.tenant_ids:
        for t in state.type_names:
            q = state.quota(ten, t)
            u = use.get((ten, t), 0)
            li, lo = lent_in[(ten, t)], lent_out[(ten, t)]
            bl = state.borrow_limit(ten, t)
            excess = u - q - li
            if (ten, t) in declared and excess <= 0:
                out.append(
                    Violation(
                        4,
                        f"kept_over_quota lists {declared[(ten, t)]} '{t}' GPUs of tenant '{ten}', but "
                        f"its use {u} is within quota {q} + loans {li}",
                        (ten,),
                    )
                )
            if excess > 0:
                held_over = max(0, own_old[(ten, t)] - q)
                if excess > held_over:
                    more = f" ({held_over} of them ran above quota without a loan)" if held_over else ""
                    msg = f"tenant '{ten}' uses {u} '{t}' GPUs: quota {q} + loans {li}{more}"
                    out.append(Violation(4, msg, (ten,)))
                else:
                    kept_ok[(ten, t)] = excess
                    out += _kept_over_quota(
                        state, ten, t, excess, starts[(ten, t)], bl, li, reach, declared.get((ten, t))
                    )
            if bl is not None and li > bl:
                out.append(Violation(4, f"tenant '{ten}' borrows {li} '{t}' GPUs, borrow_limit {bl}", (ten,)))
            ll = state.lend_limit(ten, t)
            if ll is not None and lo > ll:
                out.append(Violation(4, f"tenant '{ten}' lends {lo} '{t}' GPUs, lend_limit {ll}", (ten,)))
            if lo > 0 and u + lo > q:
                out.append(
                    Violation(
                        4,
                        f"tenant '{ten}' lends {lo} '{t}' GPUs but uses {u} of quota {q}",
                        (ten,),
                    )
                )
    out += _check_groups(state, use, into, outof, kept_ok)
    # jobs started inside quota must fit the quota (on_loan marks borrowed capacity)
    for (ten, t), started in sorted(own_started.items()):
        q = state.quota(ten, t)
        if started + own_kept[(ten, t)] > q:
            out.append(
                Violation(
                    4,
                    f"tenant '{ten}' starts {started} '{t}' GPUs not on loan beyond its quota "
                    f"{q} ({own_kept[(ten, t)]} already held)",
                    (ten,),
                )
            )
    for s in after.colocated:  # (only a start with ``colocated_with`` is asked about)
        if s.colocated_with and s.on_loan:
            out.append(Violation(4, f"guest '{s.job}' uses no quota and cannot be on loan", (s.job,)))
        if s.colocated_with and s.job in state.job_index and s.allocation:
            # a guest keeps its host's GPUs when the host ends: a tenant that may not borrow
            # on the type would then hold GPUs above its quota with nothing to cover them
            ten = state.job(s.job).tenant
            gt = state.node_type(s.allocation[0].node) if s.allocation[0].node in state.node_index else None
            for h in s.colocated_with:
                if gt is None or h not in state.job_index or state.job(h).tenant == ten:
                    continue
                if state.borrow_limit(ten, gt) == 0:
                    out.append(
                        Violation(
                            4,
                            f"guest '{s.job}' of '{ten}' (borrow_limit 0 on '{gt}') shares host '{h}' "
                            f"of '{state.job(h).tenant}'",
                            (s.job, h),
                        )
                    )
    return out


def _kept_over_quota(
    state: ClusterState,
    ten: str,
    t: str,
    excess: int,
    started: list[str],
    borrow_limit: int | None,
    received: int,
    reach: Callable[[str, str, str], int],
    declared: int | None,
) -> list[Violation]:
    """Conditions (ii)-(iv) of the over-quota amendment for ``excess`` GPUs of ``ten`` on ``t``."""
    out: list[Violation] = []
    if started:
        ids = sorted(started)
        out.append(
            Violation(
                4,
                f"tenant '{ten}' keeps {excess} '{t}' GPUs above quota, yet the decision starts "
                f"{ids} on top of them",
                (ten, *ids),
            )
        )
    if borrow_limit is None or received < borrow_limit:
        lenders = [o for o in state.tenant_ids if o != ten and reach(o, ten, t) > 0]
        if lenders:
            can = ", ".join(f"'{o}' {reach(o, ten, t)}" for o in lenders)
            out.append(
                Violation(
                    4,
                    f"tenant '{ten}' keeps {excess} '{t}' GPUs above quota without a loan while "
                    f"others could lend idle quota ({can})",
                    (ten, *lenders),
                )
            )
    if declared != excess:
        says = "does not list it" if declared is None else f"says {declared}"
        out.append(
            Violation(
                4,
                f"tenant '{ten}' keeps {excess} '{t}' GPUs above quota but kept_over_quota {says}",
                (ten,),
            )
        )
    return out


def check_start_or_queue(state: ClusterState, decision: Decision) -> list[Violation]:
    """Invariant 5."""
    out: list[Violation] = []
    count: Counter[str] = Counter(s.job for s in decision.start)
    count.update(decision.queue)
    pending = [job.id for job in state.pending()]
    is_pending = set(pending)
    jix = state.job_index
    # (only the ids reported are sorted: a large decision names tens of thousands)
    for jid in sorted(jid for jid in count if jid not in is_pending):
        if jid not in jix:
            out.append(Violation(5, f"unknown job '{jid}' in start/queue", (jid,)))
        else:
            out.append(Violation(5, f"running job '{jid}' in start/queue", (jid,)))
    for jid in pending:
        if (n := count.get(jid, 0)) != 1:
            out.append(Violation(5, f"pending job '{jid}' appears {n} times", (jid,)))
    queued = set(decision.queue)
    for jid in decision.queue_reasons:
        if jid not in queued:
            out.append(Violation(5, f"queue reason given for '{jid}', which is not queued", (jid,)))
    for jid, at in decision.expected_start_s.items():
        if jid not in queued:
            out.append(Violation(5, f"expected start given for '{jid}', which is not queued", (jid,)))
        elif at < decision.now:
            out.append(
                Violation(5, f"expected start of '{jid}' ({at:g}) is before now ({decision.now:g})", (jid,))
            )
    return out


def _free_after(state: ClusterState, after: _After) -> dict[str, int]:
    """Free GPUs per type after the decision: capacity on available nodes (workflow pool
    excluded) minus the GPUs held by kept running and started jobs."""
    cap = state.capacity()
    held: dict[str, int] = defaultdict(int)
    available = {n.id: n.gpu_type for n in state.snapshot.nodes if n.available}
    pool = state.pool_gpus
    if pool:
        for key in after.holders:
            t = available.get(key[0])
            if t is None or key in pool:
                continue
            held[t] += 1
    else:  # GPUs held per node, then per type
        for node, n in after.held_per_node.items():
            t = available.get(node)
            if t is not None:
                held[t] += n
    return {t: cap[t] - held[t] for t in state.type_names}


_MIN_REMAINING_S = 60.0
"""The checker's own floor of a predicted remaining runtime (the look-ahead's rule, restated)."""


def _remaining_s(runtime_s: float, now: float, start_s: float | None) -> float:
    """Predicted seconds until a job ends: its predicted runtime less the time it has run, at
    least :data:`_MIN_REMAINING_S` (a pending job's is its predicted runtime)."""
    elapsed = 0.0 if start_s is None else max(0.0, now - start_s)
    return max(_MIN_REMAINING_S, runtime_s - elapsed)


def _predicted_end(state: ClusterState, decision: Decision, jid: str, started: bool) -> float | None:
    """``now`` plus the job's predicted remaining runtime (:func:`_remaining_s`) from the
    decision's own ``predictions``; None when it has none for the job."""
    pred = (decision.predictions or {}).get(jid)
    if pred is None:
        return None
    job = state.job(jid)
    now = state.snapshot.now
    return now + _remaining_s(pred.runtime_s, now, None if started else job.start_s)


def check_reservations(state: ClusterState, decision: Decision, after: _After) -> list[Violation]:
    """Invariant 8, the reservation part: each reservation is well formed and keeps its GPUs.

    A reservation names a queued job once, one of its allowed types with capacity for it, its
    gang size, a start after ``now``, and ``held`` at most its gang minus the GPUs of the kept
    running jobs of the type predicted (``decision.predictions``, :func:`_remaining_s`) to end by
    its start. Per type, the free GPUs after the decision plus the GPUs of jobs started now that
    are predicted to end by the reservation's start are at least the GPUs held: no start that
    outlives a reservation uses its held GPUs.
    """
    out: list[Violation] = []
    if not decision.reservations:
        return out
    queued = set(decision.queue)
    cap = state.capacity()
    free = after.free_after
    now = state.snapshot.now
    seen: set[str] = set()
    for k, r in enumerate(decision.reservations):
        where = f"reservations[{k}] ({r.job})"
        if r.job in seen:
            out.append(Violation(8, f"{where}: a second reservation for the job", (r.job,)))
            continue
        seen.add(r.job)
        if r.job not in queued or r.job not in state.job_index:
            out.append(Violation(8, f"{where}: the job is not queued", (r.job,)))
            continue
        job = state.job(r.job)
        if r.gpu_type not in _usable_types(state, job) or cap.get(r.gpu_type, 0) < job.gpus:
            out.append(Violation(8, f"{where}: type '{r.gpu_type}' cannot hold the job", (r.job,)))
            continue
        if r.gpus != job.gpus:
            out.append(Violation(8, f"{where}: {r.gpus} GPUs, but the job's gang is {job.gpus}", (r.job,)))
        if r.start_s <= now:
            out.append(Violation(8, f"{where}: start {r.start_s:g} is not after now ({now:g})", (r.job,)))
        if r.nodes is not None:
            out += _check_node_hold(state, decision, after, r, where)
            continue
        released = 0
        for jid, t in after.types.items():
            if t != r.gpu_type or jid in after.guests or jid in after.started:
                continue
            end = _predicted_end(state, decision, jid, False)
            if end is not None and end <= r.start_s:
                released += state.job(jid).gpus
        most = max(0, job.gpus - released)
        if r.held > most:
            out.append(
                Violation(
                    8,
                    f"{where}: holds {r.held} '{r.gpu_type}' GPUs, but its gang of {job.gpus} needs at most "
                    f"{most} beyond the {released} GPUs of running jobs predicted to end by {r.start_s:g}",
                    (r.job,),
                )
            )
            continue
        # the held GPUs are free, or used by starts that end before the reservation
        short = 0
        for jid, s_job in after.started.items():
            if after.types.get(jid) != r.gpu_type or jid in after.guests:
                continue
            end = _predicted_end(state, decision, jid, True)
            if end is not None and end <= r.start_s:
                short += s_job.gpus
        if free[r.gpu_type] + short < r.held:
            out.append(
                Violation(
                    8,
                    f"{where}: {r.held} '{r.gpu_type}' GPUs are held for it, but only {free[r.gpu_type]} "
                    f"stay free and starts predicted to end by {r.start_s:g} use {short}",
                    (r.job,),
                )
            )
    return out


def _node_ends(
    state: ClusterState, decision: Decision, after: _After, nodes: Collection[str], at: float
) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    """Per node of ``nodes``, after the decision: its whole GPUs free, the GPUs of its kept
    running jobs and those of its started jobs predicted to end by ``at`` (a GPU counted once,
    for the job that holds it first; a job without a prediction never ends)."""
    free: dict[str, int] = defaultdict(int)
    kept: dict[str, int] = defaultdict(int)
    short: dict[str, int] = defaultdict(int)
    ends: dict[tuple[str, bool], float | None] = {}
    for n in nodes:
        if n not in state.node_index:
            continue
        node = state.snapshot.nodes[state.node_index[n]]
        for g in range(node.gpus):
            key = (n, g)
            if after.free_share.get(key, 0) >= MILLI_PER_GPU:
                free[n] += 1
                continue
            ids = after.holders.get(key)
            if not ids:
                continue
            jid = ids[0]
            started = jid in after.started
            if (jid, started) not in ends:
                ends[(jid, started)] = _predicted_end(state, decision, jid, started)
            end = ends[(jid, started)]
            if end is not None and end <= at:
                (short if started else kept)[n] += 1
    return free, kept, short


def _check_node_hold(
    state: ClusterState, decision: Decision, after: _After, r: Reservation, where: str
) -> list[Violation]:
    """A reservation of a gang in its node shape (``r.nodes``): at most one held node per piece,
    each an available node of the type holding at most the gang's largest piece less the GPUs
    of its kept running jobs predicted to end by the start, the holds adding up to ``held``;
    and on each held node the free GPUs after the decision plus those of starts predicted to
    end by the start are at least its hold (no start that outlives the reservation uses them)."""
    out: list[Violation] = []
    assert r.nodes is not None
    job = state.job(r.job)
    pieces = _pieces(state, job, r.gpu_type)
    if pieces is None:
        return [Violation(8, f"{where}: holds nodes for a gang that spreads over any GPUs", (r.job,))]
    if sum(r.nodes.values()) != r.held:
        total = sum(r.nodes.values())
        out.append(Violation(8, f"{where}: its nodes hold {total} GPUs, not {r.held}", (r.job,)))
    if len(r.nodes) > len(pieces):
        out.append(
            Violation(8, f"{where}: holds {len(r.nodes)} nodes for a gang of {len(pieces)} pieces", (r.job,))
        )
    free, kept, short = _node_ends(state, decision, after, r.nodes, r.start_s)
    for n, h in sorted(r.nodes.items()):
        if (
            n not in state.node_index
            or state.node_type(n) != r.gpu_type
            or not state.node_available(n)
            or h < 1
        ):
            out.append(Violation(8, f"{where}: cannot hold {h} GPUs on node '{n}'", (r.job,)))
            continue
        most = pieces[0] - kept[n]
        if h > most:
            out.append(
                Violation(
                    8,
                    f"{where}: holds {h} GPUs on '{n}', but its largest piece of {pieces[0]} needs at "
                    f"most {max(0, most)} beyond the {kept[n]} GPUs of running jobs there predicted to "
                    f"end by {r.start_s:g}",
                    (r.job,),
                )
            )
        elif free[n] + short[n] < h:
            out.append(
                Violation(
                    8,
                    f"{where}: {h} GPUs of '{n}' are held for it, but only {free[n]} stay free and "
                    f"starts predicted to end by {r.start_s:g} use {short[n]}",
                    (r.job,),
                )
            )
    return out


def _cap_starved(state: ClusterState) -> set[str]:
    """Tenants with ``preemption.max_gpus_per_epoch = c`` and ``min(R, D - I) > c``.

    ``D``: GPUs asked for by the tenant's pending guaranteed jobs of at most ``c`` GPUs (an
    elastic job at its smallest size); ``I``: sum over types of max(0, quota - GPUs of its
    running jobs), MPS guests and jobs with a GPU on an unavailable node left out; ``R``: GPUs
    of those running jobs that are preemptible, not guaranteed, not on loan and have run at
    least their minimum runtime (``Job.min_runtime_s``, else the tenant's
    ``preemption.min_runtime_s``).
    """
    snap = state.snapshot
    caps = {
        t.id: (t.preemption.max_gpus_per_epoch, t.preemption.min_runtime_s)
        for t in snap.tenants
        if t.preemption is not None and t.preemption.max_gpus_per_epoch is not None
    }
    if not caps:
        return set()
    use: dict[tuple[str, str], int] = defaultdict(int)
    movable: dict[str, int] = defaultdict(int)
    for job in state.running():
        if job.tenant not in caps or job.id in state.host_of or job.allocation is None:
            continue
        if any(not state.node_available(r.node) for r in job.allocation):
            continue
        use[(job.tenant, state.node_type(job.allocation[0].node))] += job.gpus
        minimum = job.min_runtime_s if job.min_runtime_s is not None else caps[job.tenant][1]
        young = job.start_s is not None and snap.now - job.start_s < minimum
        if job.is_preemptible and job.qos != "guaranteed" and not job.on_loan and not young:
            movable[job.tenant] += job.gpus
    wanted: dict[str, int] = defaultdict(int)
    for job in state.pending():
        if job.tenant in caps and job.qos == "guaranteed":
            g = job.size_range[0] if job.is_elastic else job.gpus
            cap = caps[job.tenant][0]
            if cap is not None and g <= cap:
                wanted[job.tenant] += g
    out: set[str] = set()
    for ten, (cap, _) in caps.items():
        assert cap is not None
        idle = sum(max(0, state.quota(ten, t) - use[(ten, t)]) for t in state.type_names)
        if min(movable[ten], wanted[ten] - idle) > cap:
            out.add(ten)
    return out


def check_work_conservation(
    state: ClusterState, decision: Decision, after: _After | None = None
) -> list[Violation]:
    """Invariant 8 (work-conservation): no pending job stays queued while it could run.

    A pending job that the decision does not start breaks the invariant when one of its allowed
    types ``t`` has capacity on available nodes and, after the decision (its gang being, for an
    elastic job, its smallest size),

    * free GPUs of ``t`` (capacity minus the GPUs held by kept running jobs and started jobs)
      are at least its gang, and
    * its tenant's idle quota on ``t`` (quota minus the tenant's use after the decision, MPS
      guests excluded, minus what it lends of ``t`` in ``decision.loans``) is at least its gang,

    unless the free GPUs less those ``held`` by the decision's reservations on ``t`` of other
    jobs that start before it would end (``now`` + its predicted runtime, from
    ``decision.predictions``; a job without a prediction gets no such exemption) are fewer than
    its gang: starting it would use GPUs reserved for a gang planned to start earlier.

    A best-effort job is exempt on a type on which a *cap-starved* tenant (:func:`_cap_starved`)
    has quota: that tenant's guaranteed jobs need more of its GPUs than its
    ``max_gpus_per_epoch`` lets one decision free, and take GPUs of the type over the next epochs.

    A node loss: a best-effort job is exempt on every type that a guaranteed job not on loan,
    stopped by the decision for ``node_unavailable``, allows (it restarts there at the next
    epoch: a best-effort job started there would be stopped again for it).

    Linear in jobs + GPUs + tenants x types: per-type and per-(tenant, type) sums are computed
    once, then each pending job looks at its allowed types only.
    """
    if after is None:
        after = _after(state, decision)
    cap = state.capacity()  # available nodes only, workflow pool excluded
    free = after.free_after
    holds: dict[str, list[tuple[str, float, int]]] = defaultdict(list)
    node_holds: dict[str, list[tuple[str, float, dict[str, int]]]] = defaultdict(list)
    for r in decision.reservations:
        if r.nodes is not None:
            node_holds[r.gpu_type].append((r.job, r.start_s, r.nodes))
        else:
            holds[r.gpu_type].append((r.job, r.start_s, r.held))
    use = after.use
    _, lent_out = _loan_totals(state, decision)
    reasons = decision.queue_reasons
    starved = _cap_starved(state)
    off = {t for t in state.type_names if any(state.quota(ten, t) > 0 for ten in starved)}
    # types on which guaranteed jobs not on loan stopped on unavailable nodes restart next
    restart: set[str] = set()
    for p in decision.preempt:
        if p.reason == PreemptReason.NODE_UNAVAILABLE and p.job in state.job_index:
            stopped = state.job(p.job)
            if stopped.qos == "guaranteed" and not stopped.on_loan and p.job not in state.host_of:
                restart.update(state.allowed_types(stopped))  # it may restart on any of them
    # each tenant's idle quota per type, once (not per pending job and type)
    idle_of: dict[tuple[str, str], int] = {}
    for ten in state.snapshot.tenants:
        for t in state.type_names:
            key = (ten.id, t)
            idle_of[key] = ten.quota.get(t, 0) - use.get(key, 0) - lent_out.get(key, 0)
    type_mem = {name: gt.memory_gib for name, gt in state.snapshot.gpu_types.items()}
    type_names = state.type_names
    started = after.started
    out: list[Violation] = []
    for job in state.pending():
        if job.id in started:
            continue
        g = job.size_range[0] if job.is_elastic else job.gpus  # an elastic job at its smallest
        declared = job.gpu_types
        mem = job.memory_gib
        for t in type_names if declared is None else declared:
            if mem is not None and mem > type_mem[t] + EPS:
                continue  # never a type too small for its stated memory (``_usable_types``)
            if cap.get(t, 0) <= 0 or (free[t] < g and not job.is_fractional):
                continue
            if (t in off or t in restart) and job.qos != "guaranteed":
                continue  # a cap-starved tenant's guaranteed jobs, or a node loss's, take them next
            idle = idle_of[(job.tenant, t)]
            if idle < g:
                continue
            if not _fits_alone(state, after, job, t, g):
                continue  # the free GPUs do not hold it in its shape
            if holds.get(t) or node_holds.get(t):
                end = _predicted_end(state, decision, job.id, True)
                if end is not None:
                    held = sum(h for jid, at, h in holds[t] if jid != job.id and at < end)
                    if free[t] - held < g:
                        continue  # the GPUs are reserved for a gang that starts before it ends
                    on_nodes: dict[str, int] = defaultdict(int)
                    for jid, at, nodes in node_holds.get(t, ()):
                        if jid != job.id and at < end:
                            for n, h in nodes.items():
                                on_nodes[n] += h
                    if on_nodes and not _fits_alone(state, after, job, t, g, on_nodes):
                        continue  # it fits only on nodes held for a gang that starts before it ends
            why = f" (queue reason: {reasons[job.id].value})" if job.id in reasons else ""
            out.append(
                Violation(
                    8,
                    f"pending job '{job.id}' of '{job.tenant}' ({job.gpus} GPUs) stays queued while "
                    f"{free[t]} '{t}' GPUs are free and its tenant has {idle} idle '{t}' quota{why}",
                    (job.id,),
                )
            )
            break
    return out


def check_decision(
    state: ClusterState, decision: Decision, *, work_conserving: bool = True
) -> list[Violation]:
    """Every broken invariant of ``decision`` for ``state`` (empty when it is valid).

    ``work_conserving=False`` leaves out invariant 8 and :func:`check_best_effort_victims`,
    the engine's own promises: a host may check another scheduler's decisions (FIFO blocks its
    queue on purpose) with it.
    """
    out: list[Violation] = []
    if decision.now != state.snapshot.now:
        out.append(Violation(5, f"decision.now {decision.now} does not echo snapshot.now"))
    if decision.pool is not None or lent_devices(state):
        # invariant 9 on the snapshot, the others on the cluster as the pool decision leaves it
        out += check_pool_decision(state, decision)
        state = effective_state(state, decision.pool)
    after = _after(state, decision)
    out += check_gpu_sharing(state, decision, after)
    out += check_placement(state, decision, after)
    out += check_node_shape(state, decision, after)
    out += check_preemption(state, decision, after)
    out += check_resize(state, decision, after)
    out += check_capacity_and_loans(state, decision, after)
    out += check_start_or_queue(state, decision)
    if decision.workflow_plan is not None:
        out += check_workflow_plan(state, decision.workflow_plan)
    if work_conserving:  # the engine's own promises: work conservation, what preemptions are for
        out += check_work_conservation(state, decision, after)
        out += check_best_effort_victims(state, decision, after)
    out += check_reservations(state, decision, after)
    return out

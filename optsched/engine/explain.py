"""The explanation stage: why each job of a decision is where it is, in numbers that hold for
that decision.

Where it sits: in one model's epoch (:func:`optsched.engine.epoch.solve_epoch`, ``... -> fill
pass -> Decision -> check_decision``) the decode stage, :func:`optsched.engine.decode.to_decision`,
calls :func:`explain` as its last step, once the decision's preemptions, starts, resizes and
loans are final; in a partitioned epoch (:mod:`optsched.engine.partition`) the driver calls
:func:`explain_decision` on the merged decision, between the merge and the check. Either way
explaining reads the final decision and changes nothing in it.

Every queued job gets an :class:`~optsched.schema.decision.Explanation`: what binds on each of
its allowed GPU types (a :class:`~optsched.schema.decision.TypeFit` each, the closest type
first), with the numbers and the jobs that block it; its ``code`` is the queue reason of that
binding (:data:`BINDING_REASON`). Every preempted job gets what it made room for (the jobs
started on its GPUs, the lender taking its quota back, its MPS host), and every resized elastic
job why it grew or shrank. :func:`describe_job` turns a decision and its explanations into the
plain lines of ``optsched explain`` and of the hosts' reasons.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Mapping, Sequence
from operator import itemgetter
from typing import Any

from optsched.engine import assurance as asr
from optsched.engine.quota_tree import group_flows
from optsched.engine.rules import cap_starved, starved_types
from optsched.engine.shape import never_fits, shape_of
from optsched.engine.state import MEMORY_EPS, ClusterState, GpuKey
from optsched.schema.decision import (
    Binding,
    Decision,
    Explanation,
    Loan,
    Preempt,
    PreemptReason,
    QueueReason,
    Resize,
    ResizeReason,
    Resource,
    Start,
    TypeFit,
)
from optsched.schema.snapshot import GpuRef, Job

BINDING_REASON: dict[str, QueueReason] = {
    "type_unavailable": QueueReason.TYPE_UNAVAILABLE,
    "gang_size": QueueReason.GANG_TOO_LARGE,
    "priority": QueueReason.LOWER_PRIORITY,
    "not_chosen": QueueReason.LOWER_PRIORITY,
    "capacity": QueueReason.NO_CAPACITY,
    "over_quota_kept": QueueReason.QUOTA_AND_NO_LENDER,
    "borrow_limit": QueueReason.BORROW_LIMIT,
    "lend_limit": QueueReason.QUOTA_AND_NO_LENDER,
    "no_lender": QueueReason.QUOTA_AND_NO_LENDER,
    "gpu_memory": QueueReason.GPU_MEMORY,
}
"""The queue reason of each binding constraint of a queued job's best GPU type."""

_QUEUE_REASON = {r.value: r for r in QueueReason}


def queue_reasons(explanations: Mapping[str, Explanation], queue: Sequence[str]) -> dict[str, QueueReason]:
    """Each queued job's queue reason: the code of its explanation (a table lookup, not an enum
    call per job: a fleet's decision queues ~3*10^4 jobs)."""
    out: dict[str, QueueReason] = {}
    for jid in queue:
        code = explanations[jid].code
        reason = _QUEUE_REASON.get(code)
        out[jid] = QueueReason(code) if reason is None else reason  # (the call raises on a bad code)
    return out


# explanations ---------------------------------------------------------------------------------

MAX_IDS = 10
"""Job ids an explanation's ``blocked_by`` (and its text) lists at most; the text says how many
there are in all."""
_NEVER = frozenset({"gang_size", "type_unavailable", "gpu_memory"})
"""Bindings no decision can lift: such types come last."""
_RANK = {
    b: k
    for k, b in enumerate(
        (
            "not_chosen",
            "priority",
            "no_lender",
            "lend_limit",
            "borrow_limit",
            "over_quota_kept",
            "capacity",
            "gang_size",
            "type_unavailable",
            "gpu_memory",
        )
    )
}
"""Among types as many GPUs short, the one whose binding is easiest to lift first."""


class _Outcome:
    """The cluster as the decision leaves it, summed once: what every explanation reads."""

    def __init__(
        self,
        state: ClusterState,
        starts: list[Start],
        use: Mapping[tuple[str, str], int],
        loans: list[Loan],
        rank: Rank,
        tenant_of: Mapping[str, str] | None = None,
    ) -> None:
        self.state = state
        self.tenant_of = tenant_of or {}
        self.use = use
        self.cap = state.capacity()
        self.tindex = {t: k for k, t in enumerate(state.type_names)}
        self.value = rank
        self.lent_in: dict[tuple[str, str], int] = defaultdict(int)
        self.lent_out: dict[tuple[str, str], int] = defaultdict(int)
        for ln in loans:
            self.lent_in[(ln.borrower, ln.gpu_type)] += ln.gpus
            self.lent_out[(ln.lender, ln.gpu_type)] += ln.gpus
        self.total: dict[str, int] = defaultdict(int)
        for (_, t), v in use.items():
            self.total[t] += v
        self.started: dict[str, int] = defaultdict(int)
        self.by_type: dict[str, list[str]] = defaultdict(list)
        self.start_of: dict[str, Start] = {}
        self.ranked: dict[str, list[str]] = {}
        self.ranked_of: dict[str, dict[str, list[str]]] = {}
        self.labels: dict[str, str] = {}
        self.resources: dict[tuple[str, int], Resource] = {}
        self.gains: dict[str, dict[str, int]] = {}
        self.gainer_lists: dict[str, list[str]] = {}
        self.fits: dict[tuple[str, int, str], tuple[TypeFit, str, tuple[bool, int, int, int]]] = {}
        self.started_text: dict[str, str] = {}
        self.typefits: dict[tuple[Any, ...], TypeFit] = {}
        self.quota_users: dict[tuple[str, str], tuple[list[str], str]] = {}
        # who starts on each GPU: node -> {gpu: job}, str values only, so these dicts stay out
        # of the garbage collector's sight (a fleet's decision starts on ~10^5 GPUs); a GPU two
        # starts share (never in a checked decision) keeps the others in ``shared``
        self.on_node: dict[str, dict[int, str]] = {}
        self.shared: dict[GpuKey, list[str]] = {}
        on_node = self.on_node
        for s in starts:
            jid = s.job
            self.start_of[jid] = s
            for r in s.allocation:
                per = on_node.get(r.node)
                if per is None:
                    per = on_node[r.node] = {}
                if r.gpu in per:
                    self.shared.setdefault((r.node, r.gpu), []).append(jid)
                else:
                    per[r.gpu] = jid
            if s.colocated_with:
                continue
            t = state.node_type(s.allocation[0].node)
            self.started[t] += len(s.allocation)
            self.by_type[t].append(jid)
        # what each tenant could still lend after the decision, with and without lend_limit
        self.lendable: dict[tuple[str, str], int] = {}
        self.idle: dict[tuple[str, str], int] = {}
        self.lend_sum: dict[str, int] = defaultdict(int)
        self.idle_sum: dict[str, int] = defaultdict(int)
        for ten in state.tenant_ids:
            for t in state.type_names:
                lo = self.lent_out[(ten, t)]
                idle = max(0, state.quota(ten, t) - use.get((ten, t), 0) - lo)
                ll = state.lend_limit(ten, t)
                give = idle if ll is None else max(0, min(idle, ll - lo))
                self.idle[(ten, t)] = idle
                self.lendable[(ten, t)] = give
                self.idle_sum[t] += idle
                self.lend_sum[t] += give
        # quota groups: what flows into and out of each subtree through the decision's loans
        tix = state.tenant_index
        self.into, self.outof = group_flows(
            state.tree, [(tix[ln.lender], tix[ln.borrower], ln.gpu_type, ln.gpus) for ln in loans]
        )

    def group_binding(
        self, ten: str, t: str, to_borrow: int, lendable: int
    ) -> tuple[Binding, str, int] | None:
        """A quota group's limit that keeps ``to_borrow`` more GPUs of ``t`` from reaching
        ``ten``: (binding, group id, missing), the tightest borrow_limit of its groups first,
        then the lend_limit of the group that cuts the most off the others' lendable quota."""
        tree = self.state.tree
        if tree.empty or to_borrow <= 0:
            return None
        i = self.state.tenant_index[ten]
        best: tuple[int, int] | None = None
        for g in tree.ancestors(i):
            bl = tree.borrow_limit(g, t)
            if bl is None:
                continue
            room = bl - self.into.get((g, t), 0)
            if room < to_borrow and (best is None or room < best[0]):
                best = (room, g)
        if best is not None:
            return "borrow_limit", tree.groups[best[1]].id, to_borrow - max(0, best[0])
        out_room: dict[int, int] = {}
        for g in range(len(tree.groups)):
            ll = tree.lend_limit(g, t)
            if ll is not None:
                out_room[g] = ll - self.outof.get((g, t), 0)
        supply = [self.lendable[(o, t)] for o in self.state.tenant_ids]
        reach, grp = tree.reachable(i, supply, out_room)
        if reach < to_borrow <= lendable and grp is not None:
            return "lend_limit", tree.groups[grp].id, to_borrow - reach
        return None

    def fit(self, ten: str, g: int, t: str) -> TypeFit:
        """Why a gang of ``g`` GPUs of tenant ``ten`` does not start on ``t`` (see TypeFit)."""
        st = self.state
        cap = self.cap.get(t, 0)
        free = cap - self.total[t]
        started = self.started[t]
        q = st.quota(ten, t)
        u = self.use.get((ten, t), 0)
        li = self.lent_in[(ten, t)]
        idle = q - u - self.lent_out[(ten, t)]
        to_borrow = max(0, g - idle - li)
        lendable = self.lend_sum[t] - self.lendable[(ten, t)]
        idle_else = self.idle_sum[t] - self.idle[(ten, t)]
        bl = st.borrow_limit(ten, t)
        room = None if bl is None else bl - li
        binding: Binding
        group: str | None = None
        if cap == 0:
            binding, missing = "type_unavailable", g
        elif cap < g:
            binding, missing = "gang_size", g - cap
        elif free < g:
            binding = "priority" if free + started >= g else "capacity"
            missing = g - free
        elif to_borrow == 0:
            binding, missing = "not_chosen", 0  # never under invariant 8
        elif u - q - li > 0:
            binding, missing = "over_quota_kept", to_borrow
        elif room is not None and room < to_borrow:
            binding, missing = "borrow_limit", to_borrow - max(0, room)
        elif (by_group := self.group_binding(ten, t, to_borrow, lendable)) is not None:
            binding, group, missing = by_group
        elif lendable < to_borrow:
            binding = "lend_limit" if idle_else >= to_borrow else "no_lender"
            missing = to_borrow - lendable
        else:
            binding, missing = "not_chosen", 0
        kept = self.total[t] - started
        # tenants and gangs with the same numbers share one TypeFit (built and validated once)
        key = (t, binding, missing, q, u, idle, li, to_borrow, lendable, idle_else, room, group)
        f = self.typefits.get(key)
        if f is None:
            f = self.typefits[key] = TypeFit(
                gpu_type=t,
                binding=binding,
                missing=missing,
                capacity=cap,
                free=free,
                started=started,
                kept=kept,
                quota=q,
                use=u,
                idle_quota=idle,
                borrowed=li,
                to_borrow=to_borrow,
                lendable=lendable,
                idle_elsewhere=idle_else,
                borrow_room=room,
                group=group,
            )
        return f

    def of_type(self, t: str, ten: str | None = None) -> list[str]:
        """Jobs started now on ``t`` (of tenant ``ten`` if given; MPS guests excluded), most
        valuable first."""
        ids = self.ranked.get(t)
        if ids is None:
            ids = self.ranked[t] = sorted(self.by_type.get(t, []), key=self.value)
        if ten is None:
            return ids
        per = self.ranked_of.get(t)
        if per is None:  # every tenant's list of the type in one pass
            per = self.ranked_of[t] = defaultdict(list)
            job, tenant_of = self.state.job, self.tenant_of
            for j in ids:
                owner = tenant_of.get(j)
                per[job(j).tenant if owner is None else owner].append(j)
        return per.get(ten, [])

    def resource(self, t: str, gpus: int) -> Resource:
        r = self.resources.get((t, gpus))
        if r is None:
            r = self.resources[(t, gpus)] = Resource(gpu_type=t, gpus=gpus)
        return r

    def gain(self, t: str, before: Mapping[tuple[str, str], int]) -> dict[str, int]:
        """Per tenant: how much more of its own quota on ``t`` it uses after the decision."""
        g = self.gains.get(t)
        if g is None:
            q, use = self.state.quota, self.use
            g = self.gains[t] = {
                o: min(q(o, t), use.get((o, t), 0)) - min(q(o, t), before.get((o, t), 0))
                for o in self.state.tenant_ids
            }
        return g

    def gainers(self, t: str, before: Mapping[tuple[str, str], int]) -> list[str]:
        """Tenants with a positive :meth:`gain` on ``t``, most gained first (then tenant order)."""
        out = self.gainer_lists.get(t)
        if out is None:
            g = self.gain(t, before)
            tix = self.state.tenant_index
            out = self.gainer_lists[t] = sorted((o for o in g if g[o] > 0), key=lambda o: (-g[o], tix[o]))
        return out

    def on_gpus(self, refs: Sequence[GpuRef]) -> set[str]:
        """Jobs started now on any of the GPUs ``refs``."""
        on_node, shared = self.on_node, self.shared
        ids: set[str] = set()
        for r in refs:
            per = on_node.get(r.node)
            if per is None:
                continue
            j = per.get(r.gpu)
            if j is not None:
                ids.add(j)
                if shared:
                    ids.update(shared.get((r.node, r.gpu), ()))
        return ids

    def takers(self, job: Job) -> list[str]:
        """Jobs started now on the GPUs of running job ``job``, most valuable first."""
        ids = self.on_gpus(job.allocation or [])
        return list(ids) if len(ids) < 2 else sorted(ids, key=self.value)

    def quota_starts(self, t: str, ten: str) -> tuple[list[str], str]:
        """Tenant ``ten``'s starts on ``t`` not on loan, most valuable first, and what a
        preempted job's text says of them (the same for each of its jobs preempted on ``t``)."""
        got = self.quota_users.get((t, ten))
        if got is None:
            start_of = self.start_of
            room = [j for j in self.of_type(t, ten) if not start_of[j].on_loan]
            if room:
                text = (
                    f"; no job started now uses its GPUs; its tenant's in-quota starts on '{t}' use the "
                    f"quota it held: {self.who(room)}"
                )
            else:
                text = "; no job started now uses its GPUs or its quota"
            got = self.quota_users[(t, ten)] = (room, text)
        return got

    def who(self, ids: list[str], limit: int | None = MAX_IDS) -> str:
        """``p1 (t1), p2 (t3, on loan), … 12 in all``."""
        parts = []
        for j in ids[:limit]:
            label = self.labels.get(j)
            if label is None:
                s = self.start_of.get(j)
                how = ""
                if s is not None and (s.colocated_with or s.on_loan):
                    how = ", MPS guest" if s.colocated_with else ", on loan"
                ten = self.tenant_of.get(j)
                if ten is None:
                    ten = self.state.job(j).tenant
                label = self.labels[j] = f"{j} ({ten}{how})"
            parts.append(label)
        more = f", … {len(ids)} jobs in all" if limit is not None and len(ids) > limit else ""
        return ", ".join(parts) + more


Rank = Callable[[str], tuple[Any, ...]]
"""Sort key of a job id, most valuable first: how ``blocked_by`` and ``made_room_for`` list jobs."""

Kind = tuple[str, int, tuple[str, ...] | None, float | None]
"""A queued job's (tenant, gang, declared types or None, stated memory per GPU when some declared
type is too small for it, else None): all its explanation depends on."""


def queue_kind(state: ClusterState, job: Job) -> Kind:
    """The kind of a queued job; an elastic job is explained at its smallest size (the closest
    it is to starting)."""
    g = job.size_range[0] if job.is_elastic else job.gpus
    gt = job.gpu_types
    declared = state.type_names if gt is None else tuple(gt)
    # a job that states no memory per GPU fits every declared type (allowed_types unasked)
    mem = job.memory_gib
    if mem is not None and len(state.allowed_types(job)) >= len(declared):
        mem = None
    return (job.tenant, g, None if gt is None else declared, mem)


def held_before(state: ClusterState) -> dict[tuple[str, str], int]:
    """Per (tenant, type): the GPUs its running jobs hold in the snapshot (MPS guests excluded),
    what a reclaim's explanation compares the lender's use after the decision with."""
    out: dict[tuple[str, str], int] = defaultdict(int)
    for job in state.running():
        if job.id not in state.host_of:
            out[(job.tenant, state.job_type(job))] += job.gpus
    return out


def explain(
    state: ClusterState,
    starts: list[Start],
    preempt: list[Preempt],
    use: Mapping[tuple[str, str], int],
    loans: list[Loan],
    queue: list[str],
    kind_of: list[Kind],
    signal: dict[str, asr.TenantAssurance],
    resizes: list[Resize] | None = None,
    *,
    rank: Rank,
    evicted: Collection[str] = (),
    room_for: Mapping[str, Sequence[str]] | None = None,
    before: Mapping[tuple[str, str], int] | None = None,
    tenant_of: Mapping[str, str] | None = None,
) -> dict[str, Explanation]:
    """An explanation for every queued, every preempted and every resized job, from the final
    decision.

    ``kind_of[i]`` is the :data:`Kind` of ``queue[i]``; its ``code`` is the queue reason of its
    binding constraint (:data:`BINDING_REASON`). A queued job's explanation depends on its kind
    only, so it is computed once per kind and shared. ``use`` is each (tenant, type)'s use after
    the decision (MPS guests excluded), ``rank`` orders listed jobs, ``evicted`` are the MPS
    guests stopped because their host's tenant is at risk, and ``room_for`` names, per
    preempted job, the jobs started now that its stop made room for although they do not use
    its GPUs (the coordination step of a partitioned epoch); ``before`` is
    :func:`held_before` and ``tenant_of`` the tenant of each started job when the caller has
    them (a job it leaves out is looked up). Reads nothing else, so it costs one pass over the
    starts (and the running jobs, for a reclaim) plus a few operations per kind and preemption.
    """
    led = _Outcome(state, starts, use, loans, rank, tenant_of)
    per_kind: dict[Kind, Explanation] = {}
    for kind in dict.fromkeys(kind_of):
        ten, g, types, mem = kind
        per_kind[kind] = _explain_queued(led, ten, g, state.type_names if types is None else types, mem)
    out = {jid: per_kind[kind] for jid, kind in zip(queue, kind_of, strict=True)}
    # whether a job could ever start in its shape depends on its shape facts only (one answer
    # per distinct key, not per job), and jobs of one kind that never can share one explanation
    jobs, index = state.snapshot.jobs, state.job_index
    never_of: dict[tuple[Any, ...], tuple[str, str] | None] = {}
    never_exp: dict[tuple[Kind, tuple[str, str]], Explanation] = {}
    for jid, kind in zip(queue, kind_of, strict=True):
        job = jobs[index[jid]]
        if job.is_elastic:
            continue  # (_never_in_shape: an elastic job spreads, it always could)
        key = _shape_key(state, job)
        if key in never_of:
            never = never_of[key]
        else:
            never = never_of[key] = _never_in_shape(state, job)
        if never is not None:
            e = never_exp.get((kind, never))
            if e is None:
                e = never_exp[(kind, never)] = out[jid].model_copy(
                    update={"code": never[0], "binding": never[0], "text": never[1], "blocked_by": []}
                )
            out[jid] = e
    stopped = {x.job: x for x in preempt}
    ev = set(evicted)
    if before is None:
        reclaims = any(pr.reason == PreemptReason.RECLAIM for pr in preempt)
        before = held_before(state) if reclaims else {}  # running jobs that may or must stop
    room = room_for or {}
    for pr in preempt:
        out[pr.job] = _explain_preempted(led, pr, stopped, ev, before, signal, room.get(pr.job, ()))
    for rz in resizes or ():
        out[rz.job] = _explain_resized(led, rz)
    return out


class _DefaultRank(dict[str, tuple[Any, ...]]):
    """The default rank key of each job id (guaranteed first, then oldest, then id), computed
    on first lookup (only started jobs are ranked; :func:`explain_decision` fills them in)."""

    def __init__(self, jobs: Sequence[Job], index: Mapping[str, int]) -> None:
        super().__init__()
        self.jobs, self.index = jobs, index

    def __missing__(self, j: str) -> tuple[Any, ...]:
        x = self.jobs[self.index[j]]
        k = self[j] = (0 if x.qos == "guaranteed" else 1, x.submit_s, j)
        return k


def explain_decision(
    state: ClusterState,
    decision: Decision,
    signal: dict[str, asr.TenantAssurance],
    *,
    rank: Rank | None = None,
    room_for: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, Explanation]:
    """:func:`explain` for a finished decision without its :class:`EpochProblem` (the merged
    decision of a partitioned epoch): use, loans and queue come from ``decision`` and
    ``state``, the evicted MPS guests from ``signal`` (the rule of
    :func:`optsched.engine.candidates.build_problem`: a guest whose host's tenant accepts no
    slowdown), and jobs are ranked by ``rank`` (default: guaranteed first, then oldest, then
    id); best-effort jobs that may run only on types a tenant starved by its preemption cap
    waits for (:func:`optsched.engine.rules.starved_types`) get binding
    ``preemption_cap``, as in one model. Linear in the jobs and the decision's GPUs."""
    stopped = {x.job for x in decision.preempt}
    size = {rz.job: rz.to_gpus for rz in decision.resize}
    jobs, index, host_of, node_type = state.snapshot.jobs, state.job_index, state.host_of, state.node_type
    use: dict[tuple[str, str], int] = defaultdict(int)
    before: dict[tuple[str, str], int] = defaultdict(int)  # held_before, in the same pass
    for job in state.running():
        jid = job.id
        if jid in host_of:
            continue
        assert job.allocation is not None
        key = (job.tenant, node_type(job.allocation[0].node))
        before[key] += job.gpus
        if jid not in stopped:
            use[key] += size.get(jid, job.gpus)
    tenant_of: dict[str, str] = {}  # each start's tenant, for the explanations that list it
    for s in decision.start:
        jid = s.job
        x = jobs[index[jid]]
        tenant_of[jid] = x.tenant
        if not s.colocated_with:
            use[(x.tenant, node_type(s.allocation[0].node))] += len(s.allocation)
    limits = asr.share_limits(signal)
    evicted = {g for g in state.host_of if asr.evicted_guest(state, state.job(g), limits)}
    if rank is None:
        # the default rank of each start, computed on its first lookup; then a dict lookup (no
        # Python call per key while sorting)
        rank = _DefaultRank(jobs, index).__getitem__

    queue = list(decision.queue)
    kind_of = [queue_kind(state, jobs[index[j]]) for j in queue]
    out = explain(
        state, list(decision.start), list(decision.preempt), use, list(decision.loans),
        queue, kind_of, signal, list(decision.resize),
        rank=rank, evicted=evicted, room_for=room_for, before=before, tenant_of=tenant_of,
    )
    # best-effort jobs whose every type a cap-starved tenant's guaranteed jobs wait for are held
    # back (the rule of the problem's held_back)
    starved = cap_starved(state)
    if starved:
        off = starved_types(state, starved)
        held = [
            j
            for j in queue
            if jobs[index[j]].qos != "guaranteed"
            and all(t in off for t in state.allowed_types(jobs[index[j]]))
        ]
        explain_held_back(state, held, out, queue)
    return out


def _explain_resized(led: _Outcome, rz: Resize) -> Explanation:
    """Why an elastic job grows or shrinks, and who takes the GPUs a shrink gives up."""
    st = led.state
    job = st.job(rz.job)
    t = st.job_type(job)
    ten = job.tenant
    lo, hi = job.size_range
    sizes = f"from {_gpus(rz.from_gpus, t)} to {rz.to_gpus} (allowed {lo}..{hi})"
    binding: Binding
    if rz.reason == ResizeReason.GROW:
        binding = "capacity"
        room: list[str] = []
        where = "on loan" if job.on_loan else f"inside {ten}'s quota"
        text = (
            f"elastic job grows {sizes}, {where}: the GPUs it takes stay idle after every start "
            f"of this decision ({led.cap.get(t, 0) - led.total[t]} '{t}' GPUs still free)"
        )
    else:
        kept = {r.key() for r in rz.allocation}
        gone = [r for r in job.allocation or [] if r.key() not in kept]
        room = sorted(led.on_gpus(gone), key=led.value)
        given = _gpus(len(gone), t)
        to = f"; its {given} go to {led.who(room, None)} started now" if room else ""
        if rz.reason == ResizeReason.SHRINK_FOR_RECLAIM:
            binding = "quota"
            text = (
                f"elastic job on borrowed '{t}' quota shrinks {sizes} instead of being reclaimed "
                f"whole: {ten} borrows {led.lent_in[(ten, t)]} '{t}' GPUs after this decision{to}"
            )
        else:
            binding = "priority"
            text = f"elastic job shrinks {sizes} instead of being preempted whole{to}"
        text += f"; the resize costs {rz.lost_s:g} s of progress"
    return Explanation(
        code=rz.reason.value,
        text=text,
        binding=binding,
        tenant=ten,
        resource=led.resource(t, abs(rz.to_gpus - rz.from_gpus)),
        made_room_for=room,
    )


def _gpus(n: int, t: str | None = None) -> str:
    """``1 'A100' GPU``, ``3 GPUs``."""
    return f"{n} {'' if t is None else repr(t) + ' '}GPU{'' if n == 1 else 's'}"


def _idle_text(f: TypeFit, ten: str) -> str:
    lo = f.quota - f.use - f.idle_quota
    lends = f", lends {lo}" if lo > 0 else ""
    if f.idle_quota > 0:
        return f"its tenant {ten} has {f.idle_quota} idle quota (quota {f.quota}, uses {f.use}{lends})"
    on_loan = f", {f.borrowed} of them on loan" if f.borrowed else ""
    return f"its tenant {ten} has no idle quota (quota {f.quota}, uses {f.use}{on_loan}{lends})"


def _fit_text(led: _Outcome, f: TypeFit, ten: str, g: int) -> str:
    t, b = f.gpu_type, f.binding
    if b == "type_unavailable":
        return f"'{t}': no GPU of this type is on an available node"
    if b == "gang_size":
        return f"'{t}': only {_gpus(f.capacity)} on available nodes, fewer than its gang of {g}"
    if b in ("priority", "capacity"):
        new = led.started_text.get(t)
        if new is None:
            ids = led.of_type(t)
            new = led.started_text[t] = f"jobs started now ({led.who(ids)})" if ids else "jobs started now"
        old = "running jobs that keep running"
        first, second = (f.started, new), (f.kept, old)
        if b == "capacity":
            first, second = second, first
        verb = "is" if first[0] == 1 else "are"
        return (
            f"'{t}': {f.free} free after this decision; {first[0]} {verb} held by {first[1]}, "
            f"{second[0]} by {second[1]}"
        )
    head = f"'{t}': {f.free} free, but {_idle_text(f, ten)}"
    if b == "over_quota_kept":
        over = f.use - f.quota - f.borrowed
        return (
            f"{head}; {_gpus(over)} of it run above quota with no lender to cover them, so nothing "
            "starts on top of them"
        )
    need = f"starting it would take {f.to_borrow} more on loan"
    if f.group is not None and b == "borrow_limit":
        return (
            f"{head}; {need}, but its quota group {f.group} reaches its borrow_limit: tenants inside "
            f"{f.group} may borrow only {f.to_borrow - f.missing} more from tenants outside it"
        )
    if f.group is not None and b == "lend_limit":
        return (
            f"{head}; {need}: the other tenants could lend {f.lendable}, but the lend_limit of quota "
            f"group {f.group} lets only {f.to_borrow - f.missing} of it reach {ten}"
        )
    if b == "borrow_limit":
        room = f.borrow_room or 0
        return (
            f"{head}; {need}, and it may borrow {max(0, room)} more (borrow_limit {f.borrowed + room}, "
            f"borrows {f.borrowed})"
        )
    if b == "lend_limit":
        return (
            f"{head}; {need}: the other tenants have {f.idle_elsewhere} idle quota, but their lend_limit "
            f"lets them lend {f.lendable}"
        )
    if b == "no_lender":
        return f"{head}; {need}, and the other tenants can lend {f.lendable}"
    if f.to_borrow == 0:
        return f"'{t}': {f.free} free and {_idle_text(f, ten)}: it fits, yet this decision does not start it"
    return (
        f"{head}; {need} and the other tenants could lend {f.lendable}: starting on borrowed quota is "
        "optional and this decision does not"
    )


def _memory_text(t: str, has: float, mem: float) -> str:
    return f"'{t}': {has:.1f} GiB per GPU, less than the {mem:.1f} GiB it needs per GPU"


_NEVER_TEXT = {
    "gpus_per_node": "no node of the type has as many GPUs as one of its pieces ({pieces})",
    "cpu": "no node of the type has the {cpu} CPU thousandths it asks per node",
    "host_memory": "no node of the type has the {mem} MiB of host memory it asks per node",
    "topology": "no '{level}' domain of the type holds its pieces ({pieces}) on nodes of its own",
}


def _shape_key(state: ClusterState, job: Job) -> tuple[Any, ...]:
    """All :func:`_never_in_shape` reads of a rigid job: its allowed types and every field
    :func:`optsched.engine.shape.shape_of` reads."""
    topo = job.topology
    return (
        state.allowed_types(job),
        job.gpus,
        job.cpu_milli,
        job.memory_mib,
        job.spread,
        job.gpu_milli,
        job.gpus_per_node,
        None if topo is None else (topo.level, topo.mode),
    )


def _never_in_shape(state: ClusterState, job: Job) -> tuple[str, str] | None:
    """The queue reason and text of a job that no available node (or topology domain) of any
    of its allowed types that has GPUs could ever hold in its shape, however empty the cluster
    (:func:`optsched.engine.shape.never_fits`), or ``None``."""
    if job.is_elastic:
        return None
    caps = state.capacity()
    seen: list[tuple[str, str]] = []
    for t in state.allowed_types(job):
        if caps.get(t, 0) < job.gpus:
            continue  # type_unavailable or gang_too_large: the explanation says so already
        sh = shape_of(state, job, t)
        why = never_fits(state, sh, t)
        if why is None:
            return None
        level = state.topology_levels[sh.level] if sh.level >= 0 else ""
        text = _NEVER_TEXT[why].format(
            pieces="+".join(map(str, sh.pieces)), cpu=sh.cpu_milli, mem=sh.memory_mib, level=level
        )
        seen.append((why, f"'{t}': {text}"))
    if not seen:
        return None
    return seen[0][0], "it can never start as asked: " + "; ".join(x for _, x in seen)


_BINDING_CODE = {b: r.value for b, r in BINDING_REASON.items()}
_third = itemgetter(2)


def _order(f: TypeFit, tindex: Mapping[str, int]) -> tuple[bool, int, int, int]:
    """Sort key of a queued job's types: bindings no decision lifts last, then fewest GPUs
    missing, then the easiest binding to lift, then fleet order."""
    return (f.binding in _NEVER, f.missing, _RANK[f.binding], tindex[f.gpu_type])


def _explain_queued(
    led: _Outcome, ten: str, g: int, allowed: tuple[str, ...], mem: float | None = None
) -> Explanation:
    """``allowed`` are the job's declared types; those whose GPUs have less memory than ``mem``
    (its stated memory per GPU) bind on ``gpu_memory``, whatever their numbers."""
    got = []
    gpu_types = led.state.snapshot.gpu_types
    known, tindex = led.fits, led.tindex
    for t in allowed:
        ft = known.get((ten, g, t))
        if ft is None:
            f = led.fit(ten, g, t)
            ft = known[(ten, g, t)] = (f, _fit_text(led, f, ten, g), _order(f, tindex))
        if mem is not None:
            has = gpu_types[t].memory_gib
            if mem > has + MEMORY_EPS:
                f = ft[0].model_copy(update={"binding": "gpu_memory", "missing": g})
                ft = (f, _memory_text(t, has, mem), _order(f, tindex))
        got.append(ft)
    if len(got) > 1:
        got.sort(key=_third)
    fits = [x[0] for x in got]
    if not fits:
        return Explanation(
            code=QueueReason.TYPE_UNAVAILABLE.value,
            text="it allows no GPU type of the fleet",
            binding="type_unavailable",
            tenant=ten,
            resource=None,
            types=[],
            blocked_by=[],
            made_room_for=[],
            lender=None,
            host=None,
        )
    best = fits[0]
    if best.binding in ("priority", "capacity"):
        blocked = led.of_type(best.gpu_type)[:MAX_IDS]
    elif best.binding in _NEVER:
        blocked = []
    else:
        blocked = led.of_type(best.gpu_type, ten)[:MAX_IDS]
    what = _gpus(g, allowed[0]) if len(allowed) == 1 else f"{_gpus(g)} of one type ({', '.join(allowed)})"
    if best.binding == "gpu_memory" and mem is not None:
        largest = max(gpu_types[t].memory_gib for t in allowed)
        what += (
            f" with {mem:.1f} GiB per GPU; the largest GPU it allows has {largest:.1f} GiB, so it "
            "cannot start on this cluster"
        )
    text = f"needs {what}. " + ". ".join([x[1] for x in got]) + "."
    return Explanation(
        code=_BINDING_CODE[best.binding],
        text=text,
        binding=best.binding,
        tenant=ten,
        resource=led.resource(best.gpu_type, g),
        types=fits,
        blocked_by=blocked,
    )


def explain_held_back(
    state: ClusterState, held_back: Sequence[str], explanations: dict[str, Explanation], queue: list[str]
) -> None:
    """Explanations of the best-effort jobs held back because a cap-starved tenant's guaranteed
    jobs wait for their types (``held_back``, the problem's): binding ``preemption_cap``,
    ``blocked_by`` that tenant's queued guaranteed jobs; the per-type numbers stay."""
    why = cap_starved(state)
    on_type = starved_types(state, why)
    waiting: dict[str, list[str]] = defaultdict(list)
    for jid in queue:
        job = state.job(jid)
        if job.qos == "guaranteed" and job.tenant in why and len(waiting[job.tenant]) < MAX_IDS:
            waiting[job.tenant].append(jid)
    for jid in held_back:
        e = explanations.get(jid)
        if e is None:
            continue
        job = state.job(jid)
        held_on = [t for t in state.allowed_types(job) if t in on_type]
        if not held_on:
            continue
        owners = list(dict.fromkeys(ten for t in held_on for ten in on_type[t]))
        ten = job.tenant if job.tenant in owners else owners[0]
        w = why[ten]
        others = f" (and {', '.join(o for o in owners if o != ten)})" if len(owners) > 1 else ""
        text = (
            f"held by the preemption cap of {ten}{others}: its guaranteed jobs of at most {w.cap} "
            f"GPUs wait for {w.wanted} GPUs, {w.wanted - w.idle} beyond its idle quota of {w.idle}, "
            f"and {w.movable} GPUs of its running jobs may be preempted for them, but "
            f"max_gpus_per_epoch frees at most {w.cap} per decision; until no more than that is "
            f"needed, best-effort jobs keep off {', '.join(repr(t) for t in held_on)} (started "
            "now, one would be among the next victims). " + e.text
        )
        explanations[jid] = e.model_copy(
            update={
                "code": QueueReason.PREEMPTION_CAP.value,
                "binding": "preemption_cap",
                "text": text,
                "blocked_by": list(waiting[ten]),
            }
        )


def _explain_preempted(
    led: _Outcome,
    pr: Preempt,
    stopped: dict[str, Preempt],
    evicted: set[str],
    before: Mapping[tuple[str, str], int],
    signal: dict[str, asr.TenantAssurance],
    room_for: Sequence[str] = (),
) -> Explanation:
    st = led.state
    job = st.job(pr.job)
    ten = job.tenant
    t = st.job_type(job)
    takers = led.takers(job)
    host = st.host_of.get(job.id)
    reason = pr.reason
    lender: str | None = None
    binding: Binding
    gone = ""
    if takers:
        n = job.gpus
        gone = f"; its {_gpus(n, t)} {'goes' if n == 1 else 'go'} to {led.who(takers, None)} started now"
    # jobs started now that its stop made room for on other GPUs of the type (the coordination
    # step of a partitioned epoch frees GPUs and quota anywhere in the fleet for a start)
    if room_for:
        start_of = led.start_of
        extra = {j for j in room_for if j in start_of}
        if takers and extra:
            extra.difference_update(takers)
        if extra:
            more = sorted(extra, key=led.value) if len(extra) > 1 else list(extra)
            gone += f"; stopping it makes room for {led.who(more, None)} started now on other '{t}' GPUs"
            takers = sorted([*takers, *more], key=led.value)
    room = takers
    if reason == PreemptReason.PRIORITY or (reason == PreemptReason.INTERFERENCE and host is None):
        # the common case first; a guest without a host (none in the snapshot) reads as priority
        binding = "priority"
        qos = "best-effort" if job.qos == "best_effort" else job.qos
        text = f"{'preemptible ' if job.is_preemptible else ''}{qos} job of {ten}"
        if takers:
            text += gone
        else:
            room, why = led.quota_starts(t, ten)  # (the Explanation copies the list)
            text += why
    elif reason == PreemptReason.NODE_UNAVAILABLE:
        alloc = job.allocation or []
        down = sorted({r.node for r in alloc if not st.node_available(r.node)})
        binding = "node_unavailable"
        text = f"node {', '.join(down)} is unavailable (drained or failed), so the job cannot keep running"
        text += gone
    elif reason == PreemptReason.RECLAIM:
        q_of = st.quota
        gain = led.gain(t, before)
        # the lender: a tenant (not its own) that uses more of its own quota after the decision,
        # the takers' tenants first, then most gained, then tenant order
        tix = st.tenant_index
        lender = min(
            (o for o in {st.job(j).tenant for j in takers} if o != ten and gain[o] > 0),
            key=lambda o: (-gain[o], tix[o]),
            default=None,
        )
        if lender is None:
            lender = next((o for o in led.gainers(t, before) if o != ten), None)
        text = f"it ran on '{t}' quota its tenant {ten} borrowed"
        if lender is not None:
            binding = "quota"
            u0, u1 = before.get((lender, t), 0), led.use.get((lender, t), 0)
            text += (
                f"; {lender} takes its quota back: it uses {u1} of its {q_of(lender, t)} '{t}' quota after "
                f"this decision, {u0} before"
            )
        else:
            binding = "capacity" if takers else "no_lender"
            text += (
                f"; no lender uses more of its own quota, and after this decision {ten} borrows "
                f"{led.lent_in[(ten, t)]} '{t}' GPUs while the other tenants could lend "
                f"{led.lend_sum[t] - led.lendable[(ten, t)]} more"
            )
        text += gone
    else:  # an MPS guest stopped for interference
        assert host is not None
        hten = st.job(host).tenant
        on = f"MPS guest on the GPUs of {host} (tenant {hten})"
        if job.id in evicted:
            binding = "assurance"
            a = signal[hten].value
            # only a tenant that may not borrow on the type keeps its own guests
            whose = "guests" if job.tenant == hten else "other tenants' guests"
            text = (
                f"{on}; {hten}'s assurance is {a:.3f}, below {asr.THETA_SHARE}: its jobs accept no "
                f"slowdown from {whose} this epoch"
            )
            if host in stopped:
                text += f"; its host is preempted too ({stopped[host].reason.value})"
            text += gone
        elif host in stopped:
            binding = "host_preempted"
            why = stopped[host].reason.value
            text = f"{on}, which this decision preempts ({why}): a guest stops with its host{gone}"
        elif takers:
            binding = "priority"
            text = f"{on}; its place goes to {led.who(takers, None)} started now"
        else:
            binding = "interference"
            text = (
                f"{on}; no job started now takes its GPUs: stopping it ends the slowdown it causes "
                "its host"
            )
    return Explanation(
        code=_REASON_VALUE[reason],
        text=text,
        binding=binding,
        tenant=ten,
        resource=led.resource(t, job.gpus),
        made_room_for=room,
        lender=lender,
        host=host,
    )


_REASON_VALUE = {r: r.value for r in PreemptReason}


def _where(refs: list[GpuRef]) -> str:
    """``node n3 GPUs 0-3, node n4 GPU 0``."""
    by_node: dict[str, list[int]] = defaultdict(list)
    for r in refs:
        by_node[r.node].append(r.gpu)
    parts = []
    for node, gpus in by_node.items():
        gpus.sort()
        runs: list[str] = []
        lo = prev = gpus[0]
        for g in [*gpus[1:], None]:
            if g is not None and g == prev + 1:
                prev = g
                continue
            runs.append(str(lo) if lo == prev else f"{lo}-{prev}")
            if g is not None:
                lo = prev = g
        parts.append(f"node {node} GPU{'s' if len(gpus) > 1 else ''} {','.join(runs)}")
    return ", ".join(parts)


def describe_job(state: ClusterState, decision: Decision, job_id: str) -> list[str]:
    """What ``decision`` does with job ``job_id`` and why, in plain lines (``optsched explain``).

    Started and kept running jobs are described from the decision itself (where, and whether in
    quota, on loan from whom, or as an MPS guest of whom); queued and preempted jobs from
    ``decision.explanations``. Raises ``KeyError`` when the job is not in the snapshot, and
    ``LookupError`` when the decision cannot say (no explanation for a queued or preempted job,
    or a pending job the decision leaves out).
    """
    job = state.job(job_id)  # KeyError: unknown job
    head = f"job {job.id} (tenant {job.tenant}, {job.qos}, {_gpus(job.gpus)}, {job.state})"
    start = next((s for s in decision.start if s.job == job_id), None)
    stopped = next((x for x in decision.preempt if x.job == job_id), None)
    resized = next((x for x in decision.resize if x.job == job_id), None)
    if resized is not None:
        e = decision.explanations.get(job_id)
        lines = [
            f"{head}: resized ({resized.reason.value}) to {_gpus(resized.to_gpus)} on "
            f"{_where(resized.allocation)}"
        ]
        if e is not None:
            lines.append(e.text + ("" if e.text.endswith(".") else "."))
            if e.made_room_for:
                lines.append(f"made room for: {', '.join(e.made_room_for)}")
        return lines
    if start is None and stopped is None and job.state == "running":
        assert job.allocation is not None
        return [f"{head}: keeps running on {_where(job.allocation)} ('{state.job_type(job)}')"]
    if start is not None:
        return [f"{head}: starts now on {_where(start.allocation)}", _start_reason(state, decision, start)]
    e = decision.explanations.get(job_id)
    if e is None:
        if stopped is None and job_id not in decision.queue:
            raise LookupError(f"the decision neither starts nor queues pending job '{job_id}'")
        raise LookupError(
            "the decision has no explanations (written by an optsched without them): solve the "
            "snapshot again"
        )
    what = f"preempted ({e.code})" if stopped is not None else f"queued ({e.code})"
    lines = [f"{head}: {what}, binding: {e.binding}", e.text + ("" if e.text.endswith(".") else ".")]
    for f in e.types:
        room = "no limit" if f.borrow_room is None else str(f.borrow_room)
        lines.append(
            f"  '{f.gpu_type}': {f.binding}, {f.missing} missing; capacity {f.capacity}, free {f.free}, "
            f"started now {f.started}, kept {f.kept}; quota {f.quota}, use {f.use}, idle quota "
            f"{f.idle_quota}, borrowed {f.borrowed}, to borrow {f.to_borrow}, others can lend "
            f"{f.lendable} (idle {f.idle_elsewhere}), borrow room {room}"
            + ("" if f.group is None else f"; limit of quota group {f.group}")
        )
    if e.blocked_by:
        lines.append(f"blocked by: {', '.join(e.blocked_by)}")
    if e.made_room_for:
        lines.append(f"made room for: {', '.join(e.made_room_for)}")
    if e.lender is not None:
        lines.append(f"lender taking its quota back: {e.lender}")
    if e.host is not None:
        lines.append(f"MPS host: {e.host}")
    if e.reserved_for is not None:
        lines.append(f"waits for the reservation of: {e.reserved_for}")
    if stopped is None:
        at = decision.expected_start_s.get(job_id)
        if at is not None:
            lines.append(f"expected start: {at:g} (in {at - decision.now:g} s, look-ahead plan)")
        elif decision.expected_start_s or decision.reservations:
            lines.append("expected start: beyond the look-ahead plan's horizon")
    return lines


def _start_reason(state: ClusterState, decision: Decision, start: Start) -> str:
    job = state.job(start.job)
    t = state.node_type(start.allocation[0].node)
    if start.colocated_with:
        hosts = ", ".join(f"{h} (tenant {state.job(h).tenant})" for h in start.colocated_with)
        return f"MPS guest on the GPUs of {hosts}: it uses no quota"
    stopped = {x.job for x in decision.preempt}
    sizes = {x.job: x.to_gpus for x in decision.resize}
    use = 0
    for other in state.running():
        if other.tenant == job.tenant and other.id not in stopped and other.id not in state.host_of:
            use += sizes.get(other.id, other.gpus) if state.job_type(other) == t else 0
    for s in decision.start:
        if not s.colocated_with and state.job(s.job).tenant == job.tenant:
            use += len(s.allocation) if state.node_type(s.allocation[0].node) == t else 0
    q = state.quota(job.tenant, t)
    if not start.on_loan:
        return (
            f"inside its tenant's quota: {job.tenant} uses {use} of its {q} '{t}' quota after this "
            "decision"
        )
    lenders = [ln for ln in decision.loans if ln.borrower == job.tenant and ln.gpu_type == t]
    frm = ", ".join(f"{ln.lender} ({ln.gpus})" for ln in lenders) or "nobody"
    borrowed = sum(ln.gpus for ln in lenders)
    return (
        f"on loan: {job.tenant} uses {use} '{t}' GPUs after this decision on a quota of {q}, and "
        f"borrows {borrowed} from {frm}"
    )

"""EpochProblem: everything a backend may read for one epoch, solver-neutral and index-based.

Built by :func:`optsched.engine.candidates.build_problem`. Pending jobs enter as **classes**:
interchangeable jobs (same tenant, gang size, allowed GPU types, QoS and priority class) with an
integer count, their members sorted by value, so the model grows with classes and with how many
jobs could start at all, not with the length of the queue. Every pending job of the snapshot is a member
of exactly one class: none is pruned.

There is deliberately no variable per (job, GPU) or per (job, node): the model decides counts
per GPU type and, through :class:`TypePlacement`, that those counts fit the nodes' free GPUs in
their shapes (:mod:`optsched.engine.chunks`); :mod:`optsched.engine.decode` then places them on
concrete GPUs by the one placement rule (:class:`~optsched.engine.ledger.NodePool`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from optsched.engine.objective import DEFAULT_WEIGHTS, ObjectiveWeights
from optsched.engine.quota_tree import EMPTY, QuotaTree
from optsched.engine.shape import Shape

if TYPE_CHECKING:
    from optsched.engine.chunks import ChunkNeed
    from optsched.engine.ledger import NodeRecord
    from optsched.schema.snapshot import GpuRef


@dataclass(frozen=True)
class PendingClass:
    """Interchangeable pending jobs: same tenant, gang size, allowed types, QoS and priority class."""

    tenant: int
    gpus: int
    types: tuple[int, ...]
    """Allowed GPU types on which the class may start (capacity for the gang exists)."""
    own_types: tuple[int, ...]
    """Types on which a member may start inside its tenant's own quota."""
    jobs: tuple[str, ...]
    """Members, highest value first (ties: earlier submission, then id)."""
    values: tuple[float, ...]
    """Value of starting each member (same order as ``jobs``)."""
    cap: int
    """At most this many members can start at once (capacity-aware: GPUs of the allowed
    types not held by jobs that must keep running, divided by the gang size)."""
    type_bonus: tuple[float, ...]
    """Per type of ``types``: value added per member started there (speed preference)."""
    loan_penalty: float
    """Value subtracted per member started on loan."""
    guaranteed: bool
    reclaim: bool
    """Members carry the reclaim bonus (assurance use (b))."""
    shareable: bool
    memory_gib: float
    """Predicted memory per GPU (singleton guest classes; else the largest member's)."""
    static_value: float = 0.0
    """The least valuable member's worth without aging or assurance scaling (plus the reclaim
    bonus of a reclaim class): what may pay for preemptions (see ``add_preemption_rules``)."""
    group: str = ""
    """Elastic size alternatives: the id of the elastic job this singleton class starts at size
    ``gpus`` (one class per allowed size; at most one of a group starts); "" otherwise."""
    shapes: tuple[Shape, ...] = ()
    """Per type of ``shape_types``: the members' node shape there (empty: spread everywhere)."""
    shape_types: tuple[int, ...] = ()
    """The types ``shapes`` is listed by when they are not ``types``: a class whose allowed types
    were narrowed for one pass (the backfill keeps jobs off reserved types) still knows its shape
    on the types its members already started on."""

    def shape_on(self, t: int) -> Shape:
        """The members' shape on type ``t`` (one of ``types``, or of ``shape_types``)."""
        if not self.shapes:
            return Shape(self.gpus, ())
        return self.shapes[(self.shape_types or self.types).index(t)]

    @property
    def job(self) -> str:
        """The top member (names a singleton class)."""
        return self.jobs[0]

    @property
    def label(self) -> str:
        """A unique name of the class in the model: its top member, with the size for the
        classes of an elastic job."""
        return f"{self.jobs[0]}@{self.gpus}" if self.group else self.jobs[0]

    @property
    def density(self) -> float:
        """Value per GPU of the top member."""
        return self.values[0] / self.gpus


@dataclass(frozen=True)
class RunningItem:
    job: str
    tenant: int
    type: int
    gpus: int
    on_loan: bool
    guest: bool
    candidate: bool
    """May be preempted by the model."""
    cost: float
    lost_s: float
    free_slots: int
    """GPUs a new MPS guest may use: all of the job's GPUs if it can host and has no guest yet,
    else 0 (sharing forms pairs: one guest per host)."""
    host: str | None = None
    """For a running MPS guest: its host job (stopping the host stops the guest too)."""
    static_cost: float = 0.0
    """Preemption cost without assurance scaling (times the job's priority class weight, and
    for a priority victim times 1 + its tenant's hysteresis): what a preemption must be paid with."""

    step: int = 0
    """Elastic jobs: the size step (sizes ``min_gpus + k step``); 0: the job is not resized."""
    grow_steps: int = 0
    """Elastic jobs: steps it may grow (up to ``max_gpus``)."""
    shrink_steps: int = 0
    """Elastic jobs that may be preempted: steps it may shrink (down to ``min_gpus``)."""
    grow_value: float = 0.0
    """Objective value of one step of growth (below any start's value per GPU)."""
    shrink_cost: float = 0.0
    """Objective cost of one step of shrinking (a fraction of a preemption's cost)."""
    shrink_static: float = 0.0
    """Static cost of one step of shrinking (what ``preemption_pays`` charges)."""
    overhead_s: float = 0.0
    """Seconds of progress one resize costs (the job's ``resize_overhead_s``)."""
    nodes: tuple[tuple[int, int], ...] = ()
    """(node index in the snapshot, GPUs it holds there) for each node of its allocation."""
    alloc: tuple[GpuRef, ...] = ()
    """Its GPUs (what a stop frees in the plans' placement step)."""
    cpu_milli: int = 0
    """CPUs it holds on each of its nodes (thousandths)."""
    memory_mib: int = 0
    """Host memory it holds on each of its nodes."""
    share: int = 0
    """A fractional job: the thousandths of its GPU it takes (its GPU counts once in
    ``EpochProblem.shared_gpus``, the job as one GPU of quota); 0 for whole GPUs."""

    @property
    def priority_victim(self) -> bool:
        """A candidate whose preemption would be for priority (not on loan, not a guest)."""
        return self.candidate and not self.on_loan and not self.guest


@dataclass(frozen=True)
class MovableNode:
    """A node whose free GPUs the decision may change: a running job on it may be preempted or
    shrunk (:class:`TypePlacement`)."""

    index: int
    """The node's index in the snapshot."""
    free: int
    """Fully free GPUs now."""
    holders: tuple[tuple[int, int], ...]
    """(running item, GPUs it holds on this node) of the items that may free GPUs here: preemption
    candidates, and elastic jobs that may shrink (their GPUs per step, a bound on what a shrink
    frees on any one of their nodes)."""
    domain: tuple[str, ...] = ()
    """Its domain at the topology level of the type's required requests (empty: none)."""


@dataclass(frozen=True)
class TypePlacement:
    r"""What the one model knows of the nodes of one GPU type (:mod:`optsched.engine.chunks`).

    The free GPUs of every node are counted in *chunks* of ``levels`` (1, 2, 4, ... GPUs): a
    node with 6 free GPUs has one free 4-chunk and one free 2-chunk. Nodes where nothing can
    change are summed into ``fixed``; nodes where a preemption or shrink may free GPUs are
    ``movable``, one by one. A whole-GPU piece of a job's shape takes chunks whose sizes add up
    to it (its binary digits), each a chunk of its level or a split larger one. For pieces that
    are powers of two, with no CPU, memory, topology or shares to respect, this is exact: pieces
    fit the nodes iff the chunks do (largest-first placement); otherwise it is a relaxation and
    decoding may leave a start it cannot place queued.
    """

    levels: tuple[int, ...]
    fixed: tuple[int, ...]
    """Per level: maximal free chunks on the nodes no decision can change."""
    movable: tuple[MovableNode, ...]
    frag: tuple[float, ...]
    """Per level: objective cost of one maximal chunk of that level left free (the FGD measure:
    its GPUs are fragments to every waiting piece larger than it, weighted by their share)."""
    exact: bool
    """Whether the chunk rows are the whole rule on this type (see the class docstring)."""
    cpu_free: int | None = None
    """Free CPUs (thousandths) on the type's nodes that have or may get free GPUs, when a pending
    job on the type needs CPUs and every such node tracks them; else None (no row)."""
    mem_free: int | None = None
    """As ``cpu_free``, for host memory."""
    share_free: int = 0
    """Thousandths free on GPUs that hold shares (fractional jobs)."""
    domain_level: int = -1
    """The topology level of the required requests on this type (-1: none)."""
    domains: tuple[tuple[tuple[str, ...], tuple[int, ...]], ...] = ()
    """(domain, its fixed chunks per level) for every domain of ``domain_level``."""

    @property
    def top(self) -> int:
        return len(self.levels) - 1


@dataclass(frozen=True)
class GuestCandidate:
    pending: int
    """A singleton pending class."""
    running: int
    value: float
    host_speed: float
    guest_speed: float


@dataclass(frozen=True)
class EpochProblem:
    """The solver-neutral problem of one epoch (indices only, no I/O)."""

    types: tuple[str, ...]
    tenants: tuple[str, ...]
    capacity: tuple[int, ...]
    quota: tuple[tuple[int, ...], ...]
    borrow_limit: tuple[tuple[int | None, ...], ...]
    lend_limit: tuple[tuple[int | None, ...], ...]
    pending: tuple[PendingClass, ...]
    running: tuple[RunningItem, ...]
    guests: tuple[GuestCandidate, ...]
    forced: tuple[str, ...]
    """Running jobs that must stop (their node is unavailable)."""
    evicted: tuple[str, ...]
    """Running MPS guests stopped because their host's tenant is at risk (use (c))."""
    density: dict[str, float]
    """Value per GPU of every pending job (queue order)."""
    unplaceable: tuple[str, ...]
    """Pending jobs no allowed type can ever hold (no type with capacity for the gang)."""
    kept_over: tuple[tuple[int, ...], ...]
    """[tenant][type]: GPUs already running above quota without a loan that no lender can
    cover (amended invariant 4): they keep running, and nothing is added on top of them."""
    deficit: tuple[int, ...]
    """Per type: where lenders can no longer cover all on-loan use, the on-loan GPUs (some of
    those jobs must be reclaimed whatever starts, so their GPUs may stay idle); else 0."""
    reclaim_bonus: float
    """Per GPU of a reclaim class's start inside quota (:meth:`reclaim_of`): twice the largest
    preemption cost plus one, so one start pays for stopping any one job."""
    objective: ObjectiveWeights = DEFAULT_WEIGHTS
    complete: bool = True
    """Whether the model holds every alternative of the snapshot (no guest pair was cut)."""
    bound_slack: float = 0.0
    """Added to the model's bound to bound the whole problem when it is not complete: the
    value of every shareable job whose MPS pairs were not scored."""
    notes: tuple[str, ...] = field(default=())
    preempt_cap: tuple[int | None, ...] = field(default=())
    """Per tenant: most GPUs of its jobs preempted for priority in one decision (its
    ``preemption.max_gpus_per_epoch``); None or missing: no cap. On-loan jobs (reclaim) and
    MPS guests do not count."""
    tree: QuotaTree = EMPTY
    """The quota groups above the tenants (tenant indices are the problem's); empty: flat."""
    victim_slack: tuple[int, ...] = ()
    """Per type: the largest gang of a best-effort job running not on loan (no MPS guest, on an
    available node) less one (:func:`~optsched.engine.rules.victim_slack`): what a gang
    stopped whole may free beyond the guaranteed in-quota starts it makes room for; empty: 0."""
    held_back: tuple[str, ...] = ()
    """Best-effort pending jobs of cap-starved tenants (:func:`~optsched.engine.rules.cap_starved`):
    not candidates this epoch, queued with reason ``preemption_cap``."""
    no_loan: tuple[int, ...] = ()
    """Types on which no start may be on loan this epoch: those on which guaranteed jobs that a
    node loss stops restart at the next one (:func:`~optsched.engine.node_loss.restart_types`;
    a start on loan there would be reclaimed for them). Starts inside quota stay allowed."""
    placement: tuple[TypePlacement | None, ...] = ()
    """Per type: the node-level rows of the model (None, or empty: GPUs counted per type only,
    as when no waiting job on the type needs more than one GPU on a node)."""
    frag_scale: float = 0.0
    """Objective cost of one fragmented GPU (the chunks' ``frag`` weights are in GPUs)."""
    shared_gpus: tuple[int, ...] = ()
    """Per type: GPUs held by running fractional jobs only, each counted once (capacity)."""
    node_records: tuple[NodeRecord, ...] = ()
    """The available nodes as the snapshot's running jobs leave them: where the plans' starts are
    placed (:func:`optsched.engine.backends.greedy.place_plan`); empty when no type needs it."""
    largest: tuple[int, ...] = ()
    """Per type: GPUs of its largest node (the chunk sizes of the placement rule)."""
    topology_levels: tuple[str, ...] = ()
    node_count: int = 0
    """Nodes in the snapshot (the node records' indices are below it)."""
    held_gpus: tuple[GpuRef, ...] = ()
    """GPUs of ``node_records`` held for the look-ahead's reservations of gangs in their node
    shape (:func:`optsched.engine.lookahead.limited`): left out of ``placement``'s chunks, and
    placed on only by the starts of ``hold_ok``, after every other start."""
    hold_ok: frozenset[tuple[int, int]] = frozenset()
    """(class, type) whose starts may use ``held_gpus`` of that type: the members are predicted
    to end before the reserved gang starts, or are the gang."""
    gpu_refs: dict[tuple[str, int], GpuRef] = field(default_factory=dict, compare=False, repr=False)
    """One ``GpuRef`` per GPU the placements of this epoch hand out, built on first use and
    shared by every node pool of the epoch (the greedy plan's, the fill's, the decoding's)."""
    chunk_needs: dict[tuple[int, int], ChunkNeed] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )
    """(class, type) -> what one member takes in the chunk rows there, read on first use and
    shared by every :class:`~optsched.engine.chunks.ChunkBook` of this problem (a problem
    made from it with ``dataclasses.replace`` starts its own)."""

    def placement_of(self, t: int) -> TypePlacement | None:
        return self.placement[t] if t < len(self.placement) else None

    @property
    def rows_relaxed(self) -> bool:
        """Whether the node rows of some type are a relaxation (CPU, memory, topology or shares:
        the free nodes may not hold every start the rows admit)."""
        return any(tp is not None and not tp.exact for tp in self.placement)

    def reclaim_of(self, cls: PendingClass) -> float:
        """What one member of ``cls`` started inside its tenant's quota earns beyond its value:
        the reclaim bonus per GPU it gives back to its tenant, when the class reclaims (the
        tenant's assurance is low, assurance use (b)); else 0."""
        return self.reclaim_bonus * cls.gpus if cls.reclaim else 0.0

    def slack_of(self, t: int) -> int:
        """``victim_slack`` of type ``t`` (0 when none was given)."""
        return self.victim_slack[t] if t < len(self.victim_slack) else 0

    def cap_of(self, tenant: int) -> int | None:
        """The tenant's priority-preemption cap in GPUs, if any."""
        return self.preempt_cap[tenant] if tenant < len(self.preempt_cap) else None

    # derived sums of the kept running jobs --------------------------------------------
    def used(self) -> list[int]:
        """Host GPUs held per type by kept running jobs (before preemptions); a GPU holding
        shares counts once."""
        out = list(self.shared_gpus) if self.shared_gpus else [0] * len(self.types)
        for r in self.running:
            if not r.guest and not r.share:
                out[r.type] += r.gpus
        return out

    def held(self, own_only: bool) -> list[list[int]]:
        """Host GPUs per [tenant][type] held by running jobs (own quota only if asked)."""
        out = [[0] * len(self.types) for _ in self.tenants]
        for r in self.running:
            if r.guest or (own_only and r.on_loan):
                continue
            out[r.tenant][r.type] += r.gpus
        return out


@dataclass
class Assignment:
    """A solution by index: how many members of each class start where, guests, preemptions."""

    starts: dict[int, dict[tuple[int, bool], int]] = field(default_factory=dict)
    """class index -> {(type index, on_loan): members started}."""
    guests: dict[int, int] = field(default_factory=dict)
    """singleton class index -> running index of the host."""
    preempt: set[int] = field(default_factory=set)
    """running indices to stop (forced ones are not listed: they always stop)."""
    resize: dict[int, int] = field(default_factory=dict)
    """running index of an elastic job -> its signed size change in steps (never 0)."""
    blocked: dict[tuple[int, int], int] = field(default_factory=dict)
    """(class, type) -> the most members the fill pass may start there: the placement step found
    the free nodes could not hold one more (:func:`~optsched.engine.backends.greedy.place_plan`)."""
    no_guest_on: set[int] = field(default_factory=set)
    """Running indices the fill pass may not give an MPS guest: decoding found the host's node
    without a guest's CPU or host memory (:func:`~optsched.engine.backends.greedy.unplace`)."""
    placements: dict[tuple[int, int], list[list[GpuRef] | None]] = field(default_factory=dict)
    """(class, type) -> the GPUs of each member started there, in start order (the members of a
    class share a shape, so decoding hands them out in value order); a start without one is
    placed by the placement step."""

    def size(self, problem: EpochProblem, r: int) -> int:
        """GPUs running job ``r`` holds after the assignment (0 when preempted)."""
        if r in self.preempt:
            return 0
        run = problem.running[r]
        return run.gpus + self.resize.get(r, 0) * run.step

    def add(self, c: int, t: int, loan: bool, k: int = 1) -> None:
        counts = self.starts.setdefault(c, {})
        counts[(t, loan)] = counts.get((t, loan), 0) + k
        if counts[(t, loan)] <= 0:
            del counts[(t, loan)]
            if not counts:
                del self.starts[c]

    def on_type(self, c: int, t: int) -> int:
        """Members of class ``c`` started on type ``t``."""
        return sum(k for (tt, _), k in self.starts.get(c, {}).items() if tt == t)

    def started(self, c: int) -> int:
        """Members of class ``c`` started exclusively."""
        return sum(self.starts.get(c, {}).values())

    def use(self, problem: EpochProblem) -> list[list[int]]:
        """Host GPUs per [tenant][type] after this assignment."""
        p = problem
        use = [[0] * len(p.types) for _ in p.tenants]
        for r, run in enumerate(p.running):
            if not run.guest and r not in self.preempt:
                use[run.tenant][run.type] += self.size(p, r)
        for c, counts in self.starts.items():
            for (t, _), k in counts.items():
                use[p.pending[c].tenant][t] += k * p.pending[c].gpus
        return use

    def kept_over(self, problem: EpochProblem) -> list[list[int]]:
        """[tenant][type]: use this assignment keeps over quota uncovered (amended invariant 4):
        at most the problem's ``kept_over`` (what no lender covered), and at most what the
        tenant's running jobs not on loan still hold above its quota after its preemptions and
        shrinks (old use only: growth and on-loan jobs never count), as the checker reads it."""
        p = problem
        own = p.held(own_only=True)
        for r in self.preempt:
            run = p.running[r]
            if not run.guest and not run.on_loan:
                own[run.tenant][run.type] -= run.gpus
        for r, d in self.resize.items():
            run = p.running[r]
            if d < 0 and not run.on_loan:
                own[run.tenant][run.type] += d * run.step
        return [
            [min(k, max(0, own[i][t] - p.quota[i][t])) for t, k in enumerate(row)]
            for i, row in enumerate(p.kept_over)
        ]

    def borrowed(self, problem: EpochProblem) -> int:
        """GPUs borrowed in all: use above quota beyond what is kept over quota uncovered."""
        p = problem
        kept = self.kept_over(p)
        total = 0
        for i, row in enumerate(self.use(p)):
            for t, u in enumerate(row):
                total += max(0, u - p.quota[i][t] - kept[i][t])
        return total

    def inflow(self, problem: EpochProblem) -> int:
        """Quota trees: GPUs lent into quota groups from outside them, summed over groups and
        types, when loans are matched inside the smallest enclosing subtree first (the least any
        loans can have; 0 for a flat problem). Each group boundary a loan crosses inward costs
        the borrow tie-breaker once more, so idle quota goes inside a subtree first."""
        p = problem
        if p.tree.empty:
            return 0
        use = self.use(p)
        kept = self.kept_over(p)
        total = 0
        for t, name in enumerate(p.types):
            if p.capacity[t] == 0:
                continue
            shares = []
            for i in range(len(p.tenants)):
                q, u, k = p.quota[i][t], use[i][t], kept[i][t]
                if u > q + k:
                    shares.append(q + k - u)
                elif u < q:
                    ll = p.lend_limit[i][t]
                    shares.append(q - u if ll is None else min(ll, q - u))
                else:
                    shares.append(0)
            vals, _ = p.tree.net_values(shares, name)
            total += sum(max(0, -v) for v in vals)
        return total

    def objective(self, problem: EpochProblem) -> float:
        """The objective value of this assignment (:func:`optsched.engine.objective.value`)."""
        from optsched.engine.objective import value

        return value(problem, self)

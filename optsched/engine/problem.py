"""EpochProblem: everything a backend may read for one epoch, solver-neutral and index-based.

Built by :func:`optsched.engine.candidates.build_problem`. Pending jobs enter as **classes**:
interchangeable jobs (same tenant, gang size, allowed GPU types, QoS and priority class) with an
integer count, their members sorted by value, so the model grows with classes and with how many
jobs could start at all, not with the length of the queue. Every pending job of the snapshot is a member
of exactly one class: none is pruned.

There is deliberately no variable per (job, GPU) or per (job, node): the model decides counts
per GPU type, and :mod:`optsched.engine.decode` turns them into concrete GPU indices afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from optsched.engine.objective import DEFAULT_WEIGHTS, ObjectiveWeights
from optsched.engine.quota_tree import EMPTY, QuotaTree


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

    @property
    def priority_victim(self) -> bool:
        """A candidate whose preemption would be for priority (not on loan, not a guest)."""
        return self.candidate and not self.on_loan and not self.guest


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

    def slack_of(self, t: int) -> int:
        """``victim_slack`` of type ``t`` (0 when none was given)."""
        return self.victim_slack[t] if t < len(self.victim_slack) else 0

    def cap_of(self, tenant: int) -> int | None:
        """The tenant's priority-preemption cap in GPUs, if any."""
        return self.preempt_cap[tenant] if tenant < len(self.preempt_cap) else None

    # derived sums of the kept running jobs --------------------------------------------
    def used(self) -> list[int]:
        """Host GPUs held per type by kept running jobs (before preemptions)."""
        out = [0] * len(self.types)
        for r in self.running:
            if not r.guest:
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

    def size(self, problem: EpochProblem, r: int) -> int:
        """GPUs running job ``r`` holds after the assignment (0 when preempted)."""
        if r in self.preempt:
            return 0
        run = problem.running[r]
        return run.gpus + self.resize.get(r, 0) * run.step

    def add(self, c: int, t: int, loan: bool, k: int = 1) -> None:
        counts = self.starts.setdefault(c, {})
        counts[(t, loan)] = counts.get((t, loan), 0) + k

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

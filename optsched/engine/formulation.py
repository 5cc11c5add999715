r"""The cluster part's optimization model of an epoch, written once in solver-neutral linear form.

(The look-ahead's slot model of expected starts, :mod:`optsched.engine.lookahead`, and the workflow
planner, :mod:`optsched.engine.workflows.planner`, each build a small CP-SAT model of their own.)

Every exact backend (CP-SAT, HiGHS, PuLP) translates the same :class:`LinearModel`, so they
solve the same problem; its objective coefficients come from :mod:`optsched.engine.objective`.
Variables (all integer):

* :math:`s_{c,k} \in \{0,1\}`: the :math:`k`-th member of pending class :math:`c` starts
  (:math:`k < \text{cap}_c`; members sorted by value, :math:`s_{c,k} \ge s_{c,k+1}`);
* :math:`o_{ct}, \ell_{ct} \in \mathbb{Z}_{\ge 0}`: members of :math:`c` started on type
  :math:`t` inside their tenant's quota / on borrowed capacity (no :math:`\ell_{ct}` on the
  types of ``EpochProblem.no_loan``, where jobs a node loss stops restart next);
* :math:`y_p \in \{0,1\}`: guest pair :math:`p = (c, h)` starts singleton class :math:`c` as
  MPS guest of host :math:`h`;
* :math:`z_r \in \{0,1\}`: running job :math:`r` is preempted (only for candidates);
* :math:`b_{it}, e_{it} \in \mathbb{Z}_{\ge 0}`: GPUs tenant :math:`i` borrows / lends on
  type :math:`t`, bounded by ``borrow_limit`` and ``lend_limit``;
* :math:`u_r, d_r \in \mathbb{Z}_{\ge 0}`: steps running elastic job :math:`r` grows / shrinks
  (:mod:`optsched.engine.elastic`), never both (a binary direction :math:`\omega_r`), neither
  when it is preempted.

Constraint families, one function each, named after the invariant they enforce
(``docs/snapshot-format.md``):

* ``add_start_or_queue`` (5): :math:`\sum_k s_{c,k} = \sum_t (o_{ct} + \ell_{ct})`, and a
  singleton class starts at most once, :math:`\sum_t (o_{ct} + \ell_{ct}) + \sum_{p \ni c} y_p
  \le 1`, and an elastic job starts at one size at most, :math:`\sum_{c \in G} s_{c,0} \le 1`
  over the classes of its group :math:`G`.
* ``add_gpu_sharing`` (1): one guest per host (MPS pairs) and none on a stopped host,
  :math:`\sum_{p \to h} y_p \le 1 - z_h`; memory fit and type are filtered per candidate.
* ``add_capacity_and_loans`` (4): per type, started minus preempted host GPUs fit in the free
  capacity; per tenant and type, own starts fit in quota (where the tenant's own jobs already
  run above it, only a decision that starts inside quota must first stop some: a binary
  ``own_start``), :math:`U_{it} - b_{it} + e_{it} - \kappa_{it} \le q_{it}` with
  :math:`\kappa_{it}` the use kept over quota (amended invariant 4), at most what no lender
  covered in the snapshot and at most what the tenant's kept jobs not on loan still hold above
  quota after its own preemptions and shrinks (``kept_is_old_use``: old use, never on-loan or
  new use), and :math:`\sum_i b_{it} \le \sum_i e_{it}`; resized elastic
  jobs count with their new size (:math:`\pm\,\text{step}_r` per step), and growth takes idle
  GPUs only: an elastic job grows on a type only where the decision stops nothing (no
  preemption, no shrink; ``grow_idle_only``, a binary :math:`\gamma_t` per type), so the
  capacity row leaves it just what every start leaves idle.
* ``add_group_limits`` (4, hierarchical quotas): per quota group and type, the net loans
  into the subtree, :math:`\sum_{i \in G} (b_{it} - e_{it})`, within the group's
  ``borrow_limit``, and the net loans out of it within its ``lend_limit``.
* ``add_preemption_rules`` (3): only candidates get a :math:`z` variable (preemptible
  best-effort, on-loan and guest jobs); stopping a host stops its guest; a preemption on a type
  needs a start inside quota there; and the GPUs priority victims (not on loan) free on a type
  are used by starts inside quota on that type in the same decision,
  :math:`\sum_{r \notin L} g_r z_{r} \le \sum_c g_c o_{ct} + \delta_t + G_t - 1 + V_t`
  (:math:`\delta_t`: on-loan use lenders can no longer cover, which must be reclaimed in any
  case; :math:`G_t`: the largest victim gang, which stops whole for a smaller start;
  :math:`V_t`: own use above quota, which a tenant stops to start inside its quota). A reclaim
  (:math:`r \in L`, on loan) may leave GPUs idle, as invariant 3 reads it: a gang is reclaimed
  whole, and a lender's start can leave a loan without cover. Operator
  controls: a job younger than its minimum runtime gets no :math:`z` (it is no candidate);
  ``preemption_cap`` bounds the GPUs of a tenant's priority victims (candidates neither on loan
  nor guests) per decision, :math:`\sum_{r \in i} g_r z_r \le \text{cap}_i`; and
  ``preemption_pays`` charges a priority victim :math:`(1 + h_i)` times its static cost. A
  step of shrinking counts in these rows as ``step`` preempted GPUs (freed, capped, paid for);
  an elastic job grows or shrinks, not both, and neither when it is preempted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from optsched.engine.backends.base import SolveResult, SolveStatus
from optsched.engine.chunks import ChunkBook, carry, chunks_of, level_counts
from optsched.engine.problem import Assignment, EpochProblem, TypePlacement
from optsched.engine.quota_tree import LoanMatcher
from optsched.schema.limits import MILLI_PER_GPU


@dataclass
class Row:
    coefs: dict[int, int] | dict[int, float]
    lo: float
    hi: float
    family: str


@dataclass
class LinearModel:
    """Integer linear program: maximise ``obj`` subject to ``rows`` and variable bounds."""

    names: list[str] = field(default_factory=list)
    lb: list[int] = field(default_factory=list)
    ub: list[int] = field(default_factory=list)
    obj: list[float] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    # maps back to the problem
    seg: dict[int, list[int]] = field(default_factory=dict)
    """class -> its member variables s_{c,0..cap-1}."""
    own: dict[tuple[int, int], int] = field(default_factory=dict)
    loan: dict[tuple[int, int], int] = field(default_factory=dict)
    guest: dict[int, int] = field(default_factory=dict)
    """guest candidate index -> var."""
    preempt: dict[int, int] = field(default_factory=dict)
    grow: dict[int, int] = field(default_factory=dict)
    """running index -> steps it grows (elastic jobs)."""
    shrink: dict[int, int] = field(default_factory=dict)
    """running index -> steps it shrinks (elastic jobs that may be preempted)."""
    grow_dir: dict[int, int] = field(default_factory=dict)
    """running index -> 1 if it may grow, 0 if it may shrink (jobs with both)."""
    grows_on: dict[int, int] = field(default_factory=dict)
    """type -> 1 if an elastic job grows there (then nothing stops there)."""
    borrow: dict[tuple[int, int], int] = field(default_factory=dict)
    lend: dict[tuple[int, int], int] = field(default_factory=dict)
    inflow: dict[tuple[int, int], int] = field(default_factory=dict)
    """(quota group, type) -> var: net loans into the group (0 when it lends)."""
    kept: dict[tuple[int, int], int] = field(default_factory=dict)
    """(tenant, type) -> GPUs kept over quota uncovered (where the problem's ``kept_over`` > 0)."""
    none_kept: dict[tuple[int, int], int] = field(default_factory=dict)
    """(tenant, type) -> 1 if its own stopped jobs leave it no use above quota to keep."""
    own_start: dict[tuple[int, int], int] = field(default_factory=dict)
    """(tenant, type) -> 1 if the tenant starts inside quota there (only where its own jobs
    already run above quota, see ``add_capacity_and_loans``)."""
    guar_start: dict[int, int] = field(default_factory=dict)
    """type -> 1 if a guaranteed job starts inside quota there (only where best-effort victims
    have a ``victim_slack``, see ``add_preemption_rules``)."""
    chunk: dict[tuple[int, int, int], int] = field(default_factory=dict)
    """(type, movable node position, level) -> maximal free chunks of that level the node has
    after the decision's stops (``add_node_shape``)."""
    split: dict[tuple[int, int], int] = field(default_factory=dict)
    """(type, level) -> chunks of the next level split into two of this one."""
    opened: dict[int, int] = field(default_factory=dict)
    """type -> fully free GPUs the decision's shares (fractional starts) open."""
    domain: dict[tuple[int, int, int], int] = field(default_factory=dict)
    """(class, type, domain position) -> members started inside that domain of the type's
    required topology level."""
    offset: float = 0.0
    """Constant term of the objective (the fragmentation of the nodes nothing can change)."""

    def var(self, name: str, lb: int, ub: int, obj: float = 0.0) -> int:
        self.names.append(name)
        self.lb.append(lb)
        self.ub.append(ub)
        self.obj.append(obj)
        return len(self.names) - 1

    def add(self, coefs: dict[int, int] | dict[int, float], lo: float, hi: float, family: str) -> None:
        if coefs:
            self.rows.append(Row(coefs, lo, hi, family))

    @property
    def n(self) -> int:
        return len(self.names)

    def arrays(self) -> dict[str, Any]:
        """The model as plain lists, for a solver in a worker process: ``lb``, ``ub``, ``obj``
        and ``rows`` as ``(lo, hi, variable indices, coefficients)``."""
        rows = [(r.lo, r.hi, list(r.coefs), list(r.coefs.values())) for r in self.rows]
        return {"lb": self.lb, "ub": self.ub, "obj": self.obj, "rows": rows}


INF = float("inf")
PAY_SCALE = 100
"""Static values and costs enter the ``preemption_pays`` rows in hundredths (integers)."""


def add_variables(m: LinearModel, p: EpochProblem) -> None:
    for c, cls in enumerate(p.pending):
        if cls.cap <= 0:
            continue
        names = [cls.label] if cls.group else cls.jobs
        m.seg[c] = [m.var(f"start[{names[k]}]", 0, 1, cls.values[k]) for k in range(cls.cap)]
        for t, bonus in zip(cls.types, cls.type_bonus, strict=True):
            if t in cls.own_types:
                reclaim = p.reclaim_of(cls)  # a reclaim starts inside quota
                m.own[(c, t)] = m.var(f"own[{cls.label},{p.types[t]}]", 0, cls.cap, bonus + reclaim)
            if t in p.no_loan:
                continue  # after a node loss, no start on loan where its jobs restart (node_loss)
            m.loan[(c, t)] = m.var(f"loan[{cls.label},{p.types[t]}]", 0, cls.cap, bonus - cls.loan_penalty)
    _placement_variables(m, p)
    for g, cand in enumerate(p.guests):
        name = f"guest[{p.pending[cand.pending].label},{p.running[cand.running].job}]"
        m.guest[g] = m.var(name, 0, 1, cand.value)
    for r, run in enumerate(p.running):
        if run.candidate:
            m.preempt[r] = m.var(f"preempt[{run.job}]", 0, 1, -run.cost)
        if run.grow_steps:
            tp = p.placement_of(run.type)
            frag = p.frag_scale * tp.frag[0] * run.step if tp is not None else 0.0
            m.grow[r] = m.var(f"grow[{run.job}]", 0, run.grow_steps, run.grow_value + frag)
        if run.shrink_steps:
            m.shrink[r] = m.var(f"shrink[{run.job}]", 0, run.shrink_steps, -run.shrink_cost)
        if run.grow_steps and run.shrink_steps:
            m.grow_dir[r] = m.var(f"grow_dir[{run.job}]", 0, 1)
    for i, ten in enumerate(p.tenants):
        for t, tname in enumerate(p.types):
            cap = p.capacity[t]
            if cap == 0:
                continue
            bl = p.borrow_limit[i][t]
            m.borrow[(i, t)] = m.var(
                f"borrow[{ten},{tname}]", 0, cap if bl is None else min(bl, cap), -p.objective.borrow_penalty
            )
            q = p.quota[i][t]
            # a tenant running above quota with use no lender covers lends only what its own
            # stopped jobs leave idle below its quota: its kept allowance shrinks with them
            # (``kept_is_old_use``), so it never turns into lendable GPUs
            if q > 0:
                ll = p.lend_limit[i][t]
                m.lend[(i, t)] = m.var(f"lend[{ten},{tname}]", 0, q if ll is None else min(ll, q))


def _placement_variables(m: LinearModel, p: EpochProblem) -> None:
    """The variables of ``add_node_shape``, with their fragmentation cost (and the starts'
    share of it, on the start variables made just before)."""
    phi = p.frag_scale
    for t, tname in enumerate(p.types):
        tp = p.placement_of(t)
        if tp is None:
            continue
        levels, top = tp.levels, tp.top
        for k, mn in enumerate(tp.movable):
            most = mn.free + sum(g for _, g in mn.holders)
            for ell, size in enumerate(levels):
                if size <= most:
                    name = f"chunk[{tname},{mn.index},{size}]"
                    m.chunk[(t, k, ell)] = m.var(name, 0, most // size, -phi * tp.frag[ell])
        for ell in range(top):
            cost = 2 * tp.frag[ell] - tp.frag[ell + 1]
            ub = p.capacity[t] // levels[ell + 1]
            m.split[(t, ell)] = m.var(f"split[{tname},{levels[ell + 1]}]", 0, ub, -phi * cost)
        m.offset -= phi * sum(f * x for f, x in zip(tp.frag, tp.fixed, strict=True))
        if any(cls.shape_on(t).fractional for cls in p.pending if t in cls.types and cls.cap > 0):
            m.opened[t] = m.var(f"opened[{tname}]", 0, p.capacity[t], phi * tp.frag[0])
        for c, cls in enumerate(p.pending):
            if cls.cap <= 0 or t not in cls.types:
                continue
            counts = level_counts(cls.shape_on(t), levels)
            gain = phi * sum(f * n for f, n in zip(tp.frag, counts, strict=True))
            for var in (m.own.get((c, t)), m.loan.get((c, t))):
                if var is not None:
                    m.obj[var] += gain
            sh = cls.shape_on(t)
            if sh.level >= 0 and sh.required and sh.nodes > 1 and sh.level == tp.domain_level:
                for d, (dom, _) in enumerate(tp.domains):
                    name = f"domain[{cls.label},{tname},{'/'.join(dom)}]"
                    m.domain[(c, t, d)] = m.var(name, 0, cls.cap)


def add_start_or_queue(m: LinearModel, p: EpochProblem) -> None:
    """Invariant 5: each pending job starts at most once (else it is queued); members start
    as a prefix of their class."""
    starts: dict[int, dict[int, int]] = {c: {} for c in m.seg}
    for (c, _), v in m.own.items():
        starts[c][v] = 1
    for (c, _), v in m.loan.items():
        starts[c][v] = 1
    for c, segs in m.seg.items():
        job = p.pending[c].label
        m.add({**{s: 1 for s in segs}, **{v: -1 for v in starts[c]}}, 0, 0, f"start_count[{job}]")
        for k in range(len(segs) - 1):
            m.add({segs[k]: 1, segs[k + 1]: -1}, 0, INF, f"start_order[{p.pending[c].jobs[k + 1]}]")
    by_class: dict[int, dict[int, int]] = {}
    for g, v in m.guest.items():
        by_class.setdefault(p.guests[g].pending, {})[v] = 1
    for c, coefs in by_class.items():
        if c in m.seg:
            coefs = {**coefs, m.seg[c][0]: 1}
        m.add(coefs, -INF, 1, f"start_or_queue[{p.pending[c].job}]")
    groups: dict[str, dict[int, int]] = {}
    for c, segs in m.seg.items():
        if p.pending[c].group:
            groups.setdefault(p.pending[c].group, {})[segs[0]] = 1
    for job, coefs in groups.items():
        if len(coefs) > 1:
            m.add(coefs, -INF, 1, f"one_size[{job}]")


def _resize_rules(m: LinearModel, p: EpochProblem) -> None:
    """Elastic jobs (part of ``add_preemption_rules``): grow or shrink, not both, and neither
    when preempted."""
    for r, d in m.grow_dir.items():
        g, s = p.running[r].grow_steps, p.running[r].shrink_steps
        m.add({m.grow[r]: 1, d: -g}, -INF, 0, f"grow_dir[{p.running[r].job}]")
        m.add({m.shrink[r]: 1, d: s}, -INF, s, f"shrink_dir[{p.running[r].job}]")
    for r, z in m.preempt.items():
        run = p.running[r]
        pairs = (("grow", m.grow.get(r), run.grow_steps), ("shrink", m.shrink.get(r), run.shrink_steps))
        for what, var, n in pairs:
            if var is not None:
                m.add({var: 1, z: n}, -INF, n, f"{what}_or_preempt[{run.job}]")


def add_gpu_sharing(m: LinearModel, p: EpochProblem) -> None:
    """Invariant 1: at most one guest per host (pairs); no guest on a stopped host."""
    by_host: dict[int, dict[int, int]] = {}
    for g, v in m.guest.items():
        cand = p.guests[g]
        assert p.pending[cand.pending].gpus <= p.running[cand.running].free_slots
        by_host.setdefault(cand.running, {})[v] = 1
    for h, coefs in by_host.items():
        if h in m.preempt:
            coefs = {**coefs, m.preempt[h]: 1}
        m.add(coefs, -INF, 1, f"gpu_sharing[{p.running[h].job}]")


def add_capacity_and_loans(m: LinearModel, p: EpochProblem) -> None:
    """Invariant 4: capacity per type, quota per tenant, loans within limits."""
    used = p.used()
    held_all = p.held(own_only=False)
    held_own = p.held(own_only=True)
    nt, nk = len(p.types), len(p.tenants)
    cap_rows: list[dict[int, int]] = [{} for _ in range(nt)]
    own_rows: list[list[dict[int, int]]] = [[{} for _ in range(nt)] for _ in range(nk)]
    use_rows: list[list[dict[int, int]]] = [[{} for _ in range(nt)] for _ in range(nk)]
    for (c, t), v in m.own.items():
        g, i = p.pending[c].gpus, p.pending[c].tenant
        if not p.pending[c].shape_on(t).fractional:  # a share's GPU is ``opened`` (node shape)
            cap_rows[t][v] = g
        own_rows[i][t][v] = g
        use_rows[i][t][v] = g
    for (c, t), v in m.loan.items():
        g, i = p.pending[c].gpus, p.pending[c].tenant
        if not p.pending[c].shape_on(t).fractional:
            cap_rows[t][v] = g
        use_rows[i][t][v] = g
    for t, v in m.opened.items():
        cap_rows[t][v] = 1
    for r, v in m.preempt.items():
        run = p.running[r]
        if run.guest:
            continue
        cap_rows[run.type][v] = -run.gpus
        use_rows[run.tenant][run.type][v] = -run.gpus
        if not run.on_loan:
            own_rows[run.tenant][run.type][v] = -run.gpus
    grows: list[dict[int, int]] = [{} for _ in range(nt)]
    stops: list[dict[int, int]] = [{} for _ in range(nt)]
    for sign, vars_ in ((1, m.grow), (-1, m.shrink)):
        for r, v in vars_.items():
            run = p.running[r]
            cap_rows[run.type][v] = sign * run.step
            use_rows[run.tenant][run.type][v] = sign * run.step
            if not run.on_loan:
                own_rows[run.tenant][run.type][v] = sign * run.step
            (grows if sign > 0 else stops)[run.type][v] = run.step
    for r, v in m.preempt.items():
        if not p.running[r].guest:
            stops[p.running[r].type][v] = p.running[r].gpus
    for t, tname in enumerate(p.types):
        m.add(cap_rows[t], -INF, p.capacity[t] - used[t], f"capacity[{tname}]")
        if grows[t] and stops[t]:
            # growth takes only idle GPUs: it happens on a type only where the decision stops
            # nothing (then the capacity row leaves it what every start leaves idle)
            gam = m.grows_on[t] = m.var(f"grows_on[{tname}]", 0, 1)
            big_g = sum(c * m.ub[v] for v, c in grows[t].items())
            big_s = sum(c * m.ub[v] for v, c in stops[t].items())
            m.add({**grows[t], gam: -big_g}, -INF, 0, f"grow_on_type[{tname}]")
            m.add({**stops[t], gam: big_s}, -INF, big_s, f"grow_idle_only[{tname}]")
        bal = {v: 1 for (_, tt), v in m.borrow.items() if tt == t}
        bal.update({v: -1 for (_, tt), v in m.lend.items() if tt == t})
        m.add(bal, -INF, 0, f"loan_balance[{tname}]")
    for i, ten in enumerate(p.tenants):
        for t, tname in enumerate(p.types):
            own = own_rows[i][t]
            if any(c > 0 for c in own.values()):
                room = p.quota[i][t] - held_own[i][t]
                if room < 0:
                    # its own jobs already run above quota (lenders cover them): that binds only
                    # a decision that starts inside quota (then it must first stop some of
                    # them); without such a start nothing has to stop, as the checker reads it
                    starts = {v: c for v, c in own.items() if c > 0}
                    w = m.own_start[(i, t)] = m.var(f"own_start[{ten},{tname}]", 0, 1)
                    big = sum(c * m.ub[v] for v, c in starts.items())
                    m.add({**starts, w: -big}, -INF, 0, f"own_start_on[{ten},{tname}]")
                    own = {**own, w: -room}
                    room = 0
                m.add(own, -INF, room, f"own_quota[{ten},{tname}]")
            total = use_rows[i][t]
            if (i, t) in m.borrow:
                total[m.borrow[(i, t)]] = -1
            if (i, t) in m.lend:
                total[m.lend[(i, t)]] = 1
            if total and p.kept_over[i][t] > 0:
                # what may stay uncovered is old use of its jobs not on loan that keep running:
                # stopping or shrinking them uses the allowance up first (as the checker reads
                # the amendment), so it never covers on-loan or new use
                k = m.kept[(i, t)] = m.var(f"kept[{ten},{tname}]", 0, p.kept_over[i][t])
                total[k] = -1
                old = {k: 1}
                for r, v in m.preempt.items():
                    run = p.running[r]
                    if run.tenant == i and run.type == t and not run.guest and not run.on_loan:
                        old[v] = run.gpus
                for r, v in m.shrink.items():
                    run = p.running[r]
                    if run.tenant == i and run.type == t and not run.on_loan:
                        old[v] = run.step
                if len(old) > 1:
                    # k <= max(0, H - F): stopping more than its use above quota (H) leaves
                    # nothing kept (``none_kept`` = 1), else k + F <= H
                    over = held_own[i][t] - p.quota[i][t]
                    y = m.none_kept[(i, t)] = m.var(f"none_kept[{ten},{tname}]", 0, 1)
                    big = sum(c * m.ub[v] for v, c in old.items() if v != k)
                    m.add({**old, y: -big}, -INF, over, f"kept_is_old_use[{ten},{tname}]")
                    m.add({k: 1, y: p.kept_over[i][t]}, -INF, p.kept_over[i][t], f"none_kept[{ten},{tname}]")
            if total:
                m.add(total, -INF, p.quota[i][t] - held_all[i][t], f"tenant_use[{ten},{tname}]")
    add_group_limits(m, p)
    add_group_inflow(m, p)


def add_group_limits(m: LinearModel, p: EpochProblem) -> None:
    r"""Hierarchical quotas: per quota group :math:`G` and type, the net flow of loans across
    its boundary, :math:`\sum_{i \in G} (b_{it} - e_{it})`, is at most its ``borrow_limit``
    (``group_borrow``) and at least minus its ``lend_limit`` (``group_lend``). Loans matched
    inside the smallest enclosing subtree first cross each boundary by exactly that net amount
    (``optsched.engine.quota_tree``), so these rows are the whole tree's rule."""
    tree = p.tree
    for g, node in enumerate(tree.groups):
        for t, tname in enumerate(p.types):
            bl, ll = tree.borrow_limit(g, tname), tree.lend_limit(g, tname)
            if bl is None and ll is None:
                continue
            net: dict[int, int] = {}
            for i in node.members:
                if (i, t) in m.borrow:
                    net[m.borrow[(i, t)]] = 1
                if (i, t) in m.lend:
                    net[m.lend[(i, t)]] = -1
            if bl is not None:
                m.add(net, -INF, bl, f"group_borrow[{node.id},{tname}]")
            if ll is not None:
                m.add({v: -c for v, c in net.items()}, -INF, ll, f"group_lend[{node.id},{tname}]")


def add_group_inflow(m: LinearModel, p: EpochProblem) -> None:
    r"""Hierarchical quotas, lending inside a subtree first: per quota group and type,
    :math:`f_{Gt} \ge \sum_{i \in G} (b_{it} - e_{it})`, :math:`f_{Gt} \ge 0`, each GPU of it
    charged the borrow tie-breaker (``objective.value`` counts the same,
    ``Assignment.inflow``): among equal plans, the one whose loans cross fewer group
    boundaries wins."""
    tree = p.tree
    for g, node in enumerate(tree.groups):
        for t, tname in enumerate(p.types):
            net: dict[int, int] = {}
            for i in node.members:
                if (i, t) in m.borrow:
                    net[m.borrow[(i, t)]] = 1
                if (i, t) in m.lend:
                    net[m.lend[(i, t)]] = -1
            if not net:
                continue
            f = m.var(f"inflow[{node.id},{tname}]", 0, p.capacity[t], -p.objective.borrow_penalty)
            m.inflow[(g, t)] = f
            m.add({**net, f: -1}, -INF, 0, f"group_inflow[{node.id},{tname}]")


def add_preemption_rules(m: LinearModel, p: EpochProblem) -> None:
    r"""Invariant 3 is enforced by construction: only candidates have a preemption variable.

    The rows added here keep running guests consistent (a guest runs on its host's GPUs, so
    stopping the host stops the guest, :math:`z_h \le z_g`) and let a preemption happen only
    when the GPUs it frees are used by starts of the same decision.
    """
    _resize_rules(m, p)
    index = {run.job: r for r, run in enumerate(p.running)}
    freed: list[dict[int, int]] = [{} for _ in p.types]
    freed_own: list[dict[int, int]] = [{} for _ in p.types]  # best-effort jobs inside quota
    for r, v in m.preempt.items():
        run = p.running[r]
        assert run.candidate, f"{run.job} is not a preemption candidate"
        if run.host is not None and run.host in index and index[run.host] in m.preempt:
            m.add({m.preempt[index[run.host]]: 1, v: -1}, -INF, 0, f"host_stops_guest[{run.job}]")
        if not run.guest:
            freed[run.type][v] = run.gpus
            if not run.on_loan:
                freed_own[run.type][v] = run.gpus
    for r, v in m.shrink.items():  # a step of shrinking frees ``step`` GPUs, as a preemption
        run = p.running[r]
        freed[run.type][v] = run.step
        if not run.on_loan:
            freed_own[run.type][v] = run.step
    for r, run in enumerate(p.running):
        host = index.get(run.host) if run.host is not None else None
        if host is not None and host in m.preempt and r not in m.preempt:
            raise AssertionError(f"guest {run.job} must be a preemption candidate")
    # stability (no swaps back and forth): a preemption needs a start inside quota on its
    # type (a start on loan never preempts; at least one such start, big-M), and best-effort
    # jobs inside their tenant's quota are stopped only for guaranteed starts inside quota:
    # the GPUs they free on a type are at most those starts' GPUs (a best-effort start never
    # takes them)
    need_own = [dict(f) for f in freed]
    need_guar = [dict(f) for f in freed_own]
    big_own = [sum(c * m.ub[x] for x, c in f.items()) for f in freed]
    for (c, t), v in m.own.items():
        if need_own[t]:
            need_own[t][v] = -big_own[t]
        if need_guar[t] and p.pending[c].guaranteed:
            need_guar[t][v] = -p.pending[c].gpus
    # the GPUs priority preemptions free go to starts inside quota: a start on loan never
    # takes GPUs a priority preemption frees (it borrows idle quota, it does not displace
    # running work), except what is left of a gang stopped whole for a smaller start (less
    # than the type's largest victim gang) and the own jobs a tenant running above its quota
    # stops to start inside it (``own_quota``: at most its use above quota). A reclaim (an
    # on-loan job, whole or shrunk) may leave GPUs idle: its lender may always take them back
    # (invariant 3), a gang is reclaimed whole even when the start it makes room for is
    # smaller, and a lender's start can leave a loan without cover; it still needs a start
    # inside quota on the type (the row below) that pays for it (``preemption_pays``)
    held_own = p.held(own_only=True)
    pairs = list(zip(held_own, p.quota, strict=True))
    over = [sum(max(0, row[t] - q[t]) for row, q in pairs) for t in range(len(p.types))]
    used = [dict(f) for f in freed_own]
    for (c, t), v in m.own.items():
        if used[t]:
            used[t][v] = -p.pending[c].gpus
    for t, tname in enumerate(p.types):
        if any(c > 0 for c in used[t].values()):
            slack = max(c for c in freed_own[t].values()) - 1 + over[t]
            m.add(used[t], -INF, p.deficit[t] + slack, f"preempt_only_if_used[{tname}]")
        if any(c > 0 for c in need_own[t].values()):
            m.add(need_own[t], -INF, p.deficit[t], f"preempt_only_for_own_start[{tname}]")
        if any(c > 0 for c in need_guar[t].values()):
            row = need_guar[t]
            slack = p.slack_of(t)
            guar = [v for (c, tt), v in m.own.items() if tt == t and p.pending[c].guaranteed]
            if slack > 0 and guar:
                # a gang stops whole, also for a smaller start: ``slack`` more GPUs once at
                # least one guaranteed start inside quota takes GPUs of the type
                y = m.guar_start[t] = m.var(f"guaranteed_start_on[{tname}]", 0, 1)
                row = {**row, y: -slack}
                m.add({y: 1, **{v: -1 for v in guar}}, -INF, 0, f"guaranteed_start_on[{tname}]")
            m.add(row, -INF, 0, f"preempt_in_quota_only_for_guaranteed[{tname}]")
    # preemptions are paid with time-invariant worth: the static value of the in-quota starts
    # they make room for (no aging, no assurance scaling; reclaim classes carry their bonus),
    # so in a cluster where nothing changes, waiting longer never tips a job into preempting
    pays: list[dict[int, int]] = [{} for _ in p.types]
    for r, v in m.preempt.items():
        run = p.running[r]
        if not run.guest and p.deficit[run.type] == 0:
            pays[run.type][v] = math.ceil(PAY_SCALE * run.static_cost)
    for r, v in m.shrink.items():
        run = p.running[r]
        if p.deficit[run.type] == 0:
            pays[run.type][v] = math.ceil(PAY_SCALE * run.shrink_static)
    for (c, t), v in m.own.items():
        if pays[t]:
            pays[t][v] = -math.floor(PAY_SCALE * p.pending[c].static_value)
    for t, tname in enumerate(p.types):
        if any(c > 0 for c in pays[t].values()):
            m.add(pays[t], -INF, 0, f"preemption_pays[{tname}]")
    # operator cap: GPUs of a tenant's jobs preempted for priority in one decision
    capped: dict[int, dict[int, int]] = {}
    for r, v in m.preempt.items():
        run = p.running[r]
        if run.priority_victim and p.cap_of(run.tenant) is not None:
            capped.setdefault(run.tenant, {})[v] = run.gpus
    for r, v in m.shrink.items():
        run = p.running[r]
        if run.priority_victim and p.cap_of(run.tenant) is not None:
            capped.setdefault(run.tenant, {})[v] = run.step
    for i, coefs in capped.items():
        cap = p.cap_of(i)
        assert cap is not None
        if sum(c * m.ub[v] for v, c in coefs.items()) > cap:
            m.add(coefs, -INF, cap, f"preemption_cap[{p.tenants[i]}]")


def add_node_shape(m: LinearModel, p: EpochProblem) -> None:
    r"""Invariants 2 and 10 (placement by node shape, :mod:`optsched.engine.chunks`): per type with
    a :class:`~optsched.engine.problem.TypePlacement`,

    * each movable node's free GPUs after the decision's stops are its chunks,
      :math:`\sum_\ell 2^\ell c_{n\ell} = f_n + \sum_{r} g_{rn} z_r (+ \min(	ext{step}_r, g_{rn})
      d_r)` (``node_chunks``; a shrink counted on each of its nodes is a relaxation);
    * the chunks the starts take fit, level by level, with splits :math:`x_\ell`:
      :math:`\sum_c k_{c\ell}(o_{ct} + \ell_{ct}) + x_{\ell-1} - 2x_\ell - \sum_n c_{n\ell} \le E_\ell`
      (``chunks``; :math:`k_{c\ell}` the level-:math:`\ell` chunks of a member's pieces, a spread
      job's GPUs and growth at level 0, the GPUs shares open at level 0);
    * CPUs and host memory in total (``node_cpu``, ``node_memory``), the shares' thousandths
      (``shares``), and per domain of a required topology level, its jobs' chunks at or above
      each level (``topology``), all relaxations that decoding completes.
    """
    for t, tname in enumerate(p.types):
        tp = p.placement_of(t)
        if tp is None:
            continue
        levels, top = tp.levels, tp.top
        demand: list[dict[int, float]] = [{} for _ in levels]
        cpu: dict[int, float] = {}
        mem: dict[int, float] = {}
        shares: dict[int, float] = {}
        for c, cls in enumerate(p.pending):
            if t not in cls.types:
                continue
            sh = cls.shape_on(t)
            counts = level_counts(sh, levels)
            for var in (m.own.get((c, t)), m.loan.get((c, t))):
                if var is None:
                    continue
                for ell, n in enumerate(counts):
                    if n:
                        demand[ell][var] = n
                if sh.cpu_milli:
                    cpu[var] = sh.cpu_milli * max(1, sh.nodes)
                if sh.memory_mib:
                    mem[var] = sh.memory_mib * max(1, sh.nodes)
                if sh.fractional:
                    shares[var] = sh.milli
        for r, v in m.grow.items():
            if p.running[r].type == t:
                demand[0][v] = p.running[r].step
        if t in m.opened:
            demand[0][m.opened[t]] = 1
            m.add({**shares, m.opened[t]: -MILLI_PER_GPU}, -INF, tp.share_free, f"shares[{tname}]")
        for k, mn in enumerate(tp.movable):
            row: dict[int, int] = {}
            for ell, size in enumerate(levels):
                var = m.chunk.get((t, k, ell))
                if var is not None:
                    row[var] = size
            for r, g in mn.holders:
                if r in m.preempt:
                    row[m.preempt[r]] = -g
                if r in m.shrink:
                    row[m.shrink[r]] = -min(p.running[r].step, g)
            m.add(row, mn.free, mn.free, f"node_chunks[{tname},{mn.index}]")
        for ell, size in enumerate(levels):
            row_l: dict[int, float] = dict(demand[ell])
            if ell > 0:
                row_l[m.split[(t, ell - 1)]] = 1
            if ell < top:
                row_l[m.split[(t, ell)]] = -2
            for k in range(len(tp.movable)):
                var = m.chunk.get((t, k, ell))
                if var is not None:
                    row_l[var] = -1
            m.add(row_l, -INF, tp.fixed[ell], f"chunks[{tname},{size}]")
        _host_rows(m, p, t, tp, cpu, mem)
        _topology_rows(m, p, t, tp)


def _host_rows(
    m: LinearModel, p: EpochProblem, t: int, tp: TypePlacement, cpu: dict[int, float], mem: dict[int, float]
) -> None:
    """CPUs and host memory on the type's nodes, in total (part of ``add_node_shape``): what the
    starts need fits what is free plus what the stopped jobs free."""
    tname = p.types[t]
    for need, free, what in ((cpu, tp.cpu_free, "cpu"), (mem, tp.mem_free, "memory")):
        if free is None or not need:
            continue
        row = dict(need)
        for r, v in m.preempt.items():
            run = p.running[r]
            if run.type == t and not run.guest:
                per = run.cpu_milli if what == "cpu" else run.memory_mib
                if per:
                    row[v] = -per * max(1, len(run.nodes))
        for r, v in m.shrink.items():
            run = p.running[r]
            per = run.cpu_milli if what == "cpu" else run.memory_mib
            if run.type == t and per:
                row[v] = -per * max(1, len(run.nodes))
        m.add(row, -INF, free, f"node_{what}[{tname}]")


def _topology_rows(m: LinearModel, p: EpochProblem, t: int, tp: TypePlacement) -> None:
    """Required topology (part of ``add_node_shape``): each such member starts in one domain of
    the level, and per domain the chunks its members take at or above each level fit the
    domain's chunks at or above it."""
    if not tp.domains:
        return
    tname = p.types[t]
    levels = tp.levels
    mine: dict[int, dict[int, int]] = {}
    for (c, tt, d), v in m.domain.items():
        if tt == t:
            mine.setdefault(c, {})[d] = v
    for c, doms in mine.items():
        row: dict[int, int] = {v: 1 for v in doms.values()}
        for var in (m.own.get((c, t)), m.loan.get((c, t))):
            if var is not None:
                row[var] = -1
        m.add(row, 0, 0, f"one_domain[{p.pending[c].label},{tname}]")
    for d, (dom, fixed) in enumerate(tp.domains):
        movable = [k for k, mn in enumerate(tp.movable) if mn.domain == dom]
        for ell in range(len(levels)):
            row_d: dict[int, float] = {}
            rhs = 0
            for hi in range(ell, len(levels)):
                w = 2 ** (hi - ell)
                rhs += w * fixed[hi]
                for k in movable:
                    var = m.chunk.get((t, k, hi))
                    if var is not None:
                        row_d[var] = row_d.get(var, 0) - w
                for c, doms in mine.items():
                    n = level_counts(p.pending[c].shape_on(t), levels)[hi]
                    if n and d in doms:
                        row_d[doms[d]] = row_d.get(doms[d], 0) + w * n
            if any(c > 0 for c in row_d.values()):
                m.add(row_d, -INF, rhs, f"topology[{tname},{'/'.join(dom)},{levels[ell]}]")


CONSTRAINT_FAMILIES = (
    add_gpu_sharing,
    add_preemption_rules,
    add_capacity_and_loans,
    add_node_shape,
    add_start_or_queue,
)


def build_model(p: EpochProblem) -> LinearModel:
    """The whole model of one epoch."""
    m = LinearModel()
    add_variables(m, p)
    for family in CONSTRAINT_FAMILIES:
        family(m, p)
    return m


def to_assignment(m: LinearModel, p: EpochProblem, values: Sequence[float]) -> Assignment:
    """Read a solution vector back into an :class:`Assignment`."""
    a = Assignment()
    for (c, t), v in m.own.items():
        k = round(values[v])
        if k > 0:
            a.add(c, t, False, k)
    for (c, t), v in m.loan.items():
        k = round(values[v])
        if k > 0:
            a.add(c, t, True, k)
    for g, v in m.guest.items():
        if values[v] > 0.5:
            cand = p.guests[g]
            a.guests[cand.pending] = cand.running
    for r, v in m.preempt.items():
        if values[v] > 0.5:
            a.preempt.add(r)
    for r in set(m.grow) | set(m.shrink):
        d = round(values[m.grow[r]]) if r in m.grow else 0
        d -= round(values[m.shrink[r]]) if r in m.shrink else 0
        if d and r not in a.preempt:
            a.resize[r] = d
    return a


def solved(
    m: LinearModel,
    p: EpochProblem,
    values: Sequence[float],
    status: SolveStatus,
    backend: str,
    seconds: float,
    bound: float | None,
    detail: str,
) -> SolveResult:
    """A backend's solution vector as a :class:`SolveResult` (objective in original units)."""
    a = to_assignment(m, p, values)
    return SolveResult(
        status=status,
        backend=backend,
        seconds=seconds,
        assignment=a,
        objective=a.objective(p),
        bound=None if bound is None else bound + m.offset,
        detail=f"{detail}; {m.n} vars, {len(m.rows)} rows",
    )


def from_assignment(m: LinearModel, p: EpochProblem, a: Assignment) -> list[int]:
    """A full variable vector for an assignment (the warm start), loans filled minimally."""
    x = [0] * m.n
    for c, counts in a.starts.items():
        n = 0
        for (t, loan), k in counts.items():
            key = (c, t)
            if loan or key not in m.own:
                x[m.loan[key]] += k
            else:
                x[m.own[key]] += k
            n += k
        for s in m.seg.get(c, [])[:n]:
            x[s] = 1
    index = {(g.pending, g.running): k for k, g in enumerate(p.guests)}
    for c, r in a.guests.items():
        x[m.guest[index[(c, r)]]] = 1
    for r in a.preempt:
        x[m.preempt[r]] = 1
    for r, d in a.resize.items():
        if d > 0:
            x[m.grow[r]] = d
            if r in m.grow_dir:
                x[m.grow_dir[r]] = 1
        else:
            x[m.shrink[r]] = -d
        t = p.running[r].type
        if d > 0 and t in m.grows_on:
            x[m.grows_on[t]] = 1
    for c, counts in a.starts.items():
        for (t, loan), k in counts.items():
            w = m.own_start.get((p.pending[c].tenant, t))
            if w is not None and not loan and k > 0 and (c, t) in m.own:
                x[w] = 1
    for r, d in a.resize.items():
        run = p.running[r]
        w = m.own_start.get((run.tenant, run.type))
        if w is not None and d > 0 and not run.on_loan:
            x[w] = 1
    for t, w in m.guar_start.items():
        if any(x[v] > 0 for (c, tt), v in m.own.items() if tt == t and p.pending[c].guaranteed):
            x[w] = 1
    # minimal loans: borrowers take exactly their excess, lenders give idle quota in order
    use = a.use(p)
    kept = a.kept_over(p)
    for (i, t), v in m.kept.items():
        x[v] = kept[i][t]
    if m.none_kept:
        held = p.held(own_only=True)
        below = [[q - h for q, h in zip(qs, hs, strict=True)] for qs, hs in zip(p.quota, held, strict=True)]
        for r in a.preempt:
            run = p.running[r]
            if not run.guest and not run.on_loan:
                below[run.tenant][run.type] += run.gpus
        for r, d in a.resize.items():
            run = p.running[r]
            if d < 0 and not run.on_loan:
                below[run.tenant][run.type] -= d * run.step
        for (i, t), v in m.none_kept.items():
            x[v] = 1 if below[i][t] > 0 else 0  # its own stopped jobs took it below quota
    for t in range(len(p.types)):
        if not p.tree.empty:
            _tree_loans(m, p, use, kept, t, x)
            continue
        need = 0
        for i in range(len(p.tenants)):
            excess = use[i][t] - p.quota[i][t] - kept[i][t]
            if excess > 0 and (i, t) in m.borrow:
                x[m.borrow[(i, t)]] = excess
                need += excess
        for i in range(len(p.tenants)):
            if need <= 0:
                break
            if (i, t) not in m.lend:
                continue
            idle = max(0, p.quota[i][t] - use[i][t])
            give = min(idle, m.ub[m.lend[(i, t)]], need)
            x[m.lend[(i, t)]] = give
            need -= give
    _inflow_values(m, p, x)
    _placement_values(m, p, a, x)
    return x


def _placement_values(m: LinearModel, p: EpochProblem, a: Assignment, x: list[int]) -> None:
    """Warm start: the chunks, splits, opened GPUs and domains of ``add_node_shape`` as the
    assignment leaves the nodes (maximal chunks, fewest splits: :mod:`optsched.engine.chunks`)."""
    if not m.chunk and not m.split and not m.opened:
        return
    book = ChunkBook(p, a)
    for t, tb in book.books.items():
        tp = tb.tp
        for k, mn in enumerate(tp.movable):
            for ell, n in enumerate(chunks_of(tb.free[mn.index], tp.levels)):
                var = m.chunk.get((t, k, ell))
                if var is not None:
                    x[var] = n
        _, splits, _ = carry(tb.avail, tb.demand)
        for ell, n in enumerate(splits):
            x[m.split[(t, ell)]] = n
        if t in m.opened:
            x[m.opened[t]] = tb.share_gpus
        position = {dom: d for d, (dom, _) in enumerate(tp.domains)}
        for c, doms in tb.chosen.items():
            for dom in doms:
                var = m.domain.get((c, t, position[dom]))
                if var is not None:
                    x[var] += 1


def _inflow_values(m: LinearModel, p: EpochProblem, x: list[int]) -> None:
    """Warm start: each group's inflow variable at its net loans in (0 when it lends)."""
    for (g, t), f in m.inflow.items():
        net = 0
        for i in p.tree.groups[g].members:
            if (i, t) in m.borrow:
                net += x[m.borrow[(i, t)]]
            if (i, t) in m.lend:
                net -= x[m.lend[(i, t)]]
        x[f] = max(0, net)


def _tree_loans(
    m: LinearModel, p: EpochProblem, use: list[list[int]], kept: list[list[int]], t: int, x: list[int]
) -> None:
    """Minimal loans of the warm start under a quota tree: matched inside the smallest
    enclosing subtree first, within the groups' limits."""
    demands: list[tuple[int, int]] = []
    for i in range(len(p.tenants)):
        excess = use[i][t] - p.quota[i][t] - kept[i][t]
        if excess > 0 and (i, t) in m.borrow:
            x[m.borrow[(i, t)]] = excess
            demands.append((i, excess))
    supply = {
        i: min(max(0, p.quota[i][t] - use[i][t]), m.ub[m.lend[(i, t)]])
        for i in range(len(p.tenants))
        if (i, t) in m.lend
    }
    for lender, _, g in LoanMatcher(p.tree, p.types[t], supply, range(len(p.tenants))).cover(demands):
        x[m.lend[(lender, t)]] += g


def is_feasible(m: LinearModel, x: list[int]) -> bool:
    """Whether ``x`` satisfies every row and bound (used to validate warm starts)."""
    if any(not (m.lb[k] <= x[k] <= m.ub[k]) for k in range(m.n)):
        return False
    for row in m.rows:
        s = sum(c * x[v] for v, c in row.coefs.items())
        if s < row.lo - 1e-9 or s > row.hi + 1e-9:
            return False
    return True

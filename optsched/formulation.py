r"""The one optimization model of an epoch, written once in solver-neutral linear form.

Both backends (CP-SAT and HiGHS) translate the same :class:`LinearModel`, so they solve the
same problem. Variables (all integer):

* :math:`o_{jt}, \ell_{jt} \in \{0,1\}`: pending job :math:`j` starts on type :math:`t`
  inside its tenant's quota / on borrowed capacity;
* :math:`y_c \in \{0,1\}`: guest candidate :math:`c = (j, h)` starts as MPS guest of host
  :math:`h`;
* :math:`z_r \in \{0,1\}`: running job :math:`r` is preempted (only for candidates);
* :math:`b_{it}, e_{it} \in \mathbb{Z}_{\ge 0}`: GPUs tenant :math:`i` borrows / lends on
  type :math:`t`, bounded by ``borrow_limit`` and ``lend_limit``.

Constraint families, one function each, named after the spec invariant they enforce:

* ``add_start_or_queue`` (5): :math:`\sum_t (o_{jt} + \ell_{jt}) + \sum_{c \ni j} y_c \le 1`.
* ``add_gpu_sharing`` (1): one guest per host (MPS pairs) and none on a stopped host,
  :math:`\sum_{c \to h} y_c \le 1 - z_h`; memory fit and type are filtered per candidate.
* ``add_capacity_and_loans`` (4): per type, started minus preempted host GPUs fit in the free
  capacity; per tenant and type, own starts fit in quota,
  :math:`U_{it} - b_{it} + e_{it} \le q_{it}`, and :math:`\sum_i b_{it} \le \sum_i e_{it}`.
* ``add_preemption_rules`` (3): only candidates get a :math:`z` variable (preemptible
  best-effort, on-loan and guest jobs); guaranteed jobs inside quota never do.

Objective (maximise): :math:`\sum v_{jt}(o_{jt} + (1-\epsilon)\ell_{jt}) + \sum v_c y_c -
\sum c_r z_r - \epsilon' \sum b_{it}`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from optsched.backends.base import SolveResult, SolveStatus
from optsched.problem import LOAN_PENALTY, Assignment, EpochProblem

BORROW_PENALTY = 1e-3


@dataclass
class Row:
    coefs: dict[int, int]
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
    own: dict[tuple[int, int], int] = field(default_factory=dict)
    loan: dict[tuple[int, int], int] = field(default_factory=dict)
    guest: dict[int, int] = field(default_factory=dict)
    """guest candidate index -> var."""
    preempt: dict[int, int] = field(default_factory=dict)
    borrow: dict[tuple[int, int], int] = field(default_factory=dict)
    lend: dict[tuple[int, int], int] = field(default_factory=dict)

    def var(self, name: str, lb: int, ub: int, obj: float = 0.0) -> int:
        self.names.append(name)
        self.lb.append(lb)
        self.ub.append(ub)
        self.obj.append(obj)
        return len(self.names) - 1

    def add(self, coefs: dict[int, int], lo: float, hi: float, family: str) -> None:
        if coefs:
            self.rows.append(Row(coefs, lo, hi, family))

    @property
    def n(self) -> int:
        return len(self.names)


INF = float("inf")


def add_variables(m: LinearModel, p: EpochProblem) -> None:
    for j, it in enumerate(p.pending):
        for t, v in zip(it.types, it.values, strict=True):
            if t in it.own_types:
                m.own[(j, t)] = m.var(f"own[{it.job},{p.types[t]}]", 0, 1, v)
            m.loan[(j, t)] = m.var(f"loan[{it.job},{p.types[t]}]", 0, 1, v * (1 - LOAN_PENALTY))
    for c, g in enumerate(p.guests):
        m.guest[c] = m.var(f"guest[{p.pending[g.pending].job},{p.running[g.running].job}]", 0, 1, g.value)
    for r, run in enumerate(p.running):
        if run.candidate:
            m.preempt[r] = m.var(f"preempt[{run.job}]", 0, 1, -run.cost)
    for i, ten in enumerate(p.tenants):
        for t, tname in enumerate(p.types):
            cap = p.capacity[t]
            if cap == 0:
                continue
            bl = p.borrow_limit[i][t]
            m.borrow[(i, t)] = m.var(
                f"borrow[{ten},{tname}]", 0, cap if bl is None else min(bl, cap), -BORROW_PENALTY
            )
            q = p.quota[i][t]
            if q > 0:
                ll = p.lend_limit[i][t]
                m.lend[(i, t)] = m.var(f"lend[{ten},{tname}]", 0, q if ll is None else min(ll, q))


def add_start_or_queue(m: LinearModel, p: EpochProblem) -> None:
    """Invariant 5: each pending job starts at most once (else it is queued)."""
    rows: dict[int, dict[int, int]] = {j: {} for j in range(len(p.pending))}
    for (j, _), v in m.own.items():
        rows[j][v] = 1
    for (j, _), v in m.loan.items():
        rows[j][v] = 1
    for c, v in m.guest.items():
        rows[p.guests[c].pending][v] = 1
    for j, coefs in rows.items():
        if len(coefs) > 1:
            m.add(coefs, -INF, 1, f"start_or_queue[{p.pending[j].job}]")


def add_gpu_sharing(m: LinearModel, p: EpochProblem) -> None:
    """Invariant 1: at most one guest per host (pairs); no guest on a stopped host."""
    by_host: dict[int, dict[int, int]] = {}
    for c, v in m.guest.items():
        g = p.guests[c]
        assert p.pending[g.pending].gpus <= p.running[g.running].free_slots
        by_host.setdefault(g.running, {})[v] = 1
    for h, coefs in by_host.items():
        if h in m.preempt:
            coefs = {**coefs, m.preempt[h]: 1}
        m.add(coefs, -INF, 1, f"gpu_sharing[{p.running[h].job}]")


def add_capacity_and_loans(m: LinearModel, p: EpochProblem) -> None:
    """Invariant 4: capacity per type, quota per tenant, loans within limits."""
    used = p.used()
    held_all = p.held(own_only=False)
    held_own = p.held(own_only=True)
    for t, tname in enumerate(p.types):
        coefs: dict[int, int] = {}
        for (j, tt), v in list(m.own.items()) + list(m.loan.items()):
            if tt == t:
                coefs[v] = p.pending[j].gpus
        for r, v in m.preempt.items():
            run = p.running[r]
            if run.type == t and not run.guest:
                coefs[v] = -run.gpus
        m.add(coefs, -INF, p.capacity[t] - used[t], f"capacity[{tname}]")
        bal: dict[int, int] = {}
        for (_, tt), v in m.borrow.items():
            if tt == t:
                bal[v] = 1
        for (_, tt), v in m.lend.items():
            if tt == t:
                bal[v] = -1
        m.add(bal, -INF, 0, f"loan_balance[{tname}]")
    for i, ten in enumerate(p.tenants):
        for t, tname in enumerate(p.types):
            own: dict[int, int] = {}
            total: dict[int, int] = {}
            for (j, tt), v in m.own.items():
                if tt == t and p.pending[j].tenant == i:
                    own[v] = p.pending[j].gpus
                    total[v] = p.pending[j].gpus
            for (j, tt), v in m.loan.items():
                if tt == t and p.pending[j].tenant == i:
                    total[v] = p.pending[j].gpus
            for r, v in m.preempt.items():
                run = p.running[r]
                if run.tenant == i and run.type == t and not run.guest:
                    total[v] = -run.gpus
                    if not run.on_loan:
                        own[v] = -run.gpus
            if any(c > 0 for c in own.values()):
                m.add(own, -INF, p.quota[i][t] - held_own[i][t], f"own_quota[{ten},{tname}]")
            if (i, t) in m.borrow:
                total[m.borrow[(i, t)]] = -1
            if (i, t) in m.lend:
                total[m.lend[(i, t)]] = 1
            if total:
                m.add(total, -INF, p.quota[i][t] - held_all[i][t], f"tenant_use[{ten},{tname}]")


def add_preemption_rules(m: LinearModel, p: EpochProblem) -> None:
    r"""Invariant 3 is enforced by construction: only candidates have a preemption variable.

    The rows added here keep running guests consistent: a guest runs on its host's GPUs, so
    stopping the host stops the guest (:math:`z_h \le z_g`).
    """
    index = {run.job: r for r, run in enumerate(p.running)}
    for r, v in m.preempt.items():
        run = p.running[r]
        assert run.candidate, f"{run.job} is not a preemption candidate"
        if run.host is not None and run.host in index and index[run.host] in m.preempt:
            # the guest's GPUs are its host's: stopping the host stops the guest
            m.add({m.preempt[index[run.host]]: 1, v: -1}, -INF, 0, f"host_stops_guest[{run.job}]")
    for r, run in enumerate(p.running):
        host = index.get(run.host) if run.host is not None else None
        if host is not None and host in m.preempt and r not in m.preempt:
            raise AssertionError(f"guest {run.job} must be a preemption candidate")


CONSTRAINT_FAMILIES = (
    add_gpu_sharing,
    add_preemption_rules,
    add_capacity_and_loans,
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
    for (j, t), v in m.own.items():
        if values[v] > 0.5:
            a.starts[j] = (t, False)
    for (j, t), v in m.loan.items():
        if values[v] > 0.5:
            a.starts[j] = (t, True)
    for c, v in m.guest.items():
        if values[v] > 0.5:
            g = p.guests[c]
            a.guests[g.pending] = g.running
    for r, v in m.preempt.items():
        if values[v] > 0.5:
            a.preempt.add(r)
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
        bound=bound,
        detail=f"{detail}; {m.n} vars, {len(m.rows)} rows",
    )


def from_assignment(m: LinearModel, p: EpochProblem, a: Assignment) -> list[int]:
    """A full variable vector for an assignment (the warm start), loans filled minimally."""
    x = [0] * m.n
    for j, (t, loan) in a.starts.items():
        key = (j, t)
        if loan or key not in m.own:
            x[m.loan[key]] = 1
        else:
            x[m.own[key]] = 1
    index = {(g.pending, g.running): c for c, g in enumerate(p.guests)}
    for j, r in a.guests.items():
        x[m.guest[index[(j, r)]]] = 1
    for r in a.preempt:
        x[m.preempt[r]] = 1
    # minimal loans: borrowers take exactly their excess, lenders give idle quota in order
    use = [[0] * len(p.types) for _ in p.tenants]
    for r, run in enumerate(p.running):
        if not run.guest and r not in a.preempt:
            use[run.tenant][run.type] += run.gpus
    for j, (t, _) in a.starts.items():
        use[p.pending[j].tenant][t] += p.pending[j].gpus
    for t in range(len(p.types)):
        need = 0
        for i in range(len(p.tenants)):
            excess = use[i][t] - p.quota[i][t]
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
    return x


def is_feasible(m: LinearModel, x: list[int]) -> bool:
    """Whether ``x`` satisfies every row and bound (used to validate warm starts)."""
    if any(not (m.lb[k] <= x[k] <= m.ub[k]) for k in range(m.n)):
        return False
    for row in m.rows:
        s = sum(c * x[v] for v, c in row.coefs.items())
        if s < row.lo - 1e-9 or s > row.hi + 1e-9:
            return False
    return True

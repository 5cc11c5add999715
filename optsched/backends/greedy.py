"""The greedy policy: the warm start of the exact backends and the labelled fallback.

Pending items are taken in order of value density (reclaim items first). Each starts inside
its tenant's quota when it can, else on capacity borrowed from tenants with idle quota (within
``borrow_limit`` and ``lend_limit``); a reclaim item that cannot fit preempts on-loan jobs of
other tenants on its type, cheapest per GPU first; a shareable item that cannot start alone
becomes the MPS guest of the best candidate host. Deterministic, no randomness.
"""

from __future__ import annotations

import time
from typing import ClassVar

from optsched.backends.base import SolveParams, SolveResult, SolveStatus
from optsched.problem import Assignment, EpochProblem


class _Ledger:
    """Per-type capacity and per-tenant use, kept in step with the assignment."""

    def __init__(self, p: EpochProblem) -> None:
        self.p = p
        self.free = [p.capacity[t] - u for t, u in enumerate(p.used())]
        self.use = p.held(own_only=False)
        self.own = p.held(own_only=True)

    def pool(self, t: int) -> int:
        """Lendable idle quota minus current borrowing on type ``t``."""
        p = self.p
        total = 0
        for i in range(len(p.tenants)):
            q, u = p.quota[i][t], self.use[i][t]
            if u < q:
                ll = p.lend_limit[i][t]
                total += q - u if ll is None else min(ll, q - u)
            elif u > q:
                total -= u - q
        return total

    def borrow_ok(self, i: int, t: int) -> bool:
        bl = self.p.borrow_limit[i][t]
        return bl is None or self.use[i][t] - self.p.quota[i][t] <= bl

    def apply(self, i: int, t: int, g: int, own: bool, sign: int = 1) -> None:
        self.free[t] -= sign * g
        self.use[i][t] += sign * g
        if own:
            self.own[i][t] += sign * g

    def feasible(self, i: int, t: int) -> bool:
        return self.free[t] >= 0 and self.pool(t) >= 0 and self.borrow_ok(i, t)


def _try_start(ledger: _Ledger, p: EpochProblem, j: int) -> tuple[int, bool] | None:
    it = p.pending[j]
    order = sorted(range(len(it.types)), key=lambda k: -it.values[k])
    for k in order:
        t = it.types[k]
        for own in (True, False):
            if own and (t not in it.own_types or ledger.own[it.tenant][t] + it.gpus > p.quota[it.tenant][t]):
                continue
            ledger.apply(it.tenant, t, it.gpus, own)
            if ledger.feasible(it.tenant, t):
                return (t, not own)
            ledger.apply(it.tenant, t, it.gpus, own, sign=-1)
    return None


def _preempt(ledger: _Ledger, p: EpochProblem, r: int, sign: int = 1) -> None:
    run = p.running[r]
    if not run.guest:
        ledger.apply(run.tenant, run.type, run.gpus, not run.on_loan, sign=-sign)


def greedy_assignment(p: EpochProblem, deadline: float | None = None) -> Assignment:
    """The greedy plan; stops considering new items once ``deadline`` (monotonic) passes."""
    a = Assignment()
    ledger = _Ledger(p)
    slots = [r.free_slots for r in p.running]
    guests_of: dict[int, list[int]] = {}
    for c, cand in enumerate(p.guests):
        guests_of.setdefault(cand.pending, []).append(c)
    _repair(ledger, p, a)
    guests_of_host: dict[str, list[int]] = {}
    for r, run in enumerate(p.running):
        if run.host is not None:
            guests_of_host.setdefault(run.host, []).append(r)
    victims: dict[int, list[int]] = {}
    for r, run in enumerate(p.running):
        if run.candidate and run.on_loan and not run.guest and r not in a.preempt:
            victims.setdefault(run.type, []).append(r)
    for lst in victims.values():
        lst.sort(key=lambda r: (p.running[r].cost / p.running[r].gpus, p.running[r].job))
    order = sorted(
        range(len(p.pending)),
        key=lambda j: (not p.pending[j].reclaim, -p.pending[j].density, p.pending[j].job),
    )
    for j in order:
        if deadline is not None and time.monotonic() > deadline:
            break
        it = p.pending[j]
        got = _try_start(ledger, p, j)
        if got is None and it.reclaim:
            got = _reclaim(ledger, p, a, j, victims, guests_of_host)
        if got is not None:
            a.starts[j] = got
            continue
        for c in sorted(guests_of.get(j, []), key=lambda c: -p.guests[c].value):
            host = p.guests[c].running
            if host in a.preempt or slots[host] < it.gpus:
                continue
            slots[host] = 0  # one guest per host
            a.guests[j] = host
            break
    return a


def _repair(ledger: _Ledger, p: EpochProblem, a: Assignment) -> None:
    """Stop on-loan jobs, cheapest per GPU first, where running use already exceeds what the
    lenders can cover (a lend or borrow limit was lowered, a lender's quota shrank)."""
    hosts_guests: dict[str, list[int]] = {}
    for g, run in enumerate(p.running):
        if run.host is not None:
            hosts_guests.setdefault(run.host, []).append(g)
    for t in range(len(p.types)):
        victims = sorted(
            (
                r
                for r, run in enumerate(p.running)
                if run.on_loan and run.candidate and run.type == t and not run.guest
            ),
            key=lambda r: (p.running[r].cost / p.running[r].gpus, p.running[r].job),
        )
        for r in victims:
            run = p.running[r]
            if ledger.pool(t) >= 0 and ledger.borrow_ok(run.tenant, t):
                continue
            _preempt(ledger, p, r)
            a.preempt.add(r)
            a.preempt.update(hosts_guests.get(run.job, []))


def _reclaim(
    ledger: _Ledger,
    p: EpochProblem,
    a: Assignment,
    j: int,
    victims: dict[int, list[int]],
    guests_of_host: dict[str, list[int]],
) -> tuple[int, bool] | None:
    """Preempt on-loan jobs of other tenants (cheapest per GPU first, from the per-type lists
    in ``victims``) until item ``j`` fits on one of its own types."""
    it = p.pending[j]
    for t in it.own_types:
        taken: list[int] = []
        for r in victims.get(t, []):
            run = p.running[r]
            if run.tenant == it.tenant or r in a.preempt or r in a.guests.values():
                continue
            _preempt(ledger, p, r)
            taken.append(r)
            got = _try_start(ledger, p, j)
            if got is not None:
                a.preempt.update(taken)
                for v in taken:
                    a.preempt.update(guests_of_host.get(p.running[v].job, []))
                    victims[t].remove(v)
                return got
        for r in taken:
            _preempt(ledger, p, r, sign=-1)
    return None


class GreedyBackend:
    """Backend wrapper of :func:`greedy_assignment`."""

    name: ClassVar[str] = "greedy"

    @classmethod
    def is_available(cls) -> bool:
        return True

    def solve(
        self, problem: EpochProblem, params: SolveParams, hint: Assignment | None = None
    ) -> SolveResult:
        t0 = time.monotonic()
        a = greedy_assignment(problem)
        return SolveResult(
            status=SolveStatus.FEASIBLE,
            backend=self.name,
            seconds=time.monotonic() - t0,
            assignment=a,
            objective=a.objective(problem),
            detail="greedy heuristic",
        )

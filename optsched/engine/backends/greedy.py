"""The greedy policy: the warm start of the exact backends, the labelled fallback, and the
fill pass that follows every solve.

Pending jobs are taken in order of value density (reclaim classes first), a class's members in
their value order. Each starts inside its tenant's quota when it can, else on capacity borrowed
from tenants with idle quota (within ``borrow_limit`` and ``lend_limit``); a reclaim job that
cannot fit preempts on-loan jobs of other tenants on its type, cheapest per GPU first; a job
with MPS pairs that cannot start alone becomes the guest of its best candidate host. An
elastic job starts at the largest of its sizes up to its requested one that fits (its sizes
have the same value per GPU); an on-loan elastic job is shrunk, step by step, before it is
reclaimed whole; last, running elastic jobs grow into what the plan leaves idle on the types
where it stops nothing. Deterministic, no randomness.

:func:`fill` starts, on top of any assignment, every queued job that still fits free GPUs
within the rules (no preemption), so no decision leaves work undone that it could start.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, ClassVar

from optsched.engine.backends.base import SolveParams, SolveResult, SolveStatus
from optsched.engine.chunks import ChunkBook
from optsched.engine.formulation import PAY_SCALE
from optsched.engine.ledger import NodePool, shrink_keeps
from optsched.engine.problem import Assignment, EpochProblem, RunningItem
from optsched.engine.shape import Shape
from optsched.schema.snapshot import GpuRef

if TYPE_CHECKING:
    from optsched.engine.formulation import LinearModel


class _Tally:
    """Per-type capacity and per-tenant use, and the nodes' chunks (:class:`ChunkBook`), kept in
    step with the assignment."""

    def __init__(self, p: EpochProblem, a: Assignment | None = None) -> None:
        self.p = p
        self.held_keys: set[tuple[str, int]] = {r.key() for r in p.held_gpus}
        """The GPUs held for reservations (``p.held_gpus``)."""
        self.chunks = ChunkBook(p)
        self.blocked: dict[tuple[int, int], int] = dict(a.blocked) if a is not None else {}
        self.on_type: dict[tuple[int, int], int] = {}
        self.nodes: NodePool | None = (
            NodePool(
                p.node_records, dict(zip(p.types, p.largest, strict=True)), p.topology_levels, p.node_count,
                refs=p.gpu_refs,
            )
            if p.node_records
            else None
        )
        """The nodes' free GPUs as the plan leaves them (:func:`place_plan`)."""
        self.placed: dict[tuple[int, int], list[list[GpuRef] | None]] = {}
        """(class, type) -> each start's GPUs, in start order; None for a start on a type whose
        chunk rows are exact, placed at the end by :func:`place_plan`."""
        self.delta: dict[int, int] = {}
        """Running elastic item -> its size change in steps so far."""
        self.type_order: dict[int, list[int]] = {}
        """Class -> the positions of its types in the order starts try them (by type bonus)."""
        self.grown: dict[int, list[GpuRef]] = {}
        self.free = [p.capacity[t] - u for t, u in enumerate(p.used())]
        self.use = p.held(own_only=False)
        self.own = p.held(own_only=True)
        self.freed = [0] * len(p.types)
        self.started = [0] * len(p.types)
        # the lending pool per type, kept up to date tenant by tenant (see ``pool``)
        self._pool = [
            sum(self._share(i, t) for i in range(len(p.tenants))) for t in range(len(p.types))
        ]
        self._limited = [not p.tree.empty and p.tree.limited(name) for name in p.types]
        # quota tree, per limited type: the groups' net values (uncapped and capped by their
        # lend_limit), the root's, and the groups over their borrow_limit, kept up to date
        # tenant by tenant along its ancestors (see ``_tree_update``)
        tree = p.tree
        self._raw: dict[int, list[int]] = {}
        self._vals: dict[int, list[int]] = {}
        self._root: dict[int, int] = {}
        self._bad: dict[int, set[int]] = {}
        self._ll: dict[int, list[int | None]] = {}
        self._bl: dict[int, list[int | None]] = {}
        for t in range(len(p.types)):
            if not self._limited[t]:
                continue
            self._ll[t] = [tree.lend_limit(g, p.types[t]) for g in range(len(tree.groups))]
            self._bl[t] = [tree.borrow_limit(g, p.types[t]) for g in range(len(tree.groups))]
            shares = [self._share(i, t) for i in range(len(p.tenants))]
            vals, root = tree.net_values(shares, p.types[t])
            raw = [0] * len(tree.groups)
            for g, node in enumerate(tree.groups):
                raw[g] = sum(shares[i] for i in node.tenants) + sum(vals[c] for c in node.children)
            self._raw[t], self._vals[t], self._root[t] = raw, vals, root
            self._bad[t] = {g for g in range(len(tree.groups)) if self._over_borrow(g, t)}
        if a is not None:
            for r in a.preempt:
                _preempt(self, p, r)
            for r, d in a.resize.items():
                if d < 0:
                    _resize(self, p, r, d)
            for c, counts in a.starts.items():
                for (t, loan), k in sorted(counts.items()):
                    done = len(self.placed.get((c, t), ()))
                    given = a.placements.get((c, t), [])
                    for n in range(k):
                        refs = given[done + n] if done + n < len(given) else None
                        _start(self, p, c, t, not loan, refs=refs, defer=refs is None)
            for r, d in a.resize.items():
                if d > 0:
                    _resize(self, p, r, d)
        self.held: list[GpuRef] = []
        """The GPUs of ``p.held_gpus`` still free, taken out of ``nodes`` (:func:`place_plan`
        gives them back for the starts allowed on them)."""
        if p.held_gpus and self.nodes is not None:
            pool = self.nodes
            self.held = [r for r in p.held_gpus if r.node in pool.by_id and pool.all_free([r])]
            pool.take(self.held)

    def _share(self, i: int, t: int) -> int:
        """Tenant ``i``'s part of the pool on type ``t``: lendable idle quota, or minus its
        borrowing."""
        p = self.p
        q, u = p.quota[i][t], self.use[i][t]
        if u < q:
            ll = p.lend_limit[i][t]
            return q - u if ll is None else min(ll, q - u)
        if u > q + self.kept(i, t):
            return -(u - q - self.kept(i, t))
        return 0

    def kept(self, i: int, t: int) -> int:
        """Use tenant ``i`` keeps over quota uncovered on ``t``: at most what its jobs not on
        loan still hold above quota (old use; stopping them uses the allowance up first)."""
        return min(self.p.kept_over[i][t], max(0, self.own[i][t] - self.p.quota[i][t]))

    def pool(self, t: int) -> int:
        """Lendable idle quota minus current borrowing on type ``t`` (with quota groups
        limiting the type: what reaches the root within the groups' lend limits)."""
        if self._limited[t]:
            return self._root[t]
        return self._pool[t]

    def _over_borrow(self, g: int, t: int) -> bool:
        bl = self._bl[t][g]
        return bl is not None and self._vals[t][g] < -bl

    def _tree_update(self, i: int, t: int, delta: int) -> None:
        """Tenant ``i``'s share on ``t`` changed by ``delta``: update its groups, innermost first,
        while their capped value changes, then the root."""
        raw, vals, lls, bls, bad = self._raw[t], self._vals[t], self._ll[t], self._bl[t], self._bad[t]
        for g in self.p.tree.tenant_ancestors[i]:
            old = vals[g]
            r = raw[g] = raw[g] + delta
            ll = lls[g]
            v = vals[g] = r if ll is None or r <= ll else ll
            bl = bls[g]
            if bl is not None:
                if v < -bl:
                    bad.add(g)
                else:
                    bad.discard(g)
            delta = v - old
            if delta == 0:
                return
        self._root[t] += delta

    def borrow_ok(self, i: int, t: int) -> bool:
        bl = self.p.borrow_limit[i][t]
        if bl is not None and self.use[i][t] - self.p.quota[i][t] - self.kept(i, t) > bl:
            return False
        # quota groups: no subtree borrows more than its borrow_limit
        return not self._limited[t] or not self._bad[t]

    def apply(self, i: int, t: int, g: int, own: bool, sign: int = 1, cap: int | None = None) -> None:
        """Use (``sign`` 1) or give back ``g`` GPUs of tenant ``i`` on ``t`` (``cap``: of the
        type's free GPUs, when not ``g``: a share's GPU is opened by the chunks)."""
        self.free[t] -= sign * (g if cap is None else cap)
        before = self._share(i, t)
        self.use[i][t] += sign * g
        if own:
            self.own[i][t] += sign * g
        after = self._share(i, t)
        self._pool[t] += after - before
        if self._limited[t] and after != before:
            self._tree_update(i, t, after - before)
        self.started[t] += sign * g

    def feasible(self, i: int, t: int) -> bool:
        return self.free[t] >= 0 and self.pool(t) >= 0 and self.borrow_ok(i, t)

    def can_keep(self, r: int) -> bool:
        """Whether stopped running item ``r`` may keep running again: its GPUs, and its CPU and
        host memory on their nodes, are still free."""
        run = self.p.running[r]
        return self.nodes is None or run.guest or not run.alloc or self.nodes.can_take(run.alloc, _held(run))


def _start(
    ledger: _Tally,
    p: EpochProblem,
    c: int,
    t: int,
    own: bool,
    sign: int = 1,
    refs: list[GpuRef] | None = None,
    defer: bool = False,
) -> bool:
    """One member of class ``c`` on ``t`` in (``sign`` 1) or out (-1) of the ledger, its chunks
    and its nodes; ``False`` (nothing changed) when its required topology finds no domain or,
    on a type whose chunk rows are a relaxation, the free nodes do not hold its shape. On a type
    whose rows are exact the start is placed later (:func:`place_plan`), as it is with
    ``defer``; ``refs``: its GPUs, already decided."""
    cls = p.pending[c]
    shape = cls.shape_on(t)
    # a start placed on GPUs held for a reservation (``p.held_gpus``, out of the chunk rows and
    # the capacity) takes neither
    on_held = False
    if ledger.held_keys:
        look = refs if sign > 0 else (ledger.placed.get((c, t)) or [None])[-1]
        on_held = bool(look) and all(r.key() in ledger.held_keys for r in look or ())
    opened = ledger.chunks.opened(t)
    if not on_held and not ledger.chunks.start(c, t, sign):
        return False
    pool, tp = ledger.nodes, p.placement_of(t)
    if pool is not None and tp is not None:
        stack = ledger.placed.setdefault((c, t), [])
        if sign > 0:
            if refs is not None:
                pool.take(refs, shape)
            elif not tp.exact and not defer:
                refs = pool.place(p.types[t], shape)
                if refs is None:
                    ledger.chunks.start(c, t, -1)
                    return False
            stack.append(refs)
        else:
            got = stack.pop()
            if got is not None:
                pool.release(got, shape)
    cap = ledger.chunks.opened(t) - opened if shape.fractional else None
    if on_held:
        cap = 0
    ledger.apply(cls.tenant, t, cls.gpus, own, sign=sign, cap=None if cap is None else sign * cap)
    ledger.on_type[(c, t)] = ledger.on_type.get((c, t), 0) + sign
    return True


def _try_start(
    ledger: _Tally, p: EpochProblem, c: int, own_only: bool = False, only: int | None = None
) -> tuple[int, bool] | None:
    """Start one member of class ``c`` on the first of its types (by type bonus) where it fits
    (``own_only``: inside quota; ``only``: on that type alone); its (type, on loan)."""
    cls = p.pending[c]
    order = ledger.type_order.get(c)
    if order is None:
        order = ledger.type_order[c] = sorted(
            range(len(cls.types)), key=lambda k: (-cls.type_bonus[k], cls.types[k])
        )
    for k in order:
        t = cls.types[k]
        if only is not None and t != only:
            continue
        cap = ledger.blocked.get((c, t))
        if cap is not None and ledger.on_type.get((c, t), 0) >= cap:
            continue  # decoding found the nodes do not hold another one there
        if ledger.free[t] < cls.gpus and not cls.shape_on(t).fractional:
            continue  # too few free GPUs on the type: the start would fail the ledger and be undone
        # after a node loss, no start on loan where its jobs restart (``p.no_loan``)
        for own in (True,) if own_only or t in p.no_loan else (True, False):
            room = p.quota[cls.tenant][t] - ledger.own[cls.tenant][t]
            if own and (t not in cls.own_types or cls.gpus > room):
                continue
            if not _start(ledger, p, c, t, own):
                continue
            if ledger.feasible(cls.tenant, t) and ledger.chunks.feasible(t):
                return (t, not own)
            _start(ledger, p, c, t, own, sign=-1)
    return None


def _held(run: RunningItem) -> Shape:
    """What a running job holds on each of its nodes besides GPUs (its CPUs and memory)."""
    return Shape(run.gpus, (), run.cpu_milli, run.memory_mib)


def _preempt(ledger: _Tally, p: EpochProblem, r: int, sign: int = 1) -> None:
    """Stop (``sign`` 1) or keep again (-1) running item ``r``; keeping it again needs its GPUs
    free (:meth:`_Tally.can_keep`)."""
    run = p.running[r]
    if not run.guest:
        ledger.apply(run.tenant, run.type, run.gpus, not run.on_loan, sign=-sign)
        ledger.started[run.type] += sign * run.gpus  # undo: a preemption is not a start
        ledger.freed[run.type] += sign * run.gpus
        ledger.chunks.preempt(r, sign)
        if ledger.nodes is not None and run.alloc:
            if sign > 0:
                ledger.nodes.release(list(run.alloc), _held(run))
            else:
                ledger.nodes.take(run.alloc, _held(run))


def _resize(ledger: _Tally, p: EpochProblem, r: int, d: int) -> None:
    """Resize elastic job ``r`` by ``d`` more steps in the ledger (growth is no start, a shrink
    frees GPUs as a preemption does; a negative ``d`` after growth takes growth back)."""
    run = p.running[r]
    g = d * run.step
    ledger.apply(run.tenant, run.type, g, not run.on_loan)
    ledger.started[run.type] -= g
    old = ledger.delta.get(r, 0)
    new = old + d
    ledger.delta[r] = new
    if new < 0 or old < 0:
        ledger.freed[run.type] += (max(0, -new) - max(0, -old)) * run.step
    ledger.chunks.resize(r, old, new)
    pool = ledger.nodes
    if pool is None or not run.alloc:
        return
    tname = p.types[run.type]
    # shrinking: the GPUs it gives up are those off the nodes where it holds most
    before = shrink_keeps(run.alloc, run.gpus + min(0, old) * run.step) if old < 0 else list(run.alloc)
    after = shrink_keeps(run.alloc, run.gpus + min(0, new) * run.step) if new < 0 else list(run.alloc)
    if len(after) < len(before):
        pool.release([x for x in before if x not in after])
    elif len(after) > len(before):
        pool.take([x for x in after if x not in before])
    # growing: free GPUs on its own nodes first, then anywhere
    grown = ledger.grown.setdefault(r, [])
    want = max(0, new) * run.step
    while len(grown) > want:
        pool.release([grown.pop()])
    if len(grown) < want:
        extra: list[GpuRef] = []
        for nid in dict.fromkeys(ref.node for ref in run.alloc):
            extra += pool.take_on(tname, nid, want - len(grown) - len(extra))
        if len(grown) + len(extra) < want:
            extra += pool.take_any(tname, want - len(grown) - len(extra))
        grown += extra


def _started_groups(p: EpochProblem, a: Assignment) -> set[str]:
    """Elastic jobs (groups) already started at one of their sizes."""
    return {p.pending[c].group for c in a.starts if p.pending[c].group}


def _members(p: EpochProblem, a: Assignment) -> list[tuple[bool, float, str, int, int, int]]:
    """A heap of the next member of every class: (not reclaim, -density, job, -gang, class,
    rank); the gang orders the sizes of one elastic job, largest first."""
    heap = []
    groups = _started_groups(p, a)
    for c, cls in enumerate(p.pending):
        k = a.started(c)
        if c in a.guests or k >= len(cls.jobs) or (cls.group and cls.group in groups):
            continue
        heap.append((not cls.reclaim, -cls.values[k] / cls.gpus, cls.jobs[k], -cls.gpus, c, k))
    heapq.heapify(heap)
    return heap


def _run(
    p: EpochProblem, a: Assignment, ledger: _Tally, *, reclaim: bool
) -> None:
    slots = [r.free_slots for r in p.running]
    for r in list(a.guests.values()) + list(a.preempt):
        slots[r] = 0
    guests_of: dict[int, list[int]] = {}
    for g, cand in enumerate(p.guests):
        guests_of.setdefault(cand.pending, []).append(g)
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
    heap = _members(p, a)
    groups = _started_groups(p, a)
    nodes = _NodeVictims(p, ledger)
    while heap:
        later, negd, job, negg, c, k = heapq.heappop(heap)
        cls = p.pending[c]
        if cls.group and cls.group in groups:
            continue  # the elastic job started at another size
        first = cls.reclaim and not later  # reclaim priority holds for starts inside quota only
        got = _try_start(ledger, p, c, own_only=first) if a.started(c) < cls.cap else None
        if got is None and reclaim and first and a.started(c) < cls.cap:
            got = _reclaim(ledger, p, a, c, victims, guests_of_host, nodes)
        if got is None and first:  # on loan it waits its turn like any other job
            heapq.heappush(heap, (True, negd, job, negg, c, k))
            continue
        if got is not None:
            a.add(c, got[0], got[1])
            if cls.group:
                groups.add(cls.group)
            if k + 1 < len(cls.jobs):
                nxt = (not cls.reclaim, -cls.values[k + 1] / cls.gpus, cls.jobs[k + 1], negg, c, k + 1)
                heapq.heappush(heap, nxt)
            continue
        # members of a class are alike: if this one cannot start, neither can the rest
        for g in sorted(guests_of.get(c, []), key=lambda g: (-p.guests[g].value, g)):
            host = p.guests[g].running
            if slots[host] < cls.gpus or host in a.preempt or host in a.no_guest_on:
                continue
            slots[host] = 0  # one guest per host
            a.guests[c] = host
            break


def greedy_assignment(p: EpochProblem) -> Assignment:
    """The greedy plan: the better of two orders (never cut by a clock: each is linear in
    classes, and a cut plan would depend on the machine's load).

    * **fill first**: every class in value order on the free GPUs (with reclaims), then
      preemptions for the guaranteed jobs that still wait;
    * **largest guaranteed first**: preemptions for the guaranteed jobs, largest first, before
      the fill, and again after it. Small starts spread over the free nodes leave no whole node
      for a gang that would pay for its victims; on node-shaped snapshots this order was 17-24%
      better on six medium seeds (seed 1: 18% below the optimum before, 2.6% after), hence the
      better of the two. Where every type's node rows are exact (no CPU, memory, topology or
      shares: format-1 jobs) only the first is made: there the second was from 2.4% worse to
      9% better, the solver closes that gap, and its time is the solver's.

    Ties keep the fill-first plan."""
    best = _greedy_order(p, largest_first=False)
    if not p.rows_relaxed:
        return best  # node rows exact (no CPU, memory, topology or shares): fill first
    other = _greedy_order(p, largest_first=True)
    value = best.objective(p)
    return other if other.objective(p) > value + 1e-9 * max(1.0, abs(value)) else best


def _greedy_order(p: EpochProblem, largest_first: bool) -> Assignment:
    """One greedy plan (:func:`greedy_assignment`)."""
    a, ledger = _order_starts(p, largest_first)
    drop_unused_preemptions(p, a, ledger=ledger)
    _grow(p, a)
    return a


def _order_starts(p: EpochProblem, largest_first: bool) -> tuple[Assignment, _Tally]:
    """The stops and starts of one greedy order, before the unused stops are undone and the
    elastic jobs grow, and its ledger, in step with them."""
    a = Assignment()
    ledger = _Tally(p)
    _repair(ledger, p, a)
    if largest_first:
        _priority(p, a, ledger, largest_first=True)
    _run(p, a, ledger, reclaim=True)
    _priority(p, a, ledger, largest_first=largest_first)
    _sync(ledger, a)
    return a, ledger


def _sync(ledger: _Tally, a: Assignment) -> None:
    """The placements of ``a``'s starts as the ledger made them (None: placed later)."""
    a.placements = {k: list(v) for k, v in ledger.placed.items() if v}


def place_plan(p: EpochProblem, a: Assignment, ledger: _Tally | None = None) -> list[tuple[int, int, bool]]:
    """Place every start of ``a`` that has no GPUs yet on the nodes the plan leaves free (its
    stops and shrinks done, the placed starts on theirs), required topology first, then the
    largest piece and the largest job (largest first is what makes the exact chunk rows hold,
    :mod:`optsched.engine.chunks`), then the most host memory and CPUs per node, into
    ``a.placements``; the (class, type, on_loan) of each
    start the free nodes do not hold (left without GPUs). ``ledger``: one in step with ``a``
    (:func:`fill_ledger`'s), used up here, instead of a new one."""
    if not p.node_records:
        return []
    if ledger is None:
        ledger = _Tally(p, a)
    pool = ledger.nodes
    assert pool is not None
    todo: list[tuple[int, int, int, int, int, int, str, int, int, bool]] = []
    for (c, t), stack in ledger.placed.items():
        cls = p.pending[c]
        sh = cls.shape_on(t)
        # a start that finds no GPUs leaves the plan from its loan starts first (those never
        # make room for anything): members of a class are alike
        loan = a.starts.get(c, {}).get((t, True), 0) > 0
        first = 0 if sh.level >= 0 and sh.required and sh.nodes > 1 else 1
        # the starts allowed on GPUs held for a reservation come last, with those GPUs
        late = int((c, t) in p.hold_ok)
        key = (late, first, -sh.largest, -cls.gpus, -sh.memory_mib, -sh.cpu_milli, cls.label, c, t, loan)
        todo += [key for refs in stack if refs is None]
    failed: list[tuple[int, int, bool]] = []
    slots: dict[tuple[int, int], list[int]] = defaultdict(list)
    for (c, t), stack in ledger.placed.items():
        slots[(c, t)] = [n for n, refs in enumerate(stack) if refs is None]
    # guaranteed starts inside quota take the GPUs the plan's stops free before any other (a
    # victim's GPUs are what its stop was for), other starts take them last: a start on loan or
    # a best-effort start on GPUs a stop freed is a swap the next epochs undo, and a stop whose
    # GPUs stay idle is undone after placement
    freed = {pool.by_id[r.node].index for x in a.preempt for r in p.running[x].alloc
             if r.node in pool.by_id}
    held_nodes = {pool.by_id[r.node].index for r in ledger.held}
    for late, *_, c, t, loan in sorted(todo):
        if late and ledger.held:
            pool.release(ledger.held)
            ledger.held = []
        first_claim = p.pending[c].guaranteed and not loan
        pool.prefer, pool.avoid = (freed, set()) if first_claim else (set(), freed)
        if late:  # the held GPUs first: the others stay free for the starts the fill may add
            pool.prefer = pool.prefer | held_nodes
        refs = pool.place(p.types[t], p.pending[c].shape_on(t))
        n = slots[(c, t)].pop(0)
        if refs is None:
            failed.append((c, t, loan))
            continue
        ledger.placed[(c, t)][n] = refs
    _sync(ledger, a)
    return failed

def _grow(p: EpochProblem, a: Assignment) -> None:
    """Grow running elastic jobs into the GPUs the plan leaves idle, as the model does: only on
    types where the plan stops nothing, inside quota (jobs on own quota) or borrowed (jobs on
    loan), highest growth value per GPU first (then job id), one step at a time."""
    stopped = {p.running[r].type for r in a.preempt if not p.running[r].guest}
    stopped |= {p.running[r].type for r in a.resize}  # the plan's resizes so far are shrinks
    order = sorted(
        (
            r
            for r, run in enumerate(p.running)
            if run.grow_steps and r not in a.preempt and r not in a.resize and run.type not in stopped
        ),
        key=lambda r: (-p.running[r].grow_value / p.running[r].step, p.running[r].job),
    )
    if not order:
        return  # nothing may grow: no ledger to build
    ledger = _Tally(p, a)
    for r in order:
        run = p.running[r]
        i, t = run.tenant, run.type
        d = 0
        while d < run.grow_steps:
            if not run.on_loan and ledger.own[i][t] + run.step > p.quota[i][t]:
                break
            if ledger.free[t] < run.step:
                break  # no free GPUs for the step (the nodes would find none to take)
            _resize(ledger, p, r, 1)
            if not ledger.feasible(i, t) or not ledger.chunks.feasible(t):
                _resize(ledger, p, r, -1)
                ledger.freed[t] -= run.step  # an undone growth frees nothing
                break
            d += 1
        if d:
            a.resize[r] = d


def _priority(p: EpochProblem, a: Assignment, ledger: _Tally, largest_first: bool = False) -> None:
    """Preempt for guaranteed jobs that fit their own quota but not the free GPUs, when that
    pays: victims on the job's type, cheapest per GPU first, their summed cost below the
    job's value (a priority victim's static cost includes its tenant's hysteresis), within
    each victim tenant's ``preempt_cap``. Follows the model's rules: a preemption makes room
    for an in-quota start of a guaranteed job on the same type, and in-quota best-effort jobs
    are stopped only for it. Jobs in value order, or with ``largest_first`` the largest first
    (:func:`greedy_assignment`)."""
    guests_of_host: dict[str, list[int]] = {}
    for r, run in enumerate(p.running):
        if run.host is not None:
            guests_of_host.setdefault(run.host, []).append(r)
    by_type: dict[int, list[int]] = {}
    for r, run in enumerate(p.running):
        if run.candidate and not run.guest and r not in a.preempt:
            by_type.setdefault(run.type, []).append(r)
    for lst in by_type.values():
        lst.sort(key=lambda r: (p.running[r].cost / p.running[r].gpus, p.running[r].job))
    by_owner: dict[tuple[int, int], list[int]] = {}
    for t, lst in by_type.items():
        for r in lst:
            by_owner.setdefault((p.running[r].tenant, t), []).append(r)
    # operator caps: GPUs of each tenant's jobs preempted for priority in this decision
    spent = [0] * len(p.tenants)
    for r in a.preempt:
        if p.running[r].priority_victim:
            spent[p.running[r].tenant] += p.running[r].gpus
    hosting = set(a.guests.values())
    # best-effort jobs inside quota free at most the GPUs of guaranteed starts inside quota on
    # their type, plus the type's victim slack once there is one (the model's
    # preempt_in_quota_only_for_guaranteed): what is left of that room
    be_room = [0] * len(p.types)
    for c, counts in a.starts.items():
        if p.pending[c].guaranteed:
            for (t, loan), k in counts.items():
                if not loan:
                    be_room[t] += k * p.pending[c].gpus
    slack_left = [p.slack_of(t) for t in range(len(p.types))]
    for t, room in enumerate(be_room):
        if room > 0:
            be_room[t] += slack_left[t]
            slack_left[t] = 0
    for r in a.preempt:
        if p.running[r].priority_victim:
            be_room[p.running[r].type] -= p.running[r].gpus
    order = sorted(
        (c for c, cls in enumerate(p.pending) if cls.guaranteed and cls.own_types and c not in a.guests),
        key=lambda c: (-p.pending[c].gpus if largest_first else 0, -p.pending[c].density, p.pending[c].job),
    )
    groups = _started_groups(p, a)
    nodes = _NodeVictims(p, ledger)
    # per running item, what the victim loop reads (read once: the loop runs per class and type)
    tenant_of = [run.tenant for run in p.running]
    gpus_of = [run.gpus for run in p.running]
    victim_cap = [p.cap_of(run.tenant) if run.priority_victim else None for run in p.running]
    for_priority = [run.priority_victim for run in p.running]
    price = [math.ceil(PAY_SCALE * run.static_cost) for run in p.running]
    others_of: dict[tuple[int, int], list[int]] = {}  # (tenant, type) -> others' victims there
    own_left: dict[tuple[int, int], int] = defaultdict(int)  # own GPUs stopping may still free
    for key, lst in by_owner.items():
        own_left[key] = sum(
            p.running[r].gpus
            for r in lst
            if not p.running[r].on_loan and r not in hosting and r not in a.resize
        )
    for c in order:
        cls = p.pending[c]
        while a.started(c) < cls.cap and not (cls.group and cls.group in groups):
            done = False
            if largest_first:
                # before the fill: a job that fits its quota and the free GPUs starts as it is
                got = _try_start(ledger, p, c, own_only=True)
                if got is not None:
                    a.add(c, got[0], got[1])
                    if cls.group:
                        groups.add(cls.group)
                    continue
            for t in cls.own_types:
                # preemptions are paid with time-invariant worth (the model's preemption_pays)
                gain = math.floor(PAY_SCALE * cls.static_value)
                # the tenant's own victims free quota and GPUs, others' only GPUs
                own_list = by_owner.get((cls.tenant, t), [])
                others = others_of.get((cls.tenant, t))
                if others is None:
                    others = [r for r in by_type.get(t, []) if tenant_of[r] != cls.tenant]
                    others_of[(cls.tenant, t)] = others
                taken: list[int] = []
                cost = 0
                got = None
                # count first, apply once: GPUs still needed on the type, and quota room; once
                # both are met, each further victim is applied and the start retried (the loan
                # pool may still need on-loan jobs of others to stop)
                need_gpus = cls.gpus - ledger.free[t]
                need_room = cls.gpus - (p.quota[cls.tenant][t] - ledger.own[cls.tenant][t])
                applied = False
                trial = list(spent)
                room = be_room[t] + cls.gpus + slack_left[t]
                if need_room > 0 and need_room > own_left[(cls.tenant, t)]:
                    continue  # no stop of its own jobs frees the quota room it needs
                first = nodes.first(c, t, a)
                if first is None:
                    continue  # no node can be freed for its pieces
                pool: Iterable[int] = itertools.chain(own_list, others)
                if first:
                    listed = set(first)
                    pool = itertools.chain(first, (r for r in pool if r not in listed))
                preempted, resized = a.preempt, a.resize
                for r in pool:
                    if r in preempted or r in hosting or r in resized:
                        continue  # a host that took a guest, or a resized job, keeps running
                    g, vt, prio = gpus_of[r], tenant_of[r], for_priority[r]
                    cap = victim_cap[r]
                    if cap is not None and trial[vt] + g > cap:
                        continue  # the victim's tenant has no preemption left this epoch
                    if prio and g > room:
                        continue  # it would free GPUs no guaranteed start takes
                    extra = price[r]
                    if cost + extra > gain:
                        break
                    if prio:
                        trial[vt] += g
                        room -= g
                    taken.append(r)
                    cost += extra
                    need_gpus -= g
                    if vt == cls.tenant and not p.running[r].on_loan:
                        need_room -= g
                    if applied:
                        _preempt(ledger, p, r)
                    elif need_gpus <= 0 and need_room <= 0:
                        for x in taken:
                            _preempt(ledger, p, x)
                        applied = True
                    if applied:
                        # on ``t`` only: the room its stops make is counted for a start there
                        got = _try_start(ledger, p, c, own_only=True, only=t)
                        if got is not None:
                            break
                if not applied:
                    taken = []
                if got is not None:
                    a.add(c, got[0], got[1])
                    if cls.group:
                        groups.add(cls.group)
                    spent = trial
                    be_room[t] = room
                    slack_left[t] = 0
                    for r in taken:
                        a.preempt.add(r)
                        a.preempt.update(guests_of_host.get(p.running[r].job, []))
                        if p.running[r].tenant == cls.tenant and not p.running[r].on_loan:
                            own_left[(cls.tenant, t)] -= p.running[r].gpus
                    nodes.changed(taken)
                    done = True
                    break
                for r in taken:
                    _preempt(ledger, p, r, sign=-1)
            if not done:
                break


class _NodeVictims:
    """Per type, the candidate victims on each movable node, cheapest per GPU first, and per
    node what stopping the cheapest of them to free a piece costs (kept until the node's jobs
    change)."""

    def __init__(self, p: EpochProblem, ledger: _Tally) -> None:
        self.p = p
        self.ledger = ledger
        self.on: dict[int, dict[int, list[tuple[int, int]]]] = {}
        self.node_of: dict[int, list[tuple[int, int]]] = defaultdict(list)
        """Running item -> (type, node) of the movable nodes it is on."""
        self.options: dict[tuple[int, int, int], dict[int, tuple[float, list[int]] | None]] = {}
        """(type, piece, tenant kept off) -> node -> (cost, victims) that free the piece there."""
        for t, book in ledger.chunks.books.items():
            per: dict[int, list[tuple[int, int]]] = {}
            for mn in book.tp.movable:
                vs = [(r, g) for r, g in mn.holders if p.running[r].candidate and not p.running[r].guest]
                if vs:
                    vs.sort(key=lambda x: (p.running[x[0]].cost / p.running[x[0]].gpus, p.running[x[0]].job))
                    per[mn.index] = vs
                    for r, _ in vs:
                        self.node_of[r].append((t, mn.index))
            self.on[t] = per

    def _option(
        self, t: int, node: int, piece: int, others_only: int, a: Assignment
    ) -> tuple[float, list[int]] | None:
        book = self.ledger.chunks.books[t]
        free = book.free[node]
        # one more piece than the node holds now: the chunk rows count every node's pieces,
        # and the ones it holds may already be taken by other starts
        target = (free // piece + 1) * piece
        p = self.p
        taken: list[int] = []
        cost = 0.0
        for r, g in self.on[t][node]:
            if r in a.preempt or r in a.resize or p.running[r].tenant == others_only:
                continue
            taken.append(r)
            free += g
            cost += p.running[r].static_cost
            if free >= target:
                return cost, taken
        return None

    def first(self, c: int, t: int, a: Assignment, others_only: int = -1) -> list[int] | None:
        """Victims on the nodes where stopping them frees the pieces of class ``c``'s shape on
        ``t`` most cheaply (``others_only``: a tenant whose jobs are no victims here), those
        nodes' victims first: freeing GPUs scattered over nodes frees no chunk a piece can use.
        Empty when the type's placement does not constrain the start (no chunks, one-GPU
        pieces) or the free chunks already hold it; ``None`` when no node can be freed for it."""
        p, ledger = self.p, self.ledger
        book = ledger.chunks.books.get(t)
        shape = p.pending[c].shape_on(t)
        if book is None or not shape.pieces or shape.largest <= 1:
            return []
        if ledger.chunks.start(c, t):
            fits = ledger.chunks.feasible(t)
            ledger.chunks.start(c, t, -1)
            if fits:
                return []
        piece = shape.largest
        table = self.options.setdefault((t, piece, others_only), {})
        for node in self.on.get(t, {}):
            if node not in table:
                table[node] = self._option(t, node, piece, others_only, a)
        best = heapq.nsmallest(
            max(1, shape.nodes),
            ((opt[0], node, opt[1]) for node, opt in table.items() if opt is not None),
        )
        if not best:
            return None
        out: list[int] = []
        for _, _, taken in best:
            out += [r for r in taken if r not in out]
        return out

    def changed(self, stopped: Iterable[int]) -> None:
        """These running items stopped or shrank: forget the options of their nodes."""
        nodes = {tn for r in stopped for tn in self.node_of.get(r, ())}
        for (t, _, _), table in self.options.items():
            for tt, node in nodes:
                if tt == t:
                    table.pop(node, None)


def repaired(p: EpochProblem) -> Assignment:
    """The least a decision must do: reclaim the on-loan jobs no lender can cover any more
    (nothing else stops, nothing starts); the last plan of the fallback chain."""
    a = Assignment()
    _repair(_Tally(p), p, a)
    return a


def fill(p: EpochProblem, a: Assignment) -> int:
    """Start every queued job that still fits, on top of ``a`` (no preemption); returns how
    many jobs it started."""
    return fill_ledger(p, a)[0]


def fill_ledger(p: EpochProblem, a: Assignment) -> tuple[int, _Tally]:
    """:func:`fill`, and its ledger, in step with ``a`` after it: :func:`place_plan` may take
    it instead of building its own from ``a`` (the same free GPUs, CPUs, memory and held GPUs,
    which is all placement reads; a new ledger replays every start, 0.05 s at 10,000 GPUs)."""
    before = sum(a.started(c) for c in a.starts) + len(a.guests)
    ledger = _Tally(p, a)
    _run(p, a, ledger, reclaim=False)
    _sync(ledger, a)
    return sum(a.started(c) for c in a.starts) + len(a.guests) - before, ledger


def unplace(
    p: EpochProblem, a: Assignment, failed: list[tuple[int, int, bool]], guests: Sequence[int] = ()
) -> tuple[int, _Tally]:
    """Take the starts decoding could not place out of ``a`` ((class, type, on_loan) each, and
    the MPS guests of ``guests``, pending classes whose host's node lacks their CPU or memory),
    cap their class there at what is left (:attr:`Assignment.blocked`; such a guest's host
    takes no guest again, :attr:`Assignment.no_guest_on`), undo the preemptions no start uses
    any more and fill again; returns how many jobs the fill started, and the fill's ledger, in
    step with ``a`` after it (:func:`fill_ledger`)."""
    for c in guests:
        a.no_guest_on.add(a.guests.pop(c))
    for c, t, loan in failed:
        a.add(c, t, loan, -1)
        a.blocked[(c, t)] = a.on_type(c, t)
        stack = a.placements.get((c, t), [])
        if None in stack:
            stack.remove(None)
    # a shape at least as large in every respect cannot start there either (unless already so)
    for c, t, _ in failed:
        sh = p.pending[c].shape_on(t)
        for d, cls in enumerate(p.pending):
            if d == c or t not in cls.types or (d, t) in a.blocked:
                continue
            other = cls.shape_on(t)
            if _at_least(other, sh):
                a.blocked[(d, t)] = a.on_type(d, t)
    drop_unused_preemptions(p, a)
    keep_best_effort_within_room(p, a)
    return fill_ledger(p, a)


def keep_best_effort_within_room(p: EpochProblem, a: Assignment) -> int:
    """Keep running, most costly first, the in-quota best-effort victims a type's guaranteed
    in-quota starts no longer pay for: after starts leave a plan (decoding found no nodes for
    them), its stops may free more GPUs than those starts take plus the type's victim slack,
    which the rules forbid (invariant 3). Only victims whose GPUs no start took; returns how
    many were kept."""
    ledger = _Tally(p, a)
    guests_of = _guests_of(p)
    kept = 0
    for t in range(len(p.types)):
        took = sum(
            k * p.pending[c].gpus
            for c, counts in a.starts.items() if p.pending[c].guaranteed
            for (tt, loan), k in counts.items() if tt == t and not loan
        )
        room = took + (p.slack_of(t) if took > 0 else 0)
        victims = sorted(
            (r for r in a.preempt if p.running[r].type == t and p.running[r].priority_victim
             and not p.running[r].guest),
            key=lambda r: (-p.running[r].cost, p.running[r].job),
        )
        over = sum(p.running[r].gpus for r in victims) - room
        for r in victims:
            if over <= 0:
                break
            if not ledger.can_keep(r):
                continue  # a start took its GPUs
            _preempt(ledger, p, r, sign=-1)  # keep it running, on trial
            run = p.running[r]
            if ledger.free[t] >= 0 and ledger.pool(t) >= 0 and ledger.chunks.feasible(t) \
                    and ledger.own[run.tenant][t] <= p.quota[run.tenant][t]:
                a.preempt.discard(r)
                for g in guests_of.get(run.job, []):
                    a.preempt.discard(g)  # its guests run on its GPUs: they stay too
                over -= run.gpus
                kept += 1
            else:
                _preempt(ledger, p, r)
    return kept


def _at_least(big: Shape, small: Shape) -> bool:
    """Whether a job of shape ``big`` needs at least what one of ``small`` needs on each of
    ``small``'s nodes, on at least as many nodes."""
    if big.fractional != small.fractional or big.spread or small.spread:
        return False
    return (
        big.nodes >= small.nodes
        and all(b >= s for b, s in zip(big.pieces, small.pieces, strict=False))
        and big.cpu_milli >= small.cpu_milli
        and big.memory_mib >= small.memory_mib
        and big.milli >= small.milli
        and (small.level < 0 or (big.level == small.level and big.required >= small.required))
    )


def _guests_of(p: EpochProblem) -> dict[str, list[int]]:
    """Host job id -> its running MPS guests (indices of ``p.running``)."""
    out: dict[str, list[int]] = {}
    for g, x in enumerate(p.running):
        if x.host is not None:
            out.setdefault(x.host, []).append(g)
    return out


def drop_unused_preemptions(
    p: EpochProblem, a: Assignment, placed: bool = False, ledger: _Tally | None = None
) -> None:
    """Keep the rule that GPUs freed on a type are used there: undo reclaims whose GPUs no
    start took (never those the on-loan deficit forces). One ledger, trial undo in place.

    ``placed``: every start of ``a`` has its GPUs (after :func:`place_plan`), so a stop whose
    GPUs no start took is tried whatever the type's counts say (a start placed on other nodes
    leaves them idle even where the counts balance); on a type with an on-loan deficit the
    counts still decide. ``ledger``: one already in step with ``a`` (the greedy plan's own, used
    up here), instead of a new one built from ``a``."""
    if not a.preempt:
        return  # nothing to keep running
    if ledger is None:
        ledger = _Tally(p, a)
    guests_of = _guests_of(p)
    own_start_tenants: set[tuple[int, int]] = {
        (p.pending[c].tenant, tt) for c, counts in a.starts.items() for (tt, loan) in counts if not loan
    }
    for t in range(len(p.types)):
        over = ledger.freed[t] - ledger.started[t] - p.deficit[t]
        if placed and ledger.nodes is not None and p.deficit[t] == 0:
            over = ledger.freed[t]
        if over <= 0:
            continue
        for r in sorted(
            (r for r in a.preempt if p.running[r].type == t and not p.running[r].guest),
            key=lambda r: (-p.running[r].cost, p.running[r].job),
        ):
            run = p.running[r]
            if run.gpus > over:
                continue
            if not ledger.can_keep(r):
                continue  # a start took its GPUs
            _preempt(ledger, p, r, sign=-1)  # keep it running, on trial
            i = run.tenant
            # keeping the job must not push its tenant's in-quota use over quota
            quota_ok = (i, t) not in own_start_tenants or ledger.own[i][t] <= p.quota[i][t]
            fits = ledger.chunks.feasible(t)
            if ledger.free[t] >= 0 and ledger.pool(t) >= 0 and ledger.borrow_ok(i, t) and quota_ok and fits:
                a.preempt.discard(r)
                for g in guests_of.get(run.job, []):
                    a.preempt.discard(g)  # its guests run on its GPUs: they stay too
                over -= run.gpus
            else:
                _preempt(ledger, p, r)
            if over <= 0:
                break


def keep_loan_funded_victims(p: EpochProblem, a: Assignment) -> int:
    """After placement: a job stopped while it ran inside its tenant's quota, whose GPUs no
    start took, keeps running when taking back starts on loan on its type (lowest value per GPU
    first) is all it needs to fit again. Such a stop only freed quota for loans: an on-loan
    start borrows idle quota, and a running job's quota is not idle (the next epochs would
    undo the swap). Never where the tenant's own starts inside quota need that quota, nor on a
    type with an on-loan deficit. Returns how many jobs keep running."""
    ledger = _Tally(p, a)
    guests_of = _guests_of(p)
    kept = 0
    for t in range(len(p.types)):
        if p.deficit[t]:
            continue
        victims = sorted(
            (r for r in a.preempt
             if (run := p.running[r]).type == t and not run.guest and not run.on_loan and run.alloc),
            key=lambda r: (-p.running[r].cost, p.running[r].job),
        )
        for r in victims:
            if not ledger.can_keep(r):
                continue  # a start took its GPUs
            run = p.running[r]
            i = run.tenant
            _preempt(ledger, p, r, sign=-1)  # keep it running, on trial
            taken: list[tuple[int, list[GpuRef] | None]] = []
            while True:
                if (
                    ledger.free[t] >= 0 and ledger.pool(t) >= 0 and ledger.borrow_ok(i, t)
                    and ledger.own[i][t] <= p.quota[i][t] and ledger.chunks.feasible(t)
                ):
                    break
                loans = [
                    c for c, counts in a.starts.items()
                    if counts.get((t, True), 0) - sum(1 for x, _ in taken if x == c) > 0
                ]
                if not loans or ledger.own[i][t] > p.quota[i][t]:
                    break
                c = min(loans, key=lambda c: (p.pending[c].static_value / max(1, p.pending[c].gpus),
                                              p.pending[c].label))
                stack = ledger.placed.get((c, t), [])
                refs = stack[-1] if stack else None
                _start(ledger, p, c, t, own=False, sign=-1)
                taken.append((c, refs))
            if ledger.feasible(i, t) and ledger.own[i][t] <= p.quota[i][t] and ledger.chunks.feasible(t):
                a.preempt.discard(r)
                for g in guests_of.get(run.job, []):
                    a.preempt.discard(g)  # its guests run on its GPUs: they stay too
                for c, _ in taken:
                    a.add(c, t, True, -1)
                kept += 1
                continue
            for c, refs in reversed(taken):
                _start(ledger, p, c, t, own=False, refs=refs)
            _preempt(ledger, p, r)
    _sync(ledger, a)
    return kept


def _repair(ledger: _Tally, p: EpochProblem, a: Assignment) -> None:
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
            d = 0
            while d < run.shrink_steps and not (ledger.pool(t) >= 0 and ledger.borrow_ok(run.tenant, t)):
                _resize(ledger, p, r, -1)
                d += 1
            if d and ledger.pool(t) >= 0 and ledger.borrow_ok(run.tenant, t):
                a.resize[r] = -d  # shrinking gives back enough: no reclaim of the whole job
                continue
            _resize(ledger, p, r, d)
            _preempt(ledger, p, r)
            a.preempt.add(r)
            a.preempt.update(hosts_guests.get(run.job, []))


def _reclaim(
    ledger: _Tally,
    p: EpochProblem,
    a: Assignment,
    c: int,
    victims: dict[int, list[int]],
    guests_of_host: dict[str, list[int]],
    nodes: _NodeVictims,
) -> tuple[int, bool] | None:
    """Preempt on-loan jobs of other tenants (cheapest per GPU first, from the per-type lists
    in ``victims``, outside the claimant's subtree first) until a member of class ``c`` fits on
    one of its own types."""
    cls = p.pending[c]
    depth = p.tree.lca_depth
    for t in cls.own_types:
        if cls.gpus > p.quota[cls.tenant][t] - ledger.own[cls.tenant][t]:
            # only a start inside quota on ``t`` counts, and stopping other tenants' jobs never
            # frees the claimant's own quota: no victim can help here (and other types are
            # unaffected by stops on ``t``, so they failed before this was called)
            continue
        taken: list[int] = []
        # quota trees: on-loan jobs of tenants farthest from the claimant go first (a subtree
        # takes back what it lent outside before what its own members borrow); stable sort
        order = victims.get(t, [])
        if not p.tree.empty:
            order = sorted(order, key=lambda r: depth(p.running[r].tenant, cls.tenant))
        first = [r for r in nodes.first(c, t, a, others_only=cls.tenant) or [] if p.running[r].on_loan]
        if first:
            listed = set(first)
            order = first + [r for r in order if r not in listed]
        for r in order:
            run = p.running[r]
            if run.tenant == cls.tenant or r in a.preempt or r in a.guests.values() or r in a.resize:
                continue
            for d in range(1, run.shrink_steps + 1):  # shrinking first: it loses less work
                _resize(ledger, p, r, -1)
                got = _try_start(ledger, p, c, own_only=True)
                if got is not None:
                    a.resize[r] = -d
                    nodes.changed([r, *taken])
                    a.preempt.update(taken)
                    for v in taken:
                        a.preempt.update(guests_of_host.get(p.running[v].job, []))
                        victims[t].remove(v)
                    return got
            _resize(ledger, p, r, run.shrink_steps)
            _preempt(ledger, p, r)
            taken.append(r)
            got = _try_start(ledger, p, c)
            if got is not None and got[1]:  # on loan: no reclaim (a start on loan never preempts)
                _start(ledger, p, c, got[0], False, sign=-1)
                got = None
            if got is not None:
                nodes.changed(taken)
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


def guided_assignment(p: EpochProblem, m: LinearModel, values: Sequence[float]) -> Assignment:
    """A plan that follows a fractional solution of the model (its LP relaxation): the reclaims
    the greedy plan must make, the preemptions, resizes and guest pairs the solution takes whole,
    then as many starts of each class on each type and quota as it takes whole (down to what the
    ledger, the chunks and the quotas still hold), classes in the greedy order, and last the
    greedy fill of whatever else still fits; preemptions no start uses are undone."""
    eps = 1e-6
    a = Assignment()
    ledger = _Tally(p)
    _repair(ledger, p, a)
    guests_of_host: dict[str, list[int]] = {}
    for r, run in enumerate(p.running):
        if run.host is not None:
            guests_of_host.setdefault(run.host, []).append(r)
    for r, v in sorted(m.preempt.items()):
        if values[v] > 1 - eps and r not in a.preempt:
            _preempt(ledger, p, r)
            a.preempt.add(r)
            for g in guests_of_host.get(p.running[r].job, []):
                if g not in a.preempt:
                    _preempt(ledger, p, g)
                    a.preempt.add(g)
    for r in sorted(set(m.grow) | set(m.shrink)):
        if r in a.preempt:
            continue
        d = math.floor(values[m.grow[r]] + eps) if r in m.grow else 0
        d -= math.floor(values[m.shrink[r]] + eps) if r in m.shrink else 0
        if d < 0:
            _resize(ledger, p, r, d)
            a.resize[r] = d
    taken: list[tuple[bool, float, int, int, bool, int]] = []
    for (c, t), v in m.own.items():
        k = math.floor(values[v] + eps)
        if k > 0:
            cls = p.pending[c]
            taken.append((not cls.reclaim, -cls.density, c, t, False, k))
    for (c, t), v in m.loan.items():
        k = math.floor(values[v] + eps)
        if k > 0:
            cls = p.pending[c]
            taken.append((True, -cls.density, c, t, True, k))
    for _, _, c, t, loan, k in sorted(taken):
        cls = p.pending[c]
        for _ in range(k):
            if a.started(c) >= cls.cap or (cls.group and cls.group in _started_groups(p, a)):
                break
            if not loan and cls.gpus > p.quota[cls.tenant][t] - ledger.own[cls.tenant][t]:
                break
            if not _start(ledger, p, c, t, not loan):
                break
            if ledger.feasible(cls.tenant, t) and ledger.chunks.feasible(t):
                a.add(c, t, loan)
            else:
                _start(ledger, p, c, t, not loan, sign=-1)
                break
    used_hosts: set[int] = set()
    for g, v in sorted(m.guest.items()):
        cand = p.guests[g]
        free = cand.pending not in a.guests and a.started(cand.pending) == 0
        if values[v] > 1 - eps and free and cand.running not in a.preempt | used_hosts:
            a.guests[cand.pending] = cand.running
            used_hosts.add(cand.running)
    _priority(p, a, ledger)
    _run(p, a, ledger, reclaim=True)
    _priority(p, a, ledger)
    _sync(ledger, a)
    drop_unused_preemptions(p, a)
    return a

"""Hierarchical quotas: the tree of quota groups above the tenants (``Snapshot.groups``).

Semantics (``docs/snapshot-format.md``, "Quota trees"): tenants are the leaves and the only
holders of quota; a group's quota is the sum of the quotas of the tenants below it. Loans stay
tenant to tenant. A loan from lender *l* to borrower *b* *crosses* every group that contains
exactly one of them: it flows **into** the groups of *b* that do not contain *l* and **out of**
the groups of *l* that do not contain *b*. Per GPU type,

* a group's ``borrow_limit`` bounds the GPUs flowing into it (what its tenants borrow from
  tenants outside it), and
* a group's ``lend_limit`` bounds the GPUs flowing out of it (what tenants outside it borrow
  from tenants inside it).

Loans are made inside the smallest enclosing subtree first (:class:`LoanMatcher`): a borrower's
need is matched with lenders in its own group, then its parent's, and so on up to the root.
Matched that way, each group's inflow and outflow are the smallest any set of loans can have
(one of them is zero), so a limit binds only where it must: this is what the epoch model's
net-flow rows (:meth:`QuotaTree.net_flow_ok`, ``formulation.add_group_limits``) assume.

A flat snapshot (no ``groups``) is the empty tree: every pair of tenants meets at the root and
nothing changes.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from optsched.errors import SnapshotError
from optsched.schema.snapshot import Snapshot


@dataclass(frozen=True)
class GroupNode:
    """One quota group, by index."""

    id: str
    parent: int | None
    depth: int
    """1 for a top-level group, 2 for its children, ..."""
    tenants: tuple[int, ...]
    """Tenants (indices) whose ``parent`` is this group."""
    children: tuple[int, ...]
    """Groups (indices) whose ``parent`` is this group."""
    members: tuple[int, ...]
    """Every tenant (index) below the group, in snapshot order."""
    borrow_limit: Mapping[str, int] | None
    lend_limit: Mapping[str, int] | None


@dataclass(frozen=True)
class QuotaTree:
    """The validated quota tree of a snapshot (empty for a flat one)."""

    groups: tuple[GroupNode, ...] = ()
    tenant_ancestors: tuple[tuple[int, ...], ...] = ()
    """Per tenant index: its groups, innermost first (empty at the top level)."""
    index: Mapping[str, int] = field(default_factory=dict)
    """Group id -> group index."""
    notes: tuple[str, ...] = ()
    """Lines for ``solver.notes``: a group ``quota`` that is not the sum of its tenants'."""

    @property
    def empty(self) -> bool:
        return not self.groups

    def ancestors(self, tenant: int) -> tuple[int, ...]:
        """The groups of ``tenant``, innermost first."""
        return self.tenant_ancestors[tenant] if self.groups else ()

    @functools.cached_property
    def _anc_sets(self) -> tuple[frozenset[int], ...]:
        return tuple(frozenset(a) for a in self.tenant_ancestors)

    @functools.cached_property
    def bottom_up(self) -> tuple[int, ...]:
        """Group indices, deepest first (children before their parent)."""
        return tuple(sorted(range(len(self.groups)), key=lambda g: (-self.groups[g].depth, g)))

    @functools.cached_property
    def top_tenants(self) -> tuple[int, ...]:
        return tuple(i for i, a in enumerate(self.tenant_ancestors) if not a)

    @functools.cached_property
    def top_groups(self) -> tuple[int, ...]:
        return tuple(g for g, n in enumerate(self.groups) if n.parent is None)

    @functools.cached_property
    def max_depth(self) -> int:
        return max((n.depth for n in self.groups), default=0)

    def lca_depth(self, a: int, b: int) -> int:
        """Depth of the smallest group holding tenants ``a`` and ``b`` (0: the root)."""
        if not self.groups:
            return 0
        return len(self._anc_sets[a] & self._anc_sets[b])

    def crossing(self, lender: int, borrower: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Groups a loan from ``lender`` to ``borrower`` flows out of, and into."""
        if not self.groups:
            return (), ()
        la, ba = self._anc_sets[lender], self._anc_sets[borrower]
        return (
            tuple(g for g in self.tenant_ancestors[lender] if g not in ba),
            tuple(g for g in self.tenant_ancestors[borrower] if g not in la),
        )

    def borrow_limit(self, g: int, gpu_type: str) -> int | None:
        lim = self.groups[g].borrow_limit
        return None if lim is None else lim.get(gpu_type)

    def lend_limit(self, g: int, gpu_type: str) -> int | None:
        lim = self.groups[g].lend_limit
        return None if lim is None else lim.get(gpu_type)

    def limited(self, gpu_type: str) -> bool:
        """Whether any group limits loans of ``gpu_type``."""
        return any(
            self.borrow_limit(g, gpu_type) is not None or self.lend_limit(g, gpu_type) is not None
            for g in range(len(self.groups))
        )

    def net_values(self, share: Sequence[int], gpu_type: str) -> tuple[list[int], int]:
        """Bottom-up net supply of every group and of the root.

        ``share[i]`` is tenant ``i``'s lendable idle quota (positive) or its borrowing (negative).
        A group's value is the sum of its children's, capped by its ``lend_limit`` when positive
        (what it can give outside); the root's is the sum of the top level's. Loans covering all
        borrowing within every limit exist exactly when the root's value is >= 0 and no group's
        value is below minus its ``borrow_limit`` (see :meth:`net_flow_ok`).
        """
        vals = [0] * len(self.groups)
        for g in self.bottom_up:
            node = self.groups[g]
            v = sum(share[i] for i in node.tenants) + sum(vals[c] for c in node.children)
            ll = self.lend_limit(g, gpu_type)
            if ll is not None and v > ll:
                v = ll
            vals[g] = v
        root = sum(share[i] for i in self.top_tenants) + sum(vals[g] for g in self.top_groups)
        return vals, root

    def net_flow_ok(self, share: Sequence[int], gpu_type: str) -> bool:
        """Whether all borrowing in ``share`` can be covered within every group's limits."""
        vals, root = self.net_values(share, gpu_type)
        if root < 0:
            return False
        return all(
            self.borrow_limit(g, gpu_type) is None or vals[g] >= -(self.borrow_limit(g, gpu_type) or 0)
            for g in range(len(self.groups))
        )

    def reachable(
        self, tenant: int, supply: Sequence[int], out_room: Mapping[int, int]
    ) -> tuple[int, int | None]:
        """What the others' lendable quota ``supply`` can lend ``tenant`` once every group not
        holding it caps what leaves it by ``out_room`` (lend_limit minus what it lends; groups
        absent: no limit). Returns that total and the group whose cap cuts the most (None: no
        cap cuts)."""
        anc = self._anc_sets[tenant] if self.groups else frozenset()
        vals = [0] * len(self.groups)
        cut: tuple[int, int | None] = (0, None)
        for g in self.bottom_up:
            node = self.groups[g]
            v = sum(supply[i] for i in node.tenants if i != tenant)
            v += sum(vals[c] for c in node.children)
            if g not in anc and g in out_room and v > max(0, out_room[g]):
                capped = max(0, out_room[g])
                if v - capped > cut[0]:
                    cut = (v - capped, g)
                v = capped
            vals[g] = v
        total = sum(supply[i] for i in self.top_tenants if i != tenant)
        total += sum(vals[g] for g in self.top_groups)
        return total, cut[1]


EMPTY = QuotaTree()


def build_tree(snap: Snapshot) -> QuotaTree:
    """Validate ``snap.groups`` and the tenants' ``parent`` and build the tree.

    A group ``quota`` that is not the sum of its tenants' quotas is no error: the sum is used
    and :attr:`QuotaTree.notes` says so (a group holds no GPUs of its own).

    Raises
    ------
    SnapshotError
        Naming the field: a duplicated group id (or one that is also a tenant id), an unknown
        parent, a cycle, an unknown GPU type, or a group with no tenant below it.
    """
    groups = snap.groups or []
    tenant_ids = {t.id for t in snap.tenants}
    index: dict[str, int] = {}
    for k, grp in enumerate(groups):
        if grp.id in index:
            raise SnapshotError(f"groups[{k}].id", f"duplicated group id '{grp.id}'")
        if grp.id in tenant_ids:
            raise SnapshotError(f"groups[{k}].id", f"'{grp.id}' is also a tenant id")
        index[grp.id] = k
        for name in ("quota", "borrow_limit", "lend_limit"):
            for key in getattr(grp, name) or {}:
                if key not in snap.gpu_types:
                    raise SnapshotError(f"groups[{k}].{name}.{key}", f"unknown GPU type '{key}'")
    for k, grp in enumerate(groups):
        if grp.parent is not None and grp.parent not in index:
            raise SnapshotError(f"groups[{k}].parent", f"unknown group '{grp.parent}'")
    for i, ten in enumerate(snap.tenants):
        if ten.parent is not None and ten.parent not in index:
            raise SnapshotError(f"tenants[{i}].parent", f"unknown group '{ten.parent}'")
    if not groups:
        return EMPTY
    parent = [index[g.parent] if g.parent is not None else None for g in groups]
    depth = [0] * len(groups)
    for k in range(len(groups)):
        chain = [k]
        cur = parent[k]
        while cur is not None:
            if cur in chain:
                cycle = " -> ".join(groups[x].id for x in [*chain[chain.index(cur):], cur])
                raise SnapshotError(f"groups[{k}].parent", f"the parent chain forms a cycle ({cycle})")
            chain.append(cur)
            cur = parent[cur]
        depth[k] = len(chain)
    tenant_anc: list[tuple[int, ...]] = []
    direct: list[list[int]] = [[] for _ in groups]
    members: list[list[int]] = [[] for _ in groups]
    for i, ten in enumerate(snap.tenants):
        anc: list[int] = []
        cur = index[ten.parent] if ten.parent is not None else None
        if cur is not None:
            direct[cur].append(i)
        while cur is not None:
            anc.append(cur)
            members[cur].append(i)
            cur = parent[cur]
        tenant_anc.append(tuple(anc))
    children: list[list[int]] = [[] for _ in groups]
    for k, par in enumerate(parent):
        if par is not None:
            children[par].append(k)
    notes: list[str] = []
    for k, grp in enumerate(groups):
        if not members[k]:
            raise SnapshotError(f"groups[{k}]", f"group '{grp.id}' has no tenant below it")
        for t, stated in (grp.quota or {}).items():
            total = sum(snap.tenants[i].quota.get(t, 0) for i in members[k])
            if stated != total:
                notes.append(quota_note(grp.id, t, stated, total))
    nodes = tuple(
        GroupNode(
            id=grp.id,
            parent=parent[k],
            depth=depth[k],
            tenants=tuple(direct[k]),
            children=tuple(children[k]),
            members=tuple(members[k]),
            borrow_limit=dict(grp.borrow_limit) if grp.borrow_limit is not None else None,
            lend_limit=dict(grp.lend_limit) if grp.lend_limit is not None else None,
        )
        for k, grp in enumerate(groups)
    )
    return QuotaTree(groups=nodes, tenant_ancestors=tuple(tenant_anc), index=index, notes=tuple(notes))


def quota_note(group: str, gpu_type: str, stated: int, total: int) -> str:
    """The ``solver.notes`` line for a group ``quota`` that is not its tenants' sum."""
    return (
        f"quota group {group} states {stated} '{gpu_type}' GPUs of quota but the quotas of the "
        f"tenants below it sum to {total}: the sum is used (a group holds no GPUs of its own)"
    )


class LoanMatcher:
    """Matches borrowers' needs with lenders' idle quota on one GPU type, inside the smallest
    enclosing subtree first, within every group's limits (remaining room is kept across calls).

    With an empty tree it is the flat rule: each borrower in order takes from the lenders in
    order.
    """

    def __init__(
        self, tree: QuotaTree, gpu_type: str, supply: Mapping[int, int], order: Iterable[int]
    ) -> None:
        self.tree = tree
        self.avail = dict(supply)
        self.order = [x for x in order if self.avail.get(x, 0) > 0]
        self.in_room: dict[int, int] = {}
        self.out_room: dict[int, int] = {}
        for g in range(len(tree.groups)):
            bl, ll = tree.borrow_limit(g, gpu_type), tree.lend_limit(g, gpu_type)
            if bl is not None:
                self.in_room[g] = bl
            if ll is not None:
                self.out_room[g] = ll

    def room(self, lender: int, borrower: int) -> int | None:
        """Most GPUs a loan from ``lender`` to ``borrower`` may still carry; None: no group limit."""
        out, into = self.tree.crossing(lender, borrower)
        rooms = [self.out_room[g] for g in out if g in self.out_room]
        rooms += [self.in_room[g] for g in into if g in self.in_room]
        return min(rooms) if rooms else None

    def cover(self, demands: Sequence[tuple[int, int]]) -> list[tuple[int, int, int]]:
        """Loans ``(lender, borrower, gpus)`` for ``demands`` (borrower, GPUs), in order."""
        need = {b: 0 for b, _ in demands}
        for b, n in demands:
            need[b] += max(0, n)
        loans: list[tuple[int, int, int]] = []
        tree = self.tree
        for level in range(tree.max_depth, -1, -1):
            for b in need:
                for lender in self.order:
                    if need[b] <= 0:
                        break
                    if lender == b or self.avail[lender] <= 0 or tree.lca_depth(lender, b) != level:
                        continue
                    g = min(self.avail[lender], need[b])
                    room = self.room(lender, b)
                    if room is not None:
                        g = min(g, room)
                    if g <= 0:
                        continue
                    loans.append((lender, b, g))
                    self.avail[lender] -= g
                    need[b] -= g
                    out, into = tree.crossing(lender, b)
                    for grp in out:
                        if grp in self.out_room:
                            self.out_room[grp] -= g
                    for grp in into:
                        if grp in self.in_room:
                            self.in_room[grp] -= g
        return loans


def group_flows(
    tree: QuotaTree, loans: Iterable[tuple[int, int, str, int]]
) -> tuple[dict[tuple[int, str], int], dict[tuple[int, str], int]]:
    """GPUs flowing into and out of each (group, type) for loans (lender, borrower, type, gpus)."""
    into: dict[tuple[int, str], int] = {}
    out: dict[tuple[int, str], int] = {}
    for lender, borrower, t, g in loans:
        go, gi = tree.crossing(lender, borrower)
        for grp in go:
            out[(grp, t)] = out.get((grp, t), 0) + g
        for grp in gi:
            into[(grp, t)] = into.get((grp, t), 0) + g
    return into, out

"""The id-level ledger of one decision: free GPUs per node and type (:class:`Placer`: place,
take on a node), and the loans that cover every tenant's use above quota
(:func:`derive_loans`, quota-tree aware). Decoding (:mod:`optsched.engine.decode`), the event
path (:mod:`optsched.engine.admit`) and the partition merge
(:mod:`optsched.engine.partition`) place GPUs and derive loans here, with one rule each.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Mapping

from optsched.engine import assurance as asr
from optsched.engine.quota_tree import LoanMatcher
from optsched.engine.state import ClusterState, GpuKey
from optsched.schema.decision import KeptOverQuota, Loan
from optsched.schema.snapshot import GpuRef

__all__ = ["Placer", "derive_loans", "free_gpus", "kept_over_quota"]


def free_gpus(
    state: ClusterState, stopped: set[str], released: frozenset[GpuKey] = frozenset()
) -> dict[str, list[int]]:
    """Free GPU indices per available node after the stopped jobs leave (and the ``released``
    GPUs of shrunk jobs)."""
    # state.gpu_holders lists every GPU of every running job: a GPU stays held while one of
    # its holders keeps running
    held: set[GpuKey] = {
        k for k, ids in state.gpu_holders.items() if any(j not in stopped for j in ids)
    } - released
    free: dict[str, list[int]] = defaultdict(list)
    for node, gpu in state.cluster_gpus():
        if (node, gpu) not in held:
            free[node].append(gpu)
    return free


class Placer:
    """Places many starts without scanning every node of the type per start: best fit on one
    node, else the GPUs of the nodes with most free GPUs (ids break ties).

    The nodes of each type sit in buckets by their number of free GPUs, ids sorted: best fit
    is the first node of the first non-empty bucket from the gang size up; the spread order
    (most free GPUs first, then id) walks the buckets downwards. ``tests/engine/test_decide_placer.py``
    checks it against the plain node-scanning rule.
    """

    def __init__(self, free: dict[str, list[int]], nodes_by_type: Mapping[str, list[str]]) -> None:
        self.free = free
        self.buckets: dict[str, dict[int, list[str]]] = {}
        for t, nodes in nodes_by_type.items():
            b: dict[int, list[str]] = defaultdict(list)
            for n in nodes:
                b[len(free[n])].append(n)
            for ids in b.values():
                ids.sort()
            self.buckets[t] = b

    def _take(self, b: dict[int, list[str]], node: str, k: int) -> list[GpuRef]:
        gpus = self.free[node]
        n = len(gpus)
        taken, self.free[node] = gpus[:k], gpus[k:]
        ids = b[n]
        del ids[bisect.bisect_left(ids, node)]
        bisect.insort(b[n - k], node)
        return [GpuRef(node=node, gpu=g) for g in taken]

    def take_on(self, gpu_type: str, node: str, gpus: int) -> list[GpuRef]:
        """Up to ``gpus`` free GPUs of ``node`` (lowest indices first)."""
        b = self.buckets.setdefault(gpu_type, defaultdict(list))
        k = min(gpus, len(self.free.get(node, ())))
        return self._take(b, node, k) if k > 0 else []

    def place(self, gpu_type: str, gpus: int) -> list[GpuRef]:
        b = self.buckets.setdefault(gpu_type, defaultdict(list))
        fits = [c for c, ids in b.items() if c >= gpus and ids]
        if fits:
            c = min(fits)
            return self._take(b, b[c][0], gpus)
        out: list[GpuRef] = []
        for c in sorted((c for c, ids in b.items() if c > 0 and ids), reverse=True):
            for node in list(b[c]):
                if len(out) == gpus:
                    break
                out += self._take(b, node, min(gpus - len(out), c))
            if len(out) == gpus:
                break
        if len(out) != gpus:
            raise AssertionError(f"placement of {gpus} GPUs failed: capacity row violated")
        return out


def kept_over_quota(uncovered: Mapping[tuple[str, str], int]) -> list[KeptOverQuota]:
    """``Decision.kept_over_quota`` from (tenant, type) -> excess no lender covered (what
    :func:`derive_loans` returns), in tenant and type order."""
    return [
        KeptOverQuota(tenant=ten, gpu_type=t, gpus=n) for (ten, t), n in sorted(uncovered.items()) if n > 0
    ]


def derive_loans(
    state: ClusterState,
    use: dict[tuple[str, str], int],
    signal: dict[str, asr.TenantAssurance],
    kept: Mapping[tuple[str, str], int] | None = None,
) -> tuple[list[Loan], dict[tuple[str, str], int]]:
    """Cover each tenant's use above quota with idle quota of others (most assured first).

    ``kept`` is, per (tenant, type), the use running above quota without a loan that the model
    kept uncovered (amended invariant 4). The lenders' idle quota first covers the rest of the
    excess (what the model counted on: new loans and on-loan jobs it kept), then, with what is
    left, as much of the kept use as it can (no lendable quota may stay idle while kept use is
    uncovered). With quota groups, lenders inside the borrower's smallest enclosing subtree
    come first, then further out, and no loan breaks a group's borrow or lend limit
    (:class:`~optsched.engine.quota_tree.LoanMatcher`). Returns the loans and the excess no
    lender could cover.
    """
    kept = kept or {}
    loans: list[Loan] = []
    uncovered: dict[tuple[str, str], int] = {}
    tree, tix, ids = state.tree, state.tenant_index, state.tenant_ids
    for t in state.type_names:
        avail: dict[str, int] = {}
        for ten in state.tenant_ids:
            idle = state.quota(ten, t) - use.get((ten, t), 0)
            lim = state.lend_limit(ten, t)
            give = idle if lim is None else min(idle, lim)
            if give > 0:
                avail[ten] = give
        order = sorted(avail, key=lambda x: (-signal[x].value, -avail[x], x))
        excess: dict[str, int] = {}
        room: dict[str, int] = {}
        covered: dict[str, int] = {}
        for ten in state.tenant_ids:
            e = use.get((ten, t), 0) - state.quota(ten, t)
            if e > 0:
                excess[ten] = e
                bl = state.borrow_limit(ten, t)
                room[ten] = e if bl is None else min(e, bl)
                covered[ten] = 0
        # quota groups: lenders inside the borrower's smallest enclosing subtree first, within
        # every group's limits (flat: each borrower takes from the lenders in order)
        match = LoanMatcher(tree, t, {tix[x]: avail[x] for x in order}, [tix[x] for x in order])
        for first in (True, False):
            demands: list[tuple[int, int]] = []
            for ten in excess:
                need = room[ten] - covered[ten]
                if first:
                    need = min(need, excess[ten] - kept.get((ten, t), 0))
                demands.append((tix[ten], need))
            for lender, borrower, g in match.cover(demands):
                loans.append(Loan(lender=ids[lender], borrower=ids[borrower], gpu_type=t, gpus=g))
                covered[ids[borrower]] += g
        for ten, e in excess.items():
            if e - covered[ten] > 0:
                uncovered[(ten, t)] = e - covered[ten]
    return merge_loans(loans), uncovered


def merge_loans(loans: list[Loan]) -> list[Loan]:
    """One loan per (lender, borrower, type), in first-made order."""
    merged: dict[tuple[str, str, str], int] = {}
    for ln in loans:
        key = (ln.lender, ln.borrower, ln.gpu_type)
        merged[key] = merged.get(key, 0) + ln.gpus
    return [Loan(lender=k[0], borrower=k[1], gpu_type=k[2], gpus=g) for k, g in merged.items()]

r"""Node shape in counts: free GPUs as chunks of 1, 2, 4, ... GPUs, the rule the one model writes
as rows (:func:`optsched.engine.formulation.add_node_shape`) and the greedy plan, the fill pass
and the objective evaluate here (:class:`ChunkBook`).

A node with :math:`F` free GPUs holds the *maximal chunks* of :math:`F`'s binary digits
(6 = 4 + 2), at most ``levels[-1]`` GPUs each. A whole-GPU piece of :math:`p` GPUs takes one
chunk per binary digit of :math:`p`; a chunk of level :math:`\ell + 1` may be split into two of
level :math:`\ell`. With :math:`E_\ell` the free maximal chunks, :math:`d_\ell` the chunks the
pieces take and :math:`x_\ell` the level-:math:`(\ell+1)` chunks split,

.. math:: d_\ell + x_{\ell-1} \le E_\ell + 2 x_\ell \quad (\ell = 0..L), \qquad x_{-1} = x_L = 0

and the leftover :math:`E_\ell + 2x_\ell - x_{\ell-1} - d_\ell` is what stays free, in maximal
chunks. When every piece is a power of two (and nothing else, CPU, memory, topology, shares,
has to fit), the pieces fit the nodes iff these rows hold with integer splits: place the
largest pieces first, each in a maximal chunk of its size or the smallest larger one (the
buddy rule of :class:`~optsched.engine.ledger.NodePool`). Otherwise the rows still hold for
every placement that exists (a piece of 3 GPUs on one node also fits as 2 + 1), so they are a
relaxation: the model's bound stays a bound, and decoding leaves a start it cannot place queued.

**Fragmentation** (the objective's term): after the decision, a free maximal chunk of
:math:`s_\ell` GPUs is a fragment to every waiting piece larger than :math:`s_\ell`; weighting
piece sizes (rounded up to a power of two) by their share of the waiting pieces, as FGD weights
its target workload, the fragmented GPUs are :math:`\sum_\ell F_\ell \cdot \text{leftover}_\ell`
with :math:`F_\ell = s_\ell \Pr[\text{piece} > s_\ell]`. The bottom-up splits below are the
fewest, and so leave the least fragmentation, for the chunks taken.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from optsched.engine.shape import Shape
from optsched.schema.limits import MILLI_PER_GPU

if TYPE_CHECKING:
    from optsched.engine.problem import Assignment, EpochProblem, TypePlacement

__all__ = ["ChunkBook", "ChunkNeed", "carry", "chunks_of", "level_counts", "levels_for", "piece_levels"]


ChunkNeed = tuple[tuple[int, ...], int, int, int, bool]
"""What one member of a class takes on a type (:meth:`ChunkBook._need_of`): its chunks per
level, its CPUs and host memory over its nodes, a share's thousandths (0 for whole GPUs), and
whether it takes a domain of the type's required topology level."""


def levels_for(largest: int) -> tuple[int, ...]:
    """Chunk sizes on nodes of at most ``largest`` GPUs: 1, 2, 4, ... up to the largest power of
    two a node holds."""
    out = [1]
    while out[-1] * 2 <= largest:
        out.append(out[-1] * 2)
    return tuple(out)


@functools.lru_cache(maxsize=4096)
def _chunks(free: int, levels: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(_chunks_list(free, levels))


def chunks_of(free: int, levels: tuple[int, ...]) -> tuple[int, ...]:
    """The maximal chunks of ``free`` GPUs per level: as many top-level chunks as fit, then the
    binary digits of the rest."""
    return _chunks(free, levels)


def _chunks_list(free: int, levels: tuple[int, ...]) -> list[int]:
    """The maximal chunks of ``free`` GPUs per level: as many top-level chunks as fit, then the
    binary digits of the rest."""
    top = len(levels) - 1
    out = [0] * len(levels)
    out[top], rest = divmod(max(free, 0), levels[top])
    for ell in range(top - 1, -1, -1):
        if rest >= levels[ell]:
            out[ell] = 1
            rest -= levels[ell]
    return out


def piece_levels(piece: int, levels: tuple[int, ...]) -> tuple[int, ...]:
    """The chunks a piece of ``piece`` GPUs takes, per level (its binary digits; a piece larger
    than the top level takes several top chunks)."""
    return chunks_of(piece, levels)


@functools.lru_cache(maxsize=4096)
def level_counts(shape: Shape, levels: tuple[int, ...]) -> tuple[int, ...]:
    """Chunks per level one job of ``shape`` takes (a spread job: its GPUs as 1-GPU chunks; a
    share: none, see :class:`ChunkBook`)."""
    return tuple(_level_counts(shape, levels))


def _level_counts(shape: Shape, levels: tuple[int, ...]) -> list[int]:
    out = [0] * len(levels)
    if shape.fractional:
        return out
    if shape.spread:
        out[0] = shape.gpus
        return out
    for p in shape.pieces:
        for ell, k in enumerate(piece_levels(p, levels)):
            out[ell] += k
    return out


def carry(avail: Sequence[int], demand: Sequence[int]) -> tuple[bool, list[int], list[int]]:
    """Bottom-up fewest splits: whether ``demand`` chunks fit ``avail`` ones, the splits per level
    (``x[ell]``: level ``ell + 1`` chunks split) and the leftover maximal chunks per level."""
    top = len(avail) - 1
    splits = [0] * top
    left = [0] * (top + 1)
    need_from_below = 0
    for ell in range(top + 1):
        need = demand[ell] + need_from_below
        have = avail[ell]
        if need <= have:
            left[ell] = have - need
            need_from_below = 0
        elif ell == top:
            left[ell] = have - need
            return False, splits, left
        else:
            short = need - have
            x = (short + 1) // 2
            splits[ell] = x
            left[ell] = have + 2 * x - need
            need_from_below = x
    return True, splits, left


@dataclass
class _TypeBook:
    tp: TypePlacement
    free: dict[int, int]
    """Movable node index -> its free GPUs now."""
    position: dict[int, int]
    """Movable node index -> its position in ``tp.movable``."""
    avail: list[int]
    demand: list[int]
    cpu: int = 0
    mem: int = 0
    shares: int = 0
    """Thousandths taken by fractional starts."""
    share_gpus: int = 0
    """1-GPU chunks of fully free GPUs opened for shares (in ``demand[0]``)."""
    domains: dict[tuple[str, ...], list[int]] = field(default_factory=dict)
    """Required-topology domain -> its free maximal chunks now."""
    dom_demand: dict[tuple[str, ...], list[int]] = field(default_factory=dict)
    """Required-topology domain -> chunks its jobs take there, per level."""
    chosen: dict[int, list[tuple[str, ...]]] = field(default_factory=dict)
    """Class -> the domains of its required-topology starts, in order (undone last first)."""

    def set_free(self, node: int, free: int) -> None:
        old = self.free[node]
        if old == free:
            return
        levels = self.tp.levels
        a, b = chunks_of(old, levels), chunks_of(free, levels)
        for ell in range(len(levels)):
            self.avail[ell] += b[ell] - a[ell]
        dom = self.tp.movable[self.position[node]].domain
        if dom and dom in self.domains:
            row = self.domains[dom]
            for ell in range(len(levels)):
                row[ell] += b[ell] - a[ell]
        self.free[node] = free

    def feasible(self) -> bool:
        if not carry(self.avail, self.demand)[0]:
            return False
        tp = self.tp
        if tp.cpu_free is not None and self.cpu > tp.cpu_free:
            return False
        if tp.mem_free is not None and self.mem > tp.mem_free:
            return False
        return all(_fits_domain(self.domains[d], need) for d, need in self.dom_demand.items())

    def _reshare(self) -> None:
        """Fully free GPUs the shares need beyond the GPUs that hold shares (fewest)."""
        over = max(0, self.shares - self.tp.share_free)
        opened = (over + MILLI_PER_GPU - 1) // MILLI_PER_GPU
        self.demand[0] += opened - self.share_gpus
        self.share_gpus = opened


def _fits_domain(avail: Sequence[int], need: Sequence[int]) -> bool:
    """A required-topology domain's row: for each level, the chunks its jobs take at that level
    or above (in that level's units) fit the chunks it has at that level or above."""
    have = 0
    want = 0
    for ell in range(len(avail) - 1, -1, -1):
        have = 2 * have + avail[ell]
        want = 2 * want + need[ell]
        if want > have:
            return False
    return True


class ChunkBook:
    """The chunk rows of a problem, kept up to date by a plan's starts, preemptions and resizes
    (the greedy plan's and the fill pass's placement test, and the objective's fragmentation)."""

    def __init__(self, p: EpochProblem, a: Assignment | None = None) -> None:
        self.p = p
        self.books: dict[int, _TypeBook] = {}
        self.on_node: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
        """Running item -> (type, movable node, GPUs it frees there) of its movable nodes."""
        self._needs = p.chunk_needs
        """(class, type) -> what one member takes there (:meth:`_need_of`), shared by the
        problem's books."""
        for t in range(len(p.types)):
            tp = p.placement_of(t)
            if tp is None:
                continue
            avail = list(tp.fixed)
            free: dict[int, int] = {}
            position: dict[int, int] = {}
            for k, mn in enumerate(tp.movable):
                free[mn.index] = mn.free
                position[mn.index] = k
                for ell, c in enumerate(chunks_of(mn.free, tp.levels)):
                    avail[ell] += c
                for r, g in mn.holders:
                    self.on_node[r].append((t, mn.index, g))
            book = _TypeBook(tp, free, position, avail, [0] * len(tp.levels))
            for dom, fixed in tp.domains:
                book.domains[dom] = list(fixed)
            for mn in tp.movable:
                if mn.domain and mn.domain in book.domains:
                    row = book.domains[mn.domain]
                    for ell, c in enumerate(chunks_of(mn.free, tp.levels)):
                        row[ell] += c
            self.books[t] = book
        if a is not None:
            for r in a.preempt:
                self.preempt(r)
            for r, d in a.resize.items():
                self.resize(r, 0, d)
            for c, counts in a.starts.items():
                for (t, _), k in counts.items():
                    for _ in range(k):
                        self.start(c, t)

    # ---------------------------------------------------------------- changes
    def start(self, c: int, t: int, sign: int = 1) -> bool:
        """Take (``sign`` 1) or give back (-1) one member of class ``c`` on type ``t``; ``False``
        (and nothing taken) when a required-topology start finds no domain that holds it."""
        book = self.books.get(t)
        if book is None:
            return True
        got = self._needs.get((c, t))
        if got is None:
            got = self._needs[(c, t)] = self._need_of(c, t, book.tp)
        need, cpu, mem, milli, topology = got
        if milli:
            book.shares += sign * milli
            book._reshare()
        demand = book.demand
        for ell, k in enumerate(need):
            if k:
                demand[ell] += sign * k
        book.cpu += sign * cpu
        book.mem += sign * mem
        if topology:
            if sign > 0:
                dom = self._pick_domain(book, need)
                if dom is None:
                    self._undo_counts(book, got)
                    return False
                book.chosen.setdefault(c, []).append(dom)
            else:
                dom = book.chosen[c].pop()
            row = book.dom_demand.setdefault(dom, [0] * len(book.tp.levels))
            for ell, k in enumerate(need):
                row[ell] += sign * k
        return True

    def _need_of(self, c: int, t: int, tp: TypePlacement) -> ChunkNeed:
        """What one member of class ``c`` takes on type ``t`` (:data:`ChunkNeed`), read once per
        class and type: the greedy plan starts and gives back members thousands of times."""
        shape = self.p.pending[c].shape_on(t)
        n = max(1, shape.nodes)
        topology = shape.level >= 0 and shape.required and shape.nodes > 1 and tp.domain_level == shape.level
        return (
            level_counts(shape, tp.levels), shape.cpu_milli * n, shape.memory_mib * n,
            shape.milli if shape.fractional else 0, topology,
        )

    def _undo_counts(self, book: _TypeBook, got: ChunkNeed) -> None:
        need, cpu, mem, milli, _ = got
        if milli:
            book.shares -= milli
            book._reshare()
        for ell, k in enumerate(need):
            book.demand[ell] -= k
        book.cpu -= cpu
        book.mem -= mem

    def _pick_domain(self, book: _TypeBook, need: Sequence[int]) -> tuple[str, ...] | None:
        """The domain a required-topology start goes to: the one with the fewest free GPUs whose
        row still holds with it."""
        levels = book.tp.levels
        best: tuple[int, tuple[str, ...]] | None = None
        for dom, avail in book.domains.items():
            used = book.dom_demand.get(dom, [0] * len(levels))
            if _fits_domain(avail, [u + k for u, k in zip(used, need, strict=True)]):
                size = sum(a * s for a, s in zip(avail, levels, strict=True))
                if best is None or (size, dom) < best:
                    best = (size, dom)
        return None if best is None else best[1]

    def preempt(self, r: int, sign: int = 1) -> None:
        """Stop (``sign`` 1) or keep again (-1) running item ``r``: its GPUs on movable nodes free."""
        for t, node, g in self.on_node.get(r, ()):
            book = self.books[t]
            book.set_free(node, book.free[node] + sign * g)
        run = self.p.running[r]
        if run.cpu_milli or run.memory_mib:
            book_t = self.books.get(run.type)
            if book_t is not None:
                n = max(1, len(run.nodes))
                book_t.cpu -= sign * run.cpu_milli * n
                book_t.mem -= sign * run.memory_mib * n

    def resize(self, r: int, old: int, new: int) -> None:
        """Running elastic item ``r`` goes from ``old`` to ``new`` steps of size change: growth
        takes 1-GPU chunks anywhere on its type; a shrink frees GPUs on one of its nodes
        (counted on each, a relaxation)."""
        run = self.p.running[r]
        book = self.books.get(run.type)
        if book is None:
            return
        book.demand[0] += (max(0, new) - max(0, old)) * run.step
        s_old, s_new = max(0, -old) * run.step, max(0, -new) * run.step
        if s_old == s_new:
            return
        for t, node, g in self.on_node.get(r, ()):
            if t == run.type:
                b = self.books[t]
                b.set_free(node, b.free[node] + min(g, s_new) - min(g, s_old))

    # ---------------------------------------------------------------- reading
    def opened(self, t: int) -> int:
        """Fully free GPUs of type ``t`` the plan's shares have opened."""
        book = self.books.get(t)
        return 0 if book is None else book.share_gpus

    def feasible(self, t: int) -> bool:
        """Whether the plan's starts on type ``t`` fit its nodes' chunks (and CPUs, memory,
        topology domains)."""
        book = self.books.get(t)
        return True if book is None else book.feasible()

    def fragmented(self) -> float:
        """Fragmented GPUs after the plan, weighted (:attr:`TypePlacement.frag`), all types."""
        total = 0.0
        for book in self.books.values():
            _, _, left = carry(book.avail, book.demand)
            total += sum(f * x for f, x in zip(book.tp.frag, left, strict=True))
        return total

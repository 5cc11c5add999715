"""The id-level ledger of one decision: free GPUs, shares, CPU and memory per node
(:class:`NodePool`: the one placement rule, by node shape), and the loans that cover every
tenant's use above quota (:func:`derive_loans`, quota-tree aware). Decoding
(:mod:`optsched.engine.decode`), the event path (:mod:`optsched.engine.admit`), the partition
merge (:mod:`optsched.engine.partition`) and the simulator's baselines place GPUs and derive
loans here, with one rule each.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from optsched.engine import assurance as asr
from optsched.engine.chunks import levels_for
from optsched.engine.quota_tree import LoanMatcher
from optsched.engine.shape import Shape
from optsched.engine.state import ClusterState, GpuKey
from optsched.schema.decision import KeptOverQuota, Loan
from optsched.schema.limits import MILLI_PER_GPU
from optsched.schema.snapshot import GpuRef

__all__ = ["NodePool", "NodeRecord", "derive_loans", "free_gpus", "kept_over_quota", "node_records"]


def free_gpus(
    state: ClusterState, stopped: set[str], released: frozenset[GpuKey] = frozenset()
) -> dict[str, list[int]]:
    """Free GPU indices per available node after the stopped jobs leave (and the ``released``
    GPUs of shrunk jobs); a GPU with shares on it is not free."""
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


def _frag_table(largest: int) -> list[list[int]]:
    """``table[f][p]``: how much placing ``p`` GPUs on a node with ``f`` free breaks its free
    chunks, ``frag(f - p) - frag(f)`` with ``frag(f) = sum over chunk sizes s > 1 of f mod s``:
    the GPUs left in pieces too small for each chunk size. Lowest first is the buddy rule: take
    a maximal chunk of the piece's size where one is free, else split the smallest larger one."""
    levels = [s for s in levels_for(largest) if s > 1]

    def frag(f: int) -> int:
        return sum(f % s for s in levels)

    return [[frag(f - p) - frag(f) if p <= f else 0 for p in range(largest + 1)] for f in range(largest + 1)]


@dataclass(frozen=True)
class NodeRecord:
    """One available node as a placement starts from it: its free GPU indices, the free
    thousandths of its GPUs that hold shares, its free CPUs and memory (None: not tracked) and
    its domain at each topology level."""

    index: int
    """Its index in the snapshot's ``nodes``."""
    id: str
    type: str
    gpus: int
    free: tuple[int, ...]
    shares: tuple[tuple[int, int], ...]
    cpu: int | None
    mem: int | None
    domains: tuple[tuple[str, ...], ...]


def node_records(
    state: ClusterState,
    stopped: frozenset[str] | set[str] = frozenset(),
    released: frozenset[GpuKey] = frozenset(),
    kept: Mapping[str, list[GpuRef]] | None = None,
) -> tuple[NodeRecord, ...]:
    """The available nodes as the snapshot's running jobs leave them, less ``stopped`` jobs and
    the ``released`` GPUs of shrinking jobs (which then hold ``kept``). Without ``released`` and
    ``kept`` the records are kept with the state (they are immutable) and built once per set of
    stopped jobs: an epoch asks for them from several stages."""
    if released or kept:
        return _node_records(state, stopped, released, kept)
    key = ("node_records", frozenset(stopped))
    got = state.shape_cache.get(key)
    if got is None:
        got = state.shape_cache[key] = _node_records(state, stopped, released, kept)
    return got


def _node_records(
    state: ClusterState,
    stopped: frozenset[str] | set[str],
    released: frozenset[GpuKey],
    kept: Mapping[str, list[GpuRef]] | None,
) -> tuple[NodeRecord, ...]:
    snap = state.snapshot
    levels = state.topology_levels
    pool = state.pool_gpus
    kept = kept or {}
    used_milli: Mapping[GpuKey, int]
    held: Collection[GpuKey]
    cpu_used: dict[str, int] = defaultdict(int)
    mem_used: dict[str, int] = defaultdict(int)
    if not stopped and not released and not kept:
        # every running job holds its GPUs: the state's holders and shares say which
        held, used_milli = state.gpu_holders, state.gpu_shares
        for job in state.running():
            if job.cpu_milli or job.memory_mib:
                for nid in {ref.node for ref in job.allocation or ()}:
                    cpu_used[nid] += job.cpu_milli or 0
                    mem_used[nid] += job.memory_mib or 0
    else:
        milli: dict[GpuKey, int] = defaultdict(int)
        taken: set[GpuKey] = set()
        for job in state.running():
            if job.id in stopped:
                continue
            alloc = kept.get(job.id, job.allocation or [])
            for ref in alloc:
                key = (ref.node, ref.gpu)
                if key in released:
                    continue
                taken.add(key)
                if job.is_fractional:
                    milli[key] += job.gpu_milli or 0
            if job.cpu_milli or job.memory_mib:
                for nid in {ref.node for ref in alloc}:
                    cpu_used[nid] += job.cpu_milli or 0
                    mem_used[nid] += job.memory_mib or 0
        held, used_milli = taken, milli
    out: list[NodeRecord] = []
    for i, n in enumerate(snap.nodes):
        if not n.available:
            continue
        free: list[int] = []
        shares: list[tuple[int, int]] = []
        nid = n.id
        if not pool and not used_milli:  # whole GPUs only (the common case): one pass
            free = [g for g in range(n.gpus) if (nid, g) not in held]
        else:
            for g in range(n.gpus):
                key = (nid, g)
                if key in pool:
                    continue
                if key in used_milli:
                    shares.append((g, MILLI_PER_GPU - used_milli[key]))
                elif key not in held:
                    free.append(g)
        domains: tuple[tuple[str, ...], ...] = ()
        if levels and n.topology:
            domains = tuple(tuple(n.topology[name] for name in levels[: k + 1]) for k in range(len(levels)))
        out.append(
            NodeRecord(
                i, n.id, n.gpu_type, n.gpus, tuple(free), tuple(shares),
                None if n.cpu_milli is None else n.cpu_milli - cpu_used.get(n.id, 0),
                None if n.memory_mib is None else n.memory_mib - mem_used.get(n.id, 0),
                domains,
            )
        )
    return tuple(out)


def has_room(cpu: int | None, mem: int | None, shape: Shape) -> bool:
    """Whether a node with ``cpu`` milli-CPUs and ``mem`` MiB of host memory free (None: not
    tracked) holds one more piece of ``shape``."""
    return (cpu is None or cpu >= shape.cpu_milli) and (mem is None or mem >= shape.memory_mib)


class _Node:
    __slots__ = ("cpu", "domains", "free", "gpus", "id", "index", "mem", "shares", "type")

    def __init__(self, rec: NodeRecord) -> None:
        self.index = rec.index
        self.id = rec.id
        self.type = rec.type
        self.gpus = rec.gpus
        self.free: list[int] = list(rec.free)
        """Fully free GPU indices, ascending."""
        self.shares: dict[int, int] = dict(rec.shares)
        """GPU index -> thousandths still free on a GPU that holds shares."""
        self.cpu: int | None = rec.cpu
        """Free milli-CPUs (None: not tracked)."""
        self.mem: int | None = rec.mem
        self.domains: tuple[tuple[str, ...], ...] = rec.domains
        """Per topology level: the node's domain (its path)."""

    def hosts(self, shape: Shape) -> bool:
        """Whether the node has the shape's CPU and host memory free for one more piece."""
        return has_room(self.cpu, self.mem, shape)


class NodePool:
    """Free GPUs, shares, CPU and host memory per available node, and the one placement rule
    (the plans' placement step, the event path, the partition merge and the simulator's
    baselines place here).

    Whole-GPU pieces go to the node whose free chunks the piece breaks least (:func:`_frag_table`,
    the buddy rule: a 2-GPU piece takes a node with 6 free, leaving 4, before one with 5,
    leaving 3), then the fewest free GPUs (best fit), then, for a job asking CPUs or host memory,
    the least memory and then CPUs left (the roomier nodes stay for needier jobs), then snapshot
    order; each piece of a job on
    another node, largest first, and on a node with the job's CPU and memory free. A required
    topology request keeps every piece inside one domain: the domain with the fewest free GPUs
    that holds them. A spread job takes one node when one holds it, else the nodes with most free
    GPUs first. A share (fractional job) takes the GPU whose free share fits it most tightly,
    else a fully free GPU by the piece rule. Nodes of each type sit in buckets by free count, so a
    placement looks at a few buckets, not at every node.
    """

    def __init__(
        self,
        records: Sequence[NodeRecord],
        largest: Mapping[str, int],
        levels: tuple[str, ...] = (),
        node_count: int | None = None,
        refs: dict[tuple[str, int], GpuRef] | None = None,
    ) -> None:
        """A pool over ``records`` (``largest``: the largest node of each GPU type, what the
        buddy rule's chunk sizes are measured against; ``levels``: the topology's)."""
        self.nodes: list[_Node | None] = [None] * (
            node_count if node_count is not None else 1 + max((r.index for r in records), default=-1)
        )
        self.by_id: dict[str, _Node] = {}
        self.levels = levels
        types = list(largest)
        for rec in records:
            node = _Node(rec)
            self.nodes[rec.index] = node
            self.by_id[rec.id] = node
        self.buckets: dict[str, dict[int, list[int]]] = {t: defaultdict(list) for t in types}
        self.total: dict[str, int] = dict.fromkeys(types, 0)
        self.partial: dict[str, list[tuple[int, int, int]]] = {t: [] for t in types}
        for node in self.by_id.values():
            self.buckets[node.type][len(node.free)].append(node.index)
            self.total[node.type] += len(node.free)
            for g, free in node.shares.items():
                if free > 0:
                    self.partial[node.type].append((free, node.index, g))
        for t in types:
            self.partial[t].sort()
        self.frag = {t: _frag_table(n) for t, n in largest.items()}
        self._order: dict[tuple[str, int], list[int]] = {}
        """(type, piece) -> the free counts a piece goes to, in the rule's order (by how much it
        breaks the node's chunks, then fewest free): static, so sorted once."""
        self._refs: dict[tuple[str, int], GpuRef] = refs if refs is not None else {}
        """One ``GpuRef`` per GPU handed out (built once: placements are read, never changed;
        ``refs``: a cache shared with other pools of the same nodes)."""
        self.avoid: set[int] = set()
        """Node indices pieces go to only when no other node holds them."""
        self.prefer: set[int] = set()
        """Node indices whole-GPU pieces go to first when one holds them (the nodes a plan's
        stops free: its starts take those GPUs before others, so no stop leaves GPUs idle that
        a start of the plan took elsewhere)."""
        self.best_fit = False
        """Lucid's ``ConsolidatePlacement`` instead of the buddy rule (an option of the
        simulator's baselines, for replaying Lucid's setting): the piece of a job of one node
        goes to the node with the fewest free GPUs that holds it, each piece of a job of several
        nodes to the node with the most free GPUs (whole nodes, then the rest on the freest node
        left); ties in snapshot order."""

    @classmethod
    def of(
        cls,
        state: ClusterState,
        stopped: frozenset[str] | set[str] = frozenset(),
        released: frozenset[GpuKey] = frozenset(),
        kept: Mapping[str, list[GpuRef]] | None = None,
    ) -> NodePool:
        """The pool of ``state`` (see :func:`node_records`)."""
        return cls(
            node_records(state, stopped, released, kept), state.largest_node, state.topology_levels,
            len(state.snapshot.nodes),
        )

    # ---------------------------------------------------------------- bookkeeping
    def _move(self, node: _Node, before: int) -> None:
        ids = self.buckets[node.type][before]
        del ids[bisect.bisect_left(ids, node.index)]
        bisect.insort(self.buckets[node.type][len(node.free)], node.index)

    def _take(self, node: _Node, k: int, shape: Shape | None) -> list[GpuRef]:
        return [self._ref(node.id, g) for g in self._take_idx(node, k, shape)]

    def _take_idx(self, node: _Node, k: int, shape: Shape | None) -> list[int]:
        """:meth:`_take` as GPU indices (no ``GpuRef`` built: :meth:`fits` gives them back)."""
        before = len(node.free)
        taken, node.free = node.free[:k], node.free[k:]
        self._move(node, before)
        self.total[node.type] -= k
        if shape is not None:
            self._charge(node, shape, 1)
        return taken

    def _give_idx(self, taken: list[tuple[_Node, list[int]]], shape: Shape) -> None:
        """Give back whole GPUs taken by :meth:`_take_idx` (as :meth:`release` does)."""
        for node, gpus in taken:
            self._give(node, gpus)
            self._charge(node, shape, -1)

    def _ref(self, nid: str, g: int) -> GpuRef:
        ref = self._refs.get((nid, g))
        if ref is None:
            ref = self._refs[(nid, g)] = GpuRef.model_construct(node=nid, gpu=g)
        return ref

    def _charge(self, node: _Node, shape: Shape, sign: int) -> None:
        if node.cpu is not None:
            node.cpu -= sign * shape.cpu_milli
        if node.mem is not None:
            node.mem -= sign * shape.memory_mib

    def all_free(self, refs: Sequence[GpuRef]) -> bool:
        """Whether every GPU of ``refs`` is fully free (so :meth:`take` may take them)."""
        return all(ref.gpu in self.by_id[ref.node].free for ref in refs)

    def can_take(self, refs: Sequence[GpuRef], shape: Shape | None = None) -> bool:
        """Whether :meth:`take` of ``refs`` with ``shape`` fits: every GPU fully free and, with a
        shape, its CPU and host memory free on each of its nodes (a stopped job kept running
        again needs both back: the starts may have taken a node's CPU or memory without its
        GPUs)."""
        if not self.all_free(refs):
            return False
        return shape is None or all(self.by_id[nid].hosts(shape) for nid in {r.node for r in refs})

    def charge_guest(self, refs: Sequence[GpuRef], shape: Shape) -> bool:
        """Charge an MPS guest's CPU and host memory (``shape``'s, per node) on the nodes of its
        host's GPUs ``refs``, which it shares and does not take; ``False``, with nothing
        charged, when one of those nodes does not have them free."""
        nodes = [self.by_id[nid] for nid in dict.fromkeys(r.node for r in refs)]
        if not all(node.hosts(shape) for node in nodes):
            return False
        for node in nodes:
            self._charge(node, shape, 1)
        return True

    def take(self, refs: Sequence[GpuRef], shape: Shape | None = None) -> None:
        """Mark the GPUs of a placement made elsewhere as used (and, with its ``shape``, the CPU
        and memory on each of its nodes and a share's thousandths): a part's start in the
        partition merge. Raises ``AssertionError`` for a GPU that is not free."""
        nodes: dict[str, list[int]] = defaultdict(list)
        for ref in refs:
            nodes[ref.node].append(ref.gpu)
        for nid, gpus in nodes.items():
            node = self.by_id[nid]
            if shape is not None and shape.fractional:
                g = gpus[0]
                if g in node.shares:
                    free = node.shares[g]
                    self._unshare(node, g, free)
                    self._share(node, g, free - shape.milli)
                else:
                    self._take_these(node, [g])
                    self._share(node, g, MILLI_PER_GPU - shape.milli)
            else:
                self._take_these(node, gpus)
            if shape is not None:
                self._charge(node, shape, 1)

    def _take_these(self, node: _Node, gpus: list[int]) -> None:
        before = len(node.free)
        want = set(gpus)
        assert want <= set(node.free), f"GPUs {sorted(want - set(node.free))} of {node.id} are not free"
        node.free = [g for g in node.free if g not in want]
        self._move(node, before)
        self.total[node.type] -= len(gpus)

    def release(self, refs: Sequence[GpuRef], shape: Shape | None = None) -> None:
        """Give back the GPUs of a placement (and, with its ``shape``, the CPU and memory on each
        of its nodes and a share's thousandths)."""
        nodes: dict[str, list[int]] = defaultdict(list)
        for ref in refs:
            nodes[ref.node].append(ref.gpu)
        for nid, gpus in nodes.items():
            node = self.by_id[nid]
            if shape is not None and shape.fractional:
                g = gpus[0]
                free = node.shares[g]
                self._unshare(node, g, free)
                if free + shape.milli >= MILLI_PER_GPU:
                    del node.shares[g]
                    self._give(node, [g])
                else:
                    self._share(node, g, free + shape.milli)
            else:
                self._give(node, gpus)
            if shape is not None:
                self._charge(node, shape, -1)

    def _give(self, node: _Node, gpus: list[int]) -> None:
        before = len(node.free)
        node.free = sorted(node.free + gpus)
        self._move(node, before)
        self.total[node.type] += len(gpus)

    def _share(self, node: _Node, g: int, free: int) -> None:
        node.shares[g] = free
        if free > 0:
            bisect.insort(self.partial[node.type], (free, node.index, g))

    def _unshare(self, node: _Node, g: int, free: int) -> None:
        lst = self.partial[node.type]
        k = bisect.bisect_left(lst, (free, node.index, g))
        if k < len(lst) and lst[k] == (free, node.index, g):
            del lst[k]

    # ---------------------------------------------------------------- the rule
    def _best(
        self, t: str, p: int, shape: Shape, skip: set[int], inside: tuple[int, tuple[str, ...]] | None,
        most_free: bool = False,
    ) -> _Node | None:
        """The node a piece of ``p`` whole GPUs goes to (see the class docstring): one of
        :attr:`prefer` when one holds it, else any (``most_free``: the freest node first, see
        :attr:`best_fit`)."""
        if self.prefer:
            node = self._best_of(t, p, shape, skip, inside, self.prefer, most_free)
            if node is not None:
                return node
        if self.avoid:
            node = self._best_of(t, p, shape, skip | self.avoid, inside, None, most_free)
            if node is not None:
                return node
        return self._best_of(t, p, shape, skip, inside, None, most_free)

    def _best_of(
        self, t: str, p: int, shape: Shape, skip: set[int], inside: tuple[int, tuple[str, ...]] | None,
        among: set[int] | None, most_free: bool = False,
    ) -> _Node | None:
        buckets = self.buckets[t]
        if self.best_fit:  # free count only: fewest first, or most first for most_free
            counts = sorted((c for c, ids in buckets.items() if c >= p and ids), reverse=most_free)
        else:
            counts = self._counts(t, p)
        tight = shape.memory_mib > 0 or shape.cpu_milli > 0
        for c in counts:
            ids = buckets.get(c)
            if not ids:
                continue
            fit: _Node | None = None
            for i in ids:
                if i in skip or (among is not None and i not in among):
                    continue
                node = self.nodes[i]
                assert node is not None
                if inside is not None and node.domains[inside[0]] != inside[1]:
                    continue
                if node.hosts(shape):
                    if not tight:
                        return node
                    # among nodes alike in GPUs, the one with the least memory, then CPUs,
                    # left: the roomier nodes stay for the needier jobs
                    if fit is None or (node.mem or 0, node.cpu or 0, node.index) < (
                        fit.mem or 0, fit.cpu or 0, fit.index
                    ):
                        fit = node
            if fit is not None:
                return fit
        return None

    def _counts(self, t: str, p: int) -> list[int]:
        """Free counts that hold a piece of ``p``, in the buddy rule's order (by how much the
        piece breaks the node's chunks, then the count); counts beyond the largest node's (a
        node larger than the type's largest cannot be) come last by count."""
        got = self._order.get((t, p))
        if got is None:
            table = self.frag[t]
            top = max([len(table) - 1, *self.buckets[t].keys()])
            got = self._order[(t, p)] = [
                c for _, c in sorted(
                    (table[c][p] if c < len(table) and p < len(table[c]) else 0, c)
                    for c in range(p, top + 1)
                )
            ]
        return got

    def _pieces(
        self, t: str, shape: Shape, inside: tuple[int, tuple[str, ...]] | None
    ) -> list[GpuRef] | None:
        got = self._pieces_idx(t, shape, inside)
        if got is None:
            return None
        return [self._ref(node.id, g) for node, gpus in got for g in gpus]

    def _pieces_idx(
        self, t: str, shape: Shape, inside: tuple[int, tuple[str, ...]] | None
    ) -> list[tuple[_Node, list[int]]] | None:
        out: list[tuple[_Node, list[int]]] = []
        used: set[int] = set()
        for p in shape.pieces:
            node = self._best(t, p, shape, used, inside, self.best_fit and len(shape.pieces) > 1)
            if node is None:
                self._give_idx(out, shape)
                return None
            used.add(node.index)
            out.append((node, self._take_idx(node, p, shape)))
        return out

    def _domains(self, t: str, level: int, least: int = 1) -> list[tuple[int, tuple[str, ...]]]:
        """The domains of ``level`` that have at least ``least`` free GPUs of type ``t``, fewest
        free GPUs first."""
        free: dict[tuple[str, ...], int] = defaultdict(int)
        for c, ids in self.buckets[t].items():
            if c == 0:
                continue
            for i in ids:
                node = self.nodes[i]
                assert node is not None
                free[node.domains[level]] += c
        return [(level, d) for d in sorted(free, key=lambda d: (free[d], d)) if free[d] >= least]

    def place(self, t: str, shape: Shape) -> list[GpuRef] | None:
        """GPUs of type ``t`` for one job of ``shape``, taken now; ``None`` (nothing taken) when
        the free nodes do not hold it."""
        if shape.fractional:
            return self._place_share(t, shape)
        if shape.spread:
            return self._place_spread(t, shape)
        got = self._place_pieces(t, shape)
        if got is None:
            return None
        return [self._ref(node.id, g) for node, gpus in got for g in gpus]

    def _place_pieces(self, t: str, shape: Shape) -> list[tuple[_Node, list[int]]] | None:
        """:meth:`place` of a job of whole GPUs in pieces on nodes, as (node, GPU indices)."""
        if self.total[t] < shape.gpus:
            return None
        if shape.level >= 0 and self.levels:
            # a domain with fewer free GPUs than the job asks holds none of its placements
            for inside in self._domains(t, shape.level, shape.gpus):
                got = self._pieces_idx(t, shape, inside)
                if got is not None:
                    return got
            if shape.required:
                return None
        return self._pieces_idx(t, shape, None)

    def fits(self, t: str, shape: Shape) -> bool:
        """Whether :meth:`place` would place it (nothing is taken)."""
        if shape.fractional or shape.spread:
            refs = self.place(t, shape)
            if refs is None:
                return False
            self.release(refs, shape)
            return True
        got = self._place_pieces(t, shape)
        if got is None:
            return False
        self._give_idx(got, shape)
        return True

    def _place_spread(self, t: str, shape: Shape) -> list[GpuRef] | None:
        g = shape.gpus
        if self.total[t] < g:
            return None
        if g <= max((c for c, ids in self.buckets[t].items() if ids), default=0):
            node = self._best(t, g, shape, set(), None)
            if node is not None:
                return self._take(node, g, shape)
        out: list[tuple[_Node, list[GpuRef]]] = []
        need = g
        for c in sorted((c for c, ids in self.buckets[t].items() if c > 0 and ids), reverse=True):
            for i in list(self.buckets[t][c]):
                node = self.nodes[i]
                assert node is not None
                if not node.hosts(shape):
                    continue
                k = min(need, len(node.free))
                out.append((node, self._take(node, k, shape)))
                need -= k
                if need == 0:
                    return [r for _, refs in out for r in refs]
        for _, refs in out:
            self.release(refs, shape)
        return None

    def _place_share(self, t: str, shape: Shape) -> list[GpuRef] | None:
        lst = self.partial[t]
        for k in range(bisect.bisect_left(lst, (shape.milli, -1, -1)), len(lst)):
            free, i, g = lst[k]
            node = self.nodes[i]
            assert node is not None
            if node.hosts(shape):
                del lst[k]
                self._share(node, g, free - shape.milli)
                self._charge(node, shape, 1)
                return [self._ref(node.id, g)]
        node = self._best(t, 1, shape, set(), None)
        if node is None:
            return None
        refs = self._take(node, 1, shape)
        self._share(node, refs[0].gpu, MILLI_PER_GPU - shape.milli)
        return refs

    def take_on(self, t: str, node_id: str, gpus: int) -> list[GpuRef]:
        """Up to ``gpus`` free GPUs of one node (lowest indices first): an elastic job's growth."""
        node = self.by_id.get(node_id)
        if node is None or node.type != t:
            return []
        k = min(gpus, len(node.free))
        return self._take(node, k, None) if k > 0 else []

    def take_any(self, t: str, gpus: int) -> list[GpuRef]:
        """``gpus`` free GPUs of type ``t`` anywhere (a spread job's rule, no CPU or memory).

        Raises ``AssertionError`` when there are not that many: the caller counted them."""
        got = self._place_spread(t, Shape(gpus, ()))
        if got is None:
            raise AssertionError(f"placement of {gpus} GPUs failed: capacity row violated")
        return got


def shrink_keeps(alloc: Sequence[GpuRef], size: int) -> list[GpuRef]:
    """The GPUs a job on ``alloc`` keeps when it shrinks to ``size``: those on the nodes where it
    holds most (then node id, then GPU index), sorted by node and GPU."""
    per_node: dict[str, int] = defaultdict(int)
    for ref in alloc:
        per_node[ref.node] += 1
    keep = sorted(alloc, key=lambda x: (-per_node[x.node], x.node, x.gpu))[:size]
    return sorted(keep, key=lambda x: (x.node, x.gpu))


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

"""The one placement rule (optsched.engine.ledger.NodePool) and the chunk rows it makes exact
(optsched.engine.chunks): checked against brute force on random small clusters."""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest

from optsched.engine.chunks import carry, chunks_of, level_counts, levels_for
from optsched.engine.ledger import NodePool
from optsched.engine.shape import Shape
from optsched.engine.state import load_state
from optsched.testing import cluster, running


def _state(rng: random.Random, nodes: int, size: int = 8, **node_extra: Any) -> Any:
    s = cluster(nodes={f"n{k}": ("A100", size) for k in range(nodes)}, tenants={"a": {"A100": nodes * size}})
    jobs = []
    for k in range(nodes):
        s["nodes"][k].update(node_extra)
        used = rng.randint(0, size)
        if used:
            jobs.append(running(f"r{k}", "a", [(f"n{k}", g) for g in range(used)], start_s=1.0))
    s["jobs"] = jobs
    return load_state(s)


def _fits_one_job(free: list[int], pieces: tuple[int, ...]) -> bool:
    """Brute force: can one job's ``pieces`` go on distinct nodes with ``free`` GPUs?"""
    return any(
        all(free[i] >= p for i, p in zip(nodes, pieces, strict=True))
        for nodes in itertools.permutations(range(len(free)), len(pieces))
    )


def _fits(free: list[int], pieces: list[int]) -> bool:
    """Brute force: can ``pieces`` (one node each) be packed into nodes with ``free`` GPUs?"""
    pieces = sorted(pieces, reverse=True)

    def go(k: int, left: list[int]) -> bool:
        if k == len(pieces):
            return True
        seen: set[int] = set()
        for i, f in enumerate(left):
            if f >= pieces[k] and f not in seen:
                seen.add(f)
                left[i] -= pieces[k]
                if go(k + 1, left):
                    return True
                left[i] += pieces[k]
        return False

    return go(0, list(free))


@pytest.mark.parametrize("seed", range(60))
def test_chunk_rows_are_exact_for_power_of_two_pieces(seed: int) -> None:
    """The chunk rows hold iff the pieces fit the nodes (brute force), and then the placer
    places them all, largest first."""
    rng = random.Random(seed)
    free = [rng.randint(0, 8) for _ in range(rng.randint(1, 6))]
    pieces = [rng.choice([1, 1, 2, 4, 8]) for _ in range(rng.randint(1, 7))]
    levels = levels_for(8)
    avail = [0] * len(levels)
    for f in free:
        for ell, c in enumerate(chunks_of(f, levels)):
            avail[ell] += c
    demand = [0] * len(levels)
    for piece in pieces:
        for ell, c in enumerate(level_counts(Shape(piece, (piece,)), levels)):
            demand[ell] += c
    rows = carry(avail, demand)[0]
    assert rows == _fits(free, pieces), (free, pieces)


@pytest.mark.parametrize("seed", range(30))
def test_non_power_of_two_pieces_never_fit_where_the_rows_refuse(seed: int) -> None:
    """For other piece sizes the rows are a relaxation: whatever fits satisfies them."""
    rng = random.Random(100 + seed)
    free = [rng.randint(0, 8) for _ in range(rng.randint(1, 5))]
    pieces = [rng.randint(1, 8) for _ in range(rng.randint(1, 5))]
    levels = levels_for(8)
    avail = [0] * len(levels)
    for f in free:
        for ell, c in enumerate(chunks_of(f, levels)):
            avail[ell] += c
    demand = [0] * len(levels)
    for piece in pieces:
        for ell, c in enumerate(level_counts(Shape(piece, (piece,)), levels)):
            demand[ell] += c
    if _fits(free, pieces):
        assert carry(avail, demand)[0], (free, pieces)


@pytest.mark.parametrize("seed", range(40))
def test_placer_takes_each_piece_on_its_own_node(seed: int) -> None:
    rng = random.Random(seed)
    state = _state(rng, rng.randint(2, 8))
    pool = NodePool.of(state)
    free = {n.id: len(n.free) for n in pool.by_id.values()}
    for _ in range(6):
        pieces = tuple(sorted((rng.choice([1, 2, 4, 8]) for _ in range(rng.randint(1, 3))), reverse=True))
        shape = Shape(sum(pieces), pieces)
        expect = _fits_one_job(list(free.values()), pieces)
        got = pool.place("A100", shape)
        assert (got is not None) == expect
        if got is None:
            continue
        per_node: dict[str, int] = {}
        for ref in got:
            per_node[ref.node] = per_node.get(ref.node, 0) + 1
        assert sorted(per_node.values(), reverse=True) == list(pieces)
        for nid, k in per_node.items():
            assert free[nid] >= k
            free[nid] -= k
        held = {(r.node, r.gpu) for r in got}
        assert len(held) == len(got)


def test_single_piece_follows_the_buddy_rule() -> None:
    """A 2-GPU piece takes the node with 6 free (leaving a whole 4-chunk) before the one with 5
    (which would leave 3, breaking the 4-chunk), although 5 is the tighter fit."""
    s = cluster(nodes={"n5": ("A100", 8), "n6": ("A100", 8)}, tenants={"a": {"A100": 16}})
    s["jobs"] = [
        running("x", "a", [("n5", g) for g in range(3)], start_s=1.0),
        running("y", "a", [("n6", g) for g in range(2)], start_s=1.0),
    ]
    pool = NodePool.of(load_state(s))
    got = pool.place("A100", Shape(2, (2,)))
    assert got is not None and {r.node for r in got} == {"n6"}
    got = pool.place("A100", Shape(1, (1,)))  # now n5 has 5 (4 + 1), n6 has 4: the 1-chunk of n5
    assert got is not None and {r.node for r in got} == {"n5"}


def test_best_fit_takes_the_fewest_free_gpus_then_node_order() -> None:
    """``best_fit`` (Lucid's ConsolidatePlacement): the 2-GPU piece of the buddy-rule case goes
    to the node with 5 free, the tightest fit; among equally free nodes the first in order."""
    s = cluster(nodes={"n5": ("A100", 8), "n6": ("A100", 8), "m5": ("A100", 8)},
                tenants={"a": {"A100": 24}})
    s["jobs"] = [
        running("x", "a", [("n5", g) for g in range(3)], start_s=1.0),
        running("y", "a", [("n6", g) for g in range(2)], start_s=1.0),
        running("z", "a", [("m5", g) for g in range(3)], start_s=1.0),
    ]
    pool = NodePool.of(load_state(s))
    pool.best_fit = True
    got = pool.place("A100", Shape(2, (2,)))
    assert got is not None and {r.node for r in got} == {"n5"}
    got = pool.place("A100", Shape(4, (4,)))  # n5 has 3 now: m5 (5 free) before n6 (6)
    assert got is not None and {r.node for r in got} == {"m5"}
    got = pool.place("A100", Shape(6, (6,)))
    assert got is not None and {r.node for r in got} == {"n6"}


def test_best_fit_puts_the_rest_of_a_multi_node_job_on_the_freest_node_left() -> None:
    """Lucid's rule for more than one node: whole nodes first, then the rest on the node with the
    most free GPUs left (here a whole free node, not the 5-free node the buddy rule takes)."""
    s = cluster(nodes={f"n{k}": ("A100", 8) for k in range(4)}, tenants={"a": {"A100": 32}})
    s["jobs"] = [running("x", "a", [("n0", g) for g in range(3)], start_s=1.0),
                 running("y", "a", [("n3", 0)], start_s=1.0)]
    for best_fit, rest in ((False, "n0"), (True, "n2")):
        pool = NodePool.of(load_state(s))
        pool.best_fit = best_fit
        got = pool.place("A100", Shape(12, (8, 4)))
        assert got is not None
        assert [r.node for r in got] == ["n1"] * 8 + [rest] * 4


def test_cpu_and_memory_keep_pieces_off_a_node() -> None:
    s = cluster(nodes={"n0": ("A100", 8), "n1": ("A100", 8)}, tenants={"a": {"A100": 16}})
    s["nodes"][0].update(cpu_milli=4000, memory_mib=1000)
    s["nodes"][1].update(cpu_milli=64000, memory_mib=1000)
    pool = NodePool.of(load_state(s))
    got = pool.place("A100", Shape(4, (4,), cpu_milli=8000))
    assert got is not None and {r.node for r in got} == {"n1"}
    assert pool.place("A100", Shape(4, (4,), cpu_milli=1000, memory_mib=2000)) is None
    assert pool.fits("A100", Shape(4, (4,), cpu_milli=56000))
    assert not pool.fits("A100", Shape(4, (4,), cpu_milli=56001))


def test_required_topology_stays_in_one_domain() -> None:
    s = cluster(nodes={f"n{k}": ("A100", 8) for k in range(4)}, tenants={"a": {"A100": 32}})
    s["topology"] = {"levels": ["rack"]}
    for k, n in enumerate(s["nodes"]):
        n["topology"] = {"rack": f"r{k % 2}"}  # n0, n2 in r0; n1, n3 in r1
    s["jobs"] = [running("x", "a", [("n2", 0)], start_s=1.0)]  # r0 has one whole node left
    pool = NodePool.of(load_state(s))
    got = pool.place("A100", Shape(16, (8, 8), level=0, required=True))
    assert got is not None and {r.node for r in got} == {"n1", "n3"}
    assert pool.place("A100", Shape(16, (8, 8), level=0, required=True)) is None
    got = pool.place("A100", Shape(8, (8,)))
    assert got is not None and {r.node for r in got} == {"n0"}


def test_required_topology_places_exactly_when_some_domain_holds_the_job() -> None:
    """Against brute force on random clusters of three racks: a job whose pieces must share a
    rack is placed iff one rack's free GPUs hold its pieces on distinct nodes, and then inside
    that one rack (domains with fewer free GPUs than the job asks are not tried at all)."""
    rng = random.Random(11)
    placed = 0
    for _ in range(150):
        n = rng.randint(3, 7)
        state = _state(rng, n)
        s = state.snapshot.model_dump(mode="json", exclude_none=True)
        s["topology"] = {"levels": ["rack"]}
        racks = [f"r{rng.randrange(3)}" for _ in range(n)]
        for node, rack in zip(s["nodes"], racks, strict=True):
            node["topology"] = {"rack": rack}
        state = load_state(s)
        free = {nd.id: nd.gpus for nd in state.snapshot.nodes}
        for j in state.snapshot.jobs:
            for ref in j.allocation or ():
                free[ref.node] -= 1
        pieces = tuple(sorted((rng.choice((1, 2, 4, 8)) for _ in range(rng.randint(2, 3))), reverse=True))
        ids = [nd.id for nd in state.snapshot.nodes]
        in_rack = {rack: [free[i] for i, r in zip(ids, racks, strict=True) if r == rack] for rack in racks}
        want = any(_fits_one_job(frees, pieces) for frees in in_rack.values())
        got = NodePool.of(state).place("A100", Shape(sum(pieces), pieces, level=0, required=True))
        assert (got is not None) == want, (free, racks, pieces)
        placed += want
        if got is not None:
            assert len({racks[int(r.node[1:])] for r in got}) == 1
    assert 30 <= placed <= 120  # both outcomes are common


def test_shares_pack_tightest_gpu_first_and_release() -> None:
    s = cluster(nodes={"n0": ("A100", 2)}, tenants={"a": {"A100": 2}})
    s["jobs"] = [{**running("x", "a", [("n0", 0)], start_s=1.0), "gpu_milli": 700}]
    pool = NodePool.of(load_state(s))
    half = Shape(1, (1,), milli=300)
    got = pool.place("A100", half)
    assert got is not None and got[0].gpu == 0  # the 300 left on GPU 0 fits it exactly
    got2 = pool.place("A100", half)
    assert got2 is not None and got2[0].gpu == 1  # GPU 0 is full: a fresh GPU opens
    assert pool.place("A100", Shape(1, (1,))) is None  # no whole GPU is left
    pool.release(got2, half)
    assert pool.fits("A100", Shape(1, (1,)))


def test_spread_takes_one_node_when_one_holds_it() -> None:
    rng = random.Random(3)
    for _ in range(20):
        state = _state(rng, 5)
        pool = NodePool.of(state)
        biggest = max(len(n.free) for n in pool.by_id.values())
        total = sum(len(n.free) for n in pool.by_id.values())
        for g in itertools.islice(itertools.count(1), 12):
            got = NodePool.of(state).place("A100", Shape(g, ()))
            if g > total:
                assert got is None
            else:
                assert got is not None and len(got) == g
                if g <= biggest:
                    assert len({r.node for r in got}) == 1


def test_a_piece_takes_the_node_with_the_least_memory_left_that_holds_it() -> None:
    """Among nodes alike in free GPUs, a piece asking host memory takes the one with the least
    memory (then CPUs) left that holds it, so the roomier node stays for a needier job: the
    60 GiB job takes n1 (100 GiB free), not n0 (400 GiB, first in order), and the 300 GiB job
    still fits on n0. A job asking no memory or CPUs keeps node order."""
    s = cluster(nodes={"n0": ("A100", 8), "n1": ("A100", 8)}, tenants={"a": {"A100": 16}})
    s["nodes"][0]["memory_mib"] = 400 * 1024
    s["nodes"][1]["memory_mib"] = 100 * 1024
    s["jobs"] = [running(f"r{k}", "a", [(f"n{k}", g) for g in range(6)], start_s=1.0) for k in range(2)]
    pool = NodePool.of(load_state(s))
    got = pool.place("A100", Shape(1, (1,), memory_mib=60 * 1024))
    assert got is not None and {r.node for r in got} == {"n1"}
    got = pool.place("A100", Shape(1, (1,), memory_mib=300 * 1024))
    assert got is not None and {r.node for r in got} == {"n0"}
    got = pool.place("A100", Shape(1, (1,)))
    assert got is not None and {r.node for r in got} == {"n0"}

"""The bucketed placer of ``to_decision`` gives the GPUs the plain node-scanning rule gives."""

from __future__ import annotations

import random
from collections import defaultdict

import pytest

from optsched.engine.ledger import Placer
from optsched.schema.snapshot import GpuRef


def _place(free: dict[str, list[int]], nodes: list[str], gpus: int) -> list[GpuRef]:
    """The reference rule, scanning every node: best fit on one node; else take from the
    nodes with most free GPUs."""
    fits = [n for n in nodes if len(free[n]) >= gpus]
    if fits:
        node = min(fits, key=lambda n: (len(free[n]), n))
        taken, free[node] = free[node][:gpus], free[node][gpus:]
        return [GpuRef(node=node, gpu=g) for g in taken]
    out: list[GpuRef] = []
    for node in sorted(nodes, key=lambda n: (-len(free[n]), n)):
        if len(out) == gpus:
            break
        take = min(gpus - len(out), len(free[node]))
        out += [GpuRef(node=node, gpu=g) for g in free[node][:take]]
        free[node] = free[node][take:]
    if len(out) != gpus:
        raise AssertionError(f"placement of {gpus} GPUs failed: capacity row violated")
    return out


def _cluster(rng: random.Random) -> tuple[dict[str, list[int]], dict[str, list[str]]]:
    free: dict[str, list[int]] = defaultdict(list)
    nodes_by_type: dict[str, list[str]] = defaultdict(list)
    for t in ("A100", "V100"):
        ids = [f"{t.lower()}-{i:03d}" for i in range(rng.randint(1, 40))]
        rng.shuffle(ids)  # snapshot order is not id order
        for node in ids:
            nodes_by_type[t].append(node)
            size = rng.choice([1, 2, 4, 8, 16])
            gpus = [g for g in range(size) if rng.random() < 0.6]
            if gpus:
                free[node] = gpus
    return free, nodes_by_type


@pytest.mark.parametrize("seed", range(40))
def test_placer_matches_place(seed: int) -> None:
    rng = random.Random(seed)
    free, nodes_by_type = _cluster(rng)
    ref_free = defaultdict(list, {n: list(g) for n, g in free.items()})
    placer = Placer(free, nodes_by_type)
    for _ in range(200):
        t = rng.choice(["A100", "V100", "H100"])
        gpus = rng.choice([1, 1, 2, 3, 4, 8, 12])
        try:
            want = _place(ref_free, nodes_by_type.get(t, []), gpus)
        except AssertionError:
            with pytest.raises(AssertionError):
                placer.place(t, gpus)
            return  # a failed placement leaves _place's free lists half taken: stop here
        assert placer.place(t, gpus) == want
        assert {n: g for n, g in placer.free.items() if g} == {n: g for n, g in ref_free.items() if g}

"""The bucketed placer of ``to_decision`` gives the GPUs the node-scanning ``_place`` gives."""

from __future__ import annotations

import random
from collections import defaultdict

import pytest

from optsched.engine.decide import _place, _Placer


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
    placer = _Placer(free, nodes_by_type)
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

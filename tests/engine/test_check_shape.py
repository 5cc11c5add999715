"""The checker's node-shape rules: invariant 10, fractional shares (1, 4) and shape-aware work
conservation (8). Each hand-built decision asserts the exact (invariant, ids) the checker reports.
"""

from __future__ import annotations

from typing import Any

import pytest

from optsched.engine.check import check_decision
from optsched.engine.state import load_state
from optsched.schema.decision import Decision
from optsched.testing import cluster, pending, running


def snap(*jobs: dict[str, Any], quota: int = 16, **node_extra: Any) -> dict[str, Any]:
    """Two 8-GPU A100 nodes (non-MPS) in racks r0 and r1, plus a third 8-GPU node in r0."""
    s = cluster(
        types={"A100": (80.0, False)},
        nodes={"n0": ("A100", 8), "n1": ("A100", 8), "n2": ("A100", 8)},
        tenants={"a": {"A100": quota}, "b": {"A100": 16}},
    )
    s["topology"] = {"levels": ["rack"]}
    for n, rack in zip(s["nodes"], ("r0", "r1", "r0"), strict=True):
        n["topology"] = {"rack": rack}
        n.update(node_extra)
    s["jobs"] = list(jobs)
    return s


def decide(s: dict[str, Any], starts: dict[str, list[tuple[str, int]]]) -> list[tuple[int, tuple[str, ...]]]:
    queued = [j["id"] for j in s["jobs"] if j["state"] == "pending" and j["id"] not in starts]
    dec = {
        "format": 1,
        "now": s["now"],
        "status": "optimal",
        "solver": {"backend": "test", "seconds": 0.0},
        "start": [
            {"job": j, "allocation": [{"node": n, "gpu": g} for n, g in refs], "on_loan": False}
            for j, refs in starts.items()
        ],
        "preempt": [],
        "loans": [],
        "queue": queued,
        "queue_reasons": {j: "lower_priority" for j in queued},
    }
    return [(v.invariant, v.ids) for v in check_decision(load_state(s), Decision.model_validate(dec))]


def on(node: str, *gpus: int) -> list[tuple[str, int]]:
    return [(node, g) for g in gpus]


def test_a_one_node_job_split_over_two_nodes_breaks_invariant_10() -> None:
    s = snap(pending("p", "a", 4, submit_s=0.0))
    assert decide(s, {"p": on("n0", 0, 1, 2, 3)}) == []
    assert decide(s, {"p": on("n0", 0, 1) + on("n1", 0, 1)}) == [(10, ("p",))]


@pytest.mark.parametrize(
    ("alloc", "ok"),
    [
        (on("n0", *range(8)) + on("n1", 0, 1, 2, 3), True),  # 8 + 4: the default shape
        (on("n0", *range(6)) + on("n1", *range(6)), False),  # 6 + 6
        (on("n0", *range(8)) + on("n1", 0, 1) + on("n2", 0, 1), False),  # 8 + 2 + 2
    ],
)
def test_a_gang_larger_than_a_node_takes_whole_nodes_and_one_for_the_rest(
    alloc: list[tuple[str, int]], ok: bool
) -> None:
    s = snap(pending("p", "a", 12, submit_s=0.0))
    assert decide(s, {"p": alloc}) == ([] if ok else [(10, ("p",))])


def test_gpus_per_node_and_spread() -> None:
    s = snap(
        pending("p", "a", 4, submit_s=0.0, gpus_per_node=2), pending("q", "a", 3, submit_s=0.0, spread=True)
    )
    starts = {"p": on("n0", 0, 1) + on("n1", 0, 1), "q": on("n0", 2) + on("n2", 0, 1)}
    assert decide(s, starts) == []
    assert decide(s, {**starts, "p": on("n0", 0, 1, 3, 4)}) == [(10, ("p",))]


def test_a_required_rack_holds_every_node_of_the_job() -> None:
    job = pending("p", "a", 16, submit_s=0.0, topology={"level": "rack", "mode": "required"})
    s = snap(job)
    assert decide(s, {"p": on("n0", *range(8)) + on("n2", *range(8))}) == []
    assert decide(s, {"p": on("n0", *range(8)) + on("n1", *range(8))}) == [(10, ("p",))]
    s["jobs"][0]["topology"]["mode"] = "preferred"
    assert decide(s, {"p": on("n0", *range(8)) + on("n1", *range(8))}) == []


def test_host_cpu_and_memory_on_a_node_that_gets_a_start() -> None:
    s = snap(
        running("r", "b", on("n0", 0, 1), start_s=0.0, cpu_milli=20_000, memory_mib=100_000),
        pending("p", "a", 2, submit_s=0.0, cpu_milli=16_000, memory_mib=100_000),
        cpu_milli=32_000,
        memory_mib=400_000,
    )
    assert decide(s, {"p": on("n1", 0, 1)}) == []
    assert decide(s, {"p": on("n0", 2, 3)}) == [(10, ("p", "r"))]  # 36,000 CPU thousandths of 32,000
    s["jobs"][1]["cpu_milli"] = 8_000
    s["jobs"][1]["memory_mib"] = 350_000
    assert decide(s, {"p": on("n0", 2, 3)}) == [(10, ("p", "r"))]  # 450,000 MiB of 400,000


def frac(job_id: str, tenant: str, milli: int) -> dict[str, Any]:
    return pending(job_id, tenant, 1, submit_s=0.0, gpu_milli=milli)


def test_fractional_shares_sum_to_one_gpu_and_never_share_with_a_whole_job() -> None:
    s = snap(
        frac("f1", "a", 500), frac("f2", "a", 500), frac("f3", "b", 300), pending("w", "b", 1, submit_s=0.0)
    )
    base = {"f1": on("n0", 0), "f2": on("n0", 0), "f3": on("n0", 1), "w": on("n0", 2)}
    assert decide(s, base) == []
    assert decide(s, {**base, "f3": on("n0", 0)}) == [(1, ("f1", "f2", "f3"))]
    assert decide(s, {**base, "f3": on("n0", 2)}) == [(1, ("f3", "w"))]


def test_a_fractional_job_is_one_gpu_of_quota() -> None:
    s = snap(frac("f1", "a", 200), frac("f2", "a", 200), frac("f3", "a", 200), quota=2)
    s["tenants"][1]["lend_limit"] = {"A100": 0}  # nobody lends: the third share is over quota
    assert decide(s, {"f1": on("n0", 0), "f2": on("n0", 0)}) == []
    # its use and its starts are both 3 against a quota of 2
    assert decide(s, {"f1": on("n0", 0), "f2": on("n0", 0), "f3": on("n0", 0)}) == [(4, ("a",))] * 2


def test_work_conservation_asks_for_a_node_that_holds_the_shape() -> None:
    # 4 GPUs free on each node: an 8-GPU job cannot start, a 4-GPU job can
    s = snap(
        running("r0", "b", on("n0", 0, 1, 2, 3), start_s=0.0),
        running("r1", "b", on("n1", 0, 1, 2, 3), start_s=0.0),
        running("r2", "b", on("n2", 0, 1, 2, 3), start_s=0.0),
        pending("big", "a", 8, submit_s=0.0),
    )
    assert decide(s, {}) == []
    s["jobs"].append(pending("small", "a", 4, submit_s=0.0))
    assert decide(s, {}) == [(8, ("small",))]
    assert decide(s, {"small": on("n1", 4, 5, 6, 7)}) == []


def test_work_conservation_counts_host_resources_and_free_shares() -> None:
    s = snap(
        running("r", "b", on("n0", 0), start_s=0.0, cpu_milli=30_000),
        pending("p", "a", 1, submit_s=0.0, cpu_milli=4_000),
        cpu_milli=32_000,
    )
    for n in s["nodes"][1:]:
        n["available"] = False
    assert decide(s, {}) == []  # n0 has GPUs free but 2,000 CPU thousandths left
    s["jobs"][1]["cpu_milli"] = 2_000
    assert decide(s, {}) == [(8, ("p",))]
    # a fractional job fits the free share of a GPU others already share
    t = snap(frac("f1", "a", 600), frac("f2", "a", 400))
    for n in t["nodes"][1:]:
        n["available"] = False
    t["jobs"] += [running(f"w{g}", "b", on("n0", g), start_s=0.0) for g in range(1, 8)]
    assert decide(t, {"f1": on("n0", 0)}) == [(8, ("f2",))]
    t["jobs"][1]["gpu_milli"] = 500
    assert decide(t, {"f1": on("n0", 0)}) == []

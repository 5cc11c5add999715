"""The checker catches hand-built bad decisions, one per rule, and accepts a good one."""

from __future__ import annotations

from typing import Any

import pytest

from optsched.check import check_decision
from optsched.schema.decision import Decision
from optsched.state import load_state
from optsched.testing import cluster, pending, running


def snap() -> dict[str, Any]:
    s = cluster(
        types={"A100": (80.0, True), "V100": (32.0, False)},
        nodes={"a0": ("A100", 4), "v0": ("V100", 4), "d0": ("A100", 2)},
        tenants={"x": {"A100": 2, "V100": 2}, "y": {"A100": 2, "V100": 2}},
    )
    s["nodes"][2]["available"] = False
    s["tenants"][1]["lend_limit"] = {"A100": 1}
    s["jobs"] = [
        running("x-g", "x", [("a0", 0)], start_s=1.0, memory_gib=50.0),  # guaranteed, in quota
        running("y-be", "y", [("a0", 1)], start_s=1.0, qos="best_effort", memory_gib=20.0),
        running(
            "x-loan",
            "x",
            [("a0", 2), ("a0", 3)],
            start_s=1.0,
            qos="best_effort",
            on_loan=True,
            memory_gib=20.0,
        ),
        running("x-v", "x", [("v0", 0)], start_s=1.0, qos="best_effort", memory_gib=5.0),
        running("x-drained", "x", [("d0", 0)], start_s=1.0, qos="best_effort"),
        pending("p1", "y", 1, submit_s=100.0, qos="best_effort", memory_gib=10.0),
        pending("p2", "y", 2, submit_s=100.0, qos="best_effort", memory_gib=70.0),
        pending("p3", "x", 1, submit_s=100.0, memory_gib=10.0),
    ]
    return s


def good() -> dict[str, Any]:
    return {
        "now": 10000.0,
        "status": "feasible",
        "solver": {"backend": "test", "seconds": 0.0},
        "start": [
            {"job": "p1", "allocation": [{"node": "a0", "gpu": 1}], "colocated_with": ["y-be"]},
            {"job": "p3", "allocation": [{"node": "v0", "gpu": 1}]},
        ],
        "preempt": [{"job": "x-drained", "reason": "node_unavailable", "lost_s": 0}],
        "queue": ["p2"],
        "loans": [{"lender": "y", "borrower": "x", "gpu_type": "A100", "gpus": 1}],
    }


def violations(dec: dict[str, Any]) -> list[int]:
    return sorted({v.invariant for v in check_decision(load_state(snap()), Decision.model_validate(dec))})


def test_good_decision_passes() -> None:
    assert violations(good()) == []


def _mut(**changes: Any) -> dict[str, Any]:
    d = good()
    d.update(changes)
    return d


BAD = [
    # invariant 1: sharing
    (
        "guest on non-MPS type",
        1,
        _mut(
            start=[
                {"job": "p1", "allocation": [{"node": "v0", "gpu": 0}], "colocated_with": ["x-v"]},
                {"job": "p3", "allocation": [{"node": "v0", "gpu": 1}]},
            ]
        ),
    ),
    (
        "pair does not fit in memory",
        1,
        _mut(
            start=[
                {
                    "job": "p2",
                    "allocation": [{"node": "a0", "gpu": 0}, {"node": "a0", "gpu": 1}],
                    "colocated_with": ["x-g", "y-be"],
                },
                {"job": "p3", "allocation": [{"node": "v0", "gpu": 1}]},
            ],
            queue=["p1"],
        ),
    ),
    (
        "host not shareable",
        1,
        _mut(
            start=[
                {"job": "p1", "allocation": [{"node": "a0", "gpu": 0}], "colocated_with": ["x-g"]},
                {"job": "p3", "allocation": [{"node": "v0", "gpu": 1}]},
            ]
        ),
    ),
    # invariant 2: placement
    (
        "wrong gang size",
        2,
        _mut(
            start=[
                {"job": "p1", "allocation": [{"node": "a0", "gpu": 1}], "colocated_with": ["y-be"]},
                {"job": "p3", "allocation": [{"node": "v0", "gpu": 1}, {"node": "v0", "gpu": 2}]},
            ]
        ),
    ),
    (
        "exclusive start on a busy GPU",
        2,
        _mut(
            start=[
                {"job": "p1", "allocation": [{"node": "a0", "gpu": 1}], "colocated_with": ["y-be"]},
                {"job": "p3", "allocation": [{"node": "v0", "gpu": 0}]},
            ]
        ),
    ),
    (
        "start on a drained node",
        2,
        _mut(
            start=[
                {"job": "p1", "allocation": [{"node": "a0", "gpu": 1}], "colocated_with": ["y-be"]},
                {"job": "p3", "allocation": [{"node": "d0", "gpu": 1}]},
            ]
        ),
    ),
    (
        "type not allowed",
        2,
        _mut(
            start=[
                {"job": "p1", "allocation": [{"node": "a0", "gpu": 1}], "colocated_with": ["y-be"]},
                {"job": "p3", "allocation": [{"node": "v0", "gpu": 1}]},
            ]
        )
        | {"_allowed": True},
    ),
    ("running job kept on drained node", 2, _mut(preempt=[])),
    # invariant 3: preemption
    (
        "guaranteed in-quota job preempted",
        3,
        _mut(
            preempt=[{"job": "x-drained", "reason": "node_unavailable"}, {"job": "x-g", "reason": "priority"}]
        ),
    ),
    (
        "reclaim of a job not on loan",
        3,
        _mut(
            preempt=[{"job": "x-drained", "reason": "node_unavailable"}, {"job": "y-be", "reason": "reclaim"}]
        ),
    ),
    (
        "node_unavailable on a healthy node",
        3,
        _mut(
            preempt=[
                {"job": "x-drained", "reason": "node_unavailable"},
                {"job": "x-v", "reason": "node_unavailable"},
            ]
        ),
    ),
    (
        "preempting a pending job",
        3,
        _mut(
            preempt=[{"job": "x-drained", "reason": "node_unavailable"}, {"job": "p2", "reason": "priority"}]
        ),
    ),
    # invariant 4: capacity and loans
    ("use above quota without a loan", 4, _mut(loans=[])),
    ("lend_limit exceeded", 4, _mut(loans=[{"lender": "y", "borrower": "x", "gpu_type": "A100", "gpus": 2}])),
    (
        "lender lends quota it uses",
        4,
        _mut(
            start=[
                {"job": "p1", "allocation": [{"node": "v0", "gpu": 1}]},
                {"job": "p3", "allocation": [{"node": "v0", "gpu": 2}]},
            ],
            loans=[
                {"lender": "y", "borrower": "x", "gpu_type": "A100", "gpus": 1},
                {"lender": "y", "borrower": "x", "gpu_type": "V100", "gpus": 2},
            ],
        ),
    ),
    ("self loan", 4, _mut(loans=[{"lender": "x", "borrower": "x", "gpu_type": "A100", "gpus": 1}])),
    (
        "start beyond quota not marked on loan",
        4,
        _mut(
            start=[
                {"job": "p1", "allocation": [{"node": "a0", "gpu": 1}], "colocated_with": ["y-be"]},
                {"job": "p3", "allocation": [{"node": "v0", "gpu": 1}]},
            ],
            loans=[{"lender": "y", "borrower": "x", "gpu_type": "A100", "gpus": 1}],
        )
        | {"_quota": True},
    ),
    # invariant 5: start or queue
    ("pending job missing", 5, _mut(queue=[])),
    ("pending job twice", 5, _mut(queue=["p2", "p2"])),
    ("invented id", 5, _mut(queue=["p2", "ghost"])),
]


@pytest.mark.parametrize(("name", "inv", "dec"), BAD, ids=[b[0] for b in BAD])
def test_bad_decision_is_caught(name: str, inv: int, dec: dict[str, Any]) -> None:
    s = snap()
    if dec.pop("_allowed", False):
        s["jobs"][7]["gpu_types"] = ["A100"]
    if dec.pop("_quota", False):
        # x already holds its whole V100 quota, so p3 on V100 must be on loan
        s["jobs"].append(running("x-v2", "x", [("v0", 3)], start_s=1.0, qos="best_effort"))
    found = {v.invariant for v in check_decision(load_state(s), Decision.model_validate(dec))}
    assert inv in found, f"{name}: expected invariant {inv}, got {found}"

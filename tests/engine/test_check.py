"""The checker, rule by rule: each hand-built bad decision breaks exactly the expected invariants.

Every case asserts the exact list of (invariant, ids) the checker reports, so a rule that starts
firing elsewhere, or stops firing, is caught. Snapshots are built with :mod:`optsched.testing`.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from optsched.engine import check as check_module
from optsched.engine.check import (
    Violation,
    check_capacity_and_loans,
    check_decision,
    check_work_conservation,
    over_quota_note,
)
from optsched.engine.state import load_state
from optsched.engine.violations import INVARIANT_NAMES
from optsched.schema.decision import Decision
from optsched.testing import cluster, pending, running

NAMES = {
    1: "gpu-sharing",
    2: "placement",
    3: "preemption",
    4: "capacity-and-loans",
    5: "start-or-queue",
    6: "workflow-plan",
    7: "bad-input",
    8: "work-conservation",
    9: "pool-lending",
    10: "node-shape",
}
"""The short names of docs/snapshot-format.md, written out here on purpose."""


def found(snapshot: dict[str, Any], dec: dict[str, Any]) -> list[tuple[int, tuple[str, ...]]]:
    """(invariant, ids) of every violation, after checking each one's name."""
    out = []
    for v in check_decision(load_state(snapshot), Decision.model_validate(dec)):
        assert v.name == NAMES[v.invariant]
        assert str(v).startswith(f"invariant {v.invariant} ({NAMES[v.invariant]}): ")
        out.append((v.invariant, v.ids))
    return out


# ---------------------------------------------------------------- one snapshot, one bad decision per rule


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
        # A100 only: y's idle V100 quota and the free V100 GPUs could otherwise hold it (invariant 8)
        pending("p2", "y", 2, submit_s=100.0, qos="best_effort", memory_gib=70.0, gpu_types=["A100"]),
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


def test_good_decision_passes() -> None:
    assert found(snap(), good()) == []


def _mut(**changes: Any) -> dict[str, Any]:
    d = good()
    d.update(changes)
    return d


BAD = [
    # invariant 1: gpu-sharing
    (
        "guest on non-MPS type",
        [(1, ("x-v", "p1"))],
        _mut(
            start=[
                {"job": "p1", "allocation": [{"node": "v0", "gpu": 0}], "colocated_with": ["x-v"]},
                {"job": "p3", "allocation": [{"node": "v0", "gpu": 1}]},
            ]
        ),
    ),
    (
        "pair does not fit in memory",
        [(1, ("x-g", "p2")), (1, ("x-g", "p2")), (1, ("y-be", "p2")), (8, ("p1",))],
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
        [(1, ("x-g", "p1"))],
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
        [(2, ("p3",)), (4, ("x",))],
        _mut(
            start=[
                {"job": "p1", "allocation": [{"node": "a0", "gpu": 1}], "colocated_with": ["y-be"]},
                {"job": "p3", "allocation": [{"node": "v0", "gpu": 1}, {"node": "v0", "gpu": 2}]},
            ]
        ),
    ),
    (
        "exclusive start on a busy GPU",
        [(1, ("x-v", "p3")), (2, ("x-v", "p3"))],
        _mut(
            start=[
                {"job": "p1", "allocation": [{"node": "a0", "gpu": 1}], "colocated_with": ["y-be"]},
                {"job": "p3", "allocation": [{"node": "v0", "gpu": 0}]},
            ]
        ),
    ),
    (
        "start on a drained node",
        [(2, ("p3",)), (4, ()), (4, ("x",))],
        _mut(
            start=[
                {"job": "p1", "allocation": [{"node": "a0", "gpu": 1}], "colocated_with": ["y-be"]},
                {"job": "p3", "allocation": [{"node": "d0", "gpu": 1}]},
            ]
        ),
    ),
    (
        "type not allowed",
        [(2, ("p3",))],
        _mut(
            start=[
                {"job": "p1", "allocation": [{"node": "a0", "gpu": 1}], "colocated_with": ["y-be"]},
                {"job": "p3", "allocation": [{"node": "v0", "gpu": 1}]},
            ]
        )
        | {"_allowed": True},
    ),
    ("running job kept on drained node", [(2, ("x-drained",)), (4, ()), (4, ("x",))], _mut(preempt=[])),
    # invariant 3: preemption
    (
        "guaranteed in-quota job preempted",
        [(3, ("x-g",))],
        _mut(
            preempt=[{"job": "x-drained", "reason": "node_unavailable"}, {"job": "x-g", "reason": "priority"}]
        ),
    ),
    (
        "guaranteed in-quota job preempted for another tenant",
        [(3, ("x-g", "p1"))],
        _mut(
            start=[
                {"job": "p1", "allocation": [{"node": "a0", "gpu": 0}]},
                {"job": "p3", "allocation": [{"node": "v0", "gpu": 1}]},
            ],
            preempt=[
                {"job": "x-drained", "reason": "node_unavailable"},
                {"job": "x-g", "reason": "priority"},
            ],
            loans=[],
        )
        | {"_preemptible": True},
    ),
    (
        "reclaim of a job not on loan",
        [(2, ("p1",)), (3, ("y-be",))],
        _mut(
            preempt=[{"job": "x-drained", "reason": "node_unavailable"}, {"job": "y-be", "reason": "reclaim"}]
        ),
    ),
    (
        "node_unavailable on a healthy node",
        [(3, ("x-v",))],
        _mut(
            preempt=[
                {"job": "x-drained", "reason": "node_unavailable"},
                {"job": "x-v", "reason": "node_unavailable"},
            ]
        ),
    ),
    (
        "preempting a pending job",
        [(3, ("p2",))],
        _mut(
            preempt=[{"job": "x-drained", "reason": "node_unavailable"}, {"job": "p2", "reason": "priority"}]
        ),
    ),
    # invariant 4: capacity-and-loans
    ("use above quota without a loan", [(4, ("x",))], _mut(loans=[])),
    (
        "lend_limit exceeded",
        [(4, ("y",)), (4, ("y",))],
        _mut(loans=[{"lender": "y", "borrower": "x", "gpu_type": "A100", "gpus": 2}]),
    ),
    (
        "lender lends quota it uses",
        [(4, ("y",))],
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
    (
        "self loan",
        [(4, ("x",)), (4, ("x",))],
        _mut(loans=[{"lender": "x", "borrower": "x", "gpu_type": "A100", "gpus": 1}]),
    ),
    (
        "start beyond quota not marked on loan",
        [(4, ("x",)), (4, ("x",))],
        _mut(
            start=[
                {"job": "p1", "allocation": [{"node": "a0", "gpu": 1}], "colocated_with": ["y-be"]},
                {"job": "p3", "allocation": [{"node": "v0", "gpu": 1}]},
            ],
            loans=[{"lender": "y", "borrower": "x", "gpu_type": "A100", "gpus": 1}],
        )
        | {"_quota": True},
    ),
    # invariant 5: start-or-queue
    ("pending job missing", [(5, ("p2",))], _mut(queue=[])),
    ("pending job twice", [(5, ("p2",))], _mut(queue=["p2", "p2"])),
    ("invented id", [(5, ("ghost",))], _mut(queue=["p2", "ghost"])),
]


@pytest.mark.parametrize(("name", "expected", "dec"), BAD, ids=[b[0] for b in BAD])
def test_bad_decision_is_caught(
    name: str, expected: list[tuple[int, tuple[str, ...]]], dec: dict[str, Any]
) -> None:
    s = snap()
    dec = copy.deepcopy(dec)
    if dec.pop("_allowed", False):
        s["jobs"][7]["gpu_types"] = ["A100"]
    if dec.pop("_quota", False):
        # x already holds its whole V100 quota, so p3 on V100 must be on loan
        s["jobs"].append(running("x-v2", "x", [("v0", 3)], start_s=1.0, qos="best_effort"))
    if dec.pop("_preemptible", False):
        s["jobs"][0]["preemptible"] = True
    assert found(s, dec) == expected, name


# ---------------------------------------------------------------- names and messages


def test_violation_names_and_text() -> None:
    assert INVARIANT_NAMES == NAMES
    v = Violation(4, "tenant 'a' uses 6 'A100' GPUs: quota 4 + loans 1", ("a",))
    assert v.name == "capacity-and-loans"
    assert str(v) == "invariant 4 (capacity-and-loans): tenant 'a' uses 6 'A100' GPUs: quota 4 + loans 1"
    assert Violation(99, "x").name == "unknown"


def test_violation_is_one_class_everywhere() -> None:
    from optsched.engine import violations
    from optsched.engine.workflows import check as wf_check

    assert check_module.Violation is violations.Violation
    assert wf_check.Violation is violations.Violation


def test_over_quota_note_text() -> None:
    assert (
        over_quota_note("a", "A100", 3)
        == "over-quota: tenant a keeps 3 'A100' GPUs above quota with no lender to cover them"
    )


# ---------------------------------------------------------------- invariant 4: use kept over quota


def over_snap() -> dict[str, Any]:
    """Tenant a runs 4 A100 GPUs on a quota lowered to 2; b uses its whole quota, so nobody can lend.

    n1 has 2 free GPUs, so only the quota, not the capacity, keeps a from starting anything.
    """
    s = cluster(
        nodes={"n0": ("A100", 8), "n1": ("A100", 2)},
        tenants={"a": {"A100": 2}, "b": {"A100": 4}, "c": {"A100": 0}},
    )
    s["jobs"] = [
        running("a-1", "a", [("n0", 0), ("n0", 1)], start_s=1.0),
        running("a-2", "a", [("n0", 2), ("n0", 3)], start_s=1.0, qos="best_effort"),
        running("b-1", "b", [("n0", 4), ("n0", 5), ("n0", 6), ("n0", 7)], start_s=1.0),
        pending("a-p", "a", 1, submit_s=100.0, qos="best_effort"),
    ]
    return s


def over_dec(**changes: Any) -> dict[str, Any]:
    d: dict[str, Any] = {
        "now": 10000.0,
        "status": "feasible",
        "solver": {"backend": "test", "seconds": 0.0, "notes": [over_quota_note("a", "A100", 2)]},
        "kept_over_quota": [{"tenant": "a", "gpu_type": "A100", "gpus": 2}],
        "queue": ["a-p"],
        "queue_reasons": {"a-p": "quota_and_no_lender"},
    }
    d.update(changes)
    return d


def test_over_quota_use_is_allowed_when_kept_noted_and_uncoverable() -> None:
    assert found(over_snap(), over_dec()) == []


def test_over_quota_allowed_only_for_the_kept_jobs_own_excess() -> None:
    # (i) a-2 ran on a loan that is gone: that is not use that ran above quota without a loan
    s = over_snap()
    s["jobs"][1]["on_loan"] = True
    assert found(s, over_dec()) == [(4, ("a",))]
    v = check_decision(load_state(s), Decision.model_validate(over_dec()))[0]
    assert "uses 4 'A100' GPUs: quota 2 + loans 0" in v.message


def test_over_quota_cannot_grow_by_a_start() -> None:
    # (i) starting inside the (exceeded) quota makes the excess larger than the old one
    dec = over_dec(
        start=[{"job": "a-p", "allocation": [{"node": "n1", "gpu": 0}]}], queue=[], queue_reasons={}
    )
    assert found(over_snap(), dec) == [(4, ("a",)), (4, ("a",))]
    msgs = [v.message for v in check_decision(load_state(over_snap()), Decision.model_validate(dec))]
    assert "uses 5 'A100' GPUs: quota 2 + loans 0 (2 of them ran above quota without a loan)" in msgs[0]
    assert "starts 1 'A100' GPUs not on loan beyond its quota 2" in msgs[1]


def test_over_quota_tenant_starts_nothing_on_top() -> None:
    # (ii) c lends its single idle GPU so a starts a-p on loan: the excess stays 2, but a start
    # on top of over-quota use is not allowed (the loan should have covered the old use)
    s = over_snap()
    s["tenants"][2]["quota"] = {"A100": 1}
    dec = over_dec(
        start=[{"job": "a-p", "allocation": [{"node": "n1", "gpu": 0}], "on_loan": True}],
        queue=[],
        queue_reasons={},
        loans=[{"lender": "c", "borrower": "a", "gpu_type": "A100", "gpus": 1}],
    )
    assert found(s, dec) == [(4, ("a", "a-p"))]


def test_over_quota_guest_start_is_not_on_top() -> None:
    # (ii) an MPS guest uses no quota, so it may start for the over-quota tenant
    s = over_snap()
    s["jobs"][1]["memory_gib"] = 10.0
    dec = over_dec(
        start=[{"job": "a-p", "allocation": [{"node": "n0", "gpu": 2}], "colocated_with": ["a-2"]}],
        queue=[],
        queue_reasons={},
    )
    assert found(s, dec) == []


def test_over_quota_while_a_lender_has_idle_quota() -> None:
    # (iii) b runs only 3 of its 4 GPUs: it could lend 1 to cover a
    s = over_snap()
    s["jobs"][2]["allocation"] = s["jobs"][2]["allocation"][:3]
    s["jobs"][2]["gpus"] = 3
    assert found(s, over_dec()) == [(4, ("a", "b"))]
    # ... unless b's lend_limit forbids it
    s["tenants"][1]["lend_limit"] = {"A100": 0}
    assert found(s, over_dec()) == []
    # ... or a may borrow nothing
    del s["tenants"][1]["lend_limit"]
    s["tenants"][0]["borrow_limit"] = {"A100": 0}
    assert found(s, over_dec()) == []


def test_over_quota_lender_that_already_lends_its_idle_quota() -> None:
    # (iii) b's idle GPU is lent to a and covers 1 of a's 2 excess GPUs: nothing lendable is left
    s = over_snap()
    s["jobs"][2]["allocation"] = s["jobs"][2]["allocation"][:3]
    s["jobs"][2]["gpus"] = 3
    dec = over_dec(
        loans=[{"lender": "b", "borrower": "a", "gpu_type": "A100", "gpus": 1}],
        kept_over_quota=[{"tenant": "a", "gpu_type": "A100", "gpus": 1}],
    )
    assert found(s, dec) == []


def _kept(*entries: tuple[str, str, int]) -> list[dict[str, Any]]:
    return [{"tenant": ten, "gpu_type": t, "gpus": g} for ten, t, g in entries]


@pytest.mark.parametrize(
    ("kept", "expected", "says"),
    [
        ([], [(4, ("a",))], "kept_over_quota does not list it"),
        (_kept(("a", "A100", 7)), [(4, ("a",))], "kept_over_quota says 7"),
        (_kept(("a", "A100", 1)), [(4, ("a",))], "kept_over_quota says 1"),
        (_kept(("b", "A100", 2)), [(4, ("a",)), (4, ("b",))], "lists 2 'A100' GPUs of tenant 'b'"),
        (_kept(("a", "V100", 2)), [(4, ("a",)), (4, ("a",))], "unknown GPU type 'V100'"),
        (_kept(("z", "A100", 2)), [(4, ("z",)), (4, ("a",))], "unknown tenant 'z'"),
        (_kept(("a", "A100", 2), ("a", "A100", 2)), [(4, ("a",))], "is listed twice"),
    ],
    ids=["missing", "too-many", "too-few", "other-tenant", "unknown-type", "unknown-tenant", "twice"],
)
def test_over_quota_must_be_listed_exactly(
    kept: list[dict[str, Any]], expected: list[Any], says: str
) -> None:
    # (iv) the typed field lists each kept excess with its exact size, and nothing else; the
    # over-quota note in solver.notes (still there, for people) does not count
    dec = over_dec(kept_over_quota=kept)
    assert found(over_snap(), dec) == expected
    msgs = [v.message for v in check_capacity_and_loans(*_state_dec_after(over_snap(), dec))]
    assert any(says in m for m in msgs), msgs


def test_over_quota_field_is_checked_against_the_rule_not_trusted() -> None:
    # listing the excess does not make it allowed: a-2 on a loan that is gone is not old use
    s = over_snap()
    s["jobs"][1]["on_loan"] = True
    assert found(s, over_dec()) == [(4, ("a",))]
    # and a tenant within quota plus loans may not be listed
    dec = over_dec(kept_over_quota=_kept(("a", "A100", 2), ("b", "A100", 1)))
    assert found(over_snap(), dec) == [(4, ("b",))]


def test_over_quota_never_exceeds_capacity() -> None:
    # a snapshot cannot hold more than capacity, but a decision can: a start on a GPU that
    # exists on no available node is caught (placement), and the capacity total too
    s = over_snap()
    s["nodes"][1]["available"] = False
    dec = over_dec(
        start=[{"job": "a-p", "allocation": [{"node": "n1", "gpu": 0}]}], queue=[], queue_reasons={}
    )
    got = found(s, dec)
    assert (2, ("a-p",)) in got and (4, ()) in got


def _state_dec_after(s: dict[str, Any], dec: dict[str, Any]) -> tuple[Any, Decision, Any]:
    state = load_state(s)
    d = Decision.model_validate(dec)
    return state, d, check_module._after(state, d)


# ---------------------------------------------------------------- invariant 8: work conservation


def wc_snap() -> dict[str, Any]:
    """4 A100 + 4 V100 GPUs; b holds 2 A100; a has idle quota on both types."""
    s = cluster(
        types={"A100": (80.0, True), "V100": (32.0, False)},
        nodes={"n0": ("A100", 4), "v0": ("V100", 4)},
        tenants={"a": {"A100": 2, "V100": 2}, "b": {"A100": 2, "V100": 0}},
    )
    s["jobs"] = [
        running("b-1", "b", [("n0", 0), ("n0", 1)], start_s=1.0),
        pending("a-p", "a", 2, submit_s=100.0, gpu_types=["A100"]),
    ]
    return s


def wc_dec(**changes: Any) -> dict[str, Any]:
    d: dict[str, Any] = {
        "now": 10000.0,
        "status": "feasible",
        "solver": {"backend": "test", "seconds": 0.0},
        "queue": ["a-p"],
    }
    d.update(changes)
    return d


def wc(s: dict[str, Any], dec: dict[str, Any]) -> list[Violation]:
    state = load_state(s)
    return check_work_conservation(state, Decision.model_validate(dec))


def test_work_conservation_violated() -> None:
    dec = wc_dec(queue_reasons={"a-p": "lower_priority"})
    v = wc(wc_snap(), dec)
    assert [(x.invariant, x.name, x.ids) for x in v] == [(8, "work-conservation", ("a-p",))]
    assert "2 'A100' GPUs are free" in v[0].message and "2 idle 'A100' quota" in v[0].message
    assert "(queue reason: lower_priority)" in v[0].message
    # check_decision runs it too
    assert found(wc_snap(), dec) == [(8, ("a-p",))]


def test_work_conservation_started_job_is_fine() -> None:
    dec = wc_dec(
        start=[{"job": "a-p", "allocation": [{"node": "n0", "gpu": 2}, {"node": "n0", "gpu": 3}]}], queue=[]
    )
    assert found(wc_snap(), dec) == []


def test_work_conservation_quota_exhausted() -> None:
    s = wc_snap()
    s["jobs"].append(running("a-1", "a", [("n0", 2)], start_s=1.0))
    # one free A100 GPU is left and a's idle quota is 1: a 1-GPU job is held back wrongly ...
    s["jobs"].append(pending("a-q", "a", 1, submit_s=100.0, gpu_types=["A100"]))
    assert [(x.invariant, x.ids) for x in wc(s, wc_dec(queue=["a-p", "a-q"]))] == [(8, ("a-q",))]
    # ... but the 2-GPU a-p, beyond a's idle quota, may wait
    s["jobs"].pop()
    assert wc(s, wc_dec()) == []


def test_work_conservation_quota_lent_is_not_idle() -> None:
    # a lends its 2 idle A100 quota to b, whose on-loan job holds 1 of the 2 free GPUs
    s = wc_snap()
    s["jobs"].append(running("b-2", "b", [("n0", 2)], start_s=1.0, on_loan=True))
    dec = wc_dec(loans=[{"lender": "a", "borrower": "b", "gpu_type": "A100", "gpus": 2}])
    assert wc(s, dec) == []
    assert found(s, dec) == []


def test_work_conservation_free_gpus_of_a_disallowed_type() -> None:
    s = wc_snap()
    s["jobs"][0]["allocation"] = [{"node": "n0", "gpu": g} for g in range(4)]
    s["jobs"][0]["gpus"] = 4
    s["tenants"][1]["quota"] = {"A100": 4}
    # all A100 busy; 4 V100 free and a has 2 idle V100 quota, but a-p allows A100 only
    assert wc(s, wc_dec()) == []
    s["jobs"][1]["gpu_types"] = None  # any type: now V100 could hold it
    v = wc(s, wc_dec())
    assert [(x.invariant, x.ids) for x in v] == [(8, ("a-p",))] and "'V100'" in v[0].message


def test_work_conservation_gang_larger_than_free() -> None:
    s = wc_snap()
    s["jobs"][1]["gpus"] = 3  # 2 free A100 GPUs
    s["tenants"][0]["quota"]["A100"] = 4
    assert wc(s, wc_dec()) == []


def test_work_conservation_ignores_unavailable_nodes_and_the_pool() -> None:
    s = wc_snap()
    s["nodes"].append({"id": "d0", "gpu_type": "A100", "gpus": 4, "available": False})
    s["jobs"][0]["allocation"] = [{"node": "n0", "gpu": g} for g in range(3)]
    s["jobs"][0]["gpus"] = 3
    s["tenants"][1]["quota"] = {"A100": 3}
    # 1 free A100 on n0 (4 idle on the drained d0 do not count): the 2-GPU gang may wait
    assert wc(s, wc_dec()) == []
    # the pool: n0/3 serves workflows, so no A100 is free for cluster jobs
    s["jobs"][1]["gpus"] = 1
    assert [(x.invariant, x.ids) for x in wc(s, wc_dec())] == [(8, ("a-p",))]
    s["workflows"] = {"models": {}, "pool": [{"node": "n0", "gpu": 3}], "sessions": []}
    assert wc(s, wc_dec()) == []


def test_work_conservation_mps_guest_uses_no_quota() -> None:
    # b-1 hosts a guest of a: a's quota stays idle, and the 2 free A100 GPUs could hold a-p
    s = wc_snap()
    s["jobs"][0].update(qos="best_effort", colocated=True)
    s["jobs"].append(
        running("a-g", "a", [("n0", 0), ("n0", 1)], start_s=2.0, qos="best_effort", colocated=True)
    )
    assert [(x.invariant, x.ids) for x in wc(s, wc_dec())] == [(8, ("a-p",))]

"""Invariant 7: bad input is rejected with a message naming the field (table-driven)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from optsched.engine.state import load_state, parse_snapshot
from optsched.errors import SnapshotError
from optsched.instances import generate
from optsched.testing import cluster, pending, running


def base() -> dict[str, Any]:
    s = cluster(tenants={"a": {"A100": 4}, "b": {"A100": 4}})
    s["jobs"] = [
        running("r0", "a", [("n0", 0), ("n0", 1)], start_s=1000.0),
        pending("p0", "b", 2, submit_s=2000.0),
    ]
    s["workflows"] = {
        "models": {"m": {"memory_gib": 10}},
        "pool": [{"node": "n0", "gpu": 7, "resident": ["m"]}],
        "sessions": [
            {
                "id": "s",
                "tenant": "a",
                "arrival_s": 100.0,
                "activations": [
                    {"id": "x", "model": "m", "input_tokens": 10, "output_tokens": 5},
                    {"id": "y", "model": "m", "input_tokens": 10, "output_tokens": 5, "after": ["x"]},
                ],
            }
        ],
    }
    return s


def _set(path: list[Any], value: Any) -> Callable[[dict[str, Any]], None]:
    def fix(s: dict[str, Any]) -> None:
        obj = s
        for k in path[:-1]:
            obj = obj[k]
        obj[path[-1]] = value

    return fix


def _del(path: list[Any]) -> Callable[[dict[str, Any]], None]:
    def fix(s: dict[str, Any]) -> None:
        obj = s
        for k in path[:-1]:
            obj = obj[k]
        del obj[path[-1]]

    return fix


def _append_job(job: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    return lambda s: s["jobs"].append(job)


CASES = [
    # shape errors (pydantic tier)
    ("format", _set(["format"], 2), "unsupported format 2"),
    ("now", _del(["now"]), "required field is missing"),
    ("jobs[1].gpus", _set(["jobs", 1, "gpus"], 0), "greater than or equal to 1"),
    ("jobs[1].gpus", _set(["jobs", 1, "gpus"], -3), "greater than or equal to 1"),
    ("jobs[1].qos", _set(["jobs", 1, "qos"], "gold"), "guaranteed"),
    ("jobs[1].state", _set(["jobs", 1, "state"], "done"), "pending"),
    ("jobs[1].runtime_s", _set(["jobs", 1, "runtime_s"], -5), "greater than 0"),
    ("jobs[1].memory_gib", _set(["jobs", 1, "memory_gib"], "lots"), "valid number"),
    ("jobs[1].colour", _set(["jobs", 1, "colour"], "red"), "unknown field"),
    ("gpu_types.A100.memory_gib", _set(["gpu_types", "A100", "memory_gib"], 0), "greater than 0"),
    ("nodes[0].gpus", _set(["nodes", 0, "gpus"], 0), "greater than or equal to 1"),
    ("tenants[0].quota.A100", _set(["tenants", 0, "quota"], {"A100": -1}), "greater than or equal to 0"),
    ("tenants[0].lend_limit.A100", _set(["tenants", 0, "lend_limit"], {"A100": -2}), "greater than or equal"),
    ("tenants[0].qos.target", _set(["tenants", 0, "qos", "target"], 1.5), "less than or equal to 1"),
    ("epoch_s", _set(["epoch_s"], 0), "greater than 0"),
    ("options.backend", _set(["options"], {"backend": "gurobi"}), "cpsat"),
    # semantic errors (ClusterState tier)
    ("jobs[1].tenant", _set(["jobs", 1, "tenant"], "x"), "unknown tenant 'x'"),
    ("jobs[1].gpu_types[0]", _set(["jobs", 1, "gpu_types"], ["H200"]), "unknown GPU type 'H200'"),
    ("jobs[1].gpu_types", _set(["jobs", 1, "gpu_types"], []), "empty list"),
    ("nodes[0].gpu_type", _set(["nodes", 0, "gpu_type"], "H200"), "unknown GPU type 'H200'"),
    ("tenants[1].quota.H200", _set(["tenants", 1, "quota"], {"H200": 1}), "unknown GPU type"),
    ("tenants[1].id", _set(["tenants", 1, "id"], "a"), "duplicated tenant id 'a'"),
    ("jobs[1].id", _set(["jobs", 1, "id"], "r0"), "duplicated job id 'r0'"),
    ("jobs[1].submit_s", _set(["jobs", 1, "submit_s"], 20000.0), "submitted in the future"),
    ("jobs[0].allocation", _del(["jobs", 0, "allocation"]), "needs its allocation"),
    ("jobs[0].allocation", _set(["jobs", 0, "gpus"], 3), "has 2 GPUs but the job asks for 3"),
    ("jobs[0].allocation[1].gpu", _set(["jobs", 0, "allocation", 1, "gpu"], 8), "out of range"),
    ("jobs[0].allocation[1].node", _set(["jobs", 0, "allocation", 1, "node"], "zz"), "unknown node 'zz'"),
    ("jobs[0].allocation[1]", _set(["jobs", 0, "allocation", 1, "gpu"], 0), "listed twice"),
    ("jobs[0].start_s", _del(["jobs", 0, "start_s"]), "needs its start time"),
    ("jobs[0].start_s", _set(["jobs", 0, "start_s"], 99999.0), "start in the future"),
    ("jobs[1].allocation", _set(["jobs", 1, "allocation"], [{"node": "n0", "gpu": 5}]), "only running jobs"),
    ("jobs[2].allocation", _append_job(running("r1", "b", [("n0", 1)], start_s=1.0)), "given twice"),
    ("jobs[2].allocation[0]", _append_job(running("r1", "b", [("n0", 7)], start_s=1.0)), "workflow pool"),
    (
        "nodes[1].id",
        lambda s: s["nodes"].append({"id": "n0", "gpu_type": "A100", "gpus": 1}),
        "duplicated node",
    ),
    (
        "workflows.sessions[0].activations[1].after[0]",
        _set(["workflows", "sessions", 0, "activations", 1, "after"], ["q"]),
        "unknown activation 'q'",
    ),
    (
        "workflows.sessions[0].activations",
        _set(["workflows", "sessions", 0, "activations", 0, "after"], ["y"]),
        "cycle",
    ),
    (
        "workflows.sessions[0].activations[0].model",
        _set(["workflows", "sessions", 0, "activations", 0, "model"], "gpt"),
        "unknown model 'gpt'",
    ),
    ("workflows.pool[0].resident[0]", _set(["workflows", "pool", 0, "resident"], ["zz"]), "unknown model"),
    ("workflows.sessions[0].tenant", _set(["workflows", "sessions", 0, "tenant"], "q"), "unknown tenant"),
]


@pytest.mark.parametrize(("path", "fix", "message"), CASES, ids=[f"{c[0]}:{c[2]}" for c in CASES])
def test_bad_snapshot_names_the_field(path: str, fix: Callable[[dict[str, Any]], None], message: str) -> None:
    s = base()
    load_state(s)  # the base is valid
    fix(s)
    with pytest.raises(SnapshotError) as err:
        load_state(json.dumps(s))
    assert err.value.path == path
    assert message in err.value.message


@pytest.mark.parametrize("text", ["", "{", "[1,2]", "null", '{"format": 1}'])
def test_malformed_json_is_a_snapshot_error(text: str) -> None:
    with pytest.raises(SnapshotError):
        parse_snapshot(text)


def test_mps_pair_of_running_jobs_is_accepted_only_when_shareable() -> None:
    s = cluster(tenants={"a": {"A100": 8}})
    s["jobs"] = [
        running("h", "a", [("n0", 0)], start_s=1.0, qos="best_effort", colocated=True),
        running("g", "a", [("n0", 0)], start_s=2.0, qos="best_effort", colocated=True),
    ]
    state = load_state(s)
    assert state.host_of == {"g": "h"}
    s["jobs"][1]["shareable"] = False
    with pytest.raises(SnapshotError, match="not both colocated and shareable"):
        load_state(s)


@pytest.mark.parametrize("size", ["tiny", "venus"])
def test_generated_snapshots_round_trip(size: str) -> None:
    snap = parse_snapshot(generate(size, seed=3))  # type: ignore[arg-type]
    again = parse_snapshot(snap.model_dump_json())
    assert again == snap
    load_state(snap.model_dump())


def test_stale_on_loan_flags_are_settled_inside_quota() -> None:
    # b's quota (4) less its own use (1) holds 3 GPUs of its on-loan jobs: the guaranteed one
    # first (2), then by start time the 1-GPU one fits, the 2-GPU best-effort one does not
    snap = cluster(tenants={"a": {"A100": 4}, "b": {"A100": 4}})
    snap["jobs"] = [
        running("b0", "b", [("n0", 0)], start_s=50.0),
        running("l1", "b", [("n0", 1), ("n0", 2)], start_s=100.0, qos="best_effort", on_loan=True),
        running("l2", "b", [("n0", 3), ("n0", 4)], start_s=200.0, on_loan=True),
        running("l3", "b", [("n0", 5)], start_s=300.0, qos="best_effort", on_loan=True),
        running("a0", "a", [("n0", 6)], start_s=50.0, on_loan=True),
    ]
    state = load_state(snap)
    flags = {j.id: j.on_loan for j in state.running()}
    assert flags == {"b0": False, "l1": True, "l2": False, "l3": False, "a0": False}
    # once b's own use fills its quota, its on-loan jobs stay on loan
    snap["jobs"][0]["gpus"] = 3
    snap["nodes"].append({"id": "n1", "gpu_type": "A100", "gpus": 8})
    snap["jobs"][0]["allocation"] = [{"node": n, "gpu": g} for n, g in (("n0", 0), ("n1", 0), ("n1", 1))]
    snap["jobs"][2]["on_loan"] = True
    state = load_state(snap)
    flags = {j.id: j.on_loan for j in state.running()}
    assert flags == {"b0": False, "l1": True, "l2": True, "l3": False, "a0": False}

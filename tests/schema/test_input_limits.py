"""Bounded, strictly typed input (``optsched/schema/limits.py``, "Size limits" in
docs/snapshot-format.md): a count above its limit, a string or a boolean where a number belongs,
a running job that does not say whether it is on loan are refused while the snapshot is parsed,
naming the field (exit 2 in the CLI, 422 in the service), before any work."""

from __future__ import annotations

import copy
import json
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from optsched.engine.state import load_state, parse_snapshot
from optsched.errors import SnapshotError, error_path, validation_error
from optsched.schema import limits
from optsched.schema.snapshot import Snapshot
from optsched.testing import cluster, pending, running
from tests.conftest import ROOT

AS_LIMIT = 2 * 1024**3
"""Address space of the CLI subprocess: a parse that allocated per GPU of a 10^12-GPU node
would die of MemoryError (exit 1) long before it reached 2 GiB."""


def _base() -> dict[str, Any]:
    snap = cluster(nodes={"n0": ("A100", 4), "n1": ("A100", 4)}, tenants={"a": {"A100": 6}, "b": {"A100": 2}})
    snap["jobs"] = [
        running("r0", "a", [("n0", 0), ("n0", 1)], start_s=100.0),
        pending("p0", "b", 2, submit_s=500.0),
    ]
    return snap


def _error(snap: dict[str, Any]) -> SnapshotError:
    with pytest.raises(SnapshotError) as err:
        load_state(json.dumps(snap))
    return err.value


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))


def _cli(tmp_path: Path, snap: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(snap))
    return subprocess.run(
        [sys.executable, "-m", "optsched.cli", "solve", str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"},
        preexec_fn=_limited,
        timeout=300,
    )


@pytest.mark.parametrize("gpus", [10**12, 10**7])
def test_cli_refuses_a_huge_node_under_an_address_space_limit(tmp_path: Path, gpus: int) -> None:
    snap = _base()
    snap["nodes"][0]["gpus"] = gpus
    proc = _cli(tmp_path, snap)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.strip() == f"error: nodes[0].gpus: at most 128 GPUs per node (got {gpus})"


def test_cli_solves_a_snapshot_at_the_limits_under_the_same_address_space_limit(tmp_path: Path) -> None:
    snap = _base()
    snap["nodes"] = [{"id": f"n{i}", "gpu_type": "A100", "gpus": limits.MAX_GPUS_PER_NODE} for i in range(2)]
    proc = _cli(tmp_path, snap)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["format"] == 1


def test_service_refuses_a_huge_node_with_422(tmp_path: Path) -> None:
    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    import concurrent.futures
    import multiprocessing
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient

    from optsched.hosts.service import ServiceConfig, create_app

    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
        app = create_app(ServiceConfig(db=tmp_path / "s.db", workers=1), executor=pool)
        with TestClient(app) as c:
            cases: list[tuple[Any, str]] = [
                (lambda s: s["nodes"][0].update(gpus=10**12), "nodes[0].gpus: at most 128 GPUs per node"),
                (lambda s: s["jobs"][1].update(gpus="4"), "jobs[1].gpus: Input should be a valid integer"),
                (lambda s: s["jobs"][1].update(gpus=True), "jobs[1].gpus: Input should be a valid integer"),
                (lambda s: s["jobs"][0].pop("on_loan"), "jobs[0].on_loan: a running job needs on_loan"),
                (lambda s: s.update(options={"partitions": "x"}), "options.partitions: must be an integer"),
            ]
            for fix, want in cases:
                snap = _base()
                fix(snap)
                r = c.post("/v1/clusters/c1/epochs", json=snap)
                assert r.status_code == 422, r.text
                assert r.json()["error"].startswith(want), r.json()
            for body in (b'{"format": 1, "now": 1' + b"0" * 5000 + b"}", b"[" * 100_000 + b"]" * 100_000):
                r = c.post(
                    "/v1/clusters/c1/epochs", content=body, headers={"Content-Type": "application/json"}
                )
                assert r.status_code == 400, r.text
                assert r.json()["error"].startswith("malformed JSON: ")
            r = c.post("/v1/clusters/c1/epochs", json=_base())
            assert r.status_code == 200, r.text


@pytest.mark.parametrize(
    ("fix", "path", "message"),
    [
        (lambda s: s["nodes"][0].update(gpus=129), "nodes[0].gpus", "at most 128 GPUs per node (got 129)"),
        (
            lambda s: s["jobs"][1].update(gpus=70_000),
            "jobs[1].gpus",
            "at most 65536 GPUs in one job (got 70000)",
        ),
        (lambda s: s["jobs"][1].update(max_gpus=10**9), "jobs[1].max_gpus", "at most 65536 GPUs in one job"),
        (
            lambda s: s["jobs"][1].update(min_gpus=1, max_gpus=2000),
            "jobs[1].max_gpus",
            "at most 128 sizes per elastic job ((max_gpus - min_gpus) // gpus_step + 1 is 2000)",
        ),
        (
            lambda s: s["jobs"][0].update(allocation=[{"node": "n0", "gpu": 0}] * 70_000),
            "jobs[0].allocation",
            "at most 65536 GPUs in one allocation (got 70000)",
        ),
        (
            lambda s: s["jobs"][0]["allocation"][0].update(gpu=10**12),
            "jobs[0].allocation[0].gpu",
            "less than 128",
        ),
        (
            lambda s: s["tenants"][0]["quota"].update(A100=10**12),
            "tenants[0].quota.A100",
            "less than or equal",
        ),
        (lambda s: s["jobs"][1].update(id="x" * 300), "jobs[1].id", "at most 256 characters"),
        (
            lambda s: s["jobs"][1].update(features={"user": "u" * 5000}),
            "jobs[1].features.user",
            "at most 4096",
        ),
        (
            lambda s: s["jobs"][1].update(features={"user": [1]}),
            "jobs[1].features.user",
            "a string, a finite",
        ),
        (
            lambda s: s.update(options={"num_workers": 10**6}),
            "options.num_workers",
            "at most 1024 solver threads",
        ),
        (lambda s: s.update(options={"partitions": 10**6}), "options.partitions", "from 1 to 1024"),
        (lambda s: s.update(options={"seed": 2**40}), "options.seed", "at most 2147483647"),
        (lambda s: s.update(now=1e300), "now", "less than or equal"),
        (lambda s: s.update(assurance_state={"a": {"met": "x"}}), "assurance_state.a.met", "finite number"),
        (lambda s: s.update(assurance_state={"a": {"missed": 3}}), "assurance_state.a.missed", "job ids"),
        (
            lambda s: s.update(nodes=[{"id": f"n{i}", "gpu_type": "A100", "gpus": 128} for i in range(7813)]),
            "nodes",
            "at most 1000000 GPUs in all nodes together (got 1000064)",
        ),
    ],
)
def test_a_value_over_its_limit_names_the_field(fix: Any, path: str, message: str) -> None:
    snap = _base()
    load_state(json.dumps(snap))
    fix(snap)
    err = _error(snap)
    assert err.path == path
    assert message in err.message


def test_a_list_over_its_limit_is_refused_by_count() -> None:
    snap = _base()
    snap["jobs"][1]["gpu_types"] = ["A100"] * (limits.MAX_GPU_TYPES + 1)
    err = _error(snap)
    assert (err.path, err.message) == (
        "jobs[1].gpu_types",
        f"at most 256 entries (got {limits.MAX_GPU_TYPES + 1})",
    )


def test_quota_tree_depth_is_bounded() -> None:
    snap = _base()
    depth = limits.MAX_GROUP_DEPTH + 1
    snap["groups"] = [{"id": f"g{k}", "parent": f"g{k - 1}" if k else None} for k in range(depth)]
    snap["tenants"][0]["parent"] = f"g{depth - 1}"
    err = _error(snap)
    assert err.path == f"groups[{depth - 1}].parent"
    assert err.message == f"at most {limits.MAX_GROUP_DEPTH} levels of quota groups"
    snap["groups"] = snap["groups"][:-1]
    snap["tenants"][0]["parent"] = f"g{depth - 2}"
    load_state(json.dumps(snap))


# ------------------------------------------------------------------------------ strict types


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (["jobs", 1, "gpus"], "4"),
        (["jobs", 1, "gpus"], True),
        (["jobs", 1, "gpus"], 4.0),
        (["nodes", 0, "gpus"], "4"),
        (["tenants", 0, "quota", "A100"], True),
        (["jobs", 1, "shareable"], 1),
        (["jobs", 1, "shareable"], "true"),
        (["nodes", 0, "available"], 0),
        (["jobs", 0, "on_loan"], "false"),
        (["jobs", 1, "memory_gib"], "10"),
        (["jobs", 1, "memory_gib"], True),
        (["jobs", 1, "submit_s"], "5"),
        (["now"], True),
        (["format"], True),
    ],
)
def test_a_mistyped_scalar_is_refused(path: list[Any], value: Any) -> None:
    snap = _base()
    obj: Any = snap
    for k in path[:-1]:
        obj = obj[k]
    obj[path[-1]] = value
    err = _error(snap)
    assert err.path == error_path(tuple(path))
    for parsed in (json.dumps(snap), snap):  # JSON text (the CLI) and a dict (the service)
        with pytest.raises(SnapshotError):
            parse_snapshot(parsed)


def test_json_integers_are_numbers_for_float_fields() -> None:
    snap = _base()
    snap["now"] = 10000
    snap["jobs"][1].update(memory_gib=10, runtime_s=600, submit_s=500)
    snap["gpu_types"]["A100"]["memory_gib"] = 80
    parsed = load_state(json.dumps(snap)).snapshot
    assert (parsed.now, parsed.jobs[1].memory_gib, parsed.gpu_types["A100"].memory_gib) == (
        10000.0,
        10.0,
        80.0,
    )


# ------------------------------------------------------------------------------ on_loan


def test_a_running_job_must_say_whether_it_is_on_loan() -> None:
    snap = _base()
    del snap["jobs"][0]["on_loan"]
    err = _error(snap)
    assert err.path == "jobs[0].on_loan"
    assert err.message.startswith("a running job needs on_loan")
    snap["jobs"][0]["on_loan"] = True
    assert parse_snapshot(json.dumps(snap)).jobs[0].on_loan is True


def test_a_pending_job_leaves_on_loan_out() -> None:
    snap = _base()
    assert "on_loan" not in snap["jobs"][1]
    assert load_state(json.dumps(snap)).snapshot.jobs[1].on_loan is False


# ------------------------------------------------------------------------------ error paths


@pytest.mark.parametrize("value", ["x", 0, -1, 2.5, True, [2], {"n": 2}])
def test_partitions_errors_name_the_field_without_union_tags(value: Any) -> None:
    snap = _base()
    snap["options"] = {"partitions": value}
    err = _error(snap)
    assert err.path == "options.partitions"
    assert err.message == 'must be an integer from 1 to 1024, "auto" or null'


@pytest.mark.parametrize("value", ["auto", 1, 4, None])
def test_partitions_accepts_counts_auto_and_null(value: Any) -> None:
    snap = _base()
    snap["options"] = {"partitions": value}
    assert load_state(json.dumps(snap)).snapshot.options.partitions == value  # type: ignore[union-attr]


class _Inner(BaseModel):
    n: int


class _WithUnion(BaseModel):
    items: list[int | _Inner]
    table: dict[str, int | str]


def test_the_formatter_drops_union_member_tags() -> None:
    with pytest.raises(ValidationError) as exc:
        _WithUnion.model_validate({"items": [1, {"n": "x"}], "table": {}})
    loc = tuple(exc.value.errors()[0]["loc"])
    assert loc[:2] == ("items", 1) and len(loc) == 3  # pydantic tags the member
    assert error_path(loc, _WithUnion) == "items[1]"
    assert error_path(loc) == f"items[1].{loc[2]}"
    with pytest.raises(ValidationError) as exc:
        _WithUnion.model_validate({"items": [], "table": {"int": 2.5}})
    assert str(validation_error(exc.value, _WithUnion)).startswith("table.int: ")


def test_the_schema_states_the_limits(capsys: pytest.CaptureFixture[str]) -> None:
    from optsched.cli import main

    assert main(["schema", "snapshot"]) == 0
    schema = json.loads(capsys.readouterr().out)
    defs = schema["$defs"]
    assert defs["Node"]["properties"]["gpus"]["maximum"] == limits.MAX_GPUS_PER_NODE
    assert "at most 128" in defs["Node"]["properties"]["gpus"]["description"]
    assert defs["Job"]["properties"]["gpus"]["maximum"] == limits.MAX_GANG
    assert schema["properties"]["nodes"]["maxItems"] == limits.MAX_NODES
    assert schema["properties"]["jobs"]["maxItems"] == limits.MAX_JOBS
    assert "required for them" in defs["Job"]["properties"]["on_loan"]["description"]


def test_a_round_trip_keeps_the_snapshot() -> None:
    snap = _base()
    snap["jobs"][1]["features"] = {"user": "u1", "n": 3, "f": 0.5, "flag": True}
    snap["options"] = {"partitions": "auto"}
    parsed = parse_snapshot(json.dumps(snap))
    again = Snapshot.model_validate_json(parsed.model_dump_json())
    assert again == parsed
    assert again.jobs[1].features == {"user": "u1", "n": 3, "f": 0.5, "flag": True}
    assert copy.deepcopy(again) == parsed

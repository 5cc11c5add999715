"""The HTTP policy service (``optsched serve``): routes, auth, limits, errors naming the field,
assurance state carried by the store, Kubernetes extender verbs by contract (JSON fixtures in the
``k8s.io/kube-scheduler/extender/v1`` shapes), metrics, and one real server on loopback."""

from __future__ import annotations

import concurrent.futures
import copy
import json
import multiprocessing
import os
import signal
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

import httpx

with warnings.catch_warnings():  # starlette suggests another HTTP client for its TestClient
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from optsched import ClusterState, Decision, check_decision, parse_snapshot, solve_epoch
from optsched.hosts.serve_process import serve_subprocess
from optsched.hosts.service import ServiceConfig, create_app, solve_request
from optsched.hosts.store import Store
from optsched.instances import generate

DATA = Path(__file__).parent / "data"


def _json(name: str) -> Any:
    return json.loads((DATA / name).read_text())


@pytest.fixture(scope="module")
def pool() -> Iterator[concurrent.futures.ProcessPoolExecutor]:
    """One solver pool for the module (spawned once; each app would otherwise start its own)."""
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=2, mp_context=ctx) as ex:
        yield ex


def _client(pool: concurrent.futures.Executor, tmp_path: Path, **cfg: Any) -> TestClient:
    cfg.setdefault("db", tmp_path / "serve.db")
    cfg.setdefault("workers", 2)
    return TestClient(create_app(ServiceConfig(**cfg), executor=pool))


def _tiny() -> dict[str, Any]:
    return generate("tiny", 0)


def test_epoch_decision_job_and_openapi(pool: concurrent.futures.Executor, tmp_path: Path) -> None:
    snap = _json("extender_snapshot.json")
    with _client(pool, tmp_path) as c:
        assert c.get("/healthz").json()["status"] == "ok"
        r = c.post("/v1/clusters/c1/epochs", json=snap)
        assert r.status_code == 200, r.text
        assert r.headers["X-Optsched-Epoch"] == "1"
        decision = Decision.model_validate(r.json())
        assert check_decision(ClusterState.from_snapshot(parse_snapshot(snap)), decision) == []
        assert [s.job for s in decision.start] == ["vis-train"]

        latest = c.get("/v1/clusters/c1/decision")
        assert latest.status_code == 200 and latest.json() == r.json()
        assert c.get("/v1/clusters/nope/decision").status_code == 404

        start = c.get("/v1/clusters/c1/jobs/vis-train").json()
        assert (start["action"], start["reason"], start["epoch"]) == ("start", "in quota", 1)
        assert {g["node"] for g in start["allocation"]} == {"n0"}
        pre = c.get("/v1/clusters/c1/jobs/nlp-sweep").json()
        assert (pre["action"], pre["reason"]) == ("preempt", "reclaim")
        queued = c.get("/v1/clusters/c1/jobs/audio-extra").json()
        assert queued["action"] == "queue" and queued["reason"] == decision.queue_reasons["audio-extra"]
        assert queued["queue_position"] == 0 and queued["notes"] == decision.solver.notes
        missing = c.get("/v1/clusters/c1/jobs/ghost")
        assert missing.status_code == 404 and "ghost" in missing.json()["error"]

        api = c.get("/openapi.json").json()
        for path in (
            "/v1/clusters/{cluster}/epochs",
            "/v1/clusters/{cluster}/decision",
            "/v1/clusters/{cluster}/jobs/{job}",
            "/v1/clusters/{cluster}/extender/filter",
            "/v1/clusters/{cluster}/extender/prioritize",
            "/v1/clusters/{cluster}/extender/preempt",
            "/healthz",
            "/metrics",
        ):
            assert path in api["paths"], path
        schemas = api["components"]["schemas"]
        assert {"Snapshot", "Decision", "ExtenderArgs", "ExtenderFilterResult", "HostPriority"} <= set(
            schemas
        )
        body = api["paths"]["/v1/clusters/{cluster}/epochs"]["post"]["requestBody"]
        assert body["content"]["application/json"]["schema"]["$ref"] == "#/components/schemas/Snapshot"

        # the same text as `optsched explain`, for every job the decision names
        from optsched.engine.explain import describe_job

        state = ClusterState.from_snapshot(parse_snapshot(snap))
        for j in ("vis-train", "nlp-sweep", "audio-extra"):
            got = c.get(f"/v1/clusters/c1/jobs/{j}").json()["explanation"]
            assert got == describe_job(state, decision, j)

    # the store holds the epoch and its actions with their reasons
    store = Store(tmp_path / "serve.db")
    acts = {(a.job, a.action, a.reason) for a in store.actions("c1")}
    assert ("nlp-sweep", "preempt", "reclaim") in acts and ("vis-train", "start", "in quota") in acts
    assert ("audio-extra", "queue", decision.queue_reasons["audio-extra"]) in acts


def test_assurance_state_is_carried_by_the_store(pool: concurrent.futures.Executor, tmp_path: Path) -> None:
    first = _json("extender_snapshot.json")
    second = copy.deepcopy(first)
    second["now"] += 60.0
    with _client(pool, tmp_path) as c:
        d1 = c.post("/v1/clusters/a/epochs", json=first).json()
        r2 = c.post("/v1/clusters/a/epochs", json=second)
        assert r2.status_code == 200 and r2.headers["X-Optsched-Epoch"] == "2"
        assert r2.headers["X-Optsched-Assurance-State"] == "filled-from-store"
        d2 = r2.json()
    # the server solved the second snapshot with the first decision's state filled in
    expected = solve_epoch({**second, "assurance_state": d1["assurance_state"]})
    assert d2["assurance_state"] == expected.model_dump(mode="json")["assurance_state"]
    assert d2["assurance"] == pytest.approx(expected.assurance)
    fresh = solve_epoch(second)  # without the state the vision tenant's wait would be forgotten
    assert fresh.assurance_state != expected.assurance_state
    assert Store(tmp_path / "serve.db").assurance_state("a") == d2["assurance_state"]


def test_bearer_token(pool: concurrent.futures.Executor, tmp_path: Path) -> None:
    with _client(pool, tmp_path, token="s3cret") as c:
        assert c.get("/healthz").status_code == 200
        r = c.post("/v1/clusters/c/epochs", json=_tiny())
        assert r.status_code == 401 and r.headers["WWW-Authenticate"] == "Bearer"
        assert "token" in r.json()["error"]
        assert c.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
        ok = c.post("/v1/clusters/c/epochs", json=_tiny(), headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200
        # the scheme's name is case-insensitive (RFC 7235 2.1); the token is not
        for scheme in ("bearer", "BEARER", "beArer"):
            r = c.get("/v1/clusters/c/decision", headers={"Authorization": f"{scheme} s3cret"})
            assert r.status_code == 200, scheme
        for wrong in ("bearer S3CRET", "Basic s3cret", "s3cret", "Bearer", "Bearers3cret"):
            assert c.get("/metrics", headers={"Authorization": wrong}).status_code == 401, wrong


def test_json_routes_answer_415_to_other_media_types(
    pool: concurrent.futures.Executor, tmp_path: Path
) -> None:
    body = json.dumps(_tiny()).encode()
    args = json.dumps(_json("extender_filter_args.json")).encode()
    with _client(pool, tmp_path) as c:
        for route, content in (("/v1/clusters/c/epochs", body), ("/v1/clusters/c/extender/filter", args)):
            for ctype in ("text/plain", "application/x-www-form-urlencoded",
                          "multipart/form-data; boundary=x", "application/jsonx", "text/json"):
                r = c.post(route, content=content, headers={"Content-Type": ctype})
                assert r.status_code == 415, (route, ctype)
                assert r.json()["error"] == (
                    f"content type '{ctype}' is not JSON: send Content-Type: application/json"
                )
            r = c.post(route, content=content, headers={"Content-Type": ""})
            assert r.status_code == 415
            # httpx sets no Content-Type for raw bytes
            r = c.post(route, content=content)
            assert r.status_code == 415
            assert r.json()["error"] == "no Content-Type: send Content-Type: application/json"
        assert c.get("/v1/clusters/c/decision").status_code == 404  # nothing was decided
        for ctype in ("application/json", "Application/JSON; charset=utf-8", "application/vnd.optsched+json"):
            r = c.post("/v1/clusters/c/epochs", content=body, headers={"Content-Type": ctype})
            assert r.status_code == 200, ctype
        assert c.get("/healthz").status_code == 200  # a GET needs no content type


def test_body_limit(pool: concurrent.futures.Executor, tmp_path: Path) -> None:
    with _client(pool, tmp_path, max_body_bytes=2048) as c:
        big = json.dumps(_tiny()).encode()
        assert len(big) > 2048
        r = c.post("/v1/clusters/c/epochs", content=big, headers={"Content-Type": "application/json"})
        assert r.status_code == 413 and "2048" in r.json()["error"]

        def chunks() -> Iterator[bytes]:  # no Content-Length: counted while it streams in
            for i in range(0, len(big), 1000):
                yield big[i : i + 1000]

        r = c.post("/v1/clusters/c/epochs", content=chunks(), headers={"Content-Type": "application/json"})
        assert r.status_code == 413
        assert c.get("/v1/clusters/c/decision").status_code == 404  # nothing was recorded

        # every route: an extender verb too, with or without Content-Length, is 413 (never 400)
        args = _json("extender_filter_args.json")
        args["Pod"]["metadata"]["annotations"] = {"pad": "x" * 4096}
        raw = json.dumps(args).encode()
        for route in ("filter", "prioritize", "preempt"):
            r = c.post(f"/v1/clusters/c/extender/{route}", content=iter([raw[:1500], raw[1500:]]),
                       headers={"Content-Type": "application/json"})
            assert r.status_code == 413 and r.json()["error"] == "request body over 2048 bytes", route
            r = c.post(f"/v1/clusters/c/extender/{route}", content=raw,
                       headers={"Content-Type": "application/json"})
            assert r.status_code == 413, route
        small = json.dumps(_json("extender_filter_args.json")).encode()
        assert len(small) <= 2048
        r = c.post("/v1/clusters/c/extender/filter", content=iter([small[:100], small[100:]]),
                   headers={"Content-Type": "application/json"})
        assert r.status_code == 200  # a chunked body within the limit reaches the route whole


def test_malformed_requests_name_the_field(pool: concurrent.futures.Executor, tmp_path: Path) -> None:
    with _client(pool, tmp_path) as c:
        r = c.post(
            "/v1/clusters/c/epochs", content=b"{not json", headers={"Content-Type": "application/json"}
        )
        assert r.status_code == 400 and r.json()["error"].startswith("malformed JSON")

        bad = _tiny()
        bad["jobs"][3]["tenant"] = "x"
        r = c.post("/v1/clusters/c/epochs", json=bad)
        assert r.status_code == 422
        assert r.json() == {"error": "jobs[3].tenant: unknown tenant 'x'"}

        shape = _tiny()
        shape["jobs"][1]["gpus"] = "many"
        r = c.post("/v1/clusters/c/epochs", json=shape)
        assert r.status_code == 422 and r.json()["error"].startswith("jobs[1].gpus: ")

        r = c.post("/v1/clusters/c/epochs", json=[1, 2])
        assert r.status_code == 422

        args = _json("extender_filter_args.json")
        del args["Pod"]
        r = c.post("/v1/clusters/c/extender/filter", json=args)
        assert r.status_code == 422 and r.json()["error"] == "Pod: required field is missing"
        args = _json("extender_filter_args.json")
        args["NodeNames"] = ["n0", 7]
        r = c.post("/v1/clusters/c/extender/filter", json=args)
        assert r.status_code == 422 and r.json()["error"].startswith("NodeNames[1]: ")
        r = c.post(
            "/v1/clusters/c/extender/filter", content=b"[", headers={"Content-Type": "application/json"}
        )
        assert r.status_code == 400

        r = c.post("/v1/clusters/bad%20id/epochs", json=_tiny())
        assert r.status_code == 422 and r.json()["error"].startswith("cluster: ")
        assert c.get("/v1/clusters/c/decision").status_code == 404


def test_timeouts_answer_503_and_504(pool: concurrent.futures.Executor, tmp_path: Path) -> None:
    venus = generate("venus", 0)
    with _client(pool, tmp_path, timeout_s=0.05) as c:
        r = c.post("/v1/clusters/v/epochs", json=venus)  # a Venus-size epoch takes ~0.6 s
        assert r.status_code == 504 and "0.05" in r.json()["error"]
        svc = c.app.state.service  # type: ignore[attr-defined]
        import asyncio

        lock = asyncio.Lock()
        svc._locks["busy"] = lock
        c.portal.call(lock.acquire)  # type: ignore[union-attr]
        r = c.post("/v1/clusters/busy/epochs", json=_tiny())
        assert r.status_code == 503 and "busy" in r.json()["error"]
        lock.release()


def test_a_partitioned_request_starts_its_part_workers_before_the_solve_clock(
    pool: concurrent.futures.Executor, tmp_path: Path
) -> None:
    """The first partitioned request of a pool process used to start its part workers inside
    the parts' 1 s deadline (every part then answered by its greedy plan); now they are started
    and set up first, within what the request's budget leaves after the time limit."""
    data = generate("venus", 7)
    data["options"] = {**(data.get("options") or {}), "partitions": 2}
    body = json.dumps(data).encode()
    state = ClusterState.from_snapshot(parse_snapshot(data))
    # 1.5 s of budget leaves nothing beyond the 1 s limit and the margin: no waiting for workers
    short = pool.submit(solve_request, body, None, 1.5).result()
    assert short["kind"] == "ok" and short["part_workers"] == 0
    res = pool.submit(solve_request, body, None, 60.0).result()
    assert res["kind"] == "ok" and res["part_workers"] == min(2, os.cpu_count() or 1)
    for out in (short["decision"], res["decision"]):
        d = Decision.model_validate(out)
        assert d.solver.backend.startswith("partitioned:") and check_decision(state, d) == []
    with _client(pool, tmp_path) as c:
        r = c.post("/v1/clusters/p/epochs", json=data)
        assert r.status_code == 200, r.text
        assert check_decision(state, Decision.model_validate(r.json())) == []


def _decided(c: TestClient, cluster: str = "k") -> Decision:
    r = c.post(f"/v1/clusters/{cluster}/epochs", json=_json("extender_snapshot.json"))
    assert r.status_code == 200, r.text
    return Decision.model_validate(r.json())


FILTER_KEYS = {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}


def test_extender_filter_by_contract(pool: concurrent.futures.Executor, tmp_path: Path) -> None:
    with _client(pool, tmp_path) as c:
        none = c.post("/v1/clusters/k/extender/filter", json=_json("extender_filter_args.json")).json()
        assert set(none) == FILTER_KEYS and "no decided epoch" in none["Error"]

        decision = _decided(c)
        # node-cache capable form (NodeNames); the pod maps to its job by annotation
        r = c.post("/v1/clusters/k/extender/filter", json=_json("extender_filter_args.json"))
        assert r.status_code == 200 and r.json() == _json("extender_filter_result.json")

        # full Nodes form; the pod maps to its job by name; a queued job fails everywhere
        r = c.post("/v1/clusters/k/extender/filter", json=_json("extender_filter_nodes_args.json")).json()
        assert set(r) == FILTER_KEYS and r["NodeNames"] is None and r["Nodes"]["items"] == []
        from optsched.engine.explain import describe_job
        from optsched.hosts.reasons import summary

        state = ClusterState.from_snapshot(parse_snapshot(_json("extender_snapshot.json")))
        reason = summary("\n".join(describe_job(state, decision, "audio-extra")))
        assert reason.startswith("job audio-extra (tenant audio")
        assert decision.queue_reasons["audio-extra"] in reason
        assert r["FailedAndUnresolvableNodes"] == {
            n: f"optsched plan queues job 'audio-extra': {reason}" for n in ("n0", "n1")
        }
        assert r["FailedNodes"] == {} and r["Error"] == ""

        # a running job passes where it runs; a job the plan does not know is an error
        args = _json("extender_filter_args.json")
        args["Pod"]["metadata"]["annotations"] = {"optsched.io/job": "audio-run"}
        assert c.post("/v1/clusters/k/extender/filter", json=args).json()["NodeNames"] == ["n1"]
        args["Pod"]["metadata"]["annotations"] = {"optsched.io/job": "ghost"}
        assert "ghost" in c.post("/v1/clusters/k/extender/filter", json=args).json()["Error"]


def test_extender_prioritize_and_preempt_by_contract(
    pool: concurrent.futures.Executor, tmp_path: Path
) -> None:
    with _client(pool, tmp_path) as c:
        _decided(c)
        r = c.post("/v1/clusters/k/extender/preempt", json=_json("extender_preempt_meta_args.json"))
        # victims never seen as pods are named by their job id
        assert r.json() == {
            "NodeNameToMetaVictims": {"n0": {"Pods": [{"UID": "nlp-sweep"}], "NumPDBViolations": 0}}
        }

        r = c.post("/v1/clusters/k/extender/prioritize", json=_json("extender_prioritize_args.json"))
        assert r.status_code == 200 and r.json() == _json("extender_prioritize_result.json")
        r = c.post("/v1/clusters/k/extender/preempt", json=_json("extender_preempt_args.json"))
        assert r.status_code == 200 and r.json() == _json("extender_preempt_result.json")
        # once seen, a victim keeps its pod's UID in the node-cache capable form too
        r = c.post("/v1/clusters/k/extender/preempt", json=_json("extender_preempt_meta_args.json"))
        uid = _json("extender_preempt_result.json")["NodeNameToMetaVictims"]["n0"]["Pods"][0]["UID"]
        assert r.json()["NodeNameToMetaVictims"]["n0"]["Pods"] == [{"UID": uid}]

        queued = _json("extender_preempt_args.json")
        queued["Pod"]["metadata"] = {"name": "audio-extra"}
        assert c.post("/v1/clusters/k/extender/preempt", json=queued).json() == {"NodeNameToMetaVictims": {}}
        prio = _json("extender_prioritize_args.json")
        prio["Pod"]["metadata"] = {"name": "audio-extra"}
        assert [h["Score"] for h in c.post("/v1/clusters/k/extender/prioritize", json=prio).json()] == [0, 0]


def test_metrics_text(pool: concurrent.futures.Executor, tmp_path: Path) -> None:
    with _client(pool, tmp_path) as c:
        assert c.post("/v1/clusters/m/epochs", json=_tiny()).status_code == 200
        c.post("/v1/clusters/m/epochs", content=b"{", headers={"Content-Type": "application/json"})
        text = c.get("/metrics").text
    assert (
        'optsched_http_requests_total{method="POST",route="/v1/clusters/{cluster}/epochs",status="200"} 1.0'
        in text
    )
    assert 'route="/v1/clusters/{cluster}/epochs",status="400"} 1.0' in text
    assert "optsched_solve_seconds_bucket" in text and "optsched_solve_seconds_count 1.0" in text
    assert "optsched_decisions_total{status=" in text
    assert "optsched_fallbacks_total 0.0" in text
    assert "optsched_http_in_flight 1.0" in text  # the /metrics request itself


def test_real_server_on_loopback(tmp_path: Path) -> None:
    with serve_subprocess(tmp_path / "serve.db", token="t0k", capture=True) as srv:
        base = srv.base
        headers = {"Authorization": "Bearer t0k"}
        r = httpx.post(f"{base}/v1/clusters/tiny/epochs", json=_tiny(), headers=headers, timeout=30)
        assert r.status_code == 200, r.text
        assert Decision.model_validate(r.json()).now == _tiny()["now"]
        assert httpx.post(f"{base}/v1/clusters/tiny/epochs", json=_tiny(), timeout=30).status_code == 401
    proc = srv.proc
    out = proc.stdout.read().decode() if proc.stdout else ""
    # uvicorn shuts down gracefully, then re-raises SIGTERM so the exit status tells the signal
    assert proc.returncode in (0, -signal.SIGTERM), out
    assert "Traceback" not in out and "leaked" not in out, out

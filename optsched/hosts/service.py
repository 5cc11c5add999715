"""The HTTP policy service (``optsched serve``): snapshots in, checked decisions out.

Other hosts post a format-1 snapshot per epoch and get the decision back; the assurance state
lives server-side in the SQLite :class:`~optsched.hosts.store.Store` (a snapshot without
``assurance_state`` gets the one its cluster's last decision returned), and every decision and
its actions (start, preempt, queue, each with its reason) are recorded there. Kubernetes
scheduler extenders (``k8s.io/kube-scheduler/extender/v1``) read the current plan of a
cluster through the ``extender/filter``, ``extender/prioritize`` and ``extender/preempt``
verbs. The API, the limits and the extender mapping are described in ``docs/service.md``; the
request and answer models are in :mod:`optsched.hosts.service_api`, and
:func:`~optsched.hosts.serve_process.serve_subprocess` runs the real server for tests.

Concurrency: one event loop answers every request; solves run in a process pool (``workers``
processes, ``spawn`` start method), so epochs of different clusters are solved in parallel,
while a per-cluster lock serialises the epochs of one cluster so its assurance state advances
in order. Store reads and writes run in worker threads, never on the event loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hmac
import json
import multiprocessing
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio.to_thread
from fastapi import FastAPI, Request, Response
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from starlette.exceptions import HTTPException as StarletteHTTPException

import optsched
from optsched import Decision, Snapshot
from optsched.hosts.serve_process import ServeProcess, ServeStartError, free_port, serve_subprocess
from optsched.hosts.service_api import (
    JOB_ANNOTATION,
    MAX_EXTENDER_PRIORITY,
    ErrorBody,
    ExtenderArgs,
    ExtenderFilterResult,
    ExtenderPreemptionArgs,
    ExtenderPreemptionResult,
    Health,
    HostPriority,
    JobEntry,
    K8sPod,
    MetaPod,
    MetaVictims,
    NodeList,
    pod_job,
)
from optsched.hosts.store import Store

CLUSTER_ID = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclass(frozen=True)
class ServiceConfig:
    """How the service runs (``optsched serve`` options)."""

    db: str | Path = "optsched-serve.db"
    """The SQLite store (``":memory:"`` for tests)."""
    token: str | None = None
    """Bearer token every route but ``/healthz`` requires; ``None``: no authentication."""
    max_body_bytes: int = 32 * 1024 * 1024
    """Larger request bodies are answered 413."""
    timeout_s: float = 30.0
    """Per request: waiting for the cluster's lock (503 when it runs out) plus solving (504)."""
    workers: int = 2
    """Solver processes."""


# ---------------------------------------------------------------------------------- the solver
# Runs in the pool's processes: only picklable values cross, errors come back as values.

_WARM_UP: dict[str, Any] = {
    "format": 1,
    "now": 100.0,
    "gpu_types": {"g": {"memory_gib": 80}},
    "nodes": [{"id": "n0", "gpu_type": "g", "gpus": 2}],
    "tenants": [{"id": "t", "quota": {"g": 2}, "borrow_limit": None, "lend_limit": None}],
    "jobs": [
        {
            "id": "j",
            "tenant": "t",
            "qos": "guaranteed",
            "gpus": 1,
            "gpu_types": None,
            "submit_s": 50.0,
            "state": "pending",
        }
    ],
}


PRESTART_MARGIN_S = 2.0
"""Seconds of a request's budget kept, beyond the snapshot's time limit, for the stages after the
solve (explaining, recording) when part workers are started ahead of a partitioned solve."""


def _warm_up() -> int:
    """Import the engine and load the default predictor in a pool process."""
    from optsched import solve_epoch

    solve_epoch(_WARM_UP)
    return os.getpid()


def _nodes(allocation: list[dict[str, Any]] | None) -> list[str]:
    return sorted({g["node"] for g in allocation or ()})


def solve_request(
    body: bytes, stored_state: dict[str, Any] | None, budget_s: float | None = None
) -> dict[str, Any]:
    """Parse, fill the assurance state, solve; what the service records and answers.

    ``solve_epoch`` passes every decision through the checker before it returns it (else it
    raises :class:`~optsched.errors.OptschedError`), so the service does not check it again.

    A partitioned snapshot's part workers are started and set up before the solve's clock
    starts (:func:`~optsched.engine.epoch.start_part_workers`, as ``optsched solve`` does), for
    at most what ``budget_s`` (the request's remaining seconds) leaves after the snapshot's
    time limit and :data:`PRESTART_MARGIN_S`; the first partitioned request of a pool process
    would otherwise start them inside the parts' deadline (then every part falls back to its
    greedy plan). Later requests find them idle and set up.

    Returns ``{"kind": "ok", "decision": {...}, "actions": [...], "plan": {...}, "seconds": s,
    "filled": bool, "part_workers": n}`` or ``{"kind": "json" | "snapshot" | "engine",
    "error": ...}``.
    """
    from optsched import (
        ClusterState,
        OptschedError,
        SnapshotError,
        parse_snapshot,
        solve_epoch,
    )
    from optsched.engine.epoch import resolve_params, start_part_workers
    from optsched.parallel import SETUP_TIMEOUT_S

    t0 = time.perf_counter()
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:  # also a 5,000-digit number, 10^5 nested lists
        return {"kind": "json", "error": f"malformed JSON: {exc}"}
    if not isinstance(data, dict):
        return {"kind": "snapshot", "error": "the snapshot must be a JSON object"}
    filled = False
    if data.get("assurance_state") is None and stored_state:
        data["assurance_state"] = stored_state
        filled = True
    try:
        state = ClusterState.from_snapshot(parse_snapshot(data))
    except SnapshotError as exc:
        return {"kind": "snapshot", "error": str(exc), "path": exc.path}
    try:
        left = SETUP_TIMEOUT_S if budget_s is None else budget_s - (time.perf_counter() - t0)
        limit_s = resolve_params(state.snapshot, None).time_limit_s
        wait_s = min(SETUP_TIMEOUT_S, left - limit_s - PRESTART_MARGIN_S)
        part_workers = start_part_workers(state, timeout_s=wait_s) if wait_s > 0 else 0
        decision = solve_epoch(state)
    except OptschedError as exc:
        return {"kind": "engine", "error": str(exc)}
    from optsched.hosts.reasons import explain_jobs

    out = json.loads(decision.model_dump_json(exclude_none=True))
    reasons = explain_jobs(state, decision)
    return {
        "kind": "ok",
        "decision": out,
        "actions": _actions(out),
        "reasons": reasons,
        "plan": _plan(data, out, reasons),
        "seconds": time.perf_counter() - t0,
        "filled": filled,
        "part_workers": part_workers,
    }


def _actions(decision: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """``(job, action, outcome, reason)`` rows of a decision for the store."""
    rows: list[tuple[str, str, str, str]] = []
    for s in decision.get("start", []):
        if s.get("colocated_with"):
            why = "MPS guest of " + ",".join(s["colocated_with"])
        else:
            why = "on loan" if s.get("on_loan") else "in quota"
        rows.append((s["job"], "start", "planned", why))
    rows += [(p["job"], "preempt", "planned", str(p["reason"])) for p in decision.get("preempt", [])]
    reasons = decision.get("queue_reasons", {})
    rows += [(j, "queue", "planned", str(reasons.get(j, ""))) for j in decision.get("queue", [])]
    return rows


def _plan(
    snapshot: dict[str, Any], decision: dict[str, Any], reasons: dict[str, str] | None = None
) -> dict[str, Any]:
    """What the extender verbs read: nodes per started/kept job, victims per node, queue (each
    queued job with the one-line summary of its ``optsched explain`` text, else its code)."""
    from optsched.hosts.reasons import summary

    running = {
        j["id"]: _nodes(j.get("allocation")) for j in snapshot.get("jobs", []) if j.get("state") == "running"
    }
    reasons_text = reasons or {}
    preempted = {p["job"]: p["reason"] for p in decision.get("preempt", [])}
    victims: dict[str, list[str]] = {}
    for job in preempted:
        for node in running.get(job, []):
            victims.setdefault(node, []).append(job)
    reasons = decision.get("queue_reasons", {})
    return {
        "start": {s["job"]: _nodes(s.get("allocation")) for s in decision.get("start", [])},
        "running": {j: n for j, n in running.items() if j not in preempted},
        "preempted": preempted,
        "victims": victims,
        "queue": {
            j: summary(reasons_text[j]) if j in reasons_text else str(reasons.get(j, ""))
            for j in decision.get("queue", [])
        },
    }


# ---------------------------------------------------------------------------------- plumbing


def _loc(loc: tuple[Any, ...] | list[Any]) -> str:
    """A request-validation location as a field path, without FastAPI's ``body``/``path``
    prefix (the engine's own :func:`~optsched.engine.state.error_path` does the rest)."""
    from optsched.engine.state import error_path

    parts = tuple(loc)
    if parts and parts[0] in ("body", "path", "query", "header"):
        parts = parts[1:]
    return error_path(parts)


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


class _Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "optsched_http_requests",
            "HTTP requests by route, method and status",
            ["route", "method", "status"],
            registry=r,
        )
        self.in_flight = Gauge("optsched_http_in_flight", "HTTP requests being answered", registry=r)
        self.solve_seconds = Histogram(
            "optsched_solve_seconds",
            "Seconds a solver process spent on one epoch (parse, solve, check)",
            buckets=(0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 5.0, 10.0, 30.0),
            registry=r,
        )
        self.decisions = Counter("optsched_decisions", "Decisions by status", ["status"], registry=r)
        self.fallbacks = Counter(
            "optsched_fallbacks", "Decisions a heuristic answered (status fallback)", registry=r
        )


def _is_json(content_type: str | None) -> bool:
    """``application/json`` or a ``+json`` type, parameters and case aside."""
    if content_type is None:
        return False
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def _bearer_ok(authorization: str | None, token: str) -> bool:
    """Whether ``Authorization`` carries ``token`` in the Bearer scheme (the scheme's name is
    case-insensitive, RFC 7235 §2.1; the credentials are compared in constant time)."""
    scheme, _, credentials = (authorization or "").strip().partition(" ")
    good = hmac.compare_digest(credentials.strip().encode(), token.encode())
    return scheme.lower() == "bearer" and good


BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
"""Methods whose routes read a JSON body (every such route of the service does)."""


class _Guard:
    """Outer ASGI layer: bearer token (401), media type (415), body limit (413), in-flight gauge
    and request counter.

    The body is read here, counted while it streams in (``Content-Length`` or chunked alike),
    and handed to the routes only when it is within the limit: a route never sees a body over
    the limit, so every route answers 413, never a parse error."""

    def __init__(self, app: ASGIApp, service: Service) -> None:
        self.app = app
        self.service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        cfg = self.service.config
        status = {"code": 500}

        async def send_(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = int(message["status"])
            await send(message)

        m = self.service.metrics
        m.in_flight.inc()
        try:
            early = self._refuse(scope, cfg)
            if early is None and scope.get("method") in BODY_METHODS:
                body, early = await self._read_body(receive, cfg.max_body_bytes)
                if early is None:
                    receive = _replay(body, receive)
            if early is not None:
                await early(scope, receive, send_)
                return
            await self.app(scope, receive, send_)
        finally:
            m.in_flight.dec()
            route = scope.get("route")
            name = getattr(route, "path", None) or "unmatched"
            m.requests.labels(name, scope.get("method", ""), str(status["code"])).inc()

    @staticmethod
    async def _read_body(receive: Receive, limit: int) -> tuple[bytes, JSONResponse | None]:
        """The whole body, or a 413 as soon as more than ``limit`` bytes came in."""
        chunks: list[bytes] = []
        seen = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > limit:
                return b"", _error(413, f"request body over {limit} bytes")
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks), None

    def _refuse(self, scope: Scope, cfg: ServiceConfig) -> JSONResponse | None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        public = scope.get("path") == "/healthz"
        if cfg.token is not None and not public and not _bearer_ok(headers.get("authorization"), cfg.token):
            return _error(401, "missing or wrong bearer token", {"WWW-Authenticate": "Bearer"})
        if scope.get("method") in BODY_METHODS and not _is_json(headers.get("content-type")):
            given = headers.get("content-type")
            return _error(
                415,
                f"content type {given!r} is not JSON: send Content-Type: application/json"
                if given is not None
                else "no Content-Type: send Content-Type: application/json",
            )
        length = headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > cfg.max_body_bytes:
            return _error(413, f"request body over {cfg.max_body_bytes} bytes")
        return None


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that yields ``body`` once, then what the client sends next (a disconnect)."""
    sent = False

    async def receive_() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return receive_


async def _acquire(lock: asyncio.Lock, timeout: float) -> bool:
    """Take ``lock`` within ``timeout`` seconds (never leaves it taken on a timeout)."""
    task = asyncio.ensure_future(lock.acquire())
    done, _ = await asyncio.wait({task}, timeout=max(0.0, timeout))
    if task in done:
        return True
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        return False
    lock.release()  # acquired just as it was cancelled
    return False


@dataclass
class _Latest:
    epoch: int
    decision: dict[str, Any]
    plan: dict[str, Any]


class Service:
    """State of one running service: store, process pool, per-cluster locks, metrics."""

    def __init__(self, config: ServiceConfig, executor: concurrent.futures.Executor | None = None) -> None:
        self.config = config
        self.store = Store(config.db)
        self.metrics = _Metrics()
        self._own_pool = executor is None
        self.pool: concurrent.futures.Executor = executor or self._new_pool()
        self._locks: dict[str, asyncio.Lock] = {}
        self._latest: dict[str, _Latest] = {}
        self._uids: dict[str, dict[str, str]] = {}
        """Per cluster: job -> the UID of the pod last seen for it in an extender call."""

    def _new_pool(self) -> concurrent.futures.ProcessPoolExecutor:
        ctx = multiprocessing.get_context("spawn")
        return concurrent.futures.ProcessPoolExecutor(max_workers=self.config.workers, mp_context=ctx)

    async def warm_up(self) -> None:
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(self.pool, _warm_up) for _ in range(self.config.workers)))

    def close(self) -> None:
        if self._own_pool:
            self.pool.shutdown(wait=True, cancel_futures=True)
        self.store.close()

    # ------------------------------------------------------------------ epochs
    async def epoch(self, cluster: str, body: bytes) -> Response:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.timeout_s
        lock = self._locks.setdefault(cluster, asyncio.Lock())
        if not await _acquire(lock, self.config.timeout_s):
            waited = self.config.timeout_s
            msg = f"cluster '{cluster}': an earlier epoch is still being solved after {waited:g} s"
            return _error(503, msg, {"Retry-After": "1"})
        try:
            stored = await anyio.to_thread.run_sync(self.store.assurance_state, cluster)
            fut = loop.run_in_executor(self.pool, solve_request, body, stored, deadline - loop.time())
            try:
                res = await asyncio.wait_for(fut, max(0.001, deadline - loop.time()))
            except TimeoutError:
                return _error(504, f"no decision within {self.config.timeout_s:g} s")
            except concurrent.futures.process.BrokenProcessPool:
                if self._own_pool:
                    self.pool = self._new_pool()
                return _error(503, "a solver process died; the pool was restarted")
            kind = res["kind"]
            if kind == "json":
                return _error(400, res["error"])
            if kind == "snapshot":
                return _error(422, res["error"])
            if kind != "ok":
                return _error(500, f"{kind}: {res['error']}")
            decision = res["decision"]
            status = str(decision.get("status", ""))
            self.metrics.solve_seconds.observe(res["seconds"])
            self.metrics.decisions.labels(status).inc()
            if status == "fallback":
                self.metrics.fallbacks.inc()
            text = body.decode("utf-8", "replace")
            seq, out = await anyio.to_thread.run_sync(self._record, cluster, text, decision, res)
            plan = res["plan"]
            self._latest[cluster] = _Latest(seq, decision, plan)
            if cluster in self._uids:  # forget pods of jobs the cluster no longer has
                jobs = set(plan["start"]) | set(plan["running"]) | set(plan["preempted"]) | set(plan["queue"])
                self._uids[cluster] = {j: u for j, u in self._uids[cluster].items() if j in jobs}
            headers = {"X-Optsched-Epoch": str(seq)}
            if res["filled"]:
                headers["X-Optsched-Assurance-State"] = "filled-from-store"
            return Response(out, media_type="application/json", headers=headers)
        finally:
            lock.release()

    def _record(
        self, cluster: str, text: str, decision: dict[str, Any], res: dict[str, Any]
    ) -> tuple[int, str]:
        seq = self.store.record_epoch(cluster, text, decision, res["actions"], res.get("reasons"))
        self.store.set_meta(cluster, "plan", {"epoch": seq, **res["plan"]})
        return seq, json.dumps(decision)

    async def latest(self, cluster: str) -> _Latest | None:
        got = self._latest.get(cluster)
        if got is not None:
            return got

        def load() -> _Latest | None:
            rec = self.store.latest(cluster)
            if rec is None:
                return None
            plan = self.store.get_meta(cluster, "plan") or {}
            if plan.get("epoch") != rec.seq:
                plan = {}
            return _Latest(rec.seq, rec.decision, plan)

        got = await anyio.to_thread.run_sync(load)
        if got is not None:
            self._latest.setdefault(cluster, got)
        return got

    async def job(self, cluster: str, job: str) -> JobEntry | None:
        entry = await self._job(cluster, job)
        if entry is not None:
            why = await anyio.to_thread.run_sync(self.store.reason, cluster, job)
            if why is not None and why[0] == entry.epoch:
                entry.explanation = why[1].splitlines()
        return entry

    async def _job(self, cluster: str, job: str) -> JobEntry | None:
        got = await self.latest(cluster)
        if got is not None:
            entry = _entry(cluster, job, got.epoch, got.decision)
            if entry is not None:
                return entry
        acts = await anyio.to_thread.run_sync(lambda: self.store.actions(cluster, job))
        acts = [a for a in acts if a.action in ("start", "preempt", "queue")]
        if not acts:
            return None
        last = acts[-1]
        rec = next(
            (
                e
                for e in await anyio.to_thread.run_sync(self.store.epochs, cluster, 1000)
                if e.seq == last.seq
            ),
            None,
        )
        if rec is not None:
            entry = _entry(cluster, job, rec.seq, rec.decision)
            if entry is not None:
                return entry
        return JobEntry(
            cluster=cluster,
            job=job,
            epoch=last.seq,
            now=0.0,
            status="",
            action=last.action,
            reason=last.reason,
        )

    # ------------------------------------------------------------------ extender
    def _remember(self, cluster: str, pod: K8sPod) -> str:
        job = pod_job(pod)
        if pod.metadata.uid:
            self._uids.setdefault(cluster, {})[job] = pod.metadata.uid
        return job

    async def _plan_for(self, cluster: str, pod: K8sPod) -> tuple[str, dict[str, Any] | None, str]:
        """(job, plan, error): the plan is ``None`` with an error when there is none to read."""
        job = self._remember(cluster, pod)
        got = await self.latest(cluster)
        if got is None or not got.plan:
            return job, None, f"cluster '{cluster}' has no decided epoch yet"
        return job, got.plan, ""

    async def filter(self, cluster: str, args: ExtenderArgs) -> ExtenderFilterResult:
        job, plan, err = await self._plan_for(cluster, args.Pod)
        given = (
            [n.metadata.name for n in args.Nodes.items]
            if args.Nodes is not None
            else list(args.NodeNames or [])
        )
        if plan is None:
            return ExtenderFilterResult(Error=err)
        ok, why = _allowed(job, plan)
        passing = [n for n in given if n in ok]
        failed = {n: why for n in given if n not in ok}
        out = ExtenderFilterResult(FailedAndUnresolvableNodes=failed)
        if args.Nodes is not None:
            out.Nodes = NodeList(items=[n for n in args.Nodes.items if n.metadata.name in ok])
        else:
            out.NodeNames = passing
        if not ok and job not in plan["queue"] and job not in plan["preempted"]:
            out.Error = f"job '{job}' is not in the current plan of cluster '{cluster}'"
        return out

    async def prioritize(self, cluster: str, args: ExtenderArgs) -> list[HostPriority]:
        job, plan, _ = await self._plan_for(cluster, args.Pod)
        given = (
            [n.metadata.name for n in args.Nodes.items]
            if args.Nodes is not None
            else list(args.NodeNames or [])
        )
        ok = _allowed(job, plan)[0] if plan is not None else set()
        return [HostPriority(Host=n, Score=MAX_EXTENDER_PRIORITY if n in ok else 0) for n in given]

    async def preempt(self, cluster: str, args: ExtenderPreemptionArgs) -> ExtenderPreemptionResult:
        job, plan, _ = await self._plan_for(cluster, args.Pod)
        if plan is None or job not in plan["start"]:
            return ExtenderPreemptionResult()
        pdb: dict[str, int] = {}
        for node, v in (args.NodeNameToVictims or {}).items():
            pdb[node] = v.NumPDBViolations
            for p in v.Pods:
                self._remember(cluster, p)
        uids = self._uids.get(cluster, {})
        for node, mv in (args.NodeNameToMetaVictims or {}).items():
            pdb[node] = mv.NumPDBViolations
        planned = plan["start"][job]
        candidates = list(pdb) if pdb else planned
        result: dict[str, MetaVictims] = {}
        for node in candidates:
            if node not in planned:
                continue
            victims = plan["victims"].get(node, [])
            result[node] = MetaVictims(
                Pods=[MetaPod(UID=uids.get(v, v)) for v in victims], NumPDBViolations=pdb.get(node, 0)
            )
        return ExtenderPreemptionResult(NodeNameToMetaVictims=result)


def _allowed(job: str, plan: dict[str, Any]) -> tuple[set[str], str]:
    """Nodes the plan puts ``job`` on, and why every other node fails."""
    if job in plan["start"]:
        nodes = plan["start"][job]
        return set(nodes), f"optsched plan places job '{job}' on {', '.join(nodes)}"
    if job in plan["running"]:
        nodes = plan["running"][job]
        return set(nodes), f"job '{job}' keeps running on {', '.join(nodes)}"
    if job in plan["queue"]:
        return set(), f"optsched plan queues job '{job}': {plan['queue'][job] or 'queued'}"
    if job in plan["preempted"]:
        return set(), f"optsched plan preempts job '{job}': {plan['preempted'][job]}"
    return set(), f"job '{job}' is not in the current plan"


def _entry(cluster: str, job: str, epoch: int, d: dict[str, Any]) -> JobEntry | None:
    base: dict[str, Any] = {
        "cluster": cluster,
        "job": job,
        "epoch": epoch,
        "now": float(d.get("now", 0.0)),
        "status": str(d.get("status", "")),
        "notes": list(d.get("solver", {}).get("notes", [])),
    }
    for s in d.get("start", []):
        if s["job"] == job:
            why = _actions({"start": [s]})[0][3]
            return JobEntry(
                **base,
                action="start",
                reason=why,
                allocation=s.get("allocation"),
                on_loan=bool(s.get("on_loan")),
                colocated_with=s.get("colocated_with"),
            )
    for p in d.get("preempt", []):
        if p["job"] == job:
            return JobEntry(**base, action="preempt", reason=str(p["reason"]), lost_s=p.get("lost_s"))
    queue = d.get("queue", [])
    if job in queue:
        why = str(d.get("queue_reasons", {}).get(job, ""))
        return JobEntry(**base, action="queue", reason=why, queue_position=queue.index(job))
    return None


# ---------------------------------------------------------------------------------- the app

_ERRORS: dict[int | str, dict[str, Any]] = {
    c: {"model": ErrorBody} for c in (400, 401, 404, 413, 415, 422, 500, 503, 504)
}


def create_app(config: ServiceConfig, executor: concurrent.futures.Executor | None = None) -> FastAPI:
    """The ASGI application. ``executor`` replaces the service's own process pool (tests)."""
    svc = Service(config, executor)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await svc.warm_up()
        try:
            yield
        finally:
            svc.close()

    app = FastAPI(
        title="optsched policy service",
        version=optsched.__version__,
        description="Format-1 snapshots in, checked decisions out; assurance state kept per cluster; "
        "Kubernetes scheduler-extender verbs read the current plan. See docs/service.md.",
        lifespan=lifespan,
        responses=_ERRORS,
    )
    app.state.service = svc
    app.add_middleware(_Guard, service=svc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errs = list(exc.errors())
        first: dict[str, Any] = dict(errs[0]) if errs else {"loc": (), "msg": "invalid request", "type": ""}
        if first.get("type") == "json_invalid":
            ctx = first.get("ctx") or {}
            return _error(400, f"malformed JSON: {ctx.get('error', first.get('msg'))}")
        path = _loc(first.get("loc", ()))
        msg = "required field is missing" if first.get("type") == "missing" else str(first.get("msg"))
        return _error(422, f"{path}: {msg}" if path else msg)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error(exc.status_code, str(exc.detail), dict(exc.headers or {}))

    cluster_id = PathParam(pattern=CLUSTER_ID, description="The cluster's id (letters, digits, . _ -).")

    @app.get("/healthz", response_model=Health, tags=["service"])
    async def healthz() -> Health:
        """Liveness; never asks for the token."""
        return Health(version=optsched.__version__, workers=config.workers)

    @app.get("/metrics", tags=["service"], response_class=Response)
    async def metrics() -> Response:
        """Prometheus text: requests by route and status, solve seconds, decisions by status,
        fallbacks, requests in flight."""
        return Response(generate_latest(svc.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.post(
        "/v1/clusters/{cluster}/epochs",
        tags=["epochs"],
        responses={200: {"model": Decision, "description": "The checked decision."}},
        openapi_extra={
            "requestBody": {
                "required": True,
                "description": "A format-1 snapshot; `assurance_state` left out is filled from the "
                "cluster's last decision.",
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Snapshot"}}},
            }
        },
    )
    async def post_epoch(request: Request, cluster: str = cluster_id) -> Response:
        """Decide one epoch of ``cluster``: the decision is checked, recorded with its actions,
        and its assurance state kept for the next epoch."""
        body = await request.body()
        return await svc.epoch(cluster, body)

    @app.get(
        "/v1/clusters/{cluster}/decision",
        tags=["epochs"],
        responses={200: {"model": Decision, "description": "The latest decision."}},
    )
    async def get_decision(cluster: str = cluster_id) -> Response:
        """The latest decision of ``cluster`` (its epoch number in ``X-Optsched-Epoch``)."""
        got = await svc.latest(cluster)
        if got is None:
            return _error(404, f"cluster '{cluster}' has no decided epoch")
        return JSONResponse(got.decision, headers={"X-Optsched-Epoch": str(got.epoch)})

    @app.get("/v1/clusters/{cluster}/jobs/{job}", response_model=JobEntry, tags=["epochs"])
    async def get_job(job: str, cluster: str = cluster_id) -> Any:
        """The job's entry in the latest decision that names it (start, preempt or queue), with
        its reason, the text `optsched explain` prints for it, and that decision's notes."""
        entry = await svc.job(cluster, job)
        if entry is None:
            return _error(404, f"job '{job}' appears in no decision of cluster '{cluster}'")
        return entry

    @app.post(
        "/v1/clusters/{cluster}/extender/filter", response_model=ExtenderFilterResult, tags=["extender"]
    )
    async def extender_filter(args: ExtenderArgs, cluster: str = cluster_id) -> ExtenderFilterResult:
        """ExtenderArgs -> ExtenderFilterResult: only the nodes the current plan gives the pod pass."""
        return await svc.filter(cluster, args)

    @app.post(
        "/v1/clusters/{cluster}/extender/prioritize", response_model=list[HostPriority], tags=["extender"]
    )
    async def extender_prioritize(args: ExtenderArgs, cluster: str = cluster_id) -> list[HostPriority]:
        """ExtenderArgs -> HostPriorityList: the planned node scores 10, the others 0."""
        return await svc.prioritize(cluster, args)

    @app.post(
        "/v1/clusters/{cluster}/extender/preempt", response_model=ExtenderPreemptionResult, tags=["extender"]
    )
    async def extender_preempt(
        args: ExtenderPreemptionArgs, cluster: str = cluster_id
    ) -> ExtenderPreemptionResult:
        """ExtenderPreemptionArgs -> ExtenderPreemptionResult: the victims the plan preempts on
        the node(s) it gives the pod."""
        return await svc.preempt(cluster, args)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title, version=app.version, description=app.description, routes=app.routes
            )
            comps = schema.setdefault("components", {}).setdefault("schemas", {})
            snap = Snapshot.model_json_schema(ref_template="#/components/schemas/{model}")
            for name, sub in snap.pop("$defs", {}).items():
                comps.setdefault(name, sub)
            comps["Snapshot"] = snap
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


def run(config: ServiceConfig, host: str = "127.0.0.1", port: int = 8080, log_level: str = "info") -> None:
    """Serve until interrupted (one event loop; ``config.workers`` solver processes)."""
    import uvicorn

    uvicorn.run(create_app(config), host=host, port=port, log_level=log_level, timeout_graceful_shutdown=10)


# The API models live in optsched.hosts.service_api and the subprocess launcher in
# optsched.hosts.serve_process; the names of both that callers of the earlier single module
# imported from here are re-exported.
__all__ = [
    "JOB_ANNOTATION",
    "ExtenderArgs",
    "ExtenderFilterResult",
    "ExtenderPreemptionArgs",
    "ExtenderPreemptionResult",
    "HostPriority",
    "JobEntry",
    "ServeProcess",
    "ServeStartError",
    "Service",
    "ServiceConfig",
    "create_app",
    "free_port",
    "pod_job",
    "run",
    "serve_subprocess",
    "solve_request",
]

"""Discrete-event workflow simulator: one policy, one workload, noisy ground truth.

Every ``epoch_s`` of simulated time in which something changed (an arrival or a completion)
the simulator writes a format-1 :class:`~optsched.schema.snapshot.Snapshot` of the serving
pool (models with the *predicted* ``load_s``, devices with ``resident`` and ``busy_until_s``,
sessions with activation states), builds a :class:`ClusterState`, asks the policy for a
:class:`~optsched.schema.decision.WorkflowPlan`, checks it with invariant 6, and executes it:

* each device runs its planned units in planned order; a unit starts when the device is free,
  its dependencies are done and its model is loaded;
* model actions run in planned order per device: an eviction once the units planned before it
  that use the model are done, a load once its time has come and the true memory allows; loads
  overlap computation (load-ahead) when the plan says so.

Ground truth differs from what the planner sees: each GPU type's true speed is off by a seeded
factor (lognormal, sigma 0.15), each unit's duration by lognormal noise (sigma 0.25), each load
by lognormal noise (sigma 0.15). Metrics: session latency (finish − arrival), makespan, and
GPU-seconds split into compute, loading and idle-with-a-model-resident.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from optsched.engine.state import ClusterState
from optsched.engine.workflows.check import check_workflow_plan
from optsched.engine.workflows.problem import model_spec, unit_seconds
from optsched.predict.activation import ActivationPredictor, ModelSpec
from optsched.schema.decision import Unit, WorkflowPlan
from optsched.schema.snapshot import Snapshot
from optsched.sim.workflows.workloads import MODELS, POOL, SessionSpec

Policy = Callable[[ClusterState, float, int], WorkflowPlan]
"""(state, time limit in seconds, seed) -> plan."""


@dataclass
class WorkflowSimConfig:
    epoch_s: float = 2.0
    loader: str = "safetensors"
    load_speedup: float = 1.0
    """Multiplies the loading bandwidth (the load-time sweep)."""
    type_sigma: float = 0.15
    unit_sigma: float = 0.25
    load_sigma: float = 0.15
    planner_time_s: float = 1.0
    pool: tuple[tuple[str, int], ...] = POOL
    max_time_s: float = 36000.0


@dataclass
class SimResult:
    policy: str
    latencies: list[float]
    makespan_s: float
    gpu_compute_s: float
    gpu_loading_s: float
    gpu_idle_resident_s: float
    loads: int
    evictions: int
    planner_seconds: list[float]
    violations: int
    plans: int
    fallbacks: int
    trace: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, float]:
        lat = np.array(self.latencies)
        n = max(1, len(lat))
        return {
            "makespan_s": self.makespan_s,
            "p50_latency_s": float(np.percentile(lat, 50)),
            "p95_latency_s": float(np.percentile(lat, 95)),
            "p99_latency_s": float(np.percentile(lat, 99)),
            "mean_latency_s": float(lat.mean()),
            "gpu_seconds_per_session": (self.gpu_compute_s + self.gpu_loading_s + self.gpu_idle_resident_s)
            / n,
            "gpu_compute_s_per_session": self.gpu_compute_s / n,
            "gpu_loading_s_per_session": self.gpu_loading_s / n,
            "gpu_idle_resident_s_per_session": self.gpu_idle_resident_s / n,
            "loads": float(self.loads),
            "evictions": float(self.evictions),
            "planner_seconds": float(np.mean(self.planner_seconds)) if self.planner_seconds else 0.0,
            "planner_seconds_max": max(self.planner_seconds, default=0.0),
            "plans": float(self.plans),
            "fallback_plans": float(self.fallbacks),
            "violations": float(self.violations),
        }


@dataclass
class _Dev:
    node: str
    gtype: str
    mem: float
    resident: dict[str, float] = field(default_factory=dict)
    """model -> time it is (or will be) ready."""
    running: tuple[str, float, float, float, str] | None = None
    """(unit id, start, true end, predicted end, model)."""
    loading: tuple[str, float] | None = None
    queue: list[Unit] = field(default_factory=list)
    actions: list[tuple[str, str, float]] = field(default_factory=list)
    """(model, load|evict, at_s) in planned order."""
    intervals: list[tuple[float, float, str]] = field(default_factory=list)
    """(start, end, compute|loading) for accounting."""
    resident_spans: list[tuple[float, float]] = field(default_factory=list)
    since: dict[str, float] = field(default_factory=dict)


class WorkflowSimulator:
    """Runs one policy over one list of sessions."""

    def __init__(
        self,
        sessions: list[SessionSpec],
        policy: Policy,
        *,
        name: str,
        seed: int = 0,
        config: WorkflowSimConfig | None = None,
        predictor: ActivationPredictor | None = None,
        capture_at: float | None = None,
    ) -> None:
        self.cfg = config or WorkflowSimConfig()
        self.capture_at = capture_at
        """Keep the first snapshot built at or after this time in ``trace["snapshot"]``."""
        self.sessions = {s.id: s for s in sessions}
        self.policy = policy
        self.name = name
        self.seed = seed
        self.pred = predictor or ActivationPredictor.default()
        rng = np.random.default_rng([seed, 101])
        self.type_factor = {t: float(rng.lognormal(0.0, self.cfg.type_sigma)) for t, _ in self.cfg.pool}
        self.noise_rng = np.random.default_rng([seed, 202])
        self.models = {m.name: m for m in MODELS}
        self.specs: dict[str, ModelSpec] = {m.name: model_spec(m.params_b, m.memory_gib) for m in MODELS}
        self.devs: dict[tuple[str, int], _Dev] = {}
        for t, count in self.cfg.pool:
            for g in range(count):
                mem = self.pred.coeffs(t).memory_gib
                self.devs[(f"{t}-{g}", 0)] = _Dev(node=f"{t}-{g}", gtype=t, mem=mem)
        self.state: dict[tuple[str, str], str] = {}
        self.finish: dict[tuple[str, str], float] = {}
        self.act: dict[tuple[str, str], dict[str, Any]] = {}
        for s in sessions:
            for a in s.activations:
                self.act[(s.id, a["id"])] = a
                self.state[(s.id, a["id"])] = "pending"
        self.retired: list[_Dev] = []
        """Devices that left the pool (lent GPUs given back), kept for the accounting."""
        self.unit_noise: dict[str, float] = {}
        self._wakes: set[float] = set()
        self.chain_tail: set[tuple[str, str]] = set()
        """Running activations in a later wave of a fused chain (reported as pending)."""

    # ------------------------------------------------------------------ helpers
    def _load_s_pred(self, model: str) -> float:
        return self.pred.load_s(self.specs[model], self.cfg.loader, self.cfg.load_speedup)

    def _true_unit_s(self, u: Unit, gtype: str) -> float:
        """The predicted duration times the type's hidden factor and the unit's noise."""
        base = self._pred_unit_s(u, gtype)
        key = f"{u.session}/{'+'.join(u.activations)}"
        if key not in self.unit_noise:
            self.unit_noise[key] = float(self.noise_rng.lognormal(0.0, self.cfg.unit_sigma))
        return base * self.type_factor[gtype] * self.unit_noise[key]

    def _pred_unit_s(self, u: Unit, gtype: str) -> float:
        members = []
        prev: str | None = None
        for aid in u.activations:
            a = self.act[(u.session, aid)]
            members.append((a["input_tokens"], a["output_tokens"], prev is not None and prev in a["after"]))
            prev = aid
        return unit_seconds(self.pred, self.specs[u.model], members, gtype)

    def snapshot(self, now: float) -> Snapshot:
        types = sorted({d.gtype for d in self.devs.values()})
        wf_sessions = []
        for sid, s in self.sessions.items():
            if s.arrival_s > now + 1e-9:
                continue
            if all(self.state[(sid, a["id"])] == "done" for a in s.activations):
                continue
            acts = []
            for a in s.activations:
                st = self.state[(sid, a["id"])]
                row: dict[str, Any] = {
                    k: a[k] for k in ("id", "model", "input_tokens", "output_tokens", "after")
                }
                row["state"] = st
                if st == "running" and (sid, a["id"]) in self.chain_tail:
                    row["state"] = st = "pending"  # later wave of a running fused chain
                if st == "running":
                    for key, d in self.devs.items():
                        if (
                            d.running
                            and d.running[0].startswith(f"{sid}|")
                            and a["id"] in d.running[0].split("|")[1].split("+")
                        ):
                            row["device"] = {"node": key[0], "gpu": key[1]}
                            row["start_s"] = d.running[1]
                acts.append(row)
            wf_sessions.append({"id": sid, "tenant": "agents", "arrival_s": s.arrival_s, "activations": acts})
        pool = []
        for key, d in self.devs.items():
            busy = now
            if d.running:
                busy = max(now + 0.05, d.running[3])
            if d.loading:
                busy = max(busy, d.resident.get(d.loading[0], now))
            pool.append({"node": key[0], "gpu": key[1], "resident": sorted(d.resident), "busy_until_s": busy})
        data = {
            "format": 1,
            "now": now,
            "epoch_s": self.cfg.epoch_s,
            "gpu_types": {t: {"memory_gib": self.pred.coeffs(t).memory_gib} for t in types},
            "nodes": [{"id": d.node, "gpu_type": d.gtype, "gpus": 1} for d in self.devs.values()],
            "tenants": [{"id": "agents"}],
            "workflows": {
                "models": {
                    m.name: {
                        "memory_gib": m.memory_gib,
                        "params_b": m.params_b,
                        "load_s": {t: round(self._load_s_pred(m.name), 4) for t in types},
                    }
                    for m in MODELS
                },
                "pool": pool,
                "sessions": wf_sessions,
            },
        }
        self._extend_snapshot(data, now)
        return Snapshot.model_validate(data)

    # ------------------------------------------------------------------ hooks (joint simulator)
    def _extend_snapshot(self, data: dict[str, Any], now: float) -> None:
        """Add to a snapshot before it is validated (the joint simulator adds the cluster)."""

    def _before_tick(self, now: float) -> bool:
        """Called at every tick before planning; True forces a new plan (the pool changed)."""
        del now
        return False

    def _plan(self, state: ClusterState) -> WorkflowPlan:
        return self.policy(state, self.cfg.planner_time_s, self.seed)

    # ------------------------------------------------------------------ main loop
    def run(self) -> SimResult:
        events: list[tuple[float, int, str, Any]] = []
        seq = 0

        def push(t: float, kind: str, data: Any = None) -> None:
            nonlocal seq
            heapq.heappush(events, (t, seq, kind, data))
            seq += 1

        for s in self.sessions.values():
            push(s.arrival_s, "arrival", s.id)
        t0 = min(s.arrival_s for s in self.sessions.values())
        push(t0, "tick")
        changed = True
        planner_s: list[float] = []
        violations = 0
        plans = fallbacks = loads = evictions = 0
        total = len(self.act)
        done = 0
        now = t0
        session_end: dict[str, float] = {}
        captured: list[Snapshot] = []
        while events:
            now, _, kind, data = heapq.heappop(events)
            if now > self.cfg.max_time_s:
                raise RuntimeError(f"{self.name}: simulation did not finish by {now:.0f}s")
            if kind == "arrival":
                changed = True
            elif kind == "unit_end":
                key, uid = data
                d = self.devs[key]
                assert d.running is not None and d.running[0] == uid
                sid, acts = uid.split("|")[0], uid.split("|")[1].split("+")
                d.intervals.append((d.running[1], now, "compute"))
                d.running = None
                for aid in acts:
                    self.state[(sid, aid)] = "done"
                    self.chain_tail.discard((sid, aid))
                    self.finish[(sid, aid)] = now
                    done += 1
                if all(self.state[(sid, a["id"])] == "done" for a in self.sessions[sid].activations):
                    session_end[sid] = now
                changed = True
            elif kind == "load_end":
                key, _model = data
                d = self.devs[key]
                assert d.loading is not None
                d.intervals.append((d.loading[1], now, "loading"))
                d.loading = None
            elif kind == "tick":
                changed |= self._before_tick(now)
                if changed and done < total:
                    changed = False
                    snap = self.snapshot(now)
                    if self.capture_at is not None and now >= self.capture_at and not captured:
                        captured.append(snap)
                    state = ClusterState.from_snapshot(snap)
                    c0 = time.perf_counter()
                    plan = self._plan(state)
                    planner_s.append(time.perf_counter() - c0)
                    plans += 1
                    fallbacks += plan.status == "fallback"
                    bad = check_workflow_plan(state, plan)
                    violations += len(bad)
                    self._install(plan, now)
                if done < total:
                    push(now + self.cfg.epoch_s, "tick")
            # dispatch
            for key, d in self.devs.items():
                n_l, n_e = self._dispatch(key, d, now, push)
                loads += n_l
                evictions += n_e
            if done == total and not any(e[2] in ("unit_end", "load_end") for e in events):
                break
        makespan = max(session_end.values()) - t0
        end_t = t0 + makespan
        comp = load_t = idle_res = 0.0
        for d in [*self.devs.values(), *self.retired]:
            for m, since in d.since.items():
                d.resident_spans.append((since, end_t))
                del m
            c, lo, ir = _account(d.intervals, d.resident_spans, t0, end_t)
            comp += c
            load_t += lo
            idle_res += ir
        lat = [session_end[s] - self.sessions[s].arrival_s for s in self.sessions]
        return SimResult(
            policy=self.name,
            latencies=lat,
            makespan_s=makespan,
            gpu_compute_s=comp,
            gpu_loading_s=load_t,
            gpu_idle_resident_s=idle_res,
            loads=loads,
            evictions=evictions,
            planner_seconds=planner_s,
            violations=violations,
            plans=plans,
            fallbacks=fallbacks,
            trace={"residency": self._residency_trace(), "snapshot": captured[0] if captured else None},
        )

    def _residency_trace(self) -> list[dict[str, Any]]:
        out = []
        for d in [*self.devs.values(), *self.retired]:
            for s, e, what in d.intervals:
                out.append({"device": d.node, "start": s, "end": e, "what": what})
        return out

    def _install(self, plan: WorkflowPlan, now: float) -> None:
        for d in self.devs.values():
            d.queue = []
            d.actions = []
        for u in sorted(plan.units, key=lambda u: (u.start_s, u.id)):
            todo = [a for a in u.activations if self.state[(u.session, a)] == "pending"]
            if not todo:
                continue  # already in flight inside a running fused chain
            if len(todo) < len(u.activations):
                u = u.model_copy(update={"activations": todo})
            self.devs[u.device.key()].queue.append(u)
        for a in plan.model_actions:
            self.devs[a.device.key()].actions.append((a.model, a.action, a.at_s))

    def _dispatch(
        self, key: tuple[str, int], d: _Dev, now: float, push: Callable[[float, str, Any], None]
    ) -> tuple[int, int]:
        loads = evictions = 0
        progressed = True
        while progressed:
            progressed = False
            # model actions in planned order
            if d.actions:
                model, what, at = d.actions[0]
                if what == "evict":
                    users_before = [u for u in d.queue if u.model == model and u.start_s < at]
                    busy = d.running is not None and d.running[4] == model
                    if not users_before and not busy and (d.loading is None or d.loading[0] != model):
                        if model in d.resident:
                            del d.resident[model]
                            d.resident_spans.append((d.since.pop(model), now))
                            evictions += 1
                        d.actions.pop(0)
                        progressed = True
                elif at <= now + 1e-9 and d.loading is None:
                    used = sum(self.models[m].memory_gib for m in d.resident)
                    if model in d.resident:
                        d.actions.pop(0)
                        progressed = True
                    elif used + self.models[model].memory_gib <= d.mem + 1e-9:
                        true = self._load_s_pred(model) * float(
                            self.noise_rng.lognormal(0.0, self.cfg.load_sigma)
                        )
                        d.resident[model] = now + true
                        d.since[model] = now
                        d.loading = (model, now)
                        push(now + true, "load_end", (key, model))
                        loads += 1
                        d.actions.pop(0)
                        progressed = True
                elif at > now + 1e-9 and at not in self._wakes:
                    self._wakes.add(at)
                    push(at, "wake", None)
            # units in planned order
            if d.running is None and d.queue:
                u = d.queue[0]
                ready = all(
                    dep in u.activations or self.state[(u.session, dep)] == "done"
                    for aid in u.activations
                    for dep in self.act[(u.session, aid)]["after"]
                )
                loaded = (
                    u.model in d.resident
                    and d.resident[u.model] <= now + 1e-9
                    and (d.loading is None or d.loading[0] != u.model)
                )
                if ready and loaded:
                    dur = self._true_unit_s(u, d.gtype)
                    pred = self._pred_unit_s(u, d.gtype)
                    uid = f"{u.session}|{'+'.join(u.activations)}"
                    d.running = (uid, now, now + dur, now + pred, u.model)
                    for k, aid in enumerate(u.activations):
                        self.state[(u.session, aid)] = "running"
                        deps = self.act[(u.session, aid)]["after"]
                        chained = k > 0 and any(x in u.activations[:k] for x in deps)
                        after_chain = k > 0 and (u.session, u.activations[k - 1]) in self.chain_tail
                        if chained or after_chain:
                            self.chain_tail.add((u.session, aid))
                    push(now + dur, "unit_end", (key, uid))
                    d.queue.pop(0)
                    progressed = True
        return loads, evictions


def _account(
    intervals: list[tuple[float, float, str]], resident: list[tuple[float, float]], t0: float, t1: float
) -> tuple[float, float, float]:
    """Compute, loading (not under compute) and idle-resident seconds of one device."""
    pts = sorted(
        {t0, t1, *[x for a, b, _ in intervals for x in (a, b)], *[x for a, b in resident for x in (a, b)]}
    )
    comp = load = idle = 0.0
    for a, b in itertools.pairwise(pts):
        if b <= t0 or a >= t1 or b <= a:
            continue
        mid = (a + b) / 2
        kinds = {w for s, e, w in intervals if s <= mid < e}
        if "compute" in kinds:
            comp += b - a
        elif "loading" in kinds:
            load += b - a
        elif any(s <= mid < e for s, e in resident):
            idle += b - a
    return comp, load, idle

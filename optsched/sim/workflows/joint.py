"""Joint pool experiment: a Venus-like training cluster and Azure-code workflow bursts.

:class:`JointSimulator` runs the workflow simulator (:mod:`optsched.sim.workflows.sim`) next to a
training cluster replayed from the shipped mini trace (``optsched/sim/data``, a synthetic
Venus-like job log: 64 GPUs, five tenants with quotas 24/16/8/8/8 and imbalanced load). Every
``cluster_epoch_s`` it writes one format-1 snapshot of both workloads (cluster nodes, tenants,
training jobs, the serving pool with its lent GPUs, the workflow sessions, and, in ``joint``
mode, ``workflows.pool_lending``) and makes one :func:`~optsched.engine.epoch.solve_epoch`
call: its decision starts and preempts training jobs, lends cluster GPUs to the pool and takes
them back, and (policy ``cpsat``) gives the workflow plan. Between cluster epochs the
workflow simulator re-plans every ``epoch_s`` (2 s) on the current pool, as it does alone.

Modes (same GPUs in all):

* ``fixed`` — the serving pool is the dedicated pool only; the cluster keeps its nodes;
* ``joint`` — the same, plus ``pool_lending``: under a burst, free cluster GPUs of idle quota
  join the pool and go back when the burst passes or their owner needs them.

Training ground truth: a started job ends after its trace duration (a preempted one restarts
from scratch); the cluster part sees the trace's estimates. The trace's GPU type (``V100``)
is relabelled ``cluster_type`` (default ``a100``), a type the workflow predictor knows.
Training metrics are taken over ``[t0, t0 + horizon_s]``, ``t0`` the first session arrival.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from optsched.engine.backends.base import SolveParams
from optsched.engine.epoch import solve_epoch
from optsched.engine.state import ClusterState
from optsched.schema.decision import Decision, WorkflowPlan
from optsched.sim.trace import Trace, TraceJob, load_trace
from optsched.sim.workflows.sim import Policy, SimResult, WorkflowSimulator, _Dev
from optsched.sim.workflows.workloads import SessionSpec

Mode = Literal["fixed", "joint"]


@dataclass
class JointConfig:
    mode: Mode = "joint"
    cluster_type: str = "a100"
    train_t0_s: float = 122400.0
    """Time of the training trace aligned with the first session's arrival (default: day 2,
    10:00, a weekday morning of the mini trace)."""
    warmup_s: float = 14400.0
    """Training replayed before the burst, with ``warmup_epoch_s`` epochs, to load the cluster."""
    warmup_epoch_s: float = 120.0
    cluster_epoch_s: float = 10.0
    horizon_s: float = 600.0
    time_limit_s: float = 1.0
    """Nominal limit of each joint ``solve_epoch`` call (the planner gets 40% of it)."""
    backend: str = "auto"
    lending: dict[str, Any] = field(default_factory=dict)
    """``pool_lending`` fields besides ``gpu_types`` (``max_size``, ``grow_drain_s``, ...)."""


@dataclass
class TrainJob:
    spec: TraceJob
    submit_s: float
    state: str = "pending"
    alloc: list[tuple[str, int]] = field(default_factory=list)
    start_s: float | None = None
    end_s: float | None = None
    on_loan: bool = False
    first_start_s: float | None = None
    runs: list[tuple[float, float, int]] = field(default_factory=list)
    """(start, end, GPUs) of every run (a preempted run ends at its preemption)."""


@dataclass
class JointResult:
    workflows: SimResult
    training: dict[str, float]
    pool: dict[str, float]


class JointSimulator(WorkflowSimulator):
    """The workflow simulator plus a training cluster and one joint decision per cluster epoch."""

    def __init__(
        self,
        sessions: list[SessionSpec],
        policy: Policy,
        *,
        name: str,
        seed: int = 0,
        config: Any = None,
        joint: JointConfig | None = None,
        trace: Trace | None = None,
        use_engine_plan: bool = False,
    ) -> None:
        super().__init__(sessions, policy, name=name, seed=seed, config=config)
        self.jc = joint or JointConfig()
        self.use_engine_plan = use_engine_plan
        """Take the workflow plan of the joint call (policy ``cpsat``: the same planner)."""
        tr = trace or load_trace("mini")
        self.trace = tr
        ct = self.jc.cluster_type
        if ct not in self.type_factor:
            rng = np.random.default_rng([seed, 303])
            self.type_factor[ct] = float(rng.lognormal(0.0, self.cfg.type_sigma))
        self.t0 = min(s.arrival_s for s in sessions)
        shift = self.t0 - self.jc.train_t0_s
        lo = self.t0 - self.jc.warmup_s
        hi = self.t0 + self.jc.horizon_s
        self.jobs: dict[str, TrainJob] = {}
        for j in sorted(tr.jobs, key=lambda j: (j.submit_s, j.id)):
            sub = j.submit_s + shift
            if lo <= sub <= hi:
                self.jobs[j.id] = TrainJob(spec=j, submit_s=sub)
        self.nodes = [(n.id, n.gpus) for n in tr.nodes]
        self.lent: dict[tuple[str, int], tuple[str, float]] = {}
        """Lent pool GPU -> (lender, since)."""
        self.lent_log: list[tuple[float, float]] = []
        """(lent at, returned at) of every lent GPU."""
        self.next_cluster = self.t0
        self.plan_from_engine: WorkflowPlan | None = None
        self.decisions = 0
        self.solve_seconds: list[float] = []
        self.preemptions = 0
        self.conflicts = 0
        self.preempt_reasons: dict[str, int] = {}
        """Training GPUs that were also lent to the pool after a decision (always 0)."""
        self.pending_gpu_s = 0.0
        """GPU-seconds of queued training demand inside the metrics window (sum over cluster
        epochs of the queued jobs' GPUs times the epoch length)."""
        self.violations_cluster = 0
        self.max_pool = len(self.devs)

    # ------------------------------------------------------------------ snapshot
    def _extend_snapshot(self, data: dict[str, Any], now: float) -> None:
        ct = self.jc.cluster_type
        data["gpu_types"][ct] = {"memory_gib": self.pred.coeffs(ct).memory_gib}
        data["nodes"] = [n for n in data["nodes"] if n["id"] not in {x for x, _ in self.nodes}]
        data["nodes"] += [{"id": nid, "gpu_type": ct, "gpus": g} for nid, g in self.nodes]
        # one node entry per dedicated device: drop the duplicates the base writes for lent ones
        seen: set[str] = set()
        nodes = []
        for n in data["nodes"]:
            if n["id"] not in seen:
                seen.add(n["id"])
                nodes.append(n)
        data["nodes"] = nodes
        data["tenants"] = [{"id": "agents"}] + [
            {"id": t.id, "quota": {ct: sum(t.quota.values())}} for t in self.trace.tenants
        ]
        for dev in data["workflows"]["pool"]:
            key = (dev["node"], dev["gpu"])
            if key in self.lent:
                dev["lent_by"], dev["lent_since_s"] = self.lent[key][0], self.lent[key][1]
        if self.jc.mode == "joint":
            data["workflows"]["pool_lending"] = {"gpu_types": [ct], **self.jc.lending}
        jobs = []
        for jid, j in self.jobs.items():
            if j.submit_s > now + 1e-9 or j.state == "done":
                continue
            row: dict[str, Any] = {
                "id": jid,
                "tenant": j.spec.tenant,
                "qos": j.spec.qos,
                "gpus": j.spec.gpus,
                "submit_s": j.submit_s,
                "state": j.state,
                "gpu_types": [ct],
                "runtime_s": j.spec.estimate_s or j.spec.duration_s,
            }
            if j.state == "running":
                row["allocation"] = [{"node": n, "gpu": g} for n, g in j.alloc]
                row["start_s"] = j.start_s
                row["on_loan"] = j.on_loan
            jobs.append(row)
        data["jobs"] = jobs
        data["epoch_s"] = self.jc.cluster_epoch_s

    # ------------------------------------------------------------------ cluster epochs
    def _finish_jobs(self, now: float) -> None:
        for j in self.jobs.values():
            if j.state == "running" and j.end_s is not None and j.end_s <= now + 1e-9:
                j.state = "done"
                j.runs.append((j.start_s or 0.0, j.end_s, j.spec.gpus))

    def cluster_epoch(self, now: float) -> Decision:
        """One joint decision at ``now``: apply its training and pool parts; keep its plan."""
        self._finish_jobs(now)
        snap = self.snapshot(now)
        params = SolveParams(backend=self.jc.backend, time_limit_s=self.jc.time_limit_s, seed=self.seed)
        c0 = time.perf_counter()
        if self.t0 <= now < self.t0 + self.jc.horizon_s:
            queued = sum(
                j.spec.gpus for j in self.jobs.values() if j.state == "pending" and j.submit_s <= now
            )
            self.pending_gpu_s += queued * self.jc.cluster_epoch_s
        d = solve_epoch(snap, params=params)
        self.solve_seconds.append(time.perf_counter() - c0)
        self.decisions += 1
        for p in d.preempt:
            j = self.jobs[p.job]
            j.runs.append((j.start_s or 0.0, now, j.spec.gpus))
            j.state, j.alloc, j.start_s, j.end_s, j.on_loan = "pending", [], None, None, False
            if self.t0 <= now < self.t0 + self.jc.horizon_s:
                self.preemptions += 1
                why = str(p.reason)
                self.preempt_reasons[why] = self.preempt_reasons.get(why, 0) + 1
        for s in d.start:
            j = self.jobs[s.job]
            j.state = "running"
            j.alloc = [r.key() for r in s.allocation]
            j.start_s = now
            j.end_s = now + j.spec.duration_s
            j.on_loan = s.on_loan
            if j.first_start_s is None:
                j.first_start_s = now
        if d.pool is not None:
            for r in d.pool.returned:
                key = r.gpu.key()
                dev = self.devs.pop(key)
                for m in list(dev.since):
                    dev.resident_spans.append((dev.since.pop(m), now))
                dev.resident.clear()
                self.retired.append(dev)
                self.lent_log.append((self.lent.pop(key)[1], now))
            for x in d.pool.lend:
                key = x.gpu.key()
                mem = self.pred.coeffs(x.gpu_type).memory_gib
                self.devs[key] = _Dev(node=key[0], gtype=x.gpu_type, mem=mem)
                self.lent[key] = (x.lender, now)
            self.max_pool = max(self.max_pool, len(self.devs))
        held = {k for j in self.jobs.values() if j.state == "running" for k in j.alloc}
        self.conflicts += len(held & set(self.lent))
        self.plan_from_engine = d.workflow_plan if self.use_engine_plan else None
        return d

    def _before_tick(self, now: float) -> bool:
        if now + 1e-9 < self.next_cluster:
            return False
        self.next_cluster = now + self.jc.cluster_epoch_s
        d = self.cluster_epoch(now)
        changed = d.pool is not None and bool(d.pool.lend or d.pool.returned)
        return changed or self.plan_from_engine is not None

    def _plan(self, state: ClusterState) -> WorkflowPlan:
        plan = self.plan_from_engine
        self.plan_from_engine = None
        if plan is not None and not any(n.startswith("no workflow plan") for n in plan.notes):
            return plan
        return self.policy(state, self.cfg.planner_time_s, self.seed)

    # ------------------------------------------------------------------ run
    def run_joint(self) -> JointResult:
        """Warm the cluster up, run the burst, then the cluster alone to the horizon."""
        t = self.t0 - self.jc.warmup_s
        while t < self.t0 - 1e-9:
            self.cluster_epoch(t)
            t += self.jc.warmup_epoch_s
        self.next_cluster = self.t0
        wf = self.run()
        end = self.t0 + self.jc.horizon_s
        t = self.next_cluster
        # the burst is over (finished sessions leave the snapshot): the cluster runs on alone
        # and the lent GPUs go back
        while t <= end + 1e-9:
            self.cluster_epoch(t)
            t += self.jc.cluster_epoch_s
        return JointResult(workflows=wf, training=self._training_metrics(end), pool=self._pool_metrics(end))

    def _training_metrics(self, end: float) -> dict[str, float]:
        t0 = self.t0
        delays = []
        for j in self.jobs.values():
            if not (t0 <= j.submit_s <= end):
                continue
            start = j.first_start_s if j.first_start_s is not None else end
            delays.append(max(0.0, min(start, end) - j.submit_s))
        busy = 0.0
        for j in self.jobs.values():
            runs = list(j.runs)
            if j.state == "running" and j.start_s is not None:
                runs.append((j.start_s, min(j.end_s or end, end), j.spec.gpus))
            for a, b, g in runs:
                busy += g * max(0.0, min(b, end) - max(a, t0))
        total = sum(g for _, g in self.nodes) * (end - t0)
        arr = np.array(delays) if delays else np.zeros(1)
        return {
            "jobs": float(len(delays)),
            "mean_queue_s": float(arr.mean()),
            "p95_queue_s": float(np.percentile(arr, 95)),
            "utilisation": busy / total if total > 0 else 0.0,
            "preemptions": float(self.preemptions),
            "queued_gpu_s": self.pending_gpu_s,
            **{f"preempted_{k}": float(v) for k, v in sorted(self.preempt_reasons.items())},
        }

    def _pool_metrics(self, end: float) -> dict[str, float]:
        lent_s = sum(max(0.0, min(b, end) - max(a, self.t0)) for a, b in self.lent_log)
        lent_s += sum(max(0.0, end - max(since, self.t0)) for _, since in self.lent.values())
        return {
            "lent_gpu_s": lent_s,
            "loans": float(len(self.lent_log) + len(self.lent)),
            "max_pool_gpus": float(self.max_pool),
            "decisions": float(self.decisions),
            "solve_s_mean": float(np.mean(self.solve_seconds)) if self.solve_seconds else 0.0,
            "solve_s_max": max(self.solve_seconds, default=0.0),
        }


def fluid_makespan_bound(sessions: list[SessionSpec], pool_speed: float) -> float:
    """Fluid lower bound of a workload's makespan: all its predicted work (reference seconds,
    unfused, no loads or dependencies) spread over ``pool_speed`` reference GPUs from the
    first arrival, and never below the last arrival plus the longest session's critical path
    on the reference GPU; seconds from the first arrival."""
    import networkx as nx

    from optsched.engine.workflows.pool import REF_TYPE
    from optsched.engine.workflows.problem import model_spec
    from optsched.predict.activation import ActivationPredictor
    from optsched.sim.workflows.workloads import MODELS

    pred = ActivationPredictor.default()
    specs = {m.name: model_spec(m.params_b, m.memory_gib) for m in MODELS}
    t0 = min(s.arrival_s for s in sessions)
    work = 0.0
    cp_end = 0.0
    for s in sessions:
        g: nx.DiGraph = nx.DiGraph()
        for a in s.activations:
            sec = pred.latency_s(specs[a["model"]], a["input_tokens"], a["output_tokens"], REF_TYPE)
            work += sec
            g.add_node(a["id"], w=sec)
            for dep in a["after"]:
                g.add_edge(dep, a["id"])
        longest: dict[str, float] = {}
        for n in nx.topological_sort(g):
            longest[n] = g.nodes[n]["w"] + max((longest[p] for p in g.predecessors(n)), default=0.0)
        cp_end = max(cp_end, s.arrival_s - t0 + max(longest.values(), default=0.0))
    fluid = work / pool_speed if pool_speed > 0 else math.inf
    return max(fluid, cp_end)


__all__ = ["JointConfig", "JointResult", "JointSimulator", "fluid_makespan_bound"]


# ---------------------------------------------------------------------------- experiment
@dataclass
class JointExperiment:
    """Joint pool vs fixed split on the mixed scenario with Azure-code bursts."""

    seeds: tuple[int, ...] = (0, 1, 2)
    policies: tuple[str, ...] = ("greedy", "cpsat")
    baselines: tuple[str, ...] = ("heft", "peft", "sllm", "autellix")
    """Run on the fixed split only (the plain workflow simulator: the cluster cannot touch a
    fixed pool, so their workflow results are those of the fixed split)."""
    sessions: int = 40
    window_s: float = 120.0
    traces: Any = None
    planner_time_s: float = 0.5
    joint: JointConfig = field(default_factory=JointConfig)


def run_joint_experiment(exp: JointExperiment, progress: Any = None) -> dict[str, Any]:
    """Every (arm, policy, seed); the summary dict (means over seeds and per seed)."""
    from dataclasses import replace

    from optsched.sim.workflows.baselines import get_policy
    from optsched.sim.workflows.sim import WorkflowSimConfig
    from optsched.sim.workflows.workloads import POOL, arrivals, make_sessions

    sim_cfg = WorkflowSimConfig(planner_time_s=exp.planner_time_s)
    trace = load_trace("mini")
    rows: list[dict[str, Any]] = []
    for seed in exp.seeds:
        arr = arrivals("azure-code", exp.sessions, exp.window_s, seed, exp.traces)
        sessions = make_sessions("mixed", list(arr), seed)
        for name in exp.baselines:
            res = WorkflowSimulator(sessions, get_policy(name), name=name, seed=seed, config=sim_cfg).run()
            rows.append({"arm": "fixed", "policy": name, "seed": seed, **_wf_row(res)})
            if progress is not None:
                progress(f"fixed {name} seed {seed}")
        for mode in ("fixed", "joint"):
            for name in exp.policies:
                sim = JointSimulator(
                    sessions,
                    get_policy(name),
                    name=name,
                    seed=seed,
                    config=sim_cfg,
                    joint=replace(exp.joint, mode=mode),
                    trace=trace,
                    use_engine_plan=name == "cpsat",
                )
                r = sim.run_joint()
                rows.append({"arm": mode, "policy": name, "seed": seed, **_wf_row(r.workflows),
                             **{f"train_{k}": v for k, v in r.training.items()},
                             **{f"pool_{k}": v for k, v in r.pool.items()}})
                if progress is not None:
                    progress(f"{mode} {name} seed {seed}")
        speed_fixed = sum(type_speed_of(t) * n for t, n in POOL)
        rows.append({"arm": "bound", "policy": "fluid", "seed": seed,
                     "makespan_s": fluid_makespan_bound(sessions, speed_fixed),
                     "work_ref_s": _work(sessions), "pool_speed": speed_fixed})
    return summarize_joint(exp, rows)


def type_speed_of(gtype: str) -> float:
    """Workflow speed of one GPU of ``gtype`` relative to h100 (``pool.type_speed``)."""
    from optsched.engine.workflows.pool import type_speed

    return type_speed(gtype)


def _work(sessions: list[SessionSpec]) -> float:
    from optsched.engine.workflows.pool import REF_TYPE
    from optsched.engine.workflows.problem import model_spec
    from optsched.predict.activation import ActivationPredictor
    from optsched.sim.workflows.workloads import MODELS

    pred = ActivationPredictor.default()
    specs = {m.name: model_spec(m.params_b, m.memory_gib) for m in MODELS}
    return sum(
        pred.latency_s(specs[a["model"]], a["input_tokens"], a["output_tokens"], REF_TYPE)
        for s in sessions
        for a in s.activations
    )


def _wf_row(res: SimResult) -> dict[str, Any]:
    s = res.summary()
    return {
        "makespan_s": s["makespan_s"],
        "p95_latency_s": s["p95_latency_s"],
        "mean_latency_s": s["mean_latency_s"],
        "gpu_s_per_session": s["gpu_seconds_per_session"],
        "compute_s": s["gpu_compute_s_per_session"],
        "loading_s": s["gpu_loading_s_per_session"],
        "idle_s": s["gpu_idle_resident_s_per_session"],
        "violations": s["violations"],
        "fallback_plans": s["fallback_plans"],
        "plans": s["plans"],
    }


def summarize_joint(exp: JointExperiment, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Means per (arm, policy) over seeds, the targets and the fluid bounds."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["arm"], r["policy"]), []).append(r)
    means: dict[str, dict[str, float]] = {}
    for (arm, pol), rs in groups.items():
        keys = sorted({k for r in rs for k, v in r.items() if isinstance(v, int | float) and k != "seed"})
        means[f"{arm}/{pol}"] = {k: float(np.mean([r.get(k, 0.0) for r in rs])) for k in keys}
    base = [b for b in exp.baselines if f"fixed/{b}" in means]
    out: dict[str, Any] = {
        "seeds": list(exp.seeds),
        "sessions_per_seed": exp.sessions,
        "planner_time_s": exp.planner_time_s,
        "joint": {k: v for k, v in exp.joint.__dict__.items() if k != "mode"},
        "means": means,
        "rows": rows,
    }
    if base:
        best_m = min(base, key=lambda b: means[f"fixed/{b}"]["makespan_s"])
        best_g = min(base, key=lambda b: means[f"fixed/{b}"]["gpu_s_per_session"])
        target_m = 0.7 * means[f"fixed/{best_m}"]["makespan_s"]
        target_g = means[f"fixed/{best_g}"]["gpu_s_per_session"] - 20.0
        tgt: dict[str, Any] = {
            "best_makespan_baseline": best_m,
            "makespan_target_s": target_m,
            "best_gpu_s_baseline": best_g,
            "gpu_s_target": target_g,
        }
        for key, m in means.items():
            if key.startswith(("fixed/", "joint/")) and key.split("/")[1] in exp.policies:
                tgt[key] = {
                    "makespan_ratio": m["makespan_s"] / means[f"fixed/{best_m}"]["makespan_s"],
                    "gpu_s_saved": means[f"fixed/{best_g}"]["gpu_s_per_session"] - m["gpu_s_per_session"],
                    "makespan_met": m["makespan_s"] <= target_m,
                    "gpu_s_met": m["gpu_s_per_session"] <= target_g,
                }
        bound = means.get("bound/fluid")
        if bound is not None:
            tgt["fluid_bound_fixed_pool_s"] = bound["makespan_s"]
            tgt["makespan_target_possible_on_fixed_pool"] = bound["makespan_s"] <= target_m
            # the pool speed the makespan target needs: work over target (fluid)
            tgt["pool_speed_needed"] = bound["work_ref_s"] / target_m
            tgt["gpu_s_lower_bound"] = bound["work_ref_s"] / exp.sessions
            tgt["fixed_pool_speed"] = bound["pool_speed"]
        out["targets"] = tgt
    return out


def joint_markdown(summary: dict[str, Any]) -> str:
    m = summary["means"]
    lines = [
        "| arm / policy | makespan s | p95 s | mean latency s | GPU-s/session (compute+load+idle) "
        "| GPUs lent (max pool) | lent GPU-s | training util. | training queued GPU-s | "
        "training mean / p95 queue s | preemptions in the window |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, r in m.items():
        if key.startswith("bound/"):
            continue
        train = "—"
        lent = "—"
        if "train_utilisation" in r:
            train = (f"{100 * r['train_utilisation']:.1f}% | {r['train_queued_gpu_s']:.0f} | "
                     f"{r['train_mean_queue_s']:.0f} / {r['train_p95_queue_s']:.0f} | "
                     f"{r['train_preemptions']:.1f} ({r.get('train_preempted_reclaim', 0.0):.1f} reclaim)")
            lent = f"{r['pool_loans']:.1f} ({r['pool_max_pool_gpus']:.1f}) | {r['pool_lent_gpu_s']:.0f}"
        else:
            train = "— | — | — | —"
            lent = "— | —"
        lines.append(
            f"| {key} | {r['makespan_s']:.1f} | {r['p95_latency_s']:.1f} | {r['mean_latency_s']:.1f} | "
            f"{r['gpu_s_per_session']:.1f} ({r['compute_s']:.1f}+{r['loading_s']:.1f}+{r['idle_s']:.1f}) | "
            f"{lent} | {train} |"
        )
    t = summary.get("targets")
    if t:
        lines.append("")
        lines.append(
            f"Targets: makespan <= 0.7 x `{t['best_makespan_baseline']}` = {t['makespan_target_s']:.1f} s; "
            f"GPU-s/session <= `{t['best_gpu_s_baseline']}` - 20 = {t['gpu_s_target']:.1f}."
        )
        lines.append("")
        lines.append("| arm / policy | makespan ratio | met? | GPU-s/session saved | met? |")
        lines.append("|---|---|---|---|---|")
        for key, v in t.items():
            if isinstance(v, dict):
                lines.append(
                    f"| {key} | {v['makespan_ratio']:.3f} | {'yes' if v['makespan_met'] else 'no'} | "
                    f"{v['gpu_s_saved']:.1f} | {'yes' if v['gpu_s_met'] else 'no'} |"
                )
        if "fluid_bound_fixed_pool_s" in t:
            side = "below"
            if not t["makespan_target_possible_on_fixed_pool"]:
                side = "above; out of reach without fusion"
            lines.append("")
            lines.append(
                f"Fluid lower bound of the makespan on the fixed pool (unfused work): "
                f"{t['fluid_bound_fixed_pool_s']:.1f} s (target {t['makespan_target_s']:.1f} s: "
                f"{side}); the target needs a pool speed of {t['pool_speed_needed']:.2f} h100-equivalents "
                f"(fixed pool: {t['fixed_pool_speed']:.2f}). Unfused compute lower bound: "
                f"{t['gpu_s_lower_bound']:.1f} GPU-s/session (all work on h100s)."
            )
    return "\n".join(lines) + "\n"

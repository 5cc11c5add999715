"""Side-by-side evaluation: policies x seeds on one scenario, summary.json + table + plots."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from optsched.engine.workflows.planner import PlannerConfig
from optsched.sim.workflows.baselines import get_policy
from optsched.sim.workflows.names import BASELINES
from optsched.sim.workflows.sim import SimResult, WorkflowSimConfig, WorkflowSimulator
from optsched.sim.workflows.workloads import arrivals, make_sessions

METRICS = (
    "makespan_s",
    "p50_latency_s",
    "p95_latency_s",
    "p99_latency_s",
    "gpu_seconds_per_session",
    "loads",
    "evictions",
    "planner_seconds",
)


@dataclass
class Experiment:
    scenario: str = "mixed"
    arrivals: str = "azure-code"
    policies: Sequence[str] = ("fcfs-lru", "heft", "peft", "sllm", "autellix", "greedy", "cpsat")
    seeds: Sequence[int] = (0, 1, 2, 3, 4)
    sessions: int = 40
    window_s: float = 120.0
    traces: Path | None = None
    sim: WorkflowSimConfig = field(default_factory=WorkflowSimConfig)
    planner: PlannerConfig = field(default_factory=PlannerConfig)


def run_experiment(
    exp: Experiment, progress: Callable[[str], None] | None = None
) -> tuple[dict[str, Any], dict[tuple[str, int], SimResult]]:
    """Simulate every (policy, seed); return the summary dict and the raw results."""
    results: dict[tuple[str, int], SimResult] = {}
    for seed in exp.seeds:
        arr = arrivals(exp.arrivals, exp.sessions, exp.window_s, seed, exp.traces)
        sessions = make_sessions(exp.scenario, list(arr), seed)
        for name in exp.policies:
            pol = get_policy(name, planner_config=exp.planner)
            results[(name, seed)] = WorkflowSimulator(
                sessions, pol, name=name, seed=seed, config=exp.sim
            ).run()
            if progress is not None:
                progress(f"{name} seed {seed}")
    return summarize(exp, results), results


def summarize(exp: Experiment, results: dict[tuple[str, int], SimResult]) -> dict[str, Any]:
    pols: dict[str, Any] = {}
    for name in exp.policies:
        rows = [results[(name, s)].summary() for s in exp.seeds]
        mean = {k: float(np.mean([r[k] for r in rows])) for k in rows[0]}
        pols[name] = {
            "makespan_s": mean["makespan_s"],
            "p50_latency_s": mean["p50_latency_s"],
            "p95_latency_s": mean["p95_latency_s"],
            "p99_latency_s": mean["p99_latency_s"],
            "mean_latency_s": mean["mean_latency_s"],
            "gpu_seconds_per_session": {
                "total": mean["gpu_seconds_per_session"],
                "compute": mean["gpu_compute_s_per_session"],
                "loading": mean["gpu_loading_s_per_session"],
                "idle_resident": mean["gpu_idle_resident_s_per_session"],
            },
            "loads": mean["loads"],
            "evictions": mean["evictions"],
            "planner_seconds": mean["planner_seconds"],
            "planner_seconds_max": max(r["planner_seconds_max"] for r in rows),
            "epoch_s": exp.sim.epoch_s,
            "plans": mean["plans"],
            "fallback_plans": mean["fallback_plans"],
            "invariant6_violations": int(sum(r["violations"] for r in rows)),
            "per_seed": rows,
        }
    out: dict[str, Any] = {
        "scenario": exp.scenario,
        "arrivals": exp.arrivals,
        "seeds": list(exp.seeds),
        "sessions_per_seed": exp.sessions,
        "arrival_window_s": exp.window_s,
        "pool": [list(p) for p in exp.sim.pool],
        "loader": exp.sim.loader,
        "load_speedup": exp.sim.load_speedup,
        "planner_time_limit_s": exp.sim.planner_time_s,
        "planner_window": exp.planner.window,
        "policies": pols,
    }
    base = [b for b in BASELINES if b in pols and b != "fcfs-lru"]
    if base:
        comp: dict[str, Any] = {}
        for metric in ("makespan_s", "p95_latency_s"):
            best = min(base, key=lambda b: pols[b][metric])
            comp[metric] = {"best_baseline": best, "value": pols[best][metric]}
        best = min(base, key=lambda b: pols[b]["gpu_seconds_per_session"]["total"])
        comp["gpu_seconds_per_session"] = {
            "best_baseline": best,
            "value": pols[best]["gpu_seconds_per_session"]["total"],
        }
        for ours in ("cpsat", "greedy"):
            if ours not in pols:
                continue
            comp[ours] = {
                "makespan_ratio": pols[ours]["makespan_s"] / comp["makespan_s"]["value"],
                "p95_ratio": pols[ours]["p95_latency_s"] / comp["p95_latency_s"]["value"],
                "gpu_seconds_saved_per_session": comp["gpu_seconds_per_session"]["value"]
                - pols[ours]["gpu_seconds_per_session"]["total"],
            }
        out["vs_best_non_fcfs_baseline"] = comp
    return out


def markdown_table(summary: dict[str, Any]) -> str:
    lines = [
        f"Scenario `{summary['scenario']}`, arrivals `{summary['arrivals']}`, seeds "
        f"{summary['seeds']}, {summary['sessions_per_seed']} sessions per seed over "
        f"{summary['arrival_window_s']:.0f} s, loader `{summary['loader']}` x"
        f"{summary['load_speedup']}, pool {summary['pool']} (means over seeds).",
        "",
        "| policy | makespan s | p50 s | p95 s | p99 s | GPU-s/session (compute+load+idle) "
        "| loads | evictions | planner s/epoch (max) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, p in summary["policies"].items():
        g = p["gpu_seconds_per_session"]
        lines.append(
            f"| {name} | {p['makespan_s']:.1f} | {p['p50_latency_s']:.1f} | "
            f"{p['p95_latency_s']:.1f} | {p['p99_latency_s']:.1f} | {g['total']:.1f} "
            f"({g['compute']:.1f}+{g['loading']:.1f}+{g['idle_resident']:.1f}) | "
            f"{p['loads']:.0f} | {p['evictions']:.0f} | {p['planner_seconds']:.3f} "
            f"({p['planner_seconds_max']:.3f}) |"
        )
    comp = summary.get("vs_best_non_fcfs_baseline")
    if comp:
        lines.append("")
        for ours in ("cpsat", "greedy"):
            if ours in comp:
                c = comp[ours]
                lines.append(
                    f"- `{ours}` vs best non-FCFS baseline: makespan x{c['makespan_ratio']:.3f} "
                    f"(best `{comp['makespan_s']['best_baseline']}`), p95 "
                    f"x{c['p95_ratio']:.3f} (best `{comp['p95_latency_s']['best_baseline']}`), "
                    f"GPU-s/session saved {c['gpu_seconds_saved_per_session']:.1f} "
                    f"(best `{comp['gpu_seconds_per_session']['best_baseline']}`)"
                )
    return "\n".join(lines) + "\n"


def plots(summary: dict[str, Any], results: dict[tuple[str, int], SimResult], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    names = list(summary["policies"])
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for ax, metric, label in zip(
        axes,
        ("makespan_s", "p95_latency_s", None),
        ("makespan (s)", "p95 latency (s)", "GPU-s per session"),
        strict=True,
    ):
        if metric is None:
            comps = ("compute", "loading", "idle_resident")
            bottom = np.zeros(len(names))
            for c in comps:
                vals = np.array([summary["policies"][n]["gpu_seconds_per_session"][c] for n in names])
                ax.bar(names, vals, bottom=bottom, label=c)
                bottom += vals
            ax.legend(fontsize=7)
        else:
            ax.bar(names, [summary["policies"][n][metric] for n in names])
        ax.set_title(label)
        ax.tick_params(axis="x", rotation=45, labelsize=8)
    fig.tight_layout()
    p = out / "comparison.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(p)
    seed0 = summary["seeds"][0]
    fig, ax = plt.subplots(figsize=(6, 4))
    for n in names:
        lat = np.sort(results[(n, seed0)].latencies)
        ax.plot(lat, np.arange(1, len(lat) + 1) / len(lat), label=n)
    ax.set_xlabel("session latency (s)")
    ax.set_ylabel("CDF")
    ax.set_title(f"latency CDF, seed {seed0}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    p = out / "latency_cdf.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(p)
    for n in names:
        if n in ("cpsat", "greedy"):
            p = out / f"residency_{n}_seed{seed0}.png"
            residency_plot(results[(n, seed0)], p)
            paths.append(p)
            break
    return paths


def residency_plot(res: SimResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = res.trace["residency"]
    devices = sorted({r["device"] for r in rows})
    fig, ax = plt.subplots(figsize=(10, 0.4 * len(devices) + 1.5))
    colors = {"compute": "tab:blue", "loading": "tab:orange"}
    for y, dev in enumerate(devices):
        for r in rows:
            if r["device"] == dev:
                ax.barh(y, r["end"] - r["start"], left=r["start"], color=colors[r["what"]], height=0.6)
    ax.set_yticks(range(len(devices)), devices)
    ax.set_xlabel("time (s)")
    ax.set_title(f"{res.policy}: compute (blue) and model loading (orange) per GPU")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(
    summary: dict[str, Any], results: dict[tuple[str, int], SimResult], out: Path
) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    (out / "summary.md").write_text(markdown_table(summary))
    return [out / "summary.json", out / "summary.md", *plots(summary, results, out)]


def load_sweep(
    exp: Experiment, speedups: Sequence[float], progress: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """The comparison at several loading bandwidths (sub-second to tens of seconds)."""
    from optsched.engine.workflows.problem import model_spec
    from optsched.predict.activation import ActivationPredictor
    from optsched.sim.workflows.workloads import MODELS

    pred = ActivationPredictor.default()
    rows = []
    for sp in speedups:
        sim = WorkflowSimConfig(**{**exp.sim.__dict__, "load_speedup": sp})
        sub = Experiment(**{**exp.__dict__, "sim": sim})
        summary, _ = run_experiment(sub, progress)
        loads = [pred.load_s(model_spec(m.params_b, m.memory_gib), sim.loader, sp) for m in MODELS]
        rows.append(
            {"load_speedup": sp, "load_s_min": min(loads), "load_s_max": max(loads), "summary": summary}
        )
    return {"speedups": list(speedups), "rows": rows}


def sweep_markdown(sweep: dict[str, Any]) -> str:
    lines = [
        "| load time (s), smallest–largest model | policy | makespan s | p95 s | GPU-s/session |",
        "|---|---|---|---|---|",
    ]
    for row in sweep["rows"]:
        for name, p in row["summary"]["policies"].items():
            lines.append(
                f"| {row['load_s_min']:.2f}–{row['load_s_max']:.1f} | {name} | "
                f"{p['makespan_s']:.1f} | {p['p95_latency_s']:.1f} | "
                f"{p['gpu_seconds_per_session']['total']:.1f} |"
            )
    return "\n".join(lines) + "\n"

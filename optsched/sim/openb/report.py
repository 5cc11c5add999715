"""Run a set of openb replays and write the table, the curves and the settings.

Writes ``summary.json`` (settings, every replay's numbers and curves), ``summary.md`` (the table:
allocation ratio and unallocated GPUs at 100% and 130% arrived, fragmentation, failed pods,
wall time) and one PNG per trace family (``default``, ``gpushare``, ``multigpu``, ``gpuspec``,
``cpu``) with allocation and fragmentation against arrived workload. Every file is written
atomically (temporary name, then rename).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from optsched.sim.openb.optsched_policy import OptschedEpochs
from optsched.sim.openb.policies import BASELINES, Policy
from optsched.sim.openb.protocol import DEFAULT_RATIO, Replay, arrivals, replay, tie_order
from optsched.sim.openb.reader import Nodes, Pods

POLICY_NAMES = ("random", "dotprod", "clustering", "packing", "bestfit", "fgd", "optsched-1", "optsched")
FAMILIES = ("default", "gpushare", "multigpu", "gpuspec", "cpu")


def trace_name(path: str | Path) -> str:
    """``openb_pod_list_gpushare40.csv.gz`` -> ``gpushare40``."""
    name = Path(path).name
    for suffix in (".gz", ".csv"):
        name = name.removesuffix(suffix)
    return name.removeprefix("openb_pod_list_")


def family(trace: str) -> str:
    """The trace family of a trace name (``other`` if none)."""
    for f in FAMILIES:
        if re.fullmatch(f + r"\d*", trace):
            return f
    return "other"


def make_policy(name: str, *, batch: int, work_limit: float, seed: int) -> Policy:
    """A policy by name."""
    if name == "optsched":
        return OptschedEpochs(batch=batch, work_limit=work_limit, seed=seed)
    if name not in BASELINES:
        raise ValueError(f"unknown policy {name!r}")
    return BASELINES[name]()


def row(trace: str, r: Replay) -> dict[str, Any]:
    """The table row of one replay."""
    c = r.curve
    i100 = c.at(100.0)
    return {
        "trace": trace,
        "policy": r.policy,
        "seed": r.seed,
        "pods": r.pods,
        "failed_pods": r.failed,
        "alloc_100": round(c.alloc_ratio[i100], 6),
        "unalloc_gpus_100": round(c.unallocated_gpus[i100], 3),
        "alloc_130": round(c.alloc_ratio[-1], 6),
        "unalloc_gpus_130": round(c.unallocated_gpus[-1], 3),
        "frag_gpus_130": round(c.frag_gpus[-1], 3),
        "frag_ratio_130": round(c.frag_ratio[-1], 6),
        "arrived_pct_end": round(c.arrived_pct[-1], 3),
        "wall_s": round(r.wall_s, 2),
        "notes": r.notes,
    }


def run_all(
    nodes: Nodes,
    traces: list[tuple[str, Pods]],
    policies: list[str],
    seeds: list[int],
    *,
    ratio: float = DEFAULT_RATIO,
    order: str = "shuffle",
    batch: int = 32,
    work_limit: float = 2.0,
    node_order: str = "shuffle",
    on_start: Callable[[str, str, int, int], None] | None = None,
    on_pods: Callable[[int], None] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every (trace, seed, policy) replay; returns the rows and the curves keyed ``trace/policy/seed``.

    Ties go to the first node of :func:`~.protocol.tie_order` (``node_order``) for the seed."""
    rows: list[dict[str, Any]] = []
    curves: dict[str, Any] = {}
    for trace, pods in traces:
        for seed in seeds:
            seq = arrivals(pods, nodes.gpu_capacity_milli, ratio=ratio, order=order, seed=seed)
            ordered = tie_order(nodes, seed, node_order)
            for name in policies:
                if on_start is not None:
                    on_start(trace, name, seed, len(seq))
                pol = make_policy(name, batch=batch, work_limit=work_limit, seed=seed)
                r = replay(ordered, seq, pol, workload=pods, seed=seed, progress=on_pods)
                rows.append(row(trace, r))
                c = r.curve
                curves[f"{trace}/{name}/{seed}"] = {
                    "arrived_pct": [round(x, 3) for x in c.arrived_pct],
                    "alloc_ratio": [round(x, 6) for x in c.alloc_ratio],
                    "frag_ratio": [round(x, 6) for x in c.frag_ratio],
                    "frag_gpus": [round(x, 3) for x in c.frag_gpus],
                    "unallocated_gpus": [round(x, 3) for x in c.unallocated_gpus],
                }
    return rows, curves


def markdown(rows: list[dict[str, Any]]) -> str:
    """The table (one line per trace, policy and seed)."""
    head = (
        "| trace | policy | seed | alloc @100% | unalloc GPUs @100% | alloc @130% | unalloc GPUs @130% "
        "| frag GPUs @130% | frag ratio @130% | failed pods | wall s |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = [
        f"| {r['trace']} | {r['policy']} | {r['seed']} | {r['alloc_100']:.4f} | {r['unalloc_gpus_100']:.1f} "
        f"| {r['alloc_130']:.4f} | {r['unalloc_gpus_130']:.1f} | {r['frag_gpus_130']:.1f} "
        f"| {r['frag_ratio_130']:.3f} "
        f"| {r['failed_pods']} | {r['wall_s']:.1f} |"
        for r in rows
    ]
    return head + "\n".join(lines) + "\n"


def _atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def plot_families(curves: dict[str, Any], out: Path) -> list[str]:
    """One PNG per trace family: allocation and fragmentation ratio against arrived workload."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written: list[str] = []
    by_family: dict[str, list[str]] = {}
    for key in curves:
        by_family.setdefault(family(key.split("/")[0]), []).append(key)
    for fam, keys in sorted(by_family.items()):
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
        for key in sorted(keys):
            c = curves[key]
            ax1.plot(c["arrived_pct"], [100 * a for a in c["alloc_ratio"]], label=key, lw=1)
            ax2.plot(c["arrived_pct"], [100 * f for f in c["frag_ratio"]], label=key, lw=1)
        ax1.set(
            xlabel="arrived workload (% of GPU capacity)",
            ylabel="GPU allocation ratio (%)",
            title=f"{fam}: allocation",
        )
        ax2.set(
            xlabel="arrived workload (% of GPU capacity)",
            ylabel="fragmented / free GPU (%)",
            title=f"{fam}: fragmentation",
        )
        ax1.grid(alpha=0.3)
        ax2.grid(alpha=0.3)
        ax1.legend(fontsize=6, ncol=2)
        fig.tight_layout()
        name = f"openb_{fam}.png"
        tmp = out / f".{name}.tmp.png"
        fig.savefig(tmp, dpi=110)
        plt.close(fig)
        os.replace(tmp, out / name)
        written.append(name)
    return written


def write(
    out: Path, rows: list[dict[str, Any]], curves: dict[str, Any], settings: dict[str, Any]
) -> list[str]:
    """Write summary.json, summary.md and the plots into ``out`` (created if missing)."""
    out.mkdir(parents=True, exist_ok=True)
    plots = plot_families(curves, out)
    doc = {"settings": settings, "rows": rows, "curves": curves, "plots": plots}
    _atomic(out / "summary.json", (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode())
    md = (
        "# openb replay\n\n" + "Settings: `" + json.dumps(settings, sort_keys=True) + "`\n\n" + markdown(rows)
    )
    _atomic(out / "summary.md", md.encode())
    return ["summary.json", "summary.md", *plots]


__all__ = ["FAMILIES", "POLICY_NAMES", "family", "make_policy", "markdown", "run_all", "trace_name", "write"]

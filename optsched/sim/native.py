"""Native settings: every policy replayed as its system runs in the world, and DeepShare's four
headline numbers against the Lucid-like baseline.

``--mode pooled`` and ``--mode partitioned`` compare every policy inside one setting. DeepShare's
headline is not such a comparison: it sets elastic borrowing (loans of idle quota, reclaimed
when the lender needs them) against the strongest non-intrusive sharing baseline, Lucid, which
runs every tenant as a hard partition (its simulator's virtual clusters). ``--mode native``
replays each policy in the setting its system runs in (:data:`NATIVE_MODES`) and
:func:`deepshare_headline` computes the four numbers of that comparison from the summary.
"""

from __future__ import annotations

import math
from typing import Any

NATIVE_MODES: dict[str, str] = {
    "fifo": "pooled",
    "sjf": "pooled",
    "qssf": "pooled",
    "tiresias": "pooled",
    "kueue": "pooled",
    "gandiva": "pooled",
    "lucid": "partitioned",
    "antman": "pooled",
    "optsched": "pooled",
}
"""The setting each policy's system runs in: ``partitioned`` = every tenant's quota is a hard
partition (no loans); ``pooled`` = idle quota of other tenants may be used (on declared loans)."""

NATIVE_WHY: dict[str, str] = {
    "fifo": "one cluster-wide FIFO queue over the pooled cluster (the classic baseline)",
    "sjf": "one cluster-wide queue, shortest estimate first, backfill",
    "qssf": "Helios' QSSF: one cluster-wide queue by estimated GPU-time",
    "tiresias": "Tiresias' 2D-LAS over the shared cluster, preempting lower queues",
    "kueue": "Kueue cohorts: nominal quota, borrowing idle quota of the cohort, "
             "reclaimWithinCohort",
    "gandiva": "Gandiva's packer over the shared cluster (backfill and MPS guests)",
    "lucid": "Lucid's simulator runs every virtual cluster as a hard partition",
    "antman": "AntMan: guaranteed jobs on their quota, opportunistic jobs on any idle GPU",
    "optsched": "loans of idle quota, reclaimed by the model when the lender needs them",
}
"""Why each policy's native setting is the one in :data:`NATIVE_MODES`."""

BASELINE = "lucid"
"""DeepShare's baseline: the strongest non-intrusive sharing scheduler, Lucid."""

GOALS: dict[str, tuple[str, float]] = {
    "utilization_ratio": (">=", 1.35),
    "queue_delay_ratio": ("<=", 0.30),
    "jct_ratio": ("<=", 0.66),
    "qos_compliance": (">=", 0.97),
}
"""The issue's goals for the four numbers (DeepShare reports +29.5% utilisation, -46%
queueing delay and, on its testbed, -34% JCT)."""


def native_mode(policy: str) -> str:
    """The setting ``policy`` runs in under ``--mode native``."""
    try:
        return NATIVE_MODES[policy]
    except KeyError:
        raise ValueError(f"no native setting for policy '{policy}'") from None


def _ratio(a: float, b: float) -> float:
    if math.isnan(a) or math.isnan(b) or b == 0:
        return math.nan
    return a / b


def _values(summary: dict[str, Any], policy: str, key: str) -> tuple[float, list[float]]:
    entry = summary["policies"][policy].get(key, {})
    mean = entry.get("mean")
    per_seed = entry.get("per_seed", [])
    return (math.nan if mean is None else float(mean),
            [math.nan if v is None else float(v) for v in per_seed])


def deepshare_headline(summary: dict[str, Any], policy: str = "optsched",
                       baseline: str = BASELINE) -> dict[str, Any] | None:
    """DeepShare's four headline numbers of ``policy`` against ``baseline`` (both in their
    native settings), or ``None`` when either did not run.

    * utilisation gain: ``policy``'s allocated utilisation (GPU-seconds held inside the
      measurement window over capacity × window) ÷ the baseline's (``utilization_ratio``; the
      gain is the ratio − 1); the same ratio of useful utilisation (work done, colocation
      slowdown and lost work discounted) is given beside it;
    * queueing delay: average queueing delay (first start − submission) ÷ the baseline's;
    * JCT: average job completion time (end − submission) ÷ the baseline's;
    * QoS of guaranteed tenants: the share of ``policy``'s guaranteed jobs that started within
      their tenant's target delay (``qos_compliance``), with the baseline's beside it.

    Ratios are of the means over seeds; ``per_seed`` holds each seed's ratio (the same seed's
    run of both policies). ``goals`` says which of :data:`GOALS` each number meets.
    """
    pols = summary.get("policies", {})
    if policy not in pols or baseline not in pols:
        return None
    out: dict[str, Any] = {"policy": policy, "baseline": baseline}
    for name, key in (("utilization_ratio", "utilization"),
                      ("useful_utilization_ratio", "useful_utilization"),
                      ("queue_delay_ratio", "avg_queue_delay_s"),
                      ("jct_ratio", "avg_jct_s"),
                      ("p95_jct_ratio", "p95_jct_s")):
        a, a_seeds = _values(summary, policy, key)
        b, b_seeds = _values(summary, baseline, key)
        out[name] = {"value": _ratio(a, b), "policy": a, "baseline": b,
                     "per_seed": [_ratio(x, y) for x, y in zip(a_seeds, b_seeds, strict=False)]}
    q, q_seeds = _values(summary, policy, "qos_compliance")
    qb, _ = _values(summary, baseline, "qos_compliance")
    out["qos_compliance"] = {"value": q, "policy": q, "baseline": qb, "per_seed": q_seeds}
    goals: dict[str, bool] = {}
    for name, (op, bound) in GOALS.items():
        v = out[name]["value"]
        goals[name] = (not math.isnan(v)) and (v >= bound if op == ">=" else v <= bound)
    out["goals"] = goals
    return out


def _f(v: Any) -> float:
    """A stored value as a float (``summary.json`` holds NaN as null)."""
    return math.nan if v is None else float(v)


def _pct(ratio: float) -> str:
    return "n/a" if math.isnan(ratio) else f"{(ratio - 1) * 100:+.1f}%"


def _x(ratio: float) -> str:
    return "n/a" if math.isnan(ratio) else f"{ratio:.2f}×"


def _seeds(values: list[Any], fmt: str) -> str:
    return ", ".join("n/a" if math.isnan(_f(v)) else fmt.format(_f(v)) for v in values)


def _cell(v: Any, fmt: str) -> str:
    return "n/a" if math.isnan(_f(v)) else fmt.format(_f(v))


def headline_lines(summary: dict[str, Any]) -> list[str]:
    """The report's *Native settings* section: which setting each policy ran in and, when
    optsched and Lucid-like both ran, DeepShare's four numbers with their goals."""
    modes: dict[str, str] = summary.get("native_modes") or {}
    if not modes:
        return []
    lines = ["## Native settings", "",
             "Each policy ran in the setting its system runs in (`--mode native`):", "",
             "| policy | setting | why |", "|---|---|---|"]
    for pol, mode in modes.items():
        lines.append(f"| {pol} | {mode} | {NATIVE_WHY.get(pol, '')} |")
    lines.append("")
    head = summary.get("deepshare")
    if not head:
        return lines
    names = {"utilization_ratio": "utilisation (allocated)",
             "useful_utilization_ratio": "useful utilisation",
             "queue_delay_ratio": "avg queueing delay",
             "jct_ratio": "avg JCT", "p95_jct_ratio": "p95 JCT"}
    lines += [f"### DeepShare's headline numbers: {head['policy']} against {head['baseline']}-like",
              "",
              f"{head['policy']} ÷ {head['baseline']}-like, means over seeds (each seed's ratio "
              "in the last column); a goal is the issue's, DeepShare's own number in brackets.",
              "",
              f"| number | {head['policy']} | {head['baseline']} | ratio | change | goal | met | per seed |",
              "|---|---:|---:|---:|---:|---|---|---|"]
    paper = {"utilization_ratio": " (+29.5%)", "queue_delay_ratio": " (−46%)",
             "jct_ratio": " (testbed: −34%)"}
    for name, label in names.items():
        e = head[name]
        seconds = name not in ("utilization_ratio", "useful_utilization_ratio")
        fmt = "{:,.0f}" if seconds else "{:.3f}"
        goal = GOALS.get(name)
        sign = {">=": "≥", "<=": "≤"}
        goal_txt = f"{sign[goal[0]]} {goal[1]:.2f}×{paper.get(name, '')}" if goal else ""
        met = ("yes" if head["goals"][name] else "**no**") if goal else ""
        lines.append(
            f"| {label} | {_cell(e['policy'], fmt)} | {_cell(e['baseline'], fmt)} | "
            f"{_x(_f(e['value']))} | {_pct(_f(e['value']))} | {goal_txt} | {met} | "
            f"{_seeds(e['per_seed'], '{:.3f}')} |")
    q = head["qos_compliance"]
    lines.append(
        f"| QoS of guaranteed jobs | {_cell(q['policy'], '{:.3f}')} | "
        f"{_cell(q['baseline'], '{:.3f}')} | | | ≥ 0.97 | "
        f"{'yes' if head['goals']['qos_compliance'] else '**no**'} | "
        f"{_seeds(q['per_seed'], '{:.3f}')} |")
    lines += ["", "Utilisation is GPU-seconds held inside the measurement window over GPUs × "
              "window (a GPU holding an MPS pair counts once); useful utilisation counts the "
              "work done instead. Queueing delay = first start − submission; JCT = end − "
              "submission; QoS = the share of guaranteed jobs that started within their "
              "tenant's target delay.", ""]
    return lines


__all__ = ["BASELINE", "GOALS", "NATIVE_MODES", "NATIVE_WHY", "deepshare_headline",
           "headline_lines", "native_mode"]

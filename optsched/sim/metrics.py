"""Metrics: pure functions of an :class:`~optsched.sim.cluster.EventLog`.

Definitions (``W = [w0, w1]`` is the measurement window, by default from the first to the
last submission of the trace, so the drain at the end does not dilute utilisation):

* ``utilization``: GPU-seconds *allocated* inside ``W`` (a GPU held by a host counts once,
  whether or not a guest shares it) over ``capacity × |W|``;
* ``useful_utilization``: work done inside ``W`` in exclusive-GPU-seconds (each segment's
  ``gpus × duration × rate``, host and guest alike, so colocation slowdown is discounted and a
  well-matched pair can add up to more than one GPU), minus the work thrown away by
  preemptions in ``W`` and the restart overhead paid for them, over ``capacity × |W|``;
* ``avg/p95_queue_delay_s``: first start − submission, over the jobs that started;
* ``avg/p95_jct_s``: end − submission, over the jobs that finished;
* ``qos_compliance``: among *guaranteed* jobs of tenants with a ``max_queue_delay_s``, the
  fraction that started within it (a job that never started does not comply);
* ``preemptions``; ``lost_gpu_hours``: GPU-hours of wall time since the last checkpoint at
  each preemption; ``loans_made`` (jobs started on loan), ``loans_reclaimed`` (preemptions
  with reason ``reclaim``); ``unfinished`` jobs; ``decisions`` and ``fallback_decisions``
  (decisions whose status is ``fallback``), ``event_decisions`` (made at an arrival or
  completion instant by the event path, see ``SimConfig.events``);
* ``makespan_s``: last job end − first submission (NaN when jobs are left unfinished);
  ``throughput_jobs_per_h``: jobs finished inside ``W`` per hour of ``W``;
* ``gpu_hours``: GPU-hours the jobs asked for (true runtime × GPUs, every job of the log);
  ``gpu_hours_held``: GPU-hours the jobs held GPUs over the whole run (host segments only: a
  guest sharing a host's GPUs holds none, as in ``utilization``);
* ``fragmented_gpu_share`` and ``stranded_gpu_share``: the free GPUs after each decision that
  the waiting jobs cannot use in their node shape (FGD's fragmentation measure against the
  waiting jobs, and the GPUs on nodes that hold no waiting job's largest piece:
  :func:`optsched.sim.cluster.free_gpu_shape`), each held until the next decision, averaged
  over ``W`` and over capacity; ``free_gpu_share`` likewise for every free GPU;
* ``offered_load``: ``gpu_hours`` over capacity × ``|W|`` (the demand of the trace against the
  cluster, the same for every policy of a seed); ``gpus`` (capacity), ``window_s`` (``|W|``).

:func:`per_tenant` splits the same figures by tenant; counts and GPU-hours of the tenants add
up to the totals of :func:`summarize` (a preemption, a lost GPU-hour, a held GPU-hour belongs to
the tenant of the job it happened to).

Percentiles use numpy's default (linear) interpolation.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from optsched.sim.expected import accuracy

if TYPE_CHECKING:
    from optsched.sim.cluster import EventLog

SUMMARY_KEYS: tuple[str, ...] = (
    "utilization",
    "useful_utilization",
    "avg_queue_delay_s",
    "p95_queue_delay_s",
    "avg_jct_s",
    "p95_jct_s",
    "qos_compliance",
    "preemptions",
    "lost_gpu_hours",
    "sim_seconds",
)
"""The per-policy keys of ``summary.json`` (mean and per-seed values)."""


def _overlap(t0: np.ndarray, t1: np.ndarray, w0: float, w1: float) -> np.ndarray:
    return np.clip(np.minimum(t1, w1) - np.maximum(t0, w0), 0.0, None)


def _mean(x: np.ndarray) -> float:
    return float(x.mean()) if x.size else math.nan


def _p95(x: np.ndarray) -> float:
    return float(np.percentile(x, 95)) if x.size else math.nan


def utilization(log: EventLog, window: tuple[float, float] | None = None) -> float:
    """Allocated GPU-time over capacity-time in the window."""
    w0, w1 = window or log.window
    if w1 <= w0 or log.capacity <= 0:
        return math.nan
    s = log.segments
    host = np.asarray(s["host"], dtype=bool)
    ov = _overlap(np.asarray(s["t0"], float), np.asarray(s["t1"], float), w0, w1)
    busy = float((ov * np.asarray(s["gpus"], float))[host].sum())
    return busy / (log.capacity * (w1 - w0))


def useful_utilization(log: EventLog, window: tuple[float, float] | None = None) -> float:
    """Work done (exclusive-GPU-seconds) net of lost work and restarts, over capacity-time."""
    w0, w1 = window or log.window
    if w1 <= w0 or log.capacity <= 0:
        return math.nan
    s = log.segments
    ov = _overlap(np.asarray(s["t0"], float), np.asarray(s["t1"], float), w0, w1)
    work = float((ov * np.asarray(s["gpus"], float) * np.asarray(s["rate"], float)).sum())
    p = log.preemptions
    t = np.asarray(p["t"], float)
    inw = (t >= w0) & (t <= w1)
    lost = float((np.asarray(p["lost_s"], float) * np.asarray(p["gpus"], float))[inw].sum())
    overhead = float(np.asarray(p["gpus"], float)[inw].sum()) * log.restart_overhead_s
    return (work - lost - overhead) / (log.capacity * (w1 - w0))


def decision_share(log: EventLog, column: str, window: tuple[float, float] | None = None) -> float:
    """A per-decision GPU count of ``log.decisions[column]``, each held until the next decision
    (the last one until the window's end), averaged over the window and over capacity."""
    w0, w1 = window or log.window
    d = log.decisions
    if w1 <= w0 or log.capacity <= 0 or column not in d:
        return math.nan
    t = np.asarray(d["t"], float)
    v = np.asarray(d[column], float)
    if t.size == 0:
        return math.nan
    ends = np.append(t[1:], max(w1, float(t[-1])))
    return float((_overlap(t, ends, w0, w1) * v).sum()) / (log.capacity * (w1 - w0))


def _job_arrays(log: EventLog) -> dict[str, np.ndarray]:
    j = log.jobs
    return {
        "submit": np.asarray(j["submit_s"], float),
        "start": np.asarray(j["start_s"], float),
        "end": np.asarray(j["end_s"], float),
        "gpus": np.asarray(j["gpus"], float),
        "guaranteed": np.asarray([q == "guaranteed" for q in j["qos"]], bool),
        "tenant": np.asarray(j["tenant"], dtype=object),
    }


def queue_delays(log: EventLog) -> np.ndarray:
    """First start − submission of every job that started."""
    a = _job_arrays(log)
    ok = ~np.isnan(a["start"])
    return a["start"][ok] - a["submit"][ok]


def jcts(log: EventLog) -> np.ndarray:
    """End − submission of every job that finished."""
    a = _job_arrays(log)
    ok = ~np.isnan(a["end"])
    return a["end"][ok] - a["submit"][ok]


def qos_compliance(log: EventLog, tenant: str | None = None) -> float:
    """Fraction of guaranteed jobs (of ``tenant``, or all) that started within their tenant's
    ``max_queue_delay_s``; NaN if there are none."""
    a = _job_arrays(log)
    limit = np.asarray(
        [log.tenants.get(t, {}).get("max_queue_delay_s", math.inf) for t in a["tenant"]], float
    )
    sel = a["guaranteed"] & np.isfinite(limit)
    if tenant is not None:
        sel &= a["tenant"] == tenant
    if not sel.any():
        return math.nan
    delay = a["start"] - a["submit"]
    ok = ~np.isnan(delay) & (delay <= limit + 1e-9)
    return float((ok & sel).sum() / sel.sum())


def summarize(log: EventLog, window: tuple[float, float] | None = None) -> dict[str, float]:
    """Every headline metric of one run (the keys of :data:`SUMMARY_KEYS` and a few more)."""
    qd = queue_delays(log)
    jc = jcts(log)
    p = log.preemptions
    lost_h = float(np.dot(np.asarray(p["lost_s"], float), np.asarray(p["gpus"], float))) / 3600
    a = _job_arrays(log)
    demand_h = float((np.asarray(log.jobs["true_s"], float) * a["gpus"]).sum()) / 3600
    w0, w1 = window or log.window
    span = w1 - w0
    return {
        "utilization": utilization(log, window),
        "useful_utilization": useful_utilization(log, window),
        "avg_queue_delay_s": _mean(qd),
        "p95_queue_delay_s": _p95(qd),
        "avg_jct_s": _mean(jc),
        "p95_jct_s": _p95(jc),
        "qos_compliance": qos_compliance(log),
        "preemptions": float(len(p["t"])),
        "lost_gpu_hours": lost_h,
        "sim_seconds": float(log.sim_seconds),
        "cpu_seconds": float(getattr(log, "cpu_seconds", math.nan)),
        "loans_made": float(sum(log.decisions["on_loan_started"])),
        "loans_reclaimed": float(sum(1 for r in p["reason"] if r == "reclaim")),
        "decisions": float(len(log.decisions["t"])),
        "fallback_decisions": float(sum(1 for st in log.decisions["status"] if st == "fallback")),
        "event_decisions": float(sum(1 for e in log.decisions.get("event", ()) if e)),
        "makespan_s": _makespan(a),
        "throughput_jobs_per_h": _throughput(a, w0, w1),
        "unfinished": float(np.isnan(a["end"]).sum()),
        "jobs": float(len(a["end"])),
        "guaranteed_jobs": float(a["guaranteed"].sum()),
        "gpu_hours": demand_h,
        "gpu_hours_held": float(_held_gpu_seconds(log).sum()) / 3600,
        "free_gpu_share": decision_share(log, "free_gpus", window),
        "fragmented_gpu_share": decision_share(log, "fragmented_gpus", window),
        "stranded_gpu_share": decision_share(log, "stranded_gpus", window),
        "offered_load": (demand_h * 3600 / (log.capacity * span)
                         if span > 0 and log.capacity > 0 else math.nan),
        "gpus": float(log.capacity),
        "window_s": float(span),
        **accuracy(log),
    }


def _makespan(a: dict[str, np.ndarray]) -> float:
    """Last end − first submission (NaN if no job finished); unfinished jobs make it NaN too,
    since the run stopped before the trace was done."""
    if len(a["end"]) == 0 or np.isnan(a["end"]).any():
        return math.nan
    return float(a["end"].max() - a["submit"].min())


def _throughput(a: dict[str, np.ndarray], w0: float, w1: float) -> float:
    """Jobs finished inside the window per hour of the window."""
    if w1 <= w0:
        return math.nan
    end = a["end"]
    done = ~np.isnan(end) & (end >= w0) & (end <= w1)
    return float(done.sum()) / ((w1 - w0) / 3600.0)


def _held_gpu_seconds(log: EventLog) -> np.ndarray:
    """GPU-seconds each job (row of ``log.jobs``) held GPUs as a host over the whole run."""
    s = log.segments
    held = np.zeros(len(log.jobs["id"]))
    host = np.asarray(s["host"], dtype=bool)
    gpu_s = (np.asarray(s["t1"], float) - np.asarray(s["t0"], float)) * np.asarray(s["gpus"], float)
    np.add.at(held, np.asarray(s["job"], dtype=np.int64)[host], gpu_s[host])
    return held


def per_tenant(log: EventLog) -> dict[str, dict[str, float]]:
    """Per tenant (of the jobs in ``log``), the job-level figures of :func:`summarize`:

    ``jobs``, ``guaranteed_jobs``, ``unfinished``; ``avg/p95_queue_delay_s`` and
    ``avg/p95_jct_s`` over the tenant's jobs; ``qos_compliance`` of its guaranteed jobs;
    ``gpu_hours`` (asked for: true runtime × GPUs) and ``gpu_hours_held`` (held as a host, whole
    run); ``preemptions``, ``lost_gpu_hours`` and ``loans_reclaimed`` of the tenant's jobs.
    Counts and GPU-hours add up over tenants to the totals of :func:`summarize`."""
    a = _job_arrays(log)
    true_s = np.asarray(log.jobs["true_s"], float)
    held = _held_gpu_seconds(log)
    p = log.preemptions
    p_tenant = a["tenant"][np.asarray(p["job"], dtype=np.int64)] if p["job"] else \
        np.asarray([], dtype=object)
    p_lost = np.asarray(p["lost_s"], float) * np.asarray(p["gpus"], float)
    p_reclaim = np.asarray([r == "reclaim" for r in p["reason"]], bool)
    delay = a["start"] - a["submit"]
    jct = a["end"] - a["submit"]
    out: dict[str, dict[str, float]] = {}
    for ten in sorted(set(a["tenant"].tolist())):
        sel = a["tenant"] == ten
        started = sel & ~np.isnan(a["start"])
        ended = sel & ~np.isnan(a["end"])
        mine = p_tenant == ten
        out[ten] = {
            "jobs": float(sel.sum()),
            "guaranteed_jobs": float((sel & a["guaranteed"]).sum()),
            "avg_queue_delay_s": _mean(delay[started]),
            "avg_jct_s": _mean(jct[ended]),
            "qos_compliance": qos_compliance(log, ten),
            "gpu_hours": float((true_s * a["gpus"])[sel].sum() / 3600),
            "p95_queue_delay_s": _p95(delay[started]),
            "p95_jct_s": _p95(jct[ended]),
            "unfinished": float((sel & np.isnan(a["end"])).sum()),
            "gpu_hours_held": float(held[sel].sum() / 3600),
            "preemptions": float(mine.sum()),
            "lost_gpu_hours": float(p_lost[mine].sum() / 3600),
            "loans_reclaimed": float((mine & p_reclaim).sum()),
        }
    return out


def utilization_series(log: EventLog, bin_s: float = 3600.0) -> tuple[np.ndarray, np.ndarray]:
    """Allocated GPUs / capacity, averaged over bins of ``bin_s``: ``(bin starts, values)``."""
    s = log.segments
    t0 = np.asarray(s["t0"], float)
    t1 = np.asarray(s["t1"], float)
    g = np.asarray(s["gpus"], float)
    host = np.asarray(s["host"], bool)
    start = math.floor(log.window[0] / bin_s) * bin_s
    end = max(log.end_time, start + bin_s)
    edges = np.arange(start, end + bin_s, bin_s)
    busy = np.zeros(len(edges) - 1)
    # each segment adds gpus×overlap to every bin it touches (vectorised over bins per segment)
    for a, b, n in zip(t0[host], t1[host], g[host], strict=True):
        i0 = int((a - start) // bin_s)
        i1 = min(int((b - start) // bin_s), len(busy) - 1)
        for i in range(max(i0, 0), i1 + 1):
            lo, hi = edges[i], edges[i + 1]
            busy[i] += n * max(0.0, min(b, hi) - max(a, lo))
    return edges[:-1], busy / (log.capacity * bin_s)


def aggregate(runs: list[dict[str, float]]) -> dict[str, Any]:
    """``{key: {"mean": m, "per_seed": [...]}}`` over runs (NaN-aware mean)."""
    out: dict[str, Any] = {}
    keys: dict[str, None] = {}
    for r in runs:
        keys.update(dict.fromkeys(r))
    for k in keys:
        vals = [r.get(k, math.nan) for r in runs]
        finite = [v for v in vals if not math.isnan(v)]
        out[k] = {
            "mean": (sum(finite) / len(finite)) if finite else math.nan,
            "per_seed": vals,
        }
    return out

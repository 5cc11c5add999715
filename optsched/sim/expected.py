"""How accurate are the expected starts a policy announces (``Decision.expected_start_s``)?

:class:`ExpectedStarts` is the simulator's recorder: at every decision it notes each queued
job's expected start, and when the job next starts it fills in the actual start. The rows form
the event log's ``expected`` table (``t, job, expected_s, actual_s``; ``actual_s`` is NaN when
the job had not started by the end of the run). :func:`accuracy` summarises it, and
:func:`large_gang_delay` gives the queueing delay of the large gangs the reservations are for.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from optsched.schema.decision import Decision
    from optsched.sim.cluster import EventLog

LARGE_GANG_GPUS = 33
"""Gangs of at least this many GPUs are *large* (:func:`large_gang_delay`)."""

ACCURACY_KEYS: tuple[str, ...] = (
    "expected_start_samples",
    "expected_start_median_abs_err_s",
    "expected_start_p90_abs_err_s",
    "expected_start_within_epoch",
    "expected_start_median_err_s",
    "large_gang_jobs",
    "large_gang_avg_queue_delay_s",
)
"""The keys :func:`accuracy` adds to a run's summary."""


class ExpectedStarts:
    """Records expected starts per decision and resolves them at the job's next start."""

    def __init__(self, index: dict[str, int]) -> None:
        self.index = index
        self.cols: dict[str, list[Any]] = {"t": [], "job": [], "expected_s": [], "actual_s": []}
        self._open: dict[int, list[int]] = defaultdict(list)

    def record(self, now: float, decision: Decision) -> None:
        """Note every expected start of ``decision`` (made at ``now``)."""
        c = self.cols
        for jid, at in decision.expected_start_s.items():
            i = self.index[jid]
            self._open[i].append(len(c["t"]))
            c["t"].append(now)
            c["job"].append(i)
            c["expected_s"].append(float(at))
            c["actual_s"].append(math.nan)

    def started(self, job: int, now: float) -> None:
        """Job ``job`` (trace index) starts at ``now``: every open expectation of it resolves."""
        for row in self._open.pop(job, ()):
            self.cols["actual_s"][row] = now


def accuracy(log: EventLog) -> dict[str, float]:
    """Accuracy of the resolved expected starts of one run, and the large gangs' delay.

    ``expected_start_median_abs_err_s`` / ``_p90_abs_err_s``: median and 90th percentile of
    ``|actual - expected|`` over every (decision, queued job) pair whose job started later
    (a decision the simulator logged without asking the policy, status ``unchanged`` or an
    idle baseline's, announces nothing and adds no pair);
    ``expected_start_within_epoch``: the share of them within one epoch (``log.epoch_s``);
    ``expected_start_median_err_s``: the median of ``actual - expected`` (above 0: jobs start
    later than announced); NaN without samples. ``large_gang_*``: see :func:`large_gang_delay`.
    """
    e = getattr(log, "expected", None) or {}
    exp = np.asarray(e.get("expected_s", []), float)
    act = np.asarray(e.get("actual_s", []), float)
    ok = ~np.isnan(act)
    err = act[ok] - exp[ok]
    n = int(err.size)
    nan = math.nan
    a = np.abs(err)
    n_large, delay = large_gang_delay(log)
    return {
        "expected_start_samples": float(n),
        "expected_start_median_abs_err_s": float(np.median(a)) if n else nan,
        "expected_start_p90_abs_err_s": float(np.percentile(a, 90)) if n else nan,
        "expected_start_within_epoch": float((a <= log.epoch_s).mean()) if n else nan,
        "expected_start_median_err_s": float(np.median(err)) if n else nan,
        "large_gang_jobs": float(n_large),
        "large_gang_avg_queue_delay_s": delay,
    }


def large_gang_delay(log: EventLog, gpus: int = LARGE_GANG_GPUS) -> tuple[int, float]:
    """(jobs of at least ``gpus`` GPUs, their mean queueing delay over those that started)."""
    g = np.asarray(log.jobs["gpus"], float)
    sub = np.asarray(log.jobs["submit_s"], float)
    st = np.asarray(log.jobs["start_s"], float)
    big = g >= gpus
    d = (st - sub)[big & ~np.isnan(st)]
    return int(big.sum()), float(d.mean()) if d.size else math.nan


COLUMNS: tuple[tuple[str, str], ...] = (
    ("samples", "expected starts announced (decision, queued job) whose job started later"),
    ("median abs err (s)", "median of |actual start − expected start| over those samples"),
    ("p90 abs err (s)", "90th percentile of the same absolute errors"),
    ("within one epoch", "share of the samples whose absolute error is at most one epoch"),
    ("median err (s)", "median of actual − expected: above 0, jobs start later than announced"),
    ("large gangs", f"jobs of {LARGE_GANG_GPUS}+ GPUs in the slice replayed"),
    ("large-gang avg queue (s)", "their mean queueing delay (first start − submission)"),
)
"""The columns of the ``## Expected starts`` table: header, definition."""


def column_lines() -> list[str]:
    """The definitions of :data:`COLUMNS`, as the report's ``## Columns`` section lists them."""
    return [f"- **{h}**: {d}." for h, d in COLUMNS]


def report_lines(summary: dict[str, Any]) -> list[str]:
    """The ``## Expected starts`` section of ``summary.md`` (empty when no policy announced any)."""
    pols = summary.get("policies", {})
    rows = []
    for pol, m in pols.items():
        n = m.get("expected_start_samples", {}).get("mean", math.nan)
        if isinstance(n, float) and not math.isnan(n) and n > 0:
            rows.append((pol, m))
    if not rows:
        return []

    def val(m: dict[str, Any], key: str, fmt: str) -> str:
        v = m.get(key, {}).get("mean", math.nan)
        return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)

    heads = " | ".join(h for h, _ in COLUMNS)
    lines = [
        "## Expected starts",
        "",
        "How far the expected start a policy announced for a queued job (at every decision, within "
        "its look-ahead horizon) was from the job's actual next start, over every such "
        "announcement whose job started (means over seeds). *err* = actual − expected; "
        f"*large gangs* are jobs of {LARGE_GANG_GPUS}+ GPUs.",
        "",
        f"| policy | {heads} |",
        "|---" * (len(COLUMNS) + 1) + "|",
    ]
    for pol, m in rows:
        lines.append(
            f"| {pol} | {val(m, 'expected_start_samples', '.0f')} "
            f"| {val(m, 'expected_start_median_abs_err_s', '.0f')} "
            f"| {val(m, 'expected_start_p90_abs_err_s', '.0f')} "
            f"| {val(m, 'expected_start_within_epoch', '.3f')} "
            f"| {val(m, 'expected_start_median_err_s', '.0f')} "
            f"| {val(m, 'large_gang_jobs', '.0f')} "
            f"| {val(m, 'large_gang_avg_queue_delay_s', '.0f')} |"
        )
    return [*lines, ""]

"""Fidelity of our partitioned replay against Lucid's own simulator, per virtual cluster.

Both simulators reduce to one record per job: ``(id, vc, gpus, submit, start, end)``. From
those records, on each side's own clock, :func:`vc_metrics` computes per VC the average
queueing delay (start − submit, over the jobs that started) and the allocated utilisation
(GPU-seconds held inside the window over the VC's GPUs × the window). The window is the
arrival window of the input, first to last submission, the same jobs on both sides; the
drain after the last arrival is left out so a long tail job does not dilute the figure.

:func:`read_lucid_logs` reads the per-VC job logs that Lucid's ``simulator.py`` writes
(``<log>/<vc>/<policy>_<placer>_<vc>_log.csv``); :func:`records_from_log` takes ours from an
:class:`~optsched.sim.cluster.EventLog`. :func:`compare` sets them side by side with the
relative differences, and :func:`cut_venus_log` writes the first ``n`` jobs of a Venus log
(keeping Lucid's leading anchor row) so both simulators read the identical file. Nothing here
imports Lucid's code.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from optsched.sim.cluster import EventLog
from optsched.sim.trace import NodeSpec, Trace

DEFAULT_TOLERANCE = 0.10
"""The issue's bar: per-VC figures within 10 % where the VC queues at all."""

QUEUES_AT_ALL_S = 1.0
"""A VC "queues at all" when either side's average queueing delay reaches this (seconds)."""


@dataclass(frozen=True)
class JobRecord:
    """One job's outcome; ``start``/``end`` are NaN when it never started/finished."""

    id: str
    vc: str
    gpus: int
    submit: float
    start: float
    end: float


@dataclass(frozen=True)
class VcMetrics:
    """Per-VC figures of one simulator's run."""

    jobs: int
    started: int
    avg_queue_s: float
    utilisation: float


def _open_text(path: Path) -> io.TextIOBase:
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="")
    return open(path, encoding="utf-8", newline="")


def cut_venus_log(src: str | Path, dst: str | Path, n_jobs: int | None,
                  anchor_gap_s: float = 7 * 86400) -> int:
    """Write the first ``n_jobs`` jobs (by submission, ties in file order) of the Venus log
    ``src`` to ``dst`` (plain CSV), keeping leading anchor rows: rows more than
    ``anchor_gap_s`` before the next row, which Lucid uses as its time origin and our
    reader drops. ``None`` keeps all jobs. Returns the number of jobs written (anchors not
    counted)."""
    if n_jobs is not None and n_jobs < 1:
        raise ValueError(f"n_jobs: must be at least 1, not {n_jobs}")
    with _open_text(Path(src)) as fh:
        reader = csv.DictReader(fh)
        fields = list(reader.fieldnames or [])
        for need in ("job_id", "vc", "gpu_num", "submit_time", "duration"):
            if need not in fields:
                raise ValueError(f"{src}: column '{need}' missing")
        rows = list(reader)
    order = sorted(range(len(rows)), key=lambda i: (_ts(rows[i]["submit_time"]), i))
    anchors: list[int] = []
    while len(anchors) + 1 < len(order):
        here, nxt = order[len(anchors)], order[len(anchors) + 1]
        gap = (_ts(rows[nxt]["submit_time"]) - _ts(rows[here]["submit_time"])).total_seconds()
        if gap <= anchor_gap_s:
            break
        anchors.append(here)
    jobs = order[len(anchors):]
    if n_jobs is not None:
        jobs = jobs[:n_jobs]
    keep = sorted(anchors + jobs)  # file order, as Lucid sorts by submit time itself
    with open(dst, "w", encoding="utf-8", newline="") as out:
        w = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
        w.writeheader()
        for i in keep:
            w.writerow(rows[i])
    return len(jobs)


def _ts(value: str) -> datetime:
    return datetime.fromisoformat(value.strip())


def _num(value: Any) -> float:
    if value is None or value == "":
        return math.nan
    x = float(value)
    return x


def read_lucid_logs(log_dir: str | Path, vcs: Iterable[str], policy: str,
                    placer: str = "consolidate") -> list[JobRecord]:
    """The job records of one Lucid run: ``<log_dir>/<vc>/<policy>_<placer>_<vc>_log.csv``
    for each VC. Lucid writes ``start_time``/``end_time`` as ``sys.maxsize`` for a job that
    never started; those become NaN."""
    out: list[JobRecord] = []
    for vc in vcs:
        path = Path(log_dir) / vc / f"{policy}_{placer}_{vc}_log.csv"
        if not path.is_file():
            raise FileNotFoundError(f"Lucid log missing for VC '{vc}': {path}")
        with open(path, encoding="utf-8", newline="") as fh:
            for row in csv.DictReader(fh):
                start, end = _num(row["start_time"]), _num(row["end_time"])
                never = float(2**62)
                out.append(JobRecord(
                    id=str(row["job_id"]).strip(), vc=str(row["vc"]), gpus=int(float(row["gpu_num"])),
                    submit=_num(row["submit_time"]),
                    start=math.nan if start >= never else start,
                    end=math.nan if end >= never else end))
    return out


def records_from_log(log: EventLog) -> list[JobRecord]:
    """Our job records from an event log (``tenant`` is the VC)."""
    j = log.jobs
    return [JobRecord(id=str(i), vc=str(t), gpus=int(g), submit=float(s), start=float(a),
                      end=float(e))
            for i, t, g, s, a, e in zip(j["id"], j["tenant"], j["gpus"], j["submit_s"],
                                        j["start_s"], j["end_s"], strict=True)]


def vc_metrics(records: list[JobRecord], vc_gpus: dict[str, int],
               window: tuple[float, float] | None = None) -> dict[str, VcMetrics]:
    """Per VC of ``vc_gpus``: jobs, started jobs, average queueing delay of the started jobs
    (NaN if none), and allocated utilisation over ``window`` (default: first to last
    submission of ``records``). A job still running at the end counts until the window's end;
    GPU-seconds are counted from the job's own GPU count (both simulators place a job on
    exactly ``gpus`` GPUs of its own VC)."""
    if not records:
        raise ValueError("no job records")
    if window is None:
        subs = [r.submit for r in records]
        window = (min(subs), max(subs))
    w0, w1 = window
    span = w1 - w0
    out: dict[str, VcMetrics] = {}
    for vc, cap in vc_gpus.items():
        mine = [r for r in records if r.vc == vc]
        started = [r for r in mine if not math.isnan(r.start)]
        queue = (sum(r.start - r.submit for r in started) / len(started)) if started else math.nan
        busy = 0.0
        for r in started:
            end = w1 if math.isnan(r.end) else r.end
            busy += r.gpus * max(0.0, min(end, w1) - max(r.start, w0))
        util = busy / (cap * span) if cap > 0 and span > 0 else math.nan
        out[vc] = VcMetrics(jobs=len(mine), started=len(started), avg_queue_s=queue,
                            utilisation=util)
    return out


def rel_diff(ours: float, theirs: float) -> float:
    """(ours − theirs) / theirs; 0 when both are 0, NaN when only theirs is 0 or either is
    NaN."""
    if math.isnan(ours) or math.isnan(theirs):
        return math.nan
    if theirs == 0:
        return 0.0 if ours == 0 else math.nan
    return (ours - theirs) / theirs


def compare(ours: dict[str, VcMetrics], theirs: dict[str, VcMetrics],
            tolerance: float = DEFAULT_TOLERANCE,
            queues_at_all_s: float = QUEUES_AT_ALL_S) -> list[dict[str, Any]]:
    """One row per VC (in ``theirs``' order) with both sides' figures, the relative
    differences and ``ok``: whether queueing and utilisation are both within ``tolerance``.
    A VC where neither side's average queue reaches ``queues_at_all_s`` is judged on
    utilisation only (``queues`` False)."""
    rows: list[dict[str, Any]] = []
    for vc, t in theirs.items():
        if vc not in ours:
            raise KeyError(f"VC '{vc}' missing from our run")
        o = ours[vc]
        if o.jobs != t.jobs:
            raise ValueError(f"VC '{vc}': {o.jobs} jobs in ours, {t.jobs} in Lucid's: "
                             "the inputs differ")
        dq, du = rel_diff(o.avg_queue_s, t.avg_queue_s), rel_diff(o.utilisation, t.utilisation)
        queues = max(_zero_nan(o.avg_queue_s), _zero_nan(t.avg_queue_s)) >= queues_at_all_s
        q_ok = (not queues) or (not math.isnan(dq) and abs(dq) <= tolerance)
        u_ok = not math.isnan(du) and abs(du) <= tolerance
        rows.append({"vc": vc, "jobs": t.jobs,
                     "lucid_queue_s": t.avg_queue_s, "ours_queue_s": o.avg_queue_s,
                     "queue_rel_diff": dq, "lucid_util": t.utilisation,
                     "ours_util": o.utilisation, "util_rel_diff": du, "queues": queues,
                     "ok": q_ok and u_ok})
    return rows


def _zero_nan(x: float) -> float:
    return 0.0 if math.isnan(x) else x


def same_starts(ours: list[JobRecord], theirs: list[JobRecord], offset_s: float,
                slack_s: float = 1.0) -> tuple[int, int]:
    """How many jobs (by id) start within ``slack_s`` of each other once Lucid's clock is
    shifted by ``offset_s`` (ours = theirs − offset), out of the jobs both know."""
    mine = {r.id: r for r in ours}
    same = both = 0
    for t in theirs:
        o = mine.get(t.id)
        if o is None:
            continue
        both += 1
        o_nan, t_nan = math.isnan(o.start), math.isnan(t.start)
        if o_nan or t_nan:
            same += int(o_nan and t_nan)
        elif abs(o.start - (t.start - offset_s)) <= slack_s:
            same += 1
    return same, both


def clock_offset(ours: list[JobRecord], theirs: list[JobRecord]) -> float:
    """Lucid's submit time minus ours for the first job both know (Lucid counts from its
    anchor row, we from midnight of the first job's day); checks it is the same for all."""
    mine = {r.id: r.submit for r in ours}
    offs = {round(t.submit - mine[t.id], 6) for t in theirs if t.id in mine}
    if not offs:
        raise ValueError("no job id in common between the two runs")
    if len(offs) != 1:
        raise ValueError(f"the two clocks disagree by more than a shift: {sorted(offs)[:5]}")
    return offs.pop()


def _fmt_s(x: float) -> str:
    return "–" if math.isnan(x) else f"{x:,.0f}"


def _fmt_u(x: float) -> str:
    return "–" if math.isnan(x) else f"{x:.3f}"


def _fmt_d(x: float) -> str:
    return "–" if math.isnan(x) else f"{x:+.1%}"


def markdown_table(rows: list[dict[str, Any]], title: str) -> str:
    """The side-by-side table: queueing and utilisation of Lucid and ours per VC."""
    lines = [f"### {title}", "",
             "| VC | jobs | Lucid avg queue (s) | ours avg queue (s) | Δ queue | Lucid util | "
             "ours util | Δ util | within 10% |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        verdict = "yes" if r["ok"] else "**no**"
        if not r["queues"]:
            verdict += " (no queue)"
        lines.append(f"| {r['vc']} | {r['jobs']:,} | {_fmt_s(r['lucid_queue_s'])} | "
                     f"{_fmt_s(r['ours_queue_s'])} | {_fmt_d(r['queue_rel_diff'])} | "
                     f"{_fmt_u(r['lucid_util'])} | {_fmt_u(r['ours_util'])} | "
                     f"{_fmt_d(r['util_rel_diff'])} | {verdict} |")
    return "\n".join(lines) + "\n"



def split_by_vc(trace: Trace) -> dict[str, Trace]:
    """One trace per tenant: its own jobs, only that tenant, and whole nodes adding up to its
    quota, like Lucid's simulator, which builds one ``VC`` object (own nodes, own queue) per
    virtual cluster and replays each alone. A tenant without jobs is left out; a quota that is
    not a whole number of the trace's nodes is an error."""
    if not trace.nodes:
        raise ValueError("trace has no nodes")
    per_node = trace.nodes[0].gpus
    gpu_type = trace.nodes[0].gpu_type
    out: dict[str, Trace] = {}
    for ten in trace.tenants:
        jobs = tuple(j for j in trace.jobs if j.tenant == ten.id)
        if not jobs:
            continue
        gpus = sum(ten.quota.values())
        if gpus % per_node:
            raise ValueError(f"tenant '{ten.id}': quota {gpus} is not whole nodes of {per_node}")
        nodes = tuple(NodeSpec(f"{ten.id}-n{i:03d}", gpu_type, per_node)
                      for i in range(gpus // per_node))
        out[ten.id] = replace(trace, name=f"{trace.name}:{ten.id}", jobs=jobs, tenants=(ten,),
                              nodes=nodes)
    return out

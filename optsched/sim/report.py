"""The report an operator reads: ``summary.md`` of ``optsched simulate``.

:func:`render_report` turns the summary of :func:`optsched.sim.runner.run_many` (the content of
``summary.json``) into Markdown with five sections:

* **Headline**: for every metric, who wins and, when ``optsched`` is among the policies, how it
  compares with the best of the others (the *baselines*) as a ratio ``optsched ÷ best
  baseline``, labelled better, worse or tie;
* **Totals**: one row per policy, means over seeds;
* **Per tenant**: one table per policy, a row per tenant and a row for all tenants;
* **Settings**: what the runs used, read from the summary (the optsched policy's options as
  given to it, or the defaults it ran with when none were given);
* **Columns**: every column of every table above, defined in plain words.

Only the summary is read: the report of a stored ``summary.json`` can be rebuilt with
``render_report(json.loads(text))``.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any

from optsched.sim.expected import column_lines, report_lines
from optsched.sim.native import headline_lines

REFERENCE = "optsched"
"""The policy the headline compares with the others (when it ran)."""

TIE_REL = 0.005
"""Relative difference under which the headline calls a comparison a tie (0.5%)."""


@dataclass(frozen=True)
class Column:
    """A column of a report table: summary key, header, number format, plain-words meaning."""

    key: str
    header: str
    kind: str
    """``ratio`` (3 decimals), ``seconds``, ``count``, ``hours`` or ``fraction``."""
    definition: str


_UTIL = Column(
    "utilization", "util", "ratio",
    "allocated utilisation: GPU-seconds held by jobs inside the measurement window (first to "
    "last submission) over GPUs × window length. A GPU counts once while a job holds it, "
    "whether or not a second job shares it through MPS.")
_USEFUL = Column(
    "useful_utilization", "useful util", "ratio",
    "work done inside the window, in exclusive-GPU-seconds (GPUs × time × the speed the job "
    "ran at, for every job, MPS host and guest alike), minus the work thrown away by "
    "preemptions in the window and the restart overhead paid for them, over GPUs × window "
    "length. It can exceed `util`: under MPS colocation two jobs progressing on one GPU count "
    "their progress twice (host and guest, each at its colocated speed: 0.7 + 0.6 = 1.3 "
    "GPU-seconds of work per second, say) while the GPU counts once in `util`. Without "
    "sharing every job runs at speed 1 and it equals `util` less the lost work and restarts.")
_AVG_Q = Column(
    "avg_queue_delay_s", "avg queue (s)", "seconds",
    "mean queueing delay: first start − submission, over the row's jobs that started.")
_P95_Q = Column(
    "p95_queue_delay_s", "p95 queue (s)", "seconds",
    "95th percentile of the same queueing delays (linear interpolation).")
_AVG_J = Column(
    "avg_jct_s", "avg JCT (s)", "seconds",
    "mean job completion time: end − submission, over the row's jobs that finished "
    "(queueing, running, and time lost to preemptions).")
_P95_J = Column(
    "p95_jct_s", "p95 JCT (s)", "seconds", "95th percentile of the same completion times.")
_QOS = Column(
    "qos_compliance", "QoS", "ratio",
    "QoS compliance: among the row's *guaranteed* jobs (jobs inside their tenant's quota, see "
    "Settings), the fraction that started within the tenant's queueing-delay target; a job "
    "that never started does not comply. 1.000 = every guaranteed job started in time; n/a = "
    "no guaranteed jobs.")
_PRE = Column(
    "preemptions", "preempt", "count",
    "preemptions: how many times a running job of the row was stopped by the policy to free "
    "its GPUs (it goes back to the queue and restarts from its last checkpoint).")
_LOST = Column(
    "lost_gpu_hours", "lost GPU-h", "hours",
    "lost GPU-hours: at each preemption, the wall time since the job's last checkpoint × its "
    "GPUs, summed (work done and thrown away; the restart overhead is not included).")
_LOANS = Column(
    "loans_made", "loans", "count",
    "jobs started on loan: beyond their tenant's own quota, on GPUs of another tenant's idle "
    "quota (declared by the policy in its decision). The lending tenant may take them back "
    "(see `reclaimed`).")
_RECL = Column(
    "loans_reclaimed", "reclaimed", "count",
    "loans reclaimed: preemptions with reason `reclaim`, i.e. an on-loan job of the row "
    "stopped so that the lending tenant could use its own quota.")
_UNF = Column(
    "unfinished", "unfinished", "count",
    "jobs of the row that had not finished when the run stopped (excluded from JCT).")
_HELD = Column(
    "gpu_hours_held", "GPU-h held", "hours",
    "GPU-hours the row's jobs held GPUs, over the whole run (not only the window). An MPS "
    "guest holds none: it shares its host's GPUs, counted once, as in `util`.")
_ASKED = Column(
    "gpu_hours", "GPU-h asked", "hours",
    "GPU-hours the row's jobs asked for: true runtime × GPUs, summed (the demand; the same "
    "under every policy for a seed).")
_WALL = Column(
    "sim_seconds", "wall s", "seconds",
    "wall-clock seconds one replay took (the policy's decisions, the checker and the "
    "simulator), mean over seeds: the cost of computing the schedule, not a job metric.")
_FRAG = Column(
    "fragmented_gpu_share", "fragmented", "ratio",
    "free GPUs the waiting jobs cannot use in their node shape, FGD's measure: after each "
    "decision, every node's free GPUs times the share of the waiting jobs (of its GPU type) "
    "whose largest piece (the whole job when it fits a node, else a whole node) is larger "
    "than what the node has free, held until the next decision, over GPUs × window length.")
_STRAND = Column(
    "stranded_gpu_share", "stranded", "ratio",
    "free GPUs on nodes that hold no waiting job's largest piece at all (idle while jobs of "
    "that GPU type wait, for the node shape alone), after each decision, over GPUs × window "
    "length.")
_JOBS = Column("jobs", "jobs", "count", "jobs of the row in the trace slice replayed.")
_GUAR = Column(
    "guaranteed_jobs", "guaranteed", "count",
    "of those, the guaranteed jobs (the ones QoS compliance counts).")

TOTAL_COLUMNS: tuple[Column, ...] = (
    _UTIL, _USEFUL, _AVG_Q, _P95_Q, _AVG_J, _P95_J, _QOS, _PRE, _LOST, _LOANS, _RECL, _UNF,
    _HELD, _FRAG, _STRAND, _WALL,
)
"""The totals table (one row per policy)."""

TENANT_COLUMNS: tuple[Column, ...] = (
    _JOBS, _GUAR, _AVG_Q, _P95_Q, _AVG_J, _QOS, _ASKED, _HELD, _PRE, _LOST, _RECL, _UNF,
)
"""The per-tenant tables (one per policy)."""

SUMMED_TENANT_KEYS: tuple[str, ...] = (
    "jobs", "guaranteed_jobs", "gpu_hours", "gpu_hours_held", "preemptions", "lost_gpu_hours",
    "loans_reclaimed", "unfinished",
)
"""Per-tenant figures that add up over tenants to the policy's total."""

_ROW_HEADERS = {
    "policy": "the scheduling policy replayed (see the policies table of docs/simulator.md).",
    "tenant": "the tenant (virtual cluster) the jobs belong to; **all** = every tenant: its "
              "values are the policy's totals (the counts and GPU-hours of the tenant rows add "
              "up to them; delays, JCTs and QoS are over all jobs, not an average of rows).",
}


@dataclass(frozen=True)
class Metric:
    """A headline metric: summary key, name, better direction, unit kind."""

    key: str
    name: str
    lower_is_better: bool
    kind: str
    note: str = ""


HEADLINE: tuple[Metric, ...] = (
    Metric("avg_queue_delay_s", "avg queueing delay", True, "seconds"),
    Metric("p95_queue_delay_s", "p95 queueing delay", True, "seconds"),
    Metric("avg_jct_s", "avg JCT", True, "seconds"),
    Metric("p95_jct_s", "p95 JCT", True, "seconds"),
    Metric("qos_compliance", "QoS compliance", False, "ratio"),
    Metric("useful_utilization", "useful utilisation", False, "ratio"),
    Metric("utilization", "allocated utilisation", False, "ratio",
           "a policy that packs jobs with MPS finishes the same work on fewer GPUs and scores "
           "lower here without doing less: read it with useful utilisation"),
    Metric("preemptions", "preemptions", True, "count"),
    Metric("lost_gpu_hours", "lost GPU-hours", True, "hours"),
    Metric("sim_seconds", "wall time per replay", True, "seconds",
           "the cost of computing the schedule, not a property of the schedule"),
)
"""The metrics of the headline, in order."""

_UNITS = {"seconds": " s", "hours": " GPU-h", "count": "", "ratio": "", "fraction": ""}


def _num(v: Any) -> float:
    if v is None:
        return math.nan
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def fmt(value: Any, kind: str) -> str:
    """``value`` as the report shows it (``n/a`` for a missing or NaN value)."""
    v = _num(value)
    if math.isnan(v):
        return "n/a"
    if math.isinf(v):
        return "∞"
    if kind == "ratio":
        return f"{v:.3f}"
    if kind == "hours":
        return f"{v:,.1f}"
    if kind == "seconds":
        return f"{v:,.1f}" if abs(v) < 100 else f"{v:,.0f}"
    if kind == "count":
        return f"{v:,.0f}" if v == round(v) else f"{v:,.1f}"
    return f"{v:.3g}"


def _mean(summary_entry: dict[str, Any], key: str) -> float:
    return _num(summary_entry.get(key, {}).get("mean"))


def winners(summary: dict[str, Any], metric: Metric,
            among: list[str] | None = None) -> tuple[list[str], float]:
    """Policies (of ``among``, default all) with the best mean of ``metric`` (several on an
    exact tie) and that value; ``([], nan)`` when no policy has a value."""
    pols = summary["policies"]
    vals = {p: _mean(pols[p], metric.key) for p in (among if among is not None else pols)}
    finite = {p: v for p, v in vals.items() if not math.isnan(v)}
    if not finite:
        return [], math.nan
    best = min(finite.values()) if metric.lower_is_better else max(finite.values())
    return [p for p, v in finite.items() if math.isclose(v, best, rel_tol=1e-9, abs_tol=1e-12)], \
        best


def compare(ref: float, other: float, lower_is_better: bool) -> tuple[str, str]:
    """``(ratio text, verdict)`` of ``ref`` against ``other``: ratio = ref ÷ other; verdict
    ``better``, ``worse``, ``tie`` or ``tie (… slightly better/worse)`` within :data:`TIE_REL`."""
    if math.isnan(ref) or math.isnan(other):
        return "n/a", "n/a"
    if math.isclose(ref, other, rel_tol=1e-9, abs_tol=1e-12):
        return "1.00×", "tie"
    ref_better = ref < other if lower_is_better else ref > other
    side = "better" if ref_better else "worse"
    if other == 0:
        return "undefined (the baseline is 0)", side
    ratio = ref / other
    text = f"{ratio:.3f}×" if abs(ratio - 1) < 0.1 else f"{ratio:.2f}×"
    if abs(ratio - 1) < TIE_REL:
        return text, f"tie within {TIE_REL:.1%} (slightly {side})"
    return text, side


def _value(v: float, kind: str) -> str:
    return fmt(v, kind) + ("" if math.isnan(v) else _UNITS[kind])


def _headline(summary: dict[str, Any]) -> list[str]:
    pols = list(summary["policies"])
    seeds = summary.get("seeds", [])
    lines = ["## Headline", ""]
    has_ref = REFERENCE in pols and len(pols) > 1
    others = [p for p in pols if p != REFERENCE] if has_ref else pols
    seed_txt = f"seed{'s' if len(seeds) != 1 else ''} {', '.join(map(str, seeds))}"
    if has_ref:
        lines += [
            f"Means over {seed_txt}. For each metric: the winner among all {len(pols)} "
            f"policies, then {REFERENCE} against the best *baseline* (the best of the other "
            f"policies: {', '.join(others)}). The ratio is always **{REFERENCE} ÷ best "
            "baseline**: for a lower-is-better metric (delays, JCTs, preemptions, lost "
            f"GPU-hours, wall time) a ratio below 1 means {REFERENCE} is better; for a "
            "higher-is-better metric (QoS compliance, utilisation) a ratio above 1 means "
            f"{REFERENCE} is better. The verdict says which; differences under "
            f"{TIE_REL:.1%} are called ties (with the side they lean to).",
            "",
        ]
    else:
        lines += [f"Means over {seed_txt}. For each metric: the winner among the "
                  f"{len(pols)} policies and the runner-up.", ""]
    ahead: list[str] = []
    behind: list[str] = []
    for m in HEADLINE:
        win, best = winners(summary, m)
        better = "lower" if m.lower_is_better else "higher"
        head = f"- **{m.name}** ({better} is better)"
        if not win:
            lines.append(f"{head}: winner **n/a** (no policy has a value).")
            continue
        tied = " (tied)" if len(win) > 1 else ""
        text = f"{head}: winner **{', '.join(win)}**{tied} with {_value(best, m.kind)}."
        if has_ref:
            ref_v = _mean(summary["policies"][REFERENCE], m.key)
            bwin, bbest = winners(summary, m, others)
            ratio, verdict = compare(ref_v, bbest, m.lower_is_better)
            text += (f" {REFERENCE} {_value(ref_v, m.kind)}, best baseline "
                     f"{', '.join(bwin) or 'n/a'} {_value(bbest, m.kind)} "
                     f"({REFERENCE} {ratio}, **{verdict}**).")
            if verdict.startswith("worse"):
                behind.append(f"{m.name} ({ratio} {', '.join(bwin)})")
            elif verdict.startswith(("better", "tie")):
                ahead.append(m.name)
        else:
            rest = [p for p in pols if p not in win]
            rwin, rbest = winners(summary, m, rest) if rest else ([], math.nan)
            if rwin:
                text += f" Runner-up {', '.join(rwin)} with {_value(rbest, m.kind)}."
        if m.note:
            text += f" Note: {m.note}."
        lines.append(text)
    if has_ref:
        lines += [
            "",
            f"In short: {REFERENCE} is ahead of or tied with the best baseline on "
            f"{len(ahead)} of {len(ahead) + len(behind)} metrics"
            + (f"; it is **behind** on {'; '.join(behind)}." if behind
               else "; it is behind on none."),
        ]
    return [*lines, ""]


def _table(first: str, rows: list[tuple[str, dict[str, Any]]],
           columns: tuple[Column, ...]) -> list[str]:
    head = f"| {first} | " + " | ".join(c.header for c in columns) + " |"
    sep = "|---|" + "|".join("---:" for _ in columns) + "|"
    out = [head, sep]
    for name, entry in rows:
        cells = [fmt(entry.get(c.key, {}).get("mean"), c.kind) for c in columns]
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    return out


def _totals(summary: dict[str, Any]) -> list[str]:
    rows = list(summary["policies"].items())
    return ["## Totals", "", "One row per policy, means over seeds; the columns are defined "
            "under *Columns* below.", "", *_table("policy", rows, TOTAL_COLUMNS), ""]


def _tenants(summary: dict[str, Any]) -> list[str]:
    per = summary.get("per_tenant", {})
    lines = ["## Per tenant", "",
             "For each policy, the same figures split by the tenant the jobs belong to (a "
             "preemption or a lost or held GPU-hour belongs to the tenant of the job it "
             "happened to), means over seeds. The **all** row is the policy's total.", ""]
    for pol, total in summary["policies"].items():
        rows = sorted(per.get(pol, {}).items())
        if not rows:
            continue
        lines += [f"### {pol}", "",
                  *_table("tenant", [*rows, ("**all**", total)], TENANT_COLUMNS), ""]
    return lines


def trace_name(trace: str) -> str:
    """How the report names a trace: ``mini``, or the file with its folder (no machine
    prefix: the last two parts of the path)."""
    if trace == "mini":
        return "mini"
    parts = PurePath(trace).parts
    return "/".join(parts[-2:]) if parts else trace


def _interference_name(src: str) -> str:
    out = []
    for part in (s.strip() for s in src.split(",") if s.strip()):
        if part.startswith("lucid:"):
            out.append(f"Lucid's measured pairs (folder `{PurePath(part[6:]).name}`)")
        elif part == "synthetic":
            out.append("the synthetic pair law (`sim/synthetic.py`)")
        else:
            out.append(part)
    return "; ".join(out) or "n/a"


def optsched_defaults() -> dict[str, Any]:
    """The options the optsched policy runs with when given none (read from its signature)."""
    from optsched.sim.policies import OptschedPolicy

    sig = inspect.signature(OptschedPolicy.__init__)
    return {n: p.default for n, p in sig.parameters.items()
            if n in ("backend", "time_limit_s", "predictor")
            and p.default is not inspect.Parameter.empty}


def _backend_text(backend: str) -> str:
    from optsched.engine.epoch import DEFAULT_BACKEND

    notes = []
    if backend == DEFAULT_BACKEND:
        notes.append("the engine's default")
    if backend == "auto":
        notes.append("HiGHS when the model fits its work budget for the time limit, else the "
                     "greedy plan labelled `fallback`")
    return f"`{backend}`" + (f" ({': '.join(notes)})" if notes else "")


def _settings(summary: dict[str, Any]) -> list[str]:
    cfg: dict[str, Any] = summary.get("config", {})
    pols = list(summary["policies"])
    first = summary["policies"][pols[0]] if pols else {}
    lines = ["## Settings", "", "Read from the runs' own configuration (`summary.json`).", ""]
    trace = str(summary.get("trace", "n/a"))
    shipped = " (the synthetic trace shipped with the package)" if trace == "mini" else ""
    max_jobs = summary.get("max_jobs")
    slice_txt = f", first {max_jobs:,} jobs" if max_jobs else ", all jobs"
    lines += [
        f"- **trace**: `{trace_name(trace)}`{shipped}{slice_txt}: "
        f"{fmt(_mean(first, 'jobs'), 'count')} jobs on {fmt(_mean(first, 'gpus'), 'count')} "
        f"GPUs; measurement window {fmt(_mean(first, 'window_s') / 3600, 'hours')} h (first "
        "to last submission).",
        f"- **load**: offered load {fmt(_mean(first, 'offered_load'), 'ratio')} (GPU-hours the "
        "jobs ask for ÷ (GPUs × window); above 1 the cluster cannot run everything submitted "
        "in the window), "
        f"{fmt(_mean(first, 'gpu_hours'), 'hours')} GPU-hours asked.",
        f"- **policies**: {', '.join(pols)}; **seeds**: "
        f"{', '.join(map(str, summary.get('seeds', [])))} (the seed changes the true runtimes "
        "and colocation speeds).",
        f"- **interference** (colocation speeds): "
        f"{_interference_name(str(summary.get('interference', '')))}.",
    ]
    if cfg:
        trig = (f"at every epoch tick and also after each arrival or completion, at most one "
                f"per {cfg.get('min_gap_s', math.nan):g} s" if cfg.get("trigger")
                else "at epoch ticks only")
        if cfg.get("events"):
            dec = (f"- **decisions**: epoch {cfg.get('epoch_s', math.nan):g} s; mode `events` "
                   "(decide at every epoch tick and at every arrival or completion instant; "
                   "optsched uses its event path between epochs and its full model at the "
                   "ticks; only when a job is pending).")
        else:
            dec = (f"- **decisions**: epoch {cfg.get('epoch_s', math.nan):g} s; trigger mode "
                   f"`{'trigger' if cfg.get('trigger') else 'no-trigger'}` (decide {trig}; "
                   "only when a job is pending).")
        mode = cfg.get("mode", "pooled")
        native = summary.get("native_modes") or {}
        lines += [
            dec,
            f"- **mode**: `{mode}` ("
            + ("every tenant's quota is a hard partition: no loans, guests on own hosts"
               if mode == "partitioned" else
               "each policy in its own setting: " + ", ".join(
                   f"{p} {m}" for p, m in native.items()) + "; partitioned = every tenant's "
               "quota a hard partition, pooled = idle quota may be lent"
               if mode == "native" else "idle quota may be lent to other tenants")
            + f"); arrivals time-compressed by {_num(cfg.get('load_scale', 1.0)):g} "
            "(`--load-scale`).",
            f"- **ground truth**: runtime jitter {cfg.get('runtime_jitter', math.nan):g}, "
            f"pair jitter {cfg.get('pair_jitter', math.nan):g} (log-normal sigmas); "
            f"checkpoint every {cfg.get('checkpoint_s', math.nan):g} s; restart overhead "
            f"{cfg.get('restart_overhead_s', math.nan):g} s; snapshots carry "
            + ("the TRUE runtimes (oracle mode)" if cfg.get("oracle_runtime")
               else "the trace's runtime estimates") + ".",
        ]
    g = summary.get("guarantee", {})
    if g or "qos_delay_s" in summary:
        lines.append(
            f"- **QoS**: guaranteed jobs by rule `{g.get('mode', 'n/a')}` (fraction "
            f"{_num(g.get('fraction')):g} of quota); target: start within "
            f"{_num(summary.get('qos_delay_s')):,.0f} s.")
    if REFERENCE in pols:
        given = dict(summary.get("policy_options", {}).get(REFERENCE, {}))
        opts = {**optsched_defaults(), **given}
        src = "as given to the policy" if given else "the policy's defaults: none were given"
        ref = summary["policies"][REFERENCE]
        lines.append(
            f"- **{REFERENCE}** ({src}): backend {_backend_text(str(opts.get('backend')))}; "
            f"time limit {_num(opts.get('time_limit_s')):g} s per decision; predictor "
            f"`{opts.get('predictor')}`; {fmt(_mean(ref, 'decisions'), 'count')} decisions per "
            f"replay, {fmt(_mean(ref, 'fallback_decisions'), 'count')} of them `fallback`"
            + _lookahead_text(opts) + ".")
    return [*lines, ""]


def _lookahead_text(opts: dict[str, Any]) -> str:
    from optsched.engine.lookahead import DEFAULT_LOOKAHEAD_EPOCHS, DEFAULT_RESERVE_MIN_GPUS

    epochs = opts.get("lookahead_epochs")
    epochs = DEFAULT_LOOKAHEAD_EPOCHS if epochs is None else int(epochs)
    if epochs == 0:
        return "; look-ahead off (no expected starts, no reservations)"
    gpus = opts.get("reserve_min_gpus")
    gpus = DEFAULT_RESERVE_MIN_GPUS if gpus is None else int(gpus)
    return f"; look-ahead {epochs} epochs, reservations for gangs of {gpus}+ GPUs"


def _columns() -> list[str]:
    lines = ["## Columns", "",
             "Every column of the tables above. *The row's jobs* are all jobs in the totals "
             "table and the tenant's jobs in a per-tenant table. Counts and GPU-hours are per "
             "replay (means over seeds).", ""]
    seen: set[str] = set()
    for header, text in _ROW_HEADERS.items():
        lines.append(f"- **{header}**: {text}")
        seen.add(header)
    for c in (*TOTAL_COLUMNS, *TENANT_COLUMNS):
        if c.header not in seen:
            seen.add(c.header)
            lines.append(f"- **{c.header}**: {c.definition}")
    return [*lines, ""]


def render_report(summary: dict[str, Any]) -> str:
    """``summary.md``: headline, totals, per-tenant tables, settings and column definitions."""
    trace = trace_name(str(summary.get("trace", "")))
    lines = [f"# Simulation report: {trace}", ""]
    lines += _headline(summary)
    lines += headline_lines(summary)
    lines += _totals(summary)
    lines += _tenants(summary)
    lines += report_lines(summary)
    lines += _settings(summary)
    cols = _columns()
    if any(x.startswith("## Expected starts") for x in lines):
        cols = [*cols[:-1], *column_lines(), ""]
    lines += cols
    return "\n".join(lines).rstrip() + "\n"


def write_report(summary: dict[str, Any], path: str | Path) -> Path:
    """Write :func:`render_report` of ``summary`` to ``path``."""
    out = Path(path)
    out.write_text(render_report(summary))
    return out


__all__ = ["HEADLINE", "TENANT_COLUMNS", "TOTAL_COLUMNS", "compare", "render_report",
           "trace_name", "winners", "write_report"]

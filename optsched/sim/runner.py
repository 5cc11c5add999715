"""Running (trace, policy, seed) replays, in parallel processes, and storing their event logs.

A stored run is a folder ``<out>/runs/<policy>/seed<k>/`` with ``meta.json`` and one gzipped
CSV per table of the :class:`~optsched.sim.cluster.EventLog` (``jobs``, ``segments``,
``preemptions``, ``decisions``, ``assurance``). :func:`load_log` reads it back, so metrics
and plots can be recomputed from disk.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from optsched.sim.cluster import EventLog, GroundTruth, SimConfig, Simulator
from optsched.sim.metrics import SUMMARY_KEYS, aggregate, per_tenant, summarize
from optsched.sim.policies import make_policy
from optsched.sim.trace import DEFAULT_QOS_DELAY_S, GuaranteeRule, Trace, load_trace

TABLES = ("jobs", "segments", "preemptions", "decisions", "assurance", "expected")


@dataclass(frozen=True)
class RunSpec:
    """One replay: everything needed to rebuild it in another process."""

    trace: str
    policy: str
    seed: int
    config: SimConfig = field(default_factory=SimConfig)
    policy_options: dict[str, Any] = field(default_factory=dict)
    qos_delay_s: float = DEFAULT_QOS_DELAY_S
    guarantee: GuaranteeRule = field(default_factory=GuaranteeRule)
    max_jobs: int | None = None
    lucid_dir: str | None = None
    """Lucid's ``single_data.csv``/``colocate_info.csv`` folder (default: found on the traces
    path; the mini trace always uses the synthetic model)."""


def _trace_for(spec: RunSpec) -> Trace:
    return load_trace(spec.trace, qos_delay_s=spec.qos_delay_s, guarantee=spec.guarantee,
                      max_jobs=spec.max_jobs, lucid_dir=spec.lucid_dir,
                      load_scale=spec.config.load_scale)


def run_one(spec: RunSpec, trace: Trace | None = None) -> EventLog:
    """Replay ``spec`` and return its event log (``trace`` avoids re-reading the file)."""
    tr = trace if trace is not None else _trace_for(spec)
    truth = GroundTruth(tr, spec.seed, spec.config)
    policy = make_policy(spec.policy, seed=spec.seed, truth=truth, options=spec.policy_options)
    return Simulator(tr, policy, seed=spec.seed, config=spec.config, truth=truth).run()


def _write_table(path: Path, table: dict[str, list[Any]]) -> None:
    names = list(table)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(names)
    w.writerows(zip(*(table[n] for n in names), strict=True))
    with path.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0,
                                              filename="") as gz:
        gz.write(buf.getvalue().encode())


def _parse(value: str) -> Any:
    if value in ("True", "False"):
        return value == "True"
    try:
        return int(value)
    except ValueError:
        pass
    try:
        return float(value)
    except ValueError:
        return value


_STRING_COLUMNS = {"id", "tenant", "user", "qos", "reason", "status"}


def _read_table(path: Path) -> dict[str, list[Any]]:
    with gzip.open(path, "rt", newline="") as fh:
        reader = csv.reader(fh)
        names = next(reader)
        cols: dict[str, list[Any]] = {n: [] for n in names}
        for row in reader:
            for n, v in zip(names, row, strict=True):
                cols[n].append(v if n in _STRING_COLUMNS else _parse(v))
    return cols


def save_log(log: EventLog, folder: str | Path) -> Path:
    """Write ``log`` to ``folder`` (created)."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    meta = {k: v for k, v in asdict(log).items() if k not in TABLES}
    (out / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True))
    for name in TABLES:
        _write_table(out / f"{name}.csv.gz", getattr(log, name))
    return out


def load_log(folder: str | Path) -> EventLog:
    """Read an event log written by :func:`save_log`."""
    src = Path(folder)
    meta = json.loads((src / "meta.json").read_text())
    meta["window"] = tuple(meta["window"])
    meta.setdefault("cpu_seconds", 0.0)
    log = EventLog(**meta)
    for name in TABLES:
        if (src / f"{name}.csv.gz").exists():  # older logs have no ``expected`` table
            setattr(log, name, _read_table(src / f"{name}.csv.gz"))
    return log


def run_dir(out: str | Path, policy: str, seed: int) -> Path:
    return Path(out) / "runs" / policy / f"seed{seed}"


def _run_and_save(spec: RunSpec, out: str | None) -> tuple[RunSpec, dict[str, float],
                                                          dict[str, dict[str, float]], str]:
    log = run_one(spec)
    if out is not None:
        save_log(log, run_dir(out, spec.policy, spec.seed))
    return spec, summarize(log), per_tenant(log), log.interference


def run_many(
    specs: Iterable[RunSpec],
    *,
    out: str | Path | None = None,
    workers: int = 1,
    on_done: Callable[[RunSpec, dict[str, float]], None] | None = None,
) -> dict[str, Any]:
    """Run every spec (``workers`` processes, through :func:`optsched.parallel.run`) and return
    the summary (see :func:`summary`); a replay that fails raises its error."""
    from optsched import parallel

    specs = list(specs)
    outs = str(out) if out is not None else None

    def done(key: int, res: tuple[RunSpec, dict[str, float], dict[str, dict[str, float]], str]) -> None:
        if on_done:
            on_done(res[0], res[1])

    mode = "process" if workers > 1 and len(specs) > 1 else "serial"
    order: list[int] = list(range(len(specs)))
    if mode == "process":
        # the longest replays first, so that none is left running alone at the end: optsched's
        # asks the engine at every decision (on the full Venus surrogate, partitioned, 623 s
        # against 67-303 s for each baseline); given last, it kept one core busy for ten minutes
        # after the other had finished
        order = sorted(order, key=lambda k: (specs[k].policy != "optsched", k))
    results, failures = parallel.run(
        ((k, _run_and_save, (specs[k], outs)) for k in order), mode=mode, workers=workers, on_done=done
    )
    results = {k: results[k] for k in sorted(results)}  # the summary lists the runs as given
    if failures:
        f = failures[0]
        if f.exception is not None:
            raise f.exception
        raise RuntimeError(f"replay {specs[f.key].policy} seed {specs[f.key].seed}: {f.error}")
    rows = [(spec, metrics, tenants) for spec, metrics, tenants, _ in results.values()]
    sources = {src for _, _, _, src in results.values()}
    return summary(rows, interference=", ".join(sorted(sources)))


def summary(results: list[tuple[RunSpec, dict[str, float], dict[str, dict[str, float]]]],
            interference: str = "") -> dict[str, Any]:
    """``{"policies": {p: {key: {"mean", "per_seed"}}}, "per_tenant": {p: {tenant: {key:
    {"mean", "per_seed"}}}}, "policy_options": {p: {...}}, "seeds": [...], "config": {...},
    ...}`` (the settings of the runs, as :mod:`optsched.sim.report` shows them);
    ``interference`` = where the colocation speeds came from (``"synthetic"`` or
    ``"lucid:<folder>"``)."""
    by_policy: dict[str, list[tuple[RunSpec, dict[str, float], dict[str, dict[str, float]]]]]
    by_policy = {}
    for r in results:
        by_policy.setdefault(r[0].policy, []).append(r)
    out: dict[str, Any] = {"policies": {}, "per_tenant": {}, "policy_options": {}}
    seeds: list[int] = []
    for pol, rs in by_policy.items():
        out["policies"][pol] = aggregate([m for _, m, _ in rs])
        out["policy_options"][pol] = dict(rs[0][0].policy_options)
        tenants: dict[str, Any] = {}
        for ten in rs[0][2]:
            tenants[ten] = aggregate([t.get(ten, {}) for _, _, t in rs])
        out["per_tenant"][pol] = tenants
        seeds = [s.seed for s, _, _ in rs]
    out["seeds"] = seeds
    out["keys"] = list(SUMMARY_KEYS)
    out["interference"] = interference
    if results:
        first = results[0][0]
        out["trace"] = first.trace
        out["config"] = asdict(first.config)
        out["qos_delay_s"] = first.qos_delay_s
        out["guarantee"] = asdict(first.guarantee)
        out["max_jobs"] = first.max_jobs
    return out


def clean(obj: Any) -> Any:
    """NaN/inf → None, recursively (JSON has no NaN)."""
    if isinstance(obj, float) and (math.isnan(obj) or math.isinf(obj)):
        return None
    if isinstance(obj, dict):
        return {k: clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [clean(v) for v in obj]
    return obj

"""Trace readers: Helios/Lucid Venus job logs, Lucid VC quotas, Alibaba openb pod lists.

Every reader returns a :class:`Trace`: jobs (with their TRUE durations, which only the
simulator's ground truth reads), tenants with quotas, and the cluster's nodes. Times are
seconds from ``t0``, the midnight before the first job's submission.

Guaranteed vs best-effort (:class:`GuaranteeRule`, DeepShare-style)
-------------------------------------------------------------------
``mode="quota"`` (default): walk each tenant's jobs in submission order; a job is
*guaranteed* if the GPUs of the tenant's guaranteed jobs still active at its submission, plus
its own, stay within ``fraction × quota``; otherwise it is *best-effort* and runs on loans.
"Active" means submitted and not yet past ``submit + duration`` (the trace's own duration, as
if it started at once), so the label is a property of the workload, computed once and identical
for every policy. ``mode="all"`` makes every job guaranteed, ``mode="none"`` none.
"""

from __future__ import annotations

import csv
import gzip
import heapq
import io
import logging
import math
from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Literal

from optsched.sim.profiles import LUCID_FOLDER, Interference, ProfileKey, find_lucid_dir, load_lucid
from optsched.sim.synthetic import synthetic_interference

log = logging.getLogger("optsched.sim")

DEFAULT_QOS_DELAY_S = 1800.0
"""Default ``max_queue_delay_s`` of every tenant's guaranteed jobs."""
ANCHOR_GAP_S = 7 * 86400.0
"""Leading rows this far before the next one are anchor rows (Lucid's time origin) and dropped."""


def resolve_interference(trace_path: str | Path | None, lucid_dir: str | Path | None = None,
                         ) -> Interference:
    """The interference model of a replay: ``lucid_dir`` if given (must hold the two files),
    else the Lucid folder found for ``trace_path`` (None = the synthetic mini trace, which
    always uses the synthetic model), else the synthetic model, logged as a fallback."""
    if lucid_dir is not None:
        return load_lucid(lucid_dir)
    if trace_path is None:
        return synthetic_interference()
    found = find_lucid_dir(trace_path)
    if found is not None:
        return load_lucid(found)
    log.warning("no %s/ folder found for '%s': using the synthetic interference model",
                LUCID_FOLDER, trace_path)
    return synthetic_interference()



@dataclass(frozen=True)
class TraceJob:
    """One job of a trace. ``duration_s`` is the truth; ``estimate_s`` what a user/model said."""

    id: str
    tenant: str
    gpus: int
    submit_s: float
    duration_s: float
    estimate_s: float | None = None
    user: str = ""
    name: str = ""
    profile: ProfileKey | None = None
    memory_gib: float | None = None
    cpu_num: int | None = None
    node_num: int | None = None
    gpu_types: tuple[str, ...] | None = None
    gpu_milli: int | None = None
    qos: Literal["guaranteed", "best_effort"] = "guaranteed"
    workload: dict[str, float] = field(default_factory=dict)
    """Single-run profile columns (``speed, gpu_util, gmem_util, gmem`` MiB) when known: the
    trace's own workload columns, else the profile table's."""
    min_gpus: int | None = None
    """Elastic jobs: the fewest GPUs it may run on (``duration_s`` is at ``gpus``; its work is
    ``gpus x duration_s`` GPU-seconds, done at a rate linear in its size)."""
    max_gpus: int | None = None
    """Elastic jobs: the most GPUs it may run on."""
    gpus_step: int = 1
    """Elastic jobs: the step between allowed sizes."""


@dataclass(frozen=True)
class TenantSpec:
    """A tenant: quota per GPU type and the queueing-delay target of its guaranteed jobs."""

    id: str
    quota: dict[str, int]
    max_queue_delay_s: float = DEFAULT_QOS_DELAY_S
    qos_target: float = 0.95


@dataclass(frozen=True)
class GpuTypeSpec:
    name: str
    memory_gib: float
    mps: bool = True


@dataclass(frozen=True)
class NodeSpec:
    id: str
    gpu_type: str
    gpus: int


@dataclass(frozen=True)
class Trace:
    """Jobs, tenants and cluster of one replay."""

    name: str
    jobs: tuple[TraceJob, ...]
    tenants: tuple[TenantSpec, ...]
    gpu_types: tuple[GpuTypeSpec, ...]
    nodes: tuple[NodeSpec, ...]
    t0_weekday: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)
    interference: Interference | None = field(default=None, compare=False, repr=False)
    """Profiles and colocation speeds of this replay (None: the synthetic model)."""

    @property
    def interference_source(self) -> str:
        """``"lucid:<folder>"`` or ``"synthetic"``."""
        return self.interference.source if self.interference is not None else "synthetic"

    def capacity(self) -> dict[str, int]:
        cap: dict[str, int] = defaultdict(int)
        for n in self.nodes:
            cap[n.gpu_type] += n.gpus
        return dict(cap)

    @property
    def total_gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)


@dataclass(frozen=True)
class GuaranteeRule:
    """Which jobs are guaranteed (see the module docstring)."""

    mode: Literal["quota", "all", "none"] = "quota"
    fraction: float = 1.0

    def apply(self, jobs: list[TraceJob], tenants: dict[str, TenantSpec]) -> list[TraceJob]:
        if self.mode == "all":
            return [replace(j, qos="guaranteed") for j in jobs]
        if self.mode == "none":
            return [replace(j, qos="best_effort") for j in jobs]
        out: list[TraceJob] = []
        active: dict[str, list[tuple[float, int]]] = defaultdict(list)
        held: dict[str, int] = defaultdict(int)
        for j in sorted(jobs, key=lambda x: (x.submit_s, x.id)):
            heap = active[j.tenant]
            while heap and heap[0][0] <= j.submit_s:
                held[j.tenant] -= heapq.heappop(heap)[1]
            spec = tenants.get(j.tenant)
            limit = math.floor(self.fraction * sum(spec.quota.values())) if spec else 0
            if held[j.tenant] + j.gpus <= limit:
                heapq.heappush(heap, (j.submit_s + j.duration_s, j.gpus))
                held[j.tenant] += j.gpus
                out.append(replace(j, qos="guaranteed"))
            else:
                out.append(replace(j, qos="best_effort"))
        return out


# --------------------------------------------------------------------------- helpers
def _open_text(path: Path) -> io.TextIOBase:
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="")
    return io.TextIOWrapper(path.open("rb"), encoding="utf-8", newline="")


def _parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.strip())


def read_vc_config(path: str | Path, gpus_per_node: int = 8) -> dict[str, int]:
    """Lucid's ``vc_config.csv`` (``,num`` = nodes per VC) → GPUs per VC."""
    out: dict[str, int] = {}
    with _open_text(Path(path)) as fh:
        reader = csv.reader(fh)
        next(reader)
        for row in reader:
            if row and row[0]:
                out[row[0]] = int(float(row[1])) * gpus_per_node
    return out


def read_estimates(path: str | Path) -> dict[str, float]:
    """Lucid's estimator files (``job_id, priority``): the duration estimate in seconds.
    Negative values become 1000 s (Lucid's own rule)."""
    out: dict[str, float] = {}
    with _open_text(Path(path)) as fh:
        for row in csv.DictReader(fh):
            v = float(row["priority"])
            out[str(row["job_id"])] = 1000.0 if v <= 0 else v
    return out


def _find_sibling(trace_path: Path, rel: str) -> Path | None:
    for base in (trace_path.parent, trace_path.parent.parent):
        cand = base / rel
        if cand.exists():
            return cand
    return None


def _int_or_none(value: str | None) -> int | None:
    if value is None or value == "":
        return None
    try:
        return int(float(value))
    except ValueError:
        return None


# --------------------------------------------------------------------------- Venus
def read_venus(
    path: str | Path,
    *,
    vc_config: str | Path | None = None,
    estimates: str | Path | None = None,
    gpu_type: str = "V100",
    gpu_memory_gib: float = 32.0,
    gpus_per_node: int = 8,
    qos_delay_s: float = DEFAULT_QOS_DELAY_S,
    guarantee: GuaranteeRule | None = None,
    max_jobs: int | None = None,
    interference: Interference | None = None,
    lucid_dir: str | Path | None = None,
) -> Trace:
    """Read a Helios/Lucid Venus job log (``job_id, user, vc, jobname, gpu_num, cpu_num,
    node_num, state, submit_time, duration, [dataset, model, batchsize, amp, ..., gmem]``).

    ``vc_config`` defaults to ``lucid_venus/vc_config.csv`` (or ``vc_config.csv``) next to the
    trace's folder; ``estimates`` to ``lucid_venus/Venus_Sept_lgb.csv`` likewise (absent =
    no estimates). Leading anchor rows (more than 7 days before the next row) are dropped.
    Jobs of a VC missing from the config, and rows with ``gpu_num < 1``, are skipped (counted
    in ``Trace.notes``). ``max_jobs`` keeps the first jobs by submission (for quick runs).
    Profiles and colocation speeds: ``interference`` if given, else
    :func:`resolve_interference` (``lucid_dir``, else the Lucid folder
    of the traces path, else the synthetic model).
    """
    p = Path(path)
    prof = interference or resolve_interference(p, lucid_dir)
    if vc_config is None:
        vc_config = _find_sibling(p, "lucid_venus/vc_config.csv") or _find_sibling(
            p, "vc_config.csv"
        )
    if vc_config is None:
        raise FileNotFoundError(f"no vc_config.csv found for the Venus log '{p}' (looked for "
                                "lucid_venus/vc_config.csv and vc_config.csv in its folder and "
                                "the one above)")
    quotas = read_vc_config(vc_config, gpus_per_node)
    if estimates is None:
        estimates = _find_sibling(p, "lucid_venus/Venus_Sept_lgb.csv")
    est = read_estimates(estimates) if estimates is not None else {}
    rows: list[dict[str, str]] = []
    with _open_text(p) as fh:
        rows = list(csv.DictReader(fh))
    rows.sort(key=lambda r: (_parse_time(r["submit_time"]), int(float(r["job_id"]))))
    times = [_parse_time(r["submit_time"]) for r in rows]
    start = 0
    while start + 1 < len(rows) and (times[start + 1] - times[start]).total_seconds() > (
        ANCHOR_GAP_S
    ):
        start += 1
    notes = [f"dropped {start} anchor row(s)"] if start else []
    rows, times = rows[start:], times[start:]
    if max_jobs is not None:
        rows, times = rows[:max_jobs], times[:max_jobs]
    if not rows:
        raise ValueError(f"'{p}': no jobs")
    t0 = datetime(times[0].year, times[0].month, times[0].day)
    jobs: list[TraceJob] = []
    skipped_vc = skipped_gpu = 0
    for r, t in zip(rows, times, strict=True):
        gpus = _int_or_none(r.get("gpu_num")) or 0
        if gpus < 1:
            skipped_gpu += 1
            continue
        if r["vc"] not in quotas:
            skipped_vc += 1
            continue
        key: ProfileKey | None = None
        if r.get("model") and r.get("dataset"):
            key = (r["model"], r["dataset"], _int_or_none(r.get("batchsize")) or 0,
                   _int_or_none(r.get("amp")) or 0)
        mem: float | None = None
        pf = prof.profile(key)
        workload = pf.workload() if pf is not None else {}
        for col in ("speed", "gpu_util", "gmem_util", "gmem"):
            if r.get(col):
                workload[col] = float(r[col])
        if r.get("gmem"):
            mem = round(float(r["gmem"]) / 1024.0, 3)
        elif pf is not None:
            mem = pf.memory_gib
        jid = str(int(float(r["job_id"])))
        jobs.append(
            TraceJob(
                id=jid,
                tenant=r["vc"],
                gpus=gpus,
                submit_s=(t - t0).total_seconds(),
                duration_s=max(1.0, float(r["duration"])),
                estimate_s=est.get(jid),
                user=r.get("user", ""),
                name=r.get("jobname", ""),
                profile=key,
                memory_gib=mem,
                cpu_num=_int_or_none(r.get("cpu_num")),
                node_num=_int_or_none(r.get("node_num")),
                workload=workload,
            )
        )
    if skipped_vc:
        notes.append(f"skipped {skipped_vc} job(s) of VCs absent from vc_config")
    if skipped_gpu:
        notes.append(f"skipped {skipped_gpu} row(s) without GPUs")
    tenants = {
        vc: TenantSpec(vc, {gpu_type: g}, max_queue_delay_s=qos_delay_s)
        for vc, g in quotas.items()
    }
    jobs = (guarantee or GuaranteeRule()).apply(jobs, tenants)
    nodes = tuple(
        NodeSpec(f"n{i:04d}", gpu_type, gpus_per_node)
        for i in range(sum(quotas.values()) // gpus_per_node)
    )
    return Trace(
        name=p.name.split(".")[0],
        jobs=tuple(jobs),
        tenants=tuple(tenants[v] for v in sorted(tenants)),
        gpu_types=(GpuTypeSpec(gpu_type, gpu_memory_gib, True),),
        nodes=nodes,
        t0_weekday=t0.weekday(),
        notes=(*notes, f"interference: {prof.source}"),
        interference=prof,
    )


# --------------------------------------------------------------------------- Alibaba openb
ALIBABA_MEMORY_GIB: dict[str, float] = {
    "T4": 16.0, "P100": 16.0, "V100M16": 16.0, "V100M32": 32.0, "A10": 24.0,
    "G2": 24.0, "G3": 32.0,
}
"""GPU memory per openb model (G2/G3 are anonymised; 24 and 32 GiB are assumptions)."""


def read_openb(
    pods: str | Path,
    nodes: str | Path | None = None,
    *,
    qos_delay_s: float = DEFAULT_QOS_DELAY_S,
    guarantee: GuaranteeRule | None = None,
    max_jobs: int | None = None,
) -> Trace:
    """Read an Alibaba openb pod list (``name, cpu_milli, memory_mib, num_gpu, gpu_milli,
    gpu_spec, qos, pod_phase, creation_time, deletion_time, scheduled_time``).

    Mapping (documented in ``docs/simulator.md``): pods without GPUs are skipped; a pod asks
    for ``num_gpu`` GPUs, or one GPU when ``0 < gpu_milli < 1000`` (a fractional pod: its
    memory is ``gpu_milli/1000`` of the smallest allowed GPU, so two fit on one GPU through
    MPS); the duration is ``deletion_time − creation_time``; ``gpu_spec`` (``A|B``) restricts
    the GPU types. The trace has no tenants: the tenants are its qos classes (``LS``,
    ``Burstable``, ``BE``), with quotas proportional to their GPU-seconds, and the guarantee
    rule applies inside each (``BE`` is always best-effort). ``nodes`` defaults to
    ``openb_node_list_gpu_node.csv.gz`` next to the pods file.
    """
    pp = Path(pods)
    if nodes is None:
        nodes = pp.parent / "openb_node_list_gpu_node.csv.gz"
    node_specs: list[NodeSpec] = []
    with _open_text(Path(nodes)) as fh:
        for row in csv.DictReader(fh):
            g = _int_or_none(row.get("gpu")) or 0
            if g > 0:
                node_specs.append(NodeSpec(row["sn"], row["model"], g))
    types = sorted({n.gpu_type for n in node_specs})
    with _open_text(pp) as fh:
        rows = list(csv.DictReader(fh))
    rows = [r for r in rows if (_int_or_none(r.get("num_gpu")) or 0) > 0]
    rows.sort(key=lambda r: (float(r["creation_time"]), r["name"]))
    if max_jobs is not None:
        rows = rows[:max_jobs]
    if not rows:
        raise ValueError(f"'{pp}': no GPU pods")
    jobs: list[TraceJob] = []
    t_first = float(rows[0]["creation_time"])
    for r in rows:
        num = _int_or_none(r["num_gpu"]) or 1
        milli = _int_or_none(r.get("gpu_milli")) or 1000
        spec = tuple(s for s in (r.get("gpu_spec") or "").split("|") if s in types) or None
        frac = 0 < milli < 1000
        allowed = spec or tuple(types)
        mem = min(ALIBABA_MEMORY_GIB.get(t, 16.0) for t in allowed)
        qos = r.get("qos") or "BE"
        end = r.get("deletion_time") or ""
        dur = float(end) - float(r["creation_time"]) if end else 3600.0
        jobs.append(
            TraceJob(
                id=r["name"],
                tenant=qos,
                gpus=1 if frac else num,
                submit_s=float(r["creation_time"]) - t_first,
                duration_s=max(1.0, dur),
                memory_gib=round(mem * milli / 1000.0, 3) if frac else None,
                cpu_num=(_int_or_none(r.get("cpu_milli")) or 0) // 1000,
                gpu_types=spec,
                gpu_milli=milli,
                qos="best_effort" if qos == "BE" else "guaranteed",
            )
        )
    cap: dict[str, int] = defaultdict(int)
    for n in node_specs:
        cap[n.gpu_type] += n.gpus
    demand: dict[str, float] = defaultdict(float)
    for j in jobs:
        demand[j.tenant] += j.gpus * j.duration_s
    tot = sum(demand.values())
    names = sorted(demand)
    tenants: dict[str, TenantSpec] = {}
    for t in types:
        shares = [int(cap[t] * demand[nm] / tot) for nm in names]
        shares[names.index(max(names, key=lambda nm: demand[nm]))] += cap[t] - sum(shares)
        for nm, share in zip(names, shares, strict=True):
            spec_t = tenants.get(nm) or TenantSpec(nm, {}, max_queue_delay_s=qos_delay_s)
            spec_t.quota[t] = share
            tenants[nm] = spec_t
    rule = guarantee or GuaranteeRule()
    be = [j for j in jobs if j.tenant == "BE"]
    rest = rule.apply([j for j in jobs if j.tenant != "BE"], tenants)
    jobs = sorted(rest + be, key=lambda j: (j.submit_s, j.id))
    return Trace(
        name=pp.name.split(".")[0],
        jobs=tuple(jobs),
        tenants=tuple(tenants[n] for n in names),
        gpu_types=tuple(GpuTypeSpec(t, ALIBABA_MEMORY_GIB.get(t, 16.0), True) for t in types),
        nodes=tuple(node_specs),
        notes=("tenants are the qos classes of the openb trace",),
    )


# --------------------------------------------------------------------------- dispatch
MINI_TRACE = "mini"
VENUS_COLUMNS = ("job_id", "vc", "gpu_num", "submit_time", "duration")
"""The columns of a Venus job log the reader needs."""
OPENB_COLUMNS = ("name", "num_gpu", "creation_time")
"""The columns of an openb pod list the reader needs."""


def check_trace(spec: str | Path) -> None:
    """Check, cheaply and before any replay, that ``spec`` names a trace :func:`load_trace` can
    read: ``mini``, an openb pod list (``openb_pod_list*``, its node list beside it) or a Venus
    job log (its ``vc_config.csv`` found); the header must hold the reader's columns.

    Raises
    ------
    FileNotFoundError
        A missing trace, node list or ``vc_config.csv``.
    ValueError
        A folder, an unreadable file, or a CSV of neither shape (naming the missing columns).
    """
    if str(spec) == MINI_TRACE:
        return
    p = Path(spec)
    if p.is_dir():
        raise ValueError(f"'{p}' is a folder, not a trace file")
    if not p.exists():
        raise FileNotFoundError(f"trace '{p}' does not exist")
    try:
        with _open_text(p) as fh:
            header = next(csv.reader(fh), [])
    except (OSError, UnicodeDecodeError, EOFError, csv.Error) as exc:
        raise ValueError(f"cannot read '{p}' as a CSV file: {exc}") from None
    cols = {c.strip() for c in header}
    openb = p.name.startswith("openb_pod_list")
    need = OPENB_COLUMNS if openb else VENUS_COLUMNS
    missing = [c for c in need if c not in cols]
    if missing:
        if openb:
            raise ValueError(f"'{p}' is not an openb pod list: it lacks the column(s) "
                             f"{', '.join(missing)}")
        raise ValueError(
            f"'{p}' is not a trace optsched reads: a Venus job log needs the column(s) "
            f"{', '.join(missing)}, an openb pod list is named openb_pod_list*.csv and has "
            f"{', '.join(OPENB_COLUMNS)}")
    if openb:
        nodes = p.parent / "openb_node_list_gpu_node.csv.gz"
        if not nodes.exists():
            raise FileNotFoundError(f"no node list '{nodes.name}' beside the openb pod list '{p}'")
    elif (_find_sibling(p, "lucid_venus/vc_config.csv") or _find_sibling(p, "vc_config.csv")) is None:
        raise FileNotFoundError(f"no vc_config.csv found for the Venus log '{p}' (looked for "
                                "lucid_venus/vc_config.csv and vc_config.csv in its folder and "
                                "the one above)")


def mini_trace_path() -> Path:
    """The shipped mini trace (see ``optsched/sim/data/README.md``)."""
    return Path(str(resources.files("optsched.sim").joinpath("data", "mini_venus.csv.gz")))


def load_trace(
    spec: str | Path,
    *,
    qos_delay_s: float = DEFAULT_QOS_DELAY_S,
    guarantee: GuaranteeRule | None = None,
    max_jobs: int | None = None,
    vc_config: str | Path | None = None,
    estimates: str | Path | None = None,
    lucid_dir: str | Path | None = None,
    load_scale: float = 1.0,
) -> Trace:
    """Load ``mini`` (the shipped trace), a Venus job log or an openb pod list (by name).

    The mini trace always uses the synthetic interference model (its jobs name synthetic
    profiles); a Venus log uses Lucid's measurements from ``lucid_dir`` or the traces path
    when found (:func:`resolve_interference`). ``load_scale`` time-compresses the arrivals
    (:func:`scale_arrivals`)."""
    tr = _load_trace(spec, qos_delay_s=qos_delay_s, guarantee=guarantee, max_jobs=max_jobs,
                     vc_config=vc_config, estimates=estimates, lucid_dir=lucid_dir)
    if load_scale != 1.0:
        openb = Path(str(spec)).name.startswith("openb_pod_list")
        tr = scale_arrivals(tr, load_scale, None if openb else (guarantee or GuaranteeRule()))
    return tr


def scale_arrivals(trace: Trace, factor: float, guarantee: GuaranteeRule | None) -> Trace:
    """``trace`` with its arrivals time-compressed by ``factor`` (> 0).

    Every submission time ``s`` becomes ``s0 + (s - s0) / factor``, ``s0`` the first one; the
    jobs, their durations and the cluster stay the same, so the offered load (GPU-hours asked
    over capacity × the submission window) is multiplied by ``factor``. The guarantee labels
    are recomputed on the compressed arrivals with ``guarantee`` (a tenant then has more jobs
    active at once, so more of them are best-effort); ``None`` keeps them (openb: the qos
    class is the label).
    """
    if not factor > 0 or math.isinf(factor):
        raise ValueError(f"load scale must be a positive number, not {factor}")
    if not trace.jobs:
        return trace
    s0 = min(j.submit_s for j in trace.jobs)
    jobs = [replace(j, submit_s=s0 + (j.submit_s - s0) / factor) for j in trace.jobs]
    if guarantee is not None:
        tenants = {t.id: t for t in trace.tenants}
        by_id = {j.id: j for j in guarantee.apply(jobs, tenants)}
        jobs = [by_id[j.id] for j in jobs]
    note = f"arrivals time-compressed by {factor:g} (--load-scale)"
    return replace(trace, jobs=tuple(jobs), notes=(*trace.notes, note))


def _load_trace(
    spec: str | Path,
    *,
    qos_delay_s: float,
    guarantee: GuaranteeRule | None,
    max_jobs: int | None,
    vc_config: str | Path | None,
    estimates: str | Path | None,
    lucid_dir: str | Path | None,
) -> Trace:
    if str(spec) == MINI_TRACE:
        if lucid_dir is not None:
            log.warning("the mini trace names synthetic profiles only: ignoring lucid_dir '%s' "
                        "and using the synthetic interference model", lucid_dir)
        p = mini_trace_path()
        return read_venus(
            p,
            vc_config=vc_config or p.parent / "mini_vc_config.csv",
            estimates=estimates or p.parent / "mini_estimates.csv",
            qos_delay_s=qos_delay_s,
            guarantee=guarantee,
            max_jobs=max_jobs,
            interference=synthetic_interference(),
        )
    p = Path(spec)
    if not p.exists():
        raise FileNotFoundError(f"trace '{p}' does not exist")
    if p.name.startswith("openb_pod_list"):
        return read_openb(p, qos_delay_s=qos_delay_s, guarantee=guarantee, max_jobs=max_jobs)
    return read_venus(
        p,
        vc_config=vc_config,
        estimates=estimates,
        qos_delay_s=qos_delay_s,
        guarantee=guarantee,
        max_jobs=max_jobs,
        lucid_dir=lucid_dir,
    )


def shift(t: datetime, seconds: float) -> datetime:
    """``t`` plus ``seconds`` (for writers of Venus-format files)."""
    return t + timedelta(seconds=seconds)

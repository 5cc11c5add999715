"""``optsched slurm demo``: one Venus-like job stream through a real Slurm, once per mode.

Modes: ``slurm``, Slurm's own scheduling on the dev cluster without the gate (``sched/builtin``,
FIFO); ``slurm-site``, Slurm configured as a site would (:data:`SITE_PARTITIONS`:
``sched/backfill``, ``priority/multifactor``, one partition per tenant over the same nodes with
the guaranteed tenants on a higher ``PriorityTier``, ``preempt/partition_prio`` with
``PreemptMode=REQUEUE``; each job in its tenant's partition with a 2-minute time limit, the
smallest whole minute over every job of the stream, so backfill has real limits to plan with);
``slurm-site-dbd``, the same site with accounting through ``slurmdbd`` on a private MariaDB
(:func:`site_gpu_limits`: each tenant's partition has a QOS whose ``GrpTRES=gres/gpu`` is the
tenant's quota, and a ``standby`` partition on the best-effort tier has none; each job asks
``-p TENANT,standby``, so it runs in its tenant's partition within the quota and in ``standby``,
preemptible, beyond it);
``optsched``, optsched as the policy (gate on, the adapter's loop every ``epoch_s``). Jobs are ``sleep``
commands; the stream is generated with a fixed seed and compressed in time (arrivals over
``span_s`` seconds, durations of seconds). Everything reported is computed from Slurm's own
completion records (``jobcomp/filetxt``): per tenant the queueing delay (first start minus
submission), the QoS compliance of guaranteed jobs (share started within the tenant's
``max_queue_delay_s``) and GPU-seconds; for the cluster the GPU utilisation (GPU-seconds of
every run, requeued ones included, over 32 GPUs x the makespan).

The stream (:func:`make_stream`): Poisson arrivals whose rate follows Venus' hour-of-day
submission profile compressed into ``span_s``; gang sizes drawn from Venus' GPU-count
distribution (1, 2, 4, 8, 16 GPUs) in their Slurm node shape: 16 GPUs are two whole nodes
(``-N2 --gres=gpu:8``), half of the 8-GPU jobs ask 4 GPUs on each of two nodes
(``-N2 --gres=gpu:4``), and a quarter of the 1-GPU jobs ask half a GPU (``--gres=shard:2``,
gres/shard); lognormal durations (median 8 s, sigma 1.0, capped at 60 s); four tenants with
unequal offered load (two guaranteed ones, one of them over its quota, and two best-effort ones).

The optsched run also reports, from the adapter's store, its epochs and every start by outcome:
``deferred`` and ``skipped`` starts, and how many of those were for the job's node shape.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import re
import subprocess
import tempfile
import threading
import time
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from optsched.hosts.slurmcli import JobCompRecord, SlurmClient, SlurmError, read_jobcomp

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "slurm-dev-cluster.sh"
HOUR_WEIGHTS = (
    0.0345, 0.0326, 0.0283, 0.0253, 0.0130, 0.0111, 0.0105, 0.0111, 0.0158, 0.0290, 0.0440, 0.0544,
    0.0529, 0.0531, 0.0695, 0.0718, 0.0706, 0.0693, 0.0547, 0.0553, 0.0549, 0.0602, 0.0447, 0.0333,
)  # fmt: skip
"""Share of Venus GPU-job submissions per hour of day (as in the shipped mini trace)."""
GPU_SIZES = ((1, 0.52), (2, 0.10), (4, 0.10), (8, 0.13), (16, 0.06))
"""Venus' GPU-count distribution, truncated to two whole nodes."""
SPLIT_8 = 0.5
"""Share of the 8-GPU jobs that ask 4 GPUs on each of two nodes (``-N2 --gres=gpu:4``)."""
SHARD_1 = 0.25
"""Share of the 1-GPU jobs that ask half a GPU (``--gres=shard:2`` of the dev cluster's 4)."""
SHARDS_PER_GPU = 4
TOTAL_GPUS = 32
MODES = ("slurm", "slurm-site", "slurm-site-dbd", "optsched")
SITE_PARTITIONS = "prod:2 research:2 batch:1 dev:1"
"""The ``slurm-site`` mode's partitions (``SITE`` of the dev-cluster script): one per tenant,
``NAME:PriorityTier``; the guaranteed tenants' tier preempts (requeues) the best-effort ones."""
STANDBY = "standby"
SITE_DBD_PARTITIONS = f"{SITE_PARTITIONS} {STANDBY}:1"
"""The ``slurm-site-dbd`` mode's partitions: the tenants' and ``standby``, a partition without a
QOS limit on the best-effort tier, where work beyond a tenant's quota runs preemptible."""

# tenant: (Slurm account, qos class, max_queue_delay_s or None, share of the offered load)
TENANTS: dict[str, tuple[str, str, float | None, float]] = {
    "prod": ("prod", "guaranteed", 20.0, 0.40),
    "research": ("research", "guaranteed", 30.0, 0.20),
    "batch": ("batch", "best_effort", None, 0.30),
    "dev": ("dev", "best_effort", None, 0.10),
}

CONFIG = """\
cluster = "demo"
epoch_s = {epoch_s}
time_limit_s = 1.0
store = "optsched.db"
start_wait_s = 2.0
free_wait_s = 3.0

[gpu_types.a100]
name = "A100"
memory_gib = 80
speed = 1.0

[gpu_types.v100]
name = "V100"
memory_gib = 32
speed = 1.0

[[tenants]]
id = "prod"
accounts = ["prod"]
quota = {quota_prod}
qos = {{ max_queue_delay_s = 20 }}
default_qos = "guaranteed"

[[tenants]]
id = "research"
accounts = ["research"]
quota = {quota_research}
qos = {{ max_queue_delay_s = 30 }}
default_qos = "guaranteed"

[[tenants]]
id = "batch"
accounts = ["batch"]
quota = {quota_batch}

[[tenants]]
id = "dev"
accounts = ["dev"]
quota = {quota_dev}
"""


QUOTAS: dict[str, dict[str, str]] = {
    "default": {"prod": "{ a100 = 8, v100 = 4 }", "research": "{ a100 = 4, v100 = 4 }",
                "batch": "{ a100 = 4, v100 = 4 }", "dev": "{ v100 = 4 }"},
    "gangs": {"prod": "{ a100 = 16 }", "research": "{ v100 = 16 }", "batch": "{}", "dev": "{}"},
}
"""The adapter's quotas (``--quotas``): ``default`` spreads the 32 GPUs over the four tenants, so
no guaranteed tenant's quota of one type holds a 16-GPU gang; ``gangs`` gives each guaranteed
tenant one whole GPU type (16), so its largest gang fits, and the best-effort tenants only borrow."""


def adapter_config(epoch_s: float, quotas: str = "default", reserve_min_gpus: int | None = None) -> str:
    """The demo adapter's TOML (``reserve_min_gpus``: the look-ahead's smallest reserved gang;
    None: the engine's default)."""
    if quotas not in QUOTAS:
        raise ValueError(f"quotas: unknown '{quotas}' (one of {', '.join(QUOTAS)})")
    text = CONFIG.format(epoch_s=epoch_s, **{f"quota_{t}": q for t, q in QUOTAS[quotas].items()})
    if reserve_min_gpus is not None:  # a top-level key: before the first table
        first = "\n[gpu_types.a100]"
        text = text.replace(first, f"reserve_min_gpus = {reserve_min_gpus}\n{first}", 1)
    return text


def largest_in_quota(quotas: str = "default") -> dict[str, int]:
    """Per tenant, the most GPUs one job can have within the tenant's quota of one GPU type (the
    demo's jobs ask untyped GPUs and run on one type). The engine reclaims lent GPUs only for
    guaranteed work that fits the quota (``optsched.engine.assurance``, use (b)): a bigger
    guaranteed job runs on free or borrowed GPUs only."""
    cfg = tomllib.loads(adapter_config(1, quotas))
    return {t["id"]: max(t["quota"].values(), default=0) for t in cfg["tenants"]}


def site_gpu_limits(quotas: str = "default") -> str:
    """``GPU_LIMITS`` of the dev-cluster script for ``slurm-site-dbd``: per tenant its quota in
    GPUs of any type (``prod:12 research:8 batch:8 dev:4`` for the default quotas). The QOS limits
    GPUs without a type: the demo's jobs ask untyped GPUs, which typed limits
    (``gres/gpu:a100=8``) do not hold back in Slurm 22.05."""
    cfg = tomllib.loads(adapter_config(1, quotas))
    return " ".join(f"{t['id']}:{sum(t['quota'].values())}" for t in cfg["tenants"])


@dataclass(frozen=True)
class DemoSpec:
    jobs: int = 200
    seed: int = 0
    span_s: float = 150.0
    load: float = 0.9
    """Offered GPU-seconds over ``TOTAL_GPUS * span_s``."""
    median_s: float = 8.0
    sigma: float = 1.0
    max_s: float = 60.0
    epoch_s: float = 2.0
    quotas: str = "default"
    """The adapter's quotas: a key of :data:`QUOTAS`."""
    reserve_min_gpus: int | None = None
    """The adapter's ``reserve_min_gpus`` (None: the engine's default, 33: no gang of the demo's
    32 GPUs gets a reservation)."""


@dataclass(frozen=True)
class DemoJob:
    name: str
    tenant: str
    gpus: int
    duration_s: int
    arrival_s: float
    nodes: int = 1
    """Nodes it asks (``-N``); its GPUs are ``gpus // nodes`` on each."""
    shards: int = 0
    """Shards of one GPU it asks instead of GPUs (``gpus`` is then 1: one GPU's slot)."""

    @property
    def gpu_share(self) -> float:
        """GPUs it occupies: a job of shards takes a share of one."""
        return self.shards / SHARDS_PER_GPU if self.shards else float(self.gpus)


def make_stream(spec: DemoSpec) -> list[DemoJob]:
    """The job stream: deterministic for a seed."""
    rng = random.Random(spec.seed)
    sizes = [rng.choices([g for g, _ in GPU_SIZES], [w for _, w in GPU_SIZES])[0] for _ in range(spec.jobs)]
    durs = [
        max(1, min(int(spec.max_s), round(spec.median_s * math.exp(rng.gauss(0, spec.sigma)))))
        for _ in range(spec.jobs)
    ]
    # scale durations so the offered load is spec.load
    offered = sum(g * d for g, d in zip(sizes, durs, strict=True))
    scale = spec.load * TOTAL_GPUS * spec.span_s / offered
    durs = [max(1, min(int(spec.max_s), round(d * scale))) for d in durs]
    # arrivals: hour-of-day profile compressed into span_s
    hours = rng.choices(range(24), HOUR_WEIGHTS, k=spec.jobs)
    arrivals = sorted((h + rng.random()) / 24 * spec.span_s for h in hours)
    names = list(TENANTS)
    shares = [TENANTS[t][3] for t in names]
    shape_rng = random.Random(spec.seed + 1)  # the node shapes: the stream above stays as it was
    out = []
    for i in range(spec.jobs):
        tenant = rng.choices(names, shares)[0]
        g, nodes, shards, tag = sizes[i], 1, 0, f"g{sizes[i]}"
        if g == 16:
            nodes, tag = 2, "g16n2"
        elif g == 8 and shape_rng.random() < SPLIT_8:
            nodes, tag = 2, "g8n2"
        elif g == 1 and shape_rng.random() < SHARD_1:
            shards, tag = 2, "s2"
        out.append(DemoJob(f"d{i:04d}-{tenant}-{tag}", tenant, g, durs[i], round(arrivals[i], 2),
                           nodes=nodes, shards=shards))
    return out


def _submit(client: SlurmClient, job: DemoJob, site: bool = False, standby: bool = False) -> int:
    """``sbatch`` one job in its shape (``-N K --gres=gpu:G`` per node, or ``--gres=shard:N``);
    a 5-minute time limit, or with ``site`` its tenant's partition (with ``standby`` also the
    standby one: Slurm runs it in whichever can start it) and a 2-minute limit."""
    partition = (f"{job.tenant},{STANDBY}" if standby else job.tenant) if site else None
    return client.submit(
        seconds=job.duration_s,
        name=job.name,
        account=TENANTS[job.tenant][0],
        partition=partition,
        gpus=0 if job.shards else job.gpus // job.nodes,
        nodes=job.nodes,
        extra=[f"--time={2 if site else 5}", *([f"--gres=shard:{job.shards}"] if job.shards else [])],
    )


def store_counts(store: Any, cluster: str) -> dict[str, Any]:
    """What the adapter did, from its store: epochs, epochs refused, and starts by outcome,
    with the deferred and skipped ones that were for a job's node shape."""
    epochs = store.epochs(cluster, limit=1_000_000)
    acts = [a for a in store.actions(cluster, limit=1_000_000) if a.action == "start"]
    shape_words = ("GPUs on each of", "reshaped", "shards free")
    out: dict[str, Any] = {"epochs": len(epochs),
                           "epochs_refused": sum(e.status == "refused" for e in epochs)}
    for outcome in ("ok", "deferred", "skipped", "failed"):
        rows = [a for a in acts if a.outcome == outcome]
        out[f"starts_{outcome}"] = len(rows)
        if outcome in ("deferred", "skipped"):
            out[f"starts_{outcome}_for_shape"] = sum(any(w in a.reason for w in shape_words) for a in rows)
    return out


# ---------------------------------------------------------------------------------- one run
def _cluster(action: str, folder: Path, gate: str, site: str = "",
             gpu_limits: str | None = None) -> dict[str, str]:
    """The dev-cluster script; ``gpu_limits`` (not None) runs it with ``DBD=on`` and those QOS limits."""
    env = {**os.environ, "GATE": gate, "SLURM_DEV_QUIET": "1", "SITE": site,
           "DBD": "off" if gpu_limits is None else "on", "GPU_LIMITS": gpu_limits or ""}
    p = subprocess.run(["bash", str(SCRIPT), action, str(folder)], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"slurm-dev-cluster.sh {action} failed: {p.stderr.strip()[-2000:]}")
    out = dict(os.environ)
    for line in p.stdout.splitlines():
        m = re.match(r"export (\w+)=(.*)", line.strip())
        if m:
            out[m.group(1)] = m.group(2)
    return out


def run_mode(mode: str, stream: list[DemoJob], spec: DemoSpec, folder: Path, timeout_s: float = 900) -> Path:
    """Run the stream on a fresh cluster in ``folder``; returns its jobcomp file."""
    if mode not in MODES:
        raise ValueError(f"mode: unknown '{mode}' (one of {', '.join(MODES)})")
    folder.mkdir(parents=True, exist_ok=True)
    site, dbd = mode in ("slurm-site", "slurm-site-dbd"), mode == "slurm-site-dbd"
    env = _cluster("up", folder / "cluster", "on" if mode == "optsched" else "off",
                   (SITE_DBD_PARTITIONS if dbd else SITE_PARTITIONS) if site else "",
                   site_gpu_limits(spec.quotas) if dbd else None)
    client = SlurmClient(env=env)
    stop = threading.Event()
    loop_thread: threading.Thread | None = None
    loop: Any = None
    store: Any = None
    try:
        if mode == "optsched":
            from optsched.hosts.config import load_config
            from optsched.hosts.loop import HostLoop
            from optsched.hosts.slurm import SlurmHost
            from optsched.hosts.store import Store

            toml = adapter_config(spec.epoch_s, spec.quotas, spec.reserve_min_gpus)
            (folder / "optsched.toml").write_text(toml)
            cfg = load_config(folder / "optsched.toml")
            store = Store(cfg.store)
            from optsched import SolveParams

            host = SlurmHost(cfg, store, client)
            loop = HostLoop(host, store, SolveParams(backend=cfg.backend, time_limit_s=cfg.time_limit_s))
            loop_thread = threading.Thread(target=loop.run, args=(spec.epoch_s,), daemon=True)
            loop_thread.start()
        t0 = time.monotonic()
        submitted: dict[str, str] = {}
        for job in stream:
            delay = job.arrival_s - (time.monotonic() - t0)
            if delay > 0:
                stop.wait(delay)
            with contextlib.suppress(SlurmError):  # a refused submission is left out
                submitted[job.name] = str(_submit(client, job, site, standby=dbd))
        # wait until every job has finished
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if all(j.ended for j in client.jobs()):
                    break
            except SlurmError:
                pass
            time.sleep(1.0)
        time.sleep(1.5)  # jobcomp is written as jobs end
        if loop is not None:
            loop.stop()
            if loop_thread is not None:
                loop_thread.join(timeout=30)
        (folder / "submitted.json").write_text(json.dumps(submitted, indent=1))
        return folder / "cluster" / "log" / "jobcomp.txt"
    finally:
        if store is not None:
            with contextlib.suppress(Exception):
                (folder / "store_counts.json").write_text(json.dumps(store_counts(store, "demo"), indent=1))
            store.close()
        _cluster("down", folder / "cluster", "off")


# ---------------------------------------------------------------------------------- metrics
def metrics(records: list[JobCompRecord], stream: list[DemoJob], quotas: str = "default") -> dict[str, Any]:
    """Per-tenant queueing delay, QoS compliance and GPU-seconds; cluster utilisation."""
    spec = {j.name: j for j in stream}
    runs: dict[int, list[JobCompRecord]] = {}
    for r in records:
        if r.name in spec:
            runs.setdefault(r.job_id, []).append(r)
    per: dict[str, dict[str, list[float]]] = {t: {"delay": [], "gpu_s": [], "in_quota": []} for t in TENANTS}
    cap = largest_in_quota(quotas)
    t_first, t_last, gpu_s_all, done, requeued, standby = math.inf, 0.0, 0.0, 0, 0, 0
    for recs in runs.values():
        job = spec[recs[0].name]
        submit = min(r.submit_time for r in recs if r.submit_time is not None)
        starts = [r.start_time for r in recs if r.start_time is not None]
        if not starts:
            continue
        first_start = min(starts)
        per[job.tenant]["delay"].append(max(0.0, first_start - submit))
        if job.gpus <= cap[job.tenant]:
            per[job.tenant]["in_quota"].append(max(0.0, first_start - submit))
        for r in recs:
            if r.start_time is None or r.end_time is None:
                continue
            g = job.gpu_share * max(0.0, r.end_time - r.start_time)
            per[job.tenant]["gpu_s"].append(g)
            gpu_s_all += g
            t_last = max(t_last, r.end_time)
        t_first = min(t_first, submit)
        done += any(r.state == "COMPLETED" for r in recs)
        # a job of several partitions: its record lists them, the one it ran in first
        standby += any(r.state == "COMPLETED" and r.partition.split(",")[0] == STANDBY for r in recs)
        requeued += sum(r.state in ("PENDING", "REQUEUED", "PREEMPTED", "REQUEUE_HOLD") for r in recs)
    span = max(1.0, t_last - t_first)
    tenants: dict[str, Any] = {}
    for t, d in per.items():
        delays = sorted(d["delay"])
        limit = TENANTS[t][2]
        tenants[t] = {
            "jobs": len(delays),
            "avg_queue_s": sum(delays) / len(delays) if delays else None,
            "p95_queue_s": delays[min(len(delays) - 1, int(0.95 * len(delays)))] if delays else None,
            "qos_compliance": (sum(x <= limit for x in delays) / len(delays))
            if limit is not None and delays
            else None,
            "gpu_s": sum(d["gpu_s"]),
            "jobs_in_quota": len(d["in_quota"]),
            "qos_compliance_in_quota": (sum(x <= limit for x in d["in_quota"]) / len(d["in_quota"]))
            if limit is not None and d["in_quota"]
            else None,
        }
    all_delays = [x for d in per.values() for x in d["delay"]]
    return {
        "jobs_completed": done,
        "runs_requeued": requeued,
        "jobs_standby": standby,
        "makespan_s": span,
        "gpu_utilisation": gpu_s_all / (TOTAL_GPUS * span),
        "avg_queue_s": sum(all_delays) / max(1, len(all_delays)),
        "tenants": tenants,
    }


def _f(v: Any, fmt: str) -> str:
    return "n/a" if v is None else fmt.format(v)


def markdown(summary: dict[str, Any]) -> str:
    modes = list(summary["modes"])
    lines = [
        "| tenant (QoS, max delay) | " + " | ".join(f"{m} avg / p95 queue s | {m} QoS" for m in modes) + " |",
        "|---|" + "---:|---:|" * len(modes),
    ]
    for t, (_, q, lim, _) in TENANTS.items():
        cells = []
        for m in modes:
            d = summary["modes"][m]["tenants"][t]
            cells.append(f"{_f(d['avg_queue_s'], '{:.1f}')} / {_f(d['p95_queue_s'], '{:.0f}')}")
            cells.append(_f(d["qos_compliance"], "{:.2f}"))
        label = f"{t} ({q}{', ' + format(lim, '.0f') + ' s' if lim is not None else ''})"
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    cap = largest_in_quota(summary.get("spec", {}).get("quotas", "default"))
    for t, (_, _q, lim, _) in TENANTS.items():
        if lim is None:
            continue
        lines += ["", f"{t}: on-time share of its jobs within quota (at most {cap[t]} GPUs): " + ", ".join(
            f"{m} {_f(summary['modes'][m]['tenants'][t].get('qos_compliance_in_quota'), '{:.2f}')}"
            f" of {summary['modes'][m]['tenants'][t].get('jobs_in_quota')}" for m in modes)]
    lines += ["", "| cluster | " + " | ".join(modes) + " |", "|---|" + "---:|" * len(modes)]
    for key, label, fmt in (
        ("gpu_utilisation", "GPU utilisation", "{:.3f}"),
        ("avg_queue_s", "avg queue s (all jobs)", "{:.1f}"),
        ("makespan_s", "makespan s", "{:.0f}"),
        ("jobs_completed", "jobs completed", "{:d}"),
        ("runs_requeued", "runs requeued (preempted)", "{:d}"),
        ("jobs_standby", f"jobs completed in partition {STANDBY}", "{:d}"),
    ):
        cells = [_f(summary["modes"][m].get(key), fmt) for m in modes]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    for m in modes:
        a = summary["modes"][m].get("adapter")
        if a:
            lines += ["", f"{m} adapter: " + ", ".join(f"{k} {v}" for k, v in a.items())]
    return "\n".join(lines) + "\n"


def run_demo(spec: DemoSpec, out: Path, modes: list[str], cluster_dir: Path | None = None) -> str:
    """Run the modes, write ``summary.json`` and ``summary.md`` under ``out``; returns the Markdown."""
    out.mkdir(parents=True, exist_ok=True)
    stream = make_stream(spec)
    base = cluster_dir or Path(tempfile.mkdtemp(prefix="optsched-slurm-demo."))
    summary: dict[str, Any] = {
        "spec": asdict(spec),
        "tenants": {t: list(v) for t, v in TENANTS.items()},
        "modes": {},
    }
    for mode in modes:
        t0 = time.monotonic()
        jobcomp = run_mode(mode, stream, spec, base / mode)
        recs, _ = read_jobcomp(jobcomp)
        (out / f"jobcomp-{mode}.txt").write_text(jobcomp.read_text() if jobcomp.exists() else "")
        wall = round(time.monotonic() - t0, 1)
        summary["modes"][mode] = metrics(recs, stream, spec.quotas) | {"wall_s": wall}
        counts = base / mode / "store_counts.json"
        if counts.exists():
            summary["modes"][mode]["adapter"] = json.loads(counts.read_text())
        text = markdown(summary)  # written after each mode, so a failed later mode keeps this one
        (out / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True))
        (out / "summary.md").write_text(text)
    return markdown(summary)

"""Generator of the shipped mini trace (a scaled-down, synthetic Venus-like workload).

Calibration (constants below, derived once from public Venus data; see ``data/README.md``):

* arrivals: the hour-of-day and weekday profile of GPU-job submissions in the real Venus
  September 2020 (``lucid_venus/cluster_throughput.csv``, 10-minute counts, Sep 1–26);
* GPU counts: the ``gpu_num`` distribution of the 23,859 Venus September jobs (the real
  per-bin GPU sums that the Venus surrogate preserves), truncated to the mini cluster;
* durations: lognormal with Helios' published Venus GPU-job median of 204 s and σ = 2.88 (the
  surrogate's fit), capped at ``max_duration_s``;
* estimates (``mini_estimates.csv``, Lucid's ``job_id, priority`` format): the true duration
  × ``exp(N(0, estimate_sigma))``, like a learned estimator of moderate quality;
* workload columns: profiles drawn uniformly from the synthetic profiles of
  :func:`optsched.sim.synthetic.synthetic_profiles` (``synth-<k>``; no real profile is named).
  The draw takes one of ``PROFILE_SLOTS`` = 66 slots (the slot count of the first version of
  this generator, kept so that every other column of the seed-0 trace stayed as it was) and
  maps slot ``s`` to profile ``s mod N_PROFILES`` (66 = 11 × 6, so the draw is uniform);
* tenants (VCs) with imbalanced offered load, as real tenants are (some above their quota,
  some nearly idle), so that borrowing and reclaiming matter.

The output is a Venus-schema job log (``job_id, user, vc, jobname, gpu_num, cpu_num,
node_num, state, submit_time, duration, dataset, model, batchsize, amp, speed, gpu_util,
gmem_util, gmem``),
a ``vc_config.csv`` (nodes per VC) and the estimates file. Every number is synthetic.

Rebuild the shipped files with ``python -m optsched.sim.mini_trace optsched/sim/data``.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
import random
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from optsched.sim.synthetic import synthetic_profiles

HOUR_WEIGHTS: tuple[float, ...] = (
    0.0345, 0.0326, 0.0283, 0.0253, 0.0130, 0.0111, 0.0105, 0.0111, 0.0158, 0.0290, 0.0440,
    0.0544, 0.0529, 0.0531, 0.0695, 0.0718, 0.0706, 0.0693, 0.0547, 0.0553, 0.0549, 0.0602,
    0.0447, 0.0333,
)
"""Share of Venus GPU-job submissions per hour of day (Sep 1–26, 2020)."""
WEEKDAY_FACTORS: tuple[float, ...] = (1.167, 1.064, 1.649, 1.325, 0.896, 0.442, 0.456)
"""Relative submission rate per weekday (Monday first), Venus Sep 1–26, 2020."""
GPU_NUM_DIST: tuple[tuple[int, float], ...] = (
    (1, 0.5199), (2, 0.0995), (4, 0.1005), (8, 0.1302), (16, 0.0592), (32, 0.0316),
    (64, 0.0135),
)
"""Share of Venus September jobs per GPU count (the remaining 4% have other counts)."""
PROFILE_SLOTS = 66
"""Slots of the profile draw (see the module docstring)."""
MEDIAN_DURATION_S = 204.0
SIGMA_DURATION = 2.88


@dataclass(frozen=True)
class MiniSpec:
    """What to generate. ``tenants``: (name, nodes, offered load relative to its quota)."""

    days: float = 2.0
    gpus_per_node: int = 8
    tenants: tuple[tuple[str, int, float], ...] = (
        ("vcA", 3, 1.25), ("vcB", 2, 0.95), ("vcC", 1, 1.10), ("vcD", 1, 0.40), ("vcE", 1, 0.25),
    )
    max_duration_s: float = 12 * 3600.0
    estimate_sigma: float = 0.8
    start: datetime = datetime(2020, 9, 1)
    seed: int = 0


def _gpu_count(rng: random.Random, max_gpus: int) -> int:
    sizes = [(g, w) for g, w in GPU_NUM_DIST if g <= max_gpus]
    x = rng.random() * sum(w for _, w in sizes)
    for g, w in sizes:
        x -= w
        if x <= 0:
            return g
    return sizes[-1][0]


def _arrival(rng: random.Random, days: float) -> float:
    """Seconds from the start (a Tuesday): day weighted by weekday, hour by the profile."""
    n_days = max(1, math.ceil(days))
    day_w = [WEEKDAY_FACTORS[(1 + d) % 7] for d in range(n_days)]  # 2020-09-01 is a Tuesday
    d = rng.choices(range(n_days), weights=day_w)[0]
    h = rng.choices(range(24), weights=HOUR_WEIGHTS)[0]
    t = d * 86400.0 + h * 3600.0 + rng.random() * 3600.0
    return min(t, days * 86400.0 - 1.0)


def generate(spec: MiniSpec) -> tuple[list[dict[str, object]], dict[str, int], dict[str, float]]:
    """Rows of the job log, nodes per VC, and estimates by job id."""
    rng = random.Random(spec.seed)
    profiles = synthetic_profiles()
    horizon = spec.days * 86400.0
    rows: list[dict[str, object]] = []
    for name, nodes, load in spec.tenants:
        quota = nodes * spec.gpus_per_node
        target = load * quota * horizon
        users = [f"u{name[-1].lower()}{k:02d}" for k in range(max(2, nodes * 3))]
        acc = 0.0
        while acc < target:
            gpus = _gpu_count(rng, quota)
            dur = min(spec.max_duration_s, max(
                1.0, math.exp(math.log(MEDIAN_DURATION_S) + SIGMA_DURATION * rng.gauss(0, 1))))
            dur = float(round(dur))
            acc += gpus * dur
            prof = profiles[rng.randrange(PROFILE_SLOTS) % len(profiles)]
            user = rng.choice(users)
            rows.append({
                "user": user, "vc": name, "jobname": f"job{rng.randrange(10_000):05d}",
                "gpu_num": gpus, "cpu_num": 4 * gpus,
                "node_num": max(1, math.ceil(gpus / spec.gpus_per_node)),
                "state": "COMPLETED", "t": _arrival(rng, spec.days), "duration": int(dur),
                "dataset": prof.key[1], "model": prof.key[0], "batchsize": prof.key[2],
                "amp": prof.key[3], "speed": prof.speed, "gpu_util": prof.gpu_util,
                "gmem_util": prof.gmem_util, "gmem": round(prof.memory_gib * 1024.0, 1),
            })
    rows.sort(key=lambda r: (float(str(r["t"])), str(r["vc"])))
    estimates: dict[str, float] = {}
    for k, r in enumerate(rows, start=1):
        r["job_id"] = k
        t = spec.start + timedelta(seconds=int(float(str(r["t"]))))
        r["submit_time"] = t.strftime("%Y-%m-%d %H:%M:%S")
        dur = float(str(r["duration"]))
        estimates[str(k)] = float(round(dur * math.exp(rng.gauss(0.0, spec.estimate_sigma))))
    return rows, {n: nodes for n, nodes, _ in spec.tenants}, estimates


COLUMNS = ("job_id", "user", "vc", "jobname", "gpu_num", "cpu_num", "node_num", "state",
           "submit_time", "duration", "dataset", "model", "batchsize", "amp", "speed", "gpu_util",
           "gmem_util", "gmem")


def write_mini(out_dir: str | Path, spec: MiniSpec | None = None,
               prefix: str = "mini") -> list[Path]:
    """Write ``{prefix}_venus.csv.gz``, ``{prefix}_vc_config.csv`` and
    ``{prefix}_estimates.csv`` into ``out_dir`` (deterministic: gzip mtime 0)."""
    spec = spec or MiniSpec()
    rows, vcs, est = generate(spec)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for r in rows:
        w.writerow([r[c] for c in COLUMNS])
    log = out / f"{prefix}_venus.csv.gz"
    with log.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0,
                                              filename="") as gz:
        gz.write(buf.getvalue().encode())
    cfg = out / f"{prefix}_vc_config.csv"
    with cfg.open("w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["", "num"])
        for name, nodes in vcs.items():
            w.writerow([name, nodes])
    estp = out / f"{prefix}_estimates.csv"
    with estp.open("w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["job_id", "priority"])
        for jid, v in est.items():
            w.writerow([jid, int(v)])
    return [log, cfg, estp]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    out = args[0] if args else "."
    seed = int(args[1]) if len(args) > 1 else 0
    for p in write_mini(out, MiniSpec(seed=seed)):
        print(p)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

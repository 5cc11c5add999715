"""The synthetic workload-profile and interference model (no measured data involved).

Used for the shipped mini trace and for any replay without a Lucid folder on the traces path
(see :func:`optsched.sim.trace.resolve_interference`).

Profiles (:func:`synthetic_profiles`): ``N_PROFILES`` profiles named ``synth-<k>`` (dataset
``synth``), drawn from ``random.Random(seed)``: GPU utilisation stratified over 25–100%, peak
GPU memory ``gmem`` lognormal around 5 GiB (1.2–30 GiB, in MiB), memory utilisation
0.35–0.65 × the GPU utilisation, throughput lognormal around 300 samples/s, batch size
32/64/128, AMP on or off, and a sharing label like Lucid's sharescore: 2 (jumbo) if
``gpu_util >= 85`` or ``gmem >= 16 GiB``, 1 (medium) if ``gpu_util >= 55``, else 0 (tiny).

Pair law (:func:`pair_law_speeds`): a job ``a`` sharing GPUs with ``b`` through MPS runs at ::

    s_a = (C0 + C1 * over + C2 * share_b) * exp(SIGMA * z_ab),   clipped to [0.3, 1.05]
    over = max(0, (util_a + util_b) / 100 - 1)      # how far the pair oversubscribes a GPU
    share_b = util_b / (util_a + util_b)            # the partner's share of the demand

with ``z_ab ~ N(0, 1)`` seeded by ``(seed, pair)`` (the same pair gets the same speeds in
both orders; two jobs of one profile share one draw). The four constants were fitted once
by :func:`fit_pair_law` (least squares on the 2 × 1,388 speeds of Lucid's
``colocate_info.csv`` against the utilisations of ``single_data.csv``): ``C0 = 1.0224``,
``C1 = -0.3708``, ``C2 = -0.0755``, residual log-std ``SIGMA = 0.106``. RMSE of the noiseless
law: 0.0957 (Lucid's speeds have mean 0.937, range 0.44–1.50), against 0.0983 for the old
``sqrt(min(1, 100 / (util_a + util_b)))`` rule. Only these numbers come from the
measurements; no measured row is kept.
"""

from __future__ import annotations

import csv
import math
import random
from dataclasses import dataclass
from functools import lru_cache, partial
from pathlib import Path

from optsched.sim.profiles import (
    LUCID_FILES,
    Interference,
    Profile,
    ProfileKey,
    read_lucid_profiles,
)

N_PROFILES = 6
PROFILE_SEED = 0
C0, C1, C2 = 1.0224, -0.3708, -0.0755
SIGMA = 0.106
LAW_MIN, LAW_MAX = 0.3, 1.05
SOURCE = "synthetic"


def synthetic_profiles(n: int = N_PROFILES, seed: int = PROFILE_SEED) -> list[Profile]:
    """``n`` synthetic profiles (deterministic for a seed; see the module docstring)."""
    rng = random.Random(seed)
    out: list[Profile] = []
    for k in range(n):
        util = round(25.0 + 75.0 * (k + rng.random()) / n, 1)
        gmem = round(min(30720.0, max(1229.0, math.exp(rng.gauss(math.log(5120.0), 0.8)))))
        gmem_util = round(util * (0.35 + 0.3 * rng.random()), 1)
        speed = round(math.exp(rng.gauss(math.log(300.0), 1.0)), 1)
        batchsize = rng.choice((32, 64, 128))
        amp = rng.randrange(2)
        label = 2 if util >= 85.0 or gmem >= 16384.0 else (1 if util >= 55.0 else 0)
        key: ProfileKey = (f"synth-{k}", "synth", batchsize, amp)
        out.append(Profile(key, util, gmem / 1024.0, label, speed, gmem_util))
    return out


def law_mean(ua: float, ub: float, c0: float = C0, c1: float = C1, c2: float = C2) -> float:
    """The noiseless law for job ``a`` (utilisation ``ua``) beside ``b`` (``ub``), unclipped."""
    total = max(ua + ub, 1e-9)
    return c0 + c1 * max(0.0, total / 100.0 - 1.0) + c2 * ub / total


def pair_law_speeds(ua: float, ub: float, a: ProfileKey | None = None,
                    b: ProfileKey | None = None, seed: int = 0) -> tuple[float, float]:
    """Colocated speeds ``(s_a, s_b)`` by the pair law, with noise seeded by the pair."""
    ka, kb = repr(a), repr(b)
    r = random.Random(f"{seed}:{min(ka, kb)}:{max(ka, kb)}")
    z1, z2 = r.gauss(0.0, 1.0), r.gauss(0.0, 1.0)
    za, zb = (z1, z1) if ka == kb else (z2, z1) if ka > kb else (z1, z2)
    sa = law_mean(ua, ub) * math.exp(SIGMA * za)
    sb = law_mean(ub, ua) * math.exp(SIGMA * zb)
    return (min(LAW_MAX, max(LAW_MIN, sa)), min(LAW_MAX, max(LAW_MIN, sb)))


@lru_cache(maxsize=8)
def synthetic_interference(seed: int = 0) -> Interference:
    """The synthetic model: :func:`synthetic_profiles` and the pair law (noise ``seed``)."""
    profiles = {p.key: p for p in synthetic_profiles()}
    return Interference(profiles, {}, source=SOURCE, law=partial(pair_law_speeds, seed=seed))


@dataclass(frozen=True)
class PairLawFit:
    c0: float
    c1: float
    c2: float
    sigma: float
    """Standard deviation of ``log(measured / law)``."""
    rmse: float
    """RMSE of the clipped noiseless law against the measured speeds."""
    rmse_sqrt_rule: float
    n: int
    """Speeds used (two per measured pair)."""


def fit_pair_law(lucid_dir: str | Path) -> PairLawFit:
    """Fit ``C0, C1, C2`` and ``SIGMA`` to Lucid's measured pairs (``single_data.csv`` for the
    utilisations, ``colocate_info.csv`` for the speeds) by least squares."""
    import numpy as np

    src = Path(lucid_dir)
    prof = read_lucid_profiles(src / LUCID_FILES[0])
    rows: list[tuple[float, float, float]] = []
    with (src / LUCID_FILES[1]).open(newline="") as fh:
        for row in csv.DictReader(fh):
            keys = []
            for s in ("1", "2"):
                keys.append((row[f"model{s}"], row[f"dataset{s}"], int(float(row[f"batchsize{s}"])),
                             int(float(row[f"amp{s}"]))))
            pa, pb = prof.get(keys[0]), prof.get(keys[1])
            if pa is None or pb is None:
                continue
            rows.append((pa.gpu_util, pb.gpu_util, float(row["speed1"])))
            rows.append((pb.gpu_util, pa.gpu_util, float(row["speed2"])))
    if len(rows) < 3:
        raise ValueError(f"'{src}': fewer than 3 usable pair speeds")
    x = np.array(rows)
    total = np.maximum(x[:, 0] + x[:, 1], 1e-9)
    design = np.c_[np.ones(len(x)), np.maximum(0.0, total / 100.0 - 1.0), x[:, 1] / total]
    coef, *_ = np.linalg.lstsq(design, x[:, 2], rcond=None)
    pred = np.clip(design @ coef, LAW_MIN, LAW_MAX)
    sq = np.clip(np.sqrt(np.minimum(1.0, 100.0 / total)), 0.3, 1.0)
    return PairLawFit(
        c0=float(coef[0]), c1=float(coef[1]), c2=float(coef[2]),
        sigma=float(np.std(np.log(x[:, 2] / pred))),
        rmse=float(np.sqrt(np.mean((pred - x[:, 2]) ** 2))),
        rmse_sqrt_rule=float(np.sqrt(np.mean((sq - x[:, 2]) ** 2))), n=len(x),
    )

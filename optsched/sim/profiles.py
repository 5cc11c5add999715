"""Workload profiles and measured MPS colocation speeds (the simulator's interference truth).

Two small tables ship as package data in ``optsched/sim/data/`` (derived from Lucid's
ASPLOS'23 artifact, S-Lab License 1.0; see ``data/README.md`` for the attribution and
:func:`derive_tables` for how they are rebuilt from ``lucid_venus/``):

* ``profiles.csv``: the 66 single-job profiles of ``single_data.csv``, keyed by
  ``(model, dataset, batchsize, amp)``: GPU utilisation, peak GPU memory, Lucid's sharing
  score ``label`` (0 = tiny, 1 = medium, 2 = jumbo), throughput and memory utilisation.
* ``colocation.csv``: the 1,388 measured pairs of ``colocate_info.csv``: for two profiles,
  each one's colocated/exclusive throughput ratio.

A pair that was not measured gets a speed from a documented rule
(:meth:`Interference.pair_speeds`): both jobs run at ``min(1, 100 / (util_a + util_b)) ** 0.5``
clipped to ``[0.3, 1.0]`` — jobs whose combined utilisation fits in one GPU barely slow each
other; a saturated pair shares the GPU. Jobs without a known profile use the median profile.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

ProfileKey = tuple[str, str, int, int]
"""``(model, dataset, batchsize, amp)``."""

MIN_PAIR_SPEED = 0.3
DEFAULT_UTIL = 50.0
DEFAULT_MEMORY_GIB = 4.0


@dataclass(frozen=True)
class Profile:
    """One single-job profile."""

    key: ProfileKey
    gpu_util: float
    memory_gib: float
    label: int
    """Lucid's sharing score: 0 tiny, 1 medium, 2 jumbo."""
    speed: float = math.nan
    """Exclusive throughput (samples/s) as profiled."""
    gmem_util: float = math.nan

    def workload(self) -> dict[str, float]:
        """The single-run profile columns a predictor reads (``gmem`` in MiB)."""
        out = {"gpu_util": self.gpu_util, "gmem": round(self.memory_gib * 1024.0, 1)}
        if not math.isnan(self.speed):
            out["speed"] = self.speed
        if not math.isnan(self.gmem_util):
            out["gmem_util"] = self.gmem_util
        return out


def _data_file(name: str) -> Path:
    return Path(str(resources.files("optsched.sim").joinpath("data", name)))


class Interference:
    """Profiles and the colocation speed table (measured, with a fallback rule)."""

    def __init__(self, profiles: dict[ProfileKey, Profile], pairs: dict[tuple[ProfileKey,
                 ProfileKey], tuple[float, float]]) -> None:
        self.profiles = profiles
        self._pairs = pairs

    @classmethod
    def load(cls, folder: str | Path | None = None) -> Interference:
        """Read ``profiles.csv`` and ``colocation.csv`` (package data unless ``folder``)."""
        return _load(str(folder) if folder is not None else "")

    def profile(self, key: ProfileKey | None) -> Profile | None:
        return None if key is None else self.profiles.get(key)

    def measured(self, a: ProfileKey, b: ProfileKey) -> bool:
        return (a, b) in self._pairs

    def pair_speeds(self, a: ProfileKey | None, b: ProfileKey | None) -> tuple[float, float]:
        """Colocated speeds ``(speed_a, speed_b)`` of two jobs sharing GPUs through MPS."""
        if a is not None and b is not None:
            got = self._pairs.get((a, b))
            if got is not None:
                return got
        pa, pb = self.profile(a), self.profile(b)
        ua = pa.gpu_util if pa is not None else DEFAULT_UTIL
        ub = pb.gpu_util if pb is not None else DEFAULT_UTIL
        s = math.sqrt(min(1.0, 100.0 / max(ua + ub, 1e-9)))
        s = min(1.0, max(MIN_PAIR_SPEED, s))
        return (s, s)


@lru_cache(maxsize=4)
def _load(folder: str) -> Interference:
    prof_path = Path(folder) / "profiles.csv" if folder else _data_file("profiles.csv")
    pair_path = Path(folder) / "colocation.csv" if folder else _data_file("colocation.csv")
    profiles: dict[ProfileKey, Profile] = {}
    with prof_path.open(newline="") as fh:
        for row in csv.DictReader(fh):
            key = (row["model"], row["dataset"], int(row["batchsize"]), int(row["amp"]))
            profiles[key] = Profile(
                key, float(row["gpu_util"]), float(row["memory_gib"]), int(row["label"]),
                float(row.get("speed") or math.nan), float(row.get("gmem_util") or math.nan),
            )
    sums: dict[tuple[ProfileKey, ProfileKey], list[float]] = {}
    with pair_path.open(newline="") as fh:
        for row in csv.DictReader(fh):
            a = (row["model1"], row["dataset1"], int(row["batchsize1"]), int(row["amp1"]))
            b = (row["model2"], row["dataset2"], int(row["batchsize2"]), int(row["amp2"]))
            s1, s2 = float(row["speed1"]), float(row["speed2"])
            for pair, x, y in (((a, b), s1, s2), ((b, a), s2, s1)):
                acc = sums.setdefault(pair, [0.0, 0.0, 0.0])
                acc[0] += x
                acc[1] += y
                acc[2] += 1
    pairs = {
        k: (min(1.0, max(MIN_PAIR_SPEED, v[0] / v[2])), min(1.0, max(MIN_PAIR_SPEED, v[1] / v[2])))
        for k, v in sums.items()
    }
    return Interference(profiles, pairs)


def derive_tables(lucid_dir: str | Path, out_dir: str | Path) -> tuple[int, int]:
    """Rebuild ``profiles.csv`` and ``colocation.csv`` from Lucid's ``single_data.csv`` and
    ``colocate_info.csv``. Returns the number of profiles and pairs written."""
    src, dst = Path(lucid_dir), Path(out_dir)
    dst.mkdir(parents=True, exist_ok=True)
    n_prof = 0
    with (src / "single_data.csv").open(newline="") as fh, (dst / "profiles.csv").open(
        "w", newline=""
    ) as out:
        w = csv.writer(out, lineterminator="\n")
        w.writerow(["model", "dataset", "batchsize", "amp", "gpu_util", "memory_gib", "label",
                    "speed", "gmem_util"])
        for row in csv.DictReader(fh):
            w.writerow([
                row["model"], row["dataset"], int(float(row["batchsize"])),
                int(float(row["amp"])), round(float(row["gpu_util"]), 3),
                round(float(row["gmem"]) / 1024.0, 3), int(float(row["label"])),
                round(float(row["speed"]), 3), round(float(row["gmem_util"]), 3),
            ])
            n_prof += 1
    n_pair = 0
    with (src / "colocate_info.csv").open(newline="") as fh, (dst / "colocation.csv").open(
        "w", newline=""
    ) as out:
        w = csv.writer(out, lineterminator="\n")
        cols = ["model", "dataset", "batchsize", "amp"]
        w.writerow([f"{c}{i}" for i in (1, 2) for c in cols] + ["speed1", "speed2"])
        for row in csv.DictReader(fh):
            w.writerow([
                *(row[f"{c}1"] if c in ("model", "dataset") else int(float(row[f"{c}1"]))
                  for c in cols),
                *(row[f"{c}2"] if c in ("model", "dataset") else int(float(row[f"{c}2"]))
                  for c in cols),
                round(float(row["speed1"]), 4), round(float(row["speed2"]), 4),
            ])
            n_pair += 1
    return n_prof, n_pair

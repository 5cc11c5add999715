"""Workload profiles and MPS colocation speeds (the simulator's interference truth).

Nothing here ships data. An :class:`Interference` comes from one of two sources:

* **Lucid's measurements**, read from the Lucid folder of the traces path
  (``<traces>/lucid_venus/``; never committed): ``single_data.csv`` gives the 66 single-job
  profiles keyed by ``(model, dataset, batchsize, amp)`` (throughput ``speed``, ``gpu_util``,
  ``gmem_util``, peak GPU memory ``gmem`` in MiB, Lucid's sharing score ``label``: 0 tiny,
  1 medium, 2 jumbo) and ``colocate_info.csv`` the 1,388 measured MPS pairs (``speed1``,
  ``speed2``: each job's colocated/exclusive throughput ratio). :func:`load_lucid` reads the
  original CSVs. A pair that was not measured runs at ``min(1, 100 / (util_a + util_b)) ** 0.5``
  clipped to ``[0.3, 1.0]``.
* **The synthetic model** of :mod:`optsched.sim.synthetic` (a handful of ``synth-<k>``
  profiles and a fitted pair-speed law), used for the shipped mini trace and whenever no Lucid
  folder is found.

:func:`optsched.sim.trace.resolve_interference` picks the source for a trace;
``Interference.source`` says which one a run used (``"lucid:<folder>"`` or ``"synthetic"``).
Jobs without a known profile use ``DEFAULT_UTIL``.
"""

from __future__ import annotations

import csv
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from optsched.sim.paths import default_traces_dir

ProfileKey = tuple[str, str, int, int]
"""``(model, dataset, batchsize, amp)``."""

MIN_PAIR_SPEED = 0.3
DEFAULT_UTIL = 50.0
DEFAULT_MEMORY_GIB = 4.0
LUCID_FOLDER = "lucid_venus"
LUCID_FILES = ("single_data.csv", "colocate_info.csv")

log = logging.getLogger("optsched.sim")

PairLaw = Callable[[float, float, ProfileKey | None, ProfileKey | None], tuple[float, float]]
"""``law(util_a, util_b, key_a, key_b) -> (speed_a, speed_b)`` for pairs without a measurement."""


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


def sqrt_rule(ua: float, ub: float, a: ProfileKey | None = None,
              b: ProfileKey | None = None) -> tuple[float, float]:
    """Unmeasured Lucid pair: both at ``sqrt(min(1, 100 / (ua + ub)))`` in ``[0.3, 1]``."""
    s = math.sqrt(min(1.0, 100.0 / max(ua + ub, 1e-9)))
    s = min(1.0, max(MIN_PAIR_SPEED, s))
    return (s, s)


class Interference:
    """Profiles and colocation speeds: measured pairs first, else ``law``."""

    def __init__(self, profiles: dict[ProfileKey, Profile],
                 pairs: dict[tuple[ProfileKey, ProfileKey], tuple[float, float]],
                 source: str = "table", law: PairLaw = sqrt_rule) -> None:
        self.profiles = profiles
        self._pairs = pairs
        self.source = source
        self.law = law

    def profile(self, key: ProfileKey | None) -> Profile | None:
        return None if key is None else self.profiles.get(key)

    def measured(self, a: ProfileKey, b: ProfileKey) -> bool:
        return (a, b) in self._pairs

    @property
    def n_pairs(self) -> int:
        """Measured (unordered) pairs."""
        return len({frozenset(k) for k in self._pairs})

    def pair_speeds(self, a: ProfileKey | None, b: ProfileKey | None) -> tuple[float, float]:
        """Colocated speeds ``(speed_a, speed_b)`` of two jobs sharing GPUs through MPS."""
        if a is not None and b is not None:
            got = self._pairs.get((a, b))
            if got is not None:
                return got
        pa, pb = self.profile(a), self.profile(b)
        ua = pa.gpu_util if pa is not None else DEFAULT_UTIL
        ub = pb.gpu_util if pb is not None else DEFAULT_UTIL
        return self.law(ua, ub, a, b)


def _key(row: dict[str, str], suffix: str = "") -> ProfileKey:
    return (row[f"model{suffix}"], row[f"dataset{suffix}"], int(float(row[f"batchsize{suffix}"])),
            int(float(row[f"amp{suffix}"])))


def read_lucid_profiles(path: str | Path) -> dict[ProfileKey, Profile]:
    """Profiles of Lucid's ``single_data.csv`` (``gmem`` MiB → ``memory_gib``)."""
    out: dict[ProfileKey, Profile] = {}
    with Path(path).open(newline="") as fh:
        for row in csv.DictReader(fh):
            key = _key(row)
            out[key] = Profile(
                key, float(row["gpu_util"]), float(row["gmem"]) / 1024.0, int(float(row["label"])),
                float(row.get("speed") or math.nan), float(row.get("gmem_util") or math.nan),
            )
    return out


def read_lucid_pairs(path: str | Path) -> dict[tuple[ProfileKey, ProfileKey], tuple[float, float]]:
    """Measured pairs of Lucid's ``colocate_info.csv``, both orders; repeated measurements of
    a pair are averaged; speeds clipped to ``[0.3, 1.0]``."""
    sums: dict[tuple[ProfileKey, ProfileKey], list[float]] = {}
    with Path(path).open(newline="") as fh:
        for row in csv.DictReader(fh):
            a, b = _key(row, "1"), _key(row, "2")
            s1, s2 = float(row["speed1"]), float(row["speed2"])
            for pair, x, y in (((a, b), s1, s2), ((b, a), s2, s1)):
                acc = sums.setdefault(pair, [0.0, 0.0, 0.0])
                acc[0] += x
                acc[1] += y
                acc[2] += 1
    return {
        k: (min(1.0, max(MIN_PAIR_SPEED, v[0] / v[2])), min(1.0, max(MIN_PAIR_SPEED, v[1] / v[2])))
        for k, v in sums.items()
    }


def is_lucid_dir(folder: str | Path | None) -> bool:
    return folder is not None and all((Path(folder) / f).is_file() for f in LUCID_FILES)


@lru_cache(maxsize=4)
def _load_lucid(folder: str) -> Interference:
    # the source names the folder, not its absolute path (no machine paths in run logs)
    src = Path(folder)
    return Interference(read_lucid_profiles(src / LUCID_FILES[0]),
                        read_lucid_pairs(src / LUCID_FILES[1]), source=f"lucid:{src.name}")


def load_lucid(lucid_dir: str | Path) -> Interference:
    """Lucid's profiles and measured pairs, read from ``lucid_dir`` (``single_data.csv``,
    ``colocate_info.csv``); raises ``FileNotFoundError`` when either is missing."""
    if not is_lucid_dir(lucid_dir):
        raise FileNotFoundError(f"'{lucid_dir}' lacks {' or '.join(LUCID_FILES)}")
    return _load_lucid(str(Path(lucid_dir).resolve()))


def find_lucid_dir(trace_path: str | Path | None) -> Path | None:
    """The Lucid folder for a trace file: ``lucid_venus/`` next to the trace's folder (the
    traces path), else the default traces path's (:func:`optsched.sim.paths.default_traces_dir`)."""
    if trace_path is not None:
        p = Path(trace_path)
        for base in (p.parent, p.parent.parent):
            if is_lucid_dir(base / LUCID_FOLDER):
                return base / LUCID_FOLDER
    root = default_traces_dir()
    if root is not None and is_lucid_dir(root / LUCID_FOLDER):
        return root / LUCID_FOLDER
    return None

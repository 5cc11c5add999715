"""LightGBMPredictor: the shipped boosters of ``models/`` behind the Predictor protocol.

``lightgbm`` is imported only when a booster is loaded. Each of the three predictors is
optional: one whose folder is missing is replaced by the fallback rules of
:class:`~optsched.predict.fallback.EstimatePredictor`, and every estimate names its source:

* runtime: ``model:runtime/<version>`` (always, when loaded; unknown features are missing
  values for LightGBM), else ``estimate`` / ``default``;
* memory: ``model:memory/<version>`` when the job carries its single-run profile in its
  features (``speed``, ``gpu_util``, ``gmem_util``, ``gmem`` in MiB, as the simulator and a
  profiling step provide): its measured memory times the pair margin; else the
  snapshot's ``memory_gib`` (``estimate``); else ``model:memory/<version>`` from the booster
  (on whatever workload features the job names, missing ones as missing values) times its
  calibrated margin; else, with no memory booster, the full memory of the largest allowed GPU
  (``default``). A prediction never exceeds that full memory;
* pair speeds: ``model:interference/<version>`` when both jobs carry their profiles, else
  the fallback's pessimistic ``default``.

No table of measured profiles ships with the models: the traces they were trained on stay
outside the repository, and a job's profile travels with the job.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from optsched.predict.base import JobEstimate, PairEstimate, Predictions
from optsched.predict.fallback import DEFAULT_PAIR_SPEED, DEFAULT_RUNTIME_S
from optsched.predict.features import (
    FEATURES,
    PROFILE_COLUMNS,
    Row,
    encode,
    memory_row,
    own_profile,
    pair_row,
    runtime_matrix,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from optsched.engine.state import ClusterState
    from optsched.schema.snapshot import Job

PREDICTORS: tuple[str, ...] = ("runtime", "memory", "interference")
MIN_SPEED = 0.05
MIN_RUNTIME_S = 1.0


class ModelCardError(ValueError):
    """A model folder is inconsistent (its card's features differ from the code's)."""


def _version_key(name: str) -> tuple[int, str]:
    m = re.fullmatch(r"v(\d+)", name)
    return (int(m.group(1)) if m else -1, name)


def latest_version(folder: Path) -> Path | None:
    """The highest ``v<N>`` subfolder of ``folder`` holding a ``model.txt``, or ``None``."""
    if not folder.is_dir():
        return None
    cands = [p for p in folder.iterdir() if (p / "model.txt").is_file()]
    if not cands:
        return None
    return max(cands, key=lambda p: _version_key(p.name))


@dataclass(frozen=True)
class Booster:
    """One loaded booster with its card."""

    predictor: str
    version: str
    booster: Any
    card: dict[str, Any]
    folder: Path

    @property
    def source(self) -> str:
        return f"model:{self.predictor}/{self.version}"

    @classmethod
    def load(cls, folder: Path) -> Booster:
        """Load ``folder/{model.txt, card.json}``.

        Raises
        ------
        ModelCardError
            If the card's features are not this code's feature list for that predictor.
        ImportError
            If lightgbm is not installed.
        """
        import lightgbm

        card = json.loads((folder / "card.json").read_text())
        predictor = str(card["predictor"])
        if predictor not in FEATURES:
            raise ModelCardError(f"{folder}: unknown predictor '{predictor}'")
        if list(card["features"]) != list(FEATURES[predictor]):
            raise ModelCardError(
                f"{folder}/card.json: features differ from optsched.predict.features.FEATURES"
                f"['{predictor}']; retrain with `optsched train`"
            )
        booster = lightgbm.Booster(model_file=str(folder / "model.txt"))
        return cls(predictor, str(card["version"]), booster, card, folder)

    def predict(self, rows: list[Row]) -> np.ndarray:
        """Raw output for feature rows (categories encoded with the card's vocabulary)."""
        if not rows:
            return np.zeros(0)
        x = encode(rows, FEATURES[self.predictor], self.card["vocab"])
        return self.predict_matrix(x)

    def predict_matrix(self, x: np.ndarray) -> np.ndarray:
        """Raw output for an already encoded feature matrix (columns in ``FEATURES`` order)."""
        if len(x) == 0:
            return np.zeros(0)
        return np.asarray(self.booster.predict(x, num_threads=1), dtype=np.float64)


def _max_memory(state: ClusterState, job: Job) -> float:
    types = state.snapshot.gpu_types
    return max(types[t].memory_gib for t in state.allowed_types(job))


class LightGBMPredictor:
    """Predictor backed by the boosters in a ``models/`` folder.

    Parameters
    ----------
    models_dir:
        Folder with ``<predictor>/<version>/{model.txt, card.json}``; the latest version of
        each predictor is loaded. Missing predictors fall back (see the module docstring).

    Raises
    ------
    ImportError
        If lightgbm is not installed and at least one booster exists.
    ModelCardError
        If a card does not match the code's features.
    """

    name = "lightgbm"

    def __init__(self, models_dir: Path | str) -> None:
        self.models_dir = Path(models_dir)
        self.boosters: dict[str, Booster] = {}
        for pred in PREDICTORS:
            folder = latest_version(self.models_dir / pred)
            if folder is not None:
                self.boosters[pred] = Booster.load(folder)
        self._pair_cache: dict[tuple[tuple[object, ...], tuple[object, ...]], tuple[float, float]] = {}
        """Pair speeds depend only on the two profiles: computed once per ordered pair."""

    @property
    def missing(self) -> tuple[str, ...]:
        """Predictors without a booster (served by the fallback rules)."""
        return tuple(p for p in PREDICTORS if p not in self.boosters)

    # -------------------------------------------------------------------------- jobs
    def predict_jobs(self, state: ClusterState, jobs: Sequence[Job] | None = None) -> Predictions:
        """Estimates for every job of the snapshot, or for ``jobs`` of it only (each job's
        estimate depends on the job and the snapshot's GPU types alone)."""
        jobs = list(state.snapshot.jobs) if jobs is None else list(jobs)
        rt_b = self.boosters.get("runtime")
        runtimes: list[tuple[float, str]]
        if rt_b is not None:
            # encode(job_runtime_row(j) ...) column by column: the same matrix, far fewer steps
            raw = rt_b.predict_matrix(runtime_matrix(jobs, rt_b.card["vocab"]))
            src = rt_b.source
            runtimes = [(max(MIN_RUNTIME_S, v), src) for v in np.expm1(raw).tolist()]
        else:
            runtimes = [
                (j.runtime_s, "estimate")
                if j.runtime_s is not None
                else (DEFAULT_RUNTIME_S, "default")
                for j in jobs
            ]
        memories = self._memories(state, jobs)
        out = {
            j.id: JobEstimate(rt, mem, rsrc, msrc)
            for j, (rt, rsrc), (mem, msrc) in zip(jobs, runtimes, memories, strict=True)
        }
        return Predictions(jobs=out, source=self.name if not self.missing else "lightgbm+fallback")

    def _memories(self, state: ClusterState, jobs: list[Job]) -> list[tuple[float, str]]:
        mb = self.boosters.get("memory")
        out: list[tuple[float, str] | None] = [None] * len(jobs)
        todo: list[int] = []
        full: dict[tuple[str, ...] | None, float] = {}  # _max_memory per allowed-types list

        def max_memory(job: Job) -> float:
            key = None if job.gpu_types is None else tuple(job.gpu_types)
            v = full.get(key)
            if v is None:
                v = full[key] = _max_memory(state, job)
            return v

        for i, job in enumerate(jobs):
            feats = job.features or {}
            prof = own_profile(feats)
            if mb is not None and prof is not None:
                margin = float(mb.card.get("profile_margin", 1.0))
                mib = prof["gmem"] * margin
                out[i] = (min(mib / 1024.0, max_memory(job)), mb.source)
            elif job.memory_gib is not None:
                out[i] = (job.memory_gib, "estimate")
            elif mb is not None:
                # the booster reads whatever of the workload's features the job carries (missing
                # ones are LightGBM's missing values), so MPS fit uses a prediction, never the
                # whole GPU, whenever the trained memory model is loaded
                todo.append(i)
            else:
                out[i] = (max_memory(job), "default")
        if todo and mb is not None:
            raw = mb.predict([memory_row(jobs[i].features) for i in todo])
            margin = float(mb.card.get("margin", 1.0))
            for i, v in zip(todo, raw, strict=True):
                gib = math.exp(float(v)) * margin / 1024.0
                out[i] = (min(gib, max_memory(jobs[i])), mb.source)
        return [o for o in out if o is not None]

    # -------------------------------------------------------------------------- pairs
    def predict_pair(self, state: ClusterState, host: Job, guest: Job) -> PairEstimate:
        b = self.boosters.get("interference")
        hf, gf = host.features or {}, guest.features or {}
        if b is None:
            return PairEstimate(DEFAULT_PAIR_SPEED, DEFAULT_PAIR_SPEED, "default")
        hp, gp = own_profile(hf), own_profile(gf)
        if hp is None or gp is None:
            return PairEstimate(DEFAULT_PAIR_SPEED, DEFAULT_PAIR_SPEED, "default")
        hk = (hf.get("batchsize"), hf.get("amp"), *(hp[c] for c in PROFILE_COLUMNS))
        gk = (gf.get("batchsize"), gf.get("amp"), *(gp[c] for c in PROFILE_COLUMNS))
        cached = self._pair_cache.get((hk, gk))
        if cached is None:
            raw = b.predict([pair_row(hf, gf, {}), pair_row(gf, hf, {})])
            cached = (
                float(np.clip(raw[0], MIN_SPEED, 1.0)),
                float(np.clip(raw[1], MIN_SPEED, 1.0)),
            )
            self._pair_cache[(hk, gk)] = cached
        return PairEstimate(cached[0], cached[1], b.source)

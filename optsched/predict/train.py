"""Fitting and saving of the three LightGBM predictors (``optsched train`` runs them through
:func:`optsched.predict.retrain.train_models`).

* **runtime**: L1 regression (a conditional median) of ``log1p(runtime_s)`` on
  :data:`~optsched.predict.features.RUNTIME_FEATURES`, trained on the past of a time split.
  The number of trees is chosen by early stopping on the last tenth (by submission time) of
  the training part, then the booster is refitted on the whole training part.
* **memory**: a job whose profile ``(model, dataset, batchsize, amp)`` is in the shipped
  table gets its measured memory times ``profile_margin``, calibrated on the measured MPS
  pairs (pair memory over the sum of both single-run profiles) so that at most
  :data:`MEMORY_UNDER_TARGET` of pairs exceed it. Other profiles get an L2 regression of
  ``log(gmem MiB)`` times ``margin``, the largest out-of-fold ratio true / predicted
  (:data:`UNKNOWN_PROFILE_UNDER_TARGET`).
* **interference**: L2 regression of a job's colocated speed on both jobs' single-run
  profiles; each measured pair gives two rows (each job as ``self``).

Everything is deterministic under a seed (``deterministic=True``, one thread, fixed folds).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from optsched.predict.features import (
    CATEGORICAL,
    FEATURES,
    PROFILE_COLUMNS,
    RUNTIME_INPUT_KEYS,
    ProfileKey,
    Row,
    build_vocab,
    encode,
    memory_row,
    pair_row,
    runtime_row,
)
from optsched.predict.history import RuntimeHistory

if TYPE_CHECKING:
    import lightgbm as lgb
    import pandas as pd

SEED = 0
VERSION = "v1"
MEMORY_UNDER_TARGET = 0.01
"""Share of measured MPS pairs a known-profile margin may leave under-predicted."""
UNKNOWN_PROFILE_UNDER_TARGET = 0.0
"""Share of out-of-fold profiles the unknown-profile margin may leave under-predicted."""

BASE_PARAMS: dict[str, Any] = {
    "verbosity": -1,
    "deterministic": True,
    "force_col_wise": True,
    "num_threads": 1,
    "max_bin": 63,
}

RUNTIME_PARAMS: dict[str, Any] = {
    "objective": "l1",
    "learning_rate": 0.05,
    "num_leaves": 31,
    "min_data_in_leaf": 20,
    "feature_fraction": 0.9,
    "lambda_l2": 1.0,
    "cat_smooth": 10.0,
    "min_data_per_group": 20,
}
RUNTIME_MAX_ROUNDS = 400

MEMORY_PARAMS: dict[str, Any] = {
    "objective": "l2",
    "learning_rate": 0.05,
    "num_leaves": 8,
    "min_data_in_leaf": 2,
    "min_data_in_bin": 1,
    "min_data_per_group": 1,
    "cat_smooth": 1.0,
    "cat_l2": 1.0,
}
MEMORY_ROUNDS = 300

PAIR_PARAMS: dict[str, Any] = {
    "objective": "l2",
    "learning_rate": 0.05,
    "num_leaves": 15,
    "min_data_in_leaf": 10,
    "feature_fraction": 0.9,
    "lambda_l2": 1.0,
    "min_data_per_group": 10,
    "cat_smooth": 10.0,
}
PAIR_ROUNDS = 300


def _lgb() -> Any:
    import lightgbm

    return lightgbm


def lightgbm_version() -> str:
    """Version of the installed lightgbm."""
    return str(_lgb().__version__)


# ------------------------------------------------------------------------------ boosters
def fit_booster(
    x: np.ndarray,
    y: np.ndarray,
    features: Sequence[str],
    categorical: Sequence[str],
    params: dict[str, Any],
    rounds: int,
    seed: int,
    valid: tuple[np.ndarray, np.ndarray] | None = None,
) -> lgb.Booster:
    """Train one booster deterministically; with ``valid``, stop early on it (50 rounds)."""
    lgb_mod = _lgb()
    full = {**BASE_PARAMS, **params, "seed": seed}
    cat_idx = [list(features).index(c) for c in categorical]
    train = lgb_mod.Dataset(
        x, label=y, feature_name=list(features), categorical_feature=cat_idx, free_raw_data=False
    )
    kwargs: dict[str, Any] = {}
    if valid is not None:
        vset = lgb_mod.Dataset(valid[0], label=valid[1], reference=train)
        kwargs["valid_sets"] = [vset]
        kwargs["callbacks"] = [lgb_mod.early_stopping(50, verbose=False)]
    return lgb_mod.train(full, train, num_boost_round=rounds, **kwargs)


@dataclass
class Fitted:
    """A trained booster with what is needed to use it and describe it in a card."""

    predictor: str
    booster: Any
    vocab: dict[str, list[str]]
    params: dict[str, Any]
    target: str
    extra: dict[str, Any] = field(default_factory=dict)

    def predict(self, rows: Sequence[Row]) -> np.ndarray:
        """Raw booster output (in the target's transformed space) for feature rows."""
        x = encode(rows, FEATURES[self.predictor], self.vocab)
        return np.asarray(self.booster.predict(x, num_threads=1), dtype=np.float64)


# ------------------------------------------------------------------------------- runtime
def runtime_rows(records: Sequence[dict[str, Any]], window: int | None = None) -> list[Row]:
    """Feature rows of a job table, with ``hist_*`` replayed through :class:`RuntimeHistory`.

    Each job only sees the jobs that ended strictly before its submission.
    """
    hist = RuntimeHistory() if window is None else RuntimeHistory(window)
    for r in records:
        hist.observe(str(r["tenant"]), r["user"] or "", float(r["end_s"]), float(r["runtime_s"]))
    rows: list[Row] = []
    for r in records:
        feats: dict[str, Any] = {k: r.get(k) for k in RUNTIME_INPUT_KEYS}
        feats.update(hist.features_for(str(r["tenant"]), r["user"] or "", float(r["submit_s"])))
        est = r.get("estimate_s")
        rows.append(
            runtime_row(str(r["tenant"]), float(r["gpus"]), float(r["submit_s"]), feats, est)
        )
    return rows


def time_split_index(n: int, train_frac: float = 0.8) -> int:
    """Index of the first test row of a table sorted by submission time."""
    if not 0.0 < train_frac < 1.0:
        raise ValueError(f"train_frac must be in (0, 1), got {train_frac}")
    return max(1, min(n - 1, round(n * train_frac)))


def fit_runtime(rows: Sequence[Row], runtime_s: np.ndarray, seed: int = SEED) -> Fitted:
    """Fit the runtime booster on rows sorted by submission time."""
    feats = FEATURES["runtime"]
    cats = CATEGORICAL["runtime"]
    vocab = build_vocab(rows, cats, max_size=256, min_count=5)
    x = encode(rows, feats, vocab)
    y = np.log1p(np.asarray(runtime_s, dtype=np.float64))
    cut = max(1, int(len(rows) * 0.9))
    rounds = RUNTIME_MAX_ROUNDS
    if len(rows) - cut >= 20:
        probe = fit_booster(
            x[:cut], y[:cut], feats, cats, RUNTIME_PARAMS, rounds, seed, valid=(x[cut:], y[cut:])
        )
        rounds = max(20, int(probe.best_iteration or rounds))
    booster = fit_booster(x, y, feats, cats, RUNTIME_PARAMS, rounds, seed)
    return Fitted(
        "runtime",
        booster,
        vocab,
        {**BASE_PARAMS, **RUNTIME_PARAMS, "seed": seed, "num_boost_round": rounds},
        target="log1p(runtime_s); prediction = expm1(output)",
    )


# -------------------------------------------------------------------------------- memory
def memory_records(single: pd.DataFrame) -> tuple[list[dict[str, Any]], np.ndarray]:
    """Workload profiles of ``single_data.csv`` and their ``log(gmem MiB)`` targets."""
    recs = [
        {k: r[k] for k in ("model", "dataset", "batchsize", "amp")}
        for r in single.to_dict("records")
    ]
    return recs, np.log(single["gmem"].to_numpy(dtype=np.float64))


def kfold(n: int, k: int, seed: int) -> list[np.ndarray]:
    """Deterministic k folds of ``range(n)`` (seeded shuffle, then round robin)."""
    order = np.random.default_rng(seed).permutation(n)
    return [np.sort(order[i::k]) for i in range(k)]


def group_kfold(groups: Sequence[str], k: int, seed: int) -> list[np.ndarray]:
    """Deterministic group k folds: every group lies in exactly one fold."""
    uniq = sorted(set(groups))
    order = np.random.default_rng(seed).permutation(len(uniq))
    fold_of = {uniq[g]: i % k for i, g in enumerate(order)}
    idx = np.array([fold_of[g] for g in groups])
    return [np.flatnonzero(idx == i) for i in range(k)]


def _fit_memory_raw(recs: Sequence[dict[str, Any]], y: np.ndarray, seed: int) -> Fitted:
    feats, cats = FEATURES["memory"], CATEGORICAL["memory"]
    rows = [memory_row(r) for r in recs]
    vocab = build_vocab(rows, cats, max_size=256)
    booster = fit_booster(
        encode(rows, feats, vocab), y, feats, cats, MEMORY_PARAMS, MEMORY_ROUNDS, seed
    )
    return Fitted(
        "memory",
        booster,
        vocab,
        {**BASE_PARAMS, **MEMORY_PARAMS, "seed": seed, "num_boost_round": MEMORY_ROUNDS},
        target="log(gmem_mib); prediction GiB = exp(output) * margin / 1024",
    )


def predict_memory_raw(fit: Fitted, recs: Sequence[dict[str, Any]]) -> np.ndarray:
    """Raw memory output (``log`` MiB, before the margin) for workload profiles."""
    return fit.predict([memory_row(r) for r in recs])


def calibrate_margin(ratios: np.ndarray, under_target: float) -> float:
    """Smallest margin ``m >= 1`` with at most ``under_target`` of ``ratios`` above ``m``.

    ``ratios`` are true / predicted memory on held-out rows.
    """
    r = np.sort(np.asarray(ratios, dtype=np.float64))
    allowed = math.floor(under_target * len(r))
    m = float(r[len(r) - 1 - allowed]) if len(r) else 1.0
    return max(1.0, m)


def oof_memory(
    recs: Sequence[dict[str, Any]], y: np.ndarray, folds: Sequence[np.ndarray], seed: int
) -> np.ndarray:
    """Out-of-fold raw memory predictions (``log`` MiB, before the margin)."""
    out = np.full(len(recs), np.nan)
    for test in folds:
        train = np.setdiff1d(np.arange(len(recs)), test)
        fit = _fit_memory_raw([recs[i] for i in train], y[train], seed)
        out[test] = predict_memory_raw(fit, [recs[i] for i in test])
    return out


def fit_memory(
    single: pd.DataFrame, coloc: pd.DataFrame | None = None, seed: int = SEED, k: int = 6
) -> Fitted:
    """Fit the memory booster on all profiles.

    ``margin`` (for profiles outside the shipped table) comes from k-fold predictions;
    ``profile_margin`` (for a job whose measured profile is in the table) from the measured
    MPS pairs: the ratio of a pair's memory to the sum of its two single-run profiles.
    """
    recs, y = memory_records(single)
    oof = oof_memory(recs, y, kfold(len(recs), k, seed), seed)
    margin = calibrate_margin(np.exp(y - oof), UNKNOWN_PROFILE_UNDER_TARGET)
    fit = _fit_memory_raw(recs, y, seed)
    fit.extra["margin"] = margin
    fit.extra["profile_margin"] = profile_margin(single, coloc) if coloc is not None else 1.0
    return fit


def profile_margin(single: pd.DataFrame, coloc: pd.DataFrame) -> float:
    """Margin over the sum of two single-run profiles that covers measured MPS pairs."""
    table = profile_table(single)
    ratios = []
    for r in coloc.to_dict("records"):
        a = (str(r["model1"]), str(r["dataset1"]), int(r["batchsize1"]), int(r["amp1"]))
        b = (str(r["model2"]), str(r["dataset2"]), int(r["batchsize2"]), int(r["amp2"]))
        if a in table and b in table:
            ratios.append(float(r["gmem"]) / (table[a]["gmem"] + table[b]["gmem"]))
    return calibrate_margin(np.asarray(ratios), MEMORY_UNDER_TARGET)


# -------------------------------------------------------------------------- interference
def profile_table(single: pd.DataFrame) -> dict[ProfileKey, dict[str, float]]:
    """Single-run profile columns by ``(model, dataset, batchsize, amp)``."""
    table: dict[ProfileKey, dict[str, float]] = {}
    for r in single.to_dict("records"):
        key = (str(r["model"]), str(r["dataset"]), int(r["batchsize"]), int(r["amp"]))
        table[key] = {c: float(r[c]) for c in (*PROFILE_COLUMNS, "label")}
    return table


def _side(r: Mapping[Any, Any], s: str) -> dict[str, Any]:
    return {
        "model": r[f"model{s}"],
        "dataset": r[f"dataset{s}"],
        "batchsize": r[f"batchsize{s}"],
        "amp": r[f"amp{s}"],
    }


def pair_rows(
    coloc: pd.DataFrame, profiles: dict[ProfileKey, dict[str, float]]
) -> tuple[list[Row], np.ndarray, list[str], list[tuple[dict[str, Any], dict[str, Any]]]]:
    """Two rows per measured pair (each job as ``self``), their speeds, model-pair groups and
    the ``(self, other)`` job features."""
    rows: list[Row] = []
    ys: list[float] = []
    groups: list[str] = []
    sides: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for r in coloc.to_dict("records"):
        a, b = _side(r, "1"), _side(r, "2")
        group = "|".join(sorted((str(r["model1"]), str(r["model2"]))))
        for me, other, speed in ((a, b, r["speed1"]), (b, a, r["speed2"])):
            rows.append(pair_row(me, other, profiles))
            ys.append(float(speed))
            groups.append(group)
            sides.append((me, other))
    return rows, np.asarray(ys), groups, sides


def fit_pair(
    rows: Sequence[Row], y: np.ndarray, seed: int = SEED, rounds: int = PAIR_ROUNDS
) -> Fitted:
    """Fit the interference booster."""
    feats, cats = FEATURES["interference"], CATEGORICAL["interference"]
    vocab = build_vocab(rows, cats, max_size=256)
    booster = fit_booster(encode(rows, feats, vocab), y, feats, cats, PAIR_PARAMS, rounds, seed)
    return Fitted(
        "interference",
        booster,
        vocab,
        {**BASE_PARAMS, **PAIR_PARAMS, "seed": seed, "num_boost_round": rounds},
        target="colocated speed (colocated / exclusive throughput), clipped to [0.05, 1]",
    )


# ------------------------------------------------------------------------------ artifacts
def save(
    fit: Fitted,
    out: Path,
    training_data: dict[str, Any],
    metrics: dict[str, Any],
    version: str = VERSION,
) -> Path:
    """Write ``out/<predictor>/<version>/{model.txt, card.json}`` and return the folder."""
    folder = out / fit.predictor / version
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.txt").write_text(fit.booster.model_to_string(num_iteration=-1))
    card = {
        "predictor": fit.predictor,
        "version": version,
        "target": fit.target,
        "features": list(FEATURES[fit.predictor]),
        "categorical": list(CATEGORICAL[fit.predictor]),
        "vocab": fit.vocab,
        "params": fit.params,
        "training_data": training_data,
        "metrics": metrics,
        "lightgbm_version": lightgbm_version(),
        "created_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        **fit.extra,
    }
    (folder / "card.json").write_text(json.dumps(card, indent=1, sort_keys=True) + "\n")
    return folder

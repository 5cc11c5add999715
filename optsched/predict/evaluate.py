"""Held-out evaluation of the predictors against the simple rules, for ``optsched predictors
evaluate``.

* **runtime** (per trace): time split, train on the first 80 % of submissions and score the
  last 20 %. Baselines use the same :class:`~optsched.predict.history.RuntimeHistory`
  features the model sees (jobs ended before each submission, last 64 per user/tenant):
  per-user mean/median (falling back to the tenant's, then to the training set's), per-tenant
  mean/median (falling back to the training set's) and the global training median.
* **memory**: 6-fold over the 66 profiles with a margin calibrated inside each training part
  (nested), plus leave-one-model-out; baselines: the training set's 90 % quantile and max,
  and the per-model max. The under-prediction rate is the share of held-out profiles whose
  true memory exceeds the prediction (margin included). A pair check sums the shipped
  model's predictions for both jobs of each measured MPS pair and compares with the pair's
  measured memory.
* **interference**: 5-fold grouped by the unordered pair of model names, so a model pair
  seen in training never scores the test. Baselines: the training mean speed, and Lucid's
  sharing-score rule (the training mean speed of pairs with the same
  ``(label_self, label_other)`` sharing scores from ``single_data.csv``).

Metrics: MAE, MAE of ``log1p`` (runtime), median absolute percentage error (``mdape_pct``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from optsched.predict.datasets import (
    COLOCATE_INFO,
    RUNTIME_TRACES,
    SINGLE_DATA,
    file_sha256,
    job_records,
    load_colocate,
    load_runtime_trace,
    load_single,
    resolve,
)
from optsched.predict.features import Row
from optsched.predict.train import (
    MEMORY_PARAMS,
    SEED,
    UNKNOWN_PROFILE_UNDER_TARGET,
    Fitted,
    _fit_memory_raw,
    calibrate_margin,
    fit_memory,
    fit_pair,
    fit_runtime,
    group_kfold,
    kfold,
    memory_records,
    oof_memory,
    pair_rows,
    predict_memory_raw,
    profile_margin,
    profile_table,
    runtime_rows,
    time_split_index,
)

if TYPE_CHECKING:
    import pandas as pd

Step = Callable[[str], None]


def _noop(_: str) -> None:
    return None


# -------------------------------------------------------------------------------- metrics
def point_metrics(y: np.ndarray, p: np.ndarray, log: bool = False) -> dict[str, float]:
    """MAE, median absolute percentage error and (``log``) MAE of ``log1p``."""
    y = np.asarray(y, dtype=np.float64)
    p = np.asarray(p, dtype=np.float64)
    out = {
        "mae": float(np.mean(np.abs(p - y))),
        "mdape_pct": float(np.median(np.abs(p - y) / np.maximum(np.abs(y), 1e-9)) * 100.0),
    }
    if log:
        out["mae_log"] = float(np.mean(np.abs(np.log1p(p) - np.log1p(y))))
    return out


def _first(*cols: np.ndarray) -> np.ndarray:
    out = cols[0].copy()
    for c in cols[1:]:
        miss = np.isnan(out)
        out[miss] = c[miss]
    return out


def _col(rows: Sequence[Row], key: str) -> np.ndarray:
    out = np.full(len(rows), math.nan)
    for i, r in enumerate(rows):
        v = r.get(key)
        if isinstance(v, int | float):
            out[i] = float(v)
    return out


def history_baselines(rows: Sequence[Row], train_runtime: np.ndarray) -> dict[str, np.ndarray]:
    """Predictions of the history rules for ``rows``, with fallbacks to the training set."""
    n = len(rows)
    gmed = np.full(n, float(np.median(train_runtime)))
    gmean = np.full(n, float(np.mean(train_runtime)))
    t_mean, t_med = _col(rows, "hist_tenant_mean_s"), _col(rows, "hist_tenant_median_s")
    u_mean, u_med = _col(rows, "hist_user_mean_s"), _col(rows, "hist_user_median_s")
    return {
        "user_history_mean": _first(u_mean, t_mean, gmean),
        "user_history_median": _first(u_med, t_med, gmed),
        "tenant_history_mean": _first(t_mean, gmean),
        "tenant_history_median": _first(t_med, gmed),
        "global_median": gmed,
    }


HISTORY_BASELINES = (
    "user_history_mean",
    "user_history_median",
    "tenant_history_mean",
    "tenant_history_median",
)


# -------------------------------------------------------------------------------- runtime
def evaluate_runtime(
    df: pd.DataFrame, seed: int = SEED, train_frac: float = 0.8
) -> tuple[dict[str, Any], Fitted, dict[str, np.ndarray]]:
    """Time-split evaluation of the runtime predictor on one canonical job table.

    Returns the metrics, the booster fitted on the training part and the test-set arrays
    (``true``, ``model`` and each baseline) for plots.
    """
    recs = job_records(df)
    rows = runtime_rows(recs)
    y = df["runtime_s"].to_numpy(dtype=np.float64)
    cut = time_split_index(len(rows), train_frac)
    fit = fit_runtime(rows[:cut], y[:cut], seed)
    test_rows, y_test = rows[cut:], y[cut:]
    pred = np.maximum(np.expm1(fit.predict(test_rows)), 1.0)
    preds = {"model": pred, **history_baselines(test_rows, y[:cut])}
    est = _col(test_rows, "estimate_s")
    coverage = float(np.mean(~np.isnan(est)))
    if coverage > 0:
        preds["estimate"] = _first(est, preds["tenant_history_median"])
    scores = {k: point_metrics(y_test, v, log=True) for k, v in preds.items()}
    best: dict[str, str] = {}
    for m in ("mae", "mae_log"):
        ranked = sorted((scores[b][m], b) for b in HISTORY_BASELINES)
        best[m] = ranked[0][1]
    metrics: dict[str, Any] = {
        "n_train": cut,
        "n_test": len(rows) - cut,
        "test_from_submit_s": float(df["submit_s"].iloc[cut]),
        "model": scores["model"],
        "baselines": {k: v for k, v in scores.items() if k != "model"},
        "best_history_baseline": best,
        "ratio_to_best_history": {
            m: scores["model"][m] / scores[best[m]][m] for m in ("mae", "mae_log")
        },
        "estimate_coverage": coverage,
    }
    if coverage == 0:
        metrics["estimate_note"] = "the trace carries no runtime estimate"
    return metrics, fit, {"true": y_test, **preds}


# --------------------------------------------------------------------------------- memory
def _memory_heldout(
    single: pd.DataFrame, folds: Sequence[np.ndarray], seed: int
) -> dict[str, np.ndarray]:
    recs, y = memory_records(single)
    gmem = np.exp(y)
    models = single["model"].astype(str).to_numpy()
    out = {k: np.full(len(recs), np.nan) for k in ("model", "q90", "max", "model_max")}
    for test in folds:
        train = np.setdiff1d(np.arange(len(recs)), test)
        trecs = [recs[i] for i in train]
        inner = kfold(len(train), min(5, len(train)), seed)
        oof = oof_memory(trecs, y[train], inner, seed)
        margin = calibrate_margin(np.exp(y[train] - oof), UNKNOWN_PROFILE_UNDER_TARGET)
        fit = _fit_memory_raw(trecs, y[train], seed)
        out["model"][test] = np.exp(predict_memory_raw(fit, [recs[i] for i in test])) * margin
        out["q90"][test] = float(np.quantile(gmem[train], 0.9))
        out["max"][test] = float(np.max(gmem[train]))
        for i in test:
            same = gmem[train][models[train] == models[i]]
            out["model_max"][i] = float(same.max()) if len(same) else float(gmem[train].max())
    return out


def _memory_scores(gmem: np.ndarray, preds: dict[str, np.ndarray]) -> dict[str, Any]:
    res: dict[str, Any] = {}
    for k, p in preds.items():
        m: dict[str, Any] = point_metrics(gmem, p)
        m["under_rate"] = float(np.mean(p < gmem))
        m["mean_over_pct"] = float(np.mean((p - gmem) / gmem) * 100.0)
        res[k] = m
    return res


def _pair_margin_check(
    single: pd.DataFrame, coloc: pd.DataFrame, seed: int, k: int = 5
) -> dict[str, Any]:
    """Held-out check of the known-profile margin on measured MPS pairs (grouped by the
    unordered model pair): does ``margin * (gmem_a + gmem_b)`` cover the pair's memory?"""
    groups = [
        "|".join(sorted((str(a), str(b))))
        for a, b in zip(coloc["model1"], coloc["model2"], strict=True)
    ]
    true = coloc["gmem"].to_numpy(dtype=np.float64)
    pred = np.full(len(coloc), np.nan)
    table = profile_table(single)
    base = np.array(
        [
            table[(str(r["model1"]), str(r["dataset1"]), int(r["batchsize1"]), int(r["amp1"]))][
                "gmem"
            ]
            + table[(str(r["model2"]), str(r["dataset2"]), int(r["batchsize2"]), int(r["amp2"]))][
                "gmem"
            ]
            for r in coloc.to_dict("records")
        ]
    )
    for test in group_kfold(groups, k, seed):
        train = np.setdiff1d(np.arange(len(coloc)), test)
        margin = profile_margin(single, coloc.iloc[train])
        pred[test] = base[test] * margin
    return {
        "n_pairs": len(coloc),
        "under_rate": float(np.mean(pred < true)),
        "under_rate_no_margin": float(np.mean(base < true)),
        **point_metrics(true, pred),
    }


def evaluate_memory(
    single: pd.DataFrame, coloc: pd.DataFrame, seed: int = SEED
) -> tuple[dict[str, Any], Fitted, dict[str, np.ndarray]]:
    """Held-out evaluation of the memory predictor (MiB) and the MPS pair check."""
    recs, y = memory_records(single)
    gmem = np.exp(y)
    kf = _memory_heldout(single, kfold(len(recs), 6, seed), seed)
    models = single["model"].astype(str).tolist()
    lomo = _memory_heldout(single, group_kfold(models, len(set(models)), seed), seed)
    fit = fit_memory(single, coloc, seed)
    metrics = {
        "unit": "MiB",
        "objective": MEMORY_PARAMS["objective"],
        "margin_unknown_profile": float(fit.extra["margin"]),
        "margin_known_profile": float(fit.extra["profile_margin"]),
        "kfold_heldout": {
            "model": _memory_scores(gmem, {"model": kf["model"]})["model"],
            "baselines": _memory_scores(gmem, {k: v for k, v in kf.items() if k != "model"}),
        },
        "leave_one_model_out": {
            "model": _memory_scores(gmem, {"model": lomo["model"]})["model"],
            "baselines": _memory_scores(gmem, {k: v for k, v in lomo.items() if k != "model"}),
        },
        "mps_pair_check": _pair_margin_check(single, coloc, seed),
    }
    return metrics, fit, {"true": gmem, "model": kf["model"], "lomo": lomo["model"]}


# --------------------------------------------------------------------------- interference
def _labels(sides: Sequence[tuple[dict[str, Any], dict[str, Any]]], table: Any) -> np.ndarray:
    out = []
    for me, other in sides:
        keys = [
            (str(s["model"]), str(s["dataset"]), int(s["batchsize"]), int(s["amp"]))
            for s in (me, other)
        ]
        out.append(tuple(int(table[k]["label"]) if k in table else -1 for k in keys))
    return np.array(out)


def evaluate_interference(
    single: pd.DataFrame, coloc: pd.DataFrame, seed: int = SEED, k: int = 5
) -> tuple[dict[str, Any], Fitted, dict[str, np.ndarray]]:
    """Group k-fold evaluation (groups = unordered model pairs) of the pair predictor."""
    table = profile_table(single)
    rows, y, groups, sides = pair_rows(coloc, table)
    labels = _labels(sides, table)
    preds = {key: np.full(len(rows), np.nan) for key in ("model", "mean", "lucid_rule")}
    for test in group_kfold(groups, k, seed):
        train = np.setdiff1d(np.arange(len(rows)), test)
        fit = fit_pair([rows[i] for i in train], y[train], seed)
        preds["model"][test] = np.clip(fit.predict([rows[i] for i in test]), 0.05, None)
        preds["mean"][test] = float(np.mean(y[train]))
        cls: dict[tuple[int, int], float] = {}
        for key in {tuple(x) for x in labels[train].tolist()}:
            mask = np.all(labels[train] == np.array(key), axis=1)
            cls[(int(key[0]), int(key[1]))] = float(np.mean(y[train][mask]))
        for i in test:
            key2 = (int(labels[i][0]), int(labels[i][1]))
            preds["lucid_rule"][i] = cls.get(key2, float(np.mean(y[train])))
    scores = {key: point_metrics(y, v) for key, v in preds.items()}
    final = fit_pair(rows, y, seed)
    metrics = {
        "n_pairs": len(coloc),
        "n_rows": len(rows),
        "n_groups": len(set(groups)),
        "folds": k,
        "model": scores["model"],
        "baselines": {key: v for key, v in scores.items() if key != "model"},
    }
    return metrics, final, {"true": y, **preds}


# ---------------------------------------------------------------------------------- plots
def plot_pred_vs_true(
    path: Path,
    true: np.ndarray,
    series: dict[str, np.ndarray],
    title: str,
    unit: str,
    log: bool = False,
) -> bool:
    """Scatter of predicted vs true values, one colour per series, with the diagonal.

    Returns ``False`` (and draws nothing) when matplotlib is not installed.
    """
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 5.0), dpi=110)
    for name, pred in series.items():
        ax.scatter(true, pred, s=4, alpha=0.35, label=name)
    lo = float(np.nanmin([np.nanmin(true), *(np.nanmin(p) for p in series.values())]))
    hi = float(np.nanmax([np.nanmax(true), *(np.nanmax(p) for p in series.values())]))
    if log:
        lo = max(lo, 1.0)
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.plot([lo, hi], [lo, hi], color="black", lw=0.8)
    ax.set_xlabel(f"true ({unit})")
    ax.set_ylabel(f"predicted ({unit})")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, markerscale=3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


# -------------------------------------------------------------------------------- driver
def data_info(paths: Sequence[Path], traces: Path, **extra: Any) -> dict[str, Any]:
    """Training-data description for a card: file names relative to the traces folder and
    their SHA-256."""
    files = []
    for p in paths:
        try:
            rel = str(p.relative_to(traces)) if traces.is_dir() else p.name
        except ValueError:
            rel = p.name
        files.append({"file": rel, "sha256": file_sha256(p)})
    return {"files": files, **extra}


def evaluate_all(
    traces: Path,
    out: Path,
    seed: int = SEED,
    runtime_traces: Sequence[str] = tuple(RUNTIME_TRACES),
    step: Step = _noop,
) -> dict[str, Any]:
    """Evaluate every predictor; write ``out/metrics.json`` and PNG plots; return metrics."""
    out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"seed": seed, "runtime": {}}
    drawn = False
    for name in runtime_traces:
        step(f"runtime: {name}")
        df, paths = load_runtime_trace(name, traces)
        metrics, _, arrays = evaluate_runtime(df, seed)
        metrics["data"] = data_info(paths, traces, rows=len(df))
        if name == "venus_surrogate":
            metrics["note"] = "SYNTHETIC durations (Venus surrogate); not real Venus numbers"
        result["runtime"][name] = metrics
        best = metrics["best_history_baseline"]["mae"]
        drawn = plot_pred_vs_true(
            out / f"runtime_{name}.png",
            arrays["true"],
            {"lightgbm": arrays["model"], best: arrays[best]},
            f"runtime, {name}, future 20%",
            "s",
            log=True,
        )
    step("memory")
    single_p, coloc_p = resolve(traces, SINGLE_DATA), resolve(traces, COLOCATE_INFO)
    single, coloc = load_single(single_p), load_colocate(coloc_p)
    mem, _, marr = evaluate_memory(single, coloc, seed)
    mem["data"] = data_info([single_p, coloc_p], traces, rows=len(single))
    result["memory"] = mem
    plot_pred_vs_true(
        out / "memory.png",
        marr["true"],
        {"6-fold": marr["model"], "leave-one-model-out": marr["lomo"]},
        "GPU memory (held-out profiles, margin included)",
        "MiB",
        log=True,
    )
    step("interference")
    inter, _, iarr = evaluate_interference(single, coloc, seed)
    inter["data"] = data_info([single_p, coloc_p], traces, rows=len(coloc))
    result["interference"] = inter
    plot_pred_vs_true(
        out / "interference.png",
        iarr["true"],
        {"lightgbm": iarr["model"], "lucid_rule": iarr["lucid_rule"]},
        "colocated speed, held-out model pairs",
        "speed",
    )
    if not drawn:
        result["plots"] = "skipped: matplotlib is not installed"
    (out / "metrics.json").write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    return result

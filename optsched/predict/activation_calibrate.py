"""Fit the activation predictor's coefficient table from the public traces (never shipped raw).

Run ``optsched workflows calibrate --traces DIR`` (or :func:`calibrate`) to regenerate
``optsched/predict/data/predictor_coeffs.json``. Sources (see the traces' README):

* ``vidur_profiling/linear_ops_latency_summary.csv`` — per-GPU (A40, A100, H100) non-attention
  layer latency at TP 1: decode (1 token) fits ``dec_fixed_ms + dec_ms_per_gb * weight_gb``,
  prefill (>= 256 tokens) fits ``pf_fixed_ms + pf_ms_per_gflop * 2 P n``.
* ``gpu_specs_llm_analysis/*.json`` — HBM bandwidth and FP16 TFLOPS for the roofline of types
  without a table (efficiency = mean measured efficiency of the tabled types).
* ``splitwise_perf_model/perf_model.csv`` — measured end-to-end prefill and per-token times of
  Llama2-70B (TP 2/4/8, batch 1) on A100/H100: the end-to-end factors over Vidur's per-operator
  sum; fitted on one GPU, checked on the other (held-out error reported).
* ``serverlessllm_loading`` — loading times of 8B/32B models on H100 NVMe per loader format.

Held-out errors (leave-one-GPU-out and leave-one-model-out, physics fit vs LightGBM on the same
rows) go into the table's ``card``.
"""

from __future__ import annotations

import csv
import json
import math
import statistics
from pathlib import Path
from typing import Any

import numpy as np

VIDUR_PARAMS_B = {
    "meta-llama/Llama-2-7b-hf": 6.74,
    "meta-llama/Meta-Llama-3-8B": 8.03,
    "codellama/CodeLlama-34b-Instruct-hf": 33.7,
    "internlm/internlm-20b": 20.0,
    "Qwen/Qwen-72B": 72.3,
    "meta-llama/Llama-2-70b-hf": 69.0,
    "meta-llama/Meta-Llama-3-70B": 70.6,
    "microsoft/phi-2": 2.78,
}
SPEC_FILES = {"a100": "a100-sxm-80gb", "h100": "h100-sxm-80gb", "a10g": "a10g-pcie-24gb"}
EXTRA_SPECS = {
    # not in gpu_specs_llm_analysis; NVIDIA datasheets (dense FP16 tensor), not verified here
    "a40": {"memory_gib": 48.0, "hbm_gb_s": 696.0, "fp16_tflops": 149.7},
    "l40s": {"memory_gib": 48.0, "hbm_gb_s": 864.0, "fp16_tflops": 362.0},
}
LOADING_FILES = {
    # (file stem under serverlessllm_loading/h100_2025/random, weight GB in fp16/bf16)
    "meta-llama_Llama-3.1-8B-Instruct": 16.06,
    "Qwen_Qwen3-32B": 65.5,
    "deepseek-ai_DeepSeek-R1-Distill-Qwen-32B": 65.5,
}
TYPES = ("h100", "a100", "l40s", "a10g", "a40")


def _specs(traces: Path) -> dict[str, dict[str, float]]:
    out = {k: dict(v) for k, v in EXTRA_SPECS.items()}
    for name, stem in SPEC_FILES.items():
        d = json.loads((traces / "gpu_specs_llm_analysis" / f"{stem}.json").read_text())
        out[name] = {
            "memory_gib": float(d["mem_per_GPU_in_GB"]),
            "hbm_gb_s": float(d["hbm_bandwidth_in_GB_per_sec"]),
            "fp16_tflops": float(d["peak_fp16_TFLOPS"]),
        }
    return out


def _vidur_rows(traces: Path) -> list[dict[str, Any]]:
    rows = []
    with (traces / "vidur_profiling" / "linear_ops_latency_summary.csv").open() as fh:
        for r in csv.DictReader(fh):
            if r["model"] not in VIDUR_PARAMS_B:
                continue
            rows.append(
                {
                    "gpu": r["gpu"],
                    "model": r["model"],
                    "tp": int(r["tensor_parallel"]),
                    "n": int(r["num_tokens"]),
                    "ms": float(r["model_linear_ms"]),
                    "P": VIDUR_PARAMS_B[r["model"]],
                }
            )
    return rows


def _lsq(x: list[float], y: list[float]) -> tuple[float, float]:
    """y = a + b x with a >= 0 (refit through the origin when the intercept is negative)."""
    xa, ya = np.asarray(x), np.asarray(y)
    b, a = np.polyfit(xa, ya, 1)
    if a < 0:
        a, b = 0.0, float((xa @ ya) / (xa @ xa))
    return float(a), float(b)


def _fit_type(rows: list[dict[str, Any]]) -> dict[str, float]:
    dec = [r for r in rows if r["n"] == 1]
    pf = [r for r in rows if r["n"] >= 256]
    da, db = _lsq([2 * r["P"] for r in dec], [r["ms"] for r in dec])
    pa, pb = _lsq([2 * r["P"] * r["n"] for r in pf], [r["ms"] for r in pf])
    return {"dec_fixed_ms": da, "dec_ms_per_gb": db, "pf_fixed_ms": pa, "pf_ms_per_gflop": pb}


def _phys(c: dict[str, float], P: float, n: int) -> float:
    if n == 1:
        return c["dec_fixed_ms"] + c["dec_ms_per_gb"] * 2 * P
    return c["pf_fixed_ms"] + c["pf_ms_per_gflop"] * 2 * P * n


def _roofline(
    spec: dict[str, float], eff_dec: float, eff_pf: float, fixed: dict[str, float]
) -> dict[str, float]:
    return {
        "dec_fixed_ms": fixed["dec_fixed_ms"],
        "dec_ms_per_gb": 1000.0 / (spec["hbm_gb_s"] * eff_dec),
        "pf_fixed_ms": fixed["pf_fixed_ms"],
        "pf_ms_per_gflop": 1.0 / (spec["fp16_tflops"] * eff_pf),
    }


def _effs(
    fits: dict[str, dict[str, float]], specs: dict[str, dict[str, float]]
) -> tuple[float, float, dict[str, float]]:
    eff_dec = statistics.mean(1000.0 / (fits[g]["dec_ms_per_gb"] * specs[g]["hbm_gb_s"]) for g in fits)
    eff_pf = statistics.mean(1.0 / (fits[g]["pf_ms_per_gflop"] * specs[g]["fp16_tflops"]) for g in fits)
    fixed = {
        "dec_fixed_ms": statistics.mean(fits[g]["dec_fixed_ms"] for g in fits),
        "pf_fixed_ms": statistics.mean(fits[g]["pf_fixed_ms"] for g in fits),
    }
    return eff_dec, eff_pf, fixed


def _mape(pred: list[float], true: list[float]) -> float:
    return float(np.mean([abs(p - t) / t for p, t in zip(pred, true, strict=True)]))


def _eval_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r["n"] == 1 or r["n"] >= 256]


def _lgbm_heldout(
    train: list[dict[str, Any]],
    test: list[dict[str, Any]],
    specs: dict[str, dict[str, float]],
    seed: int,
) -> float:
    import lightgbm as lgb

    def feats(rs: list[dict[str, Any]]) -> np.ndarray:
        return np.array(
            [
                [
                    specs[r["gpu"]]["hbm_gb_s"],
                    specs[r["gpu"]]["fp16_tflops"],
                    r["P"],
                    math.log2(r["n"]),
                ]
                for r in rs
            ]
        )

    params = {
        "objective": "regression",
        "learning_rate": 0.05,
        "num_leaves": 15,
        "min_data_in_leaf": 5,
        "seed": seed,
        "deterministic": True,
        "verbose": -1,
        "num_threads": 1,
    }
    data = lgb.Dataset(feats(train), label=np.log([r["ms"] for r in train]))
    booster = lgb.train(params, data, num_boost_round=300)
    pred = np.exp(booster.predict(feats(test)))
    return _mape(list(pred), [r["ms"] for r in test])


def _splitwise(traces: Path) -> list[dict[str, Any]]:
    out = []
    with (traces / "splitwise_perf_model" / "perf_model.csv").open() as fh:
        for r in csv.DictReader(fh):
            if r["model"] != "llama2-70b" or r["batch_size"] != "1":
                continue
            gpu = {"a100-80gb": "a100", "h100-80gb": "h100"}.get(r["hardware"])
            if gpu is None:
                continue
            out.append(
                {
                    "gpu": gpu,
                    "tp": int(r["tensor_parallel"]),
                    "prompt": int(r["prompt_size"]),
                    "prompt_ms": float(r["prompt_time"]),
                    "token_ms": float(r["token_time"]),
                }
            )
    return out


def _vidur_at(rows: list[dict[str, Any]], gpu: str, tp: int, n: int) -> float:
    cand = [
        r for r in rows if r["gpu"] == gpu and r["tp"] == tp and r["model"] == "meta-llama/Llama-2-70b-hf"
    ]
    best = min(cand, key=lambda r: abs(math.log(r["n"]) - math.log(n)))
    return float(best["ms"]) * n / best["n"] if n > 1 else float(best["ms"])


def _loading(traces: Path) -> dict[str, Any]:
    base = traces / "serverlessllm_loading" / "h100_2025" / "random"
    rates: dict[str, float] = {}
    fixed: dict[str, float] = {}
    points: dict[str, list[tuple[float, float]]] = {}
    for loader in ("sllm", "safetensors"):
        pts = []
        for stem, gb in LOADING_FILES.items():
            f = base / f"{stem}_{loader}_30_random.json"
            if not f.exists():
                continue
            times = [float(x["loading_time"]) for x in json.loads(f.read_text())]
            pts.append((gb, statistics.median(times)))
        a, b = _lsq([p[0] for p in pts], [p[1] for p in pts])
        rates[loader], fixed[loader] = 1.0 / b, a
        points[loader] = pts
    return {"load_gb_s": rates, "load_fixed_s": fixed, "points": points}


def calibrate(traces: Path, seed: int = 0) -> dict[str, Any]:
    """Fit every coefficient from ``traces`` and return the table (see the module docstring)."""
    specs = _specs(traces)
    rows = _vidur_rows(traces)
    tp1 = [r for r in rows if r["tp"] == 1]
    gpus = sorted({r["gpu"] for r in tp1})
    fits = {g: _fit_type([r for r in tp1 if r["gpu"] == g]) for g in gpus}
    eff_dec, eff_pf, fixed = _effs(fits, specs)

    # held-out: leave one GPU out (roofline from the others) vs LightGBM on the same split
    card: dict[str, Any] = {"leave_one_gpu_out": {}, "leave_one_model_out": {}}
    for g in gpus:
        others = {k: v for k, v in fits.items() if k != g}
        ed, ep, fx = _effs(others, specs)
        roof = _roofline(specs[g], ed, ep, fx)
        test = _eval_rows([r for r in tp1 if r["gpu"] == g])
        train = _eval_rows([r for r in tp1 if r["gpu"] != g])
        card["leave_one_gpu_out"][g] = {
            "rows": len(test),
            "roofline_mape": _mape([_phys(roof, r["P"], r["n"]) for r in test], [r["ms"] for r in test]),
            "lightgbm_mape": _lgbm_heldout(train, test, specs, seed),
        }
    for m in sorted({r["model"] for r in tp1}):
        test = _eval_rows([r for r in tp1 if r["model"] == m])
        train_all = [r for r in tp1 if r["model"] != m]
        pred = []
        for r in test:
            c = _fit_type([x for x in train_all if x["gpu"] == r["gpu"]])
            pred.append(_phys(c, r["P"], r["n"]))
        card["leave_one_model_out"][m] = {
            "rows": len(test),
            "physics_fit_mape": _mape(pred, [r["ms"] for r in test]),
            "lightgbm_mape": _lgbm_heldout(_eval_rows(train_all), test, specs, seed),
        }

    # end-to-end factors from Splitwise (measured) over Vidur's per-operator sum
    sw = _splitwise(traces)
    ratios: dict[str, dict[str, list[float]]] = {g: {"pf": [], "dec": []} for g in ("a100", "h100")}
    for r in sw:
        ratios[r["gpu"]]["pf"].append(r["prompt_ms"] / _vidur_at(rows, r["gpu"], r["tp"], r["prompt"]))
        ratios[r["gpu"]]["dec"].append(r["token_ms"] / _vidur_at(rows, r["gpu"], r["tp"], 1))
    e2e_pf = statistics.median(ratios["a100"]["pf"] + ratios["h100"]["pf"])
    e2e_dec = statistics.median(ratios["a100"]["dec"] + ratios["h100"]["dec"])
    card["splitwise_heldout"] = {}
    for fit_on, test_on in (("a100", "h100"), ("h100", "a100")):
        fpf = statistics.median(ratios[fit_on]["pf"])
        fdec = statistics.median(ratios[fit_on]["dec"])
        card["splitwise_heldout"][f"fit_{fit_on}_test_{test_on}"] = {
            "prefill_mape": float(np.mean([abs(fpf / x - 1) for x in ratios[test_on]["pf"]])),
            "decode_mape": float(np.mean([abs(fdec / x - 1) for x in ratios[test_on]["dec"]])),
        }

    types: dict[str, dict[str, Any]] = {}
    for t in TYPES:
        spec = specs[t]
        if t in fits:
            coeffs, source = fits[t], "table:vidur"
        else:
            coeffs, source = _roofline(spec, eff_dec, eff_pf, fixed), "roofline"
        types[t] = {**{k: round(v, 6) for k, v in coeffs.items()}, **spec, "source": source}
    load = _loading(traces)
    card["roofline_efficiency"] = {"decode": eff_dec, "prefill": eff_pf}
    card["loading_points_gb_s"] = load["points"]
    return {
        "version": 1,
        "types": types,
        "e2e_prefill": round(e2e_pf, 4),
        "e2e_decode": round(e2e_dec, 4),
        "load_gb_s": {k: round(v, 4) for k, v in load["load_gb_s"].items()},
        "load_fixed_s": {k: round(v, 4) for k, v in load["load_fixed_s"].items()},
        "batch_decode_slowdown": 0.06,
        "card": _round(card),
    }


def _round(x: Any) -> Any:
    if isinstance(x, float):
        return round(x, 4)
    if isinstance(x, dict):
        return {k: _round(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_round(v) for v in x]
    return x


def write_table(table: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")

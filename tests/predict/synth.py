"""Small synthetic traces for the predictor tests (built here; never read from shared data)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from optsched.predict.datasets import COLOCATE_INFO, RUNTIME_TRACES, SINGLE_DATA, VENUS_ESTIMATES

MODELS = ("ResNet18", "VGG", "BERT", "LSTM")
DATASETS = {"ResNet18": "CIFAR-10", "VGG": "ImageNet", "BERT": "SQuAD", "LSTM": "Wiki"}


def single_data(seed: int = 0) -> pd.DataFrame:
    """Profiles: memory grows with the model's size and the batch size; amp saves memory."""
    rng = np.random.default_rng(seed)
    rows = []
    for k, model in enumerate(MODELS):
        for bs in (32, 64, 128):
            for amp in (0, 1):
                gmem = (1500.0 + 2500.0 * k) * (bs / 32) ** 0.5 * (0.8 if amp else 1.0)
                util = min(99.0, 30.0 + 15.0 * k + bs / 8)
                rows.append(
                    {
                        "model": model,
                        "dataset": DATASETS[model],
                        "batchsize": bs,
                        "amp": amp,
                        "speed": float(100.0 + 50 * k + rng.normal(0, 5)),
                        "gpu_util": util,
                        "gmem_util": util * 0.6,
                        "gmem": round(gmem * float(rng.uniform(0.95, 1.05))),
                        "label": min(2, k),
                    }
                )
    return pd.DataFrame(rows)


def colocate_info(single: pd.DataFrame, n: int = 80, seed: int = 0) -> pd.DataFrame:
    """Pairs whose speeds fall with the partner's GPU utilisation."""
    rng = np.random.default_rng(seed)
    recs = single.to_dict("records")
    rows = []
    for _ in range(n):
        a, b = (recs[i] for i in rng.choice(len(recs), 2, replace=False))
        row = {}
        for s, me, other in (("1", a, b), ("2", b, a)):
            row.update(
                {
                    f"model{s}": me["model"],
                    f"dataset{s}": me["dataset"],
                    f"gpu_num{s}": 1,
                    f"batchsize{s}": me["batchsize"],
                    f"amp{s}": me["amp"],
                    f"speed{s}": round(1.0 - 0.005 * other["gpu_util"] + rng.normal(0, 0.01), 3),
                }
            )
        row["gpu_util"] = min(100.0, a["gpu_util"] + b["gpu_util"])
        row["gmem_util"] = min(100.0, a["gmem_util"] + b["gmem_util"])
        row["gmem"] = (a["gmem"] + b["gmem"]) * float(rng.uniform(1.0, 1.15))
        rows.append(row)
    return pd.DataFrame(rows)


def venus_log(n: int = 400, seed: int = 0) -> pd.DataFrame:
    """A Lucid-schema job log: each user has a typical duration; more GPUs run longer."""
    rng = np.random.default_rng(seed)
    users = [f"u{i:03d}" for i in range(12)]
    typical = {u: float(np.exp(rng.uniform(3, 9))) for u in users}
    start = pd.Timestamp("2020-09-01")
    rows = [
        {  # the anchor row the real surrogate has, dropped by the reader
            "job_id": 1,
            "user": users[0],
            "vc": "vcA",
            "jobname": "job0",
            "gpu_num": 1,
            "cpu_num": 4,
            "node_num": 1,
            "state": "COMPLETED",
            "submit_time": "2020-04-01 00:00:00",
            "duration": 10,
            "dataset": "CIFAR-10",
            "model": "ResNet18",
            "batchsize": 32,
            "amp": 0,
            "speed": 1.0,
            "gpu_util": 1.0,
            "gmem_util": 1.0,
            "gmem": 1000.0,
        }
    ]
    t = 0.0
    for i in range(n):
        t += float(rng.exponential(600.0))
        u = users[int(rng.integers(len(users)))]
        g = int(rng.choice([1, 2, 4, 8]))
        m = MODELS[int(rng.integers(len(MODELS)))]
        rows.append(
            {
                "job_id": 1000 + i,
                "user": u,
                "vc": "vcA" if int(u[1:]) < 6 else "vcB",
                "jobname": f"{m.lower()}_{i}",
                "gpu_num": g,
                "cpu_num": 4 * g,
                "node_num": max(1, g // 8),
                "state": "COMPLETED",
                "submit_time": str(start + pd.Timedelta(seconds=round(t))),
                "duration": max(1, round(typical[u] * g**0.3 * float(rng.lognormal(0, 0.3)))),
                "dataset": DATASETS[m],
                "model": m,
                "batchsize": 32,
                "amp": 0,
                "speed": 1.0,
                "gpu_util": 50.0,
                "gmem_util": 30.0,
                "gmem": 3000.0,
            }
        )
    return pd.DataFrame(rows)


def estimates(log: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """An estimator file (``job_id, priority``): noisy durations, one of them negative."""
    rng = np.random.default_rng(seed + 100)
    prio = (log["duration"] * rng.lognormal(0.0, 1.0, len(log))).round()
    prio.iloc[-1] = -5
    return pd.DataFrame({"job_id": log["job_id"], "priority": prio})


def write_traces(root: Path, seed: int = 0) -> Path:
    """A traces folder with the files ``optsched train`` needs (Venus-surrogate layout)."""
    single = single_data(seed)
    log = venus_log(seed=seed)
    for rel, df, kw in (
        (SINGLE_DATA, single, {"index": False}),
        (COLOCATE_INFO, colocate_info(single, seed=seed), {"index": True}),
        (RUNTIME_TRACES["venus_surrogate"], log, {"index": False}),
        (VENUS_ESTIMATES, estimates(log, seed), {"index": False}),
    ):
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        df.to_csv(p, **kw)
    return root

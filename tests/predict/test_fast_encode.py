"""The column-wise feature encoders give the row-wise answer, bit for bit."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from optsched.predict.features import (
    MEMORY_FEATURES,
    RUNTIME_FEATURES,
    Row,
    Value,
    encode,
    job_runtime_row,
    memory_row,
    own_profile,
    runtime_matrix,
)
from optsched.predict.history import HIST_KEYS
from optsched.schema.snapshot import Job

VOCAB = {
    "name_tok": ["bert", "resnet", "job", "true"],
    "gpu_type": ["A100", "V100", "1"],
    "model": ["bert", "gpt2", "3"],
    "dataset": ["imagenet", "wiki", "True"],
}


def _reference_encode(
    rows: Sequence[Row], features: Sequence[str], vocab: Mapping[str, Sequence[str]]
) -> np.ndarray:
    """The original cell-by-cell encoder."""
    index = {c: {v: float(i) for i, v in enumerate(vals)} for c, vals in vocab.items()}
    out = np.full((len(rows), len(features)), np.nan, dtype=np.float64)
    for j, col in enumerate(features):
        lookup = index.get(col)
        for i, row in enumerate(rows):
            v = row.get(col)
            if v is None:
                continue
            if lookup is not None:
                code = lookup.get(str(v))
                if code is not None:
                    out[i, j] = code
            else:
                out[i, j] = float(v)
    return out


def _value(rng: random.Random) -> Value:
    choices: list[Value] = [None, "", " ", "bert", "gpt2", "wiki", "3", "1", "2.5", "x"]
    return rng.choice([*choices, True, False, 0, 1, 3, 2.5, math.nan, -7.0])


def _jobs(seed: int, n: int = 300) -> list[Job]:
    rng = random.Random(seed)
    keys = [
        "name",
        "gpu_type",
        "model",
        "dataset",
        "gpu_milli",
        "cpu_num",
        "mem_gib",
        "node_num",
        "batchsize",
        "amp",
        "speed",
        "gpu_util",
        "gmem_util",
        "gmem",
        *HIST_KEYS,
    ]
    names = ["bert_ft-3", "ResNet50", "job-12", "123", "", "True", "x_y"]
    jobs: list[Job] = []
    for i in range(n):
        feats: dict[str, Any] = {}  # None and NaN values too, as a simulator may pass
        for k in keys:
            if rng.random() < 0.4:
                feats[k] = rng.choice(names) if k == "name" and rng.random() < 0.7 else _value(rng)
        gpu_types = rng.choice([None, ["A100"], ["V100"], ["A100", "V100"], ["1"]])
        jobs.append(
            Job.model_construct(
                id=f"j{i}",
                tenant="t",
                qos="best_effort",
                gpus=rng.choice([1, 2, 8]),
                gpu_types=gpu_types,
                submit_s=rng.uniform(-1e6, 1e6),
                state="pending",
                runtime_s=rng.choice([None, 10.0, 3600.5]),
                memory_gib=None,
                features=feats if rng.random() < 0.9 else None,
            )
        )
    return jobs


def test_runtime_matrix_is_the_row_encoding() -> None:
    for seed in range(5):
        jobs = _jobs(seed)
        want = _reference_encode([job_runtime_row(j) for j in jobs], RUNTIME_FEATURES, VOCAB)
        got = runtime_matrix(jobs, VOCAB)
        assert np.array_equal(want, got, equal_nan=True)
        rows = encode([job_runtime_row(j) for j in jobs], RUNTIME_FEATURES, VOCAB)
        assert np.array_equal(want, rows, equal_nan=True)


def test_runtime_matrix_with_a_vocabulary_it_does_not_expect() -> None:
    jobs = _jobs(7, 50)
    for vocab in ({"name_tok": ["bert"]}, {**VOCAB, "gpus": ["1.0"]}):
        rows = [job_runtime_row(j) for j in jobs]
        try:
            want = _reference_encode(rows, RUNTIME_FEATURES, vocab)
        except ValueError:
            continue  # a category read as a number: both raise
        assert np.array_equal(want, runtime_matrix(jobs, vocab), equal_nan=True)


def test_runtime_matrix_of_no_jobs() -> None:
    assert runtime_matrix([], VOCAB).shape == (0, len(RUNTIME_FEATURES))


def test_memory_rows_encode_as_before() -> None:
    jobs = _jobs(11)
    rows = [memory_row(j.features) for j in jobs]
    assert np.array_equal(
        _reference_encode(rows, MEMORY_FEATURES, VOCAB), encode(rows, MEMORY_FEATURES, VOCAB), equal_nan=True
    )


def test_own_profile_shortcut() -> None:
    assert own_profile({"speed": 1, "gpu_util": 50, "gmem_util": 20}) is None
    assert own_profile({"speed": 1, "gpu_util": 50, "gmem_util": 20, "gmem": None}) is None
    assert own_profile({"speed": 1, "gpu_util": 50, "gmem_util": 20, "gmem": "2048"}) == {
        "speed": 1.0,
        "gpu_util": 50.0,
        "gmem_util": 20.0,
        "gmem": 2048.0,
    }

import math

import numpy as np
import pandas as pd

from optsched.predict.datasets import job_records, load_venus
from optsched.predict.features import (
    CATEGORICAL,
    FEATURES,
    RUNTIME_FEATURES,
    encode,
    job_runtime_row,
    name_token,
    pair_row,
    runtime_row,
)
from optsched.predict.history import HIST_KEYS
from optsched.predict.train import runtime_rows
from optsched.schema.snapshot import Job
from tests.predict.synth import venus_log


def test_feature_lists_are_consistent():
    for pred, feats in FEATURES.items():
        assert len(set(feats)) == len(feats)
        assert set(CATEGORICAL[pred]) <= set(feats)
    assert set(HIST_KEYS) <= set(RUNTIME_FEATURES)


def test_name_token():
    assert name_token("BERT_ft-3") == "bert"
    assert name_token("1234") is None
    assert name_token(None) is None


def test_job_row_reads_features_and_hour():
    job = Job(
        id="j",
        tenant="t",
        qos="guaranteed",
        gpus=2,
        gpu_types=["A100"],
        submit_s=86400 + 7200,
        state="pending",
        features={"user": "u", "name": "resnet_7", "batchsize": 64, "amp": 1},
    )
    row = job_runtime_row(job)
    assert row["gpus"] == 2.0 and row["hour"] == 2.0
    assert row["name_tok"] == "resnet" and row["gpu_type"] == "A100"
    assert row["batchsize"] == 64.0 and math.isnan(float(row["cpu_num"]))  # type: ignore[arg-type]
    assert math.isnan(float(row["estimate_s"]))  # type: ignore[arg-type]
    assert job_runtime_row(job.model_copy(update={"runtime_s": 90.0}))["estimate_s"] == 90.0


def test_encode_unknown_category_is_missing():
    rows = [runtime_row("t", 1, 0.0, {"model": "seen"}), runtime_row("t", 1, 0.0, {"model": "x"})]
    x = encode(rows, RUNTIME_FEATURES, {"model": ["seen"]})
    col = RUNTIME_FEATURES.index("model")
    assert x[0, col] == 0.0 and np.isnan(x[1, col])


def test_pair_row_without_profile_is_missing():
    row = pair_row({"model": "A"}, {"model": "B"}, {})
    assert math.isnan(float(row["self_speed"]))  # type: ignore[arg-type]


def _table(tmp_path, durations=None):
    df = venus_log(n=120, seed=3)
    if durations is not None:
        df["duration"] = durations
    p = tmp_path / "log.csv"
    df.to_csv(p, index=False)
    return load_venus(p)


def test_features_never_use_jobs_that_end_after_the_submission(tmp_path):
    recs = job_records(_table(tmp_path))
    rows = runtime_rows(recs)
    i = 80  # a job with history behind it
    now = recs[i]["submit_s"]
    assert rows[i]["hist_tenant_n"] and rows[i]["hist_tenant_n"] > 0
    raw = venus_log(n=120, seed=3)
    ids = raw["job_id"].astype(str).to_numpy()
    ends = {r["job_id"]: r["end_s"] for r in recs}
    # Lengthen job i itself, every job still running at its submission and every later job:
    # job i's features must not move.
    later = np.array([j in ends and ends[j] >= now for j in ids])
    dur = raw["duration"].to_numpy().copy()
    dur[later] = dur[later] * 50 + 1000
    rows2 = runtime_rows(job_records(_table(tmp_path, dur)))
    assert _same(rows2[i], rows[i])
    # Changing the jobs that ended before the submission does move them (the test can fail).
    early = np.array([j in ends and ends[j] < now for j in ids])
    dur3 = raw["duration"].to_numpy().copy()
    dur3[early] = dur3[early] * 50 + 1000
    rows3 = runtime_rows(job_records(_table(tmp_path, dur3)))
    assert not _same(rows3[i], rows[i])


def _same(a, b):
    for k in a:
        va, vb = a[k], b[k]
        if isinstance(va, float) and isinstance(vb, float) and math.isnan(va) and math.isnan(vb):
            continue
        if va != vb:
            return False
    return True


def test_venus_reader_joins_estimates(tmp_path):
    from optsched.predict.datasets import load_venus
    from tests.predict.synth import estimates

    log = venus_log(n=30)
    log.to_csv(tmp_path / "log.csv", index=False)
    est = estimates(log)
    est.to_csv(tmp_path / "est.csv", index=False)
    df = load_venus(tmp_path / "log.csv", tmp_path / "est.csv")
    by_id = dict(zip(est["job_id"].astype(str), est["priority"], strict=True))
    for j, e in zip(df["job_id"], df["estimate_s"], strict=True):
        assert e == (1000.0 if by_id[j] <= 0 else by_id[j])


def test_venus_reader_drops_anchor_and_sorts(tmp_path):
    p = tmp_path / "log.csv"
    venus_log(n=30).to_csv(p, index=False)
    df = load_venus(p)
    assert len(df) == 30
    assert (np.diff(df["submit_s"].to_numpy()) >= 0).all()
    assert (df["end_s"] == df["submit_s"] + df["runtime_s"]).all()
    assert isinstance(df, pd.DataFrame)

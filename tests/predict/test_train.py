import json

import numpy as np
import pytest

from optsched.predict.datasets import job_records, load_venus
from optsched.predict.features import FEATURES
from optsched.predict.train import (
    calibrate_margin,
    fit_memory,
    fit_pair,
    fit_runtime,
    group_kfold,
    pair_rows,
    profile_table,
    runtime_rows,
    time_split_index,
)
from tests.predict.synth import colocate_info, single_data, venus_log


@pytest.fixture(scope="module")
def runtime_data(tmp_path_factory):
    p = tmp_path_factory.mktemp("rt") / "log.csv"
    venus_log(n=300, seed=1).to_csv(p, index=False)
    df = load_venus(p)
    return runtime_rows(job_records(df)), df["runtime_s"].to_numpy()


def test_runtime_training_is_deterministic_under_a_seed(runtime_data):
    rows, y = runtime_data
    a = fit_runtime(rows, y, seed=7).booster.model_to_string()
    b = fit_runtime(rows, y, seed=7).booster.model_to_string()
    assert a == b
    assert "feature_names=" + " ".join(FEATURES["runtime"]) in a


def test_runtime_model_learns_the_synthetic_signal(runtime_data):
    rows, y = runtime_data
    cut = time_split_index(len(rows))
    fit = fit_runtime(rows[:cut], y[:cut], seed=0)
    pred = np.expm1(fit.predict(rows[cut:]))
    model_err = np.mean(np.abs(np.log1p(pred) - np.log1p(y[cut:])))
    median_err = np.mean(np.abs(np.log1p(np.median(y[:cut])) - np.log1p(y[cut:])))
    assert model_err < 0.7 * median_err


def test_memory_and_pair_training_are_deterministic():
    single = single_data(2)
    coloc = colocate_info(single, n=60, seed=2)
    m1, m2 = fit_memory(single, coloc, seed=3), fit_memory(single, coloc, seed=3)
    assert m1.booster.model_to_string() == m2.booster.model_to_string()
    assert m1.extra == m2.extra and m1.extra["margin"] >= 1.0
    assert m1.extra["profile_margin"] >= 1.0
    rows, y, _groups, _ = pair_rows(coloc, profile_table(single))
    assert len(rows) == 2 * len(coloc)
    p1, p2 = fit_pair(rows, y, seed=3, rounds=50), fit_pair(rows, y, seed=3, rounds=50)
    assert p1.booster.model_to_string() == p2.booster.model_to_string()


def test_calibrate_margin_covers_all_but_the_allowed_share():
    ratios = np.array([0.5, 0.9, 1.1, 1.3, 2.0] * 20)
    m = calibrate_margin(ratios, 0.2)
    assert np.mean(ratios > m) <= 0.2
    assert calibrate_margin(np.array([0.2, 0.5]), 0.0) == 1.0  # never below 1


def test_group_kfold_keeps_groups_together():
    groups = ["a|b", "a|b", "c|d", "e|f", "c|d", "g|h"]
    folds = group_kfold(groups, 3, seed=0)
    assert sorted(np.concatenate(folds).tolist()) == list(range(len(groups)))
    for f in folds:
        inside = {groups[i] for i in f}
        for g in inside:
            assert all(groups[i] != g for other in folds if other is not f for i in other)


def test_save_writes_card_with_feature_list(tmp_path, runtime_data):
    from optsched.predict.train import save

    rows, y = runtime_data
    fit = fit_runtime(rows, y, seed=0)
    folder = save(fit, tmp_path, {"files": []}, {"mae": 1.0})
    card = json.loads((folder / "card.json").read_text())
    assert card["features"] == list(FEATURES["runtime"])
    assert card["predictor"] == "runtime" and card["version"] == "v1"
    assert card["lightgbm_version"]

import json
import shutil
import warnings
from pathlib import Path

import pytest

from optsched.engine.state import ClusterState
from optsched.errors import PredictionFallbackWarning
from optsched.predict.base import Predictor
from optsched.predict.fallback import DEFAULT_PAIR_SPEED, DEFAULT_RUNTIME_S, EstimatePredictor
from optsched.predict.features import FEATURES
from optsched.predict.lgbm import LightGBMPredictor
from optsched.predict.loader import default_predictor, repo_models_dir
from optsched.schema.snapshot import Snapshot
from tests.predict.synth import write_traces


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    from optsched.predict.retrain import train_models

    root = tmp_path_factory.mktemp("pred")
    traces = write_traces(root / "traces")
    train_models(traces, root / "models", seed=0)
    return root / "models"


def _state() -> ClusterState:
    jobs = [
        {
            "id": "known",
            "tenant": "vcA",
            "qos": "best_effort",
            "gpus": 1,
            "submit_s": 100.0,
            "state": "pending",
            "features": {
                "user": "u001",
                "name": "resnet18_1",
                "model": "ResNet18",
                "dataset": "CIFAR-10",
                "batchsize": 32,
                "amp": 0,
                # its single-run profile travels with the job
                "speed": 1.0,
                "gpu_util": 45.0,
                "gmem_util": 20.0,
                "gmem": 3000.0,
                "hist_user_n": 2.0,
                "hist_user_median_s": 300.0,
            },
        },
        {
            "id": "other",
            "tenant": "vcA",
            "qos": "best_effort",
            "gpus": 2,
            "submit_s": 150.0,
            "state": "pending",
            "features": {
                "model": "VGG",
                "dataset": "ImageNet",
                "batchsize": 64,
                "amp": 1,
                "speed": 1.0,
                "gpu_util": 90.0,
                "gmem_util": 60.0,
                "gmem": 9000.0,
            },
        },
        {
            "id": "unprofiled",  # model known, profile not in the table
            "tenant": "vcA",
            "qos": "best_effort",
            "gpus": 1,
            "submit_s": 150.0,
            "state": "pending",
            "features": {"model": "VGG", "dataset": "Other", "batchsize": 48, "amp": 0},
        },
        {
            "id": "unprofiled_est",  # profile unknown, but the snapshot knows its memory
            "tenant": "vcA",
            "qos": "best_effort",
            "gpus": 1,
            "submit_s": 150.0,
            "state": "pending",
            "memory_gib": 7.0,
            "features": {"model": "VGG", "dataset": "Other", "batchsize": 48, "amp": 0},
        },
        {
            "id": "bare",
            "tenant": "vcB",
            "qos": "guaranteed",
            "gpus": 1,
            "submit_s": 0.0,
            "state": "pending",
            "memory_gib": 5.0,
            "runtime_s": 50.0,
        },
        {
            "id": "nothing",
            "tenant": "vcB",
            "qos": "guaranteed",
            "gpus": 1,
            "submit_s": 0.0,
            "state": "pending",
        },
    ]
    snap = Snapshot.model_validate(
        {
            "format": 1,
            "now": 200.0,
            "gpu_types": {"A100": {"memory_gib": 40.0, "mps": True}},
            "nodes": [{"id": "n0", "gpu_type": "A100", "gpus": 8}],
            "tenants": [{"id": "vcA", "quota": {"A100": 4}}, {"id": "vcB"}],
            "jobs": jobs,
        }
    )
    return ClusterState.from_snapshot(snap)


def test_trained_predictor_says_its_sources(trained):
    with warnings.catch_warnings():
        warnings.simplefilter("error", PredictionFallbackWarning)
        pred = default_predictor(trained)
    assert isinstance(pred, LightGBMPredictor) and isinstance(pred, Predictor)
    state = _state()
    out = pred.predict_jobs(state)
    assert out.source == "lightgbm"
    est = out.jobs
    assert all(e.runtime_source == "model:runtime/v1" for e in est.values())
    assert all(e.runtime_s >= 1.0 for e in est.values())
    assert est["known"].memory_source == "model:memory/v1"
    assert est["unprofiled"].memory_source == "model:memory/v1"
    assert est["bare"].memory_source == "estimate" and est["bare"].memory_gib == 5.0
    assert est["unprofiled_est"].memory_source == "estimate"
    assert est["unprofiled_est"].memory_gib == 7.0
    # no features, no estimate: the memory model still predicts (missing values), so MPS fit
    # is judged on a prediction rather than on a whole GPU
    assert est["nothing"].memory_source == "model:memory/v1" and 0.0 < est["nothing"].memory_gib < 40.0
    assert all(e.memory_gib <= 40.0 for e in est.values())
    # a known profile is its measured memory times a margin >= 1
    card = json.loads((trained / "memory/v1/card.json").read_text())
    gmem = 3000.0  # the profile the job carries
    assert est["known"].memory_gib == pytest.approx(gmem * card["profile_margin"] / 1024)
    assert card["profile_margin"] >= 1.0
    # deterministic
    assert pred.predict_jobs(state) == out


def test_pair_prediction_uses_profiles_or_falls_back(trained):
    pred = LightGBMPredictor(trained)
    state = _state()
    jobs = {j.id: j for j in state.snapshot.jobs}
    pe = pred.predict_pair(state, jobs["known"], jobs["other"])
    assert pe.source == "model:interference/v1"
    assert 0.05 <= pe.host_speed <= 1.0 and 0.05 <= pe.guest_speed <= 1.0
    pe2 = pred.predict_pair(state, jobs["known"], jobs["nothing"])
    assert pe2.source == "default" and pe2.host_speed == DEFAULT_PAIR_SPEED


def test_missing_model_directory_falls_back_cleanly(tmp_path):
    with pytest.warns(PredictionFallbackWarning, match="no trained models"):
        pred = default_predictor(tmp_path / "absent")
    assert isinstance(pred, EstimatePredictor)
    est = pred.predict_jobs(_state()).jobs
    assert est["bare"].runtime_source == "estimate" and est["bare"].runtime_s == 50.0
    assert est["nothing"].runtime_source == "default"
    assert est["nothing"].runtime_s == DEFAULT_RUNTIME_S


def test_partial_models_fall_back_per_predictor(trained, tmp_path):
    shutil.copytree(trained / "runtime", tmp_path / "runtime")
    with pytest.warns(PredictionFallbackWarning, match="memory, interference"):
        pred = default_predictor(tmp_path)
    assert isinstance(pred, LightGBMPredictor)
    state = _state()
    out = pred.predict_jobs(state)
    assert out.source == "lightgbm+fallback"
    assert out.jobs["known"].runtime_source == "model:runtime/v1"
    assert out.jobs["known"].memory_source == "default"
    assert out.jobs["bare"].memory_source == "estimate"
    jobs = state.snapshot.jobs
    assert pred.predict_pair(state, jobs[0], jobs[1]).source == "default"


def test_card_with_other_features_is_rejected(trained, tmp_path):
    shutil.copytree(trained, tmp_path / "m")
    card_p = tmp_path / "m/runtime/v1/card.json"
    card = json.loads(card_p.read_text())
    card["features"] = card["features"][:-1]
    card_p.write_text(json.dumps(card))
    with pytest.warns(PredictionFallbackWarning, match="features differ"):
        pred = default_predictor(tmp_path / "m")
    assert isinstance(pred, EstimatePredictor)


def test_corrupt_booster_falls_back(trained, tmp_path):
    shutil.copytree(trained, tmp_path / "m")
    (tmp_path / "m/memory/v1/model.txt").write_text("not a booster\n")
    with pytest.warns(PredictionFallbackWarning, match="could not load"):
        pred = default_predictor(tmp_path / "m")
    assert isinstance(pred, EstimatePredictor)


def test_latest_version_is_loaded(trained, tmp_path):
    shutil.copytree(trained, tmp_path / "m")
    shutil.copytree(tmp_path / "m/runtime/v1", tmp_path / "m/runtime/v10")
    card_p = tmp_path / "m/runtime/v10/card.json"
    card = json.loads(card_p.read_text())
    card["version"] = "v10"
    card_p.write_text(json.dumps(card))
    pred = LightGBMPredictor(tmp_path / "m")
    assert pred.predict_jobs(_state()).jobs["known"].runtime_source == "model:runtime/v10"


SHIPPED = repo_models_dir()


def test_shipped_models_load_and_predict():
    for name, feats in FEATURES.items():
        folders = sorted((SHIPPED / name).iterdir())
        assert folders, name
        for folder in folders:
            card = json.loads((folder / "card.json").read_text())
            assert card["features"] == list(feats)
            assert card["training_data"]["files"][0]["sha256"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", PredictionFallbackWarning)
        pred = default_predictor(SHIPPED)
    state = _state()
    est = pred.predict_jobs(state).jobs
    assert {e.runtime_source for e in est.values()} == {"model:runtime/v1"}
    profiles = [
        {"batchsize": 32, "amp": 0, "speed": 1.0, "gpu_util": 40.0, "gmem_util": 15.0, "gmem": 2500.0},
        {"batchsize": 64, "amp": 1, "speed": 1.0, "gpu_util": 85.0, "gmem_util": 55.0, "gmem": 8000.0},
    ]
    a, b = (state.snapshot.jobs[0].model_copy(update={"features": p}) for p in profiles)
    pe = pred.predict_pair(state, a, b)
    assert pe.source == "model:interference/v1"
    assert 0.05 <= pe.host_speed <= 1.0
    total = sum(p.stat().st_size for p in SHIPPED.rglob("*") if p.is_file())
    assert total < 5 * 2**20

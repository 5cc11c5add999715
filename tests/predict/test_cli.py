import json

import pytest
import typer
from typer.testing import CliRunner

from optsched.cli.predictors import register
from tests.predict.synth import write_traces


@pytest.fixture
def app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """optsched (test app)."""

    register(app)
    return app


def test_train_then_evaluate(app, tmp_path):
    traces = write_traces(tmp_path / "traces")
    runner = CliRunner()
    res = runner.invoke(app, ["train", "--traces", str(traces), "--out", str(tmp_path / "m")])
    assert res.exit_code == 0, res.output
    for name in ("runtime", "memory", "interference"):
        assert (tmp_path / "m" / name / "v1" / "model.txt").is_file()
        assert (tmp_path / "m" / name / "v1" / "card.json").is_file()
    out = tmp_path / "ev"
    res = runner.invoke(
        app,
        [
            "predictors",
            "evaluate",
            "--traces",
            str(traces),
            "--out",
            str(out),
            "--runtime-trace",
            "venus_surrogate",
        ],
    )
    assert res.exit_code == 0, res.output
    metrics = json.loads((out / "metrics.json").read_text())
    rt = metrics["runtime"]["venus_surrogate"]
    assert {"mae", "mae_log", "mdape_pct"} <= set(rt["model"])
    assert {"user_history_mean", "tenant_history_median", "global_median"} <= set(rt["baselines"])
    assert "estimate" in rt["baselines"] and rt["estimate_coverage"] == 1.0
    assert [f["file"] for f in rt["data"]["files"]] == [
        "venus_surrogate_SYNTHETIC/cluster_full_log_SYNTHETIC_matched_seed0.csv.gz",
        "lucid_venus/Venus_Sept_lgb.csv",
    ]
    assert 0 <= metrics["memory"]["kfold_heldout"]["model"]["under_rate"] <= 1
    assert {"mean", "lucid_rule"} <= set(metrics["interference"]["baselines"])
    assert sorted(p.name for p in out.glob("*.png")) == [
        "interference.png",
        "memory.png",
        "runtime_venus_surrogate.png",
    ]


def test_missing_traces_exit_2(app, tmp_path):
    res = CliRunner().invoke(app, ["train", "--traces", str(tmp_path / "nope")])
    assert res.exit_code == 2
    assert "does not exist" in res.output
    assert "Traceback" not in res.output


def test_unknown_runtime_trace_exit_2(app, tmp_path):
    res = CliRunner().invoke(
        app, ["predictors", "evaluate", "--out", str(tmp_path), "--runtime-trace", "x"]
    )
    assert res.exit_code == 2 and "unknown trace" in res.output

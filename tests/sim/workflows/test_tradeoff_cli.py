"""`optsched workflows tradeoff`: the GPU-seconds / makespan table from joint summaries."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from optsched.cli import main


def _summary(folder: Path, lending: dict[str, Any], joint: tuple[float, float, float]) -> Path:
    """A made-up joint summary: a fixed arm and a joint arm with (makespan, GPU-s, saved)."""
    folder.mkdir()
    mk, gpu, saved = joint
    arm = {"makespan_s": mk, "p95_latency_s": mk / 2, "gpu_s_per_session": gpu, "compute_s": gpu - 3,
           "loading_s": 2.0, "idle_s": 1.0, "pool_lent_gpu_s": 400.0, "pool_max_pool_gpus": 12.0}
    fixed = {**arm, "makespan_s": 250.0, "gpu_s_per_session": 45.0, "pool_lent_gpu_s": 0.0,
             "pool_max_pool_gpus": 8.0}
    summary = {
        "sessions_per_seed": 40,
        "joint": {"lending": lending},
        "means": {"fixed/greedy": fixed, "joint/greedy": arm},
        "targets": {
            "gpu_s_target": 41.0,
            "fixed/greedy": {"makespan_ratio": 0.8, "gpu_s_saved": 16.0},
            "joint/greedy": {"makespan_ratio": mk / 312.5, "gpu_s_saved": saved},
        },
    }
    (folder / "summary.json").write_text(json.dumps(summary))
    return folder


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def test_tradeoff_table_one_row_per_setting_fixed_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = _summary(tmp_path / "a", {}, (150.0, 57.0, 4.0))
    b = _summary(tmp_path / "b", {"session_value": 0.1}, (200.0, 50.0, 11.0))
    code, _, err = _run(["workflows", "tradeoff", str(a), str(b), "--out", str(tmp_path / "o")], capsys)
    assert code == 0, err
    rows = (tmp_path / "o" / "tradeoff.md").read_text().splitlines()
    assert rows[2:] == [
        "| fixed/greedy | fixed pool | 250.0 (0.800) | 75.0 | 45.0 (54.0+2.0+1.0) | 16.0 | 0.0 | 8.0 |",
        "| joint/greedy | defaults | 150.0 (0.480) | 75.0 | 57.0 (54.0+2.0+1.0) | 4.0 | 10.0 | 12.0 |",
        "| joint/greedy | session_value=0.1 | 200.0 (0.640) | 100.0 | 50.0 (47.0+2.0+1.0) | 11.0 | 10.0 "
        "| 12.0 |",
    ]
    assert (tmp_path / "o" / "tradeoff.png").stat().st_size > 0


def test_tradeoff_names_a_folder_without_a_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "empty").mkdir()
    args = ["workflows", "tradeoff", str(tmp_path / "empty"), "--out", str(tmp_path / "o")]
    code, _, err = _run(args, capsys)
    assert code == 2
    assert "runs" in err and "summary.json" in err
    assert not (tmp_path / "o").exists()


def test_tradeoff_labels_name_each_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _summary(tmp_path / "a", {}, (150.0, 57.0, 4.0))
    args = ["workflows", "tradeoff", str(a), "--out", str(tmp_path / "o")]
    code, _, err = _run([*args, "--labels", "x,y"], capsys)
    assert code == 2 and "--labels" in err and "2 label(s) for 1 run(s)" in err
    assert not (tmp_path / "o").exists()
    code, _, err = _run([*args, "--labels", "before"], capsys)
    assert code == 0, err
    rows = (tmp_path / "o" / "tradeoff.md").read_text().splitlines()
    assert [r.split(" | ")[:2] for r in rows[2:]] == [
        ["| fixed/greedy", "before"],
        ["| joint/greedy", "before"],
    ]

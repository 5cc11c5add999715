"""Issue 12: the replay measures the accuracy of the expected starts optsched announces."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from optsched.sim.cluster import GroundTruth, Simulator
from optsched.sim.expected import ExpectedStarts, accuracy, report_lines
from optsched.sim.metrics import summarize
from optsched.sim.policies import make_policy
from optsched.sim.runner import load_log, save_log
from optsched.sim.trace import Trace
from tests.sim.conftest import EXACT


def _replay(trace: Trace, **options: object) -> Simulator:
    # the full model at every arrival and completion (the event path announces no expected starts)
    cfg = dataclasses.replace(EXACT, events=False)
    truth = GroundTruth(trace, 0, cfg)
    pol = make_policy("optsched", truth=truth, options={"predictor": "oracle", **options})
    sim = Simulator(trace, pol, seed=0, config=cfg, truth=truth)
    sim.run()
    return sim


def test_expected_starts_by_hand(three_jobs: Trace, tmp_path: Path) -> None:
    # A (2 GPUs, 0-100) and B (2 GPUs, 10-60) run at once; C (4 GPUs) arrives at 20 and waits for
    # both. With true runtimes as predictions, the decision at 20 expects C when A ends (100);
    # the one at 60 (B ends) sees A's remaining 40 s floored to MIN_REMAINING_S = 60: 120. C
    # starts at 100.
    sim = _replay(three_jobs)
    log = sim.log
    c = log.jobs["id"].index("C")
    assert log.expected == {"t": [20.0, 60.0], "job": [c, c], "expected_s": [100.0, 120.0],
                            "actual_s": [100.0, 100.0]}
    acc = accuracy(log)
    assert acc["expected_start_samples"] == 2.0
    assert acc["expected_start_median_abs_err_s"] == 10.0
    assert acc["expected_start_median_err_s"] == -10.0
    assert acc["expected_start_within_epoch"] == 1.0
    assert summarize(log)["expected_start_p90_abs_err_s"] == pytest.approx(18.0)
    # the table survives a save and load
    assert load_log(save_log(log, tmp_path / "run")).expected == log.expected


def test_without_lookahead_nothing_is_recorded(three_jobs: Trace) -> None:
    log = _replay(three_jobs, lookahead_epochs=0).log
    assert log.expected["t"] == []
    acc = accuracy(log)
    assert acc["expected_start_samples"] == 0.0
    assert math.isnan(acc["expected_start_median_abs_err_s"])


class _D:
    def __init__(self, exp: dict[str, float]) -> None:
        self.expected_start_s = exp


def test_recorder_resolves_at_the_next_start_only() -> None:
    rec = ExpectedStarts({"x": 0, "y": 1})
    rec.record(0.0, _D({"x": 50.0, "y": 400.0}))  # type: ignore[arg-type]
    rec.record(30.0, _D({"x": 60.0}))  # type: ignore[arg-type]
    rec.started(0, 70.0)
    # x is preempted and queued again: a new expectation, resolved at its next start
    rec.record(80.0, _D({"x": 90.0}))  # type: ignore[arg-type]
    rec.started(0, 200.0)
    assert rec.cols["job"] == [0, 1, 0, 0]
    got = rec.cols["actual_s"]
    assert got[0] == 70.0 and math.isnan(got[1]) and got[2] == 70.0 and got[3] == 200.0


def test_accuracy_figures() -> None:
    log = SimpleNamespace(
        epoch_s=100.0,
        expected={"t": [0.0] * 5, "job": [0, 1, 2, 3, 4],
                  "expected_s": [100.0, 100.0, 100.0, 100.0, 100.0],
                  "actual_s": [100.0, 150.0, 300.0, 20.0, math.nan]},
        jobs={"gpus": [1, 40, 64, 2, 1], "submit_s": [0.0, 0.0, 10.0, 0.0, 0.0],
              "start_s": [100.0, 150.0, math.nan, 20.0, math.nan]},
    )

    acc = accuracy(log)  # type: ignore[arg-type]
    # errors 0, +50, +200, -80 (the fifth never started)
    assert acc["expected_start_samples"] == 4.0
    assert acc["expected_start_median_abs_err_s"] == pytest.approx(65.0)
    assert acc["expected_start_p90_abs_err_s"] == pytest.approx(164.0)  # 80 + 0.7 * (200 - 80)
    assert acc["expected_start_within_epoch"] == 0.75
    assert acc["expected_start_median_err_s"] == pytest.approx(25.0)
    # gangs of 33+ GPUs: two, one started after 150 s
    assert acc["large_gang_jobs"] == 2.0 and acc["large_gang_avg_queue_delay_s"] == 150.0


def test_report_section_only_with_samples() -> None:
    def entry(v: float) -> dict[str, object]:
        return {"mean": v, "per_seed": [v]}

    summary = {"policies": {
        "fifo": {"expected_start_samples": entry(0.0)},
        "optsched": {"expected_start_samples": entry(12.0),
                     "expected_start_median_abs_err_s": entry(30.0),
                     "expected_start_within_epoch": entry(0.5)},
    }}
    lines = report_lines(summary)
    assert lines[0] == "## Expected starts"
    rows = [x for x in lines if x.startswith("| ")][1:]
    assert rows == ["| optsched | 12 | 30 | n/a | 0.500 | n/a | n/a | n/a |"]
    assert report_lines({"policies": {"fifo": {"expected_start_samples": entry(0.0)}}}) == []

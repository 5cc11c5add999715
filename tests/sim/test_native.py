"""``--mode native``: every policy in its own setting, and DeepShare's headline numbers."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from optsched.cli import app
from optsched.sim.cluster import SimConfig
from optsched.sim.metrics import summarize
from optsched.sim.names import POLICIES
from optsched.sim.native import NATIVE_MODES, deepshare_headline, headline_lines, native_mode
from optsched.sim.report import render_report
from optsched.sim.runner import RunSpec, run_one

JOBS = 150
MEASURED = {"sim_seconds", "cpu_seconds"}


def test_every_policy_has_a_native_setting() -> None:
    assert set(NATIVE_MODES) == set(POLICIES)
    assert {p for p, m in NATIVE_MODES.items() if m == "partitioned"} == {"lucid"}
    with pytest.raises(ValueError, match="no native setting for policy 'x'"):
        native_mode("x")


def _replay(policy: str, mode: str, seed: int) -> dict[str, float]:
    spec = RunSpec(trace="mini", policy=policy, seed=seed, max_jobs=JOBS,
                   config=SimConfig(mode=mode))
    return summarize(run_one(spec))


def _same(a: dict[str, float], b: dict[str, float]) -> bool:
    return all(k in MEASURED or a[k] == b[k] or (math.isnan(a[k]) and math.isnan(b[k]))
               for k in a)


def test_native_mode_gives_each_policy_its_own_setting(tmp_path: Path) -> None:
    """Lucid-like is replayed on hard partitions, the others pooled: each policy's row is its
    replay in that mode (not in the other one), and DeepShare's numbers are its ratios."""
    out = tmp_path / "native"
    res = CliRunner().invoke(app, [
        "simulate", "--trace", "mini", "--policies", "lucid,kueue,optsched", "--seeds", "0",
        "--max-jobs", str(JOBS), "--mode", "native", "--no-plots", "--out", str(out)])
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["native_modes"] == {"lucid": "partitioned", "kueue": "pooled",
                                       "optsched": "pooled"}
    assert summary["config"]["mode"] == summary["command"]["mode"] == "native"
    for pol, mode in summary["native_modes"].items():
        got = {k: (math.nan if v["per_seed"][0] is None else v["per_seed"][0])
               for k, v in summary["policies"][pol].items()}
        other = "pooled" if mode == "partitioned" else "partitioned"
        assert _same(got, _replay(pol, mode, 0)), pol
        assert not _same(got, _replay(pol, other, 0)), pol
    assert summary["policies"]["lucid"]["loans_made"]["mean"] == 0
    assert summary["policies"]["kueue"]["loans_made"]["mean"] > 0
    head = summary["deepshare"]
    opt, luc = summary["policies"]["optsched"], summary["policies"]["lucid"]
    assert head["utilization_ratio"]["value"] == pytest.approx(
        opt["utilization"]["mean"] / luc["utilization"]["mean"])
    assert head["queue_delay_ratio"]["value"] == pytest.approx(
        opt["avg_queue_delay_s"]["mean"] / luc["avg_queue_delay_s"]["mean"])
    assert head["jct_ratio"]["value"] == pytest.approx(opt["avg_jct_s"]["mean"] / luc["avg_jct_s"]["mean"])
    assert head["qos_compliance"]["value"] == opt["qos_compliance"]["mean"]
    text = (out / "summary.md").read_text()
    assert "## Native settings" in text and "| lucid | partitioned |" in text
    assert "DeepShare's headline numbers: optsched against lucid-like" in text
    assert "each policy in its own setting: lucid partitioned, kueue pooled" in text


def _summary(values: dict[str, dict[str, list[float]]]) -> dict[str, Any]:
    return {"policies": {p: {k: {"mean": sum(v) / len(v), "per_seed": v} for k, v in m.items()}
                         for p, m in values.items()}}


def test_deepshare_headline_ratios_and_goals() -> None:
    s = _summary({
        "optsched": {"utilization": [0.70, 0.66], "useful_utilization": [0.7, 0.7],
                     "avg_queue_delay_s": [20.0, 40.0], "avg_jct_s": [600.0, 600.0],
                     "p95_jct_s": [900.0, 900.0], "qos_compliance": [0.99, 0.95]},
        "lucid": {"utilization": [0.5, 0.5], "useful_utilization": [0.7, 0.7],
                  "avg_queue_delay_s": [100.0, 100.0], "avg_jct_s": [1000.0, 1000.0],
                  "p95_jct_s": [900.0, 900.0], "qos_compliance": [0.9, 0.9]},
    })
    h = deepshare_headline(s)
    assert h is not None
    assert h["utilization_ratio"]["value"] == pytest.approx(1.36)
    assert h["utilization_ratio"]["per_seed"] == pytest.approx([1.4, 1.32])
    assert h["queue_delay_ratio"]["value"] == pytest.approx(0.3)
    assert h["jct_ratio"]["value"] == pytest.approx(0.6)
    assert h["qos_compliance"]["value"] == pytest.approx(0.97)
    assert h["goals"] == {"utilization_ratio": True, "queue_delay_ratio": True,
                          "jct_ratio": True, "qos_compliance": True}
    s["policies"]["optsched"]["avg_jct_s"]["mean"] = 700.0
    s["policies"]["optsched"]["qos_compliance"]["mean"] = 0.969
    h = deepshare_headline(s)
    assert h is not None
    assert h["goals"]["jct_ratio"] is False and h["goals"]["qos_compliance"] is False
    del s["policies"]["lucid"]
    assert deepshare_headline(s) is None


def test_stored_native_summary_renders_again() -> None:
    """A ``summary.json`` holds NaN as null: the section renders it as n/a."""
    s = _summary({"optsched": {"utilization": [0.7], "avg_queue_delay_s": [0.0],
                               "avg_jct_s": [10.0], "qos_compliance": [1.0]},
                  "lucid": {"utilization": [0.5], "avg_queue_delay_s": [0.0],
                            "avg_jct_s": [20.0], "qos_compliance": [1.0]}})
    head = deepshare_headline(s)
    assert head is not None and math.isnan(head["queue_delay_ratio"]["value"])
    stored = json.loads(json.dumps(head).replace("NaN", "null"))
    s.update(native_modes={"optsched": "pooled", "lucid": "partitioned"}, deepshare=stored)
    lines = headline_lines(s)
    row = next(x for x in lines if x.startswith("| avg queueing delay"))
    assert "| n/a | n/a |" in row and "**no**" in row
    assert "## Native settings" in render_report(s)


def test_bad_mode_names_native() -> None:
    res = CliRunner().invoke(app, ["simulate", "--trace", "mini", "--mode", "x", "--out", "o"])
    assert res.exit_code == 2
    assert "--mode" in res.output and "pooled, partitioned, both or native" in res.output

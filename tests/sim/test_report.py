"""``summary.md``, the report of ``optsched simulate``, and the per-tenant metrics behind it."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from optsched.cli import app
from optsched.sim.cluster import Simulator
from optsched.sim.metrics import per_tenant, summarize
from optsched.sim.policies import make_policy
from optsched.sim.report import compare, render_report, trace_name
from optsched.sim.trace import TenantSpec, Trace, TraceJob
from tests.sim.conftest import EXACT, make_trace

SECTIONS = ("## Headline", "## Totals", "## Per tenant", "## Settings", "## Columns")

# the headline's metrics, named as the report names them, with the better direction: written
# out here, independently of optsched.sim.report
LOWER, HIGHER = min, max
HEADLINE_METRICS = {
    "avg queueing delay": ("avg_queue_delay_s", LOWER),
    "p95 queueing delay": ("p95_queue_delay_s", LOWER),
    "avg JCT": ("avg_jct_s", LOWER),
    "p95 JCT": ("p95_jct_s", LOWER),
    "QoS compliance": ("qos_compliance", HIGHER),
    "useful utilisation": ("useful_utilization", HIGHER),
    "allocated utilisation": ("utilization", HIGHER),
    "preemptions": ("preemptions", LOWER),
    "lost GPU-hours": ("lost_gpu_hours", LOWER),
    "wall time per replay": ("sim_seconds", LOWER),
}

# per-tenant figures that must add up to the policy's total
SUMMED = ("jobs", "guaranteed_jobs", "gpu_hours", "gpu_hours_held", "preemptions",
          "lost_gpu_hours", "loans_reclaimed", "unfinished")


# ------------------------------------------------------------------ per-tenant metrics by hand
def test_per_tenant_on_the_three_job_trace(three_jobs: Trace) -> None:
    # FIFO on one 4-GPU node: A (2 GPUs, 0 -> 100), B (2 GPUs, 10 -> 60), C (4 GPUs, 100 -> 130)
    log = Simulator(three_jobs, make_policy("fifo"), config=EXACT).run()
    t = per_tenant(log)
    assert set(t) == {"t1"}
    row = t["t1"]
    assert row["jobs"] == 3 and row["guaranteed_jobs"] == 3 and row["unfinished"] == 0
    assert row["avg_queue_delay_s"] == pytest.approx(80 / 3)  # delays 0, 0, 80
    assert row["p95_queue_delay_s"] == pytest.approx(72.0)
    assert row["avg_jct_s"] == pytest.approx(260 / 3)  # 100, 50, 110
    assert row["p95_jct_s"] == pytest.approx(109.0)
    assert row["qos_compliance"] == pytest.approx(2 / 3)  # C waited 80 s > 60 s
    # asked = held = 2 x 100 + 2 x 50 + 4 x 30 GPU-s (no jitter, no sharing)
    assert row["gpu_hours"] == pytest.approx(420 / 3600)
    assert row["gpu_hours_held"] == pytest.approx(420 / 3600)
    assert row["preemptions"] == 0 and row["lost_gpu_hours"] == 0
    m = summarize(log)
    assert m["gpu_hours"] == pytest.approx(420 / 3600)
    assert m["gpu_hours_held"] == pytest.approx(420 / 3600)
    assert m["guaranteed_jobs"] == 3 and m["gpus"] == 4 and m["window_s"] == 20.0
    assert m["offered_load"] == pytest.approx(420 / (4 * 20))


def test_per_tenant_preemptions_belong_to_the_preempted_jobs_tenant() -> None:
    # the reclaim case of test_simulator: b borrows a's GPU, a1 arrives at 50 and reclaims it;
    # b2 loses 20 s (checkpoint at 30) and restarts at 60 with 75 s of work: ends at 135
    cfg = dataclasses.replace(EXACT, checkpoint_s=30.0, restart_overhead_s=5.0)
    jobs = [TraceJob("b1", "b", 1, 0.0, 100.0), TraceJob("b2", "b", 1, 0.0, 100.0),
            TraceJob("a1", "a", 1, 50.0, 10.0)]
    tr = make_trace(jobs, [TenantSpec("a", {"V100": 1}), TenantSpec("b", {"V100": 1})], gpus=2)
    log = Simulator(tr, make_policy("kueue"), config=cfg).run()
    t = per_tenant(log)
    assert t["b"]["preemptions"] == 1 and t["b"]["loans_reclaimed"] == 1
    assert t["b"]["lost_gpu_hours"] == pytest.approx(20 / 3600)
    assert t["b"]["gpu_hours_held"] == pytest.approx((100 + 50 + 75) / 3600)
    assert t["b"]["avg_jct_s"] == pytest.approx((100 + 135) / 2)
    assert t["a"]["preemptions"] == 0 and t["a"]["lost_gpu_hours"] == 0
    assert t["a"]["gpu_hours_held"] == pytest.approx(10 / 3600)
    m = summarize(log)
    for key in SUMMED:
        assert sum(r[key] for r in t.values()) == pytest.approx(m[key]), key


# ------------------------------------------------------------------ the report of a real run


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str, Path]:
    """A slice of the mini trace under three policies (one preempts, one reclaims: in node shape
    Kueue-like first reclaims after job 300)."""
    out = tmp_path_factory.mktemp("report") / "cmp"
    res = CliRunner().invoke(app, [
        "simulate", "--trace", "mini", "--policies", "tiresias,kueue,optsched",
        "--seeds", "0,1", "--max-jobs", "500", "--time-limit-s", "0.3", "--out", str(out),
        "--no-plots", "--workers", "1",
    ])
    assert res.exit_code == 0, res.output
    return json.loads((out / "summary.json").read_text()), (out / "summary.md").read_text(), out


def _section(md: str, title: str) -> str:
    start = md.index(f"## {title}\n")
    nxt = md.find("\n## ", start + 1)
    return md[start: nxt if nxt >= 0 else len(md)]


def _mean(summary: dict[str, Any], pol: str, key: str) -> float:
    v = summary["policies"][pol][key]["mean"]
    return math.nan if v is None else float(v)


def test_report_has_every_section_in_order(run: tuple[dict[str, Any], str, Path]) -> None:
    _, md, out = run
    pos = [md.index(s + "\n") for s in SECTIONS]
    assert pos == sorted(pos)
    assert str(out) not in md and str(Path.home()) not in md  # no machine paths


def test_headline_names_the_true_winner_of_every_metric(
        run: tuple[dict[str, Any], str, Path]) -> None:
    summary, md, _ = run
    head = _section(md, "Headline")
    assert "optsched ÷ best baseline" in head  # the ratio's direction is explained
    pols = list(summary["policies"])
    found = {}
    for line in head.splitlines():
        m = re.match(r"- \*\*(.+?)\*\* \((lower|higher) is better\): winner \*\*(.+?)\*\*", line)
        if m:
            found[m.group(1)] = (m.group(2), set(m.group(3).split(", ")), line)
    assert set(found) == set(HEADLINE_METRICS)
    for name, (key, best_of) in HEADLINE_METRICS.items():
        direction, named, line = found[name]
        assert direction == ("lower" if best_of is LOWER else "higher"), name
        vals = {p: _mean(summary, p, key) for p in pols}
        best = best_of(vals.values())
        truth = {p for p, v in vals.items() if math.isclose(v, best, rel_tol=1e-9, abs_tol=1e-12)}
        assert named == truth, (name, vals)
        # optsched against the best of the others, with the verdict on the right side
        base = {p: v for p, v in vals.items() if p != "optsched"}
        bbest = best_of(base.values())
        bnames = [p for p, v in base.items() if math.isclose(v, bbest, rel_tol=1e-9,
                                                              abs_tol=1e-12)]
        assert f"best baseline {', '.join(bnames)} " in line, line
        ref = vals["optsched"]
        worse = (ref > bbest) if best_of is LOWER else (ref < bbest)
        rel = abs(ref - bbest) / abs(bbest) if bbest else math.inf
        if math.isclose(ref, bbest, rel_tol=1e-9, abs_tol=1e-12):
            assert "**tie**" in line, line
        elif rel < 0.005:
            assert f"slightly {'worse' if worse else 'better'}" in line, line
        else:
            assert f"**{'worse' if worse else 'better'}**" in line, line


def test_every_column_of_every_table_is_defined(run: tuple[dict[str, Any], str, Path]) -> None:
    summary, md, _ = run
    lines = md.splitlines()
    headers: set[str] = set()
    tables = 0
    for a, b in itertools.pairwise(lines):
        if a.startswith("| ") and b.startswith("|---"):
            tables += 1
            headers.update(c.strip() for c in a.strip().strip("|").split("|"))
    # totals + one per-tenant table per policy + the expected starts optsched announces (only
    # when some announced start was followed by the job's start)
    samples = summary["policies"]["optsched"]["expected_start_samples"]["mean"]
    assert ("## Expected starts\n" in md) == (samples > 0)
    assert tables == 1 + (samples > 0) + len(summary["policies"])
    defined = set(re.findall(r"^- \*\*(.+?)\*\*: \S", _section(md, "Columns"), re.M))
    assert headers <= defined, headers - defined
    cols = _section(md, "Columns")
    # why useful utilisation can exceed utilisation
    assert "count their progress twice" in cols and "counts once" in cols


def test_settings_are_the_ones_the_run_used(run: tuple[dict[str, Any], str, Path]) -> None:
    summary, md, _ = run
    s = _section(md, "Settings")
    opts = summary["policy_options"]["optsched"]
    assert opts["backend"] == "auto" and opts["time_limit_s"] == 0.3
    assert "backend `auto` (the engine's default" in s
    assert "time limit 0.3 s per decision" in s
    assert f"predictor `{opts['predictor']}`" in s
    cfg = summary["config"]
    assert cfg["events"] and cfg["mode"] == "pooled" and cfg["load_scale"] == 1.0
    assert f"epoch {cfg['epoch_s']:g} s" in s and "mode `events`" in s
    assert "**mode**: `pooled`" in s and "time-compressed by 1 " in s
    assert "**seeds**: 0, 1" in s and "`mini`" in s and "first 500 jobs" in s
    assert f"offered load {_mean(summary, 'kueue', 'offered_load'):.3f}" in s


def test_per_tenant_rows_add_up_to_the_totals(run: tuple[dict[str, Any], str, Path]) -> None:
    summary, md, _ = run
    assert sum(_mean(summary, p, "preemptions") for p in summary["policies"]) > 0
    assert _mean(summary, "kueue", "loans_reclaimed") > 0
    for pol, tenants in summary["per_tenant"].items():
        assert len(tenants) > 1
        for key in SUMMED:
            total = sum(float(t[key]["mean"]) for t in tenants.values())
            assert total == pytest.approx(_mean(summary, pol, key), rel=1e-9, abs=1e-9), \
                (pol, key)
    tenant_section = _section(md, "Per tenant")
    for pol in summary["policies"]:
        assert f"### {pol}\n" in tenant_section
    assert tenant_section.count("| **all** |") == len(summary["policies"])


# ------------------------------------------------------------------ pieces
def test_ratio_direction_and_ties() -> None:
    assert compare(280.0, 211.0, lower_is_better=True) == ("1.33×", "worse")
    assert compare(0.9, 1.0, lower_is_better=False) == ("0.900×", "worse")
    assert compare(1.2, 1.0, lower_is_better=False) == ("1.20×", "better")
    assert compare(1.05, 1.0, lower_is_better=False) == ("1.050×", "better")
    assert compare(100.0, 100.2, lower_is_better=True)[1] == "tie within 0.5% (slightly better)"
    assert compare(3.0, 0.0, lower_is_better=True) == ("undefined (the baseline is 0)", "worse")
    assert compare(0.0, 0.0, lower_is_better=True)[1] == "tie"


def test_trace_name_drops_machine_prefixes() -> None:
    assert trace_name("mini") == "mini"
    assert trace_name("/data/x/traces/venus/log.csv.gz") == "venus/log.csv.gz"


def test_report_without_optsched_names_winner_and_runner_up(
        run: tuple[dict[str, Any], str, Path]) -> None:
    summary, _, _ = run
    sub = dict(summary)
    sub["policies"] = {p: v for p, v in summary["policies"].items() if p != "optsched"}
    md = render_report(sub)
    head = _section(md, "Headline")
    assert "best baseline" not in head and "Runner-up" in head
    assert "**optsched**" not in md

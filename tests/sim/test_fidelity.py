"""Per-VC fidelity helpers (optsched.sim.fidelity) on small data made here; no Lucid code."""

from __future__ import annotations

import csv
import gzip
import math
from dataclasses import replace
from pathlib import Path

import pytest

from optsched.sim.cluster import SimConfig
from optsched.sim.fidelity import (
    JobRecord,
    VcMetrics,
    clock_offset,
    compare,
    cut_venus_log,
    markdown_table,
    read_lucid_logs,
    records_from_log,
    rel_diff,
    same_starts,
    split_by_vc,
    vc_metrics,
)
from optsched.sim.runner import RunSpec, run_one
from optsched.sim.trace import load_trace

HEAD = ["job_id", "user", "vc", "jobname", "gpu_num", "cpu_num", "node_num", "state",
        "submit_time", "duration", "dataset", "model", "batchsize", "amp", "speed", "gpu_util",
        "gmem_util", "gmem"]


def _row(jid: int, vc: str, gpus: int, submit: str, dur: int) -> list[str]:
    return [str(jid), "u1", vc, f"job{jid}", str(gpus), "4", "1", "COMPLETED", submit, str(dur),
            "CIFAR-10", "ResNet18", "32", "1", "1649.038", "40.667", "20.333", "2330.0"]


def _write_log(path: Path, rows: list[list[str]], gz: bool = False) -> None:
    text = ",".join(HEAD) + "\n" + "".join(",".join(r) + "\n" for r in rows)
    if gz:
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)


def test_cut_keeps_anchor_and_first_jobs_by_submission(tmp_path: Path) -> None:
    src = tmp_path / "log.csv.gz"
    _write_log(src, [
        _row(1, "vcA", 1, "2020-04-01 00:00:00", 10),          # anchor, months before
        _row(12, "vcA", 2, "2020-09-01 00:00:30", 100),
        _row(11, "vcB", 1, "2020-09-01 00:00:10", 50),
        _row(13, "vcA", 8, "2020-09-01 00:01:00", 70),
    ], gz=True)
    dst = tmp_path / "cut.csv"
    assert cut_venus_log(src, dst, 2) == 2
    with open(dst) as fh:
        ids = [r["job_id"] for r in csv.DictReader(fh)]
    assert ids == ["1", "12", "11"]          # file order; job 13 (the latest) cut
    assert cut_venus_log(src, dst, None) == 3
    with pytest.raises(ValueError, match="n_jobs"):
        cut_venus_log(src, dst, 0)


def test_cut_names_a_missing_column(tmp_path: Path) -> None:
    src = tmp_path / "bad.csv"
    src.write_text("job_id,vc,gpu_num,submit_time\n1,vcA,1,2020-09-01 00:00:00\n")
    with pytest.raises(ValueError, match="'duration'"):
        cut_venus_log(src, tmp_path / "o.csv", 1)


def test_vc_metrics_queue_and_utilisation_over_the_arrival_window() -> None:
    recs = [
        JobRecord("a", "vcA", 8, 0.0, 0.0, 50.0),
        JobRecord("b", "vcA", 4, 100.0, 150.0, 400.0),   # runs past the window's end (100)
        JobRecord("c", "vcB", 2, 20.0, math.nan, math.nan),   # never started
    ]
    m = vc_metrics(recs, {"vcA": 16, "vcB": 8})
    assert m["vcA"] == VcMetrics(jobs=2, started=2, avg_queue_s=25.0,
                                 utilisation=8 * 50 / (16 * 100))
    assert m["vcB"].jobs == 1 and m["vcB"].started == 0
    assert math.isnan(m["vcB"].avg_queue_s) and m["vcB"].utilisation == 0.0
    w = vc_metrics(recs, {"vcA": 16}, window=(0.0, 200.0))["vcA"]
    assert w.utilisation == (8 * 50 + 4 * 50) / (16 * 200)


def test_rel_diff_edges() -> None:
    assert rel_diff(110.0, 100.0) == pytest.approx(0.1)
    assert rel_diff(0.0, 0.0) == 0.0
    assert math.isnan(rel_diff(5.0, 0.0))
    assert math.isnan(rel_diff(math.nan, 1.0))


def test_compare_judges_queue_only_where_a_vc_queues() -> None:
    theirs = {"vcA": VcMetrics(10, 10, 1000.0, 0.50), "vcB": VcMetrics(5, 5, 0.0, 0.20),
              "vcC": VcMetrics(3, 3, 100.0, 0.40)}
    ours = {"vcA": VcMetrics(10, 10, 1090.0, 0.52), "vcB": VcMetrics(5, 5, 0.5, 0.21),
            "vcC": VcMetrics(3, 3, 150.0, 0.40)}
    rows = {r["vc"]: r for r in compare(ours, theirs)}
    assert rows["vcA"]["ok"] and rows["vcA"]["queues"]
    assert rows["vcB"]["ok"] and not rows["vcB"]["queues"]   # below 1 s on both sides
    assert not rows["vcC"]["ok"] and rows["vcC"]["queue_rel_diff"] == pytest.approx(0.5)
    md = markdown_table(list(rows.values()), "t")
    assert "| vcC | 3 | 100 | 150 | +50.0% | 0.400 | 0.400 | +0.0% | **no** |" in md
    assert "yes (no queue)" in md
    with pytest.raises(ValueError, match="inputs differ"):
        compare({"vcA": VcMetrics(9, 9, 1.0, 0.1)}, {"vcA": VcMetrics(10, 10, 1.0, 0.1)})
    with pytest.raises(KeyError, match="vcA"):
        compare({}, {"vcA": VcMetrics(10, 10, 1.0, 0.1)})


def test_read_lucid_logs_maps_never_started_to_nan(tmp_path: Path) -> None:
    d = tmp_path / "vcA"
    d.mkdir()
    big = 9223372036854775807
    (d / "fifo_consolidate_vcA_log.csv").write_text(
        "job_id,vc,gpu_num,submit_time,start_time,end_time,queue\n"
        f"7,vcA,2,13219200,13219260.0,13219300.0,60\n8,vcA,1,13219210,{big},{big},0\n")
    recs = read_lucid_logs(tmp_path, ["vcA"], "fifo")
    assert recs[0] == JobRecord("7", "vcA", 2, 13219200.0, 13219260.0, 13219300.0)
    assert recs[1].id == "8" and math.isnan(recs[1].start) and math.isnan(recs[1].end)
    with pytest.raises(FileNotFoundError, match="vcB"):
        read_lucid_logs(tmp_path, ["vcB"], "fifo")


def test_clock_offset_and_same_starts() -> None:
    ours = [JobRecord("1", "v", 1, 0.0, 5.0, 9.0), JobRecord("2", "v", 1, 3.0, 9.0, 12.0),
            JobRecord("3", "v", 1, 4.0, math.nan, math.nan)]
    theirs = [JobRecord("1", "v", 1, 100.0, 105.0, 109.0),
              JobRecord("2", "v", 1, 103.0, 112.0, 115.0),
              JobRecord("3", "v", 1, 104.0, math.nan, math.nan)]
    assert clock_offset(ours, theirs) == 100.0
    assert same_starts(ours, theirs, 100.0) == (2, 3)   # job 2 starts 3 s later in theirs
    with pytest.raises(ValueError, match="more than a shift"):
        clock_offset(ours, [JobRecord("1", "v", 1, 100.0, 0, 0),
                            JobRecord("2", "v", 1, 50.0, 0, 0)])


def _two_vc_trace(tmp_path: Path) -> Path:
    # vcA (1 node) gets an 8-GPU job that holds its node for 1000 s, then a 4-GPU job that
    # must wait; vcB (1 node) gets a 1-GPU job right after. Lucid queues per VC, so vcB's job
    # starts at once whatever vcA does.
    d = tmp_path / "tr"
    d.mkdir()
    _write_log(d / "cluster_full_log.csv", [
        _row(1, "vcA", 1, "2020-04-01 00:00:00", 10),
        _row(21, "vcA", 8, "2020-09-01 00:00:00", 1000),
        _row(22, "vcA", 4, "2020-09-01 00:00:10", 100),
        _row(23, "vcB", 1, "2020-09-01 00:00:20", 100),
    ])
    (d / "vc_config.csv").write_text(",num\nvcA,1\nvcB,1\n")
    return d


def test_split_by_vc_gives_each_vc_its_own_nodes_and_queue(tmp_path: Path) -> None:
    d = _two_vc_trace(tmp_path)
    tr = load_trace(d / "cluster_full_log.csv", vc_config=d / "vc_config.csv")
    parts = split_by_vc(tr)
    assert sorted(parts) == ["vcA", "vcB"]
    assert [j.id for j in parts["vcA"].jobs] == ["21", "22"]
    assert parts["vcB"].total_gpus == 8 and [t.id for t in parts["vcB"].tenants] == ["vcB"]
    spec = RunSpec(trace=str(d / "cluster_full_log.csv"), policy="fifo", seed=0,
                   config=SimConfig(mode="partitioned", runtime_jitter=0.0))
    recs = {r.id: r for p in parts.values() for r in records_from_log(run_one(spec, trace=p))}
    assert recs["21"].start == recs["21"].submit
    assert recs["22"].start == recs["21"].end          # waits for vcA's only node
    assert recs["23"].start == recs["23"].submit       # vcB does not wait behind vcA


def test_split_by_vc_refuses_quota_of_part_nodes(tmp_path: Path) -> None:
    d = _two_vc_trace(tmp_path)
    tr = load_trace(d / "cluster_full_log.csv", vc_config=d / "vc_config.csv")
    bad = replace(tr, tenants=tuple(replace(t, quota={k: 4 for k in t.quota})
                                    for t in tr.tenants))
    with pytest.raises(ValueError, match="not whole nodes"):
        split_by_vc(bad)

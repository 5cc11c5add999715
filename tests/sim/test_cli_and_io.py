"""The ``simulate`` command, event-log storage and the trace readers (on tiny files)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from optsched.cli import app
from optsched.sim.metrics import SUMMARY_KEYS, summarize
from optsched.sim.runner import RunSpec, load_log, run_one, save_log
from optsched.sim.trace import GuaranteeRule, read_openb, read_venus


def test_simulate_command_writes_summary_table_and_plots(tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    res = CliRunner().invoke(app, [
        "simulate", "--trace", "mini", "--policies", "fifo,kueue,lucid", "--seeds", "0,1",
        "--out", str(out), "--max-jobs", "120", "--workers", "1",
    ])
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["policies"]) == {"fifo", "kueue", "lucid"}
    for pol in summary["policies"].values():
        for key in SUMMARY_KEYS:
            assert len(pol[key]["per_seed"]) == 2
            assert "mean" in pol[key]
    assert summary["seeds"] == [0, 1]
    assert "| kueue |" in (out / "summary.md").read_text()
    for png in ("utilization.png", "cdf_queue_delay_jct.png", "assurance.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
    assert (out / "runs" / "lucid" / "seed1" / "jobs.csv.gz").exists()


def test_simulate_rejects_unknown_policy(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["simulate", "--trace", "mini", "--policies", "nope",
                                      "--out", str(tmp_path)])
    assert res.exit_code != 0
    assert "unknown policy" in res.output


def test_event_log_round_trip_gives_same_metrics(tmp_path: Path) -> None:
    log = run_one(RunSpec(trace="mini", policy="gandiva", seed=0, max_jobs=100))
    back = load_log(save_log(log, tmp_path / "run"))
    assert summarize(back) == pytest.approx(summarize(log), nan_ok=True)
    assert back.jobs["id"] == log.jobs["id"]


VENUS_HEADER = ("job_id,user,vc,jobname,gpu_num,cpu_num,node_num,state,submit_time,duration,"
                "dataset,model,batchsize,amp,speed,gpu_util,gmem_util,gmem")
VENUS = VENUS_HEADER + """
1,u1,vcA,j,1,4,1,COMPLETED,2020-04-01 00:00:00,10,CIFAR-10,ResNet18,32,1,1,40,20,2330.0
7,u1,vcA,j,2,8,1,COMPLETED,2020-09-01 00:00:13,877,CIFAR-10,ResNet18,32,1,1,40,20,2330.0
8,u2,vcB,k,16,64,2,COMPLETED,2020-09-01 00:01:00,50,SQuAD,BERT,32,0,1,99,60,20162.0
9,u3,vcZ,k,1,4,1,COMPLETED,2020-09-01 00:02:00,50,SQuAD,BERT,32,0,1,99,60,20162.0
"""


def test_venus_reader_drops_anchor_and_reads_quotas_and_estimates(tmp_path: Path) -> None:
    log = tmp_path / "log.csv.gz"
    log.write_bytes(gzip.compress(VENUS.encode()))
    (tmp_path / "vc_config.csv").write_text(",num\nvcA,1\nvcB,2\n")
    (tmp_path / "est.csv").write_text("job_id,priority\n7,500\n8,-3\n")
    tr = read_venus(log, vc_config=tmp_path / "vc_config.csv", estimates=tmp_path / "est.csv",
                    guarantee=GuaranteeRule())
    assert [j.id for j in tr.jobs] == ["7", "8"]  # anchor dropped, unknown VC skipped
    assert tr.jobs[0].submit_s == 13.0 and tr.t0_weekday == 1  # 2020-09-01 is a Tuesday
    assert tr.total_gpus == 24 and {t.id: t.quota["V100"] for t in tr.tenants} == {
        "vcA": 8, "vcB": 16}
    assert tr.jobs[0].estimate_s == 500.0 and tr.jobs[1].estimate_s == 1000.0
    assert tr.jobs[1].memory_gib == pytest.approx(20162 / 1024, abs=1e-3)
    assert tr.jobs[1].profile == ("BERT", "SQuAD", 32, 0)
    assert [j.qos for j in tr.jobs] == ["guaranteed", "guaranteed"]
    assert any("anchor" in n for n in tr.notes) and any("absent" in n for n in tr.notes)


OPENB_HEADER = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
                "creation_time,deletion_time,scheduled_time")
OPENB_PODS = OPENB_HEADER + """
p0,12000,16384,1,1000,,LS,Running,0,1000,0
p1,6000,12288,1,460,,BE,Running,10,500,10
p2,6000,12288,0,0,,LS,Running,20,500,20
p3,6000,12288,2,1000,V100M32,Burstable,Running,30,330,30
"""
OPENB_NODES = """sn,cpu_milli,memory_mib,gpu,model
n1,96000,786432,2,V100M32
n2,96000,786432,4,T4
"""


def test_openb_reader_maps_fractional_gpus_and_qos(tmp_path: Path) -> None:
    (tmp_path / "openb_pod_list_x.csv").write_text(OPENB_PODS)
    (tmp_path / "nodes.csv").write_text(OPENB_NODES)
    tr = read_openb(tmp_path / "openb_pod_list_x.csv", tmp_path / "nodes.csv")
    by = {j.id: j for j in tr.jobs}
    assert set(by) == {"p0", "p1", "p3"}  # CPU-only pod skipped
    assert by["p1"].gpus == 1 and by["p1"].qos == "best_effort"
    assert by["p1"].memory_gib == pytest.approx(0.46 * 16.0)  # smallest GPU (T4) x 460/1000
    assert by["p3"].gpu_types == ("V100M32",) and by["p3"].duration_s == 300.0
    assert tr.capacity() == {"T4": 4, "V100M32": 2}
    for t in ("T4", "V100M32"):
        assert sum(ten.quota[t] for ten in tr.tenants) == tr.capacity()[t]


def test_run_many_hands_optsched_to_the_workers_first_and_lists_the_runs_as_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With worker processes the longest replay, optsched's, starts first (given last, it ran
    alone at the end); the summary still lists the runs in the order given."""
    from optsched import parallel
    from optsched.sim.runner import run_many

    real = parallel.run
    handed: list[int] = []

    def spy(tasks: list[tuple[int, object, tuple[object, ...]]], **kwargs: object) -> object:
        items = list(tasks)
        handed.extend(k for k, _, _ in items)
        return real(items, **{**kwargs, "mode": "serial"})

    monkeypatch.setattr(parallel, "run", spy)
    specs = [RunSpec(trace="mini", policy=p, seed=0, max_jobs=40) for p in ("fifo", "optsched", "sjf")]
    assert list(run_many(specs, workers=2)["policies"]) == ["fifo", "optsched", "sjf"]
    assert handed == [1, 0, 2]
    handed.clear()
    assert list(run_many(specs, workers=1)["policies"]) == ["fifo", "optsched", "sjf"]
    assert handed == [0, 1, 2]  # one process: as given

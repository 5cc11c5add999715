"""``optsched slurm demo``: its metrics on hand-made completion records, and the ``slurm-site``
mode's Slurm configuration (backfill, per-tenant partitions with priority tiers, partition-
priority preemption that requeues) accepted and acting on a real dev cluster (skipped, naming
them, only when Slurm's binaries are absent)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from optsched.hosts import demo
from optsched.hosts.demo import DemoJob, DemoSpec, largest_in_quota, metrics
from optsched.hosts.slurmcli import JobCompRecord, SlurmClient, read_jobcomp
from tests.hosts.conftest import SCRIPT, SlurmCluster, start_dev_cluster, stop_dev_cluster


def _rec(job_id: int, name: str, state: str, submit: float, start: float, end: float) -> JobCompRecord:
    return JobCompRecord(job_id=job_id, name=name, state=state, partition="p", account="a", nodes=("n1",),
                         submit_time=submit, start_time=start, end_time=end)


def test_largest_job_within_quota_per_tenant() -> None:
    # prod: 8 A100 + 4 V100, research 4 + 4, batch 4 + 4, dev 0 + 4 (the demo's adapter config)
    assert largest_in_quota() == {"prod": 8, "research": 4, "batch": 4, "dev": 4}


def test_gang_quotas_give_each_guaranteed_tenant_one_whole_type(tmp_path: Path) -> None:
    from optsched.hosts.config import load_config

    (tmp_path / "a.toml").write_text(demo.adapter_config(2.0, "gangs"))
    cfg = load_config(tmp_path / "a.toml")
    assert [(t.id, t.quota, t.default_qos) for t in cfg.tenants] == [
        ("prod", {"a100": 16}, "guaranteed"), ("research", {"v100": 16}, "guaranteed"),
        ("batch", {}, None), ("dev", {}, None)]
    assert cfg.epoch_s == 2.0
    assert largest_in_quota("gangs") == {"prod": 16, "research": 16, "batch": 0, "dev": 0}
    with pytest.raises(ValueError, match="quotas: unknown 'all'"):
        demo.adapter_config(2.0, "all")


def test_adapter_config_sets_reserve_min_gpus_only_when_asked(tmp_path: Path) -> None:
    from optsched.hosts.config import load_config

    (tmp_path / "a.toml").write_text(demo.adapter_config(2.0))
    (tmp_path / "b.toml").write_text(demo.adapter_config(2.0, "default", 8))
    a, b = load_config(tmp_path / "a.toml"), load_config(tmp_path / "b.toml")
    assert (a.reserve_min_gpus, b.reserve_min_gpus) == (None, 8)
    assert [t.quota for t in a.tenants] == [t.quota for t in b.tenants]


def test_metrics_on_time_share_overall_and_within_quota() -> None:
    stream = [
        DemoJob("p1", "prod", 8, 5, 0.0),  # within prod's quota, on time (10 s <= 20 s)
        DemoJob("p2", "prod", 16, 5, 0.0, nodes=2),  # beyond quota, late (40 s)
        DemoJob("r1", "research", 4, 5, 0.0),  # within, late (31 s > 30 s)
        DemoJob("r2", "research", 8, 5, 0.0),  # beyond, on time, preempted once
        DemoJob("b1", "batch", 1, 5, 0.0, shards=2),
    ]
    recs = [
        _rec(1, "p1", "COMPLETED", 100, 110, 115),
        _rec(2, "p2", "COMPLETED", 100, 140, 145),
        _rec(3, "r1", "COMPLETED", 100, 131, 136),
        _rec(4, "r2", "PREEMPTED", 100, 101, 103),
        _rec(4, "r2", "COMPLETED", 100, 120, 125),
        _rec(5, "b1", "COMPLETED", 100, 100, 105),
        _rec(6, "not-in-stream", "COMPLETED", 0, 0, 1000),
    ]
    m = metrics(recs, stream)
    prod, research, batch = m["tenants"]["prod"], m["tenants"]["research"], m["tenants"]["batch"]
    assert (prod["jobs"], prod["qos_compliance"], prod["jobs_in_quota"], prod["qos_compliance_in_quota"]) == (
        2, 0.5, 1, 1.0)
    assert (research["jobs"], research["qos_compliance"], research["jobs_in_quota"],
            research["qos_compliance_in_quota"]) == (2, 0.5, 1, 0.0)
    assert research["avg_queue_s"] == (31 + 1) / 2  # first start minus submission
    assert (batch["qos_compliance"], batch["qos_compliance_in_quota"], batch["gpu_s"]) == (None, None, 2.5)
    assert (m["jobs_completed"], m["runs_requeued"], m["makespan_s"]) == (5, 1, 45)
    # GPU-seconds: 8*5 + 16*5 + 4*5 + 8*2 + 8*5 + 0.5*5 over 32 GPUs x 45 s
    assert m["gpu_utilisation"] == pytest.approx((40 + 80 + 20 + 16 + 40 + 2.5) / (32 * 45))
    gangs = metrics(recs, stream, "gangs")["tenants"]
    assert (gangs["prod"]["jobs_in_quota"], gangs["prod"]["qos_compliance_in_quota"]) == (2, 0.5)
    text = demo.markdown({"modes": {"slurm-site": m}})
    assert "prod: on-time share of its jobs within quota (at most 8 GPUs): slurm-site 1.00 of 1" in text
    assert "research: on-time share of its jobs within quota (at most 4 GPUs): slurm-site 0.00 of 1" in text


def test_unknown_mode_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="mode: unknown 'backfill'"):
        demo.run_mode("backfill", [], DemoSpec(), tmp_path)


def test_site_partitions_are_the_tenants() -> None:
    assert [p.split(":")[0] for p in demo.SITE_PARTITIONS.split()] == list(demo.TENANTS)
    tiers = {p.split(":")[0]: int(p.split(":")[1]) for p in demo.SITE_PARTITIONS.split()}
    for t, (_, qos, _, _) in demo.TENANTS.items():
        assert tiers[t] == (2 if qos == "guaranteed" else 1)


# ------------------------------------------------------------------ on a real dev cluster
@pytest.fixture(scope="module")
def site_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    cluster = start_dev_cluster(tmp_path_factory.mktemp("slurm-site"), gate="off",
                                env={"SITE": demo.SITE_PARTITIONS})
    try:
        yield cluster
    finally:
        stop_dev_cluster(cluster)


def _config(client: SlurmClient) -> dict[str, str]:
    out = {}
    for line in client.run("scontrol", "show", "config").splitlines():
        if " = " in line:
            k, v = line.split(" = ", 1)
            out[k.strip()] = v.strip()
    return out


def test_site_configuration_is_accepted(site_cluster: SlurmCluster) -> None:
    cfg = _config(site_cluster.client)
    assert cfg["SchedulerType"] == "sched/backfill"
    assert cfg["PriorityType"] == "priority/multifactor"
    assert cfg["PreemptType"] == "preempt/partition_prio"
    assert cfg["PreemptMode"] == "REQUEUE"
    assert "bf_interval=1" in cfg["SchedulerParameters"]
    assert cfg["JobSubmitPlugins"] in ("", "(null)")  # no gate: Slurm schedules by itself
    parts = {}
    for line in site_cluster.client.run("scontrol", "show", "partition", "-o").splitlines():
        kv = dict(w.split("=", 1) for w in line.split() if "=" in w)
        parts[kv["PartitionName"]] = (kv["PriorityTier"], kv["Nodes"], kv["Default"])
    assert parts == {"prod": ("2", "n[1-4]", "YES"), "research": ("2", "n[1-4]", "NO"),
                     "batch": ("1", "n[1-4]", "NO"), "dev": ("1", "n[1-4]", "NO")}


def test_site_guaranteed_partition_requeues_best_effort_work(site_cluster: SlurmCluster) -> None:
    client = site_cluster.client
    try:
        batch = [client.submit(seconds=120, name=f"fill{i}", account="batch", partition="batch", gpus=8,
                               extra=["--time=5"]) for i in range(4)]
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if all(j.state == "RUNNING" for j in client.jobs() if j.job_id in batch):
                break
            time.sleep(0.2)
        assert sorted(j.job_id for j in client.jobs() if j.state == "RUNNING") == sorted(batch)
        prod = client.submit(seconds=120, name="urgent", account="prod", partition="prod", gpus=8,
                             extra=["--time=5"])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if any(j.job_id == prod and j.state == "RUNNING" for j in client.jobs()):
                break
            time.sleep(0.2)
        jobs = {j.job_id: j for j in client.jobs()}
        assert jobs[prod].state == "RUNNING"
        # exactly one batch job made room: requeued (pending again, not cancelled), the rest run
        assert sorted(jobs[b].state for b in batch) == ["PENDING", "RUNNING", "RUNNING", "RUNNING"]
        recs, _ = read_jobcomp(site_cluster.jobcomp)
        assert [(r.state, r.partition) for r in recs if r.job_id in batch] == [("PREEMPTED", "batch")]
    finally:
        live = [j.job_id for j in client.jobs() if not j.ended]
        if live:
            client.run("scancel", *map(str, live))


def test_site_needs_the_gate_off(tmp_path: Path) -> None:
    import subprocess

    from tests.hosts.conftest import missing_slurm_binaries

    if missing_slurm_binaries():
        pytest.skip(f"Slurm binaries absent: {', '.join(missing_slurm_binaries())}")
    p = subprocess.run(["bash", str(SCRIPT), "up", str(tmp_path / "c")], capture_output=True, text=True,
                       env={**os.environ, "GATE": "on", "SITE": "prod:2"}, timeout=60, check=False)
    assert p.returncode == 1
    assert "SITE needs GATE=off" in p.stderr
    p = subprocess.run(["bash", str(SCRIPT), "up", str(tmp_path / "c")], capture_output=True, text=True,
                       env={**os.environ, "GATE": "off", "SITE": "prod"}, timeout=60, check=False)
    assert p.returncode == 1
    assert "SITE: 'prod' is not PARTITION:TIER" in p.stderr


def test_cli_refuses_an_unknown_mode_naming_the_option(tmp_path: Path) -> None:
    import subprocess
    import sys

    args = ["slurm", "demo", "--out", str(tmp_path / "o"), "--modes", "slurm,backfill"]
    p = subprocess.run([sys.executable, "-m", "optsched.cli", *args], capture_output=True, text=True,
                       timeout=120, check=False)
    assert p.returncode == 2
    assert p.stdout == ""
    assert p.stderr.startswith(
        "error: --modes: unknown mode(s) ['backfill']; use slurm, slurm-site, slurm-site-dbd, optsched")
    assert "Traceback" not in p.stderr
    assert not (tmp_path / "o").exists()


def test_cli_refuses_unknown_quotas_naming_the_option(tmp_path: Path) -> None:
    import subprocess
    import sys

    args = ["slurm", "demo", "--out", str(tmp_path / "o"), "--quotas", "all"]
    p = subprocess.run([sys.executable, "-m", "optsched.cli", *args], capture_output=True, text=True,
                       timeout=120, check=False)
    assert (p.returncode, p.stdout) == (2, "")
    assert p.stderr.startswith("error: --quotas: unknown 'all'; use default, gangs")
    assert not (tmp_path / "o").exists()

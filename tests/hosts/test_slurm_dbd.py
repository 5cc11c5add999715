"""The dev cluster with accounting (``DBD=on``): slurmdbd on a private MariaDB that the script
starts, with the ``slurm-site-dbd`` demo mode's setup (one account per partition, a QOS with
``GrpTRES=gres/gpu=N`` as each tenant partition's QOS, a ``standby`` partition without one), on
the real daemons. Skipped, naming them, only when the binaries are absent (Slurm's, or
``mariadb-server`` and ``slurmdbd``'s)."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from optsched.hosts import demo
from optsched.hosts.slurmcli import SlurmClient, SlurmError
from tests.hosts.conftest import SCRIPT, SlurmCluster, start_dev_cluster, stop_dev_cluster

DBD_BINARIES = ("slurmdbd", "sacctmgr", "mariadbd", "mariadb-install-db", "mariadb", "mariadb-admin")


def test_site_gpu_limits_are_the_quotas_in_gpus() -> None:
    # prod 8 A100 + 4 V100, research 4 + 4, batch 4 + 4, dev 0 + 4
    assert demo.site_gpu_limits() == "prod:12 research:8 batch:8 dev:4"
    assert demo.site_gpu_limits("gangs") == "prod:16 research:16 batch:0 dev:0"
    assert demo.SITE_DBD_PARTITIONS == "prod:2 research:2 batch:1 dev:1 standby:1"


def test_submit_asks_the_tenant_partition_and_standby() -> None:
    class Recorder(SlurmClient):
        def __init__(self) -> None:
            super().__init__(env={})
            self.calls: list[tuple[str, ...]] = []

        def run(self, *args: str, timeout_s: float | None = None) -> str:
            self.calls.append(args)
            return "7"

    client = Recorder()
    job = demo.DemoJob("d0001-prod-g16n2", "prod", 16, 9, 0.0, nodes=2)
    assert demo._submit(client, job, site=True, standby=True) == 7
    assert demo._submit(client, job, site=True) == 7
    keys = ("--partition", "--account", "--gres", "--nodes", "--time")
    args = [c for c in client.calls[0] if c.startswith(keys)]
    assert args == ["--account=prod", "--partition=prod,standby", "--gres=gpu:8", "--nodes=2", "--time=2"]
    assert "--partition=prod" in client.calls[1]


def test_dbd_options_are_checked(tmp_path: Path) -> None:
    from tests.hosts.conftest import missing_slurm_binaries

    if missing_slurm_binaries():
        pytest.skip(f"Slurm binaries absent: {', '.join(missing_slurm_binaries())}")
    cases = [
        ({"GATE": "off", "DBD": "on"}, "DBD=on needs SITE"),
        ({"GATE": "off", "SITE": "prod:2", "DBD": "yes"}, "DBD must be on or off, not 'yes'"),
        ({"GATE": "off", "SITE": "prod:2", "GPU_LIMITS": "prod:4"}, "GPU_LIMITS needs DBD=on"),
        ({"GATE": "off", "SITE": "prod:2", "DBD": "on", "GPU_LIMITS": "prod"}, "GPU_LIMITS: 'prod' is not"),
        ({"GATE": "off", "SITE": "prod:2", "DBD": "on", "GPU_LIMITS": "dev:4"},
         "GPU_LIMITS: 'dev' is not a SITE partition"),
    ]
    for env, message in cases:
        p = subprocess.run(["bash", str(SCRIPT), "up", str(tmp_path / "c")], capture_output=True, text=True,
                           env={**os.environ, "DBD": "", "GPU_LIMITS": "", "SITE": "", **env}, timeout=60,
                           check=False)
        assert (p.returncode, message in p.stderr) == (1, True), (env, p.stderr)
    assert not (tmp_path / "c" / "etc").exists()  # refused before anything was written


# ------------------------------------------------------------------ on real daemons
@pytest.fixture(scope="module")
def dbd_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    missing = [b for b in DBD_BINARIES if shutil.which(b) is None]
    if missing:
        pytest.skip(f"binaries absent: {', '.join(missing)} (apt-get install mariadb-server slurmdbd)")
    cluster = _up(tmp_path_factory.mktemp("slurm-dbd"))
    try:
        yield cluster
    finally:
        pids = _pids(cluster)
        stop_dev_cluster(cluster)
    # `down` stopped the database and slurmdbd as well
    assert [name for name, pid in pids.items() if _alive(pid)] == []


def _up(folder: Path) -> SlurmCluster:
    return start_dev_cluster(folder, gate="off", env={"SITE": demo.SITE_DBD_PARTITIONS, "DBD": "on",
                                                      "GPU_LIMITS": demo.site_gpu_limits()})


def _pids(cluster: SlurmCluster) -> dict[str, int]:
    return {name: int((cluster.dir / "run" / f"{name}.pid").read_text())
            for name in ("mariadbd", "slurmdbd", "slurmctld")}


def _alive(pid: int) -> bool:
    """The process exists and is no zombie (nothing reaps daemons here)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _wait_states(client: SlurmClient, jobs: dict[int, str],
                 timeout_s: float = 20) -> dict[int, tuple[str, str]]:
    """Poll until every job is in its wanted state (or the timeout); the last states seen."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = {j: client.job_state(j) for j in jobs}
        if all(got[j][0] == want for j, want in jobs.items()) or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


def _reason(client: SlurmClient, job: int, want: str, timeout_s: float = 10) -> tuple[str, str]:
    """Poll until the job's reason is ``want`` (the scheduler sets it on its next pass) or the
    timeout; its last (state, reason)."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = client.job_state(job)
        if got[1] == want or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


def _cancel_all(client: SlurmClient) -> None:
    live = [j.job_id for j in client.jobs() if not j.ended]
    if live:
        client.run("scancel", *map(str, live))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(n.gpus_used for n in client.nodes()):
        time.sleep(0.2)


@pytest.fixture
def dbd(dbd_cluster: SlurmCluster) -> Iterator[SlurmClient]:
    yield dbd_cluster.client
    _cancel_all(dbd_cluster.client)


def test_dbd_cluster_runs_accounting_with_the_tenants_qos(dbd_cluster: SlurmCluster,
                                                          dbd: SlurmClient) -> None:
    cfg = {}
    for line in dbd.run("scontrol", "show", "config").splitlines():
        if " = " in line:
            k, v = line.split(" = ", 1)
            cfg[k.strip()] = v.strip()
    assert cfg["AccountingStorageType"] == "accounting_storage/slurmdbd"
    assert set(cfg["AccountingStorageEnforce"].split(",")) >= {"associations", "limits", "qos"}
    assert "gres/gpu" in cfg["AccountingStorageTRES"].split(",")
    assert oct((dbd_cluster.dir / "etc" / "slurmdbd.conf").stat().st_mode & 0o777) == "0o600"
    qos = dict(line.split("|") for line in dbd.run("sacctmgr", "-n", "-P", "show", "qos",
                                                   "format=name,grptres").splitlines())
    assert {k: v for k, v in qos.items() if k != "normal"} == {
        "prod": "gres/gpu=12", "research": "gres/gpu=8", "batch": "gres/gpu=8", "dev": "gres/gpu=4"}
    parts = {}
    for line in dbd.run("scontrol", "show", "partition", "-o").splitlines():
        kv = dict(w.split("=", 1) for w in line.split() if "=" in w)
        parts[kv["PartitionName"]] = (kv["PriorityTier"], kv["QoS"])
    assert parts == {"prod": ("2", "prod"), "research": ("2", "research"), "batch": ("1", "batch"),
                     "dev": ("1", "dev"), "standby": ("1", "N/A")}
    user = pwd.getpwuid(os.getuid()).pw_name
    assocs = sorted(dbd.run("sacctmgr", "-n", "-P", "show", "assoc", "where", f"user={user}",
                            "format=cluster,account,user").split())
    accounts = ["prod", "research", "batch", "dev", "standby"] + (["root"] if user == "root" else [])
    assert assocs == sorted(f"optsched-dev|{a}|{user}" for a in accounts)  # slurmdbd adds root's
    status = subprocess.run(["bash", str(SCRIPT), "status", str(dbd_cluster.dir)], capture_output=True,
                            text=True, timeout=60, check=False)
    assert status.returncode == 0
    assert [line.split()[:2] for line in status.stdout.splitlines()[:4]] == [
        ["munged", "running"], ["mariadbd", "running"], ["slurmdbd", "running"], ["slurmctld", "running"]]


def test_a_job_over_the_tenant_qos_gpu_limit_stays_pending(dbd: SlurmClient) -> None:
    # prod's QOS: GrpTRES=gres/gpu=12 over its partition; the cluster has 32 GPUs
    def prod(name: str, gpus: int) -> int:
        return dbd.submit(seconds=120, name=name, account="prod", partition="prod", gpus=gpus,
                          extra=["--time=5"])

    first = prod("p8", 8)
    assert _wait_states(dbd, {first: "RUNNING"})[first][0] == "RUNNING"
    over = prod("p8-over", 8)
    within = prod("p4", 4)
    got = _wait_states(dbd, {within: "RUNNING"})
    assert got[within][0] == "RUNNING"  # 8 + 4 = 12 GPUs: within the limit
    # 12 + 8 > 12: pending for the QOS limit, not for want of GPUs (20 are free)
    assert _reason(dbd, over, "QOSGrpGRES") == ("PENDING", "QOSGrpGRES")
    assert sum(n.free_gpus for n in dbd.nodes()) == 20
    # another tenant's partition has its own limit: batch's 8 GPUs start
    other = dbd.submit(seconds=120, name="b8", account="batch", partition="batch", gpus=8, extra=["--time=5"])
    assert _wait_states(dbd, {other: "RUNNING"})[other][0] == "RUNNING"
    assert _reason(dbd, over, "QOSGrpGRES") == ("PENDING", "QOSGrpGRES")
    # the quota frees up: the pending job starts
    dbd.run("scancel", str(first))
    assert _wait_states(dbd, {over: "RUNNING"})[over][0] == "RUNNING"


def test_beyond_the_limit_a_job_runs_in_standby(dbd: SlurmClient) -> None:
    # the demo's submission: -p prod,standby; within prod's 12 GPUs it runs in prod, beyond in standby
    jobs = [dbd.submit(seconds=120, name=f"p8-{i}", account="prod", partition="prod,standby", gpus=8,
                       extra=["--time=5"]) for i in range(2)]
    assert {s for s, _ in _wait_states(dbd, dict.fromkeys(jobs, "RUNNING")).values()} == {"RUNNING"}
    assert sorted(j.partition for j in dbd.jobs() if j.job_id in jobs) == ["prod", "standby"]


def test_a_job_of_an_unknown_account_is_refused(dbd: SlurmClient) -> None:
    with pytest.raises(SlurmError, match="Invalid account"):
        dbd.submit(seconds=10, name="x", account="nosuch", partition="prod", gpus=1, extra=["--time=5"])


def test_metrics_count_the_jobs_completed_in_standby() -> None:
    from optsched.hosts.slurmcli import JobCompRecord

    def rec(job_id: int, name: str, state: str, partition: str, start: float, end: float) -> JobCompRecord:
        return JobCompRecord(job_id=job_id, name=name, state=state, partition=partition, account="a",
                             nodes=("n1",), submit_time=0.0, start_time=start, end_time=end)

    stream = [demo.DemoJob("p1", "prod", 16, 5, 0.0, nodes=2), demo.DemoJob("b1", "batch", 8, 5, 0.0),
              demo.DemoJob("b2", "batch", 8, 5, 0.0)]
    # as jobcomp writes a job of -p TENANT,standby: its partitions, the one it ran in first
    recs = [rec(1, "p1", "COMPLETED", "standby,prod", 1, 6),
            # preempted in standby, then done in batch
            rec(2, "b1", "PREEMPTED", "standby,batch", 0, 2),
            rec(2, "b1", "COMPLETED", "batch,standby", 3, 8),
            rec(3, "b2", "COMPLETED", "batch,standby", 0, 5)]
    m = demo.metrics(recs, stream)
    assert (m["jobs_standby"], m["runs_requeued"], m["jobs_completed"]) == (1, 1, 3)
    assert "| jobs completed in partition standby | 1 |" in demo.markdown({"modes": {"slurm-site-dbd": m}})


def test_down_then_up_keeps_the_database_and_adds_nothing(dbd_cluster: SlurmCluster,
                                                          dbd: SlurmClient) -> None:
    def accounting() -> list[str]:
        return [dbd.run("sacctmgr", "-n", "-P", "show", what, fmt)
                for what, fmt in (("qos", "format=name,grptres"), ("assoc", "format=account,user"),
                                  ("account", "format=account"))]

    before = accounting()
    install_log = (dbd_cluster.dir / "log" / "mariadb-install.log").read_text()
    pids = _pids(dbd_cluster)
    stop_dev_cluster(dbd_cluster)
    assert [name for name, pid in pids.items() if _alive(pid)] == []
    status = subprocess.run(["bash", str(SCRIPT), "status", str(dbd_cluster.dir)], capture_output=True,
                            text=True, timeout=60, check=False)
    assert status.returncode == 1
    assert {line.split()[1] for line in status.stdout.splitlines()} == {"stopped"}
    again = _up(dbd_cluster.dir)  # the same folder: the fixture's cluster runs again
    assert again.slurm_conf == dbd_cluster.slurm_conf
    # the data folder was made once, and no account, association or QOS was added twice
    assert (dbd_cluster.dir / "log" / "mariadb-install.log").read_text() == install_log
    assert accounting() == before
    job = dbd.submit(seconds=60, name="after", account="prod", partition="prod", gpus=8, extra=["--time=5"])
    assert _wait_states(dbd, {job: "RUNNING"})[job][0] == "RUNNING"

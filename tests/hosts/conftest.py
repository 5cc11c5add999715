"""Fixtures for the hosts' tests: a real Slurm dev cluster (``scripts/slurm-dev-cluster.sh``).

``slurm_cluster`` (session scope) starts munge, slurmctld and four slurmd (n1,n2 with
gpu:a100:8, n3,n4 with gpu:v100:8; partitions a, b, c; the priority-0 gate on) in a temporary
folder and stops exactly those processes at the end (or, should pytest be killed, the script's
watchdog does). It skips, naming them, only when Slurm's
binaries are absent (Debian: ``apt-get install slurmctld slurmd slurm-client munge``); any other
failure to start is an error with the script's output.

``slurm`` (function scope) is the same cluster's client; after the test it cancels every job
still queued or running, so the next test finds four idle nodes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from optsched.hosts.slurmcli import SlurmClient

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "slurm-dev-cluster.sh"
SLURM_BINARIES = ("munged", "slurmctld", "slurmd", "sinfo", "squeue", "scontrol", "sbatch", "scancel")


def missing_slurm_binaries() -> list[str]:
    return [b for b in SLURM_BINARIES if shutil.which(b) is None]


@dataclass(frozen=True)
class SlurmCluster:
    """A running dev cluster: its folder, its slurm.conf, a client, its jobcomp file."""

    dir: Path
    slurm_conf: Path
    client: SlurmClient

    @property
    def jobcomp(self) -> Path:
        return self.dir / "log" / "jobcomp.txt"

    def script(self, *args: str, env: dict[str, str] | None = None,
               check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run the dev-cluster script (``up``/``down``/``status``) with this or another folder."""
        proc = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                              timeout=120, env={**os.environ, **(env or {})}, check=False)
        if check and proc.returncode != 0:
            raise AssertionError(f"slurm-dev-cluster.sh {' '.join(args)} failed "
                                 f"({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc


def start_dev_cluster(folder: Path, *, gate: str = "on", env: dict[str, str] | None = None) -> SlurmCluster:
    missing = missing_slurm_binaries()
    if missing:
        pytest.skip(f"Slurm binaries absent: {', '.join(missing)} "
                    "(apt-get install slurmctld slurmd slurm-client munge)")
    proc = subprocess.run(["bash", str(SCRIPT), "up", str(folder)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **(env or {}), "GATE": gate, "SLURM_DEV_QUIET": "1",
                                                # a killed test run: the watchdog stops it
                                                "WATCH_PID": str(os.getpid())},
                          check=False)
    if proc.returncode != 0:
        # Stop whatever did start before failing.
        subprocess.run(["bash", str(SCRIPT), "down", str(folder)], capture_output=True, timeout=60,
                       check=False)
        raise RuntimeError(f"slurm-dev-cluster.sh up failed ({proc.returncode}):\n"
                           f"{proc.stdout}\n{proc.stderr}")
    conf = folder.resolve() / "etc" / "slurm.conf"
    return SlurmCluster(dir=folder.resolve(), slurm_conf=conf, client=SlurmClient(conf, timeout_s=30))


def stop_dev_cluster(cluster: SlurmCluster) -> None:
    subprocess.run(["bash", str(SCRIPT), "down", str(cluster.dir)], capture_output=True, timeout=60,
                   check=False)


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    cluster = start_dev_cluster(tmp_path_factory.mktemp("slurm"))
    try:
        yield cluster
    finally:
        stop_dev_cluster(cluster)


def cancel_live_jobs(client: SlurmClient, *, timeout_s: float = 10.0) -> None:
    """Cancel every pending or running job and wait until no node holds a GPU."""
    live = [j.job_id for j in client.jobs() if j.state in ("PENDING", "RUNNING", "SUSPENDED",
                                                            "CONFIGURING", "REQUEUED")]
    if live:
        client.run("scancel", *map(str, live))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(n.gpus_used == 0 and n.state == "idle" for n in client.nodes()):
            return
        time.sleep(0.1)


@pytest.fixture
def slurm(slurm_cluster: SlurmCluster) -> Iterator[SlurmClient]:
    yield slurm_cluster.client
    cancel_live_jobs(slurm_cluster.client)

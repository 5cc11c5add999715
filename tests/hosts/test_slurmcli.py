"""The Slurm client: parsing on outputs recorded from Slurm 22.05 (tests/hosts/data), then the
same calls against a real dev cluster (skipped only when Slurm's binaries are absent)."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest

from optsched.hosts.slurmcli import (
    GresAlloc,
    GresSpec,
    SlurmClient,
    SlurmError,
    SlurmStartError,
    expand_hostlist,
    parse_gres,
    parse_gres_request,
    parse_index_list,
    parse_jobs,
    parse_nodes,
    read_jobcomp,
)
from tests.hosts.conftest import SlurmCluster, start_dev_cluster, stop_dev_cluster

DATA = Path(__file__).parent / "data"


# --------------------------------------------------------------------------- parsing


def test_hostlists_expand_as_slurm_writes_them() -> None:
    assert expand_hostlist("n[3-4]") == ["n3", "n4"]
    assert expand_hostlist("n1") == ["n1"]
    assert expand_hostlist("n[1-2,7],gpu[08-10]x") == ["n1", "n2", "n7", "gpu08x", "gpu09x", "gpu10x"]
    assert expand_hostlist("r[1-2]n[1-2]") == ["r1n1", "r1n2", "r2n1", "r2n2"]
    assert expand_hostlist("") == [] and expand_hostlist("(null)") == []


def test_gres_strings_as_22_05_writes_them() -> None:
    assert parse_index_list("0-3,6-7") == (0, 1, 2, 3, 6, 7)
    assert parse_index_list("N/A") == ()
    assert parse_gres("gpu:a100:6(IDX:0-3,6-7)") == [GresSpec("gpu", "a100", 6, (0, 1, 2, 3, 6, 7))]
    assert parse_gres("gpu:a100:0(IDX:N/A)") == [GresSpec("gpu", "a100", 0, ())]
    assert parse_gres("gpu:8(S:0-1)") == [GresSpec("gpu", None, 8, ())]
    assert parse_gres("gpu:a100:4,gpu:v100:4") == [GresSpec("gpu", "a100", 4), GresSpec("gpu", "v100", 4)]
    assert parse_gres("(null)") == []
    assert parse_gres_request("gres:gpu:a100:4") == [GresSpec("gpu", "a100", 4)]
    assert parse_gres_request("gres:gpu:2") == [GresSpec("gpu", None, 2)]
    assert parse_gres_request("gres/gpu=3") == [GresSpec("gpu", None, 3)]


def test_recorded_squeue_output() -> None:
    jobs = {j.job_id: j for j in parse_jobs((DATA / "squeue-22.05.json").read_text())}
    assert sorted(jobs) == [1, 2, 3, 4, 5, 6, 7, 8]

    train = jobs[1]
    assert (train.name, train.account, train.partition, train.user) == ("train", "t1", "a", "root")
    assert train.running and not train.held
    assert train.nodes == ("n1",) and train.num_nodes == 1
    assert (train.gpus_per_node, train.gpu_type, train.gpus) == (4, "a100", 4)
    assert train.gpu_alloc == (GresAlloc("n1", "a100", 4, (0, 1, 2, 3)),)
    assert train.comment == "qos=guaranteed"
    assert train.submit_time == 1796067882.0 and train.start_time == 1796067883.0
    assert train.end_time is None and train.time_limit_min is None

    big = jobs[2]  # a 2-node gang, v100:8 on each
    assert big.nodes == ("n3", "n4") and big.gpus == 16
    assert big.gpu_indices == {"n3": tuple(range(8)), "n4": tuple(range(8))}

    pair = jobs[7]  # one gang, different indices per node
    assert pair.gpu_indices == {"n1": (6, 7), "n2": (0, 1)}

    anytype = jobs[3]  # the gate: held at submission
    assert anytype.held and anytype.priority == 0 and anytype.reason == "JobHeldUser"
    assert anytype.gpu_type is None and anytype.gpus == 2
    assert anytype.nodes == () and anytype.start_time is None and anytype.gpu_alloc == ()

    pre = jobs[4]  # preempted by requeuehold: held again, restarted once, old nodes still required
    assert pre.held and pre.restart_count == 1 and pre.required_nodes == ("n1",)
    assert pre.start_time is None and pre.end_time is None

    assert jobs[5].held and jobs[5].reason == "JobHeldAdmin"  # released onto busy nodes, held again
    assert jobs[6].state == "CANCELLED" and not jobs[6].held
    done = jobs[8]
    assert done.state == "COMPLETED" and done.nodes == ("n2",) and done.gpu_alloc == ()
    assert done.end_time == 1796067896.0 and done.exit_code == 0 and done.comment == "done soon"


def test_recorded_sinfo_output() -> None:
    nodes = {n.name: n for n in parse_nodes((DATA / "sinfo-22.05.json").read_text())}
    assert sorted(nodes) == ["n1", "n2", "n3", "n4"]
    n1 = nodes["n1"]
    assert (n1.state, n1.gpu_type, n1.gpus, n1.gpus_used) == ("mixed", "a100", 8, 6)
    assert n1.used_gpu_indices == (0, 1, 2, 3, 6, 7) and n1.free_gpus == 2
    assert n1.partitions == ("a", "b", "c") and n1.cpus == 16 and n1.available
    assert nodes["n3"].gpu_types == {"v100": 8} and nodes["n3"].free_gpus == 0


def test_node_states_that_take_no_work() -> None:
    doc = json.loads((DATA / "sinfo-22.05.json").read_text())
    raw = doc["nodes"][1]
    for state, flags in [("down", []), ("idle", ["DRAIN"]), ("drained", []), ("idle", ["NOT_RESPONDING"])]:
        (node,) = parse_nodes({"nodes": [{**raw, "state": state, "state_flags": flags}]})
        assert not node.available and node.free_gpus == 0
    # later Slurm versions: state as a list, numbers as {"set", "number"}
    later = {**raw, "state": ["IDLE", "DRAIN"], "cpus": {"set": True, "number": 4}}
    (node,) = parse_nodes({"nodes": [later]})
    assert node.state == "idle" and node.state_flags[0] == "DRAIN" and not node.available and node.cpus == 4


def test_recorded_jobcomp_file(tmp_path: Path) -> None:
    records, offset = read_jobcomp(DATA / "jobcomp-22.05.txt")
    assert [(r.job_id, r.state) for r in records] == [(6, "CANCELLED"), (4, "PENDING"), (8, "COMPLETED")]
    done = records[2]
    assert (done.name, done.partition, done.account, done.nodes) == ("quick2", "c", "t3", ("n2",))
    assert done.start_time is not None and done.end_time is not None and done.submit_time is not None
    assert done.end_time >= done.start_time >= done.submit_time
    assert records[0].nodes == ()
    # incremental reading; a half-written last line waits for the next read
    f = tmp_path / "jobcomp.txt"
    text = (DATA / "jobcomp-22.05.txt").read_text()
    f.write_text(text + "JobId=9 UserId=root(0) Name=x")
    again, off = read_jobcomp(f)
    assert len(again) == 3 and off == offset == len(text.encode())
    assert read_jobcomp(f, offset=off)[0] == []
    assert read_jobcomp(tmp_path / "absent.txt", offset=5) == ([], 5)


def _fake_tool(folder: Path, name: str, script: str) -> None:
    p = folder / name
    p.write_text("#!/bin/sh\n" + script + "\n")
    p.chmod(p.stat().st_mode | stat.S_IXUSR)


def test_errors_name_the_command_and_stderr(tmp_path: Path) -> None:
    _fake_tool(tmp_path, "scontrol", 'echo "slurm_hold error: Invalid job id specified" >&2; exit 1')
    _fake_tool(tmp_path, "squeue", "echo 'not json'")
    _fake_tool(tmp_path, "sinfo", 'echo \'{"errors": [{"error": "boom"}], "nodes": []}\'')
    _fake_tool(tmp_path, "sbatch", "sleep 5")
    env = {"PATH": f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}"}
    client = SlurmClient(tmp_path / "slurm.conf", env=env, timeout_s=0.5)
    with pytest.raises(SlurmError) as err:
        client.hold(42)
    assert str(err.value) == "scontrol hold 42: exit status 1: slurm_hold error: Invalid job id specified"
    assert err.value.returncode == 1 and err.value.command == ["scontrol", "hold", "42"]
    with pytest.raises(SlurmError, match="not JSON"):
        client.jobs()
    with pytest.raises(SlurmError, match="boom"):
        client.nodes()
    with pytest.raises(SlurmError, match=r"timed out after 0\.5 s"):
        client.submit(seconds=1)
    with pytest.raises(SlurmError, match="not found"):
        SlurmClient(env={"PATH": str(tmp_path / "nowhere")}).cancel(1)


def test_slurm_conf_reaches_the_commands(tmp_path: Path) -> None:
    _fake_tool(tmp_path, "scancel", 'echo "$SLURM_CONF $*"')
    env = {"PATH": f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}", "SLURM_CONF": "elsewhere"}
    assert SlurmClient("mine.conf", env=env).run("scancel", "7") == "mine.conf 7\n"
    assert SlurmClient(env=env).run("scancel", "7") == "elsewhere 7\n"


# --------------------------------------------------------------------------- a real cluster


def _wait(pred: object, timeout_s: float = 5.0) -> bool:
    assert callable(pred)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return bool(pred())


def test_cluster_nodes(slurm: SlurmClient) -> None:
    nodes = {n.name: n for n in slurm.nodes()}
    assert sorted(nodes) == ["n1", "n2", "n3", "n4"]
    assert {n: (x.gpu_type, x.gpus, x.gpus_used, x.state) for n, x in nodes.items()} == {
        "n1": ("a100", 8, 0, "idle"), "n2": ("a100", 8, 0, "idle"),
        "n3": ("v100", 8, 0, "idle"), "n4": ("v100", 8, 0, "idle"),
    }
    assert all(x.partitions == ("a", "b", "c") and x.available for x in nodes.values())
    assert slurm.ping()


def test_gate_holds_every_job_and_start_runs_a_gang_exactly_there(slurm: SlurmClient) -> None:
    jid = slurm.submit(seconds=300, name="gang", account="t1", partition="b", gpus=2, gpu_type="a100",
                       nodes=2, comment="tenant=t1 class=guaranteed")
    time.sleep(0.5)
    job = slurm.job(jid)
    assert job is not None and job.held and job.reason == "JobHeldUser" and job.state == "PENDING"
    assert (job.account, job.partition, job.num_nodes, job.gpus, job.gpu_type) == ("t1", "b", 2, 4, "a100")
    assert job.comment == "tenant=t1 class=guaranteed"

    t0 = time.monotonic()
    slurm.start(jid, ["n2", "n1"])
    assert time.monotonic() - t0 < 5
    job = slurm.job(jid)
    assert job is not None and job.running and set(job.nodes) == {"n1", "n2"}
    assert {a.node: (a.type, a.count, len(a.indices)) for a in job.gpu_alloc} == {
        "n1": ("a100", 2, 2), "n2": ("a100", 2, 2)}
    assert job.start_time is not None and job.submit_time is not None
    used = {n.name: n.used_gpu_indices for n in slurm.nodes()}
    assert used["n1"] == job.gpu_indices["n1"] and used["n2"] == job.gpu_indices["n2"]
    assert used["n3"] == used["n4"] == ()


def test_a_start_onto_busy_nodes_is_held_again(slurm: SlurmClient) -> None:
    blocker = slurm.submit(seconds=300, gpus=8, gpu_type="v100")
    slurm.start(blocker, ["n3"])
    late = slurm.submit(seconds=300, gpus=1, gpu_type="v100")
    with pytest.raises(SlurmStartError, match="still pending"):
        slurm.start(late, ["n3"], confirm_s=1.0)
    job = slurm.job(late)
    assert job is not None and job.held
    slurm.cancel(blocker)
    assert _wait(lambda: slurm.job_state(blocker)[0] in ("CANCELLED", "COMPLETED"))
    time.sleep(1.0)  # n3 is free now; Slurm must not start the held job by itself
    assert slurm.job_state(late)[0] == "PENDING"


def test_requeue_hold_frees_the_gpus_and_records_it(slurm: SlurmClient, slurm_cluster: SlurmCluster) -> None:
    jid = slurm.submit(seconds=300, gpus=4, gpu_type="v100", partition="c", account="t3")
    slurm.start(jid, ["n4"])
    assert next(n for n in slurm.nodes() if n.name == "n4").gpus_used == 4
    t0 = time.monotonic()
    slurm.requeue_hold(jid)
    assert _wait(lambda: next(n for n in slurm.nodes() if n.name == "n4").gpus_used == 0)
    assert time.monotonic() - t0 < 5
    assert _wait(lambda: (j := slurm.job(jid)) is not None and j.held and j.restart_count == 1)
    records, _ = read_jobcomp(slurm_cluster.jobcomp)
    assert any(r.job_id == jid and r.state == "PENDING" and r.nodes == ("n4",) for r in records)
    # and it can start again, elsewhere
    slurm.start(jid, ["n3"])
    job = slurm.job(jid)
    assert job is not None and job.running and job.nodes == ("n3",)


def test_completion_and_cancel_are_recorded(slurm: SlurmClient, slurm_cluster: SlurmCluster) -> None:
    done = slurm.submit(command="true", gpus=1, gpu_type="a100", name="quick")
    slurm.start(done, ["n1"])
    gone = slurm.submit(seconds=300)
    slurm.cancel(gone)
    assert _wait(lambda: slurm.job_state(done)[0] == "COMPLETED")
    job = slurm.job(done)
    assert job is not None and job.end_time is not None and job.nodes == ("n1",) and job.exit_code == 0
    assert _wait(lambda: {done, gone} <= {r.job_id for r in read_jobcomp(slurm_cluster.jobcomp)[0]})
    states = {r.job_id: r.state for r in read_jobcomp(slurm_cluster.jobcomp)[0]}
    assert states[done] == "COMPLETED" and states[gone] == "CANCELLED"


def test_errors_from_the_real_tools(slurm: SlurmClient) -> None:
    with pytest.raises(SlurmError, match=r"scontrol hold 999999: exit status 1: .*Invalid job id"):
        slurm.hold(999999)
    assert slurm.job_state(999999) == ("", "")


def test_script_is_idempotent_and_down_stops_only_its_own(
        slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    again = slurm_cluster.script("up", str(slurm_cluster.dir))
    assert f"export SLURM_CONF={slurm_cluster.slurm_conf}" in again.stdout
    assert slurm_cluster.script("status", str(slurm_cluster.dir)).returncode == 0

    # A second cluster with Slurm's own scheduling (GATE=off) runs next to the first.
    other = start_dev_cluster(tmp_path / "open", gate="off")
    try:
        jid = other.client.submit(seconds=300, gpus=2, gpu_type="v100")
        assert _wait(lambda: other.client.job_state(jid)[0] == "RUNNING")
    finally:
        stop_dev_cluster(other)
    status = other.script("status", str(other.dir), check=False)
    assert status.returncode != 0 and "slurmctld stopped" in status.stdout
    assert slurm_cluster.client.ping() and len(slurm_cluster.client.nodes()) == 4


def test_untyped_and_per_job_gpu_requests(slurm: SlurmClient) -> None:
    anytype = slurm.submit(seconds=300, gpus=2)
    per_job = slurm.submit(seconds=300, extra=["--gpus=v100:3"])
    slurm.start(anytype, ["n2"])
    slurm.start(per_job, ["n3"])
    jobs = {j.job_id: j for j in slurm.jobs()}
    a, b = jobs[anytype], jobs[per_job]
    assert (a.gpu_type, a.gpus_per_node, a.gpus) == (None, 2, 2)
    assert [(x.node, x.type, x.count) for x in a.gpu_alloc] == [("n2", "a100", 2)]  # the node's type
    assert (b.gpu_type, b.gpus_per_node, b.gpus_per_job, b.gpus) == ("v100", 0, 3, 3)
    assert b.gpu_indices == {"n3": (0, 1, 2)}

"""The Slurm adapter: snapshots from recorded squeue/sinfo JSON, and end to end on a real dev
cluster (the ``slurm_cluster`` fixture): loan and reclaim, a two-node gang placed exactly where
optsched decides, a preemption for a guaranteed job, a restart from the store, and a job
cancelled between the read and the act."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from optsched import ClusterState, Decision, Snapshot, check_decision, solve_epoch
from optsched.errors import SnapshotError
from optsched.hosts.config import SlurmConfig, parse_config
from optsched.hosts.loop import HostLoop
from optsched.hosts.slurm import Observation, SlurmHost, build_snapshot
from optsched.hosts.slurmcli import SlurmClient, parse_jobs, parse_nodes
from optsched.hosts.store import Store

DATA = Path(__file__).parent / "data"

CONFIG = """
cluster = "test"
epoch_s = 5
time_limit_s = 1.0
store = "{store}"
start_wait_s = 3.0

[gpu_types.a100]
name = "A100"
memory_gib = 80

[gpu_types.v100]
name = "V100"
memory_gib = 32

[[tenants]]
id = "alpha"
accounts = ["alpha"]
quota = {{ a100 = 8, v100 = 8 }}
qos = {{ max_queue_delay_s = 0 }}
default_qos = "guaranteed"

[[tenants]]
id = "beta"
accounts = ["beta"]
quota = {{ a100 = 8, v100 = 8 }}
"""


def _cfg(store: str = ":memory:") -> SlurmConfig:
    return parse_config(CONFIG.format(store=store))


# ---------------------------------------------------------------------------------- unit
def test_snapshot_from_recorded_squeue_and_sinfo() -> None:
    squeue = json.loads((DATA / "adapter_squeue.json").read_text())
    sinfo = json.loads((DATA / "adapter_sinfo.json").read_text())
    obs = Observation(parse_jobs(squeue), parse_nodes(sinfo), now=1796067800.0)
    built = build_snapshot(
        _cfg(),
        obs,
        on_loan={"3": True},
        assurance_state={"alpha": {"x": 1}, "gone": {}},
        first_submit={"1": 1796067700.0},
    )
    snap = Snapshot.model_validate(built.snapshot)
    ClusterState.from_snapshot(snap)  # cross-references hold
    assert [(n.id, n.gpu_type, n.gpus, n.available) for n in snap.nodes] == [
        ("n1", "A100", 8, True),
        ("n2", "A100", 8, True),
        ("n3", "V100", 8, True),
        ("n4", "V100", 8, True),
    ]
    jobs = {j.id: j for j in snap.jobs}
    # held job 1: alpha, guaranteed by its comment tag, typed; first submit time from the store
    assert jobs["1"].state == "pending" and jobs["1"].tenant == "alpha" and jobs["1"].qos == "guaranteed"
    assert jobs["1"].gpus == 4 and jobs["1"].gpu_types == ["A100"] and jobs["1"].submit_s == 1796067700.0
    # two nodes x gpu:4 per node, untyped
    assert jobs["2"].gpus == 8 and jobs["2"].gpu_types is None and jobs["2"].qos == "best_effort"
    # running --gpus=3 job: its GPU indices from gres_detail, on_loan from the store
    r = jobs["3"]
    assert r.state == "running" and r.on_loan and r.start_s is not None
    assert [(a.node, a.gpu) for a in r.allocation or []] == [("n1", 0), ("n1", 1), ("n1", 2)]
    assert r.restart_cost_s == pytest.approx(1796067800.0 - r.start_s)
    assert snap.assurance_state == {"alpha": {"x": 1}}  # unknown tenants dropped
    d = solve_epoch(snap)
    assert check_decision(ClusterState.from_snapshot(snap), d) == []


def test_reserve_min_gpus_reaches_the_snapshot_options_only_when_set() -> None:
    squeue = json.loads((DATA / "adapter_squeue.json").read_text())
    sinfo = json.loads((DATA / "adapter_sinfo.json").read_text())
    obs = Observation(parse_jobs(squeue), parse_nodes(sinfo), now=1796067800.0)
    assert build_snapshot(_cfg(), obs).snapshot["options"] == {"time_limit_s": 1.0, "backend": "auto"}
    def with_reserve(n: int) -> SlurmConfig:
        return parse_config(CONFIG.format(store=":memory:").replace("start_wait_s",
                                                                    f"reserve_min_gpus = {n}\nstart_wait_s"))

    snap = Snapshot.model_validate(build_snapshot(with_reserve(8), obs).snapshot)
    assert snap.options is not None and snap.options.reserve_min_gpus == 8
    with pytest.raises(SnapshotError, match="reserve_min_gpus"):
        with_reserve(0)


def test_unmanaged_running_jobs_keep_their_gpus_and_unknown_pending_ones_are_left_out() -> None:
    squeue = json.loads((DATA / "adapter_squeue.json").read_text())
    for j in squeue["jobs"]:
        j["account"] = "nobody"
    sinfo = json.loads((DATA / "adapter_sinfo.json").read_text())
    built = build_snapshot(_cfg(), Observation(parse_jobs(squeue), parse_nodes(sinfo), 1796067800.0))
    snap = Snapshot.model_validate(built.snapshot)
    assert [(j.id, j.tenant, j.preemptible) for j in snap.jobs] == [("3", "_unmanaged", False)]
    assert {s[0] for s in built.skipped} == {"1", "2"}
    d = solve_epoch(snap)
    assert check_decision(ClusterState.from_snapshot(snap), d) == [] and d.preempt == []


# ---------------------------------------------------------------------------------- integration
@pytest.fixture
def adapter(slurm_cluster: Any, slurm: Any, tmp_path: Path) -> Any:
    a = _adapter(slurm_cluster, slurm, tmp_path)
    yield a
    a.close()


def _adapter(slurm_cluster: Any, slurm: Any, tmp_path: Path) -> Any:
    """The adapter of a test: a SlurmHost and HostLoop over the cluster, its store in tmp_path."""
    env = {**os.environ, "SLURM_CONF": str(slurm_cluster.slurm_conf)}

    class Adapter:
        def __init__(self) -> None:
            self.env = env
            self.db = tmp_path / "optsched.db"
            self.cfg = _cfg(str(self.db))
            self.client = slurm
            self.open()

        def open(self, decide: Any = None) -> None:
            self.store = Store(self.db)
            self.host = SlurmHost(self.cfg, self.store, SlurmClient(env=env))
            from optsched import SolveParams

            self.loop = HostLoop(
                self.host, self.store, SolveParams(backend="auto", time_limit_s=1.0), decide=decide
            )

        def close(self) -> None:
            self.store.close()

        def sbatch(self, *args: str) -> str:
            out = subprocess.run(
                ["sbatch", "--parsable", "-o", "/dev/null", *args],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            return out.stdout.strip().split(";")[0]

        def jobs(self) -> dict[str, Any]:
            return {str(j.job_id): j for j in self.client.jobs()}

        def actions(self, job: str) -> list[tuple[str, str, str]]:
            return [(a.action, a.outcome, a.reason) for a in self.store.actions("test", job=job)]

    return Adapter()


def _wait_running(adapter: Any, ids: list[str], timeout_s: float = 5.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        jobs = adapter.jobs()
        if all(jobs[i].state == "RUNNING" for i in ids) or time.monotonic() > deadline:
            return jobs
        time.sleep(0.1)


def test_loan_then_reclaim_across_two_tenants(adapter: Any) -> None:
    beta = [adapter.sbatch("-A", "beta", "--gres=gpu:a100:4", "--wrap", "sleep 300") for _ in range(4)]
    r = adapter.loop.step()
    assert not r.refused and {s.job for s in r.decision.start} == set(beta)
    assert [lo.model_dump() for lo in r.decision.loans] == [
        {"lender": "alpha", "borrower": "beta", "gpu_type": "A100", "gpus": 8}
    ]
    jobs = _wait_running(adapter, beta)
    assert all(jobs[b].state == "RUNNING" for b in beta)
    lent = {s.job for s in r.decision.start if s.on_loan}
    assert len(lent) == 2
    assert adapter.store.get_meta("test", "on_loan") == {j: True for j in lent}
    assert any(
        a.action == "loan" and "alpha lends 8 A100 to beta" in a.reason for a in adapter.store.actions("test")
    )

    alpha = adapter.sbatch("-A", "alpha", "--gres=gpu:a100:8", "--wrap", "sleep 300")
    for _ in range(3):  # the reclaim comes once the guaranteed job waits past its target (0 s)
        r = adapter.loop.step()
        if r.decision.start:
            break
    assert {p.job for p in r.decision.preempt} == lent
    assert all(p.reason == "reclaim" for p in r.decision.preempt)
    jobs = _wait_running(adapter, [alpha])
    assert jobs[alpha].state == "RUNNING"
    for j in lent:
        assert jobs[j].state == "PENDING" and jobs[j].held  # requeued, held: Slurm won't restart it
        assert adapter.actions(j)[-1][:2] == ("preempt", "ok")
    freed = {a.node for sj in r.snapshot.jobs if sj.id in lent for a in sj.allocation or []}
    assert set(jobs[alpha].nodes) == freed  # on the GPUs the reclaim freed
    assert adapter.store.get_meta("test", "on_loan") == {}


def test_a_gang_on_two_nodes_lands_exactly_where_optsched_decides(adapter: Any) -> None:
    small = adapter.sbatch("-A", "beta", "--gres=gpu:a100:1", "--wrap", "sleep 300")
    adapter.loop.step()
    _wait_running(adapter, [small])
    gang = adapter.sbatch("-A", "alpha", "-N2", "--gres=gpu:8", "--wrap", "sleep 300")
    r = adapter.loop.step()
    (start,) = [s for s in r.decision.start if s.job == gang]
    decided = sorted({(a.node, a.gpu) for a in start.allocation})
    jobs = _wait_running(adapter, [gang])
    assert jobs[gang].state == "RUNNING"
    assert sorted(set(jobs[gang].nodes)) == sorted({n for n, _ in decided}) == ["n3", "n4"]
    assert sorted(jobs[gang].allocation) == decided  # whole nodes: the very GPUs decided
    nodes = {n.name: n for n in adapter.client.nodes()}
    assert nodes["n1"].gpus_used + nodes["n2"].gpus_used == 1  # only the small job elsewhere
    assert adapter.actions(gang)[-1][:2] == ("start", "ok")


def test_a_preemption_frees_gpus_for_a_guaranteed_job(adapter: Any) -> None:
    # beta's best-effort jobs fill every A100 (8 in quota, 8 lent by alpha)
    be = [adapter.sbatch("-A", "beta", "--gres=gpu:a100:8", "--wrap", "sleep 300") for _ in range(2)]
    adapter.loop.step()
    _wait_running(adapter, be)
    g = adapter.sbatch(
        "-A", "alpha", "--comment=optsched:guaranteed", "--gres=gpu:a100:8", "--wrap", "sleep 300"
    )
    for _ in range(3):
        r = adapter.loop.step()
        if r.decision.preempt:
            break
    (p,) = r.decision.preempt
    freed = {a.node for sj in r.snapshot.jobs if sj.id == p.job for a in sj.allocation or []}
    jobs = _wait_running(adapter, [g])
    assert jobs[g].state == "RUNNING" and set(jobs[g].nodes) == freed
    assert jobs[p.job].state == "PENDING" and jobs[p.job].held
    assert [a[:2] for a in adapter.actions(p.job)][-1] == ("preempt", "ok")


def test_a_restart_loses_nothing_and_does_not_undo_the_last_decision(adapter: Any, tmp_path: Path) -> None:
    beta = [adapter.sbatch("-A", "beta", "--gres=gpu:v100:4", "--wrap", "sleep 300") for _ in range(3)]
    r1 = adapter.loop.step()
    _wait_running(adapter, beta)
    lent = {s.job for s in r1.decision.start if s.on_loan}
    assert len(lent) == 1
    state1 = adapter.store.assurance_state("test")
    adapter.close()  # the adapter goes away ...

    # ... and a new process starts from the same store: `optsched slurm run --once`
    conf = tmp_path / "adapter.toml"
    conf.write_text(CONFIG.format(store=str(adapter.db)))
    proc = subprocess.run(
        [sys.executable, "-m", "optsched.cli", "slurm", "run", "--config", str(conf), "--once"],
        env=adapter.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    adapter.open()
    last = adapter.store.latest("test")
    assert last is not None and last.seq == r1.seq + 1
    snap = last.decision
    assert snap["preempt"] == [] and snap["start"] == []  # nothing undone, nothing flipped
    assert [lo["borrower"] for lo in snap["loans"]] == ["beta"]  # the loan is still recognised
    assert adapter.store.get_meta("test", "on_loan") == {j: True for j in lent}
    assert state1 is not None
    # the epoch after the restart was fed the stored assurance state
    r3 = adapter.loop.step()
    assert r3.snapshot.assurance_state is not None
    assert {j.id for j in r3.snapshot.jobs if j.on_loan} == lent
    assert r3.decision.preempt == [] and all(adapter.jobs()[b].state == "RUNNING" for b in beta)


def test_a_job_cancelled_between_read_and_act_is_skipped(adapter: Any) -> None:
    a = adapter.sbatch("-A", "beta", "--gres=gpu:a100:2", "--wrap", "sleep 300")
    b = adapter.sbatch("-A", "beta", "--gres=gpu:a100:2", "--wrap", "sleep 300")

    def decide_then_cancel(snap: Snapshot) -> Decision:
        d = solve_epoch(snap)
        subprocess.run(["scancel", a], env=adapter.env, check=True)
        time.sleep(0.3)
        return d

    adapter.close()
    adapter.open(decide=decide_then_cancel)
    r = adapter.loop.step()
    assert {s.job for s in r.decision.start} == {a, b}
    assert [x[:2] for x in adapter.actions(a)] == [("start", "skipped")]
    assert "gone" in adapter.actions(a)[0][2] or "CANCELLED" in adapter.actions(a)[0][2]
    assert _wait_running(adapter, [b])[b].state == "RUNNING"


def test_a_decision_that_fails_the_check_is_never_applied(adapter: Any) -> None:
    j = adapter.sbatch("-A", "beta", "--gres=gpu:a100:2", "--wrap", "sleep 300")

    def broken(snap: Snapshot) -> Decision:
        d = solve_epoch(snap)
        (s,) = d.start
        s.allocation = s.allocation[:1]  # one GPU for a two-GPU gang
        return d

    adapter.close()
    adapter.open(decide=broken)
    r = adapter.loop.step()
    assert r.refused and any("invariant 2" in v for v in r.violations)
    assert adapter.jobs()[j].state == "PENDING"
    last = adapter.store.latest("test")
    assert last is not None and last.status == "refused" and last.assurance_state == {}
    assert last.decision["violations"] == r.violations
    assert all(x[0] != "start" for x in adapter.actions(j))


def _shape_host(nodes_used: dict[str, tuple[int, ...]], pending: list[tuple[str, int, int]]) -> Any:
    """A Slurm host over two 8-GPU A100 nodes of partition ``a``, one running job of beta on the
    used GPUs of each node and beta's held ``pending`` jobs (id, GPUs per node, nodes), all asked
    with ``--gres`` (per node); beta's A100 quota is 16."""
    from optsched.hosts.slurmcli import GresAlloc, GresSpec, SlurmJob, SlurmNode

    def job(
        i: str, gpus: int, n: int = 1, state: str = "PENDING", alloc: tuple[GresAlloc, ...] = ()
    ) -> SlurmJob:
        return SlurmJob(
            job_id=int(i),
            name=f"j{i}",
            account="beta",
            partition="a",
            user="u",
            state=state,
            reason="JobHeldUser" if state == "PENDING" else "None",
            priority=0 if state == "PENDING" else 1,
            num_nodes=n,
            nodes=tuple(a.node for a in alloc),
            required_nodes=(),
            gpus_per_node=gpus,
            gpus_per_job=0,
            gpu_type="a100",
            gpu_alloc=alloc,
            submit_time=100.0,
            start_time=100.0 if alloc else None,
            end_time=None,
            time_limit_min=None,
            restart_count=0,
            comment="",
            admin_comment="",
            system_comment="",
            exit_code=None,
        )

    def node(name: str, used: tuple[int, ...]) -> SlurmNode:
        gres = (GresSpec("gpu", "a100", 8),)
        used_gres = (GresSpec("gpu", "a100", len(used), used),)
        return SlurmNode(name, "mixed", (), ("a",), 64, 8, gres, used_gres, "")

    nodes = [node(n, used) for n, used in nodes_used.items()]
    running = [
        job(str(k + 1), len(used), 1, "RUNNING", (GresAlloc(n, "a100", len(used), used),))
        for k, (n, used) in enumerate(nodes_used.items())
    ]
    obs = Observation([*running, *(job(i, g, n) for i, g, n in pending)], nodes, now=200.0)

    class Fake(SlurmHost):
        def observe(self) -> Observation:
            return obs

        def apply(self, snapshot: Any, decision: Any, history: Any, report: Any) -> None:
            self.applied = decision

    cfg = parse_config(CONFIG.format(store=":memory:").replace("a100 = 8, v100 = 8 }", "a100 = 16 }", 2))
    return Fake(cfg, Store(":memory:"))


def test_a_one_node_job_no_node_holds_waits_in_the_engine_not_split() -> None:
    """A one-node 8-GPU job (-N1 --gres=gpu:8) with 4 GPUs free on each of two nodes: the
    engine places jobs in their node shape (one 8-GPU piece on 8-GPU nodes), so it queues the
    job instead of splitting it 4+4, and the adapter has nothing to defer; the GPUs go to the
    jobs that can start."""
    host = _shape_host({"n1": (0, 1, 2, 3), "n2": (4, 5, 6, 7)}, [("3", 8, 1), ("4", 1, 1), ("5", 1, 1)])
    r = HostLoop(host, host.store).step()
    assert not r.refused
    assert [(a.job, a.outcome) for a in r.actions] == []
    assert {s.job for s in host.applied.start} == {"4", "5"}
    assert "3" in host.applied.queue
    assert "3" in {j.id for j in r.snapshot.jobs}
    assert host.store.actions("test", job="3") == []


def test_a_per_node_job_reaches_the_engine_in_its_shape_and_nothing_is_deferred() -> None:
    """A job asking 2 GPUs on each of 2 nodes (-N2 --gres=gpu:2) reaches the engine with
    ``gpus_per_node`` 2: with 5 GPUs free on n1 and none on n2 no two nodes hold it, so the
    engine queues it (it is never split onto n1 alone) and the adapter defers nothing; the
    GPUs go to the jobs that can start."""
    host = _shape_host({"n1": (0, 1, 2), "n2": tuple(range(8))}, [("3", 2, 2), ("4", 1, 1), ("5", 1, 1)])
    r = HostLoop(host, host.store).step()
    assert not r.refused
    job = next(j for j in r.snapshot.jobs if j.id == "3")
    assert (job.gpus, job.gpus_per_node) == (4, 2)
    assert [(a.job, a.outcome) for a in r.actions] == []
    assert {s.job for s in host.applied.start} == {"4", "5"}
    assert "3" in host.applied.queue
    assert host.store.actions("test", job="3") == []


def test_the_shape_safety_net_defers_a_split_decision_no_nodes_can_reshape() -> None:
    """The defer path stays as a safety net for a decision Slurm cannot express: a decision
    that puts the 2 x 2 job on four GPUs of n1 (the engine never does; made by hand here) is
    named unrealizable, since no two nodes have 2 GPUs free."""
    from optsched import Snapshot as Snap

    host = _shape_host({"n1": (0, 1, 2), "n2": tuple(range(8))}, [("3", 2, 2)])
    snap = Snap.model_validate(build_snapshot(host.cfg, host.observe()).snapshot)
    host.last_built = build_snapshot(host.cfg, host.observe())
    split = Decision.model_validate({
        "now": snap.now, "status": "feasible", "solver": {"backend": "x", "seconds": 0},
        "start": [{"job": "3", "allocation": [{"node": "n1", "gpu": g} for g in (3, 4, 5, 6)],
                   "on_loan": False}],
    })
    assert host.unrealizable(snap, split) == {
        "3": "decided on n1:4; it asks 2 GPUs on each of 2 node(s) and no such nodes are free"
    }


def test_after_the_last_redecision_leftover_starts_are_skipped_not_crashed_on() -> None:
    """A host that keeps naming a start unrealizable: the loop stops re-deciding after
    MAX_REDECIDE rounds and applies the last decision, which still names a job of the snapshot."""
    from optsched.hosts.loop import MAX_REDECIDE

    squeue = json.loads((DATA / "adapter_squeue.json").read_text())
    sinfo = json.loads((DATA / "adapter_sinfo.json").read_text())
    obs = Observation(parse_jobs(squeue), parse_nodes(sinfo), now=1796067800.0)
    calls: list[int] = []

    class Stubborn(SlurmHost):
        def observe(self) -> Observation:
            return obs

        def unrealizable(self, snapshot: Any, decision: Any) -> dict[str, str]:
            calls.append(1)
            return {decision.start[0].job: "never"} if decision.start else {}

        def apply(self, snapshot: Any, decision: Any, history: Any, report: Any) -> None:
            ids = {j.id for j in snapshot.jobs}
            assert all(s.job in ids for s in decision.start)

    store = Store(":memory:")
    r = HostLoop(Stubborn(_cfg(), store), store).step()
    assert not r.refused and len(calls) <= MAX_REDECIDE + 1
    assert sum(a.outcome == "deferred" for a in r.actions) <= MAX_REDECIDE


def test_reasons_reach_the_store_slurm_and_the_cli(adapter: Any, tmp_path: Path) -> None:
    """Every job the decision starts or queues has the text of ``optsched explain`` in the store,
    its summary in Slurm's AdminComment, and ``optsched slurm explain`` prints the stored text."""
    from typer.testing import CliRunner

    from optsched.cli import app
    from optsched.engine.explain import describe_job

    ids = [adapter.sbatch("-A", "beta", "--gres=gpu:a100:8", "--wrap", "sleep 300") for _ in range(3)]
    r = adapter.loop.step()
    assert not r.refused and len(r.decision.start) == 2 and len(r.decision.queue) == 1
    state = ClusterState.from_snapshot(r.snapshot)
    (waiting,) = r.decision.queue
    for j in ids:
        text = "\n".join(describe_job(state, r.decision, j))
        assert r.reasons[j] == text
        assert adapter.store.reason("test", j) == (r.seq, text)
    comment = adapter.jobs()[waiting].admin_comment
    assert comment.startswith(f"optsched: job {waiting} (tenant beta") and "queued (" in comment

    _wait_running(adapter, [s.job for s in r.decision.start])
    r = adapter.loop.step()  # the two run now: the waiting job's reason changes, and is written
    assert r.decision.queue == [waiting]
    assert adapter.jobs()[waiting].admin_comment.startswith(f"optsched: job {waiting}")
    assert "binding: capacity" in adapter.jobs()[waiting].admin_comment

    calls: list[tuple[str, ...]] = []
    run = adapter.host.slurm.run

    def counting(*args: str, **kw: Any) -> str:
        calls.append(args)
        return run(*args, **kw)

    adapter.host.slurm.run = counting  # type: ignore[method-assign]
    r2 = adapter.loop.step()  # nothing changed: no AdminComment is written again
    assert r2.reasons[waiting] == r.reasons[waiting]
    assert not any("update" in c for c in calls)

    cfg = tmp_path / "adapter.toml"
    cfg.write_text(CONFIG.format(store=adapter.db))
    out = CliRunner().invoke(app, ["slurm", "explain", waiting, "--config", str(cfg)])
    assert out.exit_code == 0, out.output
    assert out.output == f"epoch {r2.seq}:\n{r.reasons[waiting]}\n"
    missing = CliRunner().invoke(app, ["slurm", "explain", "999999", "--config", str(cfg)])
    assert missing.exit_code == 2 and "job '999999'" in missing.output


def test_publishing_reasons_writes_only_changes_and_survives_a_failing_scontrol() -> None:
    from optsched.hosts.slurmcli import SlurmError

    squeue = json.loads((DATA / "adapter_squeue.json").read_text())
    sinfo = json.loads((DATA / "adapter_sinfo.json").read_text())
    obs = Observation(parse_jobs(squeue), parse_nodes(sinfo), now=1796067800.0)
    written: list[tuple[int, str]] = []

    class Client:
        def set_admin_comment(self, job_id: int, text: str) -> None:
            if job_id == 2:
                raise SlurmError(["scontrol"], "Access/permission denied")
            written.append((job_id, text))

    ids = [str(j.job_id) for j in obs.jobs]
    host = SlurmHost(_cfg(), Store(":memory:"), Client())  # type: ignore[arg-type]
    host.last_obs = obs
    k = next(i for i, j in enumerate(obs.jobs) if str(j.job_id) not in ("1", "2"))
    same = dataclasses.replace(obs.jobs[k], admin_comment="optsched: unchanged")
    obs.jobs[k] = same
    reasons = {"1": "job 1 queued\nwhy", "2": "job 2 queued\nwhy", str(same.job_id): "unchanged", "gone": "x"}
    assert "gone" not in ids
    host.publish_reasons(Decision(now=0, status="feasible", solver={"backend": "x", "seconds": 0}), reasons)
    assert written == [(1, "optsched: job 1 queued why")]

    written.clear()
    off = SlurmHost(_cfg().model_copy(update={"publish_reasons": False}), Store(":memory:"), Client())  # type: ignore[arg-type]
    off.last_obs = obs
    off.publish_reasons(Decision(now=0, status="feasible", solver={"backend": "x", "seconds": 0}), reasons)
    assert written == []


class _Killed(BaseException):
    """The adapter dies (SIGKILL) right after Slurm carried an action out."""


class _FakeSlurm:
    """A two-node A100 cluster that does what scontrol is told; ``kill_after_start`` makes the
    adapter die right after the named job was released (its start done in Slurm)."""

    def __init__(self, pending: dict[int, int]) -> None:
        from optsched.hosts.slurmcli import GresAlloc

        self.state: dict[int, tuple[str, tuple[GresAlloc, ...]]] = {j: ("PENDING", ()) for j in pending}
        self.gpus = dict(pending)
        self.used: dict[str, list[int]] = {"n1": [], "n2": []}
        self.kill_after_start: int | None = None

    def jobs(self) -> list[Any]:
        from optsched.hosts.slurmcli import SlurmJob

        out = []
        for j, (state, alloc) in sorted(self.state.items()):
            out.append(SlurmJob(
                job_id=j, name=f"j{j}", account="beta", partition="a", user="u", state=state,
                reason="JobHeldUser" if state == "PENDING" else "None",
                priority=0 if state == "PENDING" else 1, num_nodes=1,
                nodes=tuple(a.node for a in alloc), required_nodes=(), gpus_per_node=0,
                gpus_per_job=self.gpus[j], gpu_type="a100", gpu_alloc=alloc, submit_time=100.0,
                start_time=150.0 if alloc else None, end_time=None, time_limit_min=None,
                restart_count=0, comment="", admin_comment="", system_comment="", exit_code=None,
            ))
        return out

    def nodes(self) -> list[Any]:
        from optsched.hosts.slurmcli import GresSpec, SlurmNode

        return [
            SlurmNode(n, "mixed" if used else "idle", (), ("a",), 64, 8 * bool(used),
                      (GresSpec("gpu", "a100", 8),), (GresSpec("gpu", "a100", len(used), tuple(used)),), "")
            for n, used in sorted(self.used.items())
        ]

    def start(self, job_id: int, nodes: list[str], *, confirm_s: float | None = None) -> None:
        from optsched.hosts.slurmcli import GresAlloc

        (node,) = nodes
        idx = [i for i in range(8) if i not in self.used[node]][: self.gpus[job_id]]
        self.used[node] += idx
        self.state[job_id] = ("RUNNING", (GresAlloc(node, "a100", len(idx), tuple(idx)),))
        if job_id == self.kill_after_start:
            raise _Killed

    def hold(self, job_id: int) -> None:
        pass

    def switches(self) -> dict[int, int]:
        return {}

    def topology(self) -> list[Any]:
        return []

    def requeue_hold(self, job_id: int) -> None:  # pragma: no cover - no preemption here
        raise AssertionError("no preemption expected")

    def set_admin_comment(self, job_id: int, text: str) -> None:
        pass


def test_a_start_is_recorded_before_slurm_acts_and_reconciled_after_a_kill(tmp_path: Path) -> None:
    """Killed right after Slurm released a job, the adapter has already committed the start's
    intent; the restarted adapter reconciles it from its fresh read: the start is ``ok`` and the
    job, started on loan, stays on loan (the next snapshot says so)."""
    db = str(tmp_path / "adapter.db")
    cfg = _cfg(db)
    slurm = _FakeSlurm({3: 8, 4: 8})  # beta (quota 8 A100) asks 16: one in quota, one on loan
    store = Store(db)
    loop = HostLoop(SlurmHost(cfg, store, slurm, sleep=lambda s: None), store)  # type: ignore[arg-type]
    snap = loop.host.snapshot(loop.history())
    decision = loop.decide(snap)
    loaned = next(s.job for s in decision.start if s.on_loan)
    slurm.kill_after_start = int(loaned)
    with pytest.raises(_Killed):
        loop.step()
    store.close()

    store = Store(db)  # the restart
    rows = store.actions("test", job=loaned)
    assert [(a.action, a.outcome) for a in rows] == [("start", "pending")]
    assert rows[0].reason.startswith("on loan on n")
    loop = HostLoop(SlurmHost(cfg, store, slurm, sleep=lambda s: None), store)  # type: ignore[arg-type]
    r = loop.step()
    assert not r.refused
    (row,) = store.actions("test", job=loaned)
    assert (row.seq, row.action, row.outcome) == (1, "start", "ok")
    said = "interrupted before its outcome was recorded: running at epoch 2's read"
    assert row.reason == f"{rows[0].reason}; {said}"
    assert store.pending_actions("test") == []
    assert store.get_meta("test", "on_loan") == {loaned: True}
    job = next(j for j in r.snapshot.jobs if j.id == loaned)
    assert job.state == "running" and job.on_loan is True


def test_an_intent_without_its_job_running_is_reconciled_as_skipped(tmp_path: Path) -> None:
    """A start whose intent was stored but whose job does not run at the next read (the adapter
    died before Slurm acted): ``skipped``, and the job is not counted on loan."""
    db = str(tmp_path / "adapter.db")
    slurm = _FakeSlurm({3: 8})
    store = Store(db)
    store.record_epoch("test", "{}", {"now": 1.0, "status": "optimal", "assurance_state": {},
                                      "start": [{"job": "3", "on_loan": True}]})
    rowid = store.begin_action("test", 1, ("3", "start", "pending", "on loan on n1:8"))
    slurm.used["n1"] = list(range(8))  # someone else holds n1; job 3 still pending
    loop = HostLoop(SlurmHost(_cfg(db), store, slurm, sleep=lambda s: None), store)  # type: ignore[arg-type]
    hist = loop.history()
    assert [i for i, _ in hist.pending] == [rowid] and hist.on_loan == {"3": True}
    settled = loop.reconcile(hist, loop.host.snapshot(hist))
    assert [(a.job, a.outcome) for a in settled] == [("3", "skipped")]
    (row,) = store.actions("test", job="3")
    assert row.outcome == "skipped" and "not running at epoch 2's read" in row.reason
    assert store.get_meta("test", "on_loan") == {}


# ---------------------------------------------------------------------------------- node shape
def _per_node(job: Any) -> dict[str, int]:
    return {n: len(ix) for n, ix in job.gpu_indices.items()}


def test_a_per_node_gres_job_starts_on_two_distinct_nodes_of_four_gpus(adapter: Any) -> None:
    """-N2 --gres=gpu:a100:4 with one GPU of n1 taken: the engine gets the shape (4 on each of
    2 nodes), decides two distinct nodes with 4 GPUs each, Slurm runs it exactly there, and
    nothing is deferred or reshaped."""
    small = adapter.sbatch("-A", "beta", "--gres=gpu:a100:1", "-w", "n1", "--wrap", "sleep 300")
    adapter.client.start(int(small), ["n1"])
    gang = adapter.sbatch("-A", "alpha", "-N2", "--gres=gpu:a100:4", "--wrap", "sleep 300")
    r = adapter.loop.step()
    assert not r.refused and check_decision(ClusterState.from_snapshot(r.snapshot), r.decision) == []
    job = next(j for j in r.snapshot.jobs if j.id == gang)
    assert (job.gpus, job.gpus_per_node, job.cpu_milli) == (8, 4, 1000)
    (start,) = [s for s in r.decision.start if s.job == gang]
    decided: dict[str, int] = {}
    for a in start.allocation:
        decided[a.node] = decided.get(a.node, 0) + 1
    assert decided == {"n1": 4, "n2": 4}
    jobs = _wait_running(adapter, [gang])
    assert jobs[gang].state == "RUNNING" and _per_node(jobs[gang]) == {"n1": 4, "n2": 4}
    acts = adapter.actions(gang)
    assert acts[-1][:2] == ("start", "ok") and "reshaped" not in acts[-1][2]
    assert all(a.outcome != "deferred" for a in r.actions)


def test_a_switches_1_job_runs_inside_one_switch(adapter: Any) -> None:
    """-N2 --gres=gpu:4 --switches=1 (any type): the snapshot has the switch tree Slurm reports
    (scontrol show topology) and the job a required leaf-switch domain; it runs on two nodes of
    one switch with 4 GPUs each."""
    j = adapter.sbatch("-A", "beta", "-N2", "--gres=gpu:4", "--switches=1", "--wrap", "sleep 300")
    r = adapter.loop.step()
    assert not r.refused
    assert r.snapshot.topology is not None and r.snapshot.topology.levels == ["switch1", "switch0"]
    leaf = {n.id: (n.topology or {})["switch0"] for n in r.snapshot.nodes}
    assert leaf == {"n1": "s1", "n2": "s1", "n3": "s2", "n4": "s2"}
    job = next(x for x in r.snapshot.jobs if x.id == j)
    assert job.topology is not None and (job.topology.level, job.topology.mode) == ("switch0", "required")
    jobs = _wait_running(adapter, [j])
    assert jobs[j].state == "RUNNING"
    assert len({leaf[n] for n in jobs[j].nodes}) == 1 and set(_per_node(jobs[j]).values()) == {4}
    assert adapter.client.run("scontrol", "show", "job", j).count("Switches=1@") == 1


@pytest.fixture(scope="module")
def crossed_cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A second dev cluster whose switches cross the GPU types: s1 over n1 (A100) and n3 (V100),
    s2 over n2 (A100) and n4 (V100)."""
    from tests.hosts.conftest import start_dev_cluster, stop_dev_cluster

    cluster = start_dev_cluster(tmp_path_factory.mktemp("crossed"), env={"SWITCHES": "s1:n1,n3 s2:n2,n4"})
    try:
        yield cluster
    finally:
        stop_dev_cluster(cluster)


def test_switches_1_is_honoured_where_no_switch_holds_the_job(crossed_cluster: Any, tmp_path: Path) -> None:
    """With the switches crossing the types, two A100 nodes are never under one switch: the job
    with --switches=1 is queued while the same job without it starts (on those two nodes)."""
    from tests.hosts.conftest import cancel_live_jobs

    a = _adapter(crossed_cluster, crossed_cluster.client, tmp_path)
    try:
        one = a.sbatch("-A", "beta", "-N2", "--gres=gpu:a100:4", "--switches=1", "--wrap", "sleep 300")
        free = a.sbatch("-A", "beta", "-N2", "--gres=gpu:a100:4", "--wrap", "sleep 300")
        r = a.loop.step()
        assert not r.refused
        # queued, never split over the two switches (the engine names it lower_priority today,
        # not topology: an engine matter)
        assert r.decision.queue == [one] and [s.job for s in r.decision.start] == [free]
        jobs = _wait_running(a, [free])
        assert jobs[free].state == "RUNNING" and sorted(jobs[free].nodes) == ["n1", "n2"]
        assert jobs[one].state == "PENDING" and jobs[one].held
    finally:
        a.close()
        cancel_live_jobs(crossed_cluster.client)


def test_shard_jobs_start_as_shares_of_one_gpu(adapter: Any) -> None:
    """--gres=shard:2 and --gres=shard:a100:1 (quarters of a GPU through gres/shard) reach the
    engine as fractional jobs (gpu_milli 500 and 250), start on the decided node, and run as
    shares of one GPU; the next epoch reads them back running with those shares and its
    decision passes the checker."""
    half = adapter.sbatch("-A", "beta", "--gres=shard:2", "--wrap", "sleep 300")
    quarter = adapter.sbatch("-A", "beta", "--gres=shard:a100:1", "--wrap", "sleep 300")
    r = adapter.loop.step()
    assert not r.refused
    milli = {j.id: (j.gpus, j.gpu_milli) for j in r.snapshot.jobs}
    assert milli == {half: (1, 500), quarter: (1, 250)}
    decided = {s.job: s.allocation[0].node for s in r.decision.start}
    assert set(decided) == {half, quarter}
    jobs = _wait_running(adapter, [half, quarter])
    for j in (half, quarter):
        assert jobs[j].state == "RUNNING" and jobs[j].nodes == (decided[j],)
        (alloc,) = jobs[j].shard_alloc
        assert len(alloc.indices) == 1 and adapter.actions(j)[-1][:2] == ("start", "ok")
    assert [a.count for a in jobs[half].shard_alloc] == [2]
    r2 = adapter.loop.step()
    assert not r2.refused
    assert check_decision(ClusterState.from_snapshot(r2.snapshot), r2.decision) == []
    running = {j.id: (j.state, j.gpu_milli) for j in r2.snapshot.jobs}
    assert running == {half: ("running", 500), quarter: ("running", 250)}

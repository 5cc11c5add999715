"""The Slurm adapter's node shape, without Slurm: what squeue/sinfo (recorded from the 22.05 dev
cluster with ``TopologyPlugin=topology/tree`` and ``gres/shard``) become in the snapshot.

The recordings: ``shape_squeue_pending.json`` holds four held jobs, ``--gres=shard:2`` (1),
``-N2 --gres=gpu:4 --switches=1`` (2), ``-N2 --gres=gpu:4 -c 3 --mem=2000`` (3) and
``--gres=shard:a100:1 -c 2 --mem-per-cpu=100`` (4); ``shape_squeue_running.json`` the same jobs
running (1 and 4 on GPU 0 of n1, 2 on n3+n4, 3 on n1+n2); ``shape_sinfo.json`` the nodes then
(8 GPUs and 32 shards each, 16 CPUs, 64000 MiB)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from optsched import ClusterState, Snapshot, check_decision, solve_epoch
from optsched.hosts.config import SlurmConfig, parse_config
from optsched.hosts.slurm import Observation, build_snapshot, node_domains, shard_room
from optsched.hosts.slurmcli import SlurmSwitch, parse_jobs, parse_nodes, parse_switches, parse_topology

DATA = Path(__file__).parent / "data"
TOPOLOGY = """\
SwitchName=s1 Level=0 LinkSpeed=1 Nodes=n1,n2
SwitchName=s2 Level=0 LinkSpeed=1 Nodes=n3,n4
SwitchName=top Level=1 LinkSpeed=1 Nodes=n[1-4] Switches=s1,s2
"""
SWITCHES = "1|0|\n4|0|\n2|1|\n3|0|\n"  # squeue -h -O 'JobID:|,ReqSwitch:|'

CONFIG = """
cluster = "test"
[gpu_types.a100]
name = "A100"
memory_gib = 80
[gpu_types.v100]
name = "V100"
memory_gib = 32
[[tenants]]
id = "x"
accounts = ["x"]
quota = { a100 = 16, v100 = 16 }
"""


def _cfg() -> SlurmConfig:
    return parse_config(CONFIG)


def _obs(squeue: str, *, topology: str = TOPOLOGY, switches: str = SWITCHES) -> Observation:
    jobs = parse_jobs(json.loads((DATA / squeue).read_text()))
    nodes = parse_nodes(json.loads((DATA / "shape_sinfo.json").read_text()))
    return Observation(jobs, nodes, now=1796363000.0, switches=parse_switches(switches),
                       topology=parse_topology(topology))


SHAPE_KEYS = ("gpus", "gpu_types", "gpus_per_node", "cpu_milli", "memory_mib", "gpu_milli", "topology")


def _shape(job: dict[str, Any]) -> dict[str, Any]:
    return {k: job[k] for k in SHAPE_KEYS if k in job}


def test_squeue_fields_of_the_shape() -> None:
    jobs = {j.job_id: j for j in parse_jobs(json.loads((DATA / "shape_squeue_pending.json").read_text()))}
    got = {i: (j.gpus, j.gpus_per_node, j.num_nodes, j.cpus_per_node, j.memory_per_node_mib,
               j.shards_per_node, j.shard_type, j.sharded) for i, j in jobs.items()}
    assert got == {
        1: (0, 0, 1, 1, None, 2, None, True),
        2: (8, 4, 2, 1, None, 0, None, False),
        3: (8, 4, 2, 3, 2000, 0, None, False),
        4: (0, 0, 1, 2, 200, 1, "a100", True),
    }
    running = {j.job_id: j for j in parse_jobs(json.loads((DATA / "shape_squeue_running.json").read_text()))}
    assert [(a.node, a.count, a.indices) for a in running[1].shard_alloc] == [("n1", 2, (0,))]
    assert running[3].allocation == (*(("n1", i) for i in (1, 2, 3, 4)), *(("n2", i) for i in range(4)))
    assert parse_switches(SWITCHES) == {2: 1}


def test_sinfo_fields_and_free_gpus_count_sharded_gpus_as_busy() -> None:
    nodes = {n.name: n for n in parse_nodes(json.loads((DATA / "shape_sinfo.json").read_text()))}
    n1 = nodes["n1"]
    assert (n1.cpus, n1.real_memory_mib, n1.gpus, n1.shards, n1.shards_per_gpu) == (16, 64000, 8, 32, 4)
    # GPUs 1-4 hold job 3, GPU 0 holds shards of jobs 1 and 4: 3 whole GPUs are free
    assert (n1.used_gpu_indices, n1.sharded_gpu_indices, n1.free_gpus) == ((1, 2, 3, 4), (0,), 3)
    assert nodes["n2"].free_gpus == 4
    jobs = parse_jobs(json.loads((DATA / "shape_squeue_running.json").read_text()))
    # GPU 0 of n1 has 4 - 2 - 1 = 1 shard left, GPUs 5-7 have 4 each
    assert shard_room(jobs, nodes.values()) == {"n1": 4, "n2": 4, "n3": 4, "n4": 4}
    busy = [_n1_with_seven_gpus_taken(n1)]
    assert shard_room(jobs, busy) == {"n1": 1}


def _n1_with_seven_gpus_taken(node: Any) -> Any:
    """n1 with every GPU but 0 taken whole: only GPU 0's shards are left."""
    import dataclasses

    from optsched.hosts.slurmcli import GresSpec

    used = (GresSpec("gpu", "a100", 7, tuple(range(1, 8))), GresSpec("shard", "a100", 1, (0,)))
    return dataclasses.replace(node, gres_used=used)


def test_topology_tree_becomes_levels_and_node_domains() -> None:
    switches = parse_topology(TOPOLOGY)
    assert switches == [
        SlurmSwitch("s1", 0, ("n1", "n2")),
        SlurmSwitch("s2", 0, ("n3", "n4")),
        SlurmSwitch("top", 1, ("n1", "n2", "n3", "n4"), ("s1", "s2")),
    ]
    assert parse_topology("No topology information available\n") == []
    levels, domains = node_domains(switches, ["n1", "n3", "n9"])
    assert levels == ["switch1", "switch0"]
    assert domains == {
        "n1": {"switch1": "top", "switch0": "s1"},
        "n3": {"switch1": "top", "switch0": "s2"},
        "n9": {"switch1": "n9", "switch0": "n9"},  # under no switch: a domain of its own
    }
    assert node_domains([], ["n1"]) == ([], {})


def test_pending_jobs_reach_the_snapshot_in_their_shape() -> None:
    built = build_snapshot(_cfg(), _obs("shape_squeue_pending.json"))
    assert built.skipped == []
    snap = built.snapshot
    assert snap["topology"] == {"levels": ["switch1", "switch0"]}
    assert [(n["id"], n["gpus"], n["cpu_milli"], n["memory_mib"], n["topology"]) for n in snap["nodes"]] == [
        ("n1", 8, 16000, 64000, {"switch1": "top", "switch0": "s1"}),
        ("n2", 8, 16000, 64000, {"switch1": "top", "switch0": "s1"}),
        ("n3", 8, 16000, 64000, {"switch1": "top", "switch0": "s2"}),
        ("n4", 8, 16000, 64000, {"switch1": "top", "switch0": "s2"}),
    ]
    jobs = {j["id"]: _shape(j) for j in snap["jobs"]}
    assert jobs == {
        "1": {"gpus": 1, "gpu_types": None, "cpu_milli": 1000, "gpu_milli": 500},
        "2": {"gpus": 8, "gpu_types": None, "gpus_per_node": 4, "cpu_milli": 1000,
              "topology": {"level": "switch0", "mode": "required"}},
        "3": {"gpus": 8, "gpu_types": None, "gpus_per_node": 4, "cpu_milli": 3000, "memory_mib": 2000},
        "4": {"gpus": 1, "gpu_types": ["A100"], "cpu_milli": 2000, "memory_mib": 200, "gpu_milli": 250},
    }
    assert built.shapes == {"2": (4, 2), "3": (4, 2)} and built.sharded == {"1", "4"}
    s = Snapshot.model_validate(snap)
    d = solve_epoch(s)
    assert check_decision(ClusterState.from_snapshot(s), d) == []
    placed = {x.job: sorted({a.node for a in x.allocation}) for x in d.start}
    assert placed["2"] in (["n1", "n2"], ["n3", "n4"])  # one switch
    assert all(len({a.node for a in x.allocation}) == 2 for x in d.start if x.job in ("2", "3"))


def test_running_jobs_keep_their_gpus_shards_and_host_resources() -> None:
    built = build_snapshot(_cfg(), _obs("shape_squeue_running.json"))
    assert built.skipped == []
    jobs = {j["id"]: j for j in built.snapshot["jobs"]}
    assert {i: (j["state"], _shape(j)) for i, j in jobs.items()} == {
        "1": ("running", {"gpus": 1, "gpu_types": None, "cpu_milli": 1000, "gpu_milli": 500}),
        "2": ("running", {"gpus": 8, "gpu_types": None, "gpus_per_node": 4, "cpu_milli": 1000,
                          "topology": {"level": "switch0", "mode": "required"}}),
        "3": ("running", {"gpus": 8, "gpu_types": None, "gpus_per_node": 4, "cpu_milli": 3000,
                          "memory_mib": 2000}),
        "4": ("running", {"gpus": 1, "gpu_types": ["A100"], "cpu_milli": 2000, "memory_mib": 200,
                          "gpu_milli": 250}),
    }
    assert jobs["1"]["allocation"] == [{"node": "n1", "gpu": 0}] == jobs["4"]["allocation"]
    s = Snapshot.model_validate(built.snapshot)
    d = solve_epoch(s)
    assert check_decision(ClusterState.from_snapshot(s), d) == [] and d.preempt == []


def test_no_topology_no_switch_request_and_too_many_shards_are_left_out() -> None:
    built = build_snapshot(_cfg(), _obs("shape_squeue_pending.json", topology="", switches=""))
    assert "topology" not in built.snapshot
    assert all("topology" not in n for n in built.snapshot["nodes"])
    assert all("topology" not in j for j in built.snapshot["jobs"])
    doc = json.loads((DATA / "shape_squeue_pending.json").read_text())
    doc["jobs"][0]["tres_per_node"] = "gres:shard:5"  # more than the 4 shards of one GPU
    obs = _obs("shape_squeue_pending.json")
    obs.jobs = parse_jobs(doc)
    built = build_snapshot(_cfg(), obs)
    assert built.skipped == [("1", "asks 5 shards of one GPU; its GPUs have 4 each")]


@pytest.mark.parametrize("shards,milli", [(1, 250), (3, 750), (4, 1000)])
def test_shards_become_a_share_of_one_gpu(shards: int, milli: int) -> None:
    doc = json.loads((DATA / "shape_squeue_pending.json").read_text())
    doc["jobs"][0]["tres_per_node"] = f"gres:shard:{shards}"
    obs = _obs("shape_squeue_pending.json")
    obs.jobs = parse_jobs(doc)
    job = next(j for j in build_snapshot(_cfg(), obs).snapshot["jobs"] if j["id"] == "1")
    assert (job["gpus"], job["gpu_milli"]) == (1, milli)


def test_shards_reported_on_a_gpu_a_whole_gpu_job_holds_are_left_out_not_the_epoch() -> None:
    # Slurm's report put the shards of jobs 1 and 4 on n1's GPU 0 while job 3 holds it whole
    # (a job ending, or a stale read): the snapshot would be invalid and the epoch lost; the
    # two jobs of shards are left out of this epoch, named with the reason, and it decides
    import dataclasses

    from optsched.hosts.slurmcli import GresAlloc

    obs = _obs("shape_squeue_running.json")
    whole = (GresAlloc("n1", "a100", 4, (0, 1, 2, 3)), GresAlloc("n2", "a100", 4, (0, 1, 2, 3)))
    obs.jobs = [dataclasses.replace(j, gpu_alloc=whole) if j.job_id == 3 else j for j in obs.jobs]
    built = build_snapshot(_cfg(), obs)
    reason = "its shards are reported on GPU n1/0, which whole-GPU job 3 holds (left out of this epoch)"
    assert built.skipped == [("1", reason), ("4", reason)]
    s = Snapshot.model_validate(built.snapshot)
    assert {j.id for j in s.jobs} == {"2", "3"}
    d = solve_epoch(s)
    assert check_decision(ClusterState.from_snapshot(s), d) == []

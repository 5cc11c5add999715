"""The arrival protocol (130% stop), determinism, an independent check of every placement, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from optsched.cli import main
from optsched.sim.openb.optsched_policy import OptschedEpochs
from optsched.sim.openb.policies import BASELINES
from optsched.sim.openb.protocol import arrivals, replay, tie_order
from optsched.sim.openb.reader import MILLI, Nodes, Pods, read_nodes, read_pods


def check_placements(nodes: Nodes, seq: Pods, placements: list[tuple[int, tuple[int, ...]] | None]) -> None:
    """Independent of ClusterState: capacities per node and GPU, shapes and GPU models."""
    cpu = np.zeros(len(nodes), dtype=np.int64)
    mem = np.zeros(len(nodes), dtype=np.int64)
    gpu: dict[tuple[int, int], int] = {}
    for i, choice in enumerate(placements):
        if choice is None:
            continue
        node, gpus = choice
        cpu[node] += seq.cpu_milli[i]
        mem[node] += seq.memory_mib[i]
        assert len(gpus) == seq.num_gpu[i] and len(set(gpus)) == len(gpus)
        if seq.gpu_spec[i]:
            assert nodes.models[node] in seq.gpu_spec[i]
        for g in gpus:
            assert 0 <= g < nodes.gpus[node]
            gpu[(node, g)] = gpu.get((node, g), 0) + int(seq.gpu_milli[i])
    assert (cpu <= nodes.cpu_milli).all() and (mem <= nodes.memory_mib).all()
    assert all(v <= MILLI for v in gpu.values())


def test_arrivals_stop_at_130_percent(nodes_csv: Path, pods_csv: Path) -> None:
    nodes, pods = read_nodes(nodes_csv), read_pods(pods_csv)
    seq = arrivals(pods, nodes.gpu_capacity_milli, order="trace", seed=3)
    total = int(seq.gpu_request_milli.sum())
    assert seq.names[: len(pods)] == pods.names  # the trace first, in creation order
    assert total <= 1.3 * 11000
    assert len(seq) > len(pods)  # 5,200 milli of trace, tuned up with resampled pods
    r = replay(nodes, seq, BASELINES["fgd"](), workload=pods)
    assert r.curve.arrived_pct[-1] == pytest.approx(100 * total / 11000)
    assert r.placed + r.failed == len(seq)
    assert r.curve.alloc_ratio[-1] == pytest.approx(1 - r.curve.unallocated_gpus[-1] / 11)
    assert all(a <= b for a, b in zip(r.curve.arrived_pct, r.curve.arrived_pct[1:], strict=False))
    small = arrivals(pods, nodes.gpu_capacity_milli, ratio=0.3, order="trace", seed=3)
    assert int(small.gpu_request_milli.sum()) <= 0.3 * 11000 < 5200  # tuned down by removal


@pytest.mark.parametrize(
    "policy", ["random", "dotprod", "clustering", "packing", "bestfit", "fgd", "optsched-1", "optsched"]
)
def test_deterministic_and_checked(nodes_csv: Path, pods_csv: Path, policy: str) -> None:
    nodes, pods = read_nodes(nodes_csv), read_pods(pods_csv)
    seq = arrivals(pods, nodes.gpu_capacity_milli, seed=1)
    runs = []
    for _ in range(2):
        pol = OptschedEpochs(batch=4, work_limit=1.0) if policy == "optsched" else BASELINES[policy]()
        runs.append(replay(nodes, seq, pol, workload=pods, seed=1))
    assert runs[0].placements == runs[1].placements
    assert runs[0].curve.alloc_ratio == runs[1].curve.alloc_ratio
    check_placements(nodes, seq, runs[0].placements)


def test_cli_replay_writes_table(tmp_path: Path, nodes_csv: Path, pods_csv: Path) -> None:
    out = tmp_path / "out"
    rc = main(
        [
            "openb",
            "replay",
            "--pods",
            str(pods_csv),
            "--nodes",
            str(nodes_csv),
            "--policies",
            "fgd,bestfit",
            "--seeds",
            "0,1",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    doc = json.loads((out / "summary.json").read_text())
    assert [(r["policy"], r["seed"]) for r in doc["rows"]] == [
        ("fgd", 0),
        ("bestfit", 0),
        ("fgd", 1),
        ("bestfit", 1),
    ]
    assert doc["settings"]["ratio"] == 1.3 and doc["plots"] == ["openb_default.png"]
    assert doc["settings"]["node_order"] == "shuffle"
    assert (out / "openb_default.png").stat().st_size > 0
    assert "| default | fgd | 0 |" in (out / "summary.md").read_text()


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--pods", "MISSING"], "--pods"),
        (["--nodes", "MISSING"], "--nodes"),
        (["--policies", "fgd,magic"], "--policies"),
        (["--seeds", "0,x"], "--seeds"),
        (["--ratio", "0"], "--ratio"),
        (["--order", "sideways"], "--order"),
        (["--node-order", "sorted"], "--node-order"),
    ],
)
def test_cli_errors_name_the_option(
    tmp_path: Path,
    nodes_csv: Path,
    pods_csv: Path,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    option: str,
) -> None:
    base = {"--pods": str(pods_csv), "--nodes": str(nodes_csv), "--out": str(tmp_path / "out")}
    opts = dict(base)
    opts[args[0]] = args[1] if args[1] != "MISSING" else str(tmp_path / "missing.csv")
    argv = ["openb", "replay"] + [x for kv in opts.items() for x in kv]
    assert main(argv) == 2
    assert f"error: {option}:" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_cli_bad_file_exits_2_naming_the_column(
    tmp_path: Path, nodes_csv: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "openb_pod_list_default.csv"
    bad.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,abc\n")
    rc = main(
        ["openb", "replay", "--pods", str(bad), "--nodes", str(nodes_csv), "--out", str(tmp_path / "out")]
    )
    assert rc == 2
    assert "row 2:gpu_milli" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def _many_nodes(n: int) -> Nodes:
    return Nodes(
        names=tuple(f"n{i:03d}" for i in range(n)),
        cpu_milli=np.full(n, 32000, dtype=np.int64),
        memory_mib=np.full(n, 65536, dtype=np.int64),
        gpus=np.array([1 + i % 8 for i in range(n)], dtype=np.int64),
        models=tuple("T4" if i % 2 else "V100M16" for i in range(n)),
    )


def test_tie_order_is_a_seeded_permutation() -> None:
    nodes = _many_nodes(40)
    assert tie_order(nodes, 3, "list") is nodes
    a, b, c = tie_order(nodes, 3), tie_order(nodes, 3), tie_order(nodes, 4)
    assert a.names == b.names and a.names != c.names and a.names != nodes.names
    assert sorted(a.names) == list(nodes.names)
    # every column moves with its node
    row = {nodes.names[i]: (int(nodes.gpus[i]), nodes.models[i]) for i in range(len(nodes))}
    assert all(row[a.names[i]] == (int(a.gpus[i]), a.models[i]) for i in range(len(a)))
    with pytest.raises(ValueError, match="node_order"):
        tie_order(nodes, 0, "sorted")


def test_ties_go_to_the_first_node_of_the_order() -> None:
    """Eight idle identical nodes: FGD's first pod lands on the first node of the order used."""
    nodes = Nodes(
        names=tuple(f"n{i}" for i in range(8)),
        cpu_milli=np.full(8, 64000, dtype=np.int64),
        memory_mib=np.full(8, 131072, dtype=np.int64),
        gpus=np.full(8, 8, dtype=np.int64),
        models=("V100M16",) * 8,
    )
    pods = Pods(
        names=("p0",),
        cpu_milli=np.array([4000]),
        memory_mib=np.array([8192]),
        num_gpu=np.array([1]),
        gpu_milli=np.array([1000]),
        gpu_spec=(frozenset(),),
        qos=("LS",),
        creation_time=np.array([0]),
    )
    for order in ("list", "shuffle"):
        ordered = tie_order(nodes, 5, order)
        r = replay(ordered, pods, BASELINES["fgd"](), seed=5)
        assert r.placements[0] is not None and ordered.names[r.placements[0][0]] == ordered.names[0]
    assert tie_order(nodes, 5).names[0] != "n0"  # this seed's order starts elsewhere

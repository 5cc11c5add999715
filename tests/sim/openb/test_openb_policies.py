"""Each policy's choice on a hand-made 3-node cluster, and the fragmentation measure by hand.

Cluster: n0 (2 T4, 32 CPUs) runs a 500-milli share on GPU 0 (free [500, 1000], 28 CPUs left);
n1 (8 V100M16, 64 CPUs) runs one whole-GPU pod on GPU 0 (56 CPUs left); n2 (1 T4) is idle.
Target workload: A = share 400 milli / 2 CPUs (p 1/2), B = one whole GPU / 4 CPUs (p 1/3),
C = CPU-only 1 CPU (p 1/6).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from optsched.sim.openb.cluster import ClusterState
from optsched.sim.openb.frag import FragTracker, node_frag, typical_pods
from optsched.sim.openb.optsched_policy import OptschedEpochs, expected_waste
from optsched.sim.openb.policies import BASELINES, Pod, sigmoid_score
from optsched.sim.openb.reader import read_nodes, read_pods

WORKLOAD = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
    "a1,2000,4096,1,400\na2,2000,4096,1,400\na3,2000,4096,1,400\n"
    "b1,4000,8192,1,1000\nb2,4000,8192,1,1000\nc1,1000,2048,0,0\n"
)
SHARE = Pod(cpu=2000, mem=4096, num_gpu=1, gpu_milli=400, spec=frozenset())


@pytest.fixture
def setup(tmp_path: Path, nodes_csv: Path) -> tuple[ClusterState, FragTracker]:
    wl = tmp_path / "wl.csv"
    wl.write_text(WORKLOAD)
    state = ClusterState.empty(read_nodes(nodes_csv))
    state.place(0, 4000, 8192, 1, 500, (0,))
    state.place(1, 8000, 8192, 1, 1000, (0,))
    tp = typical_pods(read_pods(wl), state.model_names)
    return state, FragTracker(tp, state)


def test_typical_pods_popularity(tmp_path: Path) -> None:
    wl = tmp_path / "wl.csv"
    wl.write_text(WORKLOAD)
    pods = read_pods(wl)
    tp = typical_pods(pods, ("T4", "V100M16"))
    assert tp.milli.tolist() == [400, 1000, 0]
    assert np.allclose(tp.p, [3 / 6, 2 / 6, 1 / 6])
    top = typical_pods(pods, ("T4", "V100M16"), popularity=0.8)  # A and B cover 5/6 >= 0.8
    assert top.milli.tolist() == [400, 1000]
    assert np.allclose(top.p, [0.6, 0.4])


def test_fragmentation_by_hand(setup: tuple[ClusterState, FragTracker]) -> None:
    state, fr = setup
    # n0 [500, 1000]: A fits (0 frag), B fits with 500 stranded below 1000, C sees all 1500
    # n1 [0, 1000 x 7]: A and B fit with nothing stranded, C sees 7000; n2 [1000]: C sees 1000
    assert fr.frag.tolist() == pytest.approx([500 / 3 + 1500 / 6, 7000 / 6, 1000 / 6])
    assert fr.cluster() == pytest.approx(500 / 3 + 9500 / 6)
    # n2 with 1 CPU left: A and B lack CPU, so all of its free GPU is fragmented for every type
    cpu = np.array([1000], dtype=np.int64)
    gpu = state.gpu_free[2:3]
    assert node_frag(fr.tp, cpu, gpu, fr.model[2:3]).tolist() == pytest.approx([1000.0])
    assert sigmoid_score(np.array([-150.0, 0.0, 300.0])).tolist() == [53, 50, 42]
    # FGD's simulator truncates sigmoid * 100: rounding noise scores 50 below 0 and 49 above it
    assert sigmoid_score(np.array([-1e-12, 0.0, 1e-12, 2e-3])).tolist() == [50, 50, 49, 49]


def _go_node_frag(tp: object, cpu: int, gpu: list[int], model: int) -> float:
    """FGD's simulator's ``NodeGpuShareFragAmountScore`` for one node, transcribed scalar by
    scalar: per type, its fragment goes to its class's running sum; classes summed in order."""
    data = [0.0] * 7  # q1 lack both, q2 lack GPU, q3 satisfied, q4 lack CPU, xl, xr, no access
    total = sum(gpu)
    for t in range(len(tp.p)):  # type: ignore[attr-defined]
        freq, milli = float(tp.p[t]), int(tp.milli[t])  # type: ignore[attr-defined]
        need_cpu, num = int(tp.cpu[t]), int(tp.num[t])  # type: ignore[attr-defined]
        if milli == 0:
            data[4 if cpu >= need_cpu else 5] += freq * float(total)
        elif not tp.access[t, model]:  # type: ignore[attr-defined]
            data[6] += freq * float(total)
        elif sum(1 for g in gpu if g >= milli) >= num:
            if cpu >= need_cpu:
                data[1] += freq * float(sum(g for g in gpu if g < milli))
            else:
                data[3] += freq * float(total)
        else:
            data[1 if cpu >= need_cpu else 0] += freq * float(total)
    out = 0.0
    for i in (0, 1, 3, 4, 5, 6):
        out += data[i]
    return out


def test_fragmentation_has_the_simulators_bits(tmp_path: Path) -> None:
    """Bit for bit the simulator's sum (``==``, not approx), on random nodes and a workload of
    popularities that do not add up exactly; and the case it decides: a CPU-only pod on a node
    whose types only move from "CPU satisfied" to "lacks CPU" changes the value by rounding
    alone, and the score is the simulator's 49 or 50 for those bits."""
    rng = np.random.default_rng(3)
    rows = ["name,cpu_milli,memory_mib,num_gpu,gpu_milli"]
    for i in range(97):
        kind = rng.integers(4)
        cpu = int(rng.choice([1000, 3152, 4000, 8000, 12500, 16000]))
        num, milli = [(0, 0), (1, int(rng.choice([160, 230, 470, 810]))), (1, 1000), (2, 1000)][kind]
        rows.append(f"p{i},{cpu},1024,{num},{milli}")
    wl = tmp_path / "wl.csv"
    wl.write_text("\n".join(rows) + "\n")
    tp = typical_pods(read_pods(wl), ("T4", "V100M16"), popularity=0.9)
    n = 300
    cpu = rng.integers(0, 40000, n).astype(np.int64)
    gpu = rng.choice([0, 60, 90, 190, 530, 1000], size=(n, 8)).astype(np.int64)
    model = rng.integers(0, 3, n).astype(np.int64)
    got = node_frag(tp, cpu, gpu, model, exact=True)
    assert got == pytest.approx(node_frag(tp, cpu, gpu, model), rel=1e-12)
    want = [_go_node_frag(tp, int(cpu[i]), gpu[i].tolist(), int(model[i])) for i in range(n)]
    assert got.tolist() == want
    # a CPU-only pod of 12.5 CPUs on a node with 18 CPUs free and GPU leftovers no type fits:
    # types only cross from satisfied to lacking CPU (or from lacking GPU to lacking both), so
    # the value moves in its bits alone
    noisy = 0
    scores: set[int] = set()
    rows_ = rng.choice([0, 60, 90, 150], size=(2000, 8)).tolist()
    for i, row in enumerate(rows_):
        before = _go_node_frag(tp, 18000, row, i % 3)
        after = _go_node_frag(tp, 18000 - 12500, row, i % 3)
        if after != before and abs(after - before) < 1e-6:
            noisy += 1
            go = int((1.0 / (1.0 + math.exp(-((before - after) / 1000)))) * 100)
            assert sigmoid_score(np.array([after - before])).tolist() == [go]
            scores.add(go)
    assert noisy > 0 and scores == {49, 50}


@pytest.mark.parametrize(
    ("policy", "node", "gpus"),
    [
        ("dotprod", 0, (0,)),  # scores 99, 97, 99: tie goes to the first node; best-fit GPU 0
        ("clustering", 0, (0,)),  # 75 + 20 (only shares there), 0 + 3, 25 + 21
        ("packing", 0, (0,)),  # share on a shared GPU 95, a free GPU of a used node 49, idle 32
        ("bestfit", 2, (0,)),  # 82, 37, 90
        ("fgd", 0, (0,)),  # n0 GPU 0: frag -150 -> 53; every other option raises it
        ("optsched-1", 0, (0,)),
    ],
)
def test_choice_on_three_nodes(
    setup: tuple[ClusterState, FragTracker], policy: str, node: int, gpus: tuple[int, ...]
) -> None:
    state, fr = setup
    got = BASELINES[policy]().place(state, fr, [SHARE], np.random.default_rng(0))
    assert got == [(node, gpus)]


def test_fgd_deltas_by_hand(setup: tuple[ClusterState, FragTracker]) -> None:
    _, fr = setup
    nodes = np.array([0, 0, 1, 2])
    gpus = np.array([0, 1, 1, 0])
    after = fr.share_after(nodes, gpus, 2000, 400)
    # n0 GPU0 -> [100, 1000]: A strands the 100 (p 1/2), B strands 100 (1/3), C sees 1100 (1/6)
    # n0 GPU1 -> [500, 600]: A 0, B cannot fit -> 1100, C 1100; n1 -> [0, 600, 1000 x 6]: B strands 600
    expected = [100 / 2 + 100 / 3 + 1100 / 6, 1100 / 3 + 1100 / 6, 600 / 3 + 6600 / 6, 600 / 3 + 600 / 6]
    assert after.tolist() == pytest.approx(expected)


def test_random_is_seeded(setup: tuple[ClusterState, FragTracker]) -> None:
    state, fr = setup
    picks = [BASELINES["random"]().place(state, fr, [SHARE], np.random.default_rng(7))[0] for _ in range(3)]
    assert picks[0] == picks[1] == picks[2]
    assert picks[0] is not None and picks[0][0] in (0, 1, 2)


def test_gpu_spec_restricts_every_policy(setup: tuple[ClusterState, FragTracker]) -> None:
    state, fr = setup
    pod = Pod(cpu=2000, mem=4096, num_gpu=1, gpu_milli=400, spec=frozenset({"V100M16"}))
    for name, cls in BASELINES.items():
        got = cls().place(state, fr, [pod], np.random.default_rng(0))[0]
        assert got is not None and got[0] == 1, name
    too_big = Pod(cpu=2000, mem=4096, num_gpu=8, gpu_milli=1000, spec=frozenset())
    assert BASELINES["fgd"]().place(state, fr, [too_big], np.random.default_rng(0)) == [None]


def test_optsched_epoch_places_batch_jointly(setup: tuple[ClusterState, FragTracker]) -> None:
    state, fr = setup
    whole = Pod(cpu=4000, mem=8192, num_gpu=1, gpu_milli=1000, spec=frozenset())
    pol = OptschedEpochs(batch=2, work_limit=1.0)
    got = pol.place(state, fr, [SHARE, whole], np.random.default_rng(0))
    assert got[0] == (0, (0,))  # the share on the shared GPU, as FGD
    assert got[1] is not None and got[1][0] != 0  # one pod per node per epoch
    assert pol.notes["solves"] == 1 and pol.notes["optimal"] == 1 and pol.notes["fallback_batches"] == 0


def test_expected_waste_by_hand(setup: tuple[ClusterState, FragTracker]) -> None:
    """GPU types A (400 milli, p 1/2) and B (1000, p 1/3); the CPU-only type is left out."""
    _, fr = setup
    w = expected_waste(fr.tp)  # p0 0.1: A surely comes wherever it fits
    assert w[399] == 399 and w[0] == 0
    assert w[500] == pytest.approx(100)  # 500 -> A -> 100, which nothing fits
    assert w[800] == pytest.approx(0)  # two A
    assert w[1000] == pytest.approx((1 / 2 * w[600] + 1 / 3 * 0) / (5 / 6))  # A (-> 200) or B
    slow = expected_waste(fr.tp, p0=1.0)  # A comes with probability 1/2 only
    assert slow[500] == pytest.approx(0.5 * 500 + 0.5 * 100)


def test_optsched_takes_fuller_node_among_equal_fgd_scores(tmp_path: Path) -> None:
    """optsched ranks options by FGD's integer score, then by the GPU left on the node.

    n0: 1 T4, 3 CPUs; n1: 2 T4, 32 CPUs, both idle. Target workload (every type kept): A = share
    600 milli / 2 CPUs (p 1/30), C = CPU-only (p 29/30). A 280-milli share with 2 CPUs:
    n1 -> [720, 1000]: A still fits, C sees 1720 instead of 2000: change -29/30 x 280 = -270.7;
    n0 -> [720] with 1 CPU left: A no longer fits (its 720 becomes a fragment) and C sees 720
    instead of 1000: change -270.7 + 720/30 = -246.7. Both score 56; the exact change prefers n1,
    the fuller node (720 milli left, not 1720) wins the tie.
    """
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,3000,65536,1,T4\nn1,32000,65536,2,T4\n")
    wl = tmp_path / "wl.csv"
    wl.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\na1,2000,1024,1,600\n"
        + "".join(f"c{i},1000,1024,0,0\n" for i in range(29))
    )
    state = ClusterState.empty(read_nodes(nodes))
    fr = FragTracker(typical_pods(read_pods(wl), state.model_names, popularity=1.0), state)
    pod = Pod(cpu=2000, mem=1024, num_gpu=1, gpu_milli=280, spec=frozenset())
    after = fr.share_after(np.array([0, 1]), np.array([0, 0]), 2000, 280)
    delta = after - fr.frag[[0, 1]]
    assert delta.tolist() == pytest.approx([-29 / 30 * 280 + 720 / 30, -29 / 30 * 280])
    assert sigmoid_score(delta).tolist() == [56, 56]
    rng = np.random.default_rng(0)
    assert BASELINES["optsched-1"]().place(state, fr, [pod], rng) == [(0, (0,))]
    assert OptschedEpochs(batch=1, work_limit=1.0).place(state, fr, [pod], rng) == [(0, (0,))]
    assert BASELINES["fgd"]().place(state, fr, [pod], rng) == [(0, (0,))]  # first node among equal scores

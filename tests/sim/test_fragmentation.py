"""Free, fragmented and stranded GPUs after a decision (the simulator's node-shape report)."""

from __future__ import annotations

import math

import pytest

from optsched.sim.cluster import EventLog, HeldGpus, free_gpu_shape
from optsched.sim.metrics import decision_share

NODE_TYPE = ["A", "A", "B"]
NODE_GPUS = [8, 8, 4]
LARGEST = {"A": 8, "B": 4}
# n0 holds 6 GPUs (2 free), n1 none (8 free), n2 none (4 free)
FREE = [2, 8, 4]


def test_held_gpus_count_the_gpus_held_per_node_as_they_change() -> None:
    held = HeldGpus(3)
    for g in range(8):
        held[(0, g)] = "a"
    held[(2, 1)] = "b"
    held[(0, 3)] = "c"  # a new holder of a held GPU: still one GPU held
    del held[(0, 7)]
    assert held.per_node == [7, 0, 1]
    assert held.free(NODE_GPUS) == [1, 8, 3]
    del held[(0, 0)]
    held[(1, 5)] = "d"
    assert held.free(NODE_GPUS) == [2, 7, 3]
    assert held.per_node == [sum(1 for n, _ in held if n == k) for k in range(3)]
    # the dict methods that would bypass the counts refuse, and change nothing
    for change in (lambda: held.pop((2, 1)), lambda: held.update({(1, 0): "e"}), held.clear,
                   lambda: held.setdefault((1, 1), "e"), held.popitem):
        with pytest.raises(TypeError, match="per_node"):
            change()
    assert held.per_node == [6, 1, 1] and len(held) == 8


def test_fgd_share_counts_the_waiting_jobs_whose_piece_a_node_cannot_hold() -> None:
    # on A: three 4-GPU jobs and one 1-GPU job wait; n0's 2 free GPUs hold only the 1-GPU job
    waiting = {("t", ("A",), 4): 3, ("u", ("A",), 1): 1}
    assert free_gpu_shape(FREE, NODE_TYPE, LARGEST, waiting) == (14, 2 * 3 / 4, 0)


def test_gpus_no_waiting_piece_fits_are_stranded() -> None:
    # a 16-GPU job on A runs on two whole nodes (pieces of 8): n0's 2 free GPUs are of no use;
    # on B it would run as 4 + 4 + 4 + 4, and n2's 4 free GPUs hold a piece
    waiting = {("t", ("A", "B"), 16): 1}
    assert free_gpu_shape(FREE, NODE_TYPE, LARGEST, waiting) == (14, 2.0, 2)


def test_nothing_waiting_nothing_fragmented() -> None:
    assert free_gpu_shape(FREE, NODE_TYPE, LARGEST, {}) == (14, 0.0, 0)


def test_decision_share_holds_each_value_until_the_next_decision() -> None:
    log = EventLog(trace="x", policy="p", seed=0, capacity=10, window=(0.0, 100.0), tenants={},
                   restart_overhead_s=0.0)
    log.decisions = {"t": [0.0, 50.0, 80.0], "stranded_gpus": [4, 0, 2]}
    # 4 GPUs for 50 s, 0 for 30 s, 2 for the last 20 s of the window
    assert decision_share(log, "stranded_gpus") == pytest.approx((4 * 50 + 2 * 20) / (10 * 100))
    assert math.isnan(decision_share(log, "fragmented_gpus"))

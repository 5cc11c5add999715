"""A partitioned epoch follows the node-loss rule of one model: in the decision that stops
guaranteed jobs on a lost node, the coordination step starts no best-effort job on the types
they restart on (it would be stopped again for them next epoch).

The cases are generated snapshots in which every fifteenth node holding a guaranteed job is
lost; before the merge kept the rule, each of them started such a job.
"""

from __future__ import annotations

import pytest

from optsched import check_decision, solve_epoch
from optsched.engine.backends.base import SolveParams
from optsched.engine.node_loss import restart_types
from optsched.engine.state import ClusterState, parse_snapshot
from optsched.instances import generate
from optsched.predict.fallback import EstimatePredictor


def _with_lost_nodes(seed: int) -> ClusterState:
    snap = generate("venus", seed)
    state = ClusterState.from_snapshot(parse_snapshot(snap))
    holders = sorted(
        {
            r.node
            for j in state.running()
            if j.qos == "guaranteed" and not j.on_loan and j.allocation
            for r in j.allocation
        }
    )
    down = set(holders[::15])
    for n in snap["nodes"]:
        if n["id"] in down:
            n["available"] = False
    return ClusterState.from_snapshot(parse_snapshot(snap))


@pytest.mark.parametrize(("seed", "parts"), [(1, 2), (1, 4), (3, 4)])
def test_the_merge_starts_no_best_effort_job_on_restart_types(
    seed: int, parts: int
) -> None:
    state = _with_lost_nodes(seed)
    restart = restart_types(state)
    assert restart  # the loss stops guaranteed jobs
    params = SolveParams(backend="highs", time_limit_s=30.0)
    d = solve_epoch(state, params=params, partitions=parts, executor="serial", predictor=EstimatePredictor())
    assert check_decision(state, d) == []
    assert d.solver.backend.startswith("partitioned")  # merged, not solved as one model
    on_restart = [s for s in d.start if state.node_type(s.allocation[0].node) in restart]
    assert [s.job for s in on_restart if state.job(s.job).qos == "best_effort" and not s.colocated_with] == []

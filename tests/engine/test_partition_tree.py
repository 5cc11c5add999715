"""A partitioned epoch on a quota-tree snapshot merges without falling back: the merge derives
its loans with the one quota-tree-aware rule (:func:`optsched.engine.ledger.derive_loans`), so
no loan breaks a group's borrow or lend limit and the checker accepts the merged decision."""

from __future__ import annotations

import pytest

from optsched import solve_epoch
from optsched.engine.backends.base import SolveParams
from optsched.engine.check import check_decision
from optsched.engine.state import load_state
from optsched.instances import generate

GREEDY = SolveParams(backend="greedy", time_limit_s=60.0)


@pytest.mark.parametrize("seed", [1, 4])
def test_partitioned_epoch_on_a_quota_tree_merges_without_fallback(seed: int) -> None:
    snap = generate("venus", seed, tree=True)
    state = load_state(snap)
    assert state.tree is not None and state.tree.groups  # the snapshot has quota groups
    d = solve_epoch(state, params=GREEDY, partitions=2, executor="serial")
    assert d.solver.backend == "partitioned:greedy"  # the merge was not rejected
    assert not [n for n in d.solver.notes if n.startswith("partitions:")]
    assert d.solver.fallback_reason == "greedy backend requested"  # the parts' own label only
    assert d.start and d.loans  # the merge started jobs and lent quota
    assert check_decision(load_state(snap), d) == []

"""One test per constraint family of the epoch's linear model (``optsched/engine/formulation.py``),
solved by the two in-process exact backends (``highs``, ``cpsat``) on tiny problems whose
optimum is computed by hand: which members start on which type, inside quota or on loan,
which jobs are preempted, and the objective value (``optsched.engine.objective.value``).

Each scenario is built so that dropping the family under test would change the optimum (the
"without the row" value is given in a comment), so a missing or loosened row fails here.
"""

from __future__ import annotations

from typing import Any

import pytest

from optsched.engine import assurance as asr
from optsched.engine.backends import get_backend
from optsched.engine.backends.base import SolveParams, SolveStatus
from optsched.engine.candidates import build_problem
from optsched.engine.check import check_decision, over_quota_note
from optsched.engine.decode import to_decision
from optsched.engine.formulation import CONSTRAINT_FAMILIES, build_model, from_assignment, is_feasible
from optsched.engine.objective import value
from optsched.engine.problem import Assignment, EpochProblem, GuestCandidate
from optsched.engine.state import ClusterState, load_state
from optsched.predict.fallback import EstimatePredictor
from optsched.schema.decision import Decision, SolverInfo
from optsched.testing import cluster, pending, running
from tests.builders import epoch_problem, over_quota_snapshot, pending_class, running_item

EXACT = ["highs", "cpsat"]
PRED = EstimatePredictor()
BORROW = 0.01  # ObjectiveWeights.borrow_penalty: per GPU borrowed


# --- hand-built problems (one GPU type unless said otherwise) --------------------------------


cls = pending_class
run = running_item
problem = epoch_problem


def solve(p: EpochProblem, backend: str) -> Assignment:
    res = get_backend(backend).solve(p, SolveParams(backend=backend, time_limit_s=2.0, work_s=1.0))
    assert res.status == SolveStatus.OPTIMAL, res.detail
    assert res.assignment is not None
    assert "wall-clock" not in res.detail
    # the reported objective is the one formula, and the model's bound agrees with it
    assert res.objective == pytest.approx(value(p, res.assignment), abs=1e-9)
    if res.bound is not None:
        assert res.bound == pytest.approx(res.objective, rel=1e-3, abs=1e-3)
    return res.assignment


def test_the_model_has_exactly_the_five_documented_families() -> None:
    assert {f.__name__ for f in CONSTRAINT_FAMILIES} == {
        "add_gpu_sharing",
        "add_preemption_rules",
        "add_capacity_and_loans",
        "add_node_shape",
        "add_start_or_queue",
    }


# --- capacity ------------------------------------------------------------------------------


@pytest.mark.parametrize("exact", EXACT)
def test_capacity_two_classes_compete_for_the_free_gpus(exact: str) -> None:
    # 4 free GPUs; tenant 0: one 3-GPU job worth 5; tenant 1: two 2-GPU jobs worth 4 and 3.
    # 3 + 2 > 4: either the 3-GPU job (5) or both 2-GPU jobs (7). Without the capacity row: 12.
    p = problem(4, (4, 4), (cls(0, 3, (5.0,)), cls(1, 2, (4.0, 3.0))))
    a = solve(p, exact)
    assert a.starts == {1: {(0, False): 2}}
    assert a.preempt == set() and a.guests == {}
    assert value(p, a) == pytest.approx(7.0)


@pytest.mark.parametrize("exact", EXACT)
def test_capacity_counts_gpus_held_by_jobs_that_keep_running(exact: str) -> None:
    # 6 GPUs, 3 held by a job that must keep running: of two 2-GPU jobs (9, 8) only one fits
    p = problem(6, (6,), (cls(0, 2, (9.0, 8.0)),), (run("keep", 0, 3),))
    a = solve(p, exact)
    assert a.starts == {0: {(0, False): 1}}
    assert value(p, a) == pytest.approx(9.0)


# --- own quota vs loan, lend_limit ---------------------------------------------------------


@pytest.mark.parametrize("exact", EXACT)
def test_starts_beyond_quota_go_on_loan_from_idle_quota(exact: str) -> None:
    # tenant 0 (quota 2) starts three 1-GPU jobs: two inside quota, the third on loan from
    # tenant 1's idle quota: 5 + 4 + 3 - loan penalty 0.5 - 1 GPU borrowed x 0.01
    p = problem(8, (2, 6), (cls(0, 1, (5.0, 4.0, 3.0)),))
    a = solve(p, exact)
    assert a.starts == {0: {(0, False): 2, (0, True): 1}}
    assert value(p, a) == pytest.approx(12.0 - 0.5 - BORROW)


@pytest.mark.parametrize("exact", EXACT)
def test_no_loan_when_no_lender_has_idle_quota(exact: str) -> None:
    # 12 GPUs, 6 free; tenant 1's quota 6 is all in use: tenant 0 (quota 2) cannot borrow for
    # its 4-GPU job although the GPUs are physically free. Without the loan rows: 10 - 0.5.
    p = problem(12, (2, 6), (cls(0, 4, (10.0,), own=False),), (run("t1-job", 1, 6),))
    a = solve(p, exact)
    assert a.starts == {} and a.preempt == set()
    assert value(p, a) == 0.0


@pytest.mark.parametrize("exact", EXACT)
@pytest.mark.parametrize(("lend", "starts"), [(None, True), (2, True), (1, False), (0, False)])
def test_lend_limit_binds(exact: str, lend: int | None, starts: bool) -> None:
    # tenant 0 (quota 2) needs 2 GPUs above its quota for a 4-GPU job; tenant 1 has 6 idle
    p = problem(8, (2, 6), (cls(0, 4, (10.0,), own=False),), lend_limit=(None, lend))
    a = solve(p, exact)
    if starts:
        assert a.starts == {0: {(0, True): 1}}
        assert value(p, a) == pytest.approx(10.0 - 0.5 - 2 * BORROW)
    else:
        assert a.starts == {}
        assert value(p, a) == 0.0


# --- borrow_limit --------------------------------------------------------------------------


@pytest.mark.parametrize("exact", EXACT)
def test_borrow_limit_binds(exact: str) -> None:
    # tenant 0 has no quota and may borrow 1 GPU; tenant 1 lends freely (4 idle)
    jobs = (cls(0, 1, (5.0, 4.0), own=False), cls(0, 2, (50.0,), own=False))
    p = problem(4, (0, 4), jobs, borrow_limit=(1, None))
    a = solve(p, exact)
    assert a.starts == {0: {(0, True): 1}}  # one 1-GPU job; never the 2-GPU one
    assert value(p, a) == pytest.approx(5.0 - 0.5 - BORROW)
    # without the cap, the 2-GPU job and one 1-GPU job (3 GPUs borrowed)
    p = problem(4, (0, 4), jobs)
    a = solve(p, exact)
    assert a.starts == {0: {(0, True): 2}, 1: {(0, True): 1}}
    assert value(p, a) == pytest.approx(5.0 + 4.0 + 50.0 - 3 * 0.5 - 4 * BORROW)


# --- start_or_queue -------------------------------------------------------------------------


@pytest.mark.parametrize("exact", EXACT)
def test_members_start_as_a_prefix_of_their_class(exact: str) -> None:
    # the order rows s_k >= s_{k+1}: a (deliberately unsorted) class (3, 5) with room for one
    # member must start member 0, worth 3; without the rows the model would pick the 5
    p = problem(1, (1,), (cls(0, 1, (3.0, 5.0)),))
    a = solve(p, exact)
    assert a.starts == {0: {(0, False): 1}}
    assert value(p, a) == pytest.approx(3.0)
    lin = build_model(p)
    assert [r.family for r in lin.rows if r.family.startswith("start_order")] == [
        f"start_order[{p.pending[0].jobs[1]}]"
    ]


@pytest.mark.parametrize("exact", EXACT)
def test_a_singleton_starts_once_exclusively_or_as_a_guest(exact: str) -> None:
    # a shareable job may start on a free GPU (8) or as the guest of host h (10), not both (18)
    host = run("h", 0, 1, free_slots=1, candidate=False)
    guest = GuestCandidate(0, 0, 10.0, 0.9, 0.9)
    p = problem(2, (2,), (cls(0, 1, (8.0,), shareable=True),), (host,), (guest,))
    a = solve(p, exact)
    assert a.starts == {} and a.guests == {0: 0}
    assert value(p, a) == pytest.approx(10.0)


@pytest.mark.parametrize("exact", EXACT)
def test_start_or_queue_through_the_snapshot_starts_the_most_valuable_members(exact: str) -> None:
    # three interchangeable 1-GPU jobs of one tenant, two free GPUs: the two that waited
    # longest (higher urgency) start, in one class; the third is queued
    snap = cluster(nodes={"n0": ("A100", 2)}, tenants={"a": {"A100": 2}})
    snap["jobs"] = [
        pending("new", "a", 1, submit_s=9_990.0),
        pending("old", "a", 1, submit_s=9_000.0),
        pending("mid", "a", 1, submit_s=9_500.0),
    ]
    _, p, d = decide(snap, exact)
    assert len(p.pending) == 1 and p.pending[0].jobs == ("old", "mid", "new")
    assert sorted(s.job for s in d.start) == ["mid", "old"]
    assert d.queue == ["new"]
    # two members inside quota; tenant a is at risk (waited past its max delay): reclaim bonus
    assert p.pending[0].reclaim
    expected = sum(p.pending[0].values[:2]) + 2 * p.reclaim_bonus
    assert d.solver.objective == pytest.approx(expected)
    assert value(p, Assignment(starts={0: {(0, False): 2}})) == pytest.approx(expected)


# --- gpu_sharing ---------------------------------------------------------------------------


@pytest.mark.parametrize("exact", EXACT)
def test_one_guest_per_host(exact: str) -> None:
    # no free GPU; two shareable jobs could each be h's guest (6 and 9): only the better one
    host = run("h", 0, 1, free_slots=1)
    classes = (cls(0, 1, (6.0,), shareable=True), cls(0, 1, (9.0,), shareable=True))
    guests = (GuestCandidate(0, 0, 6.0, 0.9, 0.9), GuestCandidate(1, 0, 9.0, 0.9, 0.9))
    p = problem(1, (2,), classes, (host,), guests)
    a = solve(p, exact)
    assert a.guests == {1: 0} and a.starts == {} and a.preempt == set()
    assert value(p, a) == pytest.approx(9.0)


@pytest.mark.parametrize("exact", EXACT)
def test_no_guest_on_a_preempted_host(exact: str) -> None:
    # best-effort host h (cost 1) fills the only GPU; a guaranteed 1-GPU job worth 10 may
    # replace it, or a guest worth 2 may share it. Both at once (11) is forbidden: stopping
    # the host stops whatever runs on it. Best: preempt and start, 10 - 1 = 9.
    host = run("h", 0, 1, free_slots=1, candidate=True, cost=1.0)
    classes = (cls(0, 1, (10.0,)), cls(0, 1, (2.0,), shareable=True, cap=0))
    p = problem(1, (1,), classes, (host,), (GuestCandidate(1, 0, 2.0, 0.9, 0.9),))
    a = solve(p, exact)
    assert a.preempt == {0} and a.starts == {0: {(0, False): 1}} and a.guests == {}
    assert value(p, a) == pytest.approx(9.0)


# --- preemption rules ----------------------------------------------------------------------


@pytest.mark.parametrize("exact", EXACT)
def test_only_candidates_are_preempted(exact: str) -> None:
    # a job that is not a candidate is never stopped, whatever the start is worth
    p = problem(2, (2,), (cls(0, 2, (1000.0,)),), (run("guaranteed", 0, 2),))
    a = solve(p, exact)
    assert a.preempt == set() and a.starts == {}
    assert value(p, a) == 0.0
    assert build_model(p).preempt == {}


@pytest.mark.parametrize("exact", EXACT)
def test_preemption_only_when_its_gpus_are_used_by_starts_on_that_type(exact: str) -> None:
    # two 2-GPU best-effort jobs (cost 1 each) fill the type; stopping both for one 1-GPU
    # guaranteed job (10) would leave 3 GPUs idle, more than what is left of one gang stopped
    # whole: forbidden (without the row: 8). Stopping one of them leaves one GPU idle, which a
    # gang stopped whole for a smaller start may (the checker admits it, and so does the
    # greedy plan): 9. Two such jobs use both freed GPUs.
    be = (run("be", 0, 2, candidate=True, cost=1.0), run("be2", 0, 2, candidate=True, cost=1.0))
    p = problem(4, (4,), (cls(0, 1, (10.0,)),), be)
    a = solve(p, exact)
    assert len(a.preempt) == 1 and a.starts == {0: {(0, False): 1}}
    assert value(p, a) == pytest.approx(9.0)
    m = build_model(p)
    both = from_assignment(m, p, Assignment(starts={0: {(0, False): 1}}, preempt={0, 1}))
    assert not is_feasible(m, both)
    p = problem(4, (4,), (cls(0, 1, (10.0, 10.0)),), be)
    a = solve(p, exact)
    assert len(a.preempt) == 1 and a.starts == {0: {(0, False): 2}}
    assert value(p, a) == pytest.approx(19.0)


@pytest.mark.parametrize("exact", EXACT)
def test_a_start_on_loan_never_preempts_and_best_effort_in_quota_yields_only_to_guaranteed(
    exact: str,
) -> None:
    # tenant 1 (quota 4) runs a best-effort 2-GPU job (cost 1) and a fixed 2-GPU job: full.
    # Tenant 0 (quota 0) could borrow the 2 GPUs freed by stopping it (100 - 1 - 0.5 - 0.02):
    # forbidden, a start on loan never preempts
    run1 = (run("be", 1, 2, candidate=True, cost=1.0), run("fixed", 1, 2))
    borrower = cls(0, 2, (100.0,), own=False)
    a = solve(p := problem(4, (0, 4), (borrower,), run1), exact)
    assert a.preempt == set() and a.starts == {}
    assert value(p, a) == 0.0
    # tenant 1's own best-effort job (inside quota) does not displace it either ...
    own_be = cls(1, 2, (100.0,), guaranteed=False)
    a = solve(p := problem(4, (0, 4), (own_be,), run1), exact)
    assert a.preempt == set() and a.starts == {}
    # ... its own guaranteed job does
    own_g = cls(1, 2, (100.0,), guaranteed=True)
    a = solve(p := problem(4, (0, 4), (own_g,), run1), exact)
    assert a.preempt == {0} and a.starts == {0: {(0, False): 1}}
    assert value(p, a) == pytest.approx(99.0)


@pytest.mark.parametrize("exact", EXACT)
def test_forced_reclaim_of_on_loan_use_no_lender_covers(exact: str) -> None:
    # lender t0 (quota 4) now runs 4 GPUs itself: t1's on-loan 2-GPU job is no longer covered
    # and must stop although nothing starts on its GPUs (the deficit relaxes the "used" row)
    p = problem(
        8,
        (4, 0),
        running_=(run("lender", 0, 4), run("loaned", 1, 2, on_loan=True, candidate=True, cost=3.0)),
        deficit=2,
    )
    a = solve(p, exact)
    assert a.preempt == {1} and a.starts == {}
    assert value(p, a) == pytest.approx(-3.0)


@pytest.mark.parametrize("exact", EXACT)
def test_forced_reclaim_through_the_snapshot(exact: str) -> None:
    snap = cluster(nodes={"n0": ("A100", 8)}, tenants={"a": {"A100": 4}, "b": {}})
    snap["jobs"] = [
        running("a-run", "a", [("n0", g) for g in range(4)], start_s=1_000.0),
        running("b-loan", "b", [("n0", 4), ("n0", 5)], start_s=2_000.0, qos="best_effort", on_loan=True),
    ]
    _, p, d = decide(snap, exact)
    assert p.deficit == (2,)
    assert [(x.job, x.reason) for x in d.preempt] == [("b-loan", "reclaim")]
    assert d.start == [] and d.loans == []
    assert d.solver.objective == pytest.approx(-p.running[1].cost)


# --- over quota (amended invariant 4) --------------------------------------------------------


def decide(snap: dict[str, Any], backend: str) -> tuple[ClusterState, EpochProblem, Decision]:
    """Snapshot -> problem -> backend -> decision (as solve_epoch does, without its fallbacks);
    the decision must pass the checker."""
    state = load_state(snap)
    preds = PRED.predict_jobs(state)
    signal = asr.compute(state)
    p = build_problem(state, preds, PRED, signal)
    a = solve(p, backend)
    info = SolverInfo(backend=backend, seconds=0.0, objective=value(p, a), notes=list(p.notes))
    d = to_decision(state, p, a, preds, signal, info, "optimal")
    assert check_decision(state, d) == []
    return state, p, d


@pytest.mark.parametrize("exact", EXACT)
def test_over_quota_use_is_kept_and_nothing_starts_on_top_of_it(exact: str) -> None:
    # a's A100 quota was lowered to 2 while it runs 4 guaranteed GPUs; b uses all of its quota,
    # so nobody can lend. a keeps its 4 GPUs, starts nothing more on A100 (2 are free), but
    # may still start on V100, where it has idle quota.
    snap = over_quota_snapshot()
    _, p, d = decide(snap, exact)
    assert p.kept_over == ((2, 0), (0, 0))
    assert d.preempt == []
    assert [(s.job, s.allocation[0].node, s.on_loan) for s in d.start] == [("a-any", "v0", False)]
    assert d.queue == ["a-a100"]
    assert over_quota_note("a", "A100", 2) in d.solver.notes
    assert [(k.tenant, k.gpu_type, k.gpus) for k in d.kept_over_quota] == [("a", "A100", 2)]
    # one number: the problem's own note about it is gone (the decision states what it keeps)
    assert not any("above its quota" in n for n in d.solver.notes)
    assert [c.jobs for c in p.pending] == [("a-any",)] and p.unplaceable == ("a-a100",)
    v100 = p.types.index("V100")
    assert p.pending[0].types == (v100,)
    bonus = p.reclaim_bonus if p.pending[0].reclaim else 0.0
    assert d.solver.objective == pytest.approx(p.pending[0].values[0] + bonus)


@pytest.mark.parametrize("exact", EXACT)
def test_kept_over_quota_relaxes_the_tenant_use_row_only_by_what_is_kept(exact: str) -> None:
    # hand-built: t0 (quota 2) runs 4 GPUs, 2 kept over quota; 4 GPUs free, t1 lends 2.
    # t0's 2-GPU job can start on loan (t1's 2 idle GPUs), never on the kept-over use.
    p = problem(
        8,
        (2, 2),
        (cls(0, 2, (10.0, 9.0), own=False),),
        (run("over", 0, 4),),
        kept_over=(2, 0),
    )
    a = solve(p, exact)
    assert a.starts == {0: {(0, True): 1}}
    assert value(p, a) == pytest.approx(10.0 - 0.5 - 2 * BORROW)

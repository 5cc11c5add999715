"""The two MILP backends, ``highspy`` (HiGHS in a worker process; ``milp`` is its alias) and
``pulp`` (CBC through PuLP):
valid decisions on the hand-made instances, the same optimum as CP-SAT, each constraint family
of the neutral model on a hand-built problem, determinism, and the labelled fallback."""

from __future__ import annotations

import json
from typing import Any

import pytest

import optsched
from optsched.engine.backends.base import SolveParams, SolveResult, SolveStatus
from optsched.engine.budget import Budget
from optsched.engine.check import check_decision
from optsched.engine.problem import EpochProblem, GuestCandidate, PendingClass, RunningItem
from optsched.engine.state import load_state
from optsched.instances import generate
from optsched.predict.fallback import EstimatePredictor
from tests.builders import epoch_problem, pending_class, running_item
from tests.conftest import DATA

TINY = sorted((DATA / "tiny").glob("*.json"))
MILP_BACKENDS = ["highspy", "pulp"]  # both extras are in ".[all]": never filtered away
PRED = EstimatePredictor()


def solve(snapshot: Any, backend: str, time_limit_s: float = 2.0) -> optsched.Decision:
    return optsched.solve_epoch(
        snapshot, params=SolveParams(backend=backend, time_limit_s=time_limit_s), predictor=PRED
    )


# --- the hand-made instances ---------------------------------------------------------------


@pytest.mark.parametrize("name", MILP_BACKENDS)
@pytest.mark.parametrize("path", TINY, ids=[p.stem for p in TINY])
def test_tiny_instances_pass_the_checker(name: str, path: Any) -> None:
    state = load_state(path.read_text())
    d = solve(state, name)
    assert check_decision(state, d) == []
    # (the stages' seconds in the message: a CI run once saw this 2 s call take 10.1 s)
    assert d.solver.fallback_reason is None, (d.solver.fallback_reason, d.solver.stage_seconds)
    assert d.solver.backend == name


@pytest.mark.parametrize("name", MILP_BACKENDS)
def test_same_optimum_as_cpsat_on_tiny_instances(name: str) -> None:
    compared = 0
    for path in TINY:
        state = load_state(path.read_text())
        ours, ref = solve(state, name), solve(state, "cpsat")
        if ours.status == "optimal" and ref.status == "optimal":
            a, b = ours.solver.objective, ref.solver.objective
            assert a is not None and b is not None
            assert a == pytest.approx(b, rel=1e-6, abs=1e-6), path.stem
            compared += 1
    assert compared >= len(TINY) // 2


# --- one test per constraint family, on hand-built problems, through pulp ------------------


def pending(tenant: int, gpus: int, values: tuple[float, ...], **kw: Any) -> PendingClass:
    return pending_class(tenant, gpus, values, **{"loan_penalty": 0.01, "guaranteed": False, **kw})


def problem(
    capacity: int,
    quota: tuple[int, ...],
    classes: tuple[PendingClass, ...],
    run: tuple[RunningItem, ...] = (),
    guests: tuple[GuestCandidate, ...] = (),
    lend_limit: tuple[int | None, ...] | None = None,
) -> EpochProblem:
    return epoch_problem(capacity, quota, classes, run, guests, lend_limit=lend_limit)


running = running_item


def pulp_solve(p: EpochProblem) -> SolveResult:
    from optsched.engine.backends.pulp.backend import PulpBackend

    # a generous limit: these models solve in milliseconds, and a loaded machine must not cut them
    res = PulpBackend().solve(p, SolveParams(backend="pulp", time_limit_s=30.0))
    assert res.status == SolveStatus.OPTIMAL, res.detail
    assert res.assignment is not None
    return res


def test_capacity_row_starts_the_higher_value_job_only() -> None:
    # two 3-GPU jobs, 4 free GPUs: exactly one starts, the one worth more
    p = problem(4, (4,), (pending(0, 3, (5.0,)), pending(0, 3, (7.0,))))
    a = pulp_solve(p).assignment
    assert a is not None
    assert a.starts == {1: {(0, False): 1}}


def test_loans_borrow_idle_quota_within_the_lend_limit() -> None:
    # tenant 0 (quota 2) needs 4 GPUs: it starts on loan with tenant 1's idle quota ...
    cls = (pending(0, 4, (10.0,), own=False),)
    a = pulp_solve(problem(4, (2, 2), cls)).assignment
    assert a is not None and a.starts == {0: {(0, True): 1}}
    # ... but not when tenant 1 lends nothing
    a = pulp_solve(problem(4, (2, 2), cls, lend_limit=(None, 0))).assignment
    assert a is not None and a.starts == {}


def test_start_or_queue_members_start_once_as_a_prefix_of_their_class() -> None:
    # a class of three 1-GPU jobs, 2 free GPUs: two start (the two best: a count of 2)
    p = problem(2, (2,), (pending(0, 1, (5.0, 4.0, 3.0)),))
    a = pulp_solve(p).assignment
    assert a is not None and a.starts == {0: {(0, False): 2}}
    # a singleton that could start exclusively or as a guest starts once, the better way
    host = running("h", 0, 1, free_slots=1)
    guest_cls = pending(0, 1, (8.0,), shareable=True)
    p = problem(2, (2,), (guest_cls,), run=(host,), guests=(GuestCandidate(0, 0, 10.0, 0.9, 0.9),))
    a = pulp_solve(p).assignment
    assert a is not None and a.starts == {} and a.guests == {0: 0}


def test_gpu_sharing_gives_a_host_one_guest() -> None:
    # two singleton guests, one host with a free slot, no free GPU: only the better guest
    host = running("h", 0, 1, free_slots=1)
    classes = (pending(0, 1, (6.0,), shareable=True), pending(0, 1, (9.0,), shareable=True))
    guests = (GuestCandidate(0, 0, 6.0, 0.9, 0.9), GuestCandidate(1, 0, 9.0, 0.9, 0.9))
    a = pulp_solve(problem(1, (2,), classes, run=(host,), guests=guests)).assignment
    assert a is not None and a.guests == {1: 0} and a.starts == {}


def test_preemption_only_when_the_start_is_worth_more_than_the_stop() -> None:
    # the cluster is full of one best-effort job (a candidate); a guaranteed job of the same
    # size inside its quota is worth 10: stopping (cost 3) and starting it pays ...
    be = running("be", 0, 2, candidate=True, cost=3.0)
    cls = (pending(0, 2, (10.0,), guaranteed=True),)
    a = pulp_solve(problem(2, (2,), cls, run=(be,))).assignment
    assert a is not None and a.preempt == {0} and a.starts == {0: {(0, False): 1}}
    # ... a cost of 30 does not; and a job that is not a candidate is never stopped
    for blocker in (running("be", 0, 2, candidate=True, cost=30.0), running("g", 0, 2, cost=0.0)):
        a = pulp_solve(problem(2, (2,), cls, run=(blocker,))).assignment
        assert a is not None and a.preempt == set() and a.starts == {}


# --- PuLP adapter details --------------------------------------------------------------------


def test_map_status_covers_every_pulp_status_code() -> None:
    from optsched.engine.backends.pulp.backend import import_pulp, map_status

    pulp = import_pulp()
    expected = {
        (1, 1): SolveStatus.OPTIMAL,
        (1, 2): SolveStatus.FEASIBLE,
        (0, 2): SolveStatus.FEASIBLE,
        (0, 0): SolveStatus.NO_SOLUTION,
        (-1, -1): SolveStatus.INFEASIBLE,
        (-1, 0): SolveStatus.INFEASIBLE,
        (-2, -2): SolveStatus.ERROR,
        (-3, 0): SolveStatus.ERROR,
        (-3, 2): SolveStatus.ERROR,
    }
    for status in pulp.LpStatus:
        for sol in pulp.LpSolution:
            got = map_status(status, sol)
            assert isinstance(got, SolveStatus)
            if (status, sol) in expected:
                assert got == expected[(status, sol)], (status, sol)
    assert set(pulp.LpStatus) == {1, 0, -1, -2, -3}


def test_importing_pulp_leaves_ortools_loadable() -> None:
    import subprocess
    import sys

    code = (
        "from optsched.engine.backends.pulp.backend import import_pulp; import_pulp(); "
        "from ortools.sat.python import cp_model; print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "ok", out.stderr[-500:]


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"maxNodez": 3}, "maxNodez"),
        ({"solver": "NO_SUCH_SOLVER"}, "NO_SUCH_SOLVER"),
        ({"solver": "HiGHS"}, "HiGHS"),
        ({"solver": "HiGHS_CMD", "maxNodes": 5}, "maxNodes"),
        ({"threads": 2}, "threads"),
    ],
)
def test_pulp_rejects_unknown_or_unsupported_options_by_name(extra: dict[str, Any], named: str) -> None:
    params = SolveParams(backend="pulp", time_limit_s=1.0, extra=extra)
    with pytest.raises(ValueError, match=named):
        optsched.solve_epoch(generate("tiny", 1), params=params, predictor=PRED)


def test_pulp_stops_on_its_node_limit_and_says_so() -> None:
    state = load_state(generate("venus", 1))
    # a wall clock no load reaches: the node limit, not the machine's speed, stops the search
    params = SolveParams(backend="pulp", time_limit_s=120.0, extra={"maxNodes": 0})
    d = optsched.solve_epoch(state, params=params, predictor=PRED)
    assert check_decision(state, d) == []
    detail = d.solver.status_detail or ""
    assert "wall-clock limit hit" not in detail
    # GPUs held for a gang's reservation make a decision never optimal (the model did not see
    # them): then the solver's own status says it proved its model
    held = any("held for reservations" in n for n in d.solver.notes)
    assert d.status == "optimal" or (held and "Optimal" in detail) or "deterministic work limit" in detail


# --- determinism and fallback ------------------------------------------------------------------


def _plan(d: optsched.Decision) -> str:
    data = json.loads(d.model_dump_json(exclude_none=True))
    data["solver"].pop("seconds", None)
    data["solver"].pop("stage_seconds", None)
    return json.dumps(data, sort_keys=True)


def test_milp_is_deterministic_at_venus_size() -> None:
    # the default 1 s limit's work budget under a wall clock no load reaches (a run the net
    # stopped would be the labelled greedy plan: tests/behaviour/test_determinism_load.py)
    snap = generate("venus", seed=0)
    work = Budget(1.0, len(snap["jobs"])).solver_work_s
    params = SolveParams(backend="milp", time_limit_s=120.0, work_s=work)
    first, second = (optsched.solve_epoch(snap, params=params, predictor=PRED) for _ in range(2))
    assert first.solver.fallback_reason is None and first.solver.backend == "highspy"
    assert first.start == second.start and first.preempt == second.preempt
    assert first.loans == second.loans
    assert _plan(first) == _plan(second)


@pytest.mark.parametrize("name", MILP_BACKENDS)
def test_a_backend_that_raises_gives_the_labelled_fallback(name: str, monkeypatch: Any) -> None:
    from optsched.engine.backends import get_backend

    cls = type(get_backend(name))

    def boom(self: Any, *args: Any, **kwargs: Any) -> SolveResult:
        raise RuntimeError("solver exploded")

    monkeypatch.setattr(cls, "solve", boom)
    state = load_state(generate("tiny", 3))
    d = solve(state, name)
    assert d.status == "fallback"
    reason = d.solver.fallback_reason or ""
    assert name in reason and "RuntimeError" in reason and "solver exploded" in reason
    assert check_decision(state, d) == []


def test_milp_is_an_alias_of_highspy() -> None:
    from optsched.engine.backends import get_backend, is_backend_name

    assert SolveParams(backend="milp").backend == "highspy"
    assert SolveParams(backend="cpsat").with_(backend="milp").backend == "highspy"
    assert get_backend("milp").name == "highspy"
    assert all(is_backend_name(n) for n in ("auto", "highs", "highspy", "milp"))
    assert not is_backend_name("highs_py")


def test_solve_params_default_to_the_default_rule() -> None:
    from optsched.engine.epoch import DEFAULT_BACKEND

    assert SolveParams().backend == DEFAULT_BACKEND == "auto"

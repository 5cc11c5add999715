"""``solve_epoch``: snapshot in, checked decision out.

The pipeline (architecture, "one epoch end to end")::

    parse -> ClusterState -> predictions -> assurance -> EpochProblem -> greedy (hint)
          -> backend (within the deadline) -> Decision -> check_decision -> [fallback]

``time_limit_s`` is a hard promise for the whole call: the backend gets what is left after the
earlier stages minus a reserve for building and checking the decision, and a backend that
overshoots is abandoned (CP-SAT is stopped; the HiGHS worker process is killed).
"""

from __future__ import annotations

import functools
import logging
import time
import warnings
from typing import Any

from optsched import assurance as asr
from optsched.backends import get_backend
from optsched.backends.base import SolveParams, SolveResult, SolveStatus
from optsched.backends.greedy import greedy_assignment
from optsched.check import check_decision
from optsched.decide import to_decision
from optsched.errors import DomainWarning, OptschedError
from optsched.predict.base import Predictor
from optsched.problem import Assignment, build_problem
from optsched.schema.decision import Decision, SolverInfo
from optsched.schema.snapshot import Snapshot
from optsched.state import ClusterState, parse_snapshot

log = logging.getLogger("optsched")

DEFAULT_TIME_LIMIT_S = 1.0
RESERVE_FRACTION = 0.25
"""Share of the time limit kept for building and checking the decision..."""
RESERVE_PER_STAGE_TIME = 2.5
"""...or this many times the time the stages before the solver took, if more."""
LARGE_PENDING = 1000
"""Above this many pending jobs and below ``LARGE_MIN_LIMIT_S``, CP-SAT is the default."""
LARGE_MIN_LIMIT_S = 5.0
WORKFLOW_SHARE = 0.4
"""Share of the time limit given to the workflow planner when the snapshot has workflows."""


def resolve_params(snapshot: Snapshot, params: SolveParams | None) -> SolveParams:
    """Explicit ``params`` win; otherwise the snapshot's ``options``; otherwise defaults."""
    if params is not None:
        return params
    opts = snapshot.options
    base = SolveParams(backend=default_backend(snapshot), time_limit_s=DEFAULT_TIME_LIMIT_S)
    if opts is None:
        return base
    return SolveParams(
        backend=opts.backend or base.backend,
        time_limit_s=opts.time_limit_s or base.time_limit_s,
        seed=opts.seed if opts.seed is not None else 0,
        num_workers=opts.num_workers or 1,
        extra=dict(opts.extra or {}),
    )


def default_backend(snapshot: Snapshot) -> str:
    """The backend our benchmark found best (``docs/benchmarks.md``).

    HiGHS (``milp``) closes the gap at Venus size within the default second where CP-SAT
    stays several percent off, so it is the default whenever its worker process is up, except
    on large snapshots under a short limit, where HiGHS returns nothing in time. The
    worker takes a fraction of a second to start: when it is not running yet, this call starts
    it in the background and the epoch is solved by CP-SAT, so the deadline still holds.
    """
    try:
        from optsched.backends.milp.backend import MilpBackend, is_warm, warm_up
    except ImportError:  # pragma: no cover - the milp extra is missing
        return "cpsat"
    if not MilpBackend.is_available():
        return "cpsat"
    limit = (snapshot.options.time_limit_s if snapshot.options else None) or DEFAULT_TIME_LIMIT_S
    pending = sum(1 for j in snapshot.jobs if j.state == "pending")
    if pending > LARGE_PENDING and limit < LARGE_MIN_LIMIT_S:
        return "cpsat"  # HiGHS needs seconds at this size; CP-SAT improves on the hint sooner
    if is_warm():
        return "milp"
    warm_up(wait=False)
    return "cpsat"


@functools.cache
def default_predictor() -> Predictor:
    """The engine's default predictor, loaded once per process (outside any deadline if the
    caller calls this first)."""
    try:
        from optsched.predict.loader import default_predictor
    except ImportError:
        from optsched.predict.fallback import EstimatePredictor

        return EstimatePredictor()
    return default_predictor()


def solve_epoch(
    snapshot: Snapshot | ClusterState | str | bytes | dict[str, Any],
    *,
    params: SolveParams | None = None,
    predictor: Predictor | None = None,
) -> Decision:
    """Decide one epoch.

    Parameters
    ----------
    snapshot:
        A :class:`Snapshot`, an already validated :class:`ClusterState`, JSON text or a dict.
    params:
        Solver parameters; default from ``snapshot.options`` then built-in defaults.
    predictor:
        Where runtime, memory and colocation figures come from; default: the trained models
        in ``models/`` when available, else the fallback estimates. The default is loaded once
        per process, before this call's clock starts.

    Raises
    ------
    SnapshotError
        The snapshot is malformed or inconsistent (names the field).
    OptschedError
        No valid decision could be built (an internal bug; never silently).
    """
    # loading the trained models is one-time set-up, not part of this epoch's deadline
    pred = predictor if predictor is not None else default_predictor()
    t0 = time.monotonic()
    stage: dict[str, float] = {}
    notes: list[str] = []
    if isinstance(snapshot, ClusterState):
        state = snapshot
    else:
        snap = snapshot if isinstance(snapshot, Snapshot) else parse_snapshot(snapshot)
        state = ClusterState.from_snapshot(snap)
    params = resolve_params(state.snapshot, params)
    limit = params.time_limit_s
    deadline = t0 + limit
    stage["validate"] = time.monotonic() - t0

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DomainWarning)
        t = time.monotonic()
        predictions = pred.predict_jobs(state)
        stage["predict"] = time.monotonic() - t
        t = time.monotonic()
        signal = asr.compute(state)
        problem = build_problem(state, predictions, pred, signal)
        stage["candidates"] = time.monotonic() - t
    for w in caught:
        notes.append(f"{type(w.message).__name__}: {w.message}")
        warnings.warn(w.message, w.category, stacklevel=2)
    notes.extend(problem.notes)

    plan = None
    wf_budget = 0.0
    if state.snapshot.workflows is not None and state.snapshot.workflows.sessions:
        wf_budget = WORKFLOW_SHARE * limit

    t = time.monotonic()
    hint = greedy_assignment(problem)
    stage["greedy"] = time.monotonic() - t
    result: SolveResult | None = None
    fallback_reason: str | None = None
    if params.backend != "greedy":
        # building and checking the decision grows with the snapshot like the stages so far
        reserve = max(RESERVE_FRACTION * limit, RESERVE_PER_STAGE_TIME * (time.monotonic() - t0))
        budget = deadline - time.monotonic() - reserve - wf_budget
        if budget <= 0.005:
            fallback_reason = "no time left for the solver"
        else:
            t = time.monotonic()
            try:
                result = get_backend(params.backend).solve(problem, params.with_(time_limit_s=budget), hint)
            except (OptschedError, ValueError):
                raise
            except Exception as exc:  # a solver crash degrades to the labelled fallback
                log.exception("backend %s failed", params.backend)
                fallback_reason = f"{params.backend} raised {type(exc).__name__}: {exc}"
            stage["solve"] = time.monotonic() - t
            if result is not None and (
                result.status not in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE) or result.assignment is None
            ):
                fallback_reason = f"{params.backend}: {result.status.value} ({result.detail})"
                result = None
            elif (
                result is not None
                and result.objective is not None
                and result.objective < hint.objective(problem) - 1e-6
            ):
                fallback_reason = f"{params.backend} answer worse than the greedy warm start"
                result = None

    chosen: Assignment = result.assignment if result is not None and result.assignment is not None else hint
    if result is not None:
        status = "optimal" if result.status == SolveStatus.OPTIMAL else "feasible"
    elif params.backend == "greedy":
        status = "fallback"
        fallback_reason = "greedy backend requested"
    else:
        status = "fallback"

    if wf_budget > 0:
        t = time.monotonic()
        from optsched.workflows.planner import plan_workflows

        plan = plan_workflows(
            state,
            time_limit_s=max(0.01, deadline - time.monotonic() - RESERVE_FRACTION * limit),
            seed=params.seed,
        )
        stage["workflows"] = time.monotonic() - t

    def build(a: Assignment, st: str, res: SolveResult | None, reason: str | None) -> Decision:
        info = SolverInfo(
            backend=res.backend if res is not None else "greedy",
            seconds=0.0,
            objective=a.objective(problem),
            bound=res.bound if res is not None else None,
            gap=res.gap if res is not None else None,
            status_detail=res.detail if res is not None else None,
            fallback_reason=reason,
            stage_seconds={k: round(v, 6) for k, v in stage.items()},
            notes=list(notes),
        )
        d = to_decision(state, problem, a, predictions, signal, info, st)
        if plan is not None:
            d.workflow_plan = plan
        return d

    t = time.monotonic()
    decision = build(chosen, status, result, fallback_reason)
    violations = check_decision(state, decision)
    if violations and chosen is not hint:
        msg = "; ".join(str(v) for v in violations[:5])
        log.error("solver decision failed the checker: %s", msg)
        decision = build(hint, "fallback", None, f"solver answer failed the checker: {msg}")
        violations = check_decision(state, decision)
    if violations:
        msg = "; ".join(str(v) for v in violations[:5])
        raise OptschedError(f"internal error: no valid decision could be built: {msg}")
    stage["decide_and_check"] = time.monotonic() - t
    decision.solver.stage_seconds = {k: round(v, 6) for k, v in stage.items()}
    decision.solver.seconds = round(time.monotonic() - t0, 6)
    return decision

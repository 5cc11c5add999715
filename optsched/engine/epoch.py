"""``solve_epoch``: snapshot in, checked decision out.

The pipeline::

    parse -> ClusterState -> predictions -> assurance -> candidates (EpochProblem)
          -> greedy (hint) -> backend (deterministic work, wall-clock safety net) -> fill pass
          -> Decision -> check_decision -> [labelled fallback]

**Deadline.** ``time_limit_s`` covers the whole call. Every share of it comes from one
:class:`~optsched.engine.budget.Budget`: the solver's deterministic work, the reserve for
decoding and checking that grows with the snapshot, the workflow planner's share, the
look-ahead's and each partition part's.

**Determinism.** The solver stops on a *deterministic* work budget (``Budget.solver_work_s``), a
pure function of the time limit and of the snapshot's size, never of measured time, so the same
snapshot and parameters give the same decision from a fresh process or a warm one, on an idle
or a loaded machine. The wall clock is only a safety net: when it stops the solver (or leaves it
no time), the decision is the greedy plan, ``status: "fallback"``, with
:data:`~optsched.engine.budget.WALL_CLOCK_FALLBACK` as ``solver.fallback_reason``: the same
decision whatever the solver had found when the clock stopped it, never a time-dependent
incumbent.

**Fallbacks.** A solver that errs, gives nothing, gives less than the greedy plan or an answer
the checker rejects, and any failure while decoding it, yields the greedy plan with
``status: "fallback"`` and the reason in ``solver.fallback_reason``; if even that fails, the
empty plan (start nothing, stop only what must stop). A valid snapshot never ends in an
internal error unless all three fail the checker.
"""

from __future__ import annotations

import copy
import functools
import gc
import logging
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from optsched.engine import assurance as asr
from optsched.engine.backends import DEFAULT_BACKEND as DEFAULT_BACKEND
from optsched.engine.backends.base import WALL_CLOCK_HIT, SolveParams, SolveResult, SolveStatus
from optsched.engine.budget import DEFAULT_TIME_LIMIT_S, MIN_SOLVER_WALL_S, WALL_CLOCK_FALLBACK, Budget
from optsched.engine.state import ClusterState, parse_snapshot
from optsched.errors import DomainWarning, OptschedError
from optsched.schema.decision import Decision, PoolDecision, SolverInfo, WorkflowPlan
from optsched.schema.snapshot import Snapshot

if TYPE_CHECKING:
    from optsched.engine.backends.greedy import _Tally
    from optsched.engine.backends.highs import Prepared as HighsPrepared
    from optsched.engine.decode import Draft
    from optsched.engine.lookahead import LookaheadParams, Reservations
    from optsched.engine.problem import Assignment, EpochProblem
    from optsched.predict.base import Predictions, Predictor

log = logging.getLogger("optsched")

STATUS_RANK = {"optimal": 0, "feasible": 1, "fallback": 2}
MAX_DECODE_ROUNDS = 12
"""Decoding rounds of one plan: a start the free nodes cannot hold leaves the plan (and the
fill pass runs again) before the next."""
BOUND_TOL = 1e-6
"""Relative tolerance below which a solver's bound under the answer's objective is rounding."""


def resolve_params(snapshot: Snapshot, params: SolveParams | None) -> SolveParams:
    """Explicit ``params`` win; otherwise the snapshot's ``options``; otherwise defaults."""
    if params is not None:
        return params
    opts = snapshot.options
    base = SolveParams(backend=DEFAULT_BACKEND, time_limit_s=DEFAULT_TIME_LIMIT_S)
    if opts is None:
        return base
    return SolveParams(
        backend=opts.backend or base.backend,
        time_limit_s=opts.time_limit_s or base.time_limit_s,
        seed=opts.seed if opts.seed is not None else 0,
        num_workers=opts.num_workers or 1,
        extra=dict(opts.extra or {}),
    )


def auto_backend(problem: EpochProblem, work_s: float) -> str:
    """The default rule (:data:`DEFAULT_BACKEND`): HiGHS, which runs branch and bound when the
    model fits its work budget and the LP relaxation with a guided rounding above it
    (:mod:`optsched.engine.backends.highs`)."""
    return "highs"


@functools.cache
def warm_up() -> None:
    """Import the modules a call imports on its way (the default backend's solver bindings
    included), once per process before the first call's clock starts, as the default predictor
    is loaded: a fresh process (``optsched solve``) spent 0.15-0.3 s of a 1 s limit importing
    them. A missing optional one is skipped: the backend that needs it says so when called."""
    import optsched.engine.backends.greedy
    import optsched.engine.backends.highs
    import optsched.engine.candidates
    import optsched.engine.check
    import optsched.engine.decode
    import optsched.engine.explain
    import optsched.engine.formulation
    import optsched.engine.lookahead  # noqa: F401

    try:
        import ortools.math_opt.core.python.solver
        import ortools.math_opt.model_parameters_pb2
        import ortools.math_opt.parameters_pb2
        import ortools.math_opt.python.callback
        import ortools.math_opt.python.init_arguments
        import ortools.math_opt.result_pb2
        import ortools.util.python.solve_interrupter  # noqa: F401
    except ImportError:  # pragma: no cover - ortools is a dependency
        return


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


@dataclass
class _Epoch:
    state: ClusterState
    problem: EpochProblem
    predictions: Predictions
    signal: dict[str, asr.TenantAssurance]
    notes: list[str]
    stage: dict[str, float]
    lookahead: LookaheadParams
    reservations: Reservations
    orig: ClusterState | None = None
    """The snapshot's state when a pool decision changed the pool (``state`` is then the pool's
    effective state)."""
    pool: PoolDecision | None = None


def solve_epoch(
    snapshot: Snapshot | ClusterState | str | bytes | dict[str, Any],
    *,
    params: SolveParams | None = None,
    predictor: Predictor | None = None,
    partitions: int | str | None = None,
    executor: str = "auto",
    assurance: dict[str, asr.TenantAssurance] | None = None,
    victim_slack: Mapping[str, int] | None = None,
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
    partitions:
        Split the epoch into this many parts (``"auto"``: by size); default from
        ``snapshot.options.partitions``, else one model (:mod:`optsched.engine.partition`).
    executor:
        Where the parts run: ``auto`` (Ray when initialised, else processes), ``ray``,
        ``process`` or ``serial``; the decision is the same on each.
    assurance:
        The assurance signal to decide with instead of the one computed from the snapshot (a
        part of a partitioned epoch gets the whole fleet's).
    victim_slack:
        Per GPU type, at most this much victim slack (a part of a partitioned epoch gets its
        share of the fleet's, :func:`optsched.engine.partition.splitting.part_slack`).

    Raises
    ------
    SnapshotError
        The snapshot is malformed or inconsistent (names the field).
    OptschedError
        No valid decision could be built, not even the empty one (an internal bug).
    """
    pred = predictor if predictor is not None else default_predictor()
    warm_up()
    # a full garbage collection over a 10,000-GPU snapshot's objects costs a third of a second
    # at random points of the call: pause the collector for the call (reference counting still
    # frees everything; the next collection after the call picks up cycles)
    paused = gc.isenabled()
    gc.disable()
    try:
        return _solve_epoch(snapshot, params, pred, partitions, executor, assurance, predictor, victim_slack)
    finally:
        if paused:
            gc.enable()


def _solve_epoch(
    snapshot: Snapshot | ClusterState | str | bytes | dict[str, Any],
    params: SolveParams | None,
    pred: Predictor,
    partitions: int | str | None = None,
    executor: str = "auto",
    assurance: dict[str, asr.TenantAssurance] | None = None,
    given: Predictor | None = None,
    victim_slack: Mapping[str, int] | None = None,
) -> Decision:
    t0, cpu0 = time.monotonic(), time.process_time()
    stage: dict[str, float] = {}
    if isinstance(snapshot, ClusterState):
        state = snapshot
    else:
        snap = snapshot if isinstance(snapshot, Snapshot) else parse_snapshot(snapshot)
        state = ClusterState.from_snapshot(snap)
    params = resolve_params(state.snapshot, params)
    params.check()
    stage["validate"] = time.monotonic() - t0
    has_wf = state.snapshot.workflows is not None and bool(state.snapshot.workflows.sessions)
    split_note = None
    opts = state.snapshot.options
    parts = _partitions(state, partitions if partitions is not None else opts.partitions if opts else None)
    if parts > 1 and has_wf:
        split_note = "partitions: a snapshot with workflow sessions is solved as one model"
    elif parts > 1:
        from optsched.engine.partition import MergeRejected, solve_partitioned

        try:
            # a given predictor goes to every part; else each worker loads the default once
            d = solve_partitioned(
                state, params, parts, solve=solve_epoch, executor=executor, predictor=given,  # type: ignore[arg-type]
                t0=t0,
            )
        except MergeRejected as exc:
            split_note = f"partitions: the merged decision failed the checker ({exc}); solved as one model"
        except (OptschedError, ValueError):
            raise
        except Exception as exc:  # a part's worker crashed, Ray is gone, ...: one model answers
            log.exception("partitioned solve failed")
            split_note = f"partitions: {type(exc).__name__}: {exc}; solved as one model"
        else:
            d.solver.stage_seconds = {"validate": round(stage["validate"], 6), **d.solver.stage_seconds}
            d.solver.seconds = round(time.monotonic() - t0, 6)
            _warn_if_late(d, params, state)
            return d
    # the pool's size first (cluster GPUs lent to or returned from the serving pool): the
    # cluster part and the planner then see the pool it leaves, and the checker judges the
    # whole decision against the snapshot as given
    orig = state
    t = time.monotonic()
    pool = _decide_pool(state)
    if pool is not None:
        state = _effective_state(state, pool)
        stage["pool"] = time.monotonic() - t
    try:
        ep = _prepare(state, params, pred, stage, assurance, victim_slack)
        ep.orig, ep.pool = orig, pool
    except (OptschedError, ValueError):
        raise
    except Exception as exc:  # pragma: no cover - a bug in predictions or candidates
        log.exception("building the epoch's problem failed")
        msg = f"internal error while building the problem: {type(exc).__name__}: {exc}"
        raise OptschedError(msg) from exc

    budget = Budget(params.time_limit_s, len(state.snapshot.jobs), has_wf, params.work_s, t0, cpu0)
    decision = _cluster_decision(ep, params, budget)
    if has_wf:
        _attach_workflows(ep, decision, params, budget)
    if split_note is not None:
        decision.solver.notes.append(split_note)
    decision.solver.stage_seconds = {k: round(v, 6) for k, v in ep.stage.items()}
    decision.solver.seconds = round(time.monotonic() - t0, 6)
    _warn_if_late(decision, params, state)
    return decision


def _warn_if_late(decision: Decision, params: SolveParams, state: ClusterState) -> None:
    """Warn on the log (stderr) when the call took longer than its limit: not a note, so the
    decision stays the same on any machine."""
    if decision.solver.seconds > params.time_limit_s:
        jobs = len(state.snapshot.jobs)
        log.warning("%s", overrun_text(decision.solver.seconds, params.time_limit_s, jobs))


def overrun_text(seconds: float, limit_s: float, jobs: int) -> str:
    """The warning of a call that ended after its limit: the stages that every decision needs
    (reading, predictions, candidates, the greedy plan, placing, decoding, checking) took longer
    than the limit at this size (or on this machine's load), so even the labelled greedy plan
    came late."""
    return (
        f"over the time limit: the call took {seconds:.3g} s against time_limit_s {limit_s:g}; the "
        f"stages every decision needs took longer than that at this snapshot's size ({jobs} jobs) "
        "or on this machine's load: raise time_limit_s, or split the epoch (partitions)"
    )


def start_part_workers(
    snapshot: Snapshot | ClusterState,
    *,
    params: SolveParams | None = None,
    predictor: Predictor | None = None,
    partitions: int | str | None = None,
    executor: str = "auto",
    timeout_s: float | None = None,
) -> int:
    """Start and set up, ahead of the call, the worker processes that
    ``solve_epoch(snapshot, params=params, predictor=predictor, partitions=partitions,
    executor=executor)`` will hand its parts to (:func:`optsched.engine.partition.start_workers`):
    a fresh process (``optsched solve``) otherwise starts its workers inside the parts' deadline,
    and at a 1 s limit they are never ready in time (every part then falls back to its greedy
    plan). Call it before the call, as the default predictor is loaded; the decision does not
    depend on it, only whether the parts answer in time. Waits at most ``timeout_s`` (default
    :data:`optsched.parallel.SETUP_TIMEOUT_S`; workers not ready by then go on setting up).
    Returns how many workers are ready (0 when the call will not run parts in worker
    processes)."""
    state = snapshot if isinstance(snapshot, ClusterState) else ClusterState.from_snapshot(snapshot)
    params = resolve_params(state.snapshot, params)
    params.check()
    opts = state.snapshot.options
    k = _partitions(state, partitions if partitions is not None else opts.partitions if opts else None)
    if k < 2 or (state.snapshot.workflows is not None and bool(state.snapshot.workflows.sessions)):
        return 0
    from optsched.engine.partition import start_workers

    warm_up()
    return start_workers(
        state, params, k, solve=solve_epoch, executor=executor, predictor=predictor,  # type: ignore[arg-type]
        timeout_s=timeout_s,
    )


def _partitions(state: ClusterState, value: int | str | None) -> int:
    if value is None or value == 1:
        return 1
    from optsched.engine.partition import resolve_partitions

    return resolve_partitions(value, state)


def _prepare(
    state: ClusterState,
    params: SolveParams,
    pred: Predictor,
    stage: dict[str, float],
    assurance: dict[str, asr.TenantAssurance] | None = None,
    victim_slack: Mapping[str, int] | None = None,
) -> _Epoch:
    from optsched.engine.candidates import build_problem
    from optsched.engine.lookahead import LookaheadParams, plan_reservations

    notes: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DomainWarning)
        t = time.monotonic()
        predictions = pred.predict_jobs(state)
        stage["predict"] = time.monotonic() - t
        t = time.monotonic()
        lp = LookaheadParams.of(state.snapshot)
        res = plan_reservations(state, predictions, lp)
        stage["reserve"] = time.monotonic() - t
        t = time.monotonic()
        signal = asr.compute(state) if assurance is None else assurance
        problem = build_problem(
            state, predictions, pred, signal, params.objective, groups=res.groups, slack_cap=victim_slack
        )
        stage["candidates"] = time.monotonic() - t
    for w in caught:
        notes.append(f"{type(w.message).__name__}: {w.message}")
        warnings.warn(w.message, w.category, stacklevel=3)
    notes.extend(problem.notes)
    return _Epoch(state, problem, predictions, signal, notes, stage, lp, res)


def _cluster_decision(ep: _Epoch, params: SolveParams, budget: Budget) -> Decision:
    """The cluster part's checked decision: the greedy plan, the backend's answer, then the
    first plan of the fallback chain (:func:`_fallback_chain`) that decodes and passes the
    checker.

    The model is solved on the capacity less the GPUs held for reservations; the fill pass
    after it may backfill those with jobs predicted to end before the reserved gang starts.
    """
    from optsched.engine.lookahead import limited

    problem = limited(ep.problem, ep.reservations, ep.state)
    params, auto_reason = _resolve_auto(problem, params, _work_s(problem, budget))
    prepared = _prepare_solver(problem, params, budget, ep.stage)
    try:
        hint, greedy_value = _greedy_plan(problem, ep.stage)
        result, fallback_reason = _solve(
            problem, params, budget, hint, greedy_value, ep.stage, auto_reason, prepared
        )
    finally:
        if prepared is not None:
            prepared.cancel()
    return _first_valid_decision(ep, problem, params, result, fallback_reason, hint, greedy_value)


def _work_s(problem: EpochProblem, budget: Budget) -> float:
    """The solver's work budget: less where the node rows are a relaxation (the stages around
    the solver take longer there, :meth:`Budget.shaped_work_s`)."""
    if problem.rows_relaxed:
        return budget.shaped_work_s()
    return budget.solver_work_s


def _greedy_plan(problem: EpochProblem, stage: dict[str, float]) -> tuple[Assignment, float]:
    """The greedy plan (the solver's hint and the first fallback) and its objective.

    Never cut by the clock: the greedy plan is cheap (linear in classes) and a cut one would
    make the answer depend on the machine's load.
    """
    from optsched.engine.backends.greedy import greedy_assignment

    t = time.monotonic()
    hint = greedy_assignment(problem)
    stage["greedy"] = time.monotonic() - t
    return hint, hint.objective(problem)


def _resolve_auto(problem: EpochProblem, params: SolveParams, work: float) -> tuple[SolveParams, str | None]:
    """``params`` with ``auto`` (:data:`DEFAULT_BACKEND`) replaced by the backend the rule
    picks (:func:`auto_backend`), and the fallback reason when the rule picks the greedy plan."""
    if params.backend != "auto":
        return params, None
    return params.with_(backend=auto_backend(problem, work)), None


def _prepare_solver(
    problem: EpochProblem, params: SolveParams, budget: Budget, stage: dict[str, float]
) -> HighsPrepared | None:
    """With the HiGHS backend, its model built and (where it takes the LP path) its LP
    relaxation started in a thread before the greedy plan, which the relaxation does not need
    (:meth:`~optsched.engine.backends.highs.HighsBackend.prepare`: the same answer, on the
    second core while the greedy plan is made). ``None`` for other backends, or when no wall
    clock is left for a solver."""
    if params.backend != "highs":
        return None
    from optsched.engine.backends import get_backend
    from optsched.engine.backends.highs import HighsBackend

    wall_s = budget.solver_wall_s()
    if wall_s <= MIN_SOLVER_WALL_S:
        return None
    t = time.monotonic()
    backend = get_backend(params.backend)
    prepared: HighsPrepared | None = None
    if isinstance(backend, HighsBackend):
        try:
            solve_params = params.with_(time_limit_s=wall_s, work_s=_work_s(problem, budget))
            prepared = backend.prepare(problem, solve_params)
        except Exception:  # the solve builds the model again and reports what fails
            log.exception("preparing the HiGHS model failed")
    stage["model"] = time.monotonic() - t
    return prepared


def _solve(
    problem: EpochProblem,
    params: SolveParams,
    budget: Budget,
    hint: Assignment,
    greedy_value: float,
    stage: dict[str, float],
    auto_reason: str | None,
    prepared: HighsPrepared | None = None,
) -> tuple[SolveResult | None, str | None]:
    """The backend's usable answer (:func:`_usable`), or ``None`` and the reason the decision
    falls back to the greedy plan: the greedy backend was asked for (or picked by ``auto``),
    no wall-clock time is left, or the backend raised. ``prepared``: the HiGHS model and LP
    relaxation :func:`_prepare_solver` started."""
    from optsched.engine.backends import get_backend

    if params.backend == "greedy":
        return None, auto_reason or "greedy backend requested"
    wall_s = budget.solver_wall_s()
    if wall_s <= MIN_SOLVER_WALL_S:
        return None, WALL_CLOCK_FALLBACK
    t = time.monotonic()
    result: SolveResult | None = None
    fallback_reason: str | None = None
    try:
        backend = prepared.backend if prepared is not None else get_backend(params.backend)
        result = backend.solve(
            problem, params.with_(time_limit_s=wall_s, work_s=_work_s(problem, budget)), hint
        )
    except (OptschedError, ValueError):
        raise
    except Exception as exc:  # a solver crash degrades to the labelled fallback
        log.exception("backend %s failed", params.backend)
        fallback_reason = f"{params.backend} raised {type(exc).__name__}: {exc}"
    stage["solve"] = time.monotonic() - t
    if result is None:
        return None, fallback_reason
    return _usable(result, params, hint, greedy_value)


def _usable(
    result: SolveResult, params: SolveParams, hint: Assignment, greedy_value: float
) -> tuple[SolveResult | None, str | None]:
    """What of a backend's result the decision may use: ``None`` and the reason when the wall
    clock ended its search or it has no solution; the greedy plan, labelled with the solver's
    bound, when its answer is worse than the greedy plan; else the result itself."""
    if WALL_CLOCK_HIT in result.detail:
        # whatever the solver had found when the net stopped it depends on the machine's
        # load: the deterministic greedy plan answers, with the one label of that case
        log.info("%s: %s (%s)", params.backend, WALL_CLOCK_FALLBACK, result.detail)
        return None, WALL_CLOCK_FALLBACK
    if result.status not in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE) or result.assignment is None:
        return None, f"{params.backend}: {result.status.value} ({result.detail})"
    if result.objective is not None and result.objective < greedy_value - 1e-6:
        # the solver's bound still bounds the greedy plan: keep the better plan, labelled
        # with the solver's bound (a scaled objective may not tell near-ties apart)
        return SolveResult(
            status=SolveStatus.FEASIBLE,
            backend=result.backend,
            seconds=result.seconds,
            assignment=copy.deepcopy(hint),
            objective=greedy_value,
            bound=result.bound,
            detail=f"{result.detail}; its answer ({result.objective:.6g}) was below the greedy "
            f"plan's ({greedy_value:.6g}), which is kept",
        ), None
    return result, None


@dataclass
class _Plan:
    """One plan of the fallback chain: the assignment, the solver result it reports (``None``
    for a fallback), its ``fallback_reason`` and what the log and the reason call it."""

    assignment: Assignment
    result: SolveResult | None
    reason: str | None
    what: str


def _fallback_chain(
    problem: EpochProblem,
    params: SolveParams,
    result: SolveResult | None,
    reason: str | None,
    hint: Assignment,
) -> list[_Plan]:
    """The plans a decision is tried from, in order: the backend's answer (when there is one),
    the greedy plan, then the filled minimal plan (start nothing, stop only what must stop)."""
    from optsched.engine.backends.greedy import repaired

    chain: list[_Plan] = []
    if result is not None and result.assignment is not None:
        chain.append(_Plan(result.assignment, result, None, f"{params.backend} answer"))
    chain.append(_Plan(hint, None, reason, "greedy plan"))
    chain.append(_Plan(repaired(problem), None, reason, "filled minimal plan"))
    return chain


def _first_valid_decision(
    ep: _Epoch,
    problem: EpochProblem,
    params: SolveParams,
    result: SolveResult | None,
    reason: str | None,
    hint: Assignment,
    greedy_value: float,
) -> Decision:
    """The decision of the first plan of the fallback chain that decodes and passes the
    checker; each failure is logged and added to the next plan's ``fallback_reason``.

    When placing the solver's answer on the nodes lost starts the model's node rows (a
    relaxation where shapes need more) had counted and left it below the greedy plan, which
    places as it goes, the greedy plan is placed too and the better of the two is decided
    (labelled with the solver's bound): only that one is annotated and checked
    (:func:`_better_greedy`).

    Raises
    ------
    OptschedError
        When every plan of the chain fails.
    """
    t = time.monotonic()
    try:
        errors: list[str] = []
        for plan in _fallback_chain(problem, params, result, reason, hint):
            why = plan.reason
            if errors:
                why = "; ".join(filter(None, [why, *errors]))
            try:
                d = _placed_decision(ep, problem, plan.assignment, plan.result, why)
                if plan.result is not None:
                    g = _better_greedy(ep, problem, plan.result, d.decision, hint, greedy_value)
                    if g is not None:
                        try:
                            return _finished(ep, problem, params, g)
                        except Exception:  # the solver's decision stands if it passes the checker
                            log.exception("the greedy plan placed after the solver's answer failed")
                return _finished(ep, problem, params, d)
            except Exception as exc:  # every failure of a plan falls back to the next one
                if not isinstance(exc, _Rejected):
                    log.exception("decoding the %s failed", plan.what)
                failed = str(exc) if isinstance(exc, _Rejected) else f"raised {type(exc).__name__}: {exc}"
                errors.append(f"{plan.what} {failed}")
        raise OptschedError("internal error: no valid decision could be built: " + "; ".join(errors))
    finally:
        ep.stage["decide_and_check"] = time.monotonic() - t


def _better_greedy(
    ep: _Epoch, problem: EpochProblem, result: SolveResult, d: Decision, hint: Assignment,
    greedy_value: float,
) -> Draft | None:
    """The greedy plan placed on the nodes, labelled with the solver's bound, when the solver's
    answer placed (``d``) is below the greedy plan's value and the greedy plan placed is above
    it; else ``None``. Places a copy of ``hint`` (the fallback chain's next plan stays as it
    was)."""
    obj = d.solver.objective
    if obj is None or obj >= greedy_value - 1e-6 * max(1.0, abs(greedy_value)):
        return None
    kept = SolveResult(
        status=SolveStatus.FEASIBLE, backend=result.backend, seconds=result.seconds,
        assignment=copy.deepcopy(hint), objective=greedy_value, bound=result.bound,
        detail=f"{result.detail}; placed on the nodes its answer ({obj:.6g}) was below "
        f"the greedy plan's ({greedy_value:.6g}), which is kept",
    )
    assert kept.assignment is not None
    try:
        g = _placed_decision(ep, problem, kept.assignment, kept, None)
    except Exception:  # the solver's decision stands
        log.exception("decoding the greedy plan after the solver's answer failed")
        return None
    return g if g.decision.solver.objective is not None and g.decision.solver.objective > obj else None


def _fill_pass(
    ep: _Epoch, problem: EpochProblem, a: Assignment, held: int
) -> tuple[int, list[str], _Tally | None]:
    """Start, in ``a``, every queued job that still fits (and, with GPUs held for
    reservations, backfill those): the number started, the notes that say so, and the fill's
    ledger in step with ``a`` (``None`` after a backfill, which changes ``a`` after it).

    Never cut by the deadline: a cut fill would leave startable work queued (invariant 8).
    """
    from optsched.engine.backends.greedy import fill_ledger
    from optsched.engine.lookahead import backfill

    t = time.monotonic()
    ledger: _Tally | None
    added, ledger = fill_ledger(problem, a)
    if held:
        added += backfill(ep.problem, a, ep.reservations)
        ledger = None
    ep.stage["fill"] = ep.stage.get("fill", 0.0) + time.monotonic() - t
    notes = []
    if added:
        notes.append(f"fill pass started {added} queued job(s) that still fit")
    if held:
        notes.append(
            f"{held} GPU(s) held for reservations: the plan is for the capacity without them, "
            "then backfilled"
        )
    return added, notes, ledger


def _status_and_bound(
    res: SolveResult | None, problem: EpochProblem, obj: float, proven_whole: bool, notes: list[str]
) -> tuple[str, float | None]:
    """The decision's status and bound: ``fallback`` without a solver result; ``optimal`` only
    when the solver proved it on the whole problem (``proven_whole``: complete model, nothing
    filled, nothing held); a bound below the answer's objective is dropped, with a note, and
    one below it by rounding only (``BOUND_TOL``) is reported as the objective itself."""
    if res is None:
        return "fallback", None
    proven = res.status == SolveStatus.OPTIMAL and proven_whole
    status = "optimal" if proven else "feasible"
    bound = None if res.bound is None else res.bound + problem.bound_slack
    if bound is not None and bound < obj - BOUND_TOL * max(1.0, abs(obj)):
        # the last line of defence: a bound below the answer bounds nothing (the model
        # missed plans the answer has); never report it, never call the answer optimal
        notes.append(
            f"{res.backend}: its bound ({bound:.6g}) is below this answer's objective "
            f"({obj:.6g}), so it is no bound of the whole problem: bound dropped"
        )
        return "feasible", None
    # within rounding of the answer (HiGHS' dual bound may sit a few ulps under its own
    # objective): the answer's objective is the bound, so no bound is ever below it
    return status, None if bound is None else max(bound, obj)


def _idle_victims(problem: EpochProblem, a: Assignment) -> bool:
    """Whether a stopped job (not an MPS guest) keeps all its GPUs idle: no placed start of
    ``a`` takes any of them."""
    taken = {(r.node, r.gpu) for stack in a.placements.values() for refs in stack if refs for r in refs}
    return any(
        not (run := problem.running[x]).guest and run.alloc
        and not any((r.node, r.gpu) in taken for r in run.alloc)
        for x in a.preempt
    )


def _placed_decision(
    ep: _Epoch,
    problem: EpochProblem,
    a: Assignment,
    res: SolveResult | None,
    reason: str | None,
) -> Draft:
    """One plan as a decision placed on the nodes: fill pass, placing (starts the nodes cannot
    hold leave the plan, and the fill runs again), status and bound, decoding. Not yet
    explained, annotated nor checked (:func:`_finished`: only the plan kept is).

    Raises
    ------
    _Rejected
        When starts still cannot be placed after :data:`MAX_DECODE_ROUNDS` rounds.
    """
    from optsched.engine.backends.greedy import (
        drop_unused_preemptions,
        fill_ledger,
        keep_loan_funded_victims,
        place_plan,
        unplace,
    )
    from optsched.engine.decode import Unplaced, draft_decision

    held = sum(h.held for h in ep.reservations.holds)
    added, fill_notes, ledger = _fill_pass(ep, problem, a, held)
    unplaced = 0
    kept = 0
    refilled = False
    rounds = 0
    while rounds < MAX_DECODE_ROUNDS:
        rounds += 1
        # the last fill's ledger, when nothing changed ``a`` since (placing uses it up)
        failed = place_plan(problem, a, ledger)
        ledger = None
        if failed:
            unplaced += len(failed)
            more, ledger = unplace(problem, a, failed)
            added += more
            continue
        if problem.held_gpus and not refilled:
            # starts allowed on GPUs held for a reservation were placed there when they could
            # be: the GPUs the model counted for them are free for the queued jobs
            refilled = True
            more, ledger = fill_ledger(problem, a)
            if more:
                added += more
                continue
            ledger = None
        if problem.node_records and _idle_victims(problem, a):
            # a start placed on other nodes than its victims' leaves their GPUs idle: those
            # victims keep running (the plan stays valid; its value only grows)
            before = len(a.preempt)
            drop_unused_preemptions(problem, a, placed=True)
            kept += before - len(a.preempt)
            back = keep_loan_funded_victims(problem, a)
            if back:
                # the starts on loan it took back leave GPUs free: the fill uses them inside
                # quota (work conservation), and the new starts are placed
                kept += back
                more, filled = fill_ledger(problem, a)
                added += more
                failed = place_plan(problem, a, filled)
                if failed:
                    unplaced += len(failed)
                    more, ledger = unplace(problem, a, failed)
                    added += more
                    continue
        notes = [*ep.notes, *fill_notes]
        if unplaced:
            notes.append(
                f"node shape: {unplaced} start(s) the free nodes could not hold (CPU, memory, "
                "topology, shares or pieces the model counts in chunks) stay queued"
            )
        obj = a.objective(problem)
        proven_whole = problem.complete and added == 0 and held == 0 and unplaced == 0 and kept == 0
        status, bound = _status_and_bound(res, problem, obj, proven_whole, notes)
        gap = None if bound is None else abs(bound - obj) / max(1.0, abs(bound))
        info = SolverInfo(
            backend=res.backend if res is not None else "greedy",
            seconds=0.0,
            objective=obj,
            bound=bound,
            gap=gap,
            status_detail=res.detail if res is not None else None,
            fallback_reason=reason,
            stage_seconds={},
            notes=notes,
        )
        try:
            d = draft_decision(ep.state, problem, a, ep.predictions, ep.signal, info, status)
            break
        except Unplaced as u:
            if not u.failed:
                # only MPS guests the nodes could not hold: each such round bars their hosts from
                # guests for good (``Assignment.no_guest_on``), so these rounds end by themselves
                rounds -= 1
            unplaced += len(u.failed) + len(u.guests)
            more, ledger = unplace(problem, a, u.failed, u.guests)
            added += more
    else:
        raise _Rejected(f"{unplaced} start(s) the free nodes could not hold after {MAX_DECODE_ROUNDS} rounds")
    return d


def _finished(ep: _Epoch, problem: EpochProblem, params: SolveParams, draft: Draft) -> Decision:
    """A placed decision (:func:`_placed_decision`) with its explanations and predictions
    (``Draft.complete``) and its look-ahead annotations, checked against the snapshot as
    given.

    Raises
    ------
    _Rejected
        When the decision fails the checker.
    """
    from optsched.engine.check import check_decision
    from optsched.engine.lookahead import annotate

    draft.complete()
    d = draft.decision
    t = time.monotonic()
    annotate(
        ep.state, d, ep.predictions, problem.density, ep.lookahead, ep.reservations,
        seed=params.seed, time_limit_s=params.time_limit_s,
    )
    ep.stage["lookahead"] = ep.stage.get("lookahead", 0.0) + time.monotonic() - t
    d.pool = ep.pool
    bad = check_decision(ep.orig or ep.state, d)
    if bad:
        msg = "; ".join(str(v) for v in bad[:5])
        raise _Rejected(f"failed the checker: {msg}")
    return d


def _decide_pool(state: ClusterState) -> PoolDecision | None:
    """The serving pool's size for this epoch (``optsched.engine.workflows.pool``); ``None`` when the
    snapshot neither allows lending nor holds lent pool GPUs."""
    wf = state.snapshot.workflows
    if wf is None or (wf.pool_lending is None and not any(d.lent_by for d in wf.pool)):
        return None
    from optsched.engine.workflows.pool import decide_pool

    return decide_pool(state)


def _effective_state(state: ClusterState, pool: PoolDecision) -> ClusterState:
    from optsched.engine.workflows.check import effective_state

    return effective_state(state, pool)


class _Rejected(Exception):
    """A decision that failed the checker."""


def _attach_workflows(ep: _Epoch, decision: Decision, params: SolveParams, budget: Budget) -> None:
    """Plan the workflow part, check it with its own checker and fallback, and report the
    worse of the two parts' statuses at the top."""
    from optsched.engine.workflows.check import check_workflow_plan
    from optsched.engine.workflows.planner import plan_workflows

    t = time.monotonic()
    try:
        # a nominal limit (the planner's share of the call), so its deterministic work is the
        # same in every run; the wall clock left is checked by the planner itself
        plan = plan_workflows(
            ep.state, time_limit_s=budget.workflow_left_s(), seed=params.seed, work_s=budget.workflow_work_s
        )
        bad = check_workflow_plan(ep.state, plan)
        why = f"workflow plan failed invariant 6: {bad[0]}" if bad else None
    except Exception as exc:  # the workflow planner's own failure falls back too
        log.exception("workflow planning failed")
        bad, why = [], f"workflow planner raised {type(exc).__name__}: {exc}"
        plan = None
    if plan is None or bad:
        plan = WorkflowPlan(status="fallback", notes=[f"no workflow plan this epoch: {why}"])
        decision.solver.notes.append(f"workflows: {why}")
    decision.workflow_plan = plan
    if plan.status is not None and STATUS_RANK[plan.status] > STATUS_RANK[decision.status]:
        decision.status = plan.status
        decision.solver.notes.append(f"status is the workflow plan's ({plan.status})")
    ep.stage["workflows"] = time.monotonic() - t

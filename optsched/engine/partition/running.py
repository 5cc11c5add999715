"""The run stage of a partitioned epoch: every part solved by the ordinary pipeline, in parallel.

:func:`run_parts` sends each part (``solve_epoch`` on the part's snapshot, through
:func:`solve_part`) to the one executor, :func:`optsched.parallel.run`: on Ray tasks when Ray
is initialised, else in fresh worker interpreters (never a fork), or one after the other. Only
plain data crosses to a worker: the part's snapshot, the parameters, the fleet's assurance and a
:class:`PredictorRef` (models load in the worker, :func:`setup_worker`, which also warms the
pipeline up inside the deadline). A part that fails is answered by its greedy plan, labelled
``fallback``. Every part must answer by the parts' deadline (``PART_SHARE + PART_GRACE`` of the
limit from the call's start, worker start included); when the wall clock cuts off any part,
every part is answered by its greedy plan with one label
(:data:`~optsched.engine.budget.PART_WALL_CLOCK_FALLBACK`), so the decision does not depend on
how many parts were late.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from optsched.engine import assurance as asr
from optsched.engine.budget import (
    PART_GRACE,
    PART_SHARE,
    PART_WALL_CLOCK_FALLBACK,
    WALL_CLOCK_FALLBACK,
)
from optsched.schema.decision import Decision
from optsched.schema.snapshot import Snapshot

if TYPE_CHECKING:
    from optsched.engine.backends.base import SolveParams
    from optsched.predict.base import Predictor

log = logging.getLogger("optsched")

Executor = Literal["auto", "ray", "process", "serial"]


@dataclass
class PartResult:
    """One part's decision and how long it took in its worker."""

    decision: Decision
    seconds: float
    jobs: int
    gpus: int
    cpu_seconds: float = 0.0
    """CPU seconds of the worker process for this part (what an idle core would take)."""


SolveFn = Callable[..., Decision]
"""The ordinary pipeline, :func:`optsched.engine.epoch.solve_epoch` (passed in by the caller, so
this module does not import the module that imports it; a top-level function pickles by name)."""


@dataclass(frozen=True)
class PredictorRef:
    """How a part's worker gets its predictor: plain data, never a loaded (pickled) booster.

    ``default``: the worker's own default predictor (:func:`optsched.engine.epoch.default_predictor`,
    loaded once per worker); ``models``: the LightGBM boosters of ``models_dir``, loaded once per
    worker, which must give the ``sources`` the caller's predictor has; ``object``: any other
    predictor, as the caller's object (in this process, or pickled for a worker).
    """

    kind: Literal["default", "models", "object"]
    models_dir: str | None = None
    sources: tuple[str, ...] = ()
    obj: Any = None


def predictor_ref(predictor: Predictor | None, crosses: bool) -> PredictorRef:
    """The reference a part is sent (``crosses``: to another process)."""
    if predictor is None:
        return PredictorRef("default")
    if crosses:
        from optsched.predict.lgbm import LightGBMPredictor

        if type(predictor) is LightGBMPredictor:
            srcs = tuple(sorted(b.source for b in predictor.boosters.values()))
            return PredictorRef("models", str(predictor.models_dir.resolve()), srcs)
    return PredictorRef("object", obj=predictor)


_LOADED: dict[tuple[str, tuple[str, ...]], Predictor] = {}


def load_predictor(ref: PredictorRef) -> Predictor | None:
    """The predictor ``ref`` names (``None``: the pipeline's default), loaded once per process."""
    if ref.kind == "default":
        return None
    if ref.kind == "object":
        return ref.obj
    assert ref.models_dir is not None
    key = (ref.models_dir, ref.sources)
    if key not in _LOADED:
        from optsched.predict.lgbm import LightGBMPredictor

        pred = LightGBMPredictor(ref.models_dir)
        got = tuple(sorted(b.source for b in pred.boosters.values()))
        if got != ref.sources:
            raise RuntimeError(f"the models in '{ref.models_dir}' give {got}, the caller's {ref.sources}")
        _LOADED[key] = pred
    return _LOADED[key]


def setup_worker(ref: PredictorRef, warm: Snapshot | None = None, params: SolveParams | None = None,
                 solve: SolveFn | None = None) -> None:
    """A part worker's setup (inside the parts' deadline): load the predictor, and solve
    ``warm`` (a part without jobs) once so every import and first call of the pipeline is done
    (the default predictor, ``None``, is loaded by that first call)."""
    key = (ref.kind, ref.models_dir, ref.sources, params.backend if params is not None else None)
    if key in _WARMED:  # (a Ray task runs the setup each time: once per process is enough)
        return
    pred = load_predictor(ref)
    if params is not None:  # a solver worker process (highspy, pulp) starts here, not in a solve
        from optsched.engine.backends import warm_up

        warm_up(params.backend)
    if warm is not None and solve is not None:
        solve(warm, params=params, predictor=pred)
    _WARMED.add(key)


_WARMED: set[tuple[str, str | None, tuple[str, ...], str | None]] = set()


def solve_part(
    part: Snapshot,
    params: SolveParams,
    signal: dict[str, asr.TenantAssurance] | None,
    solve: SolveFn,
    predictor: PredictorRef | Predictor | None = None,
    slack: dict[str, int] | None = None,
) -> PartResult:
    """Solve one part with the ordinary pipeline (a top-level function: runs in a worker),
    with the whole fleet's assurance ``signal`` (a tenant whose jobs wait in another part is
    not "assured" here, so its running jobs are not cheaper victims or MPS hosts) and the part's
    share of the fleet's victim ``slack`` (:func:`~optsched.engine.partition.splitting.part_slack`)."""
    pred = load_predictor(predictor) if isinstance(predictor, PredictorRef) else predictor
    t, c = time.monotonic(), time.process_time()
    d = solve(part, params=params, assurance=signal, predictor=pred, victim_slack=slack)
    return PartResult(
        d, time.monotonic() - t, len(part.jobs), sum(n.gpus for n in part.nodes), time.process_time() - c
    )


def run_parts(
    parts: list[Snapshot],
    params: SolveParams,
    executor: Executor,
    signal: dict[str, asr.TenantAssurance] | None,
    solve: SolveFn,
    predictor: Predictor | None = None,
    *,
    limit_s: float | None = None,
    deadline: float | None = None,
    slack: list[dict[str, int]] | None = None,
) -> list[PartResult]:
    """Solve every part with ``solve``, in part order, through :func:`optsched.parallel.run`:
    on Ray (``ray``, or ``auto`` when Ray is initialised), in worker processes (``process``, or
    ``auto`` without Ray), or here (``serial``). Only plain data crosses to a worker: the part's
    snapshot, the parameters, the signal and a :class:`PredictorRef` (models load in the
    worker). Every part must have answered by ``deadline`` (``time.monotonic``; default
    ``PART_GRACE`` x ``limit_s`` after the parts' own limit from now; ``limit_s``, the call's
    limit, defaults to ``params.time_limit_s / PART_SHARE``), its worker's start and setup
    included. When the wall clock cuts off any part (not answered by then, or its solver stopped
    by its own wall-clock net), **every** part is answered here by its greedy plan, labelled
    :data:`PART_WALL_CLOCK_FALLBACK`: the decision is then the same however many parts were
    late. A part that fails otherwise is answered by its greedy plan, labelled with the error."""
    from optsched import parallel

    mode = parallel.resolve_mode(executor, len(parts))
    ref = predictor_ref(predictor, crosses=mode != "serial")
    whole = params.time_limit_s / PART_SHARE if limit_s is None else limit_s
    t0 = time.monotonic()
    if deadline is None:
        deadline = t0 + params.time_limit_s + PART_GRACE * whole
    slacks: list[dict[str, int] | None] = list(slack) if slack is not None else [None] * len(parts)
    tasks = [(p, solve_part, (part, params, signal, solve, ref, slacks[p])) for p, part in enumerate(parts)]
    setup = part_setup(parts, params, ref, solve) if mode != "serial" and parts else None
    done, failures = parallel.run(tasks, mode=mode, setup=setup, deadline=deadline)
    late = sorted(
        [f.key for f in failures if f.timed_out]
        + [p for p, r in done.items() if r.decision.solver.fallback_reason == WALL_CLOCK_FALLBACK]
    )
    if late:
        log.info("partitions: part(s) %s cut off by the wall clock; every part greedy", late)
        waited = time.monotonic() - t0
        return [
            _greedy_part(part, params, signal, solve, predictor, PART_WALL_CLOCK_FALLBACK, waited, slacks[p])
            for p, part in enumerate(parts)
        ]
    for f in failures:
        why = f"part {f.key} failed ({f.error}); its greedy plan was used"
        done[f.key] = _greedy_part(parts[f.key], params, signal, solve, predictor, why, 0.0, slacks[f.key])
    return [done[p] for p in range(len(parts))]


def part_setup(
    parts: list[Snapshot], params: SolveParams, ref: PredictorRef, solve: SolveFn
) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """The setup every part's worker runs (:func:`setup_worker` on the first part without
    jobs, on one node): the same for :func:`run_parts` and for workers started ahead of a call
    (:func:`optsched.engine.partition.start_workers`), so those are handed their part at once."""
    warm = parts[0].model_copy(update={"nodes": parts[0].nodes[:1], "jobs": []})
    return (setup_worker, (ref, warm, params, solve))


def _greedy_part(
    part: Snapshot,
    params: SolveParams,
    signal: dict[str, asr.TenantAssurance] | None,
    solve: SolveFn,
    predictor: Predictor | None,
    reason: str,
    waited: float,
    slack: dict[str, int] | None = None,
) -> PartResult:
    """The greedy plan of a part, computed here, labelled ``fallback`` with ``reason``."""
    r = solve_part(part, params.with_(backend="greedy"), signal, solve, predictor, slack)
    d = r.decision
    note = reason if reason.startswith("partitions:") else f"partitions: {reason}"
    info = d.solver.model_copy(update={"fallback_reason": reason, "notes": [*d.solver.notes, note]})
    d = d.model_copy(update={"status": "fallback", "solver": info})
    return PartResult(d, waited + r.seconds, r.jobs, r.gpus, r.cpu_seconds)

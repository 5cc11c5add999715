"""Partitioned epochs: split a fleet-size epoch into ``k`` parts, solve them in parallel, merge.

The design (``docs/partitioning.md`` says why each step keeps the guarantees exact), one module
per stage:

1. **Split** (:mod:`~optsched.engine.partition.splitting`): every tenant gets a *home* part,
   nodes go to parts in groups so every running job lies inside one part, each tenant's quota,
   borrow and lend limits and preemption cap are sliced per part so the slices sum *exactly*
   to its numbers, and pending jobs go to their tenant's home part (a gang that no part can
   hold is left for the coordination step).
2. **Run** (:mod:`~optsched.engine.partition.running`): the parts are solved with the ordinary
   pipeline (``solve_epoch`` on each part's snapshot) through :func:`optsched.parallel.run`: on
   Ray tasks when Ray is initialised, else in fresh worker interpreters (never a fork), or one
   after the other; a part that fails is answered by its greedy plan, labelled ``fallback``.
   Every part must answer by the parts' deadline (``PART_SHARE + PART_GRACE`` of the limit from
   the call's start, worker start included); when the wall clock cuts off any part, every part
   is answered by its greedy plan with one label
   (:data:`~optsched.engine.budget.PART_WALL_CLOCK_FALLBACK`), so the decision does not depend
   on how many parts were late.
3. **Merge** (:mod:`~optsched.engine.partition.merging`), the coordination step: the parts'
   starts and preemptions are merged; then, on the whole fleet, the queued jobs (oldest
   guaranteed first) are placed on the GPUs left free, inside their tenant's *global* idle
   quota or on loan from the *global* idle quota of the others; ``on_loan`` flags and loans are
   re-derived globally (a tenant over its slice in one part but under its quota overall borrows
   nothing), and the over-quota notes are recomputed on global numbers.
4. **Explain** (:func:`~optsched.engine.partition.merging.explain_merged`): every queued and
   every preempted job of the merged decision gets its explanation, computed on the whole
   snapshot and the merged decision (:func:`optsched.engine.explain.explain_decision`), and its
   queue reason from it; a job the coordination step stopped names the start it made room for.
5. **Check**: the merged decision goes through :func:`optsched.engine.check.check_decision` on
   the whole snapshot; a rejected merge (:class:`MergeRejected`) falls back to the monolithic
   pipeline.

:func:`solve_partitioned`, here, runs the stages in that order and times each. The status is
never ``optimal``: ``feasible`` when every part's solver answered, ``fallback`` when one of
them gave the greedy plan. The parts' bounds bound the *partitioned* problem only, so the
decision carries no bound; ``solver.notes`` lists every part's size, status and time.
:func:`decision_value` scores any decision on the whole epoch's objective.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from optsched.engine import assurance as asr
from optsched.engine.budget import Budget
from optsched.engine.partition.merging import explain_merged, merge, merge_plan
from optsched.engine.partition.running import (
    Executor,
    PartResult,
    PredictorRef,
    SolveFn,
    load_predictor,
    part_setup,
    predictor_ref,
    run_parts,
    setup_worker,
    solve_part,
)
from optsched.engine.partition.splitting import (
    AUTO_GPUS_PER_PART,
    Split,
    apportion,
    resolve_partitions,
    split,
)
from optsched.engine.state import ClusterState
from optsched.schema.decision import Decision

if TYPE_CHECKING:
    from optsched.engine.backends.base import SolveParams
    from optsched.engine.problem import EpochProblem
    from optsched.predict.base import Predictor

__all__ = [
    "AUTO_GPUS_PER_PART",
    "Executor",
    "MergeRejected",
    "PartResult",
    "PredictorRef",
    "SolveFn",
    "Split",
    "apportion",
    "decision_value",
    "explain_merged",
    "load_predictor",
    "merge",
    "merge_plan",
    "part_setup",
    "predictor_ref",
    "resolve_partitions",
    "run_parts",
    "setup_worker",
    "solve_part",
    "solve_partitioned",
    "split",
    "start_workers",
]


def solve_partitioned(
    state: ClusterState,
    params: SolveParams,
    k: int,
    *,
    solve: SolveFn,
    executor: Executor = "auto",
    predictor: Predictor | None = None,
    on_stage: Callable[[str, float], None] | None = None,
    t0: float | None = None,
) -> Decision:
    """Split, solve the parts with ``solve`` (:func:`optsched.engine.epoch.solve_epoch`), merge,
    explain and check (see the module docstring). ``stage_seconds`` gets ``split`` (with the
    fleet's assurance), ``part_max``, ``merge``, ``explain`` and ``check``, their ``*_cpu``
    twins, and every part's seconds. ``t0`` (``time.monotonic``, default now) is when the call
    started: the parts' deadline is ``Budget.part_deadline`` from it. Raises
    :class:`MergeRejected` when the merged decision fails the checker (the caller falls back)."""
    from optsched.engine.check import check_decision

    stage: dict[str, float] = {}
    budget = Budget(params.time_limit_s, t0=time.monotonic() if t0 is None else t0)
    part_params = params.with_(time_limit_s=budget.part_limit_s)
    t, c = time.monotonic(), time.process_time()
    sp = split(state, k, seed=params.seed)
    signal = asr.compute(state)  # the fleet's assurance, for every part and the merge
    stage["split"] = time.monotonic() - t
    stage["split_cpu"] = time.process_time() - c
    t = time.monotonic()
    results = run_parts(
        sp.parts, part_params, executor, signal, solve, predictor, limit_s=params.time_limit_s,
        deadline=budget.part_deadline, slack=sp.slack,
    )
    stage["parts_wall"] = time.monotonic() - t
    stage["part_max"] = max(r.seconds for r in results)
    stage["part_cpu_max"] = max(r.cpu_seconds for r in results)
    stage["part_cpu_sum"] = sum(r.cpu_seconds for r in results)
    for p, r in enumerate(results):
        stage[f"part{p}"] = r.seconds
        stage[f"part{p}_cpu"] = r.cpu_seconds
    t, c = time.monotonic(), time.process_time()
    d, room_for = merge_plan(state, results, sp.leftover, signal)
    stage["merge"] = time.monotonic() - t
    stage["merge_cpu"] = time.process_time() - c
    t, c = time.monotonic(), time.process_time()
    explain_merged(state, d, signal, room_for)
    stage["explain"] = time.monotonic() - t
    stage["explain_cpu"] = time.process_time() - c
    t, c = time.monotonic(), time.process_time()
    bad = check_decision(state, d)
    stage["check"] = time.monotonic() - t
    stage["check_cpu"] = time.process_time() - c
    if bad:
        raise MergeRejected("; ".join(str(v) for v in bad[:5]))
    for r in results:
        for name, sec in r.decision.solver.stage_seconds.items():
            key = f"part_{name}_max"
            stage[key] = max(stage.get(key, 0.0), sec)
    d.solver.stage_seconds = {k_: round(v, 6) for k_, v in stage.items()}
    if on_stage is not None:
        for name, sec in stage.items():
            on_stage(name, sec)
    return d


def start_workers(
    state: ClusterState,
    params: SolveParams,
    k: int,
    *,
    solve: SolveFn,
    executor: Executor = "auto",
    predictor: Predictor | None = None,
    timeout_s: float | None = None,
) -> int:
    """Start and set up the worker processes that a :func:`solve_partitioned` call of ``state``
    in ``k`` parts with these ``params``, ``executor`` and ``predictor`` will use, so its parts
    are handed out at once instead of waiting for interpreters to start inside the parts'
    deadline (:func:`optsched.parallel.prestart`; the same split, part parameters and setup as
    the call, so the workers are set up for exactly it). Call it before the call's clock starts,
    as the predictor is loaded. Does nothing (returns 0) unless the parts would run in worker
    processes; else returns how many workers are ready."""
    from optsched import parallel

    mode = parallel.resolve_mode(executor, k)
    if k < 2 or mode != "process":
        return 0
    sp = split(state, k, seed=params.seed)
    part_params = params.with_(time_limit_s=Budget(params.time_limit_s).part_limit_s)
    setup = part_setup(sp.parts, part_params, predictor_ref(predictor, crosses=True), solve)
    wait_s = parallel.SETUP_TIMEOUT_S if timeout_s is None else timeout_s
    return parallel.prestart(parallel.default_workers(k), setup, wait_s)


class MergeRejected(Exception):
    """The merged decision failed the checker."""


def decision_value(problem: EpochProblem, state: ClusterState, decision: Decision) -> float:
    """The monolithic objective of any checked decision, job by job (each started job's own
    value, not its class's best members), so monolithic and partitioned decisions compare on
    the same scale (used by ``benchmarks/partition_bench.py``)."""
    from optsched.engine.problem import Assignment

    where: dict[str, tuple[int, int]] = {}
    for c, cls in enumerate(problem.pending):
        for m, jid in enumerate(cls.jobs):
            where[jid] = (c, m)
    run_index = {r.job: i for i, r in enumerate(problem.running)}
    guests = {(g.pending, g.running): g.value for g in problem.guests}
    types = {t: i for i, t in enumerate(problem.types)}
    w = problem.objective
    a = Assignment()
    val = 0.0
    for s in decision.start:
        if s.job not in where:
            continue
        c, m = where[s.job]
        cls = problem.pending[c]
        if s.colocated_with:
            host = run_index.get(s.colocated_with[0])
            val += guests.get((c, host), 0.0) if host is not None else 0.0
            continue
        ti = types[state.node_type(s.allocation[0].node)]
        a.add(c, ti, s.on_loan)
        val += cls.values[m]
        if ti in cls.types:
            val += cls.type_bonus[cls.types.index(ti)]
        if s.on_loan:
            val -= cls.loan_penalty
        else:
            val += problem.reclaim_of(cls)
    for p in decision.preempt:
        i = run_index.get(p.job)
        if i is not None:
            a.preempt.add(i)
            val -= problem.running[i].cost
    val -= w.borrow_penalty * a.borrowed(problem)
    if problem.frag_scale and problem.placement:
        from optsched.engine.chunks import ChunkBook

        val -= problem.frag_scale * ChunkBook(problem, a).fragmented()
    return val

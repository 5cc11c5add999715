"""HiGHS through OR-Tools MathOpt: the default exact backend, in-process and deterministic.

OR-Tools bundles HiGHS, so this backend needs no extra package and no worker process (the
separate ``highspy`` build clashes with OR-Tools' symbols in one interpreter; the ``highspy``
backend runs it in a worker process instead). It translates the same neutral
:class:`~optsched.engine.formulation.LinearModel` as every other exact backend, straight into
MathOpt's model message (a 14,000-variable model in about 0.04 s; MathOpt's Python modelling
layer took 0.8 s), and runs one of two modes:

* **branch and bound** when the model fits the work budget (:data:`VARS_PER_WORK_S` variables per
  nominal second): the MIP, warm-started from the greedy plan, stopped on a node limit
  (:data:`NODES_PER_S` per nominal second), so it proves optimality where it can;
* **LP and rounding** above that: the LP relaxation (dual simplex, stopped on an iteration limit
  of :data:`ITERATIONS_PER_S` per nominal second) gives a bound of the whole problem; the plan is
  the best of the greedy plan guided by the LP's solution
  (:func:`~optsched.engine.backends.greedy.guided_assignment`) and a RINS step (Danna, Rothberg
  and Le Pape, 2005: the decisions on which the LP's solution and the greedy plan agree are
  fixed, :func:`_rins_fixed`, and branch and bound, warm-started from the greedy plan and
  stopped on a node limit, searches the rest), reported ``feasible`` with the LP's bound
  (``optimal`` when the two meet within :data:`REL_GAP`). On a 10,000-GPU snapshot (large seed
  0) the guided plan was 3.6% below the LP's bound, RINS over every agreeing variable 1.4%,
  with stops free 0.98%, and with a window of free members around each class's count 0.54%
  (1.6 s for LP and RINS; the optimum, 14.9 s of branch and bound, 0.38%); on medium seed 1,
  2.2%, 0.77% and 0.09%.

Determinism: both modes stop on work limits derived from ``params.work_s`` with a fixed seed,
never on measured time, so the same problem gives the same answer on an idle or a loaded
machine. The wall-clock ``time_limit`` is a safety net set to the time left in the call; when it
ends the search the result's ``detail`` says ``wall-clock limit hit``.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from optsched.engine.backends.base import WALL_CLOCK_HIT, SolveParams, SolveResult, SolveStatus, check_extra
from optsched.engine.backends.stdio import solver_output_to_stderr
from optsched.engine.formulation import LinearModel, build_model, from_assignment, is_feasible, solved
from optsched.engine.problem import Assignment, EpochProblem

NODES_PER_S = 2000
"""Branch-and-bound nodes per nominal second of work (calibrated in ``docs/benchmarks.md``)."""
MIN_NODES = 50
VARS_PER_WORK_S = 3500.0
"""Model variables per nominal second of work up to which branch and bound runs; larger models
get the LP relaxation and the rounding (a 2,500-GPU model's root alone takes seconds)."""
MIP_GROWTH = 1.5
"""Past :data:`VARS_PER_WORK_S` variables, branch and bound's nominal cost grows with the
variables to this further power (:func:`mip_work_s`): its root, which cuts and presolves the
whole model, grows faster than the model. Measured with a node limit of 1 (2026-12-07, idle
2-core machine): 1,333 variables 0.42 s, 3,942 1.3 s, 4,661 1.8 s, 7,865 (node-shaped) 10.1 s,
13,630 (10,000 GPUs) 33 s. With the linear rule a 20 s call at 10,000 GPUs took branch and
bound, the wall clock stopped it at 17 s and the call answered with the greedy plan, 10% below
the bound, where a 6 s call's LP and RINS had answered within 0.72%."""
ITERATIONS_PER_S = 40_000
"""Simplex iterations per nominal second of work of the LP relaxation (a 10,000-GPU model's LP
takes about 2,500)."""
MIN_ITERATIONS = 20_000
RINS_FREE_PER_WORK_S = 5000.0
"""Free variables of the RINS step per nominal second of work left after the LP (its root alone
grows with them: about 0.15 s for 1,200 free variables at 2,500 GPUs, 0.8 s for 4,100 at
10,000); a neighbourhood larger than the work left is cut to fit (:func:`_cut_to_fit`: the
decisions on which the LP and the plan differ most stay free), so the step neither runs into the
wall clock nor is skipped (skipped, node-shaped medium seeds answered with the greedy plan,
2.2-8.2% below the LP's bound; cut, seeds 0, 3 and 9: 1.0-2.2%)."""
RINS_COUNT_WINDOW = 2
"""Members of a class free in the RINS step on each side of the greedy plan's start count
(:func:`_rins_fixed`; ten medium seeds: RINS with every member fixed where the LP agrees ended
0.18-0.77% below the LP's bound, with this window 0.09-0.45%)."""
RINS_REF_NONZEROS_PER_VAR = 4.5
"""Model density (nonzeros per variable) up to which :data:`RINS_FREE_PER_WORK_S` holds
(:func:`_density_factor`; format-1 medium snapshots have about 4.2)."""
REL_GAP = 1e-4
ALLOWED_EXTRA = {"mip_rel_gap", "node_limit", "presolve", "mip_heuristic_effort", "mode"}


def map_status(reason: Any, has_solution: bool) -> SolveStatus:
    """MathOpt's termination reason -> :class:`SolveStatus` (``ERROR`` for anything unexpected)."""
    from ortools.math_opt import result_pb2

    tr = result_pb2
    if reason == tr.TERMINATION_REASON_OPTIMAL:
        return SolveStatus.OPTIMAL
    if reason in (tr.TERMINATION_REASON_INFEASIBLE, tr.TERMINATION_REASON_INFEASIBLE_OR_UNBOUNDED):
        return SolveStatus.INFEASIBLE
    if reason in (tr.TERMINATION_REASON_FEASIBLE, tr.TERMINATION_REASON_NO_SOLUTION_FOUND):
        return SolveStatus.FEASIBLE if has_solution else SolveStatus.NO_SOLUTION
    return SolveStatus.ERROR


def model_proto(lin: LinearModel, integer: bool) -> Any:
    """MathOpt's ``ModelProto`` of ``lin`` (maximise), every variable integer or none."""
    from ortools.math_opt import model_pb2

    mp = model_pb2.ModelProto(name="optsched-epoch")
    v = mp.variables
    v.ids.extend(range(lin.n))
    v.lower_bounds.extend(lin.lb)
    v.upper_bounds.extend(lin.ub)
    v.integers.extend([integer] * lin.n)
    obj = mp.objective
    obj.maximize = True
    nz = [k for k, c in enumerate(lin.obj) if c != 0]
    obj.linear_coefficients.ids.extend(nz)
    obj.linear_coefficients.values.extend([lin.obj[k] for k in nz])
    cons = mp.linear_constraints
    cons.ids.extend(range(len(lin.rows)))
    cons.lower_bounds.extend([r.lo for r in lin.rows])
    cons.upper_bounds.extend([r.hi for r in lin.rows])
    rows: list[int] = []
    cols: list[int] = []
    coefs: list[float] = []
    for i, r in enumerate(lin.rows):
        for c in sorted(r.coefs):
            rows.append(i)
            cols.append(c)
            coefs.append(r.coefs[c])
    mat = mp.linear_constraint_matrix
    mat.row_ids.extend(rows)
    mat.column_ids.extend(cols)
    mat.coefficients.extend(coefs)
    return mp


def integer_copy(mp: Any) -> Any:
    """A copy of ``mp`` (a :func:`model_proto`) with every variable integer: the same message
    as ``model_proto(lin, integer=True)``, in a fifteenth of the time (a message copy, not a
    walk over the rows: 0.002 s against 0.028 s at 7,700 variables)."""
    from ortools.math_opt import model_pb2

    out = model_pb2.ModelProto()
    out.CopyFrom(mp)
    ints = out.variables.integers
    del ints[:]
    ints.extend([True] * len(out.variables.ids))
    return out


class _Net:
    """The wall-clock safety net of one HiGHS solve: its timer, or the caller that gives the
    solve up (:meth:`Prepared.cancel`), interrupts it."""

    def __init__(self) -> None:
        from ortools.util.python.solve_interrupter import SolveInterrupter

        self.interrupter = SolveInterrupter()
        self.stopped = threading.Event()

    def stop(self) -> None:
        self.stopped.set()
        self.interrupter.interrupt()


def _solve(
    mp: Any, params: Any, hint: Sequence[float] | None, budget: float, net: _Net | None = None
) -> tuple[Any, bool]:
    """One HiGHS solve of ``mp`` with the wall-clock net ``budget``: the result message and
    whether the net (not a work limit) ended it."""
    from ortools.math_opt import model_parameters_pb2, parameters_pb2
    from ortools.math_opt.core.python import solver
    from ortools.math_opt.python import callback, init_arguments

    mparams = model_parameters_pb2.ModelSolveParametersProto()
    if hint is not None:
        h = mparams.solution_hints.add()
        h.variable_values.ids.extend(range(len(hint)))
        h.variable_values.values.extend([float(x) for x in hint])
    # HiGHS checks its own time limit only now and then: the interrupter is the safety net
    net = net or _Net()
    timer = threading.Timer(budget + 0.02, net.stop)
    timer.daemon = True
    timer.start()
    try:
        with solver_output_to_stderr():
            res = solver.solve(
                mp, parameters_pb2.SOLVER_TYPE_HIGHS,
                init_arguments.StreamableSolverInitArguments().to_proto(), params, mparams, None,
                callback.CallbackRegistration().to_proto(), None, net.interrupter.pybind_interrupter,
            )
    finally:
        timer.cancel()
    from ortools.math_opt import result_pb2

    wall = net.stopped.is_set() or res.termination.limit in (
        result_pb2.LIMIT_TIME, result_pb2.LIMIT_INTERRUPTED
    )
    return res, wall


class _Background:
    """One HiGHS solve (:func:`_solve`) in a thread: HiGHS releases the GIL while it solves, so
    it runs on another core while the caller goes on with Python work it does not depend on."""

    def __init__(self, mp: Any, sp: Any, hint: Sequence[float] | None, budget: float, name: str) -> None:
        self._out: dict[str, Any] = {}
        self._net = _Net()
        self._thread = threading.Thread(target=self._run, args=(mp, sp, hint, budget), name=name, daemon=True)
        self._thread.start()

    def _run(self, mp: Any, sp: Any, hint: Sequence[float] | None, budget: float) -> None:
        try:
            self._out["res"] = _solve(mp, sp, hint, budget, self._net)
        except BaseException as exc:  # handed to the caller by ``result``
            self._out["exc"] = exc

    def result(self) -> tuple[Any, bool]:
        """The solve's result and whether the wall-clock net ended it (waits for it)."""
        self._thread.join()
        if "exc" in self._out:
            raise self._out["exc"]
        res: tuple[Any, bool] = self._out["res"]
        return res

    def cancel(self) -> None:
        """Stop the solve if it still runs, and wait for its thread (no solve outlives the call
        that started it)."""
        if self._thread.is_alive():
            self._net.stop()
        self._thread.join()


class Prepared:
    """The model of one epoch problem, built before :meth:`HighsBackend.solve` is called, and
    its LP relaxation already running in a thread where that call will take the LP path
    (:meth:`HighsBackend.prepare`). HiGHS releases the GIL while it solves, so the relaxation
    runs on a second core while the caller computes the greedy plan, which the LP does not
    need. The relaxation is the same solve the call would make (same model, parameters and
    iteration limit; one thread, fixed seed), so its answer is the same, only earlier."""

    def __init__(
        self, backend: HighsBackend, problem: EpochProblem, lin: LinearModel, iterations: int | None = None,
        mp: Any = None, sp: Any = None, budget: float = 0.0,
    ) -> None:
        self.backend = backend
        """The backend whose :meth:`HighsBackend.solve` uses it (the one that prepared it)."""
        self.problem = problem
        self.lin = lin
        self.iterations = iterations
        """The LP's iteration limit (``None``: no LP started)."""
        self.mp = mp
        """The relaxation's model message (``None``: no LP started)."""
        self._lp = _Background(mp, sp, None, budget, "optsched-highs-lp") if iterations is not None else None

    def lp_result(self) -> tuple[Any, bool]:
        """The relaxation's result and whether the wall-clock net ended it (waits for it)."""
        assert self._lp is not None
        return self._lp.result()

    def cancel(self) -> None:
        """Stop the relaxation if it still runs, and wait for its thread."""
        if self._lp is not None:
            self._lp.cancel()


@dataclass
class _RinsRun:
    """A RINS branch and bound started in a thread, and what its answer will say of it."""

    solve: _Background
    detail: str

    def cancel(self) -> None:
        self.solve.cancel()


def mip_work_s(n: int) -> float:
    """Nominal seconds of work branch and bound needs on a model of ``n`` variables: linear up
    to :data:`VARS_PER_WORK_S`, then growing with :data:`MIP_GROWTH` further powers."""
    size = n / VARS_PER_WORK_S
    return size * max(1.0, size) ** MIP_GROWTH


def rins_room(work: float) -> int:
    """The free variables of a RINS step that ``work`` nominal seconds hold:
    :data:`RINS_FREE_PER_WORK_S` per second up to :data:`VARS_PER_WORK_S` free variables, fewer
    past them, where the step's root grows as branch and bound's does (:data:`MIP_GROWTH`; on
    10,000-GPU snapshots 3,700 free variables took 0.55 s, 4,700 0.9 s, 5,650-6,070 1.0-1.9 s:
    a 4 s call's linear room, 6,070, ran into the wall clock and answered with the greedy plan
    where a 3 s call's guided plan was within 0.81%)."""
    linear = RINS_FREE_PER_WORK_S * max(0.0, work)
    if linear <= VARS_PER_WORK_S:
        return math.floor(linear)
    # f / RINS_FREE_PER_WORK_S * (f / VARS_PER_WORK_S) ** MIP_GROWTH = work
    return math.floor((linear * VARS_PER_WORK_S**MIP_GROWTH) ** (1.0 / (1.0 + MIP_GROWTH)))


def _takes_mip(lin: LinearModel, mode: str, work: float | None) -> bool:
    """Branch and bound on the whole model (small models, or ``mode: mip``), else the LP
    relaxation and RINS."""
    return mode == "mip" or (mode == "auto" and (work is None or mip_work_s(lin.n) <= work))


def mip_nodes(n: int, work: float) -> int:
    """The node limit of ``work`` nominal seconds of branch and bound on a model of ``n``
    variables: :data:`NODES_PER_S` up to :data:`VARS_PER_WORK_S` variables, fewer past it (each
    node's LP grows with the model)."""
    return max(MIN_NODES, round(work * NODES_PER_S / max(1.0, n / VARS_PER_WORK_S)))


def _lp_iterations(params: SolveParams) -> int:
    """The LP relaxation's simplex iteration limit: its share of the work budget."""
    work = params.work_s if params.work_s is not None else params.time_limit_s
    return max(MIN_ITERATIONS, round(work * ITERATIONS_PER_S))


def _values(res: Any, n: int) -> list[float]:
    sol = res.solutions[0].primal_solution.variable_values
    values = [0.0] * n
    for i, x in zip(sol.ids, sol.values, strict=True):
        values[i] = x
    return values


def _parameters(params: SolveParams, budget: float, extra: dict[str, Any]) -> Any:
    from ortools.math_opt import parameters_pb2

    sp = parameters_pb2.SolveParametersProto()
    sp.time_limit.FromNanoseconds(int(budget * 1e9))
    sp.random_seed = params.seed
    for key, value in extra.items():
        if isinstance(value, bool):
            sp.highs.bool_options[key] = value
        elif isinstance(value, int):
            sp.highs.int_options[key] = value
        elif isinstance(value, float):
            sp.highs.double_options[key] = value
        else:
            sp.highs.string_options[key] = str(value)
    return sp


def _rins_fixed(lin: LinearModel, lp: Sequence[float], x: Sequence[int]) -> list[int]:
    """The variables RINS fixes at the greedy plan's values ``x``: the decisions (starts per
    class, type and loan, members, guests, resizes, stops) on which the LP's solution ``lp``
    agrees with the plan, except stops neither makes (the search may add a stop the plan's
    victim choice missed) and the members within :data:`RINS_COUNT_WINDOW` of the plan's start
    count of each class (the search may start a few more or fewer of a class than the plan:
    with every member fixed, only the split of the plan's count over types could move).
    Auxiliary variables (loans, chunks, splits, kept use) follow the decisions and stay free:
    fixing them fixes the placement structure of the plan."""
    decisions = _decisions(lin)
    near: set[int] = set()
    for members in lin.seg.values():
        count = sum(round(x[k]) for k in members)
        near.update(members[max(0, count - RINS_COUNT_WINDOW):count + RINS_COUNT_WINDOW])
    stops = set(lin.preempt.values())
    return sorted(
        k for k in decisions
        if abs(lp[k] - x[k]) <= 1e-6 and not (k in stops and x[k] == 0) and k not in near
    )


def _decisions(lin: LinearModel) -> set[int]:
    """The model's decision variables (starts per class, type and loan, members, guests,
    resizes, stops); the others (loans, chunks, splits, kept use) follow them."""
    out: set[int] = set(lin.preempt.values())
    for group in (lin.own, lin.loan, lin.guest, lin.grow, lin.shrink, lin.grow_dir):
        out.update(group.values())
    for members in lin.seg.values():
        out.update(members)
    return out


def _density_factor(lin: LinearModel) -> float:
    """How many of :data:`RINS_FREE_PER_WORK_S` free variables a second of work holds on this
    model: 1 up to :data:`RINS_REF_NONZEROS_PER_VAR` nonzeros per variable, then falling with
    its square (node-shaped models have more rows per start, and the step's root grows faster
    than its free variables: medium seeds at about 1,800 free variables took 0.18-0.37 s with
    4.2 nonzeros per variable, 0.69-0.89 s with 6.7, on an idle machine)."""
    nnz = sum(len(row.coefs) for row in lin.rows)
    per_var = nnz / max(1, lin.n)
    return min(1.0, (RINS_REF_NONZEROS_PER_VAR / per_var) ** 2) if per_var > 0 else 1.0


def _cut_to_fit(
    lin: LinearModel, lp: Sequence[float], x: Sequence[int], fixed: list[int], room: int
) -> list[int]:
    """``fixed`` plus the free decisions past the first ``room`` free variables: auxiliary
    variables stay free (they follow the decisions), then the decisions on which the LP's
    solution ``lp`` and the plan ``x`` differ most (ties by index); the others are fixed at
    ``x`` too (``x`` satisfies the model, so the step stays feasible)."""
    decisions = _decisions(lin)
    is_fixed = set(fixed)
    free = [k for k in range(lin.n) if k not in is_fixed]
    aux = sum(1 for k in free if k not in decisions)
    ranked = sorted((k for k in free if k in decisions), key=lambda k: (-abs(lp[k] - x[k]), k))
    keep = max(0, room - aux)
    return sorted(is_fixed | set(ranked[keep:]))


class HighsBackend:
    """HiGHS (bundled with OR-Tools) on the neutral model."""

    name: ClassVar[str] = "highs"

    @classmethod
    def is_available(cls) -> bool:
        try:
            from ortools.math_opt.core.python import solver  # noqa: F401
        except ImportError:  # pragma: no cover
            return False
        return True

    def __init__(self) -> None:
        self.prepared: Prepared | None = None
        """What :meth:`prepare` made, used by :meth:`solve` of the same problem."""

    def prepare(self, problem: EpochProblem, params: SolveParams) -> Prepared | None:
        """Build the model of ``problem`` and, where ``solve(problem, params, ...)`` will take the
        LP path, start its LP relaxation in a thread (:class:`Prepared`); ``params`` as that call
        will get them (``work_s`` decides the path and the iteration limit, ``time_limit_s`` is
        the relaxation's wall-clock net from now). ``None`` for parameters ``solve`` refuses.
        This backend's next :meth:`solve` of ``problem`` uses it; the caller calls
        :meth:`Prepared.cancel` when done (a solve it did not reach leaves no thread behind)."""
        self.prepared = None
        try:
            check_extra(params.extra, ALLOWED_EXTRA, self.name)
        except ValueError:
            return None
        extra = dict(params.extra)
        mode = str(extra.pop("mode", "auto"))
        if mode not in ("auto", "mip", "lp"):
            return None
        lin = build_model(problem)
        if _takes_mip(lin, mode, params.work_s):
            self.prepared = Prepared(self, problem, lin)
        else:
            extra.pop("node_limit", None)
            extra.pop("mip_rel_gap", None)
            iterations = _lp_iterations(params)
            sp = _parameters(params, params.time_limit_s, extra)
            sp.iteration_limit = iterations
            mp = model_proto(lin, integer=False)
            self.prepared = Prepared(self, problem, lin, iterations, mp, sp, params.time_limit_s)
        return self.prepared

    def solve(
        self, problem: EpochProblem, params: SolveParams, hint: Assignment | None = None
    ) -> SolveResult:
        """Uses what :meth:`prepare` made for this same ``problem`` (and parameters): its model,
        and its LP relaxation's answer where it started one."""
        check_extra(params.extra, ALLOWED_EXTRA, self.name)
        t0 = time.monotonic()
        prepared = self.prepared if self.prepared is not None and self.prepared.problem is problem else None
        lin = prepared.lin if prepared is not None else build_model(problem)
        extra = dict(params.extra)
        mode = str(extra.pop("mode", "auto"))
        if mode not in ("auto", "mip", "lp"):
            raise ValueError(f"extra.mode: 'auto', 'mip' or 'lp', got {mode!r}")
        if _takes_mip(lin, mode, params.work_s):
            return self._mip(problem, params, lin, extra, hint, t0)
        return self._lp(problem, params, lin, extra, hint, t0, prepared)

    def _mip(
        self, problem: EpochProblem, params: SolveParams, lin: LinearModel, extra: dict[str, Any],
        hint: Assignment | None, t0: float,
    ) -> SolveResult:
        nodes = int(extra.pop("node_limit", 0)) or None
        if nodes is None and params.work_s is not None:
            nodes = mip_nodes(lin.n, params.work_s)
        gap = float(extra.pop("mip_rel_gap", REL_GAP))
        mp = model_proto(lin, integer=True)
        budget = max(0.01, params.time_limit_s - (time.monotonic() - t0))
        sp = _parameters(params, budget, extra)
        sp.relative_gap_tolerance = gap
        if nodes is not None:
            sp.node_limit = nodes
        x0 = None
        if hint is not None:
            x = from_assignment(lin, problem, hint)
            x0 = x if is_feasible(lin, x) else None
        res, wall = _solve(mp, sp, x0, budget)
        seconds = time.monotonic() - t0
        has = len(res.solutions) > 0 and res.solutions[0].HasField("primal_solution")
        status = map_status(res.termination.reason, has)
        detail = res.termination.detail or f"termination {res.termination.reason}"
        if wall:
            detail += f" ({WALL_CLOCK_HIT})"
        elif res.termination.limit:
            detail += f" (node limit {nodes})"
        if status not in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE):
            return SolveResult(status, self.name, seconds, detail=detail)
        bound: float | None = res.termination.objective_bounds.dual_bound
        if bound is None or not math.isfinite(bound):
            bound = None  # interrupted before the root LP gave a bound
        return solved(lin, problem, _values(res, lin.n), status, self.name, seconds, bound, detail)

    def _lp(
        self, problem: EpochProblem, params: SolveParams, lin: LinearModel, extra: dict[str, Any],
        hint: Assignment | None, t0: float, prepared: Prepared | None = None,
    ) -> SolveResult:
        from optsched.engine.backends.greedy import guided_assignment

        extra.pop("node_limit", None)
        extra.pop("mip_rel_gap", None)
        work = params.work_s if params.work_s is not None else params.time_limit_s
        iterations = _lp_iterations(params)
        if prepared is not None and prepared.iterations == iterations:
            res, wall = prepared.lp_result()  # started before the greedy plan, on another core
            mp = prepared.mp
        else:
            mp = model_proto(lin, integer=False)
            budget = max(0.01, params.time_limit_s - (time.monotonic() - t0))
            sp = _parameters(params, budget, extra)
            sp.iteration_limit = iterations
            res, wall = _solve(mp, sp, None, budget)
        from ortools.math_opt import result_pb2

        if wall:
            return SolveResult(SolveStatus.NO_SOLUTION, self.name, time.monotonic() - t0,
                               detail=f"LP relaxation ({WALL_CLOCK_HIT})")
        if res.termination.reason != result_pb2.TERMINATION_REASON_OPTIMAL:
            why = res.termination.detail or res.termination.reason
            detail = f"LP relaxation ended without an optimum: {why}"
            return SolveResult(SolveStatus.NO_SOLUTION, self.name, time.monotonic() - t0, detail=detail)
        values = _values(res, lin.n)
        lp_bound = res.termination.objective_bounds.dual_bound + lin.offset
        iters = res.solve_stats.simplex_iterations
        left = work - iters / ITERATIONS_PER_S
        hint_value = hint.objective(problem) if hint is not None else None
        early: _RinsRun | None = None
        if hint is not None and hint_value is not None \
                and hint_value < lp_bound - REL_GAP * max(1.0, abs(lp_bound)):
            # the greedy plan does not prove the bound. When it satisfies the model, the RINS
            # step below searches around it whatever the guided plan is: it starts now, on
            # another core while the guided plan is made, and is stopped if that plan proves it
            x = from_assignment(lin, problem, hint)
            if is_feasible(lin, x):
                early = self._rins_start(params, lin, values, x, False, left, t0, mp)
        try:
            a = guided_assignment(problem, lin, values)
            obj = a.objective(problem)
            how = "the greedy plan guided by its solution"
            if hint is not None and hint_value is not None and hint_value > obj:
                a, obj = hint, hint_value
                how = "the greedy plan"
            proven = obj >= lp_bound - REL_GAP * max(1.0, abs(lp_bound))
            if hint is not None and not proven:
                # RINS around the greedy plan (around the guided plan, which agrees with the LP
                # on more, it searched a smaller neighbourhood and ended 0.5-8% below the LP's
                # bound on medium seeds, against 0.002-0.45%), or the guided plan when the
                # greedy plan does not satisfy the model
                if early is not None:
                    step = self._rins_result(problem, lin, early)
                else:
                    plans = [hint] if a is hint else [hint, a]
                    step = self._rins(problem, params, lin, values, plans, left, t0, mp)
                if step is None:  # the wall clock ended it: as in branch and bound, not reproducible
                    return SolveResult(SolveStatus.NO_SOLUTION, self.name, time.monotonic() - t0,
                                       detail=f"RINS after the LP relaxation ({WALL_CLOCK_HIT})")
                if step.assignment is not None and step.objective is not None and step.objective > obj + 1e-9:
                    a, obj = step.assignment, step.objective
                    how = f"RINS ({step.detail.split('; ')[0]})"
        finally:
            if early is not None:
                early.cancel()
        proven = obj >= lp_bound - REL_GAP * max(1.0, abs(lp_bound))
        seconds = time.monotonic() - t0
        detail = (
            f"LP relaxation ({iters} simplex iterations) bounds the problem; the plan is "
            f"{how}; {lin.n} vars, {len(lin.rows)} rows"
        )
        return SolveResult(
            status=SolveStatus.OPTIMAL if proven else SolveStatus.FEASIBLE,
            backend=self.name,
            seconds=seconds,
            assignment=a,
            objective=obj,
            bound=max(lp_bound, obj),
            detail=detail,
        )

    def _rins(
        self, problem: EpochProblem, params: SolveParams, lin: LinearModel, lp: Sequence[float],
        plans: Sequence[Assignment], work: float, t0: float, lp_model: Any = None,
    ) -> SolveResult | None:
        # ``work``: the nominal seconds left after the LP
        """Branch and bound over what :func:`_rins_fixed` leaves free (the rest at the values of
        the first of ``plans`` that satisfies the model: the incumbent RINS searches around),
        warm-started from that plan and stopped on a node limit; ``None`` when the wall clock
        stopped it."""
        # the first plan that satisfies the model, built only as far as needed
        i, x = next(((i, v) for i, v in ((i, from_assignment(lin, problem, a)) for i, a in enumerate(plans))
                     if is_feasible(lin, v)), (-1, None))
        if x is None:
            return SolveResult(SolveStatus.NO_SOLUTION, self.name, 0.0, detail="no feasible start")
        run = self._rins_start(params, lin, lp, x, i == 1, work, t0, lp_model)
        try:
            return self._rins_result(problem, lin, run)
        finally:
            run.cancel()

    def _rins_start(
        self, params: SolveParams, lin: LinearModel, lp: Sequence[float], x: list[int],
        x_is_guided: bool, work: float, t0: float, lp_model: Any = None,
    ) -> _RinsRun:
        """Fix the neighbourhood around ``x`` (a plan that satisfies the model) and start its
        branch and bound in a thread (:class:`_Background`); ``lp_model``: the relaxation's
        model message, copied rather than built again."""
        mp = integer_copy(lp_model) if lp_model is not None else model_proto(lin, integer=True)
        lbs, ubs = mp.variables.lower_bounds, mp.variables.upper_bounds
        fixed = _rins_fixed(lin, lp, x)
        free = lin.n - len(fixed)
        room = rins_room(work * _density_factor(lin))
        cut = ""
        if free > room:
            # the neighbourhood does not fit the work left: keep free the decisions on which the
            # LP's solution and the plan differ most, fix the rest at the plan's values too
            fixed = _cut_to_fit(lin, lp, x, fixed, room)
            cut = f" (cut from {free} to fit the work left)"
            free = lin.n - len(fixed)
        for k in fixed:
            lbs[k] = ubs[k] = x[k]
        budget = max(0.01, params.time_limit_s - (time.monotonic() - t0))
        sp = _parameters(params, budget, {})
        sp.relative_gap_tolerance = REL_GAP
        nodes = max(MIN_NODES, round(work * NODES_PER_S))
        sp.node_limit = nodes
        detail = (f"around {'the guided plan' if x_is_guided else 'the greedy plan'}: {free} of {lin.n} "
                  f"variables free{cut}, node limit {nodes}")
        return _RinsRun(_Background(mp, sp, x, budget, "optsched-highs-rins"), detail)

    def _rins_result(self, problem: EpochProblem, lin: LinearModel, run: _RinsRun) -> SolveResult | None:
        """A RINS run's answer (waits for it); ``None`` when the wall clock stopped it."""
        res, wall = run.solve.result()
        if wall:
            return None
        has = len(res.solutions) > 0 and res.solutions[0].HasField("primal_solution")
        if not has:
            return SolveResult(SolveStatus.NO_SOLUTION, self.name, 0.0, detail="no solution")
        values = _values(res, lin.n)
        return solved(lin, problem, values, SolveStatus.FEASIBLE, self.name, 0.0, None, run.detail)

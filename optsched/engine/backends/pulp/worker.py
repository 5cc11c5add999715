"""The PuLP solve, run in its own process (see :mod:`optsched.engine.backends.process`).

PuLP runs CBC (and its other ``*_CMD`` solvers) as a subprocess and waits for it without a
timeout; the solver's own time limit is the only net. Run here, under a worker the engine kills
with its whole process group at the deadline, a solver that overshoots cannot hold the call.
This module imports only PuLP and the standard library.
"""

from __future__ import annotations

import math
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any


def import_pulp() -> Any:
    """``import pulp`` without letting it load highspy.

    PuLP imports highspy when it is installed (for its in-process ``HiGHS`` solver), and
    highspy loaded before OR-Tools makes OR-Tools fail to load (both bundle HiGHS), which would
    break the ``cpsat`` backend for the rest of the process. Hiding highspy during the import
    leaves PuLP's in-process HiGHS unavailable (refused by the backend anyway).
    """
    if "pulp" in sys.modules:
        return sys.modules["pulp"]
    hide = "highspy" not in sys.modules
    if hide:
        sys.modules["highspy"] = None  # type: ignore[assignment]  # makes ``import highspy`` fail
    try:
        import pulp
    finally:
        if hide and sys.modules.get("highspy", 0) is None:
            del sys.modules["highspy"]
    return pulp


def to_pulp(job: dict[str, Any]) -> tuple[Any, list[Any]]:
    """The PuLP problem of the job's arrays (maximise ``obj`` subject to ``rows`` and the
    bounds ``lb``/``ub``, every variable integer) and its variables, named ``x<k>``/``r<k>`` so
    that PuLP's name mangling cannot merge two of them."""
    pulp = import_pulp()

    lb, ub = job["lb"], job["ub"]
    prob = pulp.LpProblem("epoch", pulp.LpMaximize)
    if hasattr(prob, "add_variable"):  # PuLP >= 3.3; LpVariable(...) is deprecated there
        xs = [prob.add_variable(f"x{k}", lb[k], ub[k], cat=pulp.LpInteger) for k in range(len(lb))]
    else:  # pragma: no cover - older PuLP
        xs = [pulp.LpVariable(f"x{k}", lb[k], ub[k], cat=pulp.LpInteger) for k in range(len(lb))]
    prob += pulp.LpAffineExpression([(xs[k], c) for k, c in enumerate(job["obj"]) if c != 0])
    for i, (lo, hi, idx, val) in enumerate(job["rows"]):
        expr = pulp.LpAffineExpression([(xs[v], c) for v, c in zip(idx, val, strict=True)])
        if lo == hi:
            prob += pulp.LpConstraint(expr, pulp.LpConstraintEQ, f"r{i}", hi)
            continue
        if not math.isinf(hi):
            prob += pulp.LpConstraint(expr, pulp.LpConstraintLE, f"r{i}", hi)
        if not math.isinf(lo):
            prob += pulp.LpConstraint(expr, pulp.LpConstraintGE, f"r{i}_lo", lo)
    return prob, xs


def solve_job(job: dict[str, Any]) -> dict[str, Any]:
    """Solve one job: the model's arrays, ``start`` (initial values or ``None``), the PuLP
    solver class ``solver`` with constructor ``kwargs`` (``timeLimit`` is set here from
    ``time_limit_s``; ``logPath`` when ``log`` is true)."""
    pulp = import_pulp()
    prob, xs = to_pulp(job)
    if job.get("start") is not None:
        for x, v in zip(xs, job["start"], strict=True):
            x.setInitialValue(v)
    kwargs = dict(job["kwargs"])
    kwargs["timeLimit"] = float(job["time_limit_s"])
    with tempfile.TemporaryDirectory(prefix="optsched-pulp-") as tmp:
        log_path = Path(tmp) / "solver.log"
        if job.get("log"):
            kwargs["logPath"] = str(log_path)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # PULP_CBC_CMD's PuLP 4 notice
            solver = getattr(pulp, job["solver"])(**kwargs)
        if not solver.available():
            return {"unavailable": True}
        t_solve = time.monotonic()
        error = None
        try:
            prob.solve(solver)
        except pulp.PulpSolverError as exc:
            # CBC stopped by a tiny time limit may exit before writing a solution file
            error = str(exc)
        solve_seconds = time.monotonic() - t_solve
        log_text = log_path.read_text(errors="replace") if log_path.exists() else ""
    return {
        "unavailable": False,
        "error": error,
        "status": prob.status,
        "sol_status": prob.sol_status,
        "values": None if error is not None else [round(x.value() or 0.0) for x in xs],
        "solve_seconds": solve_seconds,
        "wall": kwargs["timeLimit"],
        "log": log_text,
    }


def main() -> None:
    """Worker loop (:func:`~optsched.engine.backends.process.serve`), once PuLP is imported."""
    import_pulp()

    from optsched.engine.backends.process import serve

    serve(solve_job)


if __name__ == "__main__":
    main()

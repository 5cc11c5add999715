"""The HiGHS solve, run in its own process.

Two reasons for a separate process: OR-Tools and highspy each bundle HiGHS, and loading both
into one interpreter fails with undefined symbols; and HiGHS can overshoot its time limit, so
the engine must be able to abandon (kill) a solve at the deadline. This module imports only
numpy, highspy and the standard-library loop of :mod:`optsched.engine.backends.process`.

Determinism: HiGHS's MIP search is deterministic with one thread and a fixed seed as long as
it stops on something other than time. HiGHS 1.15 has no global work limit (``mip_max_nodes``
cannot stop the root node, which takes most of a second at Venus size), so the work is counted
here: HiGHS calls the MIP interrupt callback at fixed points of its search (its limit checks),
and :class:`WorkMeter` turns the count into nominal seconds with two calibrated rates, one for
checks during the root node (slow: cuts and sub-MIP heuristics in between) and one for checks
in the branch-and-bound tree, and interrupts the search when the budget is spent. The count and
the node number do not depend on the machine's load, so neither does the answer. HiGHS's own
``time_limit`` is only a safety net; ``stop`` in the reply says which limit ended the search.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

ALLOWED_OPTIONS = {
    "mip_rel_gap",
    "mip_abs_gap",
    "presolve",
    "mip_heuristic_effort",
    "mip_detect_symmetry",
    "mip_max_nodes",
    "simplex_strategy",
}
"""Native HiGHS options a preset's ``[extra]`` may set. ``threads``, ``parallel``,
``random_seed`` and ``time_limit`` are not among them: the backend fixes them."""

ROOT_CHECKS_PER_S = 50.0
"""HiGHS limit checks per nominal second while the root node is processed."""
TREE_CHECKS_PER_S = 1000.0
"""HiGHS limit checks per nominal second in the branch-and-bound tree.

Calibration (HiGHS 1.15.1, one thread, a 2-core machine of the kind the engine runs on), on
the Venus-size snapshots of ``optsched generate --size venus --seed 0..9``: at the root 36-95
checks per second with the machine otherwise idle (26-47 with two other processes busy), in
the tree 730-1900 (400-1750 busy). A nominal second is thus about a wall second on an idle
machine, with one gap between two checks on top (up to 0.25 s at the root, where sub-MIP
heuristics run without checks); the engine's share of the time limit leaves the margin."""
NO_GAIN_GRACE = 2.0
"""If, when the budget is spent, HiGHS has found nothing better than the warm start, it may
go on to this many times the budget (at Venus size the first better solution often comes only
at the end of the root node). Deterministic: it depends on the incumbent, not on time."""


@dataclass
class WorkMeter:
    """Deterministic work in nominal seconds, from the count of HiGHS's limit checks."""

    budget_s: float
    start_objective: float | None = None
    """The warm start's objective (maximised), ``None`` without one."""
    root_rate: float = ROOT_CHECKS_PER_S
    tree_rate: float = TREE_CHECKS_PER_S
    root_checks: int = 0
    tree_checks: int = 0

    @property
    def spent_s(self) -> float:
        return self.root_checks / self.root_rate + self.tree_checks / self.tree_rate

    def check(self, nodes: int, incumbent: float) -> bool:
        """Count one check at ``nodes`` processed nodes with ``incumbent`` the best objective
        so far (maximised); ``True`` once the budget is spent (see ``NO_GAIN_GRACE``)."""
        if nodes == 0:
            self.root_checks += 1
        else:
            self.tree_checks += 1
        spent = self.spent_s
        if spent < self.budget_s:
            return False
        if self.start_objective is None or not math.isfinite(incumbent):
            gained = math.isfinite(incumbent)
        else:
            gained = incumbent > self.start_objective + 1e-9 * max(1.0, abs(self.start_objective))
        return gained or spent >= NO_GAIN_GRACE * self.budget_s


def solve_arrays(job: dict[str, Any]) -> dict[str, Any]:
    """Solve one maximisation MILP given as plain arrays (see ``HighspyBackend``)."""
    import highspy
    import numpy as np

    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", float(job["time_limit_s"]))
    h.setOptionValue("random_seed", int(job["seed"]))
    h.setOptionValue("threads", 1)
    h.setOptionValue("parallel", "off")
    h.setOptionValue("mip_rel_gap", 1e-4)
    for key, value in job["options"].items():
        h.setOptionValue(key, value)
    n = len(job["lb"])
    inf = highspy.kHighsInf
    cost = -np.asarray(job["obj"], dtype=float)  # HiGHS minimises
    h.addVars(n, np.asarray(job["lb"], dtype=float), np.asarray(job["ub"], dtype=float))
    h.changeColsCost(n, np.arange(n, dtype=np.int32), cost)
    h.changeColsIntegrality(n, np.arange(n, dtype=np.int32), np.array([highspy.HighsVarType.kInteger] * n))
    for lo, hi, idx, val in job["rows"]:
        h.addRow(
            -inf if math.isinf(lo) else lo,
            inf if math.isinf(hi) else hi,
            len(idx),
            np.asarray(idx, dtype=np.int32),
            np.asarray(val, dtype=float),
        )
    if job.get("start") is not None:
        sol = highspy.HighsSolution()
        sol.col_value = [float(v) for v in job["start"]]
        sol.value_valid = True
        h.setSolution(sol)
    meter = None
    if job.get("work_s") is not None:
        start_obj = None
        if job.get("start") is not None:
            start_obj = float(np.dot(job["obj"], job["start"]))
        meter = WorkMeter(float(job["work_s"]), start_obj)
        m = meter

        def on_check(event: Any) -> None:
            out = event.data_out
            if m.check(int(out.mip_node_count), -float(out.mip_primal_bound)):
                event.interrupt()

        h.cbMipInterrupt.subscribe(on_check)
    h.run()
    model_status = h.modelStatusToString(h.getModelStatus())
    info = h.getInfo()
    has_sol = info.primal_solution_status == 2  # kSolutionStatusFeasible
    if model_status == "Time limit reached":
        stop = "wall_clock"
    elif model_status == "Interrupted by user":
        stop = "work"
    else:
        stop = model_status
    return {
        "model_status": model_status,
        "stop": stop,
        "x": list(h.getSolution().col_value) if has_sol else None,
        "objective": -info.objective_function_value if has_sol else None,
        "bound": -info.mip_dual_bound if math.isfinite(info.mip_dual_bound) else None,
        "nodes": int(info.mip_node_count),
        "work_s": meter.spent_s if meter is not None else None,
        "checks": (meter.root_checks, meter.tree_checks) if meter is not None else None,
    }


def main() -> None:
    """Worker loop (:func:`~optsched.engine.backends.process.serve`), once HiGHS is imported."""
    import highspy  # noqa: F401

    from optsched.engine.backends.process import serve

    serve(solve_arrays)


if __name__ == "__main__":
    main()

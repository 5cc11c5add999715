"""The HiGHS solve, run in its own process.

Two reasons for a separate process: OR-Tools and highspy each bundle HiGHS, and loading both
into one interpreter fails with undefined symbols; and HiGHS can overshoot its time limit, so
the engine must be able to abandon (kill) a solve at the deadline. This module imports only
numpy and highspy.
"""

from __future__ import annotations

import math
from typing import Any

ALLOWED_OPTIONS = {
    "mip_rel_gap",
    "mip_abs_gap",
    "presolve",
    "mip_heuristic_effort",
    "mip_detect_symmetry",
    "parallel",
    "simplex_strategy",
}


def solve_arrays(job: dict[str, Any]) -> dict[str, Any]:
    """Solve one maximisation MILP given as plain arrays (see ``MilpBackend``)."""
    import highspy
    import numpy as np

    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", float(job["time_limit_s"]))
    h.setOptionValue("random_seed", int(job["seed"]))
    h.setOptionValue("threads", int(job["threads"]))
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
    h.run()
    model_status = h.modelStatusToString(h.getModelStatus())
    info = h.getInfo()
    has_sol = info.primal_solution_status == 2  # kSolutionStatusFeasible
    return {
        "model_status": model_status,
        "x": list(h.getSolution().col_value) if has_sol else None,
        "objective": -info.objective_function_value if has_sol else None,
        "bound": -info.mip_dual_bound if math.isfinite(info.mip_dual_bound) else None,
    }


def main() -> None:
    """Worker loop over stdin/stdout: say ready once HiGHS is imported, then answer each job
    until stdin closes. Anything HiGHS prints goes to stderr, never into the channel."""
    import os
    import pickle
    import struct
    import sys

    import highspy  # noqa: F401

    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    inp = sys.stdin.buffer

    def send(obj: Any) -> None:
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        out.write(struct.pack("<Q", len(data)) + data)
        out.flush()

    send(("ready", None))
    while True:
        head = inp.read(8)
        if len(head) < 8:
            return
        (n,) = struct.unpack("<Q", head)
        job = pickle.loads(inp.read(n))
        try:
            send(("ok", solve_arrays(job)))
        except Exception as exc:  # report every failure to the parent, never die silently
            send(("error", f"{type(exc).__name__}: {exc}"))


if __name__ == "__main__":
    main()

"""Engine benchmark: solve seconds, objective, bound and gap per size and backend, in one run.

    python benchmarks/engine_bench.py [--seeds 0,1,2] [--reference-s 60] [--out docs/benchmarks.md]

Sizes: tiny, venus (135 nodes x 8 GPUs, 15 tenants, ~600 running, 500 pending) and large
(10,000 GPUs, 5,000 pending). Each backend runs with the engine's default 1 s limit (a hard
limit for the whole ``solve_epoch`` call); a long HiGHS run gives the reference bound the
gaps are measured against. Times are also reported as ratios to greedy in the same process.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from optsched import solve_epoch
from optsched.backends.base import SolveParams
from optsched.backends.milp.backend import warm_up
from optsched.generate import generate
from optsched.predict.fallback import EstimatePredictor
from optsched.state import load_state
from optsched.testing import assert_decision_valid


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--sizes", default="tiny,venus,large")
    ap.add_argument("--limits", default="tiny=1,venus=1,large=10", help="time limit per size (s)")
    ap.add_argument("--reference-s", type=float, default=60.0)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    warm_up()
    pred = EstimatePredictor()
    limits = {k: float(v) for k, v in (x.split("=") for x in args.limits.split(","))}
    rows = []
    for size in args.sizes.split(","):
        for seed in (int(s) for s in args.seeds.split(",")):
            state = load_state(generate(size, seed))  # type: ignore[arg-type]
            n_run = len(state.running())
            n_pend = len(state.pending())
            ref = solve_epoch(
                state, params=SolveParams(backend="milp", time_limit_s=args.reference_s), predictor=pred
            )
            ref_bound = ref.solver.bound if ref.status != "fallback" else None
            best_ref = ref.solver.objective or 0.0
            results = {}
            for b in ("greedy", "cpsat", "milp"):
                t0 = time.perf_counter()
                d = solve_epoch(
                    state, params=SolveParams(backend=b, time_limit_s=limits[size]), predictor=pred
                )
                wall = time.perf_counter() - t0
                assert_decision_valid(state, d)
                results[b] = (wall, d)
            bound = max(x for x in (ref_bound, best_ref) if x is not None)
            gw = results["greedy"][0]
            for b, (wall, d) in results.items():
                obj = d.solver.objective or 0.0
                gap = (bound - obj) / bound if bound else 0.0
                rows.append(
                    (size, seed, n_run, n_pend, b, d.status, wall, wall / gw, obj, bound, gap, limits[size])
                )
                print(
                    f"{size:6s} seed {seed} run {n_run:5d} pend {n_pend:5d} {b:6s} {d.status:9s} "
                    f"{wall:7.3f}s ({wall / gw:6.1f}x greedy) obj {obj:14.1f} ref-bound {bound:14.1f} "
                    f"gap {100 * gap:6.2f}%",
                    flush=True,
                )
    lines = [
        "| size | seeds | running | pending | limit s | backend | status | seconds (mean) | x greedy "
        "| gap to reference bound (mean, max) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for size in args.sizes.split(","):
        for b in ("greedy", "cpsat", "milp"):
            sel = [r for r in rows if r[0] == size and r[4] == b]
            if not sel:
                continue
            statuses = ",".join(sorted({r[5] for r in sel}))
            lines.append(
                f"| {size} | {len(sel)} | {statistics.mean(r[2] for r in sel):.0f} | "
                f"{statistics.mean(r[3] for r in sel):.0f} | {sel[0][11]:g} | {b} | {statuses} | "
                f"{statistics.mean(r[6] for r in sel):.3f} | {statistics.mean(r[7] for r in sel):.1f} | "
                f"{100 * statistics.mean(r[10] for r in sel):.2f}%, {100 * max(r[10] for r in sel):.2f}% |"
            )
    table = "\n".join(lines)
    print(table)
    if args.out:
        args.out.write_text(table + "\n")


if __name__ == "__main__":
    main()

"""The default decision at scale: gap against a valid bound, time and memory, by fleet size.

    python benchmarks/scale_bench.py [--sizes medium,large] [--seeds 0-9] [--shapes both]
        [--time-limit-s 1] [--reference-s 0] [--json runs/scale.json] [--md runs/scale.md]

Not part of the tests. For every size (``medium``: 2,488 GPUs; ``large``: 9,920 GPUs, from
``optsched generate``), seed, and with or without ``--shapes`` (node CPUs, memory, a block/rack
topology, per-node needs, explicit shapes, topology requests, shares), one fresh process runs
``optsched solve`` with the default backend and limit on the generated snapshot and reports the
decision's status, objective, bound and gap (``solver.gap``: against the bound the decision
states, a bound of the whole problem), the call's seconds and stage seconds, the greedy plan's
objective on the same problem (``greedy``: is the answer ever below it?), and the process's peak
memory (``ru_maxrss``). With ``--reference-s S`` each snapshot is also solved by HiGHS's branch
and bound for up to ``S`` seconds (``--backend highs``, mode ``mip``), and the default answer's
objective is compared with that reference's objective and bound.

Each run is its own process, as a user's CLI call is, so imports and the predictor's load stay out
of the call's limit but in its peak memory. The machine's load changes wall seconds, not the
decisions (deterministic work budgets); run it on an idle machine for the time columns.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

SIZES = ("medium", "large")


def _seeds(text: str) -> list[int]:
    if "-" in text:
        lo, hi = (int(x) for x in text.split("-"))
        return list(range(lo, hi + 1))
    return [int(x) for x in text.split(",") if x]


CHILD = r"""
import json, resource, sys, time
from optsched.engine.state import load_state
from optsched.engine.epoch import solve_epoch, default_predictor, _prepare
from optsched.engine.backends.base import SolveParams
from optsched.engine.backends.greedy import greedy_assignment
from optsched.engine.lookahead import limited
path, limit, backend, mode = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]
state = load_state(open(path).read())
pred = default_predictor()
extra = {"mode": mode} if mode != "auto" else {}
params = SolveParams(backend=backend, time_limit_s=limit, extra=extra)
t = time.monotonic()
d = solve_epoch(state, params=params, predictor=pred)
wall = time.monotonic() - t
ep = _prepare(state, SolveParams(), pred, {})
plan_problem = limited(ep.problem, ep.reservations, ep.state)  # the engine's capacity and node rows
greedy = greedy_assignment(plan_problem).objective(plan_problem)
s = d.solver
print(json.dumps({
    "status": d.status, "backend": s.backend, "objective": s.objective, "bound": s.bound,
    "gap": s.gap, "seconds": s.seconds, "wall": wall, "stages": s.stage_seconds,
    "fallback": s.fallback_reason, "greedy": greedy, "starts": len(d.start),
    "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
}))
"""


def run_one(path: Path, limit: float, backend: str = "auto", mode: str = "auto") -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), str(limit), backend, mode],
        capture_output=True, text=True, check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="medium,large")
    ap.add_argument("--seeds", default="0-9")
    ap.add_argument("--shapes", choices=["off", "on", "both"], default="both")
    ap.add_argument("--time-limit-s", type=float, default=1.0)
    ap.add_argument("--reference-s", type=float, default=0.0)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--md", type=Path)
    args = ap.parse_args()
    sizes = [s for s in args.sizes.split(",") if s]
    for s in sizes:
        if s not in SIZES:
            ap.error(f"--sizes: {s!r} is none of {SIZES}")
    shapes = {"off": [False], "on": [True], "both": [False, True]}[args.shapes]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            for shaped in shapes:
                for seed in _seeds(args.seeds):
                    path = Path(tmp) / f"{size}-{seed}-{int(shaped)}.json"
                    cmd = [sys.executable, "-m", "optsched.cli", "generate", "--size", size,
                           "--seed", str(seed)]
                    if shaped:
                        cmd.append("--shapes")
                    path.write_text(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
                    row = {"size": size, "seed": seed, "shapes": shaped, **run_one(path, args.time_limit_s)}
                    if args.reference_s > 0:
                        ref = run_one(path, args.reference_s, "highs", "mip")
                        row["reference"] = {k: ref[k] for k in ("status", "objective", "bound", "seconds")}
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"limit_s": args.time_limit_s, "rows": rows}, indent=1))
    lines = [
        "| size | shapes | seed | status | gap | bound − obj | obj ≥ greedy | seconds | peak MiB "
        "| ref obj − obj |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        gap = "–" if r["gap"] is None else f"{100 * r['gap']:.3f}%"
        diff = "–" if r["bound"] is None else f"{r['bound'] - r['objective']:.0f}"
        ref = r.get("reference")
        refd = "–" if not ref or ref["objective"] is None else f"{ref['objective'] - r['objective']:.0f}"
        above = "yes" if r["objective"] >= r["greedy"] - 1e-6 else "NO"
        shapes = "yes" if r["shapes"] else "no"
        lines.append(
            f"| {r['size']} | {shapes} | {r['seed']} | {r['status']} | {gap} | {diff} | {above} "
            f"| {r['seconds']:.2f} | {r['peak_mib']:.0f} | {refd} |"
        )
    text = "\n".join(lines)
    print(text)
    if args.md:
        args.md.parent.mkdir(parents=True, exist_ok=True)
        args.md.write_text(text + "\n")


if __name__ == "__main__":
    main()

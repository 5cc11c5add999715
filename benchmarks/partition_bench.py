"""Partitioned epochs: quality and time against one model, and fleet-scale runs.

    python benchmarks/partition_bench.py [--quality-gpus 10000] [--ks 2,4,8,16] [--seeds 0]
        [--backend highs] [--time-limit-s 10] [--fleet-gpus 50000,100000] [--fleet-k auto]
        [--fleet-backend auto] [--fleet-time-limit-s 5] [--fleet-compare] [--executor ray|process|serial]
        [--json runs/partition_bench.json] [--md runs/partition_bench.md]

Not part of the tests. Snapshots come from ``optsched.instances.generate("fleet", gpus=N)``.

1. **quality** (``--quality-gpus``, default 10,000): one model (``--backend``, ``--time-limit-s``)
   and ``k`` = 2, 4, 8, 16 parts with the same backend and limit. Every decision is scored with
   :func:`optsched.engine.partition.decision_value` on the *whole* epoch's problem (each started
   job's own value, preemption costs, borrowing penalty), so all runs compare on one scale;
   ``loss`` is ``1 - value / value(one model)`` and ``gap`` is ``1 - value / bound`` with the
   one model's proven bound. Times: the whole call's wall seconds here, the slowest part's
   seconds in its worker, and the **critical path** (split + slowest part + merge + explain +
   check: what the call takes with one core per part).
2. **fleet** (``--fleet-gpus``, default 50,000 and 100,000 GPUs, half as many pending jobs):
   partitioned calls (``--fleet-k``) timed per stage: reading and validating the JSON, split,
   every part (max and sum), merge, the merged decision's explanations, check, and the critical
   path with one core per part (``unexplained``: queued or preempted jobs without an explanation;
   ``full GCs``: the garbage collector's full collections in this process during the call);
   ``--fleet-compare`` also solves the snapshot as one model and scores both as in part 1.

Before the timings, a warm-up call on a small fleet loads the engine (imports, the predictor)
in every worker process, as a long-running service would have done (``--no-warm-up``: skip).
Wall seconds on a shared machine depend on its load; CPU seconds (``*_cpu`` stages) are what
one idle core per part would take, and are reported next to them.

``--one-core-per-part`` solves the parts one after another with the parts' deadline lifted, so
each part answers as it would with its own idle core (its own limit, deterministic work and
wall-clock net): the decision and the critical path are those of a machine with a core per part,
on a machine with fewer (the call's wall seconds are not).

Every decision is checked with ``check_decision`` on the whole snapshot here too. Raw results go
to ``--json``; the Markdown tables are printed and, with ``--md``, written.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import re
import sys
import time
from pathlib import Path
from typing import Any, Self

from rich.console import Console

from optsched import solve_epoch
from optsched.engine.backends.base import SolveParams
from optsched.engine.check import check_decision
from optsched.engine.epoch import _prepare, default_predictor
from optsched.engine.partition import decision_value, resolve_partitions
from optsched.engine.state import ClusterState, parse_snapshot
from optsched.instances import generate

console = Console(stderr=True)


def load(gpus: int, seed: int) -> tuple[str, ClusterState, float]:
    text = json.dumps(generate("fleet", seed=seed, gpus=gpus))
    t = time.monotonic()  # parsing the JSON and validating it: before any solve_epoch
    state = ClusterState.from_snapshot(parse_snapshot(text))
    return text, state, time.monotonic() - t


PART_STATUS = re.compile(r"^part \d+: .*?, (optimal|feasible|fallback) \(")
"""A part's status in the merged decision's notes (``part 3: 5027 jobs, 4992 GPUs, feasible
(highs), ...``)."""


def one_core_per_part() -> None:
    """Lift the parts' deadline (``Budget.part_deadline``) in this process: with the serial
    executor each part is then solved alone on an idle core, with its own limit, deterministic
    work and wall-clock net, as on a machine with one core per part. The decision and the
    critical-path columns are that machine's; the call's wall seconds are not."""
    from optsched.engine import budget

    budget.Budget.part_deadline = property(lambda self: math.inf)  # type: ignore[method-assign,assignment]


class FullCollections:
    """Counts the garbage collector's full (generation 2) collections in this process while
    active, and their seconds: at fleet scale one takes about a second, and which stage it falls
    in depends on how many objects the stages before it allocated."""

    def __init__(self) -> None:
        self.count, self.seconds, self._t = 0, 0.0, 0.0

    def _cb(self, phase: str, info: dict[str, Any]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._t = time.perf_counter()
        else:
            self.count += 1
            self.seconds += time.perf_counter() - self._t

    def __enter__(self) -> Self:
        gc.callbacks.append(self._cb)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._cb)


def run(state: ClusterState, params: SolveParams, k: int, executor: str) -> dict[str, Any]:
    t = time.monotonic()
    with FullCollections() as full_gc:
        d = solve_epoch(state, params=params, partitions=k, executor=executor)
    wall = time.monotonic() - t
    t = time.monotonic()
    bad = check_decision(state, d)
    check_s = time.monotonic() - t
    st = d.solver.stage_seconds
    crit = crit_cpu = None
    if k > 1 and "part_max" in st:
        # the merged decision's explanations (stage ``explain``) are on the critical path too
        crit = st["split"] + st["part_max"] + st["merge"] + st.get("explain", 0.0) + st["check"]
        crit_cpu = st["split_cpu"] + st["part_cpu_max"] + st["merge_cpu"] + st["check_cpu"]
        crit_cpu += st.get("explain_cpu", 0.0)
    must = {x.job for x in d.preempt} | {x.job for x in d.resize} | set(d.queue)
    parts = [m.group(1) for n in d.solver.notes if (m := PART_STATUS.match(n))]
    return {
        "k": k,
        "status": d.status,
        "parts_by_solver": sum(x in ("optimal", "feasible") for x in parts),
        "backend": d.solver.backend,
        "wall_s": wall,
        "critical_s": crit,
        "critical_cpu_s": crit_cpu,
        "stages": st,
        "violations": len(bad),
        "full_gc": full_gc.count,
        "full_gc_s": full_gc.seconds,
        "recheck_s": check_s,
        "started": len(d.start),
        "preempted": len(d.preempt),
        "queued": len(d.queue),
        "unexplained": len(must - set(d.explanations)),
        "objective": d.solver.objective,
        "bound": d.solver.bound,
        "notes": [n for n in d.solver.notes if n.startswith(("partitioned", "part ", "partitions"))],
        "decision": d,
    }


def quality(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    params = SolveParams(backend=args.backend, time_limit_s=args.time_limit_s)
    for seed in args.seeds:
        _, state, val_s = load(args.quality_gpus, seed)
        problem = _prepare(state, params, default_predictor(), {}).problem
        base: dict[str, Any] | None = None
        for k in [1, *args.ks]:
            console.print(f"quality: {args.quality_gpus} GPUs seed {seed} k={k} ...")
            r = run(state, params, k, args.executor)
            r["value"] = decision_value(problem, state, r.pop("decision"))
            r.update(seed=seed, gpus=args.quality_gpus, validate_s=val_s)
            if k == 1:
                base = r
            assert base is not None
            r["loss"] = 1.0 - r["value"] / base["value"]
            r["gap"] = None if base["bound"] is None else 1.0 - r["value"] / base["bound"]
            console.print(
                f"  {r['status']} value {r['value']:.6g} loss {r['loss']:.4%} wall {r['wall_s']:.2f}s "
                f"critical {r['critical_s']} violations {r['violations']}"
            )
            rows.append(r)
    return rows


def fleet(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    params = SolveParams(backend=args.fleet_backend, time_limit_s=args.fleet_time_limit_s)
    for gpus in args.fleet_gpus:
        console.print(f"fleet: generating {gpus} GPUs ...")
        text, state, val_s = load(gpus, 0)
        k = resolve_partitions(args.fleet_k if args.fleet_k == "auto" else int(args.fleet_k), state)
        console.print(f"fleet: {gpus} GPUs, {len(state.pending())} pending, k={k} ...")
        r = run(state, params, k, args.executor)
        decision = r.pop("decision")
        if args.fleet_compare:
            console.print("  one model, same backend and limit ...")
            one = run(state, params, 1, args.executor)
            problem = _prepare(state, params, default_predictor(), {}).problem
            r["one_model"] = {
                "status": one["status"],
                "backend": one["backend"],
                "wall_s": one["wall_s"],
                "value": decision_value(problem, state, one.pop("decision")),
            }
            r["value"] = decision_value(problem, state, decision)
            r["loss"] = 1.0 - r["value"] / r["one_model"]["value"]
            console.print(f"  one model {r['one_model']}, partitioned value {r['value']:.6g}")
        secs = [r["stages"][f"part{p}"] for p in range(k)]
        r.update(
            gpus=gpus,
            pending=len(state.pending()),
            jobs=len(state.snapshot.jobs),
            json_mb=len(text) / 1e6,
            validate_s=val_s,
            part_sum_s=sum(secs),
            part_mean_s=sum(secs) / len(secs) if secs else None,
        )
        r["critical_with_validate_s"] = (r["critical_s"] or 0.0) + val_s
        console.print(
            f"  {r['status']} wall {r['wall_s']:.2f}s critical {r['critical_s']} "
            f"(+validate {val_s:.2f}s) violations {r['violations']}"
        )
        rows.append(r)
    return rows


def markdown(q: list[dict[str, Any]], f: list[dict[str, Any]], args: argparse.Namespace) -> str:
    out = [
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"load {os.getloadavg()[0]:.1f}; executor {args.executor}; python {sys.version.split()[0]}",
        "",
    ]
    if q:
        out += [
            f"Quality at {args.quality_gpus} GPUs, backend {args.backend}, limit {args.time_limit_s:g} s:",
            "",
            "| seed | k | status | value | loss vs 1 model | gap to bound | wall s | slowest part s "
            "| critical path s | critical path CPU s | violations |",
            "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in q:
            st = r["stages"]
            gap = "n/a" if r["gap"] is None else f"{r['gap']:.2%}"
            crit = "" if r["critical_s"] is None else f"{r['critical_s']:.2f}"
            ccpu = "" if r["critical_cpu_s"] is None else f"{r['critical_cpu_s']:.2f}"
            part = f"{st['part_max']:.2f}" if "part_max" in st else ""
            out.append(
                f"| {r['seed']} | {r['k']} | {r['status']} | {r['value']:,.0f} | {r['loss']:.2%} | {gap} "
                f"| {r['wall_s']:.2f} | {part} | {crit} | {ccpu} | {r['violations']} |"
            )
        out.append("")
    if f:
        out += [
            f"Fleet scale, backend {args.fleet_backend}, limit {args.fleet_time_limit_s:g} s:",
            "",
            "| GPUs | pending | k | status | parts by the solver | parse+validate s | split s "
            "| slowest part s | mean part s "
            "| merge s | explain s (CPU s) | check s | critical path s (CPU s) | wall s (this machine) "
            "| full GCs in the call (s) | violations | unexplained | one model: status, wall s "
            "| loss vs one model |",
            "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
        ]
        for r in f:
            st = r["stages"]
            om = r.get("one_model")
            one = f"{om['status']} ({om['backend']}), {om['wall_s']:.2f}" if om else "not run"
            loss = f"{r['loss']:.2%}" if om else ""
            out.append(
                f"| {r['gpus']:,} | {r['pending']:,} | {r['k']} | {r['status']} "
                f"| {r['parts_by_solver']} of {r['k']} | {r['validate_s']:.2f} "
                f"| {st['split']:.2f} | {st['part_max']:.2f} | {r['part_mean_s']:.2f} | {st['merge']:.2f} "
                f"| {st.get('explain', 0.0):.2f} ({st.get('explain_cpu', 0.0):.2f}) "
                f"| {st['check']:.2f} | {r['critical_s']:.2f} ({r['critical_cpu_s']:.2f}) "
                f"| {r['wall_s']:.2f} | {r['full_gc']} ({r['full_gc_s']:.2f}) | {r['violations']} "
                f"| {r['unexplained']} | {one} | {loss} |"
            )
        out.append("")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quality-gpus", type=int, default=10_000)
    ap.add_argument("--ks", default="2,4,8,16")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--backend", default="highs")
    ap.add_argument("--time-limit-s", type=float, default=10.0)
    ap.add_argument("--fleet-gpus", default="50000,100000", help="comma-separated; empty: skip")
    ap.add_argument("--fleet-k", default="auto")
    ap.add_argument("--fleet-backend", default="auto")
    ap.add_argument("--fleet-time-limit-s", type=float, default=5.0)
    ap.add_argument("--skip-quality", action="store_true")
    ap.add_argument("--fleet-compare", action="store_true",
                    help="also solve the fleet snapshots as one model and score both")
    ap.add_argument("--no-warm-up", dest="warm_up", action="store_false",
                    help="skip the warm-up call that loads the engine in every worker")
    ap.add_argument("--executor", default="ray", choices=["ray", "process", "serial"])
    ap.add_argument("--ray-cpus", type=int, default=None, help="num_cpus of the local Ray")
    ap.add_argument("--one-core-per-part", action="store_true",
                    help="solve the parts one after another with the parts' deadline lifted, as a "
                    "machine with a core per part would (implies --executor serial)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--md", type=Path, default=None)
    args = ap.parse_args()
    args.ks = [int(x) for x in args.ks.split(",") if x]
    args.seeds = [int(x) for x in args.seeds.split(",") if x]
    args.fleet_gpus = [int(x) for x in args.fleet_gpus.split(",") if x]
    if args.one_core_per_part:
        args.executor = "serial"
        one_core_per_part()
    default_predictor()
    if args.executor == "ray":
        import ray

        ray.init(num_cpus=args.ray_cpus, include_dashboard=False, log_to_driver=False)
    if args.warm_up:  # imports and the predictor load once per worker, outside the timings
        _, small, _ = load(4000, 99)
        solve_epoch(small, params=SolveParams(backend="greedy", time_limit_s=5.0),
                    partitions=max(2, 2 * (args.ray_cpus or os.cpu_count() or 1)), executor=args.executor)
    q = [] if args.skip_quality else quality(args)
    f = fleet(args)
    md = markdown(q, f, args)
    print(md)
    if args.md:
        args.md.parent.mkdir(parents=True, exist_ok=True)
        args.md.write_text(md)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"quality": q, "fleet": f}, indent=1, default=str))


if __name__ == "__main__":
    main()

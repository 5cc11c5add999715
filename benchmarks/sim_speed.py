"""How long a full trace replay takes, per policy (issue 3's speed criterion).

Usage::

    python benchmarks/sim_speed.py --trace PATH/cluster_full_log_SYNTHETIC_matched_seed0.csv.gz \
        --policies fifo,sjf,qssf,tiresias,kueue,gandiva,lucid,optsched [--max-jobs N] \
        [--time-limit-s 0.2] [--backend auto] [--no-events] [--out speed.json]

The defaults are those of ``optsched simulate`` (decisions at every arrival/completion, with
optsched's event path between epochs; backend ``auto``).

Each run is one process on one core (runs are sequential so they do not disturb each other).
Reports wall seconds, the number of decisions, and where the time went per decision:
building the snapshot, ``ClusterState.from_snapshot``, the policy, and ``check_decision``.
``--trace mini`` times the shipped mini trace.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from optsched.sim.cluster import SimConfig
from optsched.sim.metrics import summarize
from optsched.sim.runner import RunSpec, run_one
from optsched.sim.trace import load_trace


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", required=True)
    ap.add_argument("--policies", default="fifo,sjf,qssf,tiresias,kueue,gandiva,lucid")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-jobs", type=int, default=None)
    ap.add_argument("--epoch-s", type=float, default=300.0)
    ap.add_argument("--no-trigger", action="store_true")
    ap.add_argument("--no-events", action="store_true",
                    help="no decisions at arrival/completion instants (epoch ticks and triggers)")
    ap.add_argument("--time-limit-s", type=float, default=0.2)
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--predictor", default="trained")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    t = time.perf_counter()
    trace = load_trace(args.trace, max_jobs=args.max_jobs)
    load_s = time.perf_counter() - t
    print(f"trace {trace.name}: {len(trace.jobs)} jobs, {trace.total_gpus} GPUs, "
          f"read in {load_s:.1f} s")
    cfg = SimConfig(epoch_s=args.epoch_s, trigger=not args.no_trigger,
                    events=not args.no_events)
    rows = []
    header = (f"{'policy':10} {'wall s':>8} {'cpu s':>8} {'decisions':>9} {'snapshot':>9} "
              f"{'state':>8} {'policy':>8} {'check':>8}  (seconds in total)")
    print(header)
    for pol in args.policies.split(","):
        opts = ({"time_limit_s": args.time_limit_s, "backend": args.backend,
                 "predictor": args.predictor} if pol == "optsched" else {})
        spec = RunSpec(trace=args.trace, policy=pol, seed=args.seed, config=cfg,
                       policy_options=opts, max_jobs=args.max_jobs)
        t = time.perf_counter()
        log = run_one(spec, trace)
        wall = time.perf_counter() - t
        d = log.decisions
        row = {
            "policy": pol, "wall_s": wall, "cpu_s": log.cpu_seconds, "decisions": len(d["t"]),
            "snapshot_s": sum(d["snapshot_s"]), "state_s": sum(d["state_s"]),
            "policy_s": sum(d["seconds"]), "check_s": sum(d["check_s"]),
            "jobs": len(trace.jobs),
            "avg_queue_delay_s": summarize(log)["avg_queue_delay_s"],
        }
        rows.append(row)
        print(f"{pol:10} {wall:8.1f} {log.cpu_seconds:8.1f} {row['decisions']:9d} "
              f"{row['snapshot_s']:9.1f} "
              f"{row['state_s']:8.1f} {row['policy_s']:8.1f} {row['check_s']:8.1f}")
    if args.out:
        Path(args.out).write_text(json.dumps({"trace": args.trace, "load_s": load_s,
                                              "runs": rows}, indent=1))


if __name__ == "__main__":
    main()

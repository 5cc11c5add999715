"""Peak memory of reading and solving snapshots of growing size, against a baseline size.

Each measurement runs in a fresh child process (``multiprocessing`` spawn) that first solves a
tiny snapshot (so that every module is imported), then parses the snapshot's JSON text
(``load_state``) and solves it with the greedy backend; the child reports the Python heap's peak
over that (``tracemalloc``), its peak RSS (``resource.getrusage``) and the peak RSS it had
after the warm-up ("warm"). tracemalloc slows Python down several times: the seconds shown are
not the engine's speed. Memory is linear in the snapshot's size when the peak per byte of
snapshot stays flat as the snapshot grows: the script prints the ratio of each size's peak to
the baseline's, beside the ratio of their snapshot sizes.

Hostile snapshots (one node of 10^7 or 10^12 GPUs) are refused at parse time: the script also
times and measures those, which must cost no more than the baseline.

    PYTHONPATH=. python benchmarks/input_memory_bench.py [--sizes 1000,2000,4000,8000]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import time
import tracemalloc
from typing import Any


def _child(text: str, solve: bool, out: Any) -> None:
    from optsched.engine.backends.base import SolveParams
    from optsched.engine.epoch import solve_epoch
    from optsched.engine.state import load_state
    from optsched.errors import SnapshotError
    from optsched.instances import generate
    from optsched.predict.fallback import EstimatePredictor

    params = SolveParams(backend="greedy", time_limit_s=60.0)
    solve_epoch(load_state(json.dumps(generate("tiny", 0))), params=params, predictor=EstimatePredictor())
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # after every import (warm-up)
    tracemalloc.start()
    t0 = time.perf_counter()
    status = "ok"
    try:
        state = load_state(text)
        if solve:
            solve_epoch(
                state, params=SolveParams(backend="greedy", time_limit_s=60.0), predictor=EstimatePredictor()
            )
    except SnapshotError as exc:
        status = f"refused: {exc}"
    seconds = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out.put(
        {
            "peak_mib": peak / 2**20,
            "rss_mib": rss / 1024,
            "warm_mib": rss0 / 1024,
            "seconds": seconds,
            "status": status,
        }
    )


def measure(text: str, solve: bool = True) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    q: Any = ctx.Queue()
    p = ctx.Process(target=_child, args=(text, solve, q))
    p.start()
    res: dict[str, Any] = q.get()
    p.join()
    res["bytes"] = len(text)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--sizes", default="1000,2000,4000,8000", help="fleet GPU counts; the first is the baseline"
    )
    args = ap.parse_args()
    from optsched.instances import generate

    sizes = [int(x) for x in args.sizes.split(",")]
    rows = []
    for gpus in sizes:
        text = json.dumps(generate("fleet", seed=0, gpus=gpus))
        rows.append((f"fleet {gpus:,} GPUs", measure(text)))
    hostile = generate("tiny", 0)
    for count in (10**7, 10**12):
        snap = json.loads(json.dumps(hostile))
        snap["nodes"][0]["gpus"] = count
        rows.append((f"one node of {count:.0e} GPUs", measure(json.dumps(snap))))
    base = rows[0][1]
    print(
        f"{'snapshot':<26} {'bytes':>12} {'x bytes':>8} {'heap MiB':>9} {'x heap':>7} {'RSS MiB':>8} "
        f"{'warm':>5} {'heap B/byte':>11} {'s':>7}  status"
    )
    for name, r in rows:
        print(
            f"{name:<26} {r['bytes']:>12,} {r['bytes'] / base['bytes']:>8.1f} {r['peak_mib']:>9.1f} "
            f"{r['peak_mib'] / base['peak_mib']:>7.1f} {r['rss_mib']:>8.0f} {r['warm_mib']:>5.0f} "
            f"{r['peak_mib'] * 2**20 / r['bytes']:>11.1f} {r['seconds']:>7.2f}  {r['status'][:60]}"
        )


if __name__ == "__main__":
    main()

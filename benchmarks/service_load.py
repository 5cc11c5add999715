"""Load benchmark of ``optsched serve`` on loopback (not part of the tests).

Starts the service through the CLI on a free loopback port (a fresh SQLite store in a
temporary folder, a bearer token), then N concurrent clients, each driving its own cluster id
with a Venus-size snapshot (``optsched.instances.generate('venus', seed)``, one seed per client),
post epochs back to back for a bounded time and a bounded number of requests. Each epoch
advances ``now`` by ``epoch_s`` and leaves ``assurance_state`` out, so the service fills it
from its store every time. Reports throughput, latency percentiles, errors (anything but 200),
decision statuses, and the server's resident memory (the service process and its solver
processes, sampled every 0.5 s).

    python benchmarks/service_load.py --clients 4 --workers 2 --duration-s 60 --max-requests 400
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from optsched.hosts.serve_process import ServeStartError, serve_subprocess
from optsched.instances import generate

TOKEN = "load-test-token"


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _tree(pid: int) -> list[int]:
    out = [pid]
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            kids = (task / "children").read_text().split()
            for k in kids:
                out += _tree(int(k))
    except OSError:
        pass
    return out


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


async def _client(
    i: int,
    base: str,
    snap: dict[str, Any],
    stop_at: float,
    budget: list[int],
    out: list[dict[str, Any]],
) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    cluster = f"load-{i}"
    epoch_s = float(snap.get("epoch_s", 60.0))
    async with httpx.AsyncClient(base_url=base, timeout=120.0) as client:
        k = 0
        while time.monotonic() < stop_at and budget[0] > 0:
            budget[0] -= 1
            body = json.dumps({**snap, "now": snap["now"] + k * epoch_s}).encode()
            t0 = time.perf_counter()
            try:
                r = await client.post(f"/v1/clusters/{cluster}/epochs", content=body, headers=headers)
                status, text = r.status_code, r.text
            except httpx.HTTPError as exc:
                status, text = -1, f"{type(exc).__name__}: {exc}"
            dt = time.perf_counter() - t0
            rec: dict[str, Any] = {"client": i, "k": k, "status": status, "seconds": dt}
            if status == 200:
                rec["decision_status"] = json.loads(text)["status"]
                rec["epoch"] = int(r.headers["X-Optsched-Epoch"])
                rec["filled"] = r.headers.get("X-Optsched-Assurance-State") == "filled-from-store"
            else:
                rec["error"] = text[:300]
            out.append(rec)
            k += 1


async def _drive(args: argparse.Namespace, base: str, server_pid: int) -> dict[str, Any]:
    snaps = [generate("venus", args.seed + i) for i in range(args.clients)]
    size = len(json.dumps(snaps[0]))
    results: list[dict[str, Any]] = []
    budget = [args.max_requests]
    peak = {"server": 0, "total": 0}
    done = asyncio.Event()

    async def sample() -> None:
        while not done.is_set():
            pids = _tree(server_pid)
            peak["server"] = max(peak["server"], _rss_kib(server_pid))
            peak["total"] = max(peak["total"], sum(_rss_kib(p) for p in pids))
            await asyncio.sleep(0.5)

    sampler = asyncio.create_task(sample())
    t0 = time.monotonic()
    stop_at = t0 + args.duration_s
    await asyncio.gather(*(_client(i, base, s, stop_at, budget, results) for i, s in enumerate(snaps)))
    wall = time.monotonic() - t0
    done.set()
    await sampler
    async with httpx.AsyncClient(base_url=base) as c:
        metrics = (await c.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})).text
    ok = [r for r in results if r["status"] == 200]
    lat = [r["seconds"] for r in ok]
    statuses: dict[str, int] = {}
    for r in ok:
        statuses[r["decision_status"]] = statuses.get(r["decision_status"], 0) + 1
    solve_sum = solve_count = 0.0
    for line in metrics.splitlines():
        if line.startswith("optsched_solve_seconds_sum"):
            solve_sum = float(line.split()[-1])
        elif line.startswith("optsched_solve_seconds_count"):
            solve_count = float(line.split()[-1])
    in_order = all(
        r["epoch"] == r["k"] + 1 and (r["k"] == 0 or r["filled"]) for r in ok
    )  # every cluster's epochs advanced one by one, each later one with the stored state
    return {
        "clients": args.clients,
        "workers": args.workers,
        "duration_s": args.duration_s,
        "max_requests": args.max_requests,
        "snapshot_bytes": size,
        "requests": len(results),
        "ok": len(ok),
        "errors": len(results) - len(ok),
        "error_samples": [r["error"] for r in results if r["status"] != 200][:5],
        "wall_s": round(wall, 2),
        "throughput_rps": round(len(ok) / wall, 3) if wall > 0 else 0.0,
        "latency_s": {
            "p50": round(_pct(lat, 0.50), 3),
            "p90": round(_pct(lat, 0.90), 3),
            "p99": round(_pct(lat, 0.99), 3),
            "max": round(max(lat), 3) if lat else None,
            "mean": round(statistics.fmean(lat), 3) if lat else None,
        },
        "server_solve_s_mean": round(solve_sum / solve_count, 3) if solve_count else None,
        "decision_status": statuses,
        "epochs_in_order_with_stored_state": in_order,
        "rss_mib": {
            "service_process_peak": round(peak["server"] / 1024, 1),
            "with_solver_processes_peak": round(peak["total"] / 1024, 1),
        },
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load1": os.getloadavg()[0]},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=4, help="concurrent clients, one cluster id each")
    ap.add_argument("--workers", type=int, default=2, help="the service's solver processes")
    ap.add_argument("--duration-s", type=float, default=60.0, help="stop sending after this long")
    ap.add_argument("--max-requests", type=int, default=400, help="stop after this many requests in all")
    ap.add_argument("--seed", type=int, default=0, help="client i posts generate('venus', seed + i)")
    ap.add_argument("--out", type=Path, help="also write the summary JSON here")
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "load.db"
        try:
            serve = serve_subprocess(
                db, token=TOKEN, workers=args.workers, start_timeout_s=60, stop_timeout_s=30
            )
            with serve as srv:
                summary = asyncio.run(_drive(args, srv.base, srv.proc.pid))
        except ServeStartError as exc:
            print(f"error: the service did not start: {exc}", file=sys.stderr)
            return 1
    text = json.dumps(summary, indent=1)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0 if summary["errors"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

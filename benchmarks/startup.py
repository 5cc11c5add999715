"""Start-up benchmark: how long the ``optsched`` command takes before it does any work.

    python benchmarks/startup.py [--runs 5] [--instance instances/tiny/loan_reclaim.json]

Each case runs in a fresh interpreter (this one), ``--runs`` times; the table gives the median
wall time and its ratio to a bare ``python -c pass`` measured in the same run, so numbers from
different machines compare. ``import`` rows are the interpreter's own ``-X importtime``
cumulative figure for the module (median over the runs), also as a ratio to the bare start.

Cases: ``import optsched``, ``import optsched.cli``, ``optsched --help`` and ``optsched solve``
on a tiny instance (the solve loads a backend and, with ``models/`` present, LightGBM: it shows
what a real first command costs).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def wall_s(argv: list[str], runs: int) -> float:
    """Median wall seconds of ``argv`` run ``runs`` times (after one untimed warm-up run)."""
    subprocess.run(argv, cwd=ROOT, capture_output=True, check=True)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, cwd=ROOT, capture_output=True, check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def import_s(module: str, runs: int) -> float:
    """Median cumulative ``-X importtime`` seconds of ``module`` in a fresh interpreter."""
    times = []
    for _ in range(runs):
        proc = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", f"import {module}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        for line in proc.stderr.splitlines():
            parts = line.split("|")
            if len(parts) == 3 and parts[2].strip() == module:
                times.append(int(parts[1]) / 1e6)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--instance", default="instances/tiny/loan_reclaim.json")
    args = ap.parse_args()
    py = sys.executable
    cli = [py, "-m", "optsched.cli"]
    base = wall_s([py, "-c", "pass"], args.runs)
    rows: list[tuple[str, float]] = [
        ("import optsched (importtime)", import_s("optsched", args.runs)),
        ("import optsched.cli (importtime)", import_s("optsched.cli", args.runs)),
        ("python -c 'import optsched.cli'", wall_s([py, "-c", "import optsched.cli"], args.runs)),
        ("optsched --help", wall_s([*cli, "--help"], args.runs)),
        (f"optsched solve {args.instance}", wall_s([*cli, "solve", args.instance], args.runs)),
    ]
    print(f"baseline: python -c pass, median of {args.runs}: {base * 1e3:.1f} ms")
    print()
    print("| case | median ms | x python -c pass |")
    print("|---|---:|---:|")
    for name, s in rows:
        print(f"| {name} | {s * 1e3:.1f} | {s / base:.2f} |")


if __name__ == "__main__":
    main()

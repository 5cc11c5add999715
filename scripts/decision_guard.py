"""Write every decision of a fixed set of snapshots, without its timings, for a refactor guard.

A refactor that must keep every decision byte-identical runs this before and after and
compares the two folders (``diff -r``): the shipped ``instances/tiny/*.json`` and generated
Venus seeds 0 and 7, on the greedy plan, HiGHS and CP-SAT, with a time limit long enough that
no wall clock decides, one process, the trained predictor of ``models/`` (the CLI's default).

Usage: ``python scripts/decision_guard.py OUT_DIR``
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from optsched import solve_epoch
from optsched.engine.backends.base import SolveParams
from optsched.engine.state import ClusterState, parse_snapshot
from optsched.instances import generate

TIMING_KEYS = {"seconds", "stage_seconds"}
DETERMINISTIC_TIME = re.compile(r"deterministic time [0-9.e+-]+")
"""CP-SAT's own work figure in ``status_detail``: it varies between runs of the same model."""


def _strip(obj: Any) -> Any:
    """The decision without wall-clock figures (they differ between any two runs)."""
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in TIMING_KEYS}
    if isinstance(obj, str):
        return DETERMINISTIC_TIME.sub("deterministic time -", obj)
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def snapshots(root: Path) -> dict[str, str]:
    out = {p.stem: p.read_text() for p in sorted((root / "instances" / "tiny").glob("*.json"))}
    for seed in (0, 7):
        out[f"venus-{seed}"] = generate("venus", seed)
    return out


def main(out_dir: str) -> None:
    root = Path(__file__).resolve().parent.parent
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, text in snapshots(root).items():
        for backend in ("greedy", "highs", "cpsat"):
            state = ClusterState.from_snapshot(parse_snapshot(text))
            params = SolveParams(backend=backend, time_limit_s=20.0, seed=0, num_workers=1)
            d = solve_epoch(state, params=params)
            body = json.dumps(_strip(d.model_dump(mode="json")), indent=1, sort_keys=True)
            (out / f"{name}.{backend}.json").write_text(body + "\n")
            print(name, backend, d.status, flush=True)


if __name__ == "__main__":
    main(sys.argv[1])

"""Engine benchmark: quality, backends, determinism and deadline of one epoch, in one run.

    python benchmarks/engine_bench.py [--quick] [--sizes venus,medium,large] [--seeds 0,1,2]
        [--backends auto,highs,cpsat,highspy,pulp,greedy] [--reference-s 60] [--parts ...]
        [--json runs/engine_bench.json] [--md runs/engine_bench.md] [--tree]

Not part of the tests. Snapshots come from ``optsched generate --size SIZE --seed S`` (run as
a command, as a user would; ``--tree`` adds ``--tree``: the same tenants under a quota tree). Four parts:

1. **quality** (Venus size, seeds 0-9): ``optsched solve SNAP`` in a fresh process with the
   defaults (backend ``auto``, 1 s limit): status, objective, stage seconds and the process's
   wall time; the objective's gap to a reference bound; ``--backend greedy`` from the command
   line for comparison; the warm library call (``solve_epoch`` in this process, second call).
2. **backends** (venus seeds 0-2, medium 0-2, large 0-1): every backend, warm library calls at
   the default 1 s limit (the second call of each backend on each snapshot is measured):
   status, gap, whole-call seconds, mean seconds per stage, and how often the wall-clock
   safety net fired (``wall-clock limit hit`` in ``solver.status_detail`` or in the fallback
   reason).
3. **determinism** (seed 0 of each size, default backend): the decision (starts with their
   allocations, preemptions, loans, queue, status, objective) of two fresh command-line
   processes and of two warm calls, compared.
4. **deadline** (large, seed 0): ten warm calls with the 1 s limit; p50/p99 of the whole
   call's wall seconds against the limit + 10%, and the seconds the solver got.

The reference of each snapshot is ``SolveParams(backend="highs", time_limit_s=R, work_s=R)``
in this process (``--reference-s R``, default 60: a cap, reported when hit); its bound is the
maximum of the solver's proven bound and the best objective any run reached on that snapshot,
and ``gap = (bound - objective) / bound``. Every call uses the default predictor (the trained
models in ``models/`` when present), as the command line does. The load average of the
machine is sampled at every measurement and reported. Raw results go to ``--json``; the
Markdown tables are printed and, with ``--md``, written.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

import optsched
from optsched import solve_epoch
from optsched.engine.backends.base import SolveParams
from optsched.engine.epoch import DEFAULT_BACKEND, DEFAULT_TIME_LIMIT_S, default_predictor
from optsched.engine.state import ClusterState, parse_snapshot
from optsched.schema.decision import Decision

SIZES = ("venus", "medium", "large")
BACKENDS = ("auto", "highs", "cpsat", "highspy", "pulp", "greedy")
PARTS = ("quality", "backends", "determinism", "deadline")
QUALITY_SEEDS = list(range(10))
BACKEND_SEEDS = {"venus": [0, 1, 2], "medium": [0, 1, 2], "large": [0, 1]}
QUICK_QUALITY_SEEDS = [0, 1]
QUICK_BACKEND_SEEDS = {"venus": [0], "medium": [0], "large": [0]}
STAGES = ("validate", "predict", "candidates", "greedy", "solve", "fill", "decide_and_check")
QUALITY_GOAL = 0.02
DEADLINE_SLACK = 0.10
WALL_HIT = "wall-clock limit hit"


def load1() -> float:
    """The one-minute load average (``nan`` where the platform has none)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return math.nan


@dataclass
class Run:
    """One measured solve."""

    part: str
    size: str
    seed: int
    backend: str
    """The backend asked for (``auto`` for the default)."""
    mode: str
    """``cli`` (fresh process), ``warm`` (second library call) or ``first`` (first one)."""
    status: str
    used: str
    """The backend that answered (``solver.backend``)."""
    objective: float | None
    solver_bound: float | None
    wall_s: float
    """Whole call: the subprocess for ``cli``, ``solve_epoch`` for library calls."""
    solver_seconds: float
    stage_seconds: dict[str, float]
    status_detail: str | None
    fallback_reason: str | None
    wall_hit: bool
    load1: float
    fingerprint: str = ""
    given: str = "text"
    """What the library call got: the snapshot's JSON ``text`` (parsed and validated inside the
    call's limit) or an already validated ``state`` (``ClusterState``, built before the clock)."""
    gap: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def fingerprint(d: Decision) -> str:
    """The decision's content that must not change between runs, as canonical JSON."""
    keep = {"start", "preempt", "loans", "queue", "status"}
    body = d.model_dump(mode="json", include=keep)
    body["objective"] = d.solver.objective
    return json.dumps(body, sort_keys=True)


def differing(a: str, b: str) -> list[str]:
    """Fields in which two fingerprints differ."""
    x, y = json.loads(a), json.loads(b)
    return [k for k in sorted(x) if x[k] != y.get(k)]


def to_run(part: str, size: str, seed: int, backend: str, mode: str, d: Decision, wall: float) -> Run:
    s = d.solver
    hit = WALL_HIT in (s.status_detail or "") or WALL_HIT in (s.fallback_reason or "")
    return Run(
        part=part,
        size=size,
        seed=seed,
        backend=backend,
        mode=mode,
        status=d.status,
        used=s.backend,
        objective=s.objective,
        solver_bound=s.bound,
        wall_s=wall,
        solver_seconds=s.seconds,
        stage_seconds=dict(s.stage_seconds),
        status_detail=s.status_detail,
        fallback_reason=s.fallback_reason,
        wall_hit=hit,
        load1=load1(),
        fingerprint=fingerprint(d),
    )


def optsched_command() -> list[str]:
    """How a user runs the command: the ``optsched`` script of this interpreter's environment."""
    script = Path(sys.executable).parent / "optsched"
    if script.exists():
        return [str(script)]
    found = shutil.which("optsched")
    return [found] if found else [sys.executable, "-m", "optsched.cli"]


class Bench:
    """Snapshots, references and runs of one benchmark session."""

    def __init__(
        self, workdir: Path, reference_s: float, progress: Progress, console: Console, tree: bool = False
    ) -> None:
        self.tree = tree
        self.workdir = workdir
        self.reference_s = reference_s
        self.progress = progress
        self.console = console
        self.cmd = optsched_command()
        self.snapshots: dict[tuple[str, int], Path] = {}
        self.texts: dict[tuple[str, int], str] = {}
        self.references: dict[tuple[str, int], dict[str, Any]] = {}
        self.runs: list[Run] = []

    def log(self, msg: str) -> None:
        self.console.log(msg)

    def snapshot(self, size: str, seed: int) -> str:
        """JSON text of ``optsched generate --size SIZE --seed SEED`` (generated once)."""
        key = (size, seed)
        if key not in self.texts:
            path = self.workdir / f"{size}-{seed}.json"
            argv = [*self.cmd, "generate", "--size", size, "--seed", str(seed), "-o", str(path)]
            if self.tree:
                argv.append("--tree")
            subprocess.run(argv, check=True, capture_output=True, text=True)
            self.snapshots[key] = path
            self.texts[key] = path.read_text()
        return self.texts[key]

    def cli(self, part: str, size: str, seed: int, backend: str | None) -> Run:
        """``optsched solve SNAP [--backend B]`` in a fresh process."""
        self.snapshot(size, seed)
        out = self.workdir / f"decision-{size}-{seed}-{backend or 'default'}.json"
        argv = [*self.cmd, "solve", str(self.snapshots[(size, seed)]), "-o", str(out)]
        if backend is not None:
            argv += ["--backend", backend]
        t0 = time.perf_counter()
        proc = subprocess.run(argv, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv[1:])} exited {proc.returncode}: {proc.stderr[-2000:]}")
        d = Decision.model_validate_json(out.read_text())
        out.unlink()
        run = to_run(part, size, seed, backend or DEFAULT_BACKEND, "cli", d, wall)
        self.runs.append(run)
        return run

    def library(
        self, part: str, size: str, seed: int, backend: str, mode: str, limit: float, given: str = "text"
    ) -> Run:
        """One ``solve_epoch`` call on the snapshot's JSON text (``given="text"``, as the
        command line hands it over) or on a ``ClusterState`` validated before the clock."""
        text = self.snapshot(size, seed)
        params = SolveParams(backend=backend, time_limit_s=limit)
        arg: str | ClusterState = text
        if given == "state":
            arg = ClusterState.from_snapshot(parse_snapshot(text))
        t0 = time.perf_counter()
        d = solve_epoch(arg, params=params)
        wall = time.perf_counter() - t0
        run = to_run(part, size, seed, backend, mode, d, wall)
        run.given = given
        self.runs.append(run)
        return run

    def warm(self, part: str, size: str, seed: int, backend: str, limit: float) -> Run:
        """The second of two library calls (the first, recorded as ``first``, warms caches,
        imports and worker processes)."""
        self.library(part, size, seed, backend, "first", limit)
        return self.library(part, size, seed, backend, "warm", limit)

    def reference(self, size: str, seed: int) -> dict[str, Any]:
        key = (size, seed)
        if key not in self.references:
            text = self.snapshot(size, seed)
            r = self.reference_s
            t0 = time.perf_counter()
            d = solve_epoch(text, params=SolveParams(backend="highs", time_limit_s=r, work_s=r))
            wall = time.perf_counter() - t0
            detail = d.solver.status_detail or ""
            self.references[key] = {
                "size": size,
                "seed": seed,
                "status": d.status,
                "objective": d.solver.objective,
                "solver_bound": d.solver.bound,
                "status_detail": detail,
                "fallback_reason": d.solver.fallback_reason,
                "seconds": wall,
                "capped": "limit" in detail,
                "load1": load1(),
            }
            self.log(
                f"reference {size} seed {seed}: {d.status}, objective {d.solver.objective:.1f}, "
                f"bound {d.solver.bound}, {wall:.1f} s ({detail})"
            )
        return self.references[key]

    def finish_gaps(self) -> None:
        """Reference bound = max(proven bound, best objective seen); gap of every run."""
        for key, ref in self.references.items():
            seen = [r.objective for r in self.runs if (r.size, r.seed) == key and r.objective is not None]
            cands = [x for x in (ref["solver_bound"], ref["objective"], *seen) if x is not None]
            ref["bound"] = max(cands)
        for r in self.runs:
            found = self.references.get((r.size, r.seed))
            if found is None or r.objective is None or not found["bound"]:
                continue
            r.gap = (found["bound"] - r.objective) / found["bound"]


# ---------------------------------------------------------------------------------------------
# parts


def part_quality(b: Bench, seeds: list[int], advance: Callable[[], None]) -> None:
    for seed in seeds:
        b.reference("venus", seed)
        run = b.cli("quality", "venus", seed, None)
        g = b.cli("quality", "venus", seed, "greedy")
        w = b.warm("quality", "venus", seed, DEFAULT_BACKEND, DEFAULT_TIME_LIMIT_S)
        b.log(
            f"quality venus seed {seed}: CLI {run.status} ({run.used}) {run.objective:.1f} "
            f"in {run.wall_s:.2f} s, "
            f"greedy {g.objective:.1f}, warm {w.status} {w.objective:.1f} in {w.wall_s:.2f} s"
        )
        advance()


def part_backends(
    b: Bench, plan: list[tuple[str, int]], backends: list[str], advance: Callable[[], None]
) -> None:
    for size, seed in plan:
        b.reference(size, seed)
        for be in backends:
            w = b.warm("backends", size, seed, be, DEFAULT_TIME_LIMIT_S)
            b.log(
                f"backends {size} seed {seed} {be}: {w.status} ({w.used}) {w.objective:.1f} "
                f"in {w.wall_s:.2f} s{' WALL HIT' if w.wall_hit else ''}"
            )
            advance()


def part_determinism(b: Bench, sizes: list[str], advance: Callable[[], None]) -> None:
    for size in sizes:
        for _ in range(2):
            b.cli("determinism", size, 0, None)
        b.library("determinism", size, 0, DEFAULT_BACKEND, "first", DEFAULT_TIME_LIMIT_S)
        for _ in range(2):
            b.library("determinism", size, 0, DEFAULT_BACKEND, "warm", DEFAULT_TIME_LIMIT_S)
        b.log(f"determinism {size}: done")
        advance()


def part_deadline(b: Bench, size: str, calls: int, advance: Callable[[], None]) -> None:
    for given in ("text", "state"):
        b.library("deadline", size, 0, DEFAULT_BACKEND, "first", DEFAULT_TIME_LIMIT_S, given)
        for _ in range(calls):
            b.library("deadline", size, 0, DEFAULT_BACKEND, "warm", DEFAULT_TIME_LIMIT_S, given)
            advance()


# ---------------------------------------------------------------------------------------------
# tables


def pct(x: float | None, digits: int = 2) -> str:
    return "–" if x is None else f"{100 * x:.{digits}f}%"


def numeric(cell: str) -> bool:
    """Whether a table cell reads as a number (right-aligned)."""
    head = cell.split(" ")[0].rstrip(",%").replace(",", "")
    try:
        float(head)
    except ValueError:
        return cell == "–"
    return True


def table(head: list[str], rows: list[list[str]]) -> str:
    """A Markdown table; columns whose cells are all numbers are right-aligned."""
    align = ["---:" if all(numeric(r[i]) for r in rows) else "---" for i in range(len(head))]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def select(runs: list[Run], **kw: Any) -> list[Run]:
    return [r for r in runs if all(getattr(r, k) == v for k, v in kw.items())]


def stage(r: Run, name: str) -> float:
    return r.stage_seconds.get(name, 0.0)


def quality_tables(b: Bench) -> str:
    runs = select(b.runs, part="quality")
    seeds = sorted({r.seed for r in runs})
    if not seeds:
        return ""
    rows = []
    ok = above = 0
    for s in seeds:
        c = select(runs, seed=s, mode="cli", backend=DEFAULT_BACKEND)[0]
        g = select(runs, seed=s, mode="cli", backend="greedy")[0]
        w = select(runs, seed=s, mode="warm")[0]
        ref = b.references[("venus", s)]
        ge = c.objective is not None and g.objective is not None and c.objective >= g.objective - 1e-6
        ok += c.gap is not None and c.gap <= QUALITY_GOAL
        above += ge
        rows.append(
            [
                str(s),
                f"{c.status} ({c.used})",
                f"{c.objective:,.0f}",
                f"{ref['bound']:,.0f}",
                pct(c.gap, 3),
                pct(g.gap, 1),
                "yes" if ge else "**no**",
                f"{c.wall_s:.2f}",
                f"{c.solver_seconds:.3f}",
                f"{stage(c, 'solve'):.3f}",
                f"{w.status} ({w.used})",
                pct(w.gap, 3),
                f"{w.wall_s:.3f}",
                "yes" if w.fingerprint == c.fingerprint else "no",
            ]
        )
    head = [
        "seed",
        "CLI status",
        "CLI objective",
        "reference bound",
        "CLI gap",
        "greedy gap",
        "CLI ≥ greedy",
        "CLI process s",
        "CLI solver.seconds",
        "CLI solve stage s",
        "warm status",
        "warm gap",
        "warm call s",
        "warm = CLI",
    ]
    n = len(seeds)
    summary = (
        f"Within {QUALITY_GOAL:.0%} of the reference bound: **{ok} of {n}** seeds (goal ≥ 9 of 10); "
        f"objective ≥ greedy's: **{above} of {n}**."
    )
    stages_cli = [select(runs, seed=s, mode="cli", backend=DEFAULT_BACKEND)[0] for s in seeds]
    stage_row = [
        [
            "CLI (fresh process)",
            *[f"{np.mean([stage(r, k) for r in stages_cli]):.3f}" for k in STAGES],
            f"{np.mean([r.solver_seconds for r in stages_cli]):.3f}",
            f"{np.mean([r.wall_s for r in stages_cli]):.2f}",
        ]
    ]
    warm = [select(runs, seed=s, mode="warm")[0] for s in seeds]
    stage_row.append(
        [
            "warm library call",
            *[f"{np.mean([stage(r, k) for r in warm]):.3f}" for k in STAGES],
            f"{np.mean([r.solver_seconds for r in warm]):.3f}",
            f"{np.mean([r.wall_s for r in warm]):.3f}",
        ]
    )
    stages = table(["default backend, venus", *STAGES, "solver.seconds", "whole call s"], stage_row)
    return "\n\n".join([table(head, rows), summary, "Mean seconds per stage:", stages])


def backend_table(b: Bench, backends: list[str]) -> str:
    runs = select(b.runs, part="backends", mode="warm")
    if not runs:
        return ""
    rows = []
    for size in SIZES:
        for be in backends:
            sel = select(runs, size=size, backend=be)
            if not sel:
                continue
            gaps = [r.gap for r in sel if r.gap is not None]
            statuses = ", ".join(
                f"{st} ×{sum(r.status == st for r in sel)}" for st in sorted({r.status for r in sel})
            )
            used = ",".join(sorted({r.used for r in sel}))
            rows.append(
                [
                    size,
                    be,
                    str(len(sel)),
                    statuses,
                    used,
                    f"{pct(float(np.mean(gaps)))}, {pct(max(gaps))}" if gaps else "–",
                    f"{np.mean([r.wall_s for r in sel]):.3f} ({max(r.wall_s for r in sel):.3f})",
                    *[f"{np.mean([stage(r, k) for r in sel]):.3f}" for k in STAGES[1:]],
                    str(sum(r.wall_hit for r in sel)),
                ]
            )
    head = [
        "size",
        "backend",
        "runs",
        "status",
        "answered by",
        "gap mean, max",
        "call s mean (max)",
        *[f"{k} s" for k in STAGES[1:]],
        "wall-clock hit",
    ]
    return table(head, rows)


def determinism_table(b: Bench) -> str:
    runs = select(b.runs, part="determinism")
    rows = []
    for size in SIZES:
        cli = select(runs, size=size, mode="cli")
        warm = select(runs, size=size, mode="warm")
        if len(cli) < 2 or len(warm) < 2:
            continue

        def same(x: Run, y: Run) -> str:
            if x.fingerprint == y.fingerprint:
                return "identical"
            return "**differs**: " + ", ".join(differing(x.fingerprint, y.fingerprint))

        rows.append(
            [
                size,
                "0",
                ", ".join(sorted({f"{r.status} ({r.used})" for r in cli + warm})),
                same(cli[0], cli[1]),
                same(warm[0], warm[1]),
                same(cli[0], warm[0]),
                str(sum(r.wall_hit for r in cli + warm)),
                ", ".join(sorted({f"{r.objective:,.1f}" for r in cli + warm if r.objective is not None})),
            ]
        )
    head = [
        "size",
        "seed",
        "status (answered by)",
        "CLI run 1 vs 2",
        "warm call 1 vs 2",
        "CLI vs warm",
        "wall-clock hits",
        "objective(s)",
    ]
    return table(head, rows) if rows else ""


def deadline_table(b: Bench) -> str:
    rows = []
    limit = DEFAULT_TIME_LIMIT_S
    for given in ("text", "state"):
        runs = select(b.runs, part="deadline", mode="warm", given=given)
        if not runs:
            continue
        walls = np.array([r.wall_s for r in runs])
        solve = np.array([stage(r, "solve") for r in runs])
        fixed = np.array([sum(v for k, v in r.stage_seconds.items() if k != "solve") for r in runs])
        p50, p99 = (float(np.percentile(walls, q)) for q in (50, 99))
        within = int(np.sum(walls <= limit * (1 + DEADLINE_SLACK)))
        statuses = ", ".join(
            f"{st} ({u}) ×{sum(r.status == st and r.used == u for r in runs)}"
            for st, u in sorted({(r.status, r.used) for r in runs})
        )
        rows.append(
            [
                runs[0].size,
                "JSON text" if given == "text" else "ClusterState",
                str(len(runs)),
                f"{limit:g}",
                f"{p50:.3f}",
                f"{p99:.3f}",
                f"{walls.max():.3f}",
                f"{limit * (1 + DEADLINE_SLACK):.2f}",
                f"{within} of {len(runs)}",
                f"{solve.mean():.3f} ({solve.min():.3f}–{solve.max():.3f})",
                f"{np.mean([stage(r, 'validate') for r in runs]):.3f}",
                f"{fixed.mean():.3f}",
                str(sum(r.wall_hit for r in runs)),
                statuses,
            ]
        )
    head = [
        "size",
        "input",
        "calls",
        "limit s",
        "p50 s",
        "p99 s",
        "max s",
        "limit + 10%",
        "calls within",
        "solver got s, mean (min–max)",
        "validate s (mean)",
        "stages other than solve s (mean)",
        "wall-clock hits",
        "status (answered by)",
    ]
    return table(head, rows) if rows else ""


def reference_table(b: Bench) -> str:
    rows = []
    for (size, seed), ref in sorted(b.references.items(), key=lambda kv: (SIZES.index(kv[0][0]), kv[0][1])):
        rows.append(
            [
                size,
                str(seed),
                ref["status"],
                f"{ref['objective']:,.1f}",
                "–" if ref["solver_bound"] is None else f"{ref['solver_bound']:,.1f}",
                f"{ref['bound']:,.1f}",
                f"{ref['seconds']:.1f}",
                "yes" if ref["capped"] else "no",
                ref["status_detail"],
            ]
        )
    head = [
        "size",
        "seed",
        "status",
        "objective",
        "proven bound",
        "reference bound",
        "seconds",
        "stopped by a limit",
        "HiGHS detail",
    ]
    return table(head, rows)


# ---------------------------------------------------------------------------------------------


def git_commit() -> dict[str, Any]:
    """Commit of the source tree the measured ``optsched`` was imported from, and whether the
    package's files differ from it."""
    root = Path(optsched.__file__).resolve().parents[1]
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--", "optsched", "models"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        return {"commit": "unknown", "dirty": []}
    return {"commit": head, "dirty": [x.strip() for x in dirty if x.strip()]}


def versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for pkg in ("optsched", "ortools", "highspy", "pulp", "lightgbm", "numpy"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = "absent"
    return out


def int_list(text: str) -> list[int]:
    """``0,1,2`` or ``0-9`` (or a mix) as a list of ints."""
    out: list[int] = []
    for part in text.split(","):
        if "-" in part:
            lo, hi = part.split("-")
            out += range(int(lo), int(hi) + 1)
        elif part:
            out.append(int(part))
    return out


def names(text: str, allowed: tuple[str, ...], flag: str) -> list[str]:
    got = [x for x in text.split(",") if x]
    bad = [x for x in got if x not in allowed]
    if bad:
        raise SystemExit(f"error: {flag}: unknown {', '.join(bad)} (allowed: {', '.join(allowed)})")
    return got


@contextmanager
def workdir(keep: Path | None) -> Iterator[Path]:
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield keep
        return
    with tempfile.TemporaryDirectory(prefix="engine-bench-") as d:
        yield Path(d)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer seeds and deadline calls (a smoke run)")
    ap.add_argument("--sizes", default=",".join(SIZES), help="sizes of parts 2-4 (venus,medium,large)")
    ap.add_argument(
        "--seeds", default=None, help="seeds of every part, e.g. 0,1,2 or 0-9 (default: per part, see above)"
    )
    ap.add_argument("--backends", default=",".join(BACKENDS), help="backends of part 2")
    ap.add_argument(
        "--parts", default=",".join(PARTS), help="parts to run (quality,backends,determinism,deadline)"
    )
    ap.add_argument("--reference-s", type=float, default=60.0, help="cap of each reference solve, seconds")
    ap.add_argument("--deadline-calls", type=int, default=None, help="warm calls of part 4 (default 10)")
    ap.add_argument("--json", type=Path, default=Path("runs/engine_bench.json"), help="raw results")
    ap.add_argument("--md", type=Path, default=None, help="also write the Markdown tables here")
    ap.add_argument("--keep", type=Path, default=None, help="keep generated snapshots in this folder")
    ap.add_argument("--tree", action="store_true", help="snapshots with a quota tree (generate --tree)")
    args = ap.parse_args()

    sizes = names(args.sizes, SIZES, "--sizes")
    backends = names(args.backends, BACKENDS, "--backends")
    parts = names(args.parts, PARTS, "--parts")
    explicit = int_list(args.seeds) if args.seeds else None
    q_seeds = explicit or (QUICK_QUALITY_SEEDS if args.quick else QUALITY_SEEDS)
    b_seeds = QUICK_BACKEND_SEEDS if args.quick else BACKEND_SEEDS
    plan = [(s, seed) for s in sizes for seed in (explicit or b_seeds[s])]
    calls = args.deadline_calls or (4 if args.quick else 10)
    deadline_size = "large" if "large" in sizes else sizes[-1]

    console = Console(stderr=True)
    meta: dict[str, Any] = {
        "argv": sys.argv[1:],
        "started": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        **git_commit(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "versions": versions(),
        "loadavg_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "default_backend": DEFAULT_BACKEND,
        "default_time_limit_s": DEFAULT_TIME_LIMIT_S,
        "reference_s": args.reference_s,
    }
    modified = f" (modified: {', '.join(meta['dirty'])})" if meta["dirty"] else ""
    console.log(
        f"optsched {meta['commit']}{modified}; {meta['cpus']} CPUs; load average {meta['loadavg_start']}"
    )
    default_predictor()  # loaded once, before any clock, as the library does
    total = (
        ("quality" in parts) * len(q_seeds)
        + ("backends" in parts) * len(plan) * len(backends)
        + ("determinism" in parts) * len(sizes)
        + ("deadline" in parts) * 2 * calls
    )
    t_start = time.perf_counter()
    with (
        workdir(args.keep) as wd,
        Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        ) as progress,
    ):
        bench = Bench(wd, args.reference_s, progress, console, tree=args.tree)
        task = progress.add_task("engine bench", total=total)

        def advance() -> None:
            progress.advance(task)

        if "quality" in parts:
            progress.update(task, description="1 quality (venus, CLI)")
            part_quality(bench, q_seeds, advance)
        if "backends" in parts:
            progress.update(task, description="2 backends")
            part_backends(bench, plan, backends, advance)
        if "determinism" in parts:
            progress.update(task, description="3 determinism")
            part_determinism(bench, sizes, advance)
        if "deadline" in parts:
            progress.update(task, description=f"4 deadline ({deadline_size})")
            part_deadline(bench, deadline_size, calls, advance)
    # references for snapshots only parts 3-4 used, so every run has a gap
    for size, seed in sorted({(r.size, r.seed) for r in bench.runs}):
        bench.reference(size, seed)
    bench.finish_gaps()
    meta["loadavg_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    meta["seconds"] = time.perf_counter() - t_start
    loads = [r.load1 for r in bench.runs if not math.isnan(r.load1)]
    meta["load1_during"] = {
        "min": min(loads, default=math.nan),
        "mean": float(np.mean(loads)) if loads else math.nan,
        "max": max(loads, default=math.nan),
    }

    sections = [
        (
            f"Measured {meta['started']} on optsched {meta['commit']}"
            + (f" (modified files: {', '.join(meta['dirty'])})" if meta["dirty"] else "")
            + f", {meta['cpus']} CPUs; one-minute load average during the runs "
            f"{meta['load1_during']['min']:.2f}–{meta['load1_during']['max']:.2f} "
            f"(mean {meta['load1_during']['mean']:.2f}); benchmark took {meta['seconds'] / 60:.1f} min."
        ),
    ]
    for title, body in (
        ("1. Quality at the default (Venus size, one-shot CLI)", quality_tables(bench)),
        ("2. Every backend, warm library call, 1 s limit", backend_table(bench, backends)),
        ("3. Determinism (default backend)", determinism_table(bench)),
        (f"4. Deadline ({deadline_size}, warm library calls, 1 s limit)", deadline_table(bench)),
        (f"Reference solves (HiGHS, capped at {args.reference_s:g} s)", reference_table(bench)),
    ):
        if body:
            sections.append(f"### {title}\n\n{body}")
    md = "\n\n".join(sections) + "\n"
    print(md)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {
                "meta": meta,
                "references": list(bench.references.values()),
                "runs": [asdict(r) for r in bench.runs],
            },
            indent=1,
        )
    )
    console.log(f"raw results: {args.json}")
    if args.md is not None:
        args.md.parent.mkdir(parents=True, exist_ok=True)
        args.md.write_text(md)


if __name__ == "__main__":
    main()

"""``optsched solve``, ``check``, ``explain``, ``schema``, ``generate`` and ``show-versions``: the engine.

Wire them into a Typer app with :func:`register`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from optsched.cli.common import check_input_file, check_out_file, emit, fail, read_text

if TYPE_CHECKING:
    from optsched.engine.state import ClusterState
    from optsched.schema.decision import Decision


def solve(
    snapshot: Annotated[str, typer.Argument(help="Snapshot JSON file, or - for stdin.")],
    out: Annotated[Path | None, typer.Option("-o", "--out", help="Write the decision here.")] = None,
    backend: Annotated[
        str | None,
        typer.Option(
            help="auto (default: highs, greedy if too large), highs, cpsat, highspy (alias milp), pulp, "
            "greedy."
        ),
    ] = None,
    time_limit: Annotated[
        float | None, typer.Option("--time-limit", help="Seconds for the whole call.")
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Random seed.")] = None,
    solver_config: Annotated[
        Path | None, typer.Option("--solver-config", help="A TOML preset from solvers/.")
    ] = None,
    predictor: Annotated[
        str, typer.Option(help="trained (default: models/ when present) or fallback.")
    ] = "trained",
    partitions: Annotated[
        str | None,
        typer.Option(help="Split the epoch into N parts solved in parallel, or auto (docs/partitioning.md)."),
    ] = None,
) -> None:
    """Solve one snapshot and print (or write) the decision."""
    from optsched.engine.backends.base import SolveParams
    from optsched.engine.epoch import resolve_params, solve_epoch, start_part_workers
    from optsched.engine.state import ClusterState, parse_snapshot
    from optsched.schema.limits import MAX_TIME_LIMIT_S

    # every path and option is checked before the snapshot is read or anything solved
    check_out_file(out, "--out")
    if solver_config is not None:
        check_input_file(solver_config, "--solver-config")
    if predictor not in ("trained", "fallback"):
        fail("--predictor", f"unknown predictor '{predictor}' (trained, fallback)")
    if time_limit is not None and not 0 < time_limit <= MAX_TIME_LIMIT_S:
        fail("--time-limit", f"must be > 0 and at most {MAX_TIME_LIMIT_S:g} seconds (got {time_limit:g})")
    if partitions not in (None, "auto") and (not partitions.isdigit() or int(partitions) < 1):
        fail("--partitions", f"a count >= 1 or auto (got '{partitions}')")
    if backend is not None:
        from optsched.engine.backends import backend_names, is_backend_name

        if not is_backend_name(backend):
            fail("--backend", f"unknown backend '{backend}' ({', '.join(backend_names())})")
    snap = parse_snapshot(read_text(snapshot, "snapshot"))
    state = ClusterState.from_snapshot(snap)
    if solver_config is not None:
        try:
            params = SolveParams.from_toml(solver_config)
        except FileNotFoundError:
            fail("--solver-config", f"no such file '{solver_config}'")
        except ValueError as exc:
            fail("--solver-config", str(exc))
        _check_preset(params, solver_config)
    else:
        params = resolve_params(snap, None)
    changes: dict[str, Any] = {}
    if backend is not None:
        changes["backend"] = backend
    if time_limit is not None:
        changes["time_limit_s"] = time_limit
    if seed is not None:
        changes["seed"] = seed
    params = params.with_(**changes)
    from optsched.engine.epoch import default_predictor
    from optsched.predict.base import Predictor

    pred: Predictor
    if predictor == "fallback":
        from optsched.predict.fallback import EstimatePredictor

        pred = EstimatePredictor()
    else:
        pred = default_predictor()  # loaded before the solve's clock starts
    # start the solver's worker process (highspy, pulp) before the clock of the solve starts
    from optsched.engine.backends import warm_up

    warm_up(params.backend)
    parts: int | str | None = partitions
    if partitions is not None and partitions != "auto":
        parts = int(partitions)
    # a partitioned solve's worker processes start and set up before the clock starts too
    start_part_workers(state, params=params, predictor=pred, partitions=parts)
    decision = solve_epoch(state, params=params, predictor=pred, partitions=parts)
    emit(decision.model_dump_json(indent=1, exclude_none=True), out)


def _check_preset(params: Any, path: Path) -> None:
    """A preset's values have the types and ranges ``SolveParams`` needs (exit 2 naming the key)."""
    from optsched.engine.backends import backend_names, is_backend_name
    from optsched.schema.limits import MAX_TIME_LIMIT_S

    where = f"--solver-config: {path}"
    if not is_backend_name(params.backend):
        fail(where, f"backend: unknown backend {params.backend!r} ({', '.join(backend_names())})")
    t = params.time_limit_s
    if isinstance(t, bool) or not isinstance(t, int | float) or not 0 < t <= MAX_TIME_LIMIT_S:
        fail(where, f"time_limit_s: a number of seconds > 0, got {t!r} (at most {MAX_TIME_LIMIT_S:g})")
    for key, low in (("seed", 0), ("num_workers", 1)):
        v = getattr(params, key)
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            fail(where, f"{key}: an integer >= {low}, got {v!r}")
    if not isinstance(params.extra, dict):
        fail(where, f"extra: a table, got {params.extra!r}")


def _snapshot_and_decision(snapshot: str, decision: str) -> tuple[ClusterState, Decision]:
    """Read and validate a snapshot and a decision (bad input exits 2 naming the field)."""
    from pydantic import ValidationError

    from optsched.engine.state import error_path, load_state
    from optsched.schema.decision import Decision

    state = load_state(read_text(snapshot, "snapshot"))
    try:
        dec = Decision.model_validate_json(read_text(decision, "decision"))
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        fail(f"decision.{error_path(tuple(err['loc']))}".rstrip("."), err["msg"])
    return state, dec


def check(
    snapshot: Annotated[str, typer.Argument(help="Snapshot JSON file.")],
    decision: Annotated[str, typer.Argument(help="Decision JSON file.")],
) -> None:
    """Check a decision against the spec's invariants (exit 1 and one line per violation)."""
    from optsched.engine.check import check_decision

    state, dec = _snapshot_and_decision(snapshot, decision)
    violations = check_decision(state, dec)
    for v in violations:
        typer.echo(str(v))
    if violations:
        raise typer.Exit(1)
    typer.echo("ok: every invariant holds")


def explain(
    snapshot: Annotated[str, typer.Argument(help="Snapshot JSON file.")],
    decision: Annotated[str, typer.Argument(help="Decision JSON file (from optsched solve).")],
    job: Annotated[str, typer.Argument(help="Id of a job of the snapshot.")],
) -> None:
    """Say in plain words what the decision does with one job and why (exit 2 if it cannot)."""
    from optsched.engine.explain import describe_job

    state, dec = _snapshot_and_decision(snapshot, decision)
    if job not in state.job_index:
        fail("job", f"unknown job '{job}': the snapshot has no such job")
    try:
        lines = describe_job(state, dec, job)
    except LookupError as exc:
        fail("decision", str(exc.args[0]))
    for line in lines:
        typer.echo(line)


def schema(
    which: Annotated[str, typer.Argument(help="snapshot or decision")],
    out: Annotated[Path | None, typer.Option("-o", "--out")] = None,
) -> None:
    """Print the JSON Schema generated from the pydantic models."""
    from pydantic import BaseModel

    from optsched.schema import Decision, Snapshot

    models: dict[str, type[BaseModel]] = {"snapshot": Snapshot, "decision": Decision}
    if which not in models:
        fail("which", f"unknown schema '{which}' (snapshot, decision)")
    check_out_file(out, "--out")
    emit(json.dumps(models[which].model_json_schema(), indent=1, sort_keys=True), out)


def generate(
    size: Annotated[str, typer.Option(help="tiny, venus, medium, large or fleet")] = "tiny",
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
    gpus: Annotated[
        int | None, typer.Option(help="fleet only: GPUs (a multiple of 8, e.g. 100000); default 10000")
    ] = None,
    out: Annotated[Path | None, typer.Option("-o", "--out")] = None,
    tree: Annotated[
        bool, typer.Option("--tree", help="Put the tenants under a quota tree (orgs -> teams -> tenants).")
    ] = False,
    elastic: Annotated[
        float, typer.Option(help="Share of jobs made elastic (min_gpus/max_gpus), 0..1.")
    ] = 0.0,
    shapes: Annotated[
        bool,
        typer.Option(
            "--shapes",
            help="Node shape in full: node CPUs, memory and a block/rack topology; jobs' per-node "
            "CPU and memory, gpus_per_node, topology requests and fractional shares.",
        ),
    ] = False,
) -> None:
    """Generate a valid random snapshot."""
    from optsched.instances import generate as gen

    if size not in ("tiny", "venus", "medium", "large", "fleet"):
        fail("--size", f"unknown size '{size}' (tiny, venus, medium, large, fleet)")
    if seed < 0:
        fail("--seed", "must be >= 0")
    if not 0.0 <= elastic <= 1.0:
        fail("--elastic", f"a share in [0, 1], got {elastic}")
    if gpus is not None and size != "fleet":
        fail("--gpus", "only --size fleet takes a GPU count")
    if gpus is not None and (gpus < 64 or gpus % 8):
        fail("--gpus", f"a fleet has a multiple of 8 GPUs, at least 64 (got {gpus})")
    if size == "fleet" and (tree or elastic or shapes):
        fail("--size", "fleet snapshots take neither --tree, --elastic nor --shapes")
    check_out_file(out, "--out")
    indent = 1 if size != "fleet" else None  # a 100,000-GPU fleet is 30 MB on one line
    snap = gen(size, seed, gpus=gpus, tree=tree, elastic=elastic, shapes=shapes)  # type: ignore[arg-type]
    emit(json.dumps(snap, indent=indent), out)


def show_versions() -> None:
    """Versions of optsched and its solvers."""
    import importlib.metadata as md

    import optsched

    typer.echo(f"optsched {optsched.__version__}")
    for pkg in ("ortools", "highspy", "pulp", "lightgbm", "pydantic", "numpy", "networkx"):
        try:
            typer.echo(f"{pkg} {md.version(pkg)}")
        except md.PackageNotFoundError:
            typer.echo(f"{pkg} not installed")


def register(app: typer.Typer) -> None:
    """Add the engine's commands to ``app``."""
    app.command()(solve)
    app.command()(check)
    app.command()(explain)
    app.command()(schema)
    app.command()(generate)
    app.command("show-versions")(show_versions)

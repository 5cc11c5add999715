"""The ``optsched`` command.

Exit codes: 0 success; 1 internal error (one line, or a traceback with ``--debug``), or a
``check`` that found violations; 2 bad input (``error: <path>: <message>`` on stderr).
Outputs are written atomically (temporary file, then rename), so a failed run leaves nothing
half-written.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from optsched.errors import BackendUnavailableError, OptschedError, SnapshotError

app = typer.Typer(
    name="optsched",
    help="Optimization-based scheduling for shared GPU fleets.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

_DEBUG = {"on": False}

PLUGINS: tuple[str, ...] = ("optsched.sim.cli", "optsched.predict.cli", "optsched.workflows.cli")


def fail(path: str, message: str) -> NoReturn:
    """Report bad input and exit 2."""
    text = f"{path}: {message}" if path else message
    typer.echo(f"error: {text}", err=True)
    raise typer.Exit(2)


def read_text(source: str) -> str:
    """Read a file, or standard input for ``-``."""
    if source == "-":
        return sys.stdin.read()
    p = Path(source)
    if not p.is_file():
        fail("", f"cannot read '{source}': no such file")
    try:
        return p.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        fail("", f"cannot read '{source}': {exc}")


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file in the same folder, then rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def emit(text: str, out: Path | None) -> None:
    if out is None:
        typer.echo(text)
    else:
        write_atomic(out, text + "\n")


@app.callback()
def _main(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks of internal errors.")] = False,
) -> None:
    _DEBUG["on"] = debug


@app.command()
def solve(
    snapshot: Annotated[str, typer.Argument(help="Snapshot JSON file, or - for stdin.")],
    out: Annotated[Path | None, typer.Option("-o", "--out", help="Write the decision here.")] = None,
    backend: Annotated[str | None, typer.Option(help="cpsat, milp or greedy.")] = None,
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
) -> None:
    """Solve one snapshot and print (or write) the decision."""
    from optsched.backends.base import SolveParams
    from optsched.epoch import resolve_params, solve_epoch
    from optsched.state import ClusterState, parse_snapshot

    snap = parse_snapshot(read_text(snapshot))
    state = ClusterState.from_snapshot(snap)
    if solver_config is not None:
        try:
            params = SolveParams.from_toml(solver_config)
        except FileNotFoundError:
            fail("--solver-config", f"no such file '{solver_config}'")
        except ValueError as exc:
            fail("--solver-config", str(exc))
    else:
        params = resolve_params(snap, None)
    changes: dict[str, Any] = {}
    if backend is not None:
        if backend not in ("cpsat", "milp", "greedy"):
            fail("--backend", f"unknown backend '{backend}' (cpsat, milp, greedy)")
        changes["backend"] = backend
    if time_limit is not None:
        if time_limit <= 0:
            fail("--time-limit", "must be > 0")
        changes["time_limit_s"] = time_limit
    if seed is not None:
        changes["seed"] = seed
    params = params.with_(**changes)
    from optsched.epoch import default_predictor
    from optsched.predict.base import Predictor

    pred: Predictor
    if predictor == "fallback":
        from optsched.predict.fallback import EstimatePredictor

        pred = EstimatePredictor()
    elif predictor == "trained":
        pred = default_predictor()  # loaded before the solve's clock starts
    else:
        fail("--predictor", f"unknown predictor '{predictor}' (trained, fallback)")
    if params.backend == "milp":
        # start the HiGHS worker process before the clock of the solve starts
        from optsched.backends.milp.backend import warm_up

        warm_up()
    decision = solve_epoch(state, params=params, predictor=pred)
    emit(decision.model_dump_json(indent=1, exclude_none=True), out)


@app.command()
def check(
    snapshot: Annotated[str, typer.Argument(help="Snapshot JSON file.")],
    decision: Annotated[str, typer.Argument(help="Decision JSON file.")],
) -> None:
    """Check a decision against the spec's invariants (exit 1 and one line per violation)."""
    from pydantic import ValidationError

    from optsched.check import check_decision
    from optsched.schema.decision import Decision
    from optsched.state import _loc_to_path, load_state

    state = load_state(read_text(snapshot))
    try:
        dec = Decision.model_validate_json(read_text(decision))
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        fail(f"decision.{_loc_to_path(tuple(err['loc']))}".rstrip("."), err["msg"])
    violations = check_decision(state, dec)
    for v in violations:
        typer.echo(str(v))
    if violations:
        raise typer.Exit(1)
    typer.echo("ok: every invariant holds")


@app.command()
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
    emit(json.dumps(models[which].model_json_schema(), indent=1, sort_keys=True), out)


@app.command()
def generate(
    size: Annotated[str, typer.Option(help="tiny, venus or large")] = "tiny",
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
    out: Annotated[Path | None, typer.Option("-o", "--out")] = None,
) -> None:
    """Generate a valid random snapshot."""
    from optsched.generate import generate as gen

    if size not in ("tiny", "venus", "large"):
        fail("--size", f"unknown size '{size}' (tiny, venus, large)")
    if seed < 0:
        fail("--seed", "must be >= 0")
    emit(json.dumps(gen(size, seed), indent=1), out)  # type: ignore[arg-type]


@app.command("show-versions")
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


for _name in PLUGINS:
    importlib.import_module(_name).register(app)


def main(argv: list[str] | None = None) -> int:
    """Entry point: maps errors to exit codes (2 bad input, 1 internal)."""
    import warnings

    def _show(message: Warning | str, category: type[Warning], *args: Any, **kwargs: Any) -> None:
        typer.echo(f"warning: {message}", err=True)

    warnings.showwarning = _show
    try:
        rc = app(args=argv, standalone_mode=False)
    except SnapshotError as exc:
        typer.echo(f"error: {exc}", err=True)
        return 2
    except (BackendUnavailableError, OptschedError) as exc:
        if _DEBUG["on"]:
            raise
        typer.echo(f"error: {exc}", err=True)
        return 1
    except typer.Exit as exc:
        return int(exc.exit_code or 0)
    except typer.Abort:
        typer.echo("aborted", err=True)
        return 1
    except Exception as exc:
        # click's own errors (usage errors exit 2) carry show() and exit_code
        show, code = getattr(exc, "show", None), getattr(exc, "exit_code", None)
        if callable(show) and isinstance(code, int):
            show()
            return code
        if _DEBUG["on"]:
            raise
        typer.echo(f"error: internal error: {type(exc).__name__}: {exc}", err=True)
        return 1
    return rc if isinstance(rc, int) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

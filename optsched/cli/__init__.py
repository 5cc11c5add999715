"""The ``optsched`` command.

Exit codes: 0 success; 1 internal error (one line, or a traceback with ``--debug``), or a
``check`` that found violations; 2 bad input (``error: <path>: <message>`` on stderr).
Outputs are written atomically (temporary file, then rename), so a failed run leaves nothing
half-written.

One module per command group, each with a ``register(app)``:

* :mod:`optsched.cli.solve` — ``solve``, ``check``, ``schema``, ``generate``, ``show-versions``;
* :mod:`optsched.cli.simulate` — ``simulate`` (the trace-driven cluster simulator);
* :mod:`optsched.cli.predictors` — ``train`` and ``predictors evaluate``;
* :mod:`optsched.cli.workflows` — ``workflows simulate|sweep-load|offline|calibrate``;
* :mod:`optsched.cli.serve` — ``serve`` (the HTTP policy service);
* :mod:`optsched.cli.slurm` — ``slurm run|demo`` (the Slurm adapter).

Importing this package stays cheap: solvers, LightGBM, pandas, matplotlib and the simulators
are imported only inside the command that needs them.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from optsched.cli import openb, predictors, serve, simulate, slurm, solve, workflows
from optsched.cli.common import DEBUG
from optsched.errors import BackendUnavailableError, OptschedError, SnapshotError

app = typer.Typer(
    name="optsched",
    help="Optimization-based scheduling for shared GPU fleets.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _main(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks of internal errors.")] = False,
) -> None:
    DEBUG["on"] = debug


for _group in (solve, simulate, predictors, workflows, serve, slurm, openb):
    _group.register(app)


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
        if DEBUG["on"]:
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
        if DEBUG["on"]:
            raise
        typer.echo(f"error: internal error: {type(exc).__name__}: {exc}", err=True)
        return 1
    return rc if isinstance(rc, int) else 0


__all__ = ["app", "main"]

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

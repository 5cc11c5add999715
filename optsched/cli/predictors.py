"""``optsched train`` and ``optsched predictors evaluate``.

:func:`register` adds both to the main Typer app. Trace paths default to
:func:`optsched.sim.paths.require_traces_dir`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from optsched.cli.common import check_out_dir, out_dir
from optsched.predict.datasets import RUNTIME_TRACES

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID

TracesOpt = Annotated[
    Path | None,
    typer.Option("--traces", help="Trace folder (default: $OPTSCHED_TRACES or ../shared/traces)."),
]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed of every random choice.")]


@contextmanager
def _progress(total: int, console: Console) -> Iterator[Progress]:
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as prog:
        yield prog


def _traces(path: Path | None) -> Path:
    from optsched.sim.paths import require_traces_dir

    try:
        found = require_traces_dir(path)
    except FileNotFoundError as exc:
        typer.echo(f"error: --traces: {exc}", err=True)
        raise typer.Exit(2) from None
    if not found.is_dir():
        typer.echo(f"error: --traces: '{found}' is not a folder", err=True)
        raise typer.Exit(2)
    return found


def train_cmd(
    traces: TracesOpt = None,
    out: Annotated[Path, typer.Option("--out", help="Models folder to write.")] = Path("models"),
    runtime_trace: Annotated[
        str, typer.Option("--runtime-trace", help=f"One of {', '.join(RUNTIME_TRACES)}.")
    ] = "venus_surrogate",
    seed: SeedOpt = 0,
) -> None:
    """Retrain the runtime, memory and interference predictors into OUT/<predictor>/v1."""
    from rich.console import Console

    from optsched.predict.retrain import train_models

    if runtime_trace not in RUNTIME_TRACES:
        typer.echo(f"error: --runtime-trace: unknown trace '{runtime_trace}'", err=True)
        raise typer.Exit(2)
    check_out_dir(out, "--out")
    tdir = _traces(traces)
    console = Console(stderr=True)
    with out_dir(out), _progress(3, console) as prog:
        task = prog.add_task("training", total=3)

        def step(msg: str) -> None:
            prog.update(task, description=f"training {msg}")

        try:
            folders = train_models(
                tdir, out, seed, runtime_trace, step=_advancing(prog, task, step)
            )
        except FileNotFoundError as exc:
            typer.echo(f"error: --traces: {exc}", err=True)
            raise typer.Exit(2) from None
    for name, folder in folders.items():
        typer.echo(f"{name}: {folder}")


def _advancing(
    prog: Progress, task: TaskID, inner: Callable[[str], None]
) -> Callable[[str], None]:
    """A step callback that also advances the bar (after the first step)."""
    started = {"n": 0}

    def step(msg: str) -> None:
        if started["n"]:
            prog.advance(task)
        started["n"] += 1
        inner(msg)

    return step


def evaluate_cmd(
    out: Annotated[Path, typer.Option("--out", help="Folder for metrics.json and plots.")],
    traces: TracesOpt = None,
    runtime_trace: Annotated[
        list[str] | None,
        typer.Option("--runtime-trace", help="Runtime trace(s) to score (default: all)."),
    ] = None,
    seed: SeedOpt = 0,
) -> None:
    """Score every predictor against its baselines; write OUT/metrics.json and PNG plots."""
    from rich.console import Console

    from optsched.predict.evaluate import evaluate_all

    names = tuple(runtime_trace) if runtime_trace else tuple(RUNTIME_TRACES)
    for n in names:
        if n not in RUNTIME_TRACES:
            typer.echo(f"error: --runtime-trace: unknown trace '{n}'", err=True)
            raise typer.Exit(2)
    check_out_dir(out, "--out")
    tdir = _traces(traces)
    console = Console(stderr=True)
    total = len(names) + 2
    with out_dir(out), _progress(total, console) as prog:
        task = prog.add_task("evaluating", total=total)

        def describe(msg: str) -> None:
            prog.update(task, description=f"evaluating {msg}")

        try:
            result = evaluate_all(tdir, out, seed, names, step=_advancing(prog, task, describe))
        except FileNotFoundError as exc:
            typer.echo(f"error: --traces: {exc}", err=True)
            raise typer.Exit(2) from None
    for name, m in result["runtime"].items():
        r = m["ratio_to_best_history"]
        typer.echo(
            f"runtime {name}: MAE {m['model']['mae']:.0f} s "
            f"({r['mae']:.2f}x best history), MAE log {m['model']['mae_log']:.3f} "
            f"({r['mae_log']:.2f}x)"
        )
    mres = result["memory"]
    typer.echo(
        f"memory: known profiles, held-out MPS pairs under-predicted "
        f"{mres['mps_pair_check']['under_rate']:.1%} (margin "
        f"{mres['margin_known_profile']:.2f}x); unknown profiles, held-out "
        f"{mres['kfold_heldout']['model']['under_rate']:.1%} (margin "
        f"{mres['margin_unknown_profile']:.2f}x)"
    )
    inter = result["interference"]
    typer.echo(
        f"interference: MAE {inter['model']['mae']:.4f} "
        f"(lucid rule {inter['baselines']['lucid_rule']['mae']:.4f}, "
        f"mean {inter['baselines']['mean']['mae']:.4f})"
    )
    typer.echo(f"wrote {out / 'metrics.json'}")


def register(app: typer.Typer) -> None:
    """Add ``train`` and the ``predictors`` group (``evaluate``) to ``app``."""
    app.command("train")(train_cmd)
    predictors = typer.Typer(help="Trained predictors: evaluation against baselines.")
    predictors.command("evaluate")(evaluate_cmd)
    app.add_typer(predictors, name="predictors")

"""``optsched openb replay``: the Alibaba openb traces under the FGD paper's protocol.

Wire it into a Typer app with :func:`register`. Every path and option is validated and every
file is read before any replay runs; a bad one exits 2 naming the option (or the file, row and
column), and nothing is written. The replay code is imported when the command runs.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from optsched.errors import SnapshotError

openb_app = typer.Typer(help="Alibaba openb traces under the FGD paper's protocol.", no_args_is_help=True)

POLICY_CHOICES = ("random", "dotprod", "clustering", "packing", "bestfit", "fgd", "optsched-1", "optsched")


def _split(values: list[str]) -> list[str]:
    return [v.strip() for value in values for v in value.split(",") if v.strip()]


@openb_app.command("replay")
def replay_cmd(
    pods: Annotated[
        list[str], typer.Option("--pods", help="Pod list CSV(.gz); repeat or comma-separate for several.")
    ],
    nodes: Annotated[str, typer.Option("--nodes", help="Node list CSV(.gz) (openb_node_list_gpu_node).")],
    out: Annotated[str, typer.Option("--out", help="Output directory (created).")],
    policies: Annotated[
        str, typer.Option("--policies", help="Comma-separated: " + ",".join(POLICY_CHOICES))
    ] = "random,dotprod,clustering,packing,bestfit,fgd,optsched",
    seeds: Annotated[
        str, typer.Option("--seeds", help="Comma-separated integer seeds (shuffle, resampling, Random).")
    ] = "0",
    ratio: Annotated[
        float, typer.Option("--ratio", help="Stop when this multiple of the GPU capacity has arrived.")
    ] = 1.3,
    order: Annotated[
        str, typer.Option("--order", help="shuffle (the paper's artifact) or trace (creation time).")
    ] = "shuffle",
    node_order: Annotated[
        str,
        typer.Option(
            "--node-order",
            help="Ties go to the first node of: shuffle (a permutation drawn with the seed, as the "
            "artifact's random node ranks) or list (the node list's order).",
        ),
    ] = "shuffle",
    batch: Annotated[int, typer.Option("--batch", help="optsched: arrivals per epoch model.")] = 32,
    work_limit: Annotated[
        float, typer.Option("--work-limit", help="optsched: CP-SAT max_deterministic_time per epoch.")
    ] = 2.0,
) -> None:
    """Replay openb pod lists for a list of policies and seeds; write the table, curves and settings."""
    pod_paths = _split(pods)
    if not pod_paths:
        raise SnapshotError("--pods", "give at least one pod list")
    for p in pod_paths:
        if not Path(p).is_file():
            raise SnapshotError("--pods", f"no such file: {p}")
    if not Path(nodes).is_file():
        raise SnapshotError("--nodes", f"no such file: {nodes}")
    out_dir = Path(out)
    if out_dir.exists() and not out_dir.is_dir():
        raise SnapshotError("--out", f"exists and is not a directory: {out}")
    names = _split([policies])
    bad = [n for n in names if n not in POLICY_CHOICES]
    if not names or bad:
        raise SnapshotError(
            "--policies", f"unknown {','.join(bad) or '(none given)'}; choose from {','.join(POLICY_CHOICES)}"
        )
    try:
        seed_list = [int(s) for s in _split([seeds])]
    except ValueError:
        raise SnapshotError("--seeds", f"not a comma-separated list of integers: {seeds!r}") from None
    if not seed_list:
        raise SnapshotError("--seeds", "give at least one seed")
    if not 0 < ratio <= 10:
        raise SnapshotError("--ratio", f"{ratio} is outside (0, 10]")
    if order not in ("shuffle", "trace"):
        raise SnapshotError("--order", f"{order!r} is not 'shuffle' or 'trace'")
    if node_order not in ("shuffle", "list"):
        raise SnapshotError("--node-order", f"{node_order!r} is not 'shuffle' or 'list'")
    if batch < 1:
        raise SnapshotError("--batch", "must be at least 1")
    if work_limit <= 0:
        raise SnapshotError("--work-limit", "must be positive")

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from optsched.sim.openb import report
    from optsched.sim.openb.protocol import arrivals
    from optsched.sim.openb.reader import read_nodes, read_pods

    node_list = read_nodes(nodes)
    traces = [(report.trace_name(p), read_pods(p)) for p in pod_paths]
    total = sum(
        len(arrivals(t, node_list.gpu_capacity_milli, ratio=ratio, order=order, seed=s))
        for _, t in traces
        for s in seed_list
    )
    total *= len(names)
    console = Console(stderr=True)
    t0 = time.perf_counter()
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as prog:
        task = prog.add_task("openb", total=total)

        def on_start(trace: str, policy: str, seed: int, n: int) -> None:
            prog.update(task, description=f"{trace} {policy} seed {seed}")

        def on_pods(n: int) -> None:
            prog.advance(task, n)

        rows, curves = report.run_all(
            node_list,
            traces,
            names,
            seed_list,
            ratio=ratio,
            order=order,
            batch=batch,
            work_limit=work_limit,
            node_order=node_order,
            on_start=on_start,
            on_pods=on_pods,
        )
    settings = {
        "pods": [Path(p).name for p in pod_paths],
        "nodes": Path(nodes).name,
        "policies": names,
        "seeds": seed_list,
        "ratio": ratio,
        "order": order,
        "batch": batch,
        "work_limit": work_limit,
        "popularity": 0.95,
        "node_order": node_order,
        "tie_break": (
            "first node of a permutation drawn with the seed (the artifact's random node ranks)"
            if node_order == "shuffle"
            else "first node in list order"
        )
        + ", random for Random",
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    written = report.write(out_dir, rows, curves, settings)
    typer.echo(report.markdown(rows))
    typer.echo(f"wrote {', '.join(str(out_dir / w) for w in written)}")


def register(app: typer.Typer) -> None:
    """Add the ``openb`` command group to ``app``."""
    app.add_typer(openb_app, name="openb")


__all__ = ["register", "replay_cmd"]

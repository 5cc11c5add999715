"""``optsched simulate``: replay a trace under several policies and seeds, side by side.

Wire it into a Typer app with :func:`register`. The simulator itself is imported when the
command runs. Writes ``DIR/summary.json``,
``DIR/summary.md``, PNG plots, and every run's event log under ``DIR/runs/``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from optsched.sim.names import POLICIES
from optsched.sim.trace import DEFAULT_QOS_DELAY_S

if TYPE_CHECKING:
    from optsched.sim.runner import RunSpec

COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("utilization", "util", "{:.3f}"),
    ("useful_utilization", "useful util", "{:.3f}"),
    ("avg_queue_delay_s", "avg queue (s)", "{:,.0f}"),
    ("p95_queue_delay_s", "p95 queue (s)", "{:,.0f}"),
    ("avg_jct_s", "avg JCT (s)", "{:,.0f}"),
    ("p95_jct_s", "p95 JCT (s)", "{:,.0f}"),
    ("qos_compliance", "QoS", "{:.3f}"),
    ("preemptions", "preempt", "{:,.0f}"),
    ("lost_gpu_hours", "lost GPU-h", "{:,.1f}"),
    ("loans_made", "loans", "{:,.0f}"),
    ("loans_reclaimed", "reclaimed", "{:,.0f}"),
    ("sim_seconds", "sim s", "{:.1f}"),
)


def markdown_table(summary: dict[str, Any]) -> str:
    """The summary as a Markdown table (means over seeds)."""
    head = "| policy | " + " | ".join(c[1] for c in COLUMNS) + " |"
    sep = "|---|" + "|".join("---:" for _ in COLUMNS) + "|"
    lines = [head, sep]
    for pol, m in summary["policies"].items():
        cells = []
        for key, _, fmt in COLUMNS:
            v = m.get(key, {}).get("mean")
            cells.append("n/a" if v is None or (isinstance(v, float) and math.isnan(v))
                         else fmt.format(v))
        lines.append(f"| {pol} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def simulate(
    trace: str = typer.Option(..., "--trace", help="'mini' (shipped), a Venus job log or an "
                              "openb pod list"),
    policies: str = typer.Option("fifo,sjf,qssf,tiresias,kueue,gandiva,lucid,optsched",
                                 "--policies", help=f"comma-separated: {', '.join(POLICIES)}"),
    seeds: str = typer.Option("0", "--seeds", help="comma-separated seeds"),
    out: Path = typer.Option(..., "--out", help="output folder"),
    epoch_s: float = typer.Option(300.0, "--epoch-s", help="epoch length (s)"),
    workers: int = typer.Option(1, "--workers", help="parallel processes"),
    trigger: bool = typer.Option(True, "--trigger/--no-trigger",
                                 help="also decide after arrivals and completions"),
    min_gap_s: float = typer.Option(60.0, "--min-gap-s",
                                    help="minimum time between triggered decisions"),
    checkpoint_s: float = typer.Option(1800.0, "--checkpoint-s"),
    restart_overhead_s: float = typer.Option(60.0, "--restart-overhead-s"),
    qos_delay_s: float = typer.Option(DEFAULT_QOS_DELAY_S, "--qos-delay-s",
                                      help="max_queue_delay_s of every tenant"),
    guarantee: str = typer.Option("quota", "--guarantee", help="quota | all | none"),
    guarantee_fraction: float = typer.Option(1.0, "--guarantee-fraction"),
    max_jobs: int | None = typer.Option(None, "--max-jobs", help="first N jobs only"),
    backend: str = typer.Option("auto", "--backend", help="optsched backend (auto: the engine's default)"),
    time_limit_s: float = typer.Option(0.2, "--time-limit-s", help="optsched time per epoch"),
    predictor: str = typer.Option("trained", "--predictor", help="trained | fallback | oracle"),
    oracle_runtime: bool = typer.Option(False, "--oracle-runtime",
                                        help="snapshots carry TRUE runtimes (oracle mode)"),
    plots: bool = typer.Option(True, "--plots/--no-plots"),
    lucid_dir: Path | None = typer.Option(
        None, "--lucid-dir", help="folder with Lucid's single_data.csv and colocate_info.csv "
        "(default: lucid_venus/ on the traces path; else the synthetic interference model)"),
    ray: str | None = typer.Option(
        None, "--ray", help="run every (policy, seed) as a Ray task: 'local' starts Ray here, "
        "else a cluster address ('auto', 'ray://head:10001'); needs the 'ray' extra"),
    retries: int = typer.Option(2, "--retries", help="retries of a failed replay (--ray)"),
) -> None:
    """Replay a trace under several policies and seeds; write summary.json, the summary.md
    report (optsched.sim.report), plots."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from optsched.sim.cluster import SimConfig
    from optsched.sim.report import write_report
    from optsched.sim.runner import RunSpec, clean, load_log, run_dir, run_many
    from optsched.sim.trace import GuaranteeRule

    pols = [p.strip() for p in policies.split(",") if p.strip()]
    for p in pols:
        if p not in POLICIES:
            raise typer.BadParameter(f"unknown policy '{p}' (choose from {', '.join(POLICIES)})")
    seed_list = [int(s) for s in seeds.split(",") if s.strip()]
    if guarantee not in ("quota", "all", "none"):
        raise typer.BadParameter("--guarantee must be quota, all or none")
    cfg = SimConfig(epoch_s=epoch_s, trigger=trigger, min_gap_s=min_gap_s,
                    checkpoint_s=checkpoint_s, restart_overhead_s=restart_overhead_s,
                    oracle_runtime=oracle_runtime)
    rule = GuaranteeRule(mode=guarantee, fraction=guarantee_fraction)  # type: ignore[arg-type]
    opts = {"backend": backend, "time_limit_s": time_limit_s, "predictor": predictor}
    specs = [
        RunSpec(trace=trace, policy=p, seed=s, config=cfg,
                policy_options=opts if p == "optsched" else {}, qos_delay_s=qos_delay_s,
                guarantee=rule, max_jobs=max_jobs,
                lucid_dir=str(lucid_dir) if lucid_dir is not None else None)
        for p in pols for s in seed_list
    ]
    out.mkdir(parents=True, exist_ok=True)
    with Progress(TextColumn("{task.description}"), BarColumn(),
                  TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn()) as prog:
        task = prog.add_task("simulating", total=len(specs))

        def done(spec: RunSpec, m: dict[str, float]) -> None:
            prog.update(task, advance=1,
                        description=f"{spec.policy} seed {spec.seed}: {m['sim_seconds']:.0f}s")

        failures: list[Any] = []
        if ray is not None:
            from optsched.sim.sweep import run_specs

            def fail(spec: RunSpec, err: str) -> None:
                prog.console.print(f"[red]FAILED[/red] {spec.policy} seed {spec.seed}: {err}")

            summary, failures = run_specs(specs, out, ray_address=ray, use_ray=True, retries=retries,
                                          on_done=done, on_fail=fail)
        else:
            summary = run_many(specs, out=out, workers=workers, on_done=done)
    summary["command"] = {
        "trace": trace, "policies": pols, "seeds": seed_list, "epoch_s": epoch_s,
        "workers": workers, "optsched": opts, "lucid_dir": str(lucid_dir) if lucid_dir else None,
    }
    (out / "summary.json").write_text(json.dumps(clean(summary), indent=1))
    table = markdown_table(summary)
    write_report(summary, out / "summary.md")
    typer.echo(f"interference: {summary['interference']}")
    typer.echo(table)
    if plots:
        from optsched.sim.plots import plot_all

        logs = {p: load_log(run_dir(out, p, seed_list[0])) for p in pols
                if (run_dir(out, p, seed_list[0]) / "meta.json").exists()}
        for path in plot_all(logs, out):
            typer.echo(f"wrote {path}")
    typer.echo(f"wrote {out / 'summary.json'}")
    if failures:
        typer.echo(f"{len(failures)} replay(s) failed after {retries} retries; the summary leaves them out",
                   err=True)
        raise typer.Exit(1)


def sweep(
    spec: Path = typer.Argument(..., help="TOML study: traces, policies, seeds, [settings.NAME]"),
    out: Path = typer.Option(..., "--out", help="output folder"),
    ray: str | None = typer.Option(
        None, "--ray", help="run the replays as Ray tasks: 'local' or a cluster address"),
    workers: int = typer.Option(1, "--workers", help="parallel processes (without --ray)"),
    retries: int = typer.Option(2, "--retries", help="retries of a failed replay"),
) -> None:
    """Run a whole study (traces x settings x policies x seeds) in one pool; one simulate-style
    folder per (trace, setting) and sweep.json (optsched.sim.sweep)."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from optsched.sim.sweep import SweepSpec, run_sweep

    try:
        study = SweepSpec.load(spec)
    except (OSError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    total = len(study.traces) * len(study.settings) * len(study.policies) * len(study.seeds)
    with Progress(TextColumn("{task.description}"), BarColumn(),
                  TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn()) as prog:
        task = prog.add_task("sweep", total=total)

        def done(key: tuple[str, str, RunSpec], m: dict[str, float]) -> None:
            prog.update(task, advance=1, description=f"{key[1]} {key[2].policy} seed {key[2].seed}")

        def fail(key: tuple[str, str, RunSpec], err: str) -> None:
            prog.update(task, advance=1)
            prog.console.print(
                f"[red]FAILED[/red] {key[0]} {key[1]} {key[2].policy} seed {key[2].seed}: {err}")

        index, failures = run_sweep(study, out, ray_address=ray, use_ray=ray is not None,
                                    workers=workers, retries=retries, on_done=done, on_fail=fail)
    for g in index["groups"]:
        typer.echo(f"{g['trace']} / {g['setting']}: {g['runs']}/{g['of']} runs -> {out / g['folder']}")
    typer.echo(f"wrote {out / 'sweep.json'}")
    if failures:
        typer.echo(f"{len(failures)} replay(s) failed after {retries} retries", err=True)
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add the ``simulate`` and ``sweep`` commands to ``app``."""
    app.command("simulate")(simulate)
    app.command("sweep")(sweep)


__all__ = ["markdown_table", "register", "simulate", "sweep"]

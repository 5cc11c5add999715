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

from optsched.cli.common import (
    check_input_dir,
    check_input_file,
    check_out_dir,
    fail,
    out_dir,
    parse_ints,
    require,
    write_atomic,
)
from optsched.sim.names import POLICIES
from optsched.sim.trace import DEFAULT_QOS_DELAY_S, check_trace

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
    policies: str = typer.Option("fifo,sjf,qssf,tiresias,kueue,gandiva,lucid,antman,optsched",
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
    lookahead_epochs: int | None = typer.Option(
        None, "--lookahead-epochs", help="optsched look-ahead horizon in epochs (0: off; default 6)"),
    reserve_min_gpus: int | None = typer.Option(
        None, "--reserve-min-gpus", help="smallest gang optsched reserves GPUs for (default 33)"),
    oracle_runtime: bool = typer.Option(False, "--oracle-runtime",
                                        help="snapshots carry TRUE runtimes (oracle mode)"),
    plots: bool = typer.Option(True, "--plots/--no-plots"),
    lucid_dir: Path | None = typer.Option(
        None, "--lucid-dir", help="folder with Lucid's single_data.csv and colocate_info.csv "
        "(default: lucid_venus/ on the traces path; else the synthetic interference model)"),
    events: bool = typer.Option(
        True, "--events/--no-events",
        help="decide at every arrival and completion (optsched: the event path between "
        "epochs, the full model every epoch); --no-events: epoch ticks and --trigger only"),
    mode: str = typer.Option(
        "pooled", "--mode", help="pooled (idle quota is lent, never reclaimed by the "
        "baselines) | partitioned (each tenant's quota is a hard partition: no loans) | both "
        "(side by side, in DIR/pooled and DIR/partitioned) | native (each policy in the "
        "setting its system runs in: Lucid-like partitioned, the others pooled; with "
        "DeepShare's headline numbers against Lucid-like)"),
    load_scale: float = typer.Option(
        1.0, "--load-scale", help="time-compress arrivals by this factor (offered load × X)"),
    ray: str | None = typer.Option(
        None, "--ray", help="run every (policy, seed) as a Ray task: 'local' starts Ray here, "
        "else a cluster address ('auto', 'ray://head:10001'); needs the 'ray' extra"),
    retries: int = typer.Option(2, "--retries", help="retries of a failed replay (--ray)"),
) -> None:
    """Replay a trace under several policies and seeds; write summary.json, the summary.md
    report (optsched.sim.report), plots."""
    from optsched.schema.limits import MAX_TIME_LIMIT_S
    from optsched.sim.cluster import SimConfig
    from optsched.sim.native import native_mode
    from optsched.sim.runner import RunSpec, clean
    from optsched.sim.trace import GuaranteeRule

    # every option and path is checked before anything is read, created or replayed
    pols = [p.strip() for p in policies.split(",") if p.strip()]
    for p in pols:
        if p not in POLICIES:
            fail("--policies", f"unknown policy '{p}' (choose from {', '.join(POLICIES)})")
    require(bool(pols), "--policies", "give at least one policy")
    seed_list = parse_ints(seeds, "--seeds")
    if guarantee not in ("quota", "all", "none"):
        fail("--guarantee", f"'{guarantee}': must be quota, all or none")
    if mode not in ("pooled", "partitioned", "both", "native"):
        fail("--mode", f"'{mode}': must be pooled, partitioned, both or native")
    if not load_scale > 0 or math.isinf(load_scale):
        fail("--load-scale", "must be a positive number")
    _positive(epoch_s, "--epoch-s")
    _positive(time_limit_s, "--time-limit-s")
    require(time_limit_s <= MAX_TIME_LIMIT_S, "--time-limit-s", f"at most {MAX_TIME_LIMIT_S:g} seconds")
    _positive(qos_delay_s, "--qos-delay-s")
    for value, name in ((min_gap_s, "--min-gap-s"), (checkpoint_s, "--checkpoint-s"),
                        (restart_overhead_s, "--restart-overhead-s")):
        require(value >= 0 and not math.isinf(value), name, "must be a number >= 0")
    require(0.0 <= guarantee_fraction <= 1.0, "--guarantee-fraction", "a share in [0, 1]")
    require(workers >= 1, "--workers", "must be >= 1")
    require(retries >= 0, "--retries", "must be >= 0")
    require(max_jobs is None or max_jobs >= 1, "--max-jobs", "must be >= 1")
    require(lookahead_epochs is None or lookahead_epochs >= 0, "--lookahead-epochs", "must be >= 0")
    require(reserve_min_gpus is None or reserve_min_gpus >= 1, "--reserve-min-gpus", "must be >= 1")
    if predictor not in ("trained", "fallback", "oracle"):
        fail("--predictor", f"unknown predictor '{predictor}' (trained, fallback, oracle)")
    from optsched.engine.backends import backend_names, is_backend_name

    if not is_backend_name(backend):
        fail("--backend", f"unknown backend '{backend}' ({', '.join(backend_names())})")
    if lucid_dir is not None:
        from optsched.sim.profiles import LUCID_FILES, is_lucid_dir

        check_input_dir(lucid_dir, "--lucid-dir")
        require(is_lucid_dir(lucid_dir), "--lucid-dir", f"'{lucid_dir}' lacks {' or '.join(LUCID_FILES)}")
    try:
        check_trace(trace)
    except (OSError, ValueError) as exc:
        fail("--trace", str(exc))
    rule = GuaranteeRule(mode=guarantee, fraction=guarantee_fraction)  # type: ignore[arg-type]
    if trace != "mini":
        _read_trace(trace, qos_delay_s=qos_delay_s, guarantee=rule, max_jobs=max_jobs,
                    lucid_dir=lucid_dir, load_scale=load_scale)
    check_out_dir(out, "--out")
    modes = ["pooled", "partitioned"] if mode == "both" else [mode]
    opts: dict[str, Any] = {"backend": backend, "time_limit_s": time_limit_s, "predictor": predictor}
    if lookahead_epochs is not None:
        opts["lookahead_epochs"] = lookahead_epochs
    if reserve_min_gpus is not None:
        opts["reserve_min_gpus"] = reserve_min_gpus
    summaries: dict[str, dict[str, Any]] = {}
    with out_dir(out):  # removed again should the run fail, when this command created it
        for m in modes:
            def config(policy: str, m: str = m) -> SimConfig:
                return SimConfig(epoch_s=epoch_s, trigger=trigger, min_gap_s=min_gap_s,
                                 checkpoint_s=checkpoint_s, restart_overhead_s=restart_overhead_s,
                                 oracle_runtime=oracle_runtime, events=events,
                                 mode=native_mode(policy) if m == "native" else m,
                                 load_scale=load_scale)

            specs = [
                RunSpec(trace=trace, policy=p, seed=s, config=config(p),
                        policy_options=opts if p == "optsched" else {}, qos_delay_s=qos_delay_s,
                        guarantee=rule, max_jobs=max_jobs,
                        lucid_dir=str(lucid_dir) if lucid_dir is not None else None)
                for p in pols for s in seed_list
            ]
            where = out if len(modes) == 1 else out / m
            if len(modes) > 1:
                typer.echo(f"mode {m}:")
            summaries[m] = _run_mode(specs, where, trace=trace, pols=pols, seed_list=seed_list,
                                     epoch_s=epoch_s, workers=workers, opts=opts,
                                     lucid_dir=lucid_dir, plots=plots, ray=ray, retries=retries,
                                     native=m == "native")
        if len(modes) > 1:
            write_atomic(out / "summary.json", json.dumps(clean({"modes": summaries}), indent=1))
            text = side_by_side(summaries)
            write_atomic(out / "summary.md", text)
            typer.echo(text)
            typer.echo(f"wrote {out / 'summary.json'}")


def _read_trace(trace: str, option: str = "--trace", **kwargs: Any) -> None:
    """Read a user's trace once, rows and all, before any replay: a row the reader cannot parse
    is an error naming ``--trace`` (exit 2), not a failure in every replay."""
    import logging

    from optsched.sim.trace import load_trace

    quiet = logging.getLogger("optsched.sim")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # each replay logs the trace's fallbacks itself
    try:
        tr = load_trace(trace, **kwargs)
    except (OSError, ValueError, KeyError, IndexError, EOFError) as exc:
        what = f"missing column {exc}" if isinstance(exc, KeyError) else str(exc)
        fail(option, f"cannot read '{trace}': {what}")
    finally:
        quiet.setLevel(level)
    if not tr.jobs:
        notes = "; ".join(n for n in tr.notes if n.startswith(("skipped", "dropped")))
        fail(option, f"'{trace}' has no job to replay ({notes or 'no rows'})")


def _positive(value: float, option: str) -> None:
    require(value > 0 and not math.isinf(value), option, "must be a positive number")


def side_by_side(summaries: dict[str, dict[str, Any]]) -> str:
    """One table per metric group: a row per policy, a column per (metric, mode)."""
    modes = list(summaries)
    keys = [
        ("avg_queue_delay_s", "avg queue (s)", "{:,.0f}"),
        ("p95_queue_delay_s", "p95 queue (s)", "{:,.0f}"),
        ("avg_jct_s", "avg JCT (s)", "{:,.0f}"),
        ("p95_jct_s", "p95 JCT (s)", "{:,.0f}"),
        ("qos_compliance", "QoS", "{:.3f}"),
        ("utilization", "util", "{:.3f}"),
        ("useful_utilization", "useful util", "{:.3f}"),
        ("throughput_jobs_per_h", "jobs/h", "{:,.1f}"),
        ("makespan_s", "makespan (s)", "{:,.0f}"),
        ("lost_gpu_hours", "lost GPU-h", "{:,.1f}"),
    ]
    head = "| policy | " + " | ".join(f"{label} {m}" for _, label, _ in keys for m in modes) + " |"
    sep = "|---|" + "|".join("---:" for _ in keys for _ in modes) + "|"
    lines = ["# Pooled and partitioned side by side (means over seeds)", "", head, sep]
    pols: list[str] = []
    for s in summaries.values():
        pols += [p for p in s["policies"] if p not in pols]
    for pol in pols:
        cells = []
        for key, _, fmt in keys:
            for m in modes:
                v = summaries[m]["policies"].get(pol, {}).get(key, {}).get("mean")
                cells.append("n/a" if v is None or (isinstance(v, float) and math.isnan(v))
                             else fmt.format(v))
        lines.append(f"| {pol} | " + " | ".join(cells) + " |")
    lines += ["", "Each mode's full report: `pooled/summary.md`, `partitioned/summary.md`.", ""]
    return "\n".join(lines)


def _run_mode(specs: list[RunSpec], out: Path, *, trace: str, pols: list[str],
              seed_list: list[int], epoch_s: float, workers: int, opts: dict[str, Any],
              lucid_dir: Path | None, plots: bool, ray: str | None = None,
              retries: int = 2, native: bool = False) -> dict[str, Any]:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from optsched.sim.report import write_report
    from optsched.sim.runner import clean, load_log, run_dir, run_many

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

            def failed(spec: RunSpec, err: str) -> None:
                prog.console.print(f"[red]FAILED[/red] {spec.policy} seed {spec.seed}: {err}")

            summary, failures = run_specs(specs, out, ray_address=ray, use_ray=True, retries=retries,
                                          on_done=done, on_fail=failed)
        else:
            summary = run_many(specs, out=out, workers=workers, on_done=done)
    cfg = specs[0].config if specs else None
    summary["command"] = {
        "trace": trace, "policies": pols, "seeds": seed_list, "epoch_s": epoch_s,
        "workers": workers, "optsched": opts, "lucid_dir": str(lucid_dir) if lucid_dir else None,
        "events": cfg.events if cfg else None, "mode": cfg.mode if cfg else None,
        "load_scale": cfg.load_scale if cfg else None,
    }
    if native:
        from optsched.sim.native import deepshare_headline, native_mode

        summary["command"]["mode"] = "native"
        if "config" in summary:
            summary["config"]["mode"] = "native"
        summary["native_modes"] = {p: native_mode(p) for p in pols}
        summary["deepshare"] = deepshare_headline(summary)
    write_atomic(out / "summary.json", json.dumps(clean(summary), indent=1))
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
    return summary


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

    check_input_file(spec, "spec")
    require(workers >= 1, "--workers", "must be >= 1")
    require(retries >= 0, "--retries", "must be >= 0")
    try:
        study = SweepSpec.load(spec)
    except (OSError, ValueError) as exc:
        fail("spec", str(exc))
    for k, tr in enumerate(study.traces):
        try:
            check_trace(tr)
        except (OSError, ValueError) as exc:
            fail("spec", f"traces.{k}: {exc}")
        if tr != "mini":
            _read_trace(tr, option=f"spec: traces.{k}")
    check_out_dir(out, "--out")
    total = len(study.traces) * len(study.settings) * len(study.policies) * len(study.seeds)
    with Progress(TextColumn("{task.description}"), BarColumn(),
                  TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn()) as prog:
        task = prog.add_task("sweep", total=total)

        def done(key: tuple[str, str, RunSpec], m: dict[str, float]) -> None:
            prog.update(task, advance=1, description=f"{key[1]} {key[2].policy} seed {key[2].seed}")

        def failed(key: tuple[str, str, RunSpec], err: str) -> None:
            prog.update(task, advance=1)
            prog.console.print(
                f"[red]FAILED[/red] {key[0]} {key[1]} {key[2].policy} seed {key[2].seed}: {err}")

        with out_dir(out):
            index, failures = run_sweep(study, out, ray_address=ray, use_ray=ray is not None,
                                        workers=workers, retries=retries, on_done=done,
                                        on_fail=failed)
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


__all__ = ["markdown_table", "register", "side_by_side", "simulate", "sweep"]

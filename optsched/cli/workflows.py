"""``optsched workflows ...`` commands: ``simulate``, ``sweep-load``, ``offline``, ``calibrate``,
``joint``.

Wire with :func:`register` (adds the ``workflows`` sub-command to the main Typer app). The
planner, the simulator and the solvers are imported when a command runs.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from optsched.cli.common import (
    check_out_dir,
    check_out_file,
    fail,
    out_dir,
    parse_floats,
    parse_ints,
    require,
    write_atomic,
)
from optsched.sim.workflows.names import ALL_POLICIES, ARRIVALS, SCENARIOS

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

    from optsched.sim.workflows.experiment import Experiment

app = typer.Typer(
    help="Multi-agent LLM workflow planning: simulate, compare, calibrate.", no_args_is_help=True
)


@functools.cache
def _console() -> Console:
    from rich.console import Console

    return Console()


def register(main: typer.Typer) -> None:
    """Add the ``workflows`` sub-command group to ``main``."""
    main.add_typer(app, name="workflows")


def _ints(text: str, option: str = "--seeds") -> list[int]:
    return parse_ints(text, option)


def _names(text: str, option: str = "--policies") -> list[str]:
    names = [x.strip() for x in text.split(",") if x.strip()]
    for n in names:
        if n not in ALL_POLICIES:
            fail(option, f"unknown policy '{n}'; choose from {', '.join(ALL_POLICIES)}")
    if not names:
        fail(option, "give at least one policy")
    return names


def _traces_dir(traces: Path | None) -> Path:
    from optsched.sim.paths import require_traces_dir

    try:
        found = require_traces_dir(traces)
    except FileNotFoundError as exc:
        fail("--traces", str(exc))
    if not found.is_dir():
        fail("--traces", f"'{found}' is not a folder")
    return found


def _experiment(
    scenario: str,
    arrivals: str,
    policies: str,
    seeds: str,
    sessions: int,
    window_s: float,
    traces: Path | None,
    loader: str,
    load_speedup: float,
    planner_time_s: float,
    epoch_s: float,
    window: int,
) -> Experiment:
    if scenario not in SCENARIOS:
        fail("--scenario", f"unknown scenario '{scenario}'; choose from {', '.join(SCENARIOS)}")
    if arrivals not in ARRIVALS:
        fail("--arrivals", f"unknown arrivals '{arrivals}'; choose from {', '.join(ARRIVALS)}")
    require(sessions >= 1, "--sessions", "must be >= 1")
    require(window_s > 0, "--window-s", "must be > 0")
    require(load_speedup > 0, "--load-speedup", "must be > 0")
    require(epoch_s > 0, "--epoch-s", "must be > 0")
    require(planner_time_s > 0, "--planner-time-s", "must be > 0")
    require(window >= 1, "--window", "must be >= 1")
    require(loader in ("safetensors", "sllm"), "--loader", f"unknown loader '{loader}' (safetensors, sllm)")
    if planner_time_s >= epoch_s:
        fail("--planner-time-s", "must be below --epoch-s")
    names, seed_list = _names(policies), _ints(seeds)
    from optsched.engine.workflows.planner import PlannerConfig
    from optsched.sim.workflows.experiment import Experiment
    from optsched.sim.workflows.sim import WorkflowSimConfig

    if arrivals == "azure-code":
        traces = _traces_dir(traces)
    return Experiment(
        scenario=scenario,
        arrivals=arrivals,
        policies=names,
        seeds=seed_list,
        sessions=sessions,
        window_s=window_s,
        traces=traces,
        sim=WorkflowSimConfig(
            epoch_s=epoch_s, loader=loader, load_speedup=load_speedup, planner_time_s=planner_time_s
        ),
        planner=PlannerConfig(window=window),
    )


def _progress() -> Progress:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=_console(),
    )


SCEN = typer.Option("mixed", help=f"one of {', '.join(SCENARIOS)}")
ARR = typer.Option("azure-code", help=f"one of {', '.join(ARRIVALS)}")
POL = typer.Option(",".join(ALL_POLICIES), help="comma-separated policies")
SEEDS = typer.Option("0,1,2,3,4", help="comma-separated seeds")
OUT = typer.Option(..., help="output folder")
SESS = typer.Option(40, help="sessions per seed")
WIN = typer.Option(120.0, help="length of the arrival window replayed (s)")
TRACES = typer.Option(None, help="traces folder (default: $OPTSCHED_TRACES or ../shared/traces)")
LOADER = typer.Option("safetensors", help="loader format: safetensors or sllm")
SPEED = typer.Option(1.0, help="loading bandwidth multiplier")
PLT = typer.Option(1.0, help="planner time limit per epoch (s)")
EPOCH = typer.Option(2.0, help="re-planning period (s)")
WINDOW = typer.Option(24, help="activations CP-SAT optimises per epoch")


@app.command()
def simulate(
    scenario: str = SCEN,
    arrivals: str = ARR,
    policies: str = POL,
    seeds: str = SEEDS,
    out: Path = OUT,
    sessions: int = SESS,
    window_s: float = WIN,
    traces: Path | None = TRACES,
    loader: str = LOADER,
    load_speedup: float = SPEED,
    planner_time_s: float = PLT,
    epoch_s: float = EPOCH,
    window: int = WINDOW,
    ray: str | None = typer.Option(
        None, "--ray", help="run every (policy, seed) as a Ray task: 'local' or a cluster address"
    ),
) -> None:
    """Simulate policies x seeds; write summary.json, summary.md and PNG plots to OUT."""
    from optsched.sim.workflows.experiment import run_experiment, write_outputs

    exp = _experiment(
        scenario,
        arrivals,
        policies,
        seeds,
        sessions,
        window_s,
        traces,
        loader,
        load_speedup,
        planner_time_s,
        epoch_s,
        window,
    )
    check_out_dir(out, "--out")
    with _progress() as prog:
        task = prog.add_task("simulating", total=len(exp.policies) * len(exp.seeds))
        if ray is not None:
            from optsched.sim.sweep import run_workflow_experiment

            summary, results, failures = run_workflow_experiment(
                exp, lambda msg: prog.update(task, advance=1, description=msg), ray_address=ray
            )
            if failures:
                for f in failures:
                    _console().print(f"[red]FAILED[/red] {f.key[0]} seed {f.key[1]}: {f.error}")
                raise typer.Exit(1)
        else:
            summary, results = run_experiment(exp, lambda msg: prog.update(task, advance=1, description=msg))
    with out_dir(out):
        paths = write_outputs(summary, results, out)
    _console().print((out / "summary.md").read_text())
    for p in paths:
        _console().print(f"wrote {p}")


@app.command("sweep-load")
def sweep_load(
    scenario: str = SCEN,
    arrivals: str = ARR,
    policies: str = typer.Option("heft,autellix,cpsat"),
    seeds: str = SEEDS,
    out: Path = OUT,
    sessions: int = SESS,
    window_s: float = WIN,
    traces: Path | None = TRACES,
    loader: str = LOADER,
    speedups: str = typer.Option("20,6,1,0.33", help="bandwidth multipliers"),
    planner_time_s: float = PLT,
    epoch_s: float = EPOCH,
    window: int = WINDOW,
) -> None:
    """The comparison at several model-loading times (sub-second to tens of seconds)."""
    from optsched.sim.workflows.experiment import load_sweep, sweep_markdown

    exp = _experiment(
        scenario,
        arrivals,
        policies,
        seeds,
        sessions,
        window_s,
        traces,
        loader,
        1.0,
        planner_time_s,
        epoch_s,
        window,
    )
    sp = parse_floats(speedups, "--speedups")
    check_out_dir(out, "--out")
    with _progress() as prog:
        task = prog.add_task("sweep", total=len(sp) * len(exp.policies) * len(exp.seeds))
        sweep = load_sweep(exp, sp, lambda msg: prog.update(task, advance=1, description=msg))
    with out_dir(out):
        write_atomic(out / "load_sweep.json", json.dumps(sweep, indent=1) + "\n")
        write_atomic(out / "load_sweep.md", sweep_markdown(sweep))
    _console().print(sweep_markdown(sweep))


@app.command()
def offline(
    scenario: str = SCEN,
    sessions: int = typer.Option(6),
    window_s: float = typer.Option(30.0),
    seeds: str = typer.Option("0,1,2"),
    policies: str = typer.Option("heft,autellix,greedy,cpsat"),
    time_limit_s: float = typer.Option(30.0),
) -> None:
    """Small noise-free cases: each policy's makespan against the CP-SAT offline optimum."""
    from optsched.sim.workflows.baselines import get_policy
    from optsched.sim.workflows.offline import offline_bound
    from optsched.sim.workflows.sim import WorkflowSimConfig, WorkflowSimulator
    from optsched.sim.workflows.workloads import arrivals as make_arrivals
    from optsched.sim.workflows.workloads import make_sessions

    if scenario not in SCENARIOS:
        fail("--scenario", f"unknown scenario '{scenario}'; choose from {', '.join(SCENARIOS)}")
    require(sessions >= 1, "--sessions", "must be >= 1")
    require(window_s > 0, "--window-s", "must be > 0")
    require(time_limit_s > 0, "--time-limit-s", "must be > 0")
    names, seed_list = _names(policies), _ints(seeds)
    cfg = WorkflowSimConfig(
        type_sigma=0.0, unit_sigma=0.0, load_sigma=0.0, pool=(("h100", 1), ("a100", 1), ("l40s", 1))
    )
    _console().print("| seed | offline best | offline bound | " + " | ".join(names) + " |")
    _console().print("|---" * (3 + len(names)) + "|")
    for seed in seed_list:
        ss = make_sessions(scenario, list(make_arrivals("bursty", sessions, window_s, seed)), seed)
        ob = offline_bound(ss, config=cfg, time_limit_s=time_limit_s, seed=seed)
        mks = [
            WorkflowSimulator(ss, get_policy(n), name=n, seed=seed, config=cfg).run().makespan_s
            for n in names
        ]
        cells = " | ".join(f"{m:.1f} ({m / ob.bound_s:.3f})" for m in mks)
        _console().print(f"| {seed} | {ob.makespan_s:.1f} | {ob.bound_s:.1f} | {cells} |")


@app.command()
def joint(
    out: Path = OUT,
    seeds: str = typer.Option("0,1,2", help="comma-separated seeds"),
    policies: str = typer.Option("greedy,cpsat", help="policies run on the fixed split and the joint pool"),
    baselines: str = typer.Option("heft,peft,sllm,autellix", help="baselines run on the fixed split"),
    sessions: int = SESS,
    window_s: float = WIN,
    traces: Path | None = TRACES,
    planner_time_s: float = typer.Option(0.5, help="planner time limit per epoch (s)"),
    train_t0_s: float = typer.Option(122400.0, help="mini-trace time aligned with the first session (s)"),
    horizon_s: float = typer.Option(600.0, help="training metrics window after the first session (s)"),
    cluster_epoch_s: float = typer.Option(10.0, help="period of the joint solve_epoch call (s)"),
    lending: str = typer.Option("{}", help="extra pool_lending fields as JSON, e.g. '{\"max_size\": 16}'"),
) -> None:
    """Joint serving pool vs fixed split: mini-trace training load plus Azure-code bursts."""
    from optsched.sim.workflows.joint import (
        JointConfig,
        JointExperiment,
        joint_markdown,
        run_joint_experiment,
    )

    names = _names(policies)
    base = _names(baselines, "--baselines")
    seed_list = _ints(seeds)
    require(sessions >= 1, "--sessions", "must be >= 1")
    require(window_s > 0, "--window-s", "must be > 0")
    require(planner_time_s > 0, "--planner-time-s", "must be > 0")
    require(horizon_s > 0, "--horizon-s", "must be > 0")
    require(cluster_epoch_s > 0, "--cluster-epoch-s", "must be > 0")
    try:
        extra = json.loads(lending)
    except json.JSONDecodeError as exc:
        fail("--lending", f"not JSON: {exc}")
    if not isinstance(extra, dict):
        fail("--lending", "must be a JSON object, e.g. '{\"max_size\": 16}'")
    check_out_dir(out, "--out")
    traces = _traces_dir(traces)
    exp = JointExperiment(
        seeds=tuple(seed_list),
        policies=tuple(names),
        baselines=tuple(base),
        sessions=sessions,
        window_s=window_s,
        traces=traces,
        planner_time_s=planner_time_s,
        joint=JointConfig(
            train_t0_s=train_t0_s, horizon_s=horizon_s, cluster_epoch_s=cluster_epoch_s, lending=extra
        ),
    )
    n = len(exp.seeds) * (len(exp.baselines) + 2 * len(exp.policies))
    with _progress() as prog:
        task = prog.add_task("simulating", total=n)
        summary = run_joint_experiment(exp, lambda msg: prog.update(task, advance=1, description=msg))
    with out_dir(out):
        write_atomic(out / "summary.json", json.dumps(summary, indent=1, default=str))
        write_atomic(out / "summary.md", joint_markdown(summary))
    _console().print((out / "summary.md").read_text())
    _console().print(f"wrote {out / 'summary.json'} and {out / 'summary.md'}")


@app.command()
def tradeoff(
    runs: list[Path] = typer.Argument(..., help="folders written by `optsched workflows joint`"),
    out: Path = OUT,
    labels: str = typer.Option("", help="comma-separated label per run (default: its --lending settings)"),
) -> None:
    """GPU-seconds saved per session against makespan, one point per arm/policy of each joint
    run (labelled by its `--lending` settings or `--labels`): writes tradeoff.md and tradeoff.png."""
    names = [x.strip() for x in labels.split(",")] if labels else []
    if names and len(names) != len(runs):
        fail("--labels", f"{len(names)} label(s) for {len(runs)} run(s)")
    check_out_dir(out, "--out")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows: list[dict[str, Any]] = []
    for k, run in enumerate(runs):
        path = run / "summary.json"
        if not path.is_file():
            fail("runs", f"'{run}' holds no summary.json of `optsched workflows joint`")
        try:
            summary = json.loads(path.read_text())
            lending = summary["joint"]["lending"]
            means, targets, n = summary["means"], summary["targets"], summary["sessions_per_seed"]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            fail("runs", f"'{path}' is not a joint summary: {exc}")
        label = names[k] if names else ", ".join(f"{x}={v}" for x, v in sorted(lending.items())) or "defaults"
        for arm, t in targets.items():
            if not isinstance(t, dict) or arm not in means:
                continue
            m = means[arm]
            rows.append({
                "label": label if arm.startswith("joint/") or names else "fixed pool",
                "arm": arm,
                "makespan_s": m["makespan_s"],
                "p95_s": m["p95_latency_s"],
                "gpu_s": m["gpu_s_per_session"],
                "parts": (m["compute_s"], m["loading_s"], m["idle_s"]),
                "saved": t["gpu_s_saved"],
                "ratio": t["makespan_ratio"],
                "lent": m.get("pool_lent_gpu_s", 0.0) / n,
                "max_pool": m.get("pool_max_pool_gpus", 0.0),
            })
    seen: set[tuple[str, str, float]] = set()
    uniq = []
    for r in rows:  # a fixed arm measured alike in several runs: once
        key = (r["arm"], round(r["makespan_s"], 6), round(r["gpu_s"], 6))
        if key not in seen:
            seen.add(key)
            uniq.append(r)
    uniq.sort(key=lambda r: (r["arm"], r["makespan_s"]))
    lines = [
        "| arm / policy | lending | makespan s (ratio) | p95 s | GPU-s/session (compute+load+idle) "
        "| saved vs best baseline | lent GPU-s/session | max pool |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in uniq:
        c, lo, i = r["parts"]
        lines.append(
            f"| {r['arm']} | {r['label']} | {r['makespan_s']:.1f} ({r['ratio']:.3f}) | {r['p95_s']:.1f} "
            f"| {r['gpu_s']:.1f} ({c:.1f}+{lo:.1f}+{i:.1f}) | {r['saved']:.1f} | {r['lent']:.1f} "
            f"| {r['max_pool']:.1f} |"
        )
    fig, ax = plt.subplots(figsize=(8.0, 4.8))
    at: dict[tuple[float, float], list[str]] = {}
    for r in uniq:
        colour = "tab:blue" if r["arm"].startswith("joint/") else "tab:gray"
        ax.scatter(r["makespan_s"], r["saved"], color=colour)
        point = (round(r["makespan_s"], 1), round(r["saved"], 1))
        at.setdefault(point, []).append(f"{r['arm']} {r['label']}")
    for k, ((x, y), texts) in enumerate(sorted(at.items())):  # one label per point, alternating sides
        ax.annotate("\n".join(texts), (x, y), fontsize=7, xytext=(6, -12 if k % 2 else 4),
                    textcoords="offset points")
    ax.margins(x=0.35, y=0.12)
    ax.set_xlabel("makespan (s, mean over seeds)")
    ax.set_ylabel("GPU-s per session saved vs best baseline")
    ax.set_title("Workflow pool: GPU-seconds saved against makespan")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    with out_dir(out):
        write_atomic(out / "tradeoff.md", "\n".join(lines) + "\n")
        fig.savefig(out / "tradeoff.png", dpi=110)
    plt.close(fig)
    _console().print("\n".join(lines))
    _console().print(f"wrote {out / 'tradeoff.md'} and {out / 'tradeoff.png'}")


@app.command()
def calibrate(
    traces: Path | None = TRACES,
    out: Path = typer.Option(Path("optsched/predict/data/predictor_coeffs.json")),
    seed: int = 0,
) -> None:
    """Refit the predictor's coefficient table from the traces and print its held-out card."""
    from optsched.predict.activation_calibrate import calibrate as fit

    check_out_file(out, "--out")
    table = fit(_traces_dir(traces), seed=seed)
    write_atomic(out, json.dumps(table, indent=1, sort_keys=True) + "\n")  # as write_table, atomically
    _console().print_json(json.dumps(table["card"]))
    _console().print(f"wrote {out}")

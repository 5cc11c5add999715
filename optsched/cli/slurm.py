"""``optsched slurm run|explain|demo``: optsched as the scheduling policy of a Slurm cluster.

``run`` is the adapter's daemon (:mod:`optsched.hosts.slurm` over the shared host loop);
``explain`` prints the stored reason of a job (the text of ``optsched explain``);
``demo`` replays a small Venus-like job stream through a real (dev) Slurm cluster once per mode:
Slurm's own FIFO, Slurm set up as a site would (backfill, per-tenant partitions, preemption),
optionally that site with slurmdbd's QOS GPU limits per tenant, and optsched, and compares them
from Slurm's own records. The
adapter, the solver and the demo are imported only when a command runs.
"""

from __future__ import annotations

import logging
import signal
from pathlib import Path
from typing import Any

import typer

app = typer.Typer(
    name="slurm",
    help="Run optsched as the policy of a Slurm cluster.",
    no_args_is_help=True,
    add_completion=False,
)


def _load(config: Path) -> Any:
    from optsched.cli.common import check_input_file, check_out_file
    from optsched.hosts.config import load_config

    check_input_file(config, "--config")
    cfg = load_config(config)
    if cfg.store != ":memory:":
        check_out_file(Path(cfg.store), "store")
    return cfg


@app.command("run")
def run(
    config: Path = typer.Option(..., "--config", help="adapter config (TOML; see docs/slurm.md)"),
    once: bool = typer.Option(False, "--once", help="decide and apply one epoch, then exit"),
    interval: float | None = typer.Option(
        None, "--interval", help="seconds between epochs (default: epoch_s)"
    ),
    log_level: str = typer.Option("info", "--log-level", help="debug | info | warning"),
) -> None:
    """Every epoch: read squeue/sinfo, decide, check, start/preempt jobs, record (store)."""
    from optsched.cli.common import fail

    if log_level.lower() not in ("debug", "info", "warning", "error"):
        fail("--log-level", f"unknown level '{log_level}' (debug, info, warning, error)")
    if interval is not None and not interval > 0:
        fail("--interval", "must be > 0")
    cfg = _load(config)
    import shutil

    missing = [b for b in ("squeue", "sinfo", "scontrol") if shutil.which(b) is None]
    if missing:
        fail("", f"slurm run reads and acts through Slurm's client commands; missing on PATH: "
             f"{', '.join(missing)} (Debian: apt-get install slurm-client)")
    logging.basicConfig(
        level=getattr(logging, log_level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from optsched.hosts.slurm import make_loop
    from optsched.hosts.store import Store

    store = Store(cfg.store)
    loop = make_loop(cfg, store)
    if once:
        res = loop.step()
        typer.echo(
            f"epoch {res.seq}: {'refused' if res.refused else res.decision.status}, "
            f"{sum(a.outcome == 'ok' for a in res.actions)} actions ok, "
            f"{sum(a.outcome != 'ok' for a in res.actions)} not"
        )
        store.close()
        raise typer.Exit(1 if res.refused else 0)

    def _stop(signum: int, frame: Any) -> None:
        logging.getLogger("optsched.hosts").info("signal %d: stopping after this epoch", signum)
        loop.stop()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    loop.run(interval if interval is not None else cfg.epoch_s)
    store.close()


@app.command("explain")
def explain(
    job: str = typer.Argument(..., help="Slurm job id"),
    config: Path = typer.Option(..., "--config", help="adapter config (TOML; see docs/slurm.md)"),
) -> None:
    """Print what `optsched explain` said of the job on the last epoch that started, preempted
    or queued it (read from the adapter's store; exit 2 if none did)."""
    from optsched.cli.common import fail

    cfg = _load(config)
    if not Path(cfg.store).exists():
        fail("store", f"no store at '{cfg.store}': the adapter has not run with this config")
    from optsched.hosts.store import Store

    store = Store(cfg.store)
    try:
        got = store.reason(cfg.cluster, job)
    finally:
        store.close()
    if got is None:
        fail("job", f"job '{job}' appears in no decision of cluster '{cfg.cluster}'")
    typer.echo(f"epoch {got[0]}:")
    typer.echo(got[1])


@app.command("demo")
def demo(
    out: Path = typer.Option(Path("runs/slurm-demo"), "--out", help="output folder"),
    jobs: int = typer.Option(200, "--jobs", help="jobs in the stream"),
    seed: int = typer.Option(0, "--seed"),
    span_s: float = typer.Option(150.0, "--span-s", help="arrivals spread over this many seconds"),
    modes: str = typer.Option(
        "slurm,slurm-site,optsched", "--modes",
        help="comma-separated: slurm (sched/builtin FIFO), slurm-site (backfill, per-tenant "
        "partitions, partition-priority preemption), slurm-site-dbd (the same with slurmdbd on "
        "MariaDB: a QOS GPU limit per tenant partition, a standby partition beyond it), optsched",
    ),
    quotas: str = typer.Option(
        "default", "--quotas",
        help="the adapter's quotas: default (32 GPUs over four tenants) or gangs (each guaranteed "
        "tenant one whole GPU type, the best-effort ones none)",
    ),
    cluster_dir: Path | None = typer.Option(
        None, "--cluster-dir", help="where the dev clusters live (default: a temporary folder)"
    ),
    reserve_min_gpus: int | None = typer.Option(
        None, "--reserve-min-gpus",
        help="the adapter's reserve_min_gpus: the smallest gang the look-ahead reserves GPUs for "
        "(default: the engine's, 33, so no gang of the demo's 32 GPUs)",
    ),
) -> None:
    """The same job stream through Slurm's own scheduling (FIFO, and as a site would set it up)
    and through optsched, side by side."""
    from optsched.cli.common import check_out_dir, fail, out_dir

    known = ("slurm", "slurm-site", "slurm-site-dbd", "optsched")
    chosen = [m.strip() for m in modes.split(",") if m.strip()]
    bad = [m for m in chosen if m not in known]
    if bad or not chosen:
        fail("--modes", f"unknown mode(s) {bad or chosen}; use {', '.join(known)}")
    if quotas not in ("default", "gangs"):
        fail("--quotas", f"unknown '{quotas}'; use default, gangs")
    if jobs < 1:
        fail("--jobs", "must be >= 1")
    if seed < 0:
        fail("--seed", "must be >= 0")
    if reserve_min_gpus is not None and reserve_min_gpus < 1:
        fail("--reserve-min-gpus", "must be >= 1")
    if not span_s > 0:
        fail("--span-s", "must be > 0")
    if cluster_dir is not None:
        check_out_dir(cluster_dir, "--cluster-dir")
    check_out_dir(out, "--out")
    import shutil

    missing = [b for b in ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol")
               if shutil.which(b) is None]
    if missing:
        fail("", f"slurm demo runs a dev Slurm cluster; missing on PATH: {', '.join(missing)} "
             "(Debian: apt-get install slurmctld slurmd slurm-client munge)")
    if "slurm-site-dbd" in chosen:
        missing = [b for b in ("slurmdbd", "sacctmgr", "mariadbd", "mariadb-install-db", "mariadb",
                               "mariadb-admin") if shutil.which(b) is None]
        if missing:
            fail("--modes", f"slurm-site-dbd runs slurmdbd on MariaDB; missing on PATH: "
                 f"{', '.join(missing)} (Debian: apt-get install mariadb-server slurmdbd)")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from optsched.hosts.demo import DemoSpec, run_demo

    with out_dir(out):
        spec = DemoSpec(jobs=jobs, seed=seed, span_s=span_s, quotas=quotas, reserve_min_gpus=reserve_min_gpus)
        text = run_demo(spec, out, chosen, cluster_dir)
    typer.echo(text)


def register(main: typer.Typer) -> None:
    """Add the ``slurm`` sub-command group to ``main``."""
    main.add_typer(app, name="slurm")


__all__ = ["app", "register"]

"""Experiment sweeps: every (trace, setting, policy, seed) replay as a task, on Ray or locally.

* :func:`run_specs` runs :class:`~optsched.sim.runner.RunSpec` replays through the one executor,
  :func:`optsched.parallel.run`: one after the other, in processes (``workers``) or as Ray
  tasks (``ray_address``: ``"local"`` starts a Ray on this machine, anything else is passed to
  ``ray.init(address=...)``, e.g. ``"auto"`` or ``"ray://head:10001"``). A Ray task returns
  the replay's event log and the driver writes it, so the files are the same bytes as a
  sequential run's and the workers need no shared disk.
  A task that raises is retried (``retries`` times) and, if it still fails, reported through
  ``on_fail`` and listed in the result; it is never silently dropped.
* :class:`SweepSpec` is a study in one TOML file: traces x settings x policies x seeds;
  :func:`run_sweep` runs all of its replays in one pool and writes one ``simulate``-style
  folder per (trace, setting) plus ``sweep.json`` / ``sweep.md`` (``optsched sweep``).
* :func:`run_workflow_experiment` is the same for ``optsched workflows simulate --ray``.

The simulator is deterministic for a seed, so the summaries, logs and plots of a Ray run equal
those of the sequential run, except the measured seconds (``sim_seconds``, ``cpu_seconds``,
the decision table's ``seconds`` columns and the workflow planner's seconds).
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from optsched import parallel
from optsched.parallel import Failure
from optsched.sim.cluster import EventLog, SimConfig
from optsched.sim.metrics import per_tenant, summarize
from optsched.sim.names import POLICIES
from optsched.sim.runner import RunSpec, run_dir, run_one, save_log, summary
from optsched.sim.trace import DEFAULT_QOS_DELAY_S, GuaranteeRule

if TYPE_CHECKING:
    from optsched.sim.workflows.experiment import Experiment
    from optsched.sim.workflows.sim import SimResult

DEFAULT_RETRIES = 2

Outcome = tuple[dict[str, float], dict[str, dict[str, float]], str, EventLog]
"""What one replay returns: summary metrics, per-tenant metrics, interference source, log."""


def replay(spec: RunSpec) -> Outcome:
    """One replay (the body of a task, in whatever process runs it)."""
    log = run_one(spec)
    return summarize(log), per_tenant(log), log.interference, log


def _mode(use_ray: bool, workers: int) -> str:
    """Ray when asked, else processes for more than one worker, else this process."""
    return "ray" if use_ray else "process" if workers > 1 else "serial"


def run_specs(
    specs: list[RunSpec],
    out: Path,
    *,
    ray_address: str | None = None,
    use_ray: bool = False,
    workers: int = 1,
    retries: int = DEFAULT_RETRIES,
    on_done: Callable[[RunSpec, dict[str, float]], None] | None = None,
    on_fail: Callable[[RunSpec, str], None] | None = None,
) -> tuple[dict[str, Any], list[Failure]]:
    """Replay ``specs`` (one ``simulate`` folder ``out``); write every log under ``out/runs``
    from this process; return the summary (as :func:`optsched.sim.runner.run_many`) and the
    failures."""
    def done(key: int, res: Outcome) -> None:
        save_log(res[3], run_dir(out, specs[key].policy, specs[key].seed))
        if on_done:
            on_done(specs[key], res[0])

    def fail(key: int, err: str) -> None:
        if on_fail:
            on_fail(specs[key], err)

    results, failures = parallel.run(
        ((k, replay, (s,)) for k, s in enumerate(specs)),
        mode=_mode(use_ray, workers),
        workers=workers,
        ray_address=ray_address,
        retries=retries,
        on_done=done,
        on_fail=fail,
    )
    rows = [(specs[k], m, t) for k, (m, t, _, _) in results.items()]
    sources = {src for _, _, src, _ in results.values()}
    return summary(rows, interference=", ".join(sorted(sources))), failures


# --------------------------------------------------------------------------- sweep spec files


class SweepSetting(BaseModel):
    """One setting of a study: ``optsched simulate`` options (unset: the command's default)."""

    model_config = ConfigDict(extra="forbid")

    epoch_s: float = Field(300.0, gt=0, description="Epoch length, seconds.")
    trigger: bool = Field(True, description="Also decide after arrivals and completions.")
    min_gap_s: float = Field(60.0, ge=0, description="Minimum time between triggered decisions.")
    checkpoint_s: float = Field(1800.0, gt=0, description="Checkpoint period of jobs, seconds.")
    restart_overhead_s: float = Field(60.0, ge=0, description="Restart cost after a preemption.")
    qos_delay_s: float = Field(DEFAULT_QOS_DELAY_S, gt=0, description="Every tenant's max_queue_delay_s.")
    guarantee: Literal["quota", "all", "none"] = Field("quota", description="Which jobs are guaranteed.")
    guarantee_fraction: float = Field(1.0, ge=0, le=1, description="Share of quota that is guaranteed.")
    max_jobs: int | None = Field(None, ge=1, description="Replay the first N jobs only.")
    backend: str = Field("auto", description="optsched backend.")
    time_limit_s: float = Field(0.2, gt=0, description="optsched time per epoch.")
    predictor: Literal["trained", "fallback", "oracle"] = Field("trained", description="Predictor.")
    oracle_runtime: bool = Field(False, description="Snapshots carry true runtimes.")
    lucid_dir: str | None = Field(None, description="Folder of Lucid's interference tables.")


class SweepSpec(BaseModel):
    """A whole study: every trace x setting x policy x seed (``optsched sweep SPEC.toml``)."""

    model_config = ConfigDict(extra="forbid")

    traces: list[str] = Field(min_length=1, description="'mini', Venus job logs or openb pod lists.")
    policies: list[str] = Field(min_length=1, description="Policies to compare.")
    seeds: list[int] = Field(min_length=1, description="Seeds of every replay.")
    settings: dict[str, SweepSetting] = Field(
        default_factory=lambda: {"default": SweepSetting()},
        description="Named settings; each is a set of simulate options.",
    )

    @classmethod
    def load(cls, path: Path) -> SweepSpec:
        """Read a TOML spec; a bad field raises ``ValueError`` naming it."""
        try:
            data = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"{path}: not TOML ({exc})") from None
        try:
            spec = cls.model_validate(data)
        except ValidationError as exc:
            err = exc.errors(include_url=False)[0]
            where = ".".join(str(x) for x in err["loc"])
            raise ValueError(f"{path}: {where}: {err['msg']}") from None
        for k, p in enumerate(spec.policies):
            if p not in POLICIES:
                raise ValueError(f"{path}: policies.{k}: unknown policy '{p}' ({', '.join(POLICIES)})")
        return spec


def specs_for(trace: str, setting: SweepSetting, policies: list[str], seeds: list[int]) -> list[RunSpec]:
    """The replays of one (trace, setting), as ``optsched simulate`` builds them."""
    cfg = SimConfig(
        epoch_s=setting.epoch_s,
        trigger=setting.trigger,
        min_gap_s=setting.min_gap_s,
        checkpoint_s=setting.checkpoint_s,
        restart_overhead_s=setting.restart_overhead_s,
        oracle_runtime=setting.oracle_runtime,
    )
    rule = GuaranteeRule(mode=setting.guarantee, fraction=setting.guarantee_fraction)
    opts = {"backend": setting.backend, "time_limit_s": setting.time_limit_s, "predictor": setting.predictor}
    return [
        RunSpec(
            trace=trace,
            policy=p,
            seed=s,
            config=cfg,
            policy_options=opts if p == "optsched" else {},
            qos_delay_s=setting.qos_delay_s,
            guarantee=rule,
            max_jobs=setting.max_jobs,
            lucid_dir=setting.lucid_dir,
        )
        for p in policies
        for s in seeds
    ]


def trace_label(trace: str) -> str:
    """A folder name for a trace: its file name without extensions."""
    name = Path(trace).name
    return name.split(".")[0] or "trace"


def run_sweep(
    spec: SweepSpec,
    out: Path,
    *,
    ray_address: str | None = None,
    use_ray: bool = False,
    workers: int = 1,
    retries: int = DEFAULT_RETRIES,
    on_done: Callable[[tuple[str, str, RunSpec], dict[str, float]], None] | None = None,
    on_fail: Callable[[tuple[str, str, RunSpec], str], None] | None = None,
) -> tuple[dict[str, Any], list[Failure]]:
    """Run every replay of ``spec`` in one pool; write ``out/<trace>/<setting>/`` (summary.json,
    summary.md, runs/) and ``out/sweep.json``; return the index and the failures."""
    from optsched.sim.report import write_report
    from optsched.sim.runner import clean

    groups: dict[tuple[str, str], list[RunSpec]] = {}
    for trace in spec.traces:
        for name, setting in spec.settings.items():
            groups[(trace, name)] = specs_for(trace, setting, spec.policies, spec.seeds)
    flat = [(g, k, s) for g, ss in groups.items() for k, s in enumerate(ss)]
    folder = {g: out / trace_label(g[0]) / g[1] for g in groups}

    def done(key: int, res: Outcome) -> None:
        g, _, s = flat[key]
        save_log(res[3], run_dir(folder[g], s.policy, s.seed))
        if on_done:
            on_done((g[0], g[1], s), res[0])

    def fail(key: int, err: str) -> None:
        g, _, s = flat[key]
        if on_fail:
            on_fail((g[0], g[1], s), err)

    results, failures = parallel.run(
        ((k, replay, (s,)) for k, (_, _, s) in enumerate(flat)),
        mode=_mode(use_ray, workers),
        workers=workers,
        ray_address=ray_address,
        retries=retries,
        on_done=done,
        on_fail=fail,
    )
    index: dict[str, Any] = {"groups": []}
    for g, ss in groups.items():
        rows, sources = [], set()
        for key, (gg, _, s) in enumerate(flat):
            if gg == g and key in results:
                m, t, src, _ = results[key]
                rows.append((s, m, t))
                sources.add(src)
        if not rows:
            continue
        summ = summary(rows, interference=", ".join(sorted(sources)))
        summ["command"] = {"sweep": True, "trace": g[0], "setting": g[1],
                           "options": spec.settings[g[1]].model_dump()}
        folder[g].mkdir(parents=True, exist_ok=True)
        (folder[g] / "summary.json").write_text(json.dumps(clean(summ), indent=1))
        write_report(summ, folder[g] / "summary.md")
        index["groups"].append(
            {
                "trace": g[0],
                "setting": g[1],
                "folder": str(folder[g].relative_to(out)),
                "runs": len(rows),
                "of": len(ss),
                "policies": {
                    p: {k: v.get("mean") for k, v in m.items()} for p, m in summ["policies"].items()
                },
            }
        )
    index["failures"] = [{"task": str(flat[f.key][2].policy) + f" seed {flat[f.key][2].seed}",
                          "trace": flat[f.key][0][0], "setting": flat[f.key][0][1], "error": f.error}
                         for f in failures]
    out.mkdir(parents=True, exist_ok=True)
    (out / "sweep.json").write_text(json.dumps(clean(index), indent=1))
    return index, failures


# --------------------------------------------------------------------------- workflows


def _workflow_replay(exp: Experiment, name: str, seed: int) -> SimResult:
    from optsched.sim.workflows.baselines import get_policy
    from optsched.sim.workflows.sim import WorkflowSimulator
    from optsched.sim.workflows.workloads import arrivals, make_sessions

    arr = arrivals(exp.arrivals, exp.sessions, exp.window_s, seed, exp.traces)
    sessions = make_sessions(exp.scenario, list(arr), seed)
    pol = get_policy(name, planner_config=exp.planner)
    return WorkflowSimulator(sessions, pol, name=name, seed=seed, config=exp.sim).run()


def run_workflow_experiment(
    exp: Experiment,
    progress: Callable[[str], None] | None = None,
    *,
    ray_address: str | None = None,
    retries: int = DEFAULT_RETRIES,
) -> tuple[dict[str, Any], dict[tuple[str, int], SimResult], list[Failure]]:
    """``run_experiment`` with every (policy, seed) as a Ray task (same summary)."""
    from optsched.sim.workflows.experiment import summarize as wf_summarize

    tasks = [
        ((name, seed), _workflow_replay, (exp, name, seed)) for seed in exp.seeds for name in exp.policies
    ]
    results, failures = parallel.run(
        tasks,
        mode="ray",
        ray_address=ray_address,
        retries=retries,
        on_done=(lambda key, _: progress(f"{key[0]} seed {key[1]}")) if progress else None,
        on_fail=(lambda key, err: progress(f"FAILED {key[0]} seed {key[1]}: {err}")) if progress else None,
    )
    if failures:
        return {}, results, failures
    return wf_summarize(exp, results), results, failures

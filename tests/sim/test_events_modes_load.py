"""The simulator's event decisions, pooled/partitioned modes and --load-scale."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from optsched.cli import app
from optsched.schema.decision import Decision
from optsched.schema.snapshot import Snapshot
from optsched.sim.cluster import SimConfig, Simulator
from optsched.sim.metrics import summarize
from optsched.sim.policies import make_policy
from optsched.sim.runner import RunSpec, run_one
from optsched.sim.trace import GuaranteeRule, Trace, load_trace, scale_arrivals

JOBS = 150


@pytest.fixture(scope="module")
def mini() -> Trace:
    return load_trace("mini", max_jobs=JOBS)


def test_load_scale_compresses_arrivals_and_multiplies_offered_load(mini: Trace) -> None:
    fast = scale_arrivals(mini, 2.0, GuaranteeRule())
    s0 = min(j.submit_s for j in mini.jobs)
    for a, b in zip(mini.jobs, fast.jobs, strict=True):
        assert a.id == b.id and a.duration_s == b.duration_s and a.gpus == b.gpus
        assert b.submit_s == pytest.approx(s0 + (a.submit_s - s0) / 2.0)
    assert any("time-compressed by 2" in n for n in fast.notes)
    cfg = SimConfig(max_sim_s=None)
    base = summarize(run_one(RunSpec(trace="mini", policy="fifo", seed=0, max_jobs=JOBS,
                                     config=cfg), mini))
    spec = RunSpec(trace="mini", policy="fifo", seed=0, max_jobs=JOBS,
                   config=SimConfig(load_scale=2.0))
    scaled = summarize(run_one(spec))  # load_trace applies the scale itself
    assert scaled["offered_load"] == pytest.approx(2.0 * base["offered_load"], rel=1e-9)
    assert scaled["window_s"] == pytest.approx(base["window_s"] / 2.0, rel=1e-9)
    assert scaled["gpu_hours"] == pytest.approx(base["gpu_hours"], rel=1e-12)
    # more jobs of a tenant overlap, so no more of them can stay guaranteed
    assert sum(j.qos == "guaranteed" for j in fast.jobs) <= sum(
        j.qos == "guaranteed" for j in mini.jobs)
    with pytest.raises(ValueError, match="positive"):
        scale_arrivals(mini, 0.0, None)


@pytest.mark.parametrize("policy", ["kueue", "gandiva", "lucid", "antman", "optsched"])
def test_partitioned_mode_makes_no_loans(policy: str, mini: Trace) -> None:
    seen: list[Snapshot] = []

    def keep(snap: Snapshot, d: Decision) -> None:
        if not seen:
            seen.append(snap)
        assert d.loans == []
        assert not any(s.on_loan for s in d.start)

    opts = {"backend": "greedy"} if policy == "optsched" else {}
    sim = Simulator(mini, make_policy(policy, options=opts), seed=0,
                    config=SimConfig(mode="partitioned"), on_decision=keep)
    m = summarize(sim.run())
    assert m["loans_made"] == 0 and m["unfinished"] == 0
    assert all(t.borrow_limit == dict.fromkeys(t.quota, 0) for t in seen[0].tenants)
    pooled = summarize(Simulator(mini, make_policy(policy, options=opts), seed=0).run())
    assert pooled["loans_made"] > 0


def test_bad_mode_is_rejected(mini: Trace) -> None:
    with pytest.raises(ValueError, match="pooled or partitioned"):
        Simulator(mini, make_policy("fifo"), config=SimConfig(mode="shared"))


def test_event_decisions_at_arrivals_use_the_event_path(mini: Trace) -> None:
    decisions: list[tuple[float, str]] = []
    pol = make_policy("optsched", options={"backend": "greedy"})
    sim = Simulator(mini, pol, seed=0, config=SimConfig(),
                    on_decision=lambda s, d: decisions.append((s.now, d.solver.backend)))
    log = sim.run()
    ev = log.decisions["event"]
    assert len(ev) == len(decisions)
    backends = {b for (_, b), e in zip(decisions, ev, strict=True) if e}
    full = {b for (_, b), e in zip(decisions, ev, strict=True) if not e}
    # event decisions come from the event path (or the full model when it could not)
    assert "event" in backends and backends <= {"event", "greedy"}
    assert "event" not in full
    # epoch decisions sit on the epoch grid; event decisions at arrival/completion instants
    submits = {j.submit_s for j in mini.jobs}
    ends = set(log.jobs["end_s"])
    for (t, _), e in zip(decisions, ev, strict=True):
        if e:
            assert t in submits or t in ends
        else:
            assert t % sim.cfg.epoch_s == 0
    m = summarize(log)
    assert m["event_decisions"] == sum(ev) > 0 and m["unfinished"] == 0


def test_events_cut_queueing_delay_of_jobs_that_fit(mini: Trace) -> None:
    opts = {"backend": "greedy"}
    on = run_one(RunSpec(trace="mini", policy="optsched", seed=0, max_jobs=JOBS,
                         policy_options=opts), mini)
    off = run_one(RunSpec(trace="mini", policy="optsched", seed=0, max_jobs=JOBS,
                          policy_options=opts,
                          config=SimConfig(events=False, trigger=False)), mini)
    # the first job arrives to an empty cluster: with events it starts at its submission,
    # without them at the next epoch tick
    first = min(range(len(on.jobs["id"])), key=lambda k: on.jobs["submit_s"][k])
    assert on.jobs["start_s"][first] == on.jobs["submit_s"][first]
    assert off.jobs["start_s"][first] > off.jobs["submit_s"][first]
    assert summarize(on)["avg_queue_delay_s"] < summarize(off)["avg_queue_delay_s"]
    assert summarize(off)["event_decisions"] == 0




def test_simulate_both_modes_side_by_side(tmp_path: Path) -> None:
    out = tmp_path / "both"
    res = CliRunner().invoke(app, [
        "simulate", "--trace", "mini", "--policies", "fifo,antman", "--seeds", "0",
        "--out", str(out), "--max-jobs", "80", "--mode", "both", "--load-scale", "1.5",
        "--no-plots",
    ])
    assert res.exit_code == 0, res.output
    both = json.loads((out / "summary.json").read_text())
    assert set(both["modes"]) == {"pooled", "partitioned"}
    for mode in ("pooled", "partitioned"):
        s = json.loads((out / mode / "summary.json").read_text())
        assert s["config"]["mode"] == mode and s["config"]["load_scale"] == 1.5
        assert s["command"]["mode"] == mode
        assert both["modes"][mode]["policies"]["fifo"] == s["policies"]["fifo"]
    part = both["modes"]["partitioned"]["policies"]
    assert part["antman"]["loans_made"]["mean"] == 0
    text = (out / "summary.md").read_text()
    assert "| antman |" in text and "avg queue (s) pooled" in text
    assert "avg queue (s) partitioned" in text
    offered = both["modes"]["pooled"]["policies"]["fifo"]["offered_load"]["mean"]
    assert math.isfinite(offered) and offered > 0


def test_simulate_rejects_bad_mode_and_scale(tmp_path: Path) -> None:
    for args in (["--mode", "mixed"], ["--load-scale", "0"]):
        res = CliRunner().invoke(app, ["simulate", "--trace", "mini", "--policies", "fifo",
                                          "--out", str(tmp_path), *args])
        assert res.exit_code == 2, res.output


TIMINGS = {"seconds", "snapshot_s", "state_s", "check_s"}


@pytest.mark.parametrize("policy", ["fifo", "sjf", "qssf"])
@pytest.mark.parametrize("mode", ["pooled", "partitioned"])
def test_idle_decisions_recorded_without_the_policy_change_nothing(policy: str, mode: str) -> None:
    """A decision where no pending job fits is logged without asking a policy that declares
    ``idle_when_nothing_fits``: the event log is the one of asking it every time."""
    trace = load_trace("mini", max_jobs=JOBS, load_scale=4.0)
    cfg = SimConfig(mode=mode, load_scale=4.0)
    fast = Simulator(trace, make_policy(policy), seed=0, config=cfg).run()
    asked: list[int] = []
    slow = Simulator(trace, make_policy(policy), seed=0, config=cfg,
                     on_decision=lambda snap, d: asked.append(1)).run()  # every decision asked
    assert len(asked) == len(slow.decisions["t"])
    skipped = sum(1 for s in fast.decisions["seconds"] if s == 0.0)
    assert skipped > 0
    assert all(s > 0.0 for s in slow.decisions["seconds"])
    for name in ("jobs", "segments", "preemptions", "assurance", "expected", "resizes"):
        assert getattr(fast, name) == getattr(slow, name), name
    for col, values in slow.decisions.items():
        if col not in TIMINGS:
            assert fast.decisions[col] == values, col


class _Counting:
    """A policy that counts how often the simulator asks it (every other attribute forwarded)."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.asked = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def decide(self, snap: Snapshot, state: object) -> Decision:
        self.asked += 1
        return self.inner.decide(snap, state)  # type: ignore[attr-defined, no-any-return]


@pytest.mark.parametrize("policy", ["kueue", "gandiva", "antman"])
@pytest.mark.parametrize("mode", ["pooled", "partitioned"])
def test_clock_free_policies_are_not_asked_again_when_nothing_changed(policy: str, mode: str) -> None:
    """A ``clock_free`` policy whose last decision changed nothing is not asked again until a
    job arrives, starts, stops or resizes: the event log is the one of asking it every time."""
    trace = load_trace("mini", max_jobs=JOBS, load_scale=4.0)
    cfg = SimConfig(mode=mode, load_scale=4.0)
    counting = _Counting(make_policy(policy))
    fast = Simulator(trace, counting, seed=0, config=cfg).run()  # type: ignore[arg-type]
    asked: list[int] = []
    slow = Simulator(trace, make_policy(policy), seed=0, config=cfg,
                     on_decision=lambda snap, d: asked.append(1)).run()
    assert len(asked) == len(slow.decisions["t"]) == len(fast.decisions["t"])
    assert 0 < counting.asked < len(asked)
    for name in ("jobs", "segments", "preemptions", "assurance", "expected", "resizes"):
        assert getattr(fast, name) == getattr(slow, name), name
    for col, values in slow.decisions.items():
        if col not in TIMINGS:
            assert fast.decisions[col] == values, col


def test_clock_free_is_declared_only_by_policies_that_ignore_the_clock() -> None:
    from optsched.sim.cluster import clock_free

    free = {p for p in ("fifo", "sjf", "qssf", "tiresias", "kueue", "gandiva", "lucid", "antman",
                        "optsched") if clock_free(make_policy(p))}
    assert free == {"fifo", "sjf", "qssf", "kueue", "gandiva", "antman"}

    class Bad:
        clock_free = "yes"

    with pytest.raises(ValueError, match="clock_free must be True or False"):
        clock_free(Bad())


class _NoPromise(_Counting):
    """The same policy without its ``starts_by`` promise."""

    starts_by = ()


@pytest.mark.parametrize("policy", ["kueue", "gandiva", "antman"])
@pytest.mark.parametrize("mode", ["pooled", "partitioned"])
def test_starts_by_policies_are_not_asked_when_no_job_can_start(policy: str, mode: str) -> None:
    """A policy that declares ``starts_by`` is not asked when no waiting job could start in a
    way it names (alone in its node shape, as an MPS guest, by reclaim inside its quota): fewer
    asks than without the promise, and the same event log (also the one of asking every time,
    above)."""
    trace = load_trace("mini", max_jobs=JOBS, load_scale=4.0)
    cfg = SimConfig(mode=mode, load_scale=4.0)
    promise, plain = _Counting(make_policy(policy)), _NoPromise(make_policy(policy))
    fast = Simulator(trace, promise, seed=0, config=cfg).run()  # type: ignore[arg-type]
    slow = Simulator(trace, plain, seed=0, config=cfg).run()  # type: ignore[arg-type]
    assert 0 < promise.asked < plain.asked
    for name in ("jobs", "segments", "preemptions", "assurance", "expected", "resizes"):
        assert getattr(fast, name) == getattr(slow, name), name
    for col, values in slow.decisions.items():
        if col not in TIMINGS:
            assert fast.decisions[col] == values, col


def test_starts_by_is_validated() -> None:
    from optsched.sim.cluster import starts_by

    assert starts_by(make_policy("gandiva")) == {"alone", "guest"}
    assert starts_by(make_policy("tiresias")) == frozenset()

    class Bad:
        starts_by = ("alone", "teleport")

    with pytest.raises(ValueError, match="starts_by must name"):
        starts_by(Bad())


def test_optsched_decisions_that_change_nothing_are_logged_without_asking_in_partitions() -> None:
    """In partitioned mode a decision of optsched's where no job can start in any way it has
    is logged from its assurance figures alone (``unchanged_figures``): the jobs, segments,
    preemptions and assurance of the replay are those of asking it every time, and asking it
    anyway there (``verify_unchanged``) finds every such decision changing nothing."""
    from dataclasses import replace

    # 400 jobs: their replay has MPS guests stopped for interference at epoch ticks and
    # best-effort jobs stopped for their own tenant's guaranteed ones between them
    trace = load_trace("mini", max_jobs=400)
    cfg = SimConfig(mode="partitioned")
    sim = Simulator(trace, make_policy("optsched"), seed=0, config=cfg)
    fast = sim.run()
    assert sim.unasked > 0
    assert fast.decisions["status"].count("unchanged") == sim.unasked
    slow = Simulator(trace, make_policy("optsched"), seed=0, config=cfg,
                     on_decision=lambda snap, d: None).run()  # every decision asked
    assert "unchanged" not in slow.decisions["status"]
    for name in ("jobs", "segments", "preemptions", "assurance", "resizes"):
        assert getattr(fast, name) == getattr(slow, name), name
    for col, values in slow.decisions.items():
        if col not in TIMINGS | {"status"}:
            assert fast.decisions[col] == values, col
    checked = Simulator(trace, make_policy("optsched"), seed=0,
                        config=replace(cfg, verify_unchanged=True))
    assert checked.run().segments == slow.segments
    assert checked.unasked == 0
    # its event path stops nothing (event_preempts False), so an event where only a
    # preemption could start a job is not asked; a policy that may preempt there is asked
    eager = make_policy("optsched")
    eager.event_preempts = True  # type: ignore[attr-defined]
    asked = Simulator(trace, eager, seed=0, config=cfg)
    assert asked.run().segments == slow.segments
    assert 0 < asked.unasked < sim.unasked
    # pooled: loans follow every change of use, so every decision is asked
    pooled = Simulator(trace, make_policy("optsched"), seed=0, config=replace(cfg, mode="pooled"))
    pooled.run()
    assert pooled.unasked == 0

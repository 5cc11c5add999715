"""The one executor (``optsched.parallel``) and what it promises a host: results in input
order, retries, per-task cut-offs, workers that die with their parent; and a partitioned epoch
whose part the wall clock cuts off is answered, every part, by its greedy plan with one label."""

from __future__ import annotations

import json
import os
import pickle
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from optsched import parallel, solve_epoch
from optsched.engine import partition as P
from optsched.engine.backends.base import SolveParams
from optsched.engine.budget import PART_WALL_CLOCK_FALLBACK, WALL_CLOCK_FALLBACK, Budget
from optsched.engine.state import ClusterState, parse_snapshot
from optsched.instances import generate
from optsched.schema.decision import Decision
from optsched.testing import assert_decision_valid

ROOT = Path(__file__).resolve().parents[1]


def _square(x: int) -> int:
    return x * x


def _pid(_: int) -> int:
    return os.getpid()


def _sleep(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def _noop() -> None:
    pass


def _broken(x: int) -> int:
    raise ValueError(f"bad task {x}")


def _count_setup(marker: str) -> None:
    with open(marker, "a") as fh:
        fh.write(f"{os.getpid()}\n")


def test_processes_answer_in_input_order_and_report_failures_with_the_exception() -> None:
    tasks = [(k, _square, (k,)) for k in range(6)] + [("bad", _broken, (9,))]
    results, failures = parallel.run(tasks, mode="process", workers=2)
    assert list(results) == list(range(6))
    assert results == {k: k * k for k in range(6)}
    assert [(f.key, f.error, f.timed_out) for f in failures] == [("bad", "ValueError: bad task 9", False)]
    assert isinstance(failures[0].exception, ValueError)


def test_workers_are_fresh_interpreters_reused_across_calls() -> None:
    a, _ = parallel.run([(k, _pid, (k,)) for k in range(2)], mode="process", workers=2)
    b, _ = parallel.run([(k, _pid, (k,)) for k in range(2)], mode="process", workers=2)
    assert os.getpid() not in a.values()
    assert set(a.values()) == set(b.values())  # kept for the next call
    for pid in a.values():  # not a fork of this process: its own command line
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert b"optsched.parallel" in b" ".join(cmd)


def test_setup_runs_once_per_worker_and_outside_the_tasks_clock(tmp_path: Path) -> None:
    marker = tmp_path / "setup"
    setup = (_count_setup, (str(marker),))
    parallel.shutdown()  # fresh workers
    res, fails = parallel.run([(k, _square, (k,)) for k in range(4)], mode="process", workers=2, setup=setup)
    assert fails == [] and res == {0: 0, 1: 1, 2: 4, 3: 9}
    res, fails = parallel.run([(k, _square, (k,)) for k in range(4)], mode="process", workers=2, setup=setup)
    assert fails == []
    pids = marker.read_text().split()
    assert 1 <= len(pids) <= 2 and len(set(pids)) == len(pids)  # each worker set up once


def test_a_task_past_its_timeout_is_cut_off_and_its_worker_replaced() -> None:
    tasks = [("slow", _sleep, (60.0,)), ("quick", _sleep, (0.0,)), ("after", _square, (3,))]
    t0 = time.monotonic()
    # the setup imports this module in each worker, so the clock covers the tasks alone
    results, failures = parallel.run(tasks, mode="process", workers=2, timeout_s=2.0, retries=2,
                                     setup=(_noop, ()))
    assert time.monotonic() - t0 < 55  # it did not wait for the sleeping task
    assert results == {"quick": 0.0, "after": 9}
    assert [(f.key, f.timed_out) for f in failures] == [("slow", True)]
    assert failures[0].error == "TimeoutError: no answer within 2 s"


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="executor"):
        parallel.run([(0, _square, (1,))], mode="threads")


# --------------------------------------------------------------------------- parent death


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(entry.name))
    return out


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_killing_the_parent_leaves_no_worker(tmp_path: Path, sig: signal.Signals) -> None:
    script = tmp_path / "host.py"
    script.write_text(textwrap.dedent(
        """
        from optsched import parallel
        from tests.test_parallel import _sleep
        parallel.run([(k, _sleep, (300.0,)) for k in range(2)], mode="process", workers=2)
        """
    ))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    host = subprocess.Popen([sys.executable, str(script)], env=env, cwd=ROOT)
    try:
        workers: list[int] = []
        deadline = time.monotonic() + 120
        while len(workers) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
            workers = _children(host.pid)
        assert len(workers) == 2, "the host did not start its two workers"
        time.sleep(1.0)  # they run their tasks now
        host.send_signal(sig)
        host.wait(30)
        gone_by = time.monotonic() + 10
        while any(_alive(w) for w in workers) and time.monotonic() < gone_by:
            time.sleep(0.1)
        assert not [w for w in workers if _alive(w)]
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()
        for w in _children(host.pid):
            os.kill(w, signal.SIGKILL)


# --------------------------------------------------------------------------- a part past its share


SLOW_NODE = "__slow__"


def slow_first_part(part: Any, **kw: Any) -> Decision:
    """The pipeline, except that a part holding the first node never answers with an exact
    backend (the testing hook: ``solve`` is a parameter of ``solve_partitioned``)."""
    params = kw["params"]
    if part.jobs and any(n.id == SLOW_NODE for n in part.nodes) and params.backend != "greedy":
        time.sleep(300)
    return solve_epoch(part, **kw)


def _comparable(d: Decision) -> dict[str, Any]:
    """A decision without its timings (``seconds``, ``stage_seconds``, the parts' times in the
    notes)."""
    out = d.model_dump(mode="json")
    out["solver"].pop("seconds")
    out["solver"].pop("stage_seconds")
    out["solver"]["notes"] = [re.sub(r"[0-9.]+ s \([0-9.]+ s CPU\)", "T", n) for n in out["solver"]["notes"]]
    return out


def _slow_fleet() -> tuple[ClusterState, int]:
    data = generate("fleet", seed=5, gpus=400)
    first = data["nodes"][0]["id"]
    text = json.dumps(data).replace(json.dumps(first), json.dumps(SLOW_NODE))
    st = ClusterState.from_snapshot(parse_snapshot(text))
    sp = P.split(st, 2, seed=0)
    return st, next(p for p, part in enumerate(sp.parts) if any(n.id == SLOW_NODE for n in part.nodes))


def _assert_all_greedy(st: ClusterState, d: Decision) -> None:
    assert_decision_valid(st, d)
    assert d.status == "fallback"
    assert d.solver.backend == "partitioned:greedy"
    assert d.solver.fallback_reason == PART_WALL_CLOCK_FALLBACK
    assert PART_WALL_CLOCK_FALLBACK in d.solver.notes
    assert [n.split(",")[2].strip() for n in d.solver.notes[1:3]] == ["fallback (greedy)"] * 2
    assert not any(n.startswith("partitions: part ") for n in d.solver.notes)  # no part named


def test_one_part_past_the_deadline_makes_every_part_greedy_with_one_label() -> None:
    st, _ = _slow_fleet()
    params = SolveParams(backend="highs", time_limit_s=4.0)
    t0 = time.monotonic()
    one_late = P.solve_partitioned(st, params, 2, solve=slow_first_part, executor="process")
    assert time.monotonic() - t0 < 250  # it did not wait for the sleeping part
    _assert_all_greedy(st, one_late)
    # the deadline already past: no part is even started, both are late; the same decision
    all_late = P.solve_partitioned(st, params, 2, solve=slow_first_part, executor="serial",
                                   t0=time.monotonic() - 100)
    _assert_all_greedy(st, all_late)
    assert _comparable(all_late) == _comparable(one_late)


def _net_fires_in_slow_part(part: Any, **kw: Any) -> Decision:
    """The pipeline, except that the solver of the part holding the first node is stopped by
    its own wall-clock net (what a loaded machine does), i.e. it answers its greedy plan
    labelled ``WALL_CLOCK_FALLBACK``."""
    if any(n.id == SLOW_NODE for n in part.nodes) and kw["params"].backend != "greedy":
        d = solve_epoch(part, **{**kw, "params": kw["params"].with_(backend="greedy")})
        info = d.solver.model_copy(update={"fallback_reason": WALL_CLOCK_FALLBACK})
        return d.model_copy(update={"solver": info})
    return solve_epoch(part, **kw)


def test_a_part_stopped_by_its_own_wall_clock_net_makes_every_part_greedy() -> None:
    st, _ = _slow_fleet()
    params = SolveParams(backend="highs", time_limit_s=4.0)
    net = P.solve_partitioned(st, params, 2, solve=_net_fires_in_slow_part, executor="serial")
    _assert_all_greedy(st, net)
    late = P.solve_partitioned(st, params, 2, solve=solve_epoch, executor="serial", t0=time.monotonic() - 100)
    assert _comparable(late) == _comparable(net)
    # in time, with the deterministic work budget: the exact merged decision, unlabelled
    exact = P.solve_partitioned(st, params, 2, solve=solve_epoch, executor="serial")
    assert_decision_valid(st, exact)
    assert exact.status == "feasible" and exact.solver.fallback_reason is None
    assert exact.solver.backend == "partitioned:highs"


def test_tasks_past_the_deadline_are_cut_off_and_starting_workers_kept() -> None:
    tasks = [(k, _square, (k,)) for k in range(3)]
    for mode in ("serial", "process"):
        results, failures = parallel.run(tasks, mode=mode, workers=2, deadline=time.monotonic() - 1)
        assert results == {}
        got = [(f.key, f.timed_out, f.error) for f in failures]
        assert got == [(k, True, parallel.LATE) for k in range(3)]
    # the workers still starting at the deadline were kept, and answer the next call
    results, failures = parallel.run(tasks, mode="process", workers=2)
    assert results == {0: 0, 1: 1, 2: 4} and failures == []


def _exact_fails(part: Any, **kw: Any) -> Decision:
    if kw["params"].backend != "greedy":
        raise RuntimeError("no exact answer")
    return solve_epoch(part, **kw)


def test_a_part_that_fails_is_answered_by_its_greedy_plan() -> None:
    st = ClusterState.from_snapshot(parse_snapshot(json.dumps(generate("fleet", seed=5, gpus=400))))
    parts = P.split(st, 2).parts
    res = P.run_parts(parts, SolveParams(backend="highs", time_limit_s=2.0), "serial", None, _exact_fails)
    assert [r.decision.status for r in res] == ["fallback", "fallback"]
    assert [r.decision.solver.fallback_reason for r in res] == [
        f"part {p} failed (RuntimeError: no exact answer); its greedy plan was used" for p in (0, 1)
    ]
    assert [r.decision.solver.backend for r in res] == ["greedy", "greedy"]


def _fail_setup() -> None:
    raise RuntimeError("no models here")


def test_prestarted_workers_are_set_up_once_and_take_the_next_calls_tasks(tmp_path: Path) -> None:
    marker = tmp_path / "setup"
    setup = (_count_setup, (str(marker),))
    n = min(2, parallel.KEEP_IDLE)
    parallel.shutdown()
    assert parallel.prestart(n, setup) == n
    pids = marker.read_text().split()
    assert len(pids) == len(set(pids)) == n  # every worker started and set up, before any task
    got, fails = parallel.run([(k, _pid, (k,)) for k in range(n)], mode="process", workers=n, setup=setup)
    assert fails == [] and {str(p) for p in got.values()} <= set(pids)  # handed to them
    assert marker.read_text().split() == pids  # and not set up again
    # a setup that fails leaves no worker behind for the next call
    parallel.shutdown()
    assert parallel.prestart(n, (_fail_setup, ())) == 0
    assert parallel._checkout(n) == []


def test_part_workers_started_ahead_are_the_ones_the_partitioned_call_uses() -> None:
    from optsched.engine.epoch import start_part_workers
    from optsched.engine.partition.running import predictor_ref

    st = ClusterState.from_snapshot(parse_snapshot(json.dumps(generate("fleet", seed=5, gpus=400))))
    params = SolveParams(backend="highs", time_limit_s=4.0)
    n = min(2, parallel.KEEP_IDLE)
    parallel.shutdown()
    assert start_part_workers(st, params=params, partitions=2, executor="serial") == 0
    assert start_part_workers(st, params=params, partitions=1) == 0
    assert start_part_workers(st, params=params, partitions=2, executor="process") == n
    idle = parallel._checkout(n)
    parallel._checkin(idle)
    # set up for exactly the call's setup: the same split, part parameters and predictor
    part_params = params.with_(time_limit_s=Budget(4.0).part_limit_s)
    parts = P.split(st, 2).parts
    key = pickle.dumps(P.part_setup(parts, part_params, predictor_ref(None, True), solve_epoch))
    assert len(idle) == n and all(w.ready and key in w.setups for w in idle)
    d = solve_epoch(st, params=params, partitions=2, executor="process")
    assert_decision_valid(st, d)
    after = parallel._checkout(n)
    parallel._checkin(after)
    assert {w.proc.pid for w in after} == {w.proc.pid for w in idle}  # no worker started in the call

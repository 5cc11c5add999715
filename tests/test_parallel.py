"""The one executor (``optsched.parallel``) and what it promises a host: results in input
order, retries, per-task cut-offs, workers that die with their parent; and a partitioned epoch
whose part overruns its share is answered by that part's labelled greedy plan."""

from __future__ import annotations

import json
import os
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


def test_a_part_past_its_share_is_cut_off_and_answered_by_its_greedy_plan() -> None:
    data = generate("fleet", seed=5, gpus=400)
    first = data["nodes"][0]["id"]
    text = json.dumps(data).replace(json.dumps(first), json.dumps(SLOW_NODE))
    st = ClusterState.from_snapshot(parse_snapshot(text))
    params = SolveParams(backend="highs", time_limit_s=4.0)
    sp = P.split(st, 2, seed=params.seed)
    slow = next(p for p, part in enumerate(sp.parts) if any(n.id == SLOW_NODE for n in part.nodes))
    t0 = time.monotonic()
    d = P.solve_partitioned(st, params, 2, solve=slow_first_part, executor="process")
    assert time.monotonic() - t0 < 250  # it did not wait for the sleeping part
    assert_decision_valid(st, d)
    assert d.status == "fallback"
    cut = (f"part {slow} did not answer within 3.200 s (its share of the time limit) and was cut off; "
           "its greedy plan was used")
    assert d.solver.fallback_reason == cut
    assert f"partitions: {cut}" in d.solver.notes
    assert any(n.startswith(f"part {slow}: ") and "fallback (greedy)" in n for n in d.solver.notes)
    other = 1 - slow
    assert not any(n.startswith(f"part {other}: ") and "fallback" in n for n in d.solver.notes)


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

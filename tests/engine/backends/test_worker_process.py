"""The solver worker process (``optsched.engine.backends.process``): a worker that does not
answer by the deadline is killed with its whole process group, the solver binary it started
included, and the backend answers in time with the labelled fallback."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

import optsched
from optsched.engine.backends.base import SolveParams
from optsched.engine.backends.process import Late, WorkerProcess
from optsched.engine.budget import WALL_CLOCK_FALLBACK
from optsched.engine.check import check_decision
from optsched.engine.state import load_state
from optsched.instances import generate
from optsched.predict.fallback import EstimatePredictor

ROOT = Path(__file__).resolve().parents[3]
HANG = "tests.engine.backends.hang_worker"


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, killed but not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _gone(pid: int) -> bool:
    for _ in range(200):  # the kill is sent before ``call`` returns; the exit follows
        if not _alive(pid):
            return True
        time.sleep(0.01)
    return False


@pytest.fixture
def hang(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[WorkerProcess, Path]:
    monkeypatch.chdir(ROOT)  # ``python -m tests...`` resolves from the repository root
    pid_file = tmp_path / "pids"
    monkeypatch.setenv("OPTSCHED_TEST_PID_FILE", str(pid_file))
    worker = WorkerProcess(HANG)
    worker.warm_up()
    assert worker.ready
    return worker, pid_file


def test_a_worker_past_its_deadline_is_killed_with_the_process_it_started(
    hang: tuple[WorkerProcess, Path],
) -> None:
    worker, pid_file = hang
    with pytest.raises(Late) as late:
        worker.call({}, time.monotonic() + 1.0)
    assert not late.value.starting
    worker_pid, child_pid = map(int, pid_file.read_text().split())
    assert _gone(worker_pid) and _gone(child_pid)
    assert worker.proc is None  # the next call starts a fresh worker


def test_a_pulp_solve_whose_solver_overshoots_is_abandoned_with_the_labelled_fallback(
    hang: tuple[WorkerProcess, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from optsched.engine.backends.pulp import backend as pulp_backend

    worker, pid_file = hang
    monkeypatch.setattr(pulp_backend, "WORKER", worker)
    state = load_state(generate("tiny", 1))
    params = SolveParams(backend="pulp", time_limit_s=1.0)
    d = optsched.solve_epoch(state, params=params, predictor=EstimatePredictor())
    assert d.status == "fallback"
    assert d.solver.fallback_reason == WALL_CLOCK_FALLBACK
    assert check_decision(state, d) == []
    worker_pid, child_pid = map(int, pid_file.read_text().split())
    assert _gone(worker_pid) and _gone(child_pid)


def test_a_worker_still_starting_at_the_deadline_is_left_to_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    worker = WorkerProcess(HANG)
    with pytest.raises(Late) as late:
        worker.call({}, time.monotonic())  # no time at all: the ready message cannot be in
    assert late.value.starting
    assert worker.proc is not None and worker.proc.poll() is None
    pid = worker.proc.pid
    worker.shutdown()
    assert _gone(pid)


def test_the_pulp_worker_solves_a_job_of_plain_arrays() -> None:
    from optsched.engine.backends.pulp.worker import solve_job

    # maximise 3a + 2b + 0c subject to a + b <= 4, a - c >= 1 (a, b, c integer in 0..3)
    job = {
        "lb": [0, 0, 0],
        "ub": [3, 3, 3],
        "obj": [3.0, 2.0, 0.0],
        "rows": [(-float("inf"), 4.0, [0, 1], [1.0, 1.0]), (1.0, float("inf"), [0, 2], [1.0, -1.0])],
        "start": [1, 0, 0],
        "solver": "PULP_CBC_CMD",
        "kwargs": {"msg": False, "threads": 1, "warmStart": True},
        "log": True,
        "time_limit_s": 30.0,
    }
    out = solve_job(job)
    assert out["error"] is None and not out["unavailable"]
    assert (out["status"], out["sol_status"]) == (1, 1)  # optimal, optimal
    assert out["values"] == [3, 1, 0]
    assert "Result - Optimal" in out["log"]


def test_cbc_is_run_without_a_thread_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """CBC 2.10 given ``-threads 1`` starts one search thread, and that start sometimes sat in
    a 10 s timed wait ("Thread 0 used 0 times, waiting to start 10.000116"), holding a 2 s call
    for 10 s; without a thread count it searches in its main thread."""
    from optsched.engine.backends.pulp import backend as pulp_backend
    from optsched.engine.backends.pulp.worker import solve_job

    sent: list[dict[str, Any]] = []
    real = pulp_backend.WORKER.call

    def spy(job: dict[str, Any], deadline: float) -> tuple[str, Any]:
        sent.append(dict(job))
        return real(job, deadline)

    monkeypatch.setattr(pulp_backend.WORKER, "call", spy)
    state = load_state(generate("tiny", 1))
    d = optsched.solve_epoch(state, params=SolveParams(backend="pulp", time_limit_s=30.0),
                             predictor=EstimatePredictor())
    assert d.status == "optimal" and sent
    job = sent[0]
    assert "threads" not in job["kwargs"]
    log = solve_job({**job, "time_limit_s": 30.0})["log"]
    command = next(line for line in log.splitlines() if line.startswith("command line"))
    assert "-threads" not in command and "-randomCbcSeed 1" in command
    assert "waiting to start" not in log

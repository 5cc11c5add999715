"""User errors are never internal errors: a bad path or option exits 2 before any work, names
the option on stderr, shows no traceback and leaves nothing behind (no file, no empty folder)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from optsched.cli import main
from tests.conftest import DATA, ROOT

SNAP = str(DATA / "tiny" / "gang_blocked.json")


def cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPTSCHED_TRACES": str(cwd / "no-traces")}
    return subprocess.run([sys.executable, "-m", "optsched.cli", *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=120, check=False)


def listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """A folder with a file ``f``, an empty folder ``d`` and a CSV of no known shape."""
    (tmp_path / "f").write_text("x")
    (tmp_path / "d").mkdir()
    (tmp_path / "x.csv").write_text("a,b\n1,2\n")
    return tmp_path


BEFORE = ["d", "f", "x.csv"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["solve", SNAP, "-o", "d"], "error: --out: 'd' is a folder, not a file"),
        (["solve", SNAP, "-o", "f/decision.json"],
         "error: --out: cannot create 'f/decision.json': 'f' is a file"),
        (["solve", "d"], "error: snapshot: cannot read 'd': it is a folder, not a file"),
        (["simulate", "--trace", "nosuch.csv", "--out", "out"],
         "error: --trace: trace 'nosuch.csv' does not exist"),
        (["simulate", "--trace", "mini", "--seeds", "x", "--out", "out"],
         "error: --seeds: 'x' is not an integer"),
        (["simulate", "--trace", "mini", "--out", "f"], "error: --out: 'f' is a file, not a folder"),
        (["simulate", "--trace", "x.csv", "--out", "out"],
         "error: --trace: 'x.csv' is not a trace optsched reads: a Venus job log needs the column(s) "
         "job_id, vc, gpu_num, submit_time, duration"),
        (["simulate", "--trace", "d", "--out", "out"], "error: --trace: 'd' is a folder, not a trace file"),
    ],
)
def test_listed_user_errors_exit_2_naming_the_option_and_write_nothing(
    work: Path, args: list[str], message: str
) -> None:
    proc = cli(args, work)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(message), proc.stderr
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr
    assert "vc_config=" not in proc.stderr
    assert proc.stdout == ""  # no progress bar: nothing ran
    assert listing(work) == BEFORE  # no out folder, no temporary file


def test_a_venus_log_without_vc_config_says_where_it_looked(work: Path) -> None:
    (work / "log.csv").write_text("job_id,vc,gpu_num,submit_time,duration\n1,a,1,2020-09-01 00:00:00,5\n")
    proc = cli(["simulate", "--trace", "log.csv", "--out", "out"], work)
    assert proc.returncode == 2
    assert proc.stderr.startswith(
        "error: --trace: no vc_config.csv found for the Venus log 'log.csv' (looked for "
        "lucid_venus/vc_config.csv and vc_config.csv in its folder and the one above)"
    )
    assert not (work / "out").exists()


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(args)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and "internal error" not in err
    return code, err


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["solve", SNAP, "--solver-config", "d"], "--solver-config"),
        (["solve", SNAP, "--predictor", "psychic", "-o", "o.json"], "--predictor"),
        (["solve", SNAP, "--partitions", "0"], "--partitions"),
        (["check", "d", SNAP], "snapshot"),
        (["check", SNAP, "nosuch.json"], "decision"),
        (["explain", SNAP, "d", "j"], "decision"),
        (["schema", "snapshot", "-o", "d"], "--out"),
        (["generate", "-o", "f/x.json"], "--out"),
        (["simulate", "--trace", "mini", "--seeds", "0,-1", "--out", "out"], "--seeds"),
        (["simulate", "--trace", "mini", "--seeds", ",", "--out", "out"], "--seeds"),
        (["simulate", "--trace", "mini", "--workers", "0", "--out", "out"], "--workers"),
        (["simulate", "--trace", "mini", "--epoch-s", "0", "--out", "out"], "--epoch-s"),
        (["simulate", "--trace", "mini", "--backend", "gurobi", "--out", "out"], "--backend"),
        (["simulate", "--trace", "mini", "--predictor", "x", "--out", "out"], "--predictor"),
        (["simulate", "--trace", "mini", "--policies", "nope", "--out", "out"], "--policies"),
        (["simulate", "--trace", "mini", "--guarantee-fraction", "2", "--out", "out"],
         "--guarantee-fraction"),
        (["simulate", "--trace", "mini", "--lucid-dir", "f", "--out", "out"], "--lucid-dir"),
        (["simulate", "--trace", "mini", "--lucid-dir", "d", "--out", "out"], "--lucid-dir"),
        (["simulate", "--trace", "mini", "--out", "f/sub"], "--out"),
        (["sweep", "d", "--out", "out"], "spec"),
        (["sweep", "nosuch.toml", "--out", "out"], "spec"),
        (["train", "--out", "f"], "--out"),
        (["predictors", "evaluate", "--out", "f"], "--out"),
        (["train", "--out", "m"], "--traces"),
        (["workflows", "calibrate", "--out", "c.json"], "--traces"),
        (["workflows", "simulate", "--seeds", "x", "--out", "out"], "--seeds"),
        (["workflows", "simulate", "--arrivals", "bursty", "--out", "f"], "--out"),
        (["workflows", "simulate", "--policies", "nope", "--out", "out"], "--policies"),
        (["workflows", "sweep-load", "--arrivals", "bursty", "--speedups", "1,x", "--out", "out"],
         "--speedups"),
        (["workflows", "offline", "--seeds", "1,y"], "--seeds"),
        (["workflows", "joint", "--lending", "[1]", "--out", "out"], "--lending"),
        (["workflows", "calibrate", "--out", "d"], "--out"),
        (["serve", "--db", "d"], "--db"),
        (["serve", "--db", "f/x.db"], "--db"),
        (["serve", "--log-level", "loud"], "--log-level"),
        (["serve", "--host", "999.1.1.1", "--port", "0"], "--host"),
        (["slurm", "run", "--config", "d"], "--config"),
        (["slurm", "run", "--config", "nosuch.toml", "--once"], "--config"),
        (["slurm", "explain", "1", "--config", "d"], "--config"),
        (["slurm", "demo", "--out", "f"], "--out"),
        (["slurm", "demo", "--jobs", "0"], "--jobs"),
    ],
)
def test_every_command_checks_paths_and_options_first(
    work: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    args: list[str], option: str
) -> None:
    monkeypatch.chdir(work)
    monkeypatch.setenv("OPTSCHED_TRACES", str(work / "no-traces"))
    code, err = run(args, capsys)
    assert code == 2, err
    assert err.startswith(f"error: {option}: "), err
    assert listing(work) == BEFORE


@pytest.mark.parametrize(
    ("preset", "message"),
    [
        ('backend = "nope"\n', "backend: unknown backend 'nope'"),
        ('time_limit_s = "x"\n', "time_limit_s: a number of seconds > 0, got 'x'"),
        ("time_limit_s = 0\n", "time_limit_s: a number of seconds > 0, got 0"),
        ("seed = -1\n", "seed: an integer >= 0, got -1"),
        ("num_workers = 0\n", "num_workers: an integer >= 1, got 0"),
        ("not toml", "--solver-config: "),
    ],
)
def test_a_bad_solver_preset_is_refused_before_solving(
    work: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    preset: str, message: str
) -> None:
    monkeypatch.chdir(work)
    (work / "p.toml").write_text(preset)
    code, err = run(["solve", SNAP, "--solver-config", "p.toml", "-o", "o.json"], capsys)
    assert code == 2 and err.startswith("error: --solver-config: ") and message in err, err
    assert not (work / "o.json").exists()


def test_serve_refuses_a_port_in_use_before_starting(
    work: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    monkeypatch.chdir(work)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, err = run(["serve", "--port", str(port), "--db", "s.db"], capsys)
    assert code == 2 and err.startswith(f"error: --port: cannot listen on 127.0.0.1:{port}: "), err
    assert listing(work) == BEFORE  # no store created


def test_slurm_run_without_slurm_says_so_and_creates_no_store(
    work: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(work)
    monkeypatch.setenv("PATH", str(work / "empty-bin"))
    (work / "a.toml").write_text(
        'cluster = "t"\nstore = "s.db"\n[gpu_types.a100]\nmemory_gib = 80\n'
        '[[tenants]]\nid = "alpha"\naccounts = ["alpha"]\nquota = { a100 = 8 }\n'
    )
    code, err = run(["slurm", "run", "--config", "a.toml", "--once"], capsys)
    assert code == 2
    assert err.startswith("error: slurm run reads and acts through Slurm's client commands; "
                          "missing on PATH: squeue, sinfo, scontrol"), err
    assert listing(work) == sorted([*BEFORE, "a.toml"])


def test_a_trace_row_the_reader_cannot_parse_is_refused_before_any_replay(work: Path) -> None:
    (work / "vc_config.csv").write_text(",num\na,1\n")
    (work / "bad.csv").write_text("job_id,vc,gpu_num,submit_time,duration\n1,a,1,yesterday,5\n")
    (work / "empty.csv").write_text("job_id,vc,gpu_num,submit_time,duration\n")
    for name, said in (("bad.csv", "Invalid isoformat string: 'yesterday'"), ("empty.csv", "no jobs")):
        proc = cli(["simulate", "--trace", name, "--policies", "fifo", "--out", "out"], work)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith(f"error: --trace: cannot read '{name}': "), proc.stderr
        assert said in proc.stderr and proc.stdout == ""
        assert not (work / "out").exists()


def test_a_sweep_checks_every_trace_of_its_study_first(work: Path) -> None:
    (work / "vc_config.csv").write_text(",num\na,1\n")
    (work / "bad.csv").write_text("job_id,vc,gpu_num,submit_time,duration\n1,a,1,2020-09-01 0:0,y\n")
    (work / "s.toml").write_text('traces = ["mini", "bad.csv"]\npolicies = ["fifo"]\nseeds = [0]\n')
    proc = cli(["sweep", "s.toml", "--out", "out"], work)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: spec: traces.1: cannot read 'bad.csv': "), proc.stderr
    (work / "none.csv").write_text("job_id,vc,gpu_num,submit_time,duration\n1,a,0,2020-09-01 00:00:00,5\n")
    (work / "s.toml").write_text('traces = ["none.csv"]\npolicies = ["fifo"]\nseeds = [0]\n')
    proc = cli(["sweep", "s.toml", "--out", "out"], work)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(
        "error: spec: traces.0: 'none.csv' has no job to replay (skipped 1 row(s) without GPUs)"
    ), proc.stderr
    (work / "s.toml").write_text('traces = ["x.csv"]\npolicies = ["fifo"]\nseeds = [0]\n')
    proc = cli(["sweep", "s.toml", "--out", "out"], work)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: spec: traces.0: 'x.csv' is not a trace optsched reads")
    assert not (work / "out").exists()


def test_a_failed_replay_leaves_no_out_folder_it_created(
    work: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error during the run removes the output folder the command created; a folder that
    existed before stays."""
    import optsched.sim.runner

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the replay broke")

    monkeypatch.chdir(work)
    monkeypatch.setattr(optsched.sim.runner, "run_many", broken)
    args = ["simulate", "--trace", "mini", "--policies", "fifo", "--max-jobs", "5"]
    assert main([*args, "--out", "out"]) == 1
    assert "internal error: RuntimeError: the replay broke" in capsys.readouterr().err
    assert not (work / "out").exists()
    assert main([*args, "--mode", "both", "--out", "both"]) == 1
    assert not (work / "both").exists()
    assert main([*args, "--out", "d"]) == 1
    assert (work / "d").is_dir()

"""What a host embedding the command line relies on: a partitioned solve with the shipped
models returns (it hung in the pool's forked workers before), and stdout carries the decision
alone (nothing a solver prints from C), parsed whole as JSON."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from optsched.engine.budget import PART_WALL_CLOCK_FALLBACK
from optsched.engine.check import check_decision
from optsched.engine.state import ClusterState, parse_snapshot
from optsched.instances import generate
from optsched.schema.decision import Decision
from tests.conftest import ROOT

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
ENV.pop("OPTSCHED_MODELS", None)  # the shipped models/


def _solve(snapshot: Path, *args: str, timeout: float = 400) -> subprocess.CompletedProcess[bytes]:
    cmd = [sys.executable, "-m", "optsched.cli", "solve", str(snapshot), *args]
    return subprocess.run(cmd, capture_output=True, env=ENV, cwd=ROOT, timeout=timeout, check=False)


def _checked(data: dict[str, object], out: bytes) -> Decision:
    decision = Decision.model_validate(json.loads(out))  # the whole of stdout is the decision
    state = ClusterState.from_snapshot(parse_snapshot(json.dumps(data)))
    assert check_decision(state, decision) == []
    return decision


@pytest.mark.parametrize(
    ("size", "seed", "how"), [("venus", 7, "options"), ("tiny", 3, "flag")]
)
def test_partitioned_solve_through_the_cli_returns_a_checked_decision(
    tmp_path: Path, size: str, seed: int, how: str
) -> None:
    assert (ROOT / "models" / "runtime").is_dir()
    data = generate(size, seed=seed)
    args: list[str] = []
    if how == "options":
        data["options"] = {**(data.get("options") or {}), "partitions": 2}
    else:
        args = ["--partitions", "2"]
    snap = tmp_path / "snap.json"
    snap.write_text(json.dumps(data))
    res = _solve(snap, *args)
    assert res.returncode == 0, res.stderr.decode()[-2000:]
    d = _checked(data, res.stdout)
    assert d.solver.backend.startswith("partitioned:"), d.solver.notes
    assert d.solver.notes[0].startswith("partitioned into 2 parts")
    # every part answers itself, or (cut off by the wall clock) every part by its greedy plan
    assert [n.split(":")[0] for n in d.solver.notes[1:3]] == ["part 0", "part 1"]
    assert (d.status == "fallback") == (d.solver.fallback_reason == PART_WALL_CLOCK_FALLBACK)


def _timeless(d: Decision) -> dict[str, object]:
    out = d.model_dump(mode="json")
    out["solver"].pop("seconds")
    out["solver"].pop("stage_seconds")
    out["solver"]["notes"] = [re.sub(r"[0-9.]+ s \([0-9.]+ s CPU\)", "T", n) for n in out["solver"]["notes"]]
    return out


def test_a_short_partitioned_cli_call_gives_the_same_checked_decision_in_fresh_processes(
    tmp_path: Path,
) -> None:
    """Whether a part answers by the parts' deadline depends on the machine; the decision does
    not: every part answered in time (the exact merge), or every part by its greedy plan under
    the one label, never a mix. (At 0.1 s even ready workers cannot answer by the deadline.)"""
    data = generate("venus", seed=7)
    snap = tmp_path / "snap.json"
    snap.write_text(json.dumps(data))
    got = []
    for _ in range(2):
        res = _solve(snap, "--partitions", "2", "--time-limit", "0.1")
        assert res.returncode == 0, res.stderr.decode()[-2000:]
        d = _checked(data, res.stdout)
        assert d.solver.backend.startswith("partitioned:") and "+" not in d.solver.backend  # no mix
        assert "partitions: part " not in (d.solver.fallback_reason or "")  # no part named
        got.append(_timeless(d))
    assert got[0] == got[1]


@pytest.mark.parametrize(("seed", "solver"), [(1, "highs"), (2, "highs"), (1, None), (4, None)])
def test_stdout_is_the_decision_alone(tmp_path: Path, seed: int, solver: str | None) -> None:
    data = generate("medium", seed=seed)
    snap = tmp_path / "snap.json"
    snap.write_text(json.dumps(data))
    res = _solve(snap, *(["--backend", solver] if solver else []), "--time-limit", "3")
    assert res.returncode == 0, res.stderr.decode()[-2000:]
    _checked(data, res.stdout)


def test_the_guard_sends_c_level_output_to_stderr_and_restores_stdout() -> None:
    code = textwrap.dedent(
        """
        import ctypes, os, sys
        from optsched.engine.backends.stdio import solver_output_to_stderr
        libc = ctypes.CDLL(None)
        print("before", flush=False)
        with solver_output_to_stderr():
            os.write(1, b"raw-fd-noise ")
            libc.printf(b"c-stdio-noise ")  # buffered by C: flushed before fd 1 comes back
            print("python-noise")
            with solver_output_to_stderr():  # nested (another solve in the same process)
                os.write(1, b"nested-noise ")
            os.write(1, b"still-noise ")
        print("after")
        """
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, env=ENV, timeout=120, check=True)
    assert res.stdout == b"before\nafter\n"
    for noise in (b"raw-fd-noise", b"c-stdio-noise", b"python-noise", b"nested-noise", b"still-noise"):
        assert noise in res.stderr

"""The CLI contract: exit codes, named-field errors, no tracebacks, atomic output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from optsched.cli import main
from tests.conftest import DATA, ROOT


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def test_solve_then_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    snap = DATA / "tiny" / "loan_reclaim.json"
    out = tmp_path / "d.json"
    code, _, _ = run(["solve", str(snap), "-o", str(out), "--predictor", "fallback"], capsys)
    assert code == 0
    assert json.loads(out.read_text())["format"] == 1
    code, stdout, _ = run(["check", str(snap), str(out)], capsys)
    assert code == 0 and "ok" in stdout


def test_check_reports_violations_with_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    snap = DATA / "tiny" / "gang_blocked.json"
    bad = {"now": 10000.0, "status": "feasible", "solver": {"backend": "x", "seconds": 0}, "queue": ["gang8"]}
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(bad))
    code, stdout, _ = run(["check", str(snap), str(p)], capsys)
    assert code == 1
    assert "invariant 5" in stdout and "'one'" in stdout


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda s: s["jobs"][0].update(tenant="x"), "jobs[0].tenant: unknown tenant 'x'"),
        (lambda s: s.update(format=3), "format: unsupported format 3"),
        (lambda s: s["jobs"][1].update(gpus=-1), "jobs[1].gpus:"),
        (lambda s: s["jobs"].append(dict(s["jobs"][1])), "duplicated job id"),
        (lambda s: s["nodes"][0].update(gpu_type="Z"), "nodes[0].gpu_type: unknown GPU type 'Z'"),
    ],
)
def test_bad_snapshot_exits_2_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mutate: object, message: str
) -> None:
    s = json.loads((DATA / "tiny" / "gang_blocked.json").read_text())
    mutate(s)  # type: ignore[operator]
    p = tmp_path / "s.json"
    p.write_text(json.dumps(s))
    out = tmp_path / "d.json"
    code, _, err = run(["solve", str(p), "-o", str(out)], capsys)
    assert code == 2
    assert message in err
    assert not out.exists()  # nothing half-written
    assert list(tmp_path.iterdir()) == [p]


@pytest.mark.parametrize(
    "args",
    [
        ["solve", "missing.json"],
        ["solve", "{snap}", "--backend", "gurobi"],
        ["solve", "{snap}", "--time-limit", "-1"],
        ["solve", "{snap}", "--solver-config", "nope.toml"],
        ["generate", "--size", "huge"],
        ["schema", "plan"],
        ["frobnicate"],
    ],
)
def test_usage_errors_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    snap = str(DATA / "tiny" / "gang_blocked.json")
    code, _, err = run([a.replace("{snap}", snap) for a in args], capsys)
    assert code == 2
    assert err.strip()


def test_malformed_json_from_stdin(capsys: pytest.CaptureFixture[str]) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "optsched.cli", "solve", "-"],
        input="{oops",
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: malformed JSON")
    assert "Traceback" not in proc.stderr


def test_schema_and_generate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["schema", "snapshot"], capsys)
    assert code == 0 and "Snapshot" in json.loads(out)["title"]
    code, out, _ = run(["schema", "decision"], capsys)
    assert code == 0 and "queue_reasons" in json.loads(out)["properties"]
    p = tmp_path / "g.json"
    assert run(["generate", "--size", "venus", "--seed", "2", "-o", str(p)], capsys)[0] == 0
    s = json.loads(p.read_text())
    assert len(s["nodes"]) == 135 and len(s["tenants"]) == 15
    code, out, _ = run(["solve", str(p), "--backend", "greedy", "--predictor", "fallback"], capsys)
    assert code == 0 and json.loads(out)["status"] == "fallback"

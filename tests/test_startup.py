"""Start-up stays cheap: the package and the command line import no solver, ML or plotting
library until a command needs it (asserted on ``sys.modules`` in a fresh interpreter, never on
wall-clock time; ``benchmarks/startup.py`` measures the time)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("lightgbm", "pandas", "matplotlib", "highspy", "scipy", "ortools")


def _loaded_after(code: str) -> set[str]:
    """Top-level packages among HEAVY present in ``sys.modules`` after running ``code``."""
    probe = (
        f"{code}\nimport json, sys\n"
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return set(json.loads(proc.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize(
    "code",
    [
        "import optsched",
        "import optsched.cli",
        "from optsched.cli import app, main",
        "import optsched.sim, optsched.predict, optsched.engine.workflows, optsched.sim.workflows",
    ],
)
def test_import_loads_no_heavy_library(code: str) -> None:
    assert _loaded_after(code) == set()


def test_help_of_every_command_group_loads_no_heavy_library() -> None:
    code = (
        "from optsched.cli import main\n"
        "import contextlib, io\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    for argv in (['--help'], ['simulate', '--help'], ['train', '--help'],\n"
        "                 ['predictors', 'evaluate', '--help'], ['workflows', 'simulate', '--help']):\n"
        "        assert main(argv) == 0, argv\n"
    )
    assert _loaded_after(code) == set()


def test_ortools_loads_when_a_workflow_plan_is_solved_not_before() -> None:
    code = "import optsched.engine.workflows.planner, optsched.sim.workflows.baselines"
    assert "ortools" not in _loaded_after(code)

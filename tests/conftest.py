from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from optsched.engine.backends import available_backends

ROOT = Path(__file__).resolve().parents[1]
INSTANCES = ROOT / "instances"  # benchmarks, simulator, notebooks: unit tests read DATA
DATA = Path(__file__).resolve().parent / "data"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" in metafunc.fixturenames:
        metafunc.parametrize("backend", available_backends())


@pytest.fixture
def tiny() -> Callable[[str], dict[str, Any]]:
    """Load a hand-made instance by name (a fresh copy each call)."""
    cache: dict[str, dict[str, Any]] = {}

    def load(name: str) -> dict[str, Any]:
        if name not in cache:
            cache[name] = json.loads((DATA / "tiny" / f"{name}.json").read_text())
        return copy.deepcopy(cache[name])

    return load


@pytest.fixture(scope="session", autouse=True)
def _warm_milp_worker() -> None:
    """Start the solver worker processes (HiGHS, PuLP) once, so their start-up is not charged
    to a test's deadline."""
    from optsched.engine.backends import WORKER_BACKENDS, warm_up

    for name in WORKER_BACKENDS:
        if name in available_backends():
            warm_up(name)

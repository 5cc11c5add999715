"""Solver backends, registered by lazy import path.

``get_backend(name)`` imports on demand; ``available_backends()`` lists those whose optional
dependencies are installed.
"""

from __future__ import annotations

import importlib
from typing import Any

from optsched.errors import BackendUnavailableError

BACKENDS: dict[str, str] = {
    "highs": "optsched.engine.backends.highs:HighsBackend",
    "cpsat": "optsched.engine.backends.cpsat.backend:CpSatBackend",
    "milp": "optsched.engine.backends.milp.backend:MilpBackend",
    "greedy": "optsched.engine.backends.greedy:GreedyBackend",
    "pulp": "optsched.engine.backends.pulp.backend:PulpBackend",
}

_EXTRA = {
    "cpsat": "ortools (core dependency)",
    "highs": "ortools (core dependency; HiGHS is bundled with it)",
    "milp": "the 'milp' extra: pip install optsched[milp]",
    "pulp": "the 'pulp' extra: pip install optsched[pulp]",
}


def get_backend(name: str) -> Any:
    """An instance of the backend called ``name``.

    Raises
    ------
    BackendUnavailableError
        When the name is unknown or its dependency is not installed.
    """
    if name not in BACKENDS:
        raise BackendUnavailableError(f"unknown backend '{name}' (known: {sorted(BACKENDS)})")
    module, cls_name = BACKENDS[name].split(":")
    try:
        cls = getattr(importlib.import_module(module), cls_name)
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise BackendUnavailableError(f"{name} needs {_EXTRA.get(name, 'its extra')}: {exc}") from None
    if not cls.is_available():
        raise BackendUnavailableError(f"{name} needs {_EXTRA.get(name, 'its extra')}")
    return cls()


def available_backends() -> list[str]:
    """Names of the backends that can run here."""
    out = []
    for name in BACKENDS:
        try:
            get_backend(name)
        except BackendUnavailableError:
            continue
        out.append(name)
    return out

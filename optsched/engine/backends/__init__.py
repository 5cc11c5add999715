"""Solver backends, registered by lazy import path.

``get_backend(name)`` imports on demand; ``available_backends()`` lists those whose optional
dependencies are installed. Two backends run HiGHS: ``highs`` (the build bundled with OR-Tools,
in-process, the default rule's exact backend) and ``highspy`` (the separate ``highspy`` build,
which clashes with OR-Tools in one interpreter, so it runs in a worker process). ``milp``, the
older name of ``highspy``, is accepted wherever a backend is named (:mod:`.names`).
"""

from __future__ import annotations

import importlib
from typing import Any

from optsched.engine.backends.names import ALIASES as ALIASES
from optsched.engine.backends.names import DEFAULT_BACKEND as DEFAULT_BACKEND
from optsched.engine.backends.names import canonical_backend as canonical_backend
from optsched.errors import BackendUnavailableError

BACKENDS: dict[str, str] = {
    "highs": "optsched.engine.backends.highs:HighsBackend",
    "cpsat": "optsched.engine.backends.cpsat.backend:CpSatBackend",
    "highspy": "optsched.engine.backends.highspy.backend:HighspyBackend",
    "greedy": "optsched.engine.backends.greedy:GreedyBackend",
    "pulp": "optsched.engine.backends.pulp.backend:PulpBackend",
}

_EXTRA = {
    "cpsat": "ortools (core dependency)",
    "highs": "ortools (core dependency; HiGHS is bundled with it)",
    "highspy": "the 'milp' extra: pip install optsched[milp]",
    "pulp": "the 'pulp' extra: pip install optsched[pulp]",
}

def is_backend_name(name: object) -> bool:
    """Whether ``name`` may be asked for: ``auto`` (:data:`DEFAULT_BACKEND`), a key of
    :data:`BACKENDS` or an alias."""
    return isinstance(name, str) and (name == DEFAULT_BACKEND or canonical_backend(name) in BACKENDS)


def backend_names() -> list[str]:
    """Every name :func:`is_backend_name` accepts, ``auto`` first, aliases last (for messages)."""
    return [DEFAULT_BACKEND, *BACKENDS, *ALIASES]


def get_backend(name: str) -> Any:
    """An instance of the backend called ``name`` (a key of :data:`BACKENDS` or an alias).

    Raises
    ------
    BackendUnavailableError
        When the name is unknown or its dependency is not installed.
    """
    name = canonical_backend(name)
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


WORKER_BACKENDS = ("highspy", "pulp")
"""Backends whose solver runs in a worker process (:mod:`.process`)."""


def warm_up(name: str, wait: bool = True) -> None:
    """Start the worker process of backend ``name`` ahead of its first solve, so that its
    start-up (a fraction of a second) is not charged to a call's time limit; nothing for a
    backend that solves in-process."""
    name = canonical_backend(name)
    if name in WORKER_BACKENDS:
        get_backend(name)  # names a missing extra
        module = BACKENDS[name].split(":")[0]
        importlib.import_module(module).warm_up(wait)


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

"""optsched: an optimization-based scheduling engine for shared GPU fleets.

Public API (flat, explicit re-exports)::

    from optsched import solve_epoch, Snapshot, Decision, check_decision
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from optsched.check import Violation, check_decision
from optsched.errors import OptschedError, SnapshotError
from optsched.schema import Decision, Snapshot
from optsched.state import ClusterState, load_state, parse_snapshot

__version__ = "0.1.0"

if TYPE_CHECKING:
    from optsched.backends.base import SolveParams, SolveStatus
    from optsched.epoch import solve_epoch

_LAZY = {
    "solve_epoch": "optsched.epoch",
    "SolveParams": "optsched.backends.base",
    "SolveStatus": "optsched.backends.base",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'optsched' has no attribute {name!r}")


__all__ = [
    "ClusterState",
    "Decision",
    "OptschedError",
    "Snapshot",
    "SnapshotError",
    "SolveParams",
    "SolveStatus",
    "Violation",
    "__version__",
    "check_decision",
    "load_state",
    "parse_snapshot",
    "solve_epoch",
]

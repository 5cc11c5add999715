"""optsched: an optimization-based scheduling engine for shared GPU fleets.

Public API (flat, explicit re-exports)::

    from optsched import solve_epoch, Snapshot, Decision, check_decision
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from optsched.errors import OptschedError, SnapshotError

__version__ = "0.1.0"

if TYPE_CHECKING:
    from optsched.apply import apply_decision
    from optsched.backends.base import SolveParams, SolveStatus
    from optsched.check import Violation, check_decision
    from optsched.epoch import solve_epoch
    from optsched.schema import Decision, Snapshot
    from optsched.state import ClusterState, load_state, parse_snapshot

# Loaded on first use, so ``import optsched`` (and the command line) stays cheap: no pydantic
# models, networkx or solvers until a name below is asked for.
_LAZY = {
    "apply_decision": "optsched.apply",
    "ClusterState": "optsched.state",
    "Decision": "optsched.schema",
    "Snapshot": "optsched.schema",
    "SolveParams": "optsched.backends.base",
    "SolveStatus": "optsched.backends.base",
    "Violation": "optsched.check",
    "check_decision": "optsched.check",
    "load_state": "optsched.state",
    "parse_snapshot": "optsched.state",
    "solve_epoch": "optsched.epoch",
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
    "apply_decision",
    "check_decision",
    "load_state",
    "parse_snapshot",
    "solve_epoch",
]

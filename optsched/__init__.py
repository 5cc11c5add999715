"""optsched: an optimization-based scheduling engine for shared GPU fleets.

Public API (flat, explicit re-exports)::

    from optsched import solve_epoch, Snapshot, Decision, check_decision
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from optsched.errors import OptschedError, SnapshotError

__version__ = "0.1.0"

if TYPE_CHECKING:
    from optsched.engine.apply import apply_decision
    from optsched.engine.backends.base import SolveParams, SolveStatus
    from optsched.engine.check import Violation, check_decision
    from optsched.engine.epoch import solve_epoch
    from optsched.engine.state import ClusterState, load_state, parse_snapshot
    from optsched.schema import Decision, Snapshot

# Loaded on first use, so ``import optsched`` (and the command line) stays cheap: no pydantic
# models, networkx or solvers until a name below is asked for.
_LAZY = {
    "apply_decision": "optsched.engine.apply",
    "ClusterState": "optsched.engine.state",
    "Decision": "optsched.schema",
    "Snapshot": "optsched.schema",
    "SolveParams": "optsched.engine.backends.base",
    "SolveStatus": "optsched.engine.backends.base",
    "Violation": "optsched.engine.check",
    "check_decision": "optsched.engine.check",
    "load_state": "optsched.engine.state",
    "parse_snapshot": "optsched.engine.state",
    "solve_epoch": "optsched.engine.epoch",
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

"""The names a backend may be asked by besides the registry's keys: the default rule and aliases.

A leaf module (it imports nothing of optsched), so that
:class:`~optsched.engine.backends.base.SolveParams`
and the registry (:mod:`optsched.engine.backends`) share one rule without importing each other.
"""

from __future__ import annotations

ALIASES: dict[str, str] = {"milp": "highspy"}
"""Other accepted names of a backend: name -> key of :data:`optsched.engine.backends.BACKENDS`."""

DEFAULT_BACKEND = "auto"
"""The one default of the library, the CLI and the simulator, and not a backend but a rule
(:func:`optsched.engine.epoch.auto_backend`): ``highs`` (HiGHS bundled with OR-Tools), which
runs branch and bound when the model fits its work budget (at Venus size optimal within the
default second) and, above it, the LP relaxation (a bound of the whole problem) with the greedy
plan guided by its solution (:mod:`optsched.engine.backends.highs`). The rule reads only the
model's size and the limit, never the clock, so the answer is reproducible at every size."""


def canonical_backend(name: str) -> str:
    """``name`` with an alias (:data:`ALIASES`) replaced by the backend it names; any other
    value, known or not, unchanged."""
    return ALIASES.get(name, name) if isinstance(name, str) else name

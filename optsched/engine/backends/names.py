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
(:func:`optsched.engine.epoch.auto_backend`): ``highs`` (HiGHS bundled with OR-Tools; at Venus
size optimal within the default second) whenever the model fits HiGHS's work budget
(``HIGHS_VARS_PER_WORK_S`` variables per nominal second of work), else the greedy plan,
labelled ``fallback`` with the reason (a longer ``time_limit_s`` brings the exact model back:
at 10,000 GPUs, ``generate --size large``, 11,300-11,700 variables need a limit of about 6.3 s;
5 s gives a budget near 9,000). The rule reads only the model's size and the limit, never the
clock, so the answer is reproducible at every size (``docs/benchmarks.md``)."""


def canonical_backend(name: str) -> str:
    """``name`` with an alias (:data:`ALIASES`) replaced by the backend it names; any other
    value, known or not, unchanged."""
    return ALIASES.get(name, name) if isinstance(name, str) else name

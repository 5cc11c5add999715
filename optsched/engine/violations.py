"""One broken invariant of a decision, named as ``docs/snapshot-format.md`` names it.

Kept apart from :mod:`optsched.engine.check` so that the workflow-plan checker
(:mod:`optsched.engine.workflows.check`) and the decision checker can both use it without importing
each other.
"""

from __future__ import annotations

from dataclasses import dataclass

INVARIANT_NAMES: dict[int, str] = {
    1: "gpu-sharing",
    2: "placement",
    3: "preemption",
    4: "capacity-and-loans",
    5: "start-or-queue",
    6: "workflow-plan",
    7: "bad-input",
    8: "work-conservation",
    9: "pool-lending",
    10: "node-shape",
}
"""Invariant number -> its short name in ``docs/snapshot-format.md``."""


@dataclass(frozen=True)
class Violation:
    """One broken invariant: its number, what is wrong, and the ids (jobs, tenants, units) involved."""

    invariant: int
    message: str
    ids: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """The invariant's short name (``"capacity-and-loans"`` for 4)."""
        return INVARIANT_NAMES.get(self.invariant, "unknown")

    def __str__(self) -> str:
        return f"invariant {self.invariant} ({self.name}): {self.message}"

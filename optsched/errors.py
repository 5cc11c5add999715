"""Exceptions and warnings raised by optsched.

Every error that comes from bad input names the offending field with a JSON-like path
(``jobs[3].tenant``) so that the CLI can print ``error: <path>: <message>`` and exit 2.
"""

from __future__ import annotations


class OptschedError(Exception):
    """Root of every error optsched raises on purpose."""


class SnapshotError(OptschedError, ValueError):
    """A snapshot (or decision) is malformed or inconsistent.

    Parameters
    ----------
    path:
        Where the problem is, e.g. ``jobs[3].tenant``; ``""`` for the document itself.
    message:
        One line saying what is wrong.
    """

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        self.message = message
        super().__init__(f"{path}: {message}" if path else message)


class BackendUnavailableError(OptschedError):
    """A solver backend was asked for but its optional dependency is not installed."""


class DomainWarning(UserWarning):
    """Root of optsched's soft warnings (also collected into ``Decision.solver.notes``)."""


class PredictionFallbackWarning(DomainWarning):
    """A trained predictor was not available and the fallback estimates were used."""


class NumericScaleWarning(DomainWarning):
    """Objective coefficients span too many orders of magnitude for a robust solve."""

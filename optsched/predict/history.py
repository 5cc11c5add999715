"""Online rolling statistics of finished jobs, per user and per tenant.

The runtime predictor's ``hist_*`` features come from here, and only from here: the
simulator calls :meth:`RuntimeHistory.observe` whenever a job ends and
:meth:`RuntimeHistory.features_for` when it writes a pending job into a snapshot (the result
goes into ``job.features``), and the trainer replays a trace through the same class. Train
and serve features are therefore computed by the same code.

Only jobs that *ended strictly before* ``now`` count, whatever order ``observe`` was called
in, so a job that is still running (or ends in the future of a replayed trace) never leaks
into the features of a submission.
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from dataclasses import dataclass, field

WINDOW = 64
"""Statistics use at most the last ``WINDOW`` finished jobs of each user or tenant."""

HIST_KEYS: tuple[str, ...] = tuple(
    f"hist_{scope}_{stat}"
    for scope in ("user", "tenant")
    for stat in ("n", "mean_log_s", "std_log_s", "median_s", "mean_s", "last_s")
)
"""Keys returned by :meth:`RuntimeHistory.features_for`, in a fixed order."""


@dataclass
class _Series:
    """Finished jobs of one user or tenant, kept sorted by end time."""

    ends: list[float] = field(default_factory=list)
    runtimes: list[float] = field(default_factory=list)

    def add(self, end_s: float, runtime_s: float) -> None:
        # bisect_right keeps insertion order among equal end times (deterministic).
        i = bisect.bisect_right(self.ends, end_s)
        self.ends.insert(i, end_s)
        self.runtimes.insert(i, runtime_s)

    def before(self, now: float, window: int) -> list[float]:
        """Runtimes of the last ``window`` jobs that ended strictly before ``now``."""
        k = bisect.bisect_left(self.ends, now)
        return self.runtimes[max(0, k - window) : k]


def _stats(prefix: str, values: list[float]) -> dict[str, float]:
    n = len(values)
    if n == 0:
        nan = math.nan
        return {
            f"{prefix}_n": 0.0,
            f"{prefix}_mean_log_s": nan,
            f"{prefix}_std_log_s": nan,
            f"{prefix}_median_s": nan,
            f"{prefix}_mean_s": nan,
            f"{prefix}_last_s": nan,
        }
    logs = [math.log1p(v) for v in values]
    mean_log = sum(logs) / n
    var = sum((x - mean_log) ** 2 for x in logs) / n
    srt = sorted(values)
    mid = n // 2
    median = srt[mid] if n % 2 else 0.5 * (srt[mid - 1] + srt[mid])
    return {
        f"{prefix}_n": float(n),
        f"{prefix}_mean_log_s": mean_log,
        f"{prefix}_std_log_s": math.sqrt(var),
        f"{prefix}_median_s": float(median),
        f"{prefix}_mean_s": sum(values) / n,
        f"{prefix}_last_s": float(values[-1]),
    }


class RuntimeHistory:
    """Rolling runtime statistics of finished jobs, per user and per tenant.

    Parameters
    ----------
    window:
        How many of the most recent finished jobs (by end time) each statistic uses.

    Notes
    -----
    Users are keyed by ``(tenant, user)``; an empty ``user`` is "unknown" and gets no user
    statistics (``hist_user_n == 0`` and NaN for the rest, which LightGBM treats as missing).
    """

    def __init__(self, window: int = WINDOW) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.window = window
        self._users: dict[tuple[str, str], _Series] = defaultdict(_Series)
        self._tenants: dict[str, _Series] = defaultdict(_Series)

    def observe(self, tenant: str, user: str, end_s: float, runtime_s: float) -> None:
        """Record a job of ``tenant``/``user`` that ran ``runtime_s`` seconds and ended at
        ``end_s``.

        Raises
        ------
        ValueError
            If ``runtime_s`` is negative or a time is not finite.
        """
        if not (math.isfinite(end_s) and math.isfinite(runtime_s)):
            raise ValueError(f"end_s and runtime_s must be finite, got {end_s}, {runtime_s}")
        if runtime_s < 0:
            raise ValueError(f"runtime_s must be >= 0, got {runtime_s}")
        self._tenants[str(tenant)].add(float(end_s), float(runtime_s))
        if user:
            self._users[(str(tenant), str(user))].add(float(end_s), float(runtime_s))

    def features_for(self, tenant: str, user: str, now: float) -> dict[str, float]:
        """The ``hist_*`` features of a job of ``tenant``/``user`` submitted at ``now``.

        Only jobs that ended strictly before ``now`` are used. Keys are :data:`HIST_KEYS`.
        """
        user_series = self._users.get((str(tenant), str(user))) if user else None
        uvals = user_series.before(now, self.window) if user_series is not None else []
        tser = self._tenants.get(str(tenant))
        tvals = tser.before(now, self.window) if tser is not None else []
        out = _stats("hist_user", uvals)
        out.update(_stats("hist_tenant", tvals))
        return out

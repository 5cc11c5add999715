"""A minimal discrete-event engine: a heap ordered by ``(time, priority, seq)``.

``seq`` is a counter, so events at the same time and priority come out in the order they were
pushed (SimPy's rule) and every run is reproducible. Lower priority values come first; the
simulator uses :class:`Kind` as the priority: at one instant, completions free GPUs before
arrivals join the queue, and a decision sees both.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from enum import IntEnum


class Kind(IntEnum):
    """Event kinds, in the order they are handled at one instant."""

    COMPLETION = 0
    ARRIVAL = 1
    DECIDE = 2


@dataclass(order=True, frozen=True)
class Event:
    time: float
    kind: Kind
    seq: int
    job: int = field(default=-1, compare=False)
    """Index of the job concerned (-1 for decisions)."""
    version: int = field(default=0, compare=False)
    """For completions: the job's run version when scheduled (stale ones are ignored)."""


class EventQueue:
    """The future event list."""

    def __init__(self) -> None:
        self._heap: list[Event] = []
        self._seq = 0

    def push(self, time: float, kind: Kind, job: int = -1, version: int = 0) -> Event:
        ev = Event(time, kind, self._seq, job, version)
        self._seq += 1
        heapq.heappush(self._heap, ev)
        return ev

    def pop(self) -> Event:
        return heapq.heappop(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

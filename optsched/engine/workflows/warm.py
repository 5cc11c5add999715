"""Which models stay warm: evict a model whose predicted next use is past its reload's break-even.

A model resident on an idle pool GPU costs one GPU-second per second (idle-resident time); evicting
it and loading it again later costs its load time on that GPU type. After a schedule is built,
every model still resident at the end of a device's planned work has no *known* next use there:
its next use comes from sessions that have not arrived yet. Its predicted gap is

``gap = holders / rate``

with ``rate`` the arrival rate of sessions that use the model (sessions in the snapshot that
arrived in the last ``window_s`` seconds, per second) and ``holders`` the devices that end the
schedule with the model resident (they share the next arrivals). The model is kept warm when
``gap < load_s`` (the reload would cost more than keeping it until then) and evicted right after
its last planned use on the device otherwise; with no recent arrival that uses it the gap is
infinite and it is evicted. Every quantity is read from the snapshot and the schedule, so the
rule is a pure function of them.
"""

from __future__ import annotations

import math
from collections import defaultdict

from optsched.engine.workflows.problem import Problem

WARM_WINDOW_S = 30.0
"""Seconds of recent arrivals the keep-warm rule estimates each model's arrival rate from."""


def model_arrival_rate(prob: Problem, window_s: float = WARM_WINDOW_S) -> dict[str, float]:
    """Sessions per second that arrived in the last ``window_s`` and use each model."""
    wf = prob.state.snapshot.workflows
    assert wf is not None
    count: dict[str, int] = defaultdict(int)
    for s in wf.sessions:
        if prob.now - window_s <= s.arrival_s <= prob.now + 1e-9:
            for m in {a.model for a in s.activations}:
                count[m] += 1
    return {m: n / window_s for m, n in count.items()}


def next_use_gap_s(holders: int, rate: float) -> float:
    """Predicted seconds until one of ``holders`` devices gets a new session's work (``inf``
    without arrivals)."""
    return math.inf if rate <= 0 else holders / rate


def cold_evictions(
    prob: Problem, resident_end: list[dict[str, float]], window_s: float = WARM_WINDOW_S
) -> list[tuple[int, str, str, float]]:
    """Evictions ``(device index, model, "evict", at_s)`` for the models that end a schedule
    resident (``resident_end[d]``: model -> its last planned use on device ``d``, ``now`` when
    none) and whose predicted next use comes after their reload cost is repaid."""
    rate = model_arrival_rate(prob, window_s)
    holders: dict[str, int] = defaultdict(int)
    for res in resident_end:
        for m in res:
            holders[m] += 1
    out: list[tuple[int, str, str, float]] = []
    for d, res in enumerate(resident_end):
        gtype = prob.devices[d].gtype
        for m in sorted(res):
            gap = next_use_gap_s(holders[m], rate.get(m, 0.0))
            if gap >= prob.load[(m, gtype)]:
                out.append((d, m, "evict", max(prob.now, res[m])))
    return out

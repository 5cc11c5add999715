"""The constructor: semantics-preserving unit alternatives and model-lifecycle options.

Unit alternatives (each pending activation is covered by exactly one chosen alternative):

* ``single`` — the activation alone;
* ``siblings`` — activations of one session and one model whose pending dependencies are the
  same set (they become ready together): run as one batch with a shared prompt prefix, so one
  prefill of the common context, one decode loop, no second load and no transfer;
* ``chain`` — an activation and its only pending dependency when both use the same model: the
  second reuses the first one's KV cache on the same device (no transfer, no reload).

Fusion never changes what an activation computes: the same prompt and the same output length;
only how the batch is formed. Model lifecycle options per device are *keep* (resident models
stay), *load ahead* (start loading before the device is free, as soon as memory allows) and
*evict* (free memory after the model's last planned use); each option's cost is its load
seconds (:attr:`Problem.load`) and the idle-resident GPU-seconds it implies.

The records it reads and writes, :class:`Act` (a pending activation) and :class:`Cand` (one
alternative), live here; :mod:`optsched.engine.workflows.problem` builds them into a ``Problem``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

ActKey = tuple[str, str]
"""(session id, activation id)."""


@dataclass
class Act:
    """A pending activation."""

    key: ActKey
    model: str
    input_tokens: int
    output_tokens: int
    deps: tuple[str, ...]
    """Pending dependencies (activation ids in the same session)."""
    release: float
    """Earliest start allowed by done/running dependencies and the clock."""
    arrival: float


@dataclass
class Cand:
    """One unit alternative: one activation or several fused (same model, same session)."""

    session: str
    members: tuple[str, ...]
    model: str
    kind: str
    """``single``, ``siblings`` (batched, shared prefix) or ``chain`` (KV reuse)."""
    dur: dict[str, float] = field(default_factory=dict)
    """Predicted seconds per GPU type."""


def alternatives(acts: dict[ActKey, Act], *, fusion: bool = True, max_group: int = 4) -> list[Cand]:
    """Every unit alternative for the pending activations ``acts`` (deterministic order)."""
    out: list[Cand] = []
    for (sid, aid), a in sorted(acts.items()):
        out.append(Cand(session=sid, members=(aid,), model=a.model, kind="single"))
    if not fusion:
        return out
    groups: dict[tuple[str, str, tuple[str, ...]], list[str]] = defaultdict(list)
    succ: dict[ActKey, list[str]] = defaultdict(list)
    for (sid, aid), a in sorted(acts.items()):
        groups[(sid, a.model, tuple(sorted(a.deps)))].append(aid)
        for dep in a.deps:
            succ[(sid, dep)].append(aid)
    for (sid, model, _), members in sorted(groups.items()):
        for k in range(0, len(members), max_group):
            chunk = members[k : k + max_group]
            if len(chunk) > 1:
                out.append(Cand(session=sid, members=tuple(chunk), model=model, kind="siblings"))
    for (sid, aid), a in sorted(acts.items()):
        if len(a.deps) != 1:
            continue
        dep = a.deps[0]
        d = acts[(sid, dep)]
        if d.model == a.model:
            out.append(Cand(session=sid, members=(dep, aid), model=a.model, kind="chain"))
    return out

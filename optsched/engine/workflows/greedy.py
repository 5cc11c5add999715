"""List scheduling with model residency: the greedy fallback and the baselines' engine.

A :class:`ListPolicy` fixes four choices: the *order* in which ready units are taken, the
*placement* rule, the *eviction* rule and whether loads start *ahead* of the device being free.
:func:`list_schedule` builds a complete :class:`Schedule` (every pending activation placed,
model actions included) that passes invariant 6 by construction:

* a unit starts after its predecessor units, its release, the device's previous unit and the
  load of its model;
* a load starts once the models it displaces are past their last planned use (and, without
  load-ahead, once the device is free); loads on one device are serialised;
* resident memory plus loads never exceed the device's memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from optsched.engine.workflows.problem import ActKey, Cand, Dev, Problem
from optsched.engine.workflows.warm import cold_evictions
from optsched.schema.decision import ModelAction, Unit, WorkflowPlan
from optsched.schema.snapshot import GpuRef

Order = Literal["fcfs", "heft", "peft", "las", "srpt", "aged", "lasrank", "lst"]
Placement = Literal["eft", "est", "first_free", "peft"]
Eviction = Literal["lru", "demand"]


@dataclass(frozen=True)
class ListPolicy:
    """The knobs of one list-scheduling policy."""

    name: str
    order: Order
    placement: Placement
    eviction: Eviction = "lru"
    load_ahead: bool = False
    fusion: bool = False
    load_weight: float = 0.0
    """Placement penalty per second of model loading (GPU-seconds spent on setup)."""
    keep_warm: bool = False
    """Evict, after its last planned use, every model whose predicted next use on the device
    comes after its reload cost is repaid (:mod:`optsched.engine.workflows.warm`)."""
    mix_weight: float = 1.0
    """Second-term weight of the mixed orders: ``aged`` (seconds of remaining work forgiven
    per second waited), ``lasrank`` and ``lst`` (seconds of priority per second of upward
    rank)."""


@dataclass
class Placed:
    cand: Cand
    dev: int
    start: float
    end: float


@dataclass
class Schedule:
    """A complete schedule: placed units plus model actions, times in seconds."""

    placed: list[Placed] = field(default_factory=list)
    actions: list[tuple[int, str, str, float]] = field(default_factory=list)
    """(device index, model, ``load``/``evict``, at_s)."""

    def to_plan(
        self, prob: Problem, status: str | None = None, notes: list[str] | None = None
    ) -> WorkflowPlan:
        units = []
        for k, p in enumerate(sorted(self.placed, key=lambda x: (x.start, x.dev, x.cand.members))):
            key = prob.devices[p.dev].key
            units.append(
                Unit(
                    id=f"u{k}:{p.cand.session}:{p.cand.members[0]}",
                    session=p.cand.session,
                    activations=list(p.cand.members),
                    model=p.cand.model,
                    device=GpuRef(node=key[0], gpu=key[1]),
                    start_s=p.start,
                    end_s=p.end,
                )
            )
        acts = []
        for d, m, what, at in sorted(self.actions, key=lambda x: (x[3], x[2] != "evict", x[0])):
            key = prob.devices[d].key
            acts.append(
                ModelAction(
                    device=GpuRef(node=key[0], gpu=key[1]),
                    model=m,
                    action="load" if what == "load" else "evict",
                    at_s=at,
                )
            )
        st: Literal["optimal", "feasible", "fallback"] | None = None
        if status == "optimal":
            st = "optimal"
        elif status == "feasible":
            st = "feasible"
        elif status == "fallback":
            st = "fallback"
        return WorkflowPlan(
            units=units,
            model_actions=acts,
            status=st,
            notes=list(notes or []),
        )


@dataclass
class DevState:
    """Residency and timeline of one device while a schedule is being built."""

    free_at: float
    load_free_at: float
    models: dict[str, list[float]]
    """model -> [ready_at, last_use]."""


def select_alternatives(prob: Problem, fusion: bool) -> list[Cand]:
    """A disjoint cover of the pending activations: largest sibling groups, then chains."""
    covered: set[ActKey] = set()
    chosen: list[Cand] = []
    order = {"siblings": 0, "chain": 1, "single": 2}
    cands = sorted(prob.cands, key=lambda c: (order[c.kind], -len(c.members), c.session, c.members))
    for c in cands:
        if c.kind != "single" and not fusion:
            continue
        keys = [(c.session, a) for a in c.members]
        if any(k in covered for k in keys):
            continue
        covered.update(keys)
        chosen.append(c)
    return chosen


def unit_preds(units: list[Cand], prob: Problem) -> list[list[int]]:
    """Indices of the units each unit waits for."""
    where: dict[ActKey, int] = {}
    for i, c in enumerate(units):
        for a in c.members:
            where[(c.session, a)] = i
    preds: list[list[int]] = []
    for i, c in enumerate(units):
        ps: set[int] = set()
        for a in c.members:
            for dep in prob.acts[(c.session, a)].deps:
                j = where[(c.session, dep)]
                if j != i:
                    ps.add(j)
        preds.append(sorted(ps))
    return preds


def initial_states(prob: Problem) -> list[DevState]:
    out = []
    for d in prob.devices:
        models = {m: [prob.now, d.free_at if m in d.pinned else prob.now] for m in d.resident}
        out.append(DevState(free_at=d.free_at, load_free_at=prob.now, models=models))
    return out


def oct_table(prob: Problem) -> dict[ActKey, dict[str, float]]:
    """PEFT's optimistic cost table per activation and GPU type (no transfer costs)."""
    gt = prob.gtypes
    succ: dict[ActKey, list[ActKey]] = {k: [] for k in prob.acts}
    for k, a in prob.acts.items():
        for dep in a.deps:
            succ[(k[0], dep)].append(k)
    dur: dict[ActKey, dict[str, float]] = {}
    for c in prob.cands:
        if c.kind == "single":
            dur[(c.session, c.members[0])] = c.dur
    table: dict[ActKey, dict[str, float]] = {}

    def visit(k: ActKey) -> dict[str, float]:
        if k in table:
            return table[k]
        row = {}
        for t in gt:
            row[t] = max((min(visit(s)[u] + dur[s][u] for u in gt) for s in succ[k]), default=0.0)
        table[k] = row
        return row

    for k in sorted(prob.acts):
        visit(k)
    return table


def _place(
    prob: Problem, st: DevState, dev: Dev, c: Cand, ready: float, policy: ListPolicy
) -> tuple[float, float, list[tuple[str, str, float]], float] | None:
    """Start, end, actions and load-ready time of ``c`` on ``dev``; ``None`` if it cannot fit."""
    if not prob.fits(c.model, dev):
        return None
    m = c.model
    actions: list[tuple[str, str, float]] = []
    if m in st.models:
        load_ready = st.models[m][0]
    else:
        used = sum(prob.mem[x] for x in st.models)
        need = used + prob.mem[m] - dev.mem_gib
        evict_at = prob.now
        if need > 1e-9:
            if policy.eviction == "lru":
                victims = sorted(st.models, key=lambda x: (st.models[x][1], x))
            else:
                victims = sorted(st.models, key=lambda x: (prob.demand.get(x, 0.0) > 0, st.models[x][1], x))
            for v in victims:
                if need <= 1e-9:
                    break
                t = max(prob.now, st.models[v][1])
                actions.append((v, "evict", t))
                evict_at = max(evict_at, t)
                need -= prob.mem[v]
            if need > 1e-9:
                return None
        start_load = max(prob.now, evict_at, st.load_free_at)
        if not policy.load_ahead:
            start_load = max(start_load, st.free_at)
        actions.append((m, "load", start_load))
        load_ready = start_load + prob.load[(m, dev.gtype)]
    start = max(ready, st.free_at, load_ready)
    return start, start + c.dur[dev.gtype], actions, load_ready


def list_schedule(
    prob: Problem,
    policy: ListPolicy,
    units: list[Cand] | None = None,
    states: list[DevState] | None = None,
    attained: dict[str, float] | None = None,
    done_end: dict[int, float] | None = None,
) -> Schedule:
    """Place ``units`` (default: :func:`select_alternatives`) one at a time by ``policy``."""
    if units is None:
        units = select_alternatives(prob, policy.fusion)
    states = states if states is not None else initial_states(prob)
    preds = unit_preds(units, prob)
    attained = dict(attained if attained is not None else prob.attained)
    remaining: dict[str, float] = {}
    rank = {}
    for i, c in enumerate(units):
        rank[i] = max(prob.rank[(c.session, a)] for a in c.members)
        mean = sum(c.dur.values()) / len(c.dur)
        remaining[c.session] = remaining.get(c.session, 0.0) + mean
    octs = oct_table(prob) if policy.order == "peft" or policy.placement == "peft" else {}

    def oct_of(i: int, t: str) -> float:
        c = units[i]
        return max(octs[(c.session, a)][t] for a in c.members)

    def key(i: int) -> tuple[float | str, ...]:
        c = units[i]
        rel = min(prob.acts[(c.session, a)].release for a in c.members)
        arr = prob.session_arrival[c.session]
        if policy.order == "fcfs":
            return (arr, rel, c.session, c.members[0])
        if policy.order == "heft":
            return (-rank[i], arr, c.session, c.members[0])
        if policy.order == "peft":
            return (
                -sum(oct_of(i, t) + c.dur[t] for t in c.dur) / len(c.dur),
                arr,
                c.session,
                c.members[0],
            )
        if policy.order == "las":
            return (attained.get(c.session, 0.0), arr, c.session, c.members[0])
        if policy.order == "lasrank":
            return (attained.get(c.session, 0.0) - policy.mix_weight * rank[i], arr, c.session, c.members[0])
        if policy.order == "lst":
            return (arr - policy.mix_weight * rank[i], c.session, c.members[0])
        w = prob.session_weight.get(c.session, 1.0)
        if policy.order == "aged":
            age = prob.now - arr
            return (
                (remaining[c.session] - policy.mix_weight * age) / w,
                -rank[i],
                arr,
                c.session,
                c.members[0],
            )
        return (remaining[c.session] / w, -rank[i], arr, c.session, c.members[0])

    end: dict[int, float] = dict(done_end or {})
    npred = [len([p for p in ps if p not in end]) for ps in preds]
    succ: list[list[int]] = [[] for _ in units]
    for i, ps in enumerate(preds):
        for p in ps:
            succ[p].append(i)
    ready_set = {i for i in range(len(units)) if npred[i] == 0 and i not in end}
    sched = Schedule()
    while ready_set:
        i = min(ready_set, key=key)
        ready_set.discard(i)
        c = units[i]
        ready = max([prob.acts[(c.session, a)].release for a in c.members] + [end[p] for p in preds[i]])
        best: (
            tuple[tuple[float, ...], int, tuple[float, float, list[tuple[str, str, float]], float]] | None
        ) = None
        for d, dev in enumerate(prob.devices):
            res = _place(prob, states[d], dev, c, ready, policy)
            if res is None:
                continue
            s, e, acts, _ = res
            loading = sum(1 for _, what, _ in acts if what == "load")
            setup = policy.load_weight * loading * prob.load[(c.model, dev.gtype)]
            if policy.placement == "eft":
                score: tuple[float, ...] = (e + setup, s, d)
            elif policy.placement == "est":
                score = (s, e, d)
            elif policy.placement == "peft":
                score = (e + oct_of(i, dev.gtype), e, d)
            else:  # first_free: setup-unaware, earliest free device, resident model breaks ties
                score = (
                    max(states[d].free_at, ready),
                    0.0 if c.model in states[d].models else 1.0,
                    d,
                )
            if best is None or score < best[0]:
                best = (score, d, res)
        if best is None:
            raise ValueError(f"model '{c.model}' fits on no pool device")
        _, d, (s, e, acts, load_ready) = best
        st = states[d]
        for m, what, at in acts:
            sched.actions.append((d, m, what, at))
            if what == "evict":
                del st.models[m]
            else:
                st.models[m] = [load_ready, load_ready]
                st.load_free_at = load_ready
        st.models[c.model][1] = max(st.models[c.model][1], e)
        st.free_at = e
        end[i] = e
        sched.placed.append(Placed(cand=c, dev=d, start=s, end=e))
        mean = sum(c.dur.values()) / len(c.dur)
        attained[c.session] = attained.get(c.session, 0.0) + mean
        remaining[c.session] -= mean
        for j in succ[i]:
            npred[j] -= 1
            if npred[j] == 0:
                ready_set.add(j)
    if policy.keep_warm:
        sched.actions.extend(cold_evictions(prob, [{m: v[1] for m, v in st.models.items()} for st in states]))
    return sched


OURS_GREEDY = ListPolicy(
    "greedy",
    order="lst",
    placement="eft",
    eviction="demand",
    load_ahead=True,
    fusion=True,
    load_weight=2.0,
    mix_weight=1.5,
    keep_warm=True,
)
"""The planner's own greedy (fallback and CP-SAT hint): least slack first (arrival minus 1.5 x
the remaining critical path), earliest finish plus 2 x the load seconds it adds, fusion,
load-ahead, eviction of the model with the least pending demand, and models kept warm only
while their predicted next use comes before their reload cost is repaid."""

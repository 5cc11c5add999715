"""The workflow sub-problem of one epoch, built from a :class:`ClusterState`.

:func:`build_workflow_problem` turns the ``workflows`` part of a snapshot into index-friendly
records: pool devices (type, memory, when free, resident models), pending activations with
their dependencies, the constructor's unit alternatives (:mod:`optsched.engine.workflows.construct`)
and the predicted duration of every alternative on every GPU type. It also propagates the DAGs
(networkx) to forecast readiness (``release``), upward ranks and future model demand.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from optsched.engine.state import ClusterState, GpuKey
from optsched.engine.workflows.check import device_free_at, model_load_s
from optsched.engine.workflows.construct import Act, ActKey, Cand, alternatives
from optsched.predict.activation import GIB_TO_GB, KV_RESERVE, ActivationPredictor, ModelSpec


@dataclass
class Dev:
    """A pool GPU as the planner sees it."""

    key: GpuKey
    gtype: str
    mem_gib: float
    free_at: float
    resident: tuple[str, ...]
    pinned: frozenset[str]
    """Models a running activation uses until ``free_at``."""


@dataclass
class Problem:
    """Everything a workflow planner reads for one epoch."""

    state: ClusterState
    now: float
    devices: list[Dev]
    acts: dict[ActKey, Act]
    cands: list[Cand]
    specs: dict[str, ModelSpec]
    mem: dict[str, float]
    load: dict[tuple[str, str], float]
    """(model, GPU type) -> load seconds as the checker counts them."""
    session_arrival: dict[str, float]
    session_weight: dict[str, float]
    attained: dict[str, float]
    """Seconds of service each session received so far (predicted, for LAS)."""
    rank: dict[ActKey, float] = field(default_factory=dict)
    """Upward rank: mean-type duration of the activation plus its longest pending tail."""
    demand: dict[str, float] = field(default_factory=dict)
    """Predicted seconds of pending work per model (future model demand)."""

    @property
    def gtypes(self) -> list[str]:
        return sorted({d.gtype for d in self.devices})

    def fits(self, model: str, dev: Dev) -> bool:
        return self.mem[model] <= dev.mem_gib + 1e-9


def model_spec(params_b: float | None, memory_gib: float) -> ModelSpec:
    """Predictor spec; without ``params_b``, assume fp16 weights filling the non-KV share."""
    if params_b is None:
        params_b = memory_gib * (1.0 - KV_RESERVE) * GIB_TO_GB / 2.0
    return ModelSpec(params_b=params_b, memory_gib=memory_gib)


def unit_seconds(
    pred: ActivationPredictor, spec: ModelSpec, members: list[tuple[int, int, bool]], gtype: str
) -> float:
    """Duration of a unit: ``members`` are (input, output, depends_on_previous) in order.

    Consecutive members that do not depend on the previous one form a *wave* that runs as one
    batch: their common prefix (the smallest input) is prefilled once and they decode together.
    A member that depends on the previous one starts a new wave and reuses its KV cache: only
    the input beyond the previous member's context is prefilled.
    """
    waves: list[list[tuple[int, int]]] = []
    reuse: list[int] = []
    for k, (inp, out, chained) in enumerate(members):
        if k == 0 or chained:
            prev_ctx = 0
            if k > 0:
                prev_ctx = max(i + o for i, o in waves[-1])
            waves.append([(inp, out)])
            reuse.append(prev_ctx)
        else:
            waves[-1].append((inp, out))
    total = 0.0
    for wave, prev_ctx in zip(waves, reuse, strict=True):
        ins = [i for i, _ in wave]
        shared = min(ins) if len(wave) > 1 else 0
        raw = sum(ins) - (len(wave) - 1) * shared
        tokens = max(0.1 * raw, raw - prev_ctx)
        total += pred.prefill_s(spec, tokens, gtype)
        total += pred.decode_s(spec, max(o for _, o in wave), max(ins), gtype, batch=len(wave))
    return max(total, 1e-3)


def build_workflow_problem(
    state: ClusterState,
    pred: ActivationPredictor | None = None,
    *,
    fusion: bool = True,
    max_group: int = 4,
) -> Problem:
    """Read the workflow part of ``state`` and run the constructor and the DAG forecast."""
    pred = pred or ActivationPredictor.default()
    snap = state.snapshot
    wf = snap.workflows
    assert wf is not None, "snapshot has no workflows"
    now = snap.now
    specs = {m: model_spec(x.params_b, x.memory_gib) for m, x in wf.models.items()}
    mem = {m: x.memory_gib for m, x in wf.models.items()}
    devices: list[Dev] = []
    pinned: dict[GpuKey, set[str]] = defaultdict(set)
    running_end: dict[ActKey, float] = {}
    for s in wf.sessions:
        for a in s.activations:
            if a.state == "running" and a.device is not None:
                pinned[a.device.key()].add(a.model)
                running_end[(s.id, a.id)] = device_free_at(state, a.device.key())
    for d in wf.pool:
        gtype = state.node_type(d.node)
        devices.append(
            Dev(
                key=d.key(),
                gtype=gtype,
                mem_gib=snap.gpu_types[gtype].memory_gib,
                free_at=device_free_at(state, d.key()),
                resident=tuple(d.resident),
                pinned=frozenset(pinned[d.key()]),
            )
        )
    gtypes = sorted({d.gtype for d in devices})
    load = {(m, t): model_load_s(state, m, t) for m in wf.models for t in gtypes}

    acts: dict[ActKey, Act] = {}
    attained: dict[str, float] = {}
    arrival: dict[str, float] = {}
    weight: dict[str, float] = {}
    tw = {t.id: t.weight for t in snap.tenants}
    for s in wf.sessions:
        arrival[s.id] = s.arrival_s
        weight[s.id] = tw.get(s.tenant, 1.0)
        states = {a.id: a for a in s.activations}
        served = 0.0
        for a in s.activations:
            if a.state != "pending":
                served += (
                    min(pred.latency_s(specs[a.model], a.input_tokens, a.output_tokens, t) for t in gtypes)
                    if gtypes
                    else 0.0
                )
                continue
            release = max(now, s.arrival_s)
            deps: list[str] = []
            for dep in a.after:
                dstate = states[dep].state
                if dstate == "running":
                    release = max(release, running_end[(s.id, dep)])
                elif dstate == "pending":
                    deps.append(dep)
            acts[(s.id, a.id)] = Act(
                key=(s.id, a.id),
                model=a.model,
                input_tokens=a.input_tokens,
                output_tokens=a.output_tokens,
                deps=tuple(deps),
                release=release,
                arrival=s.arrival_s,
            )
        attained[s.id] = served
    cands = alternatives(acts, fusion=fusion, max_group=max_group)
    for c in cands:
        members = []
        prev: str | None = None
        for aid in c.members:
            pa = acts[(c.session, aid)]
            members.append((pa.input_tokens, pa.output_tokens, prev is not None and prev in pa.deps))
            prev = aid
        c.dur = {t: unit_seconds(pred, specs[c.model], members, t) for t in gtypes}
    prob = Problem(
        state=state,
        now=now,
        devices=devices,
        acts=acts,
        cands=cands,
        specs=specs,
        mem=mem,
        load=load,
        session_arrival=arrival,
        session_weight=weight,
        attained=attained,
    )
    _forecast(prob, pred)
    return prob


def _forecast(prob: Problem, pred: ActivationPredictor) -> None:
    """DAG propagation: upward ranks, readiness forecast and future model demand."""
    import networkx as nx

    gtypes = prob.gtypes
    graph: nx.DiGraph = nx.DiGraph()
    single_dur: dict[ActKey, float] = {}
    for key, a in prob.acts.items():
        spec = prob.specs[a.model]
        ok = [t for t in gtypes if any(prob.fits(a.model, d) for d in prob.devices if d.gtype == t)]
        durs = [pred.latency_s(spec, a.input_tokens, a.output_tokens, t) for t in ok or gtypes]
        single_dur[key] = sum(durs) / len(durs)
        graph.add_node(key)
        for dep in a.deps:
            graph.add_edge((key[0], dep), key)
    for key in reversed(list(nx.topological_sort(graph))):
        tail = max((prob.rank[s] for s in graph.successors(key)), default=0.0)
        prob.rank[key] = single_dur[key] + tail
    # forecast readiness: earliest start by longest path of predecessors from the release
    for key in nx.topological_sort(graph):
        act = prob.acts[key]
        for p in graph.predecessors(key):
            act.release = max(act.release, prob.acts[p].release + single_dur[p])
    demand: dict[str, float] = defaultdict(float)
    for key, a in prob.acts.items():
        demand[a.model] += single_dur[key]
    prob.demand = dict(demand)

"""The simulated cluster: ground truth, snapshot building, decision application.

The simulator is a *client* of the scheduling API: at every decision it builds a format-1
:class:`~optsched.schema.Snapshot` holding only what an embedding scheduler would know (the
trace's runtime estimate, never the truth, unless ``oracle_runtime`` is chosen), asks the
policy for a :class:`~optsched.schema.Decision`, runs :func:`optsched.check_decision` on it (a
violation raises :class:`SimulationError`) and applies it.

Ground truth (:class:`GroundTruth`), hidden from the policy:

* true exclusive runtime = the trace's duration × ``exp(N(0, runtime_jitter))`` (seeded);
* colocation speeds of an MPS pair = the speeds of their workload profiles from the trace's
  :class:`~optsched.sim.profiles.Interference` (Lucid's measured pairs read from the traces
  path, or the synthetic law of :mod:`optsched.sim.synthetic`; ``EventLog.interference`` says
  which) × ``exp(N(0, pair_jitter))`` (seeded per pair), clipped to ``[0.3, 1]``.

Mechanics:

* a running job progresses at rate 1 (exclusive) or at its colocated speed while it shares
  GPUs; the pair's host and guest both slow down;
* preemption loses the work since the last checkpoint (``checkpoint_s`` of wall time after the
  run started) and the next start pays ``restart_overhead_s`` more work;
* when a host stops, its guest keeps its GPUs and runs alone (it is *promoted*); it is marked
  ``on_loan`` if its tenant's own use is then above quota, so it can be reclaimed;
* an elastic job (``TraceJob.min_gpus``/``max_gpus``) has ``gpus x duration_s`` GPU-seconds
  of work and progresses at a rate linear in its size (``g / gpus`` of its trace speed on
  ``g`` GPUs); a resize checkpoints it and resumes it at its new size, losing
  ``resize_overhead_s`` of progress at the new size and no other work (logged in
  ``EventLog.resizes`` and in the job's ``lost_gpu_s``/``lost_work_gpu_s``);
* decisions happen at every epoch tick (``epoch_s``) when jobs are pending or something
  changed, and, with ``events`` (the default), at every arrival or completion instant, where
  a policy's ``decide_event`` (optsched's event path) is used when it has one; without
  ``events``, with ``trigger``, after an arrival or completion (at most one per
  ``min_gap_s``);
* ``mode="partitioned"`` gives every tenant ``borrow_limit`` 0 on every type in the
  snapshots (no loans; guests on own hosts only); ``load_scale`` is applied by the trace
  loader (:func:`optsched.sim.trace.scale_arrivals`).
"""

from __future__ import annotations

import gc
import heapq
import math
import random
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from optsched.engine.check import check_decision
from optsched.engine.shape import default_pieces
from optsched.engine.state import MEMORY_EPS, ClusterState
from optsched.schema.snapshot import (
    GpuRef,
    GpuType,
    Job,
    Node,
    Snapshot,
    Tenant,
    TenantQos,
)
from optsched.sim.clock import EventQueue, Kind
from optsched.sim.expected import ExpectedStarts
from optsched.sim.profiles import Interference, ProfileKey
from optsched.sim.synthetic import synthetic_interference

if TYPE_CHECKING:
    from optsched.schema.decision import Decision
    from optsched.sim.trace import Trace, TraceJob


class SimulationError(RuntimeError):
    """A policy returned a decision that breaks the spec (or the simulation cannot go on)."""


class Policy(Protocol):
    """A scheduling policy: one decision per snapshot, through the format-1 contract."""

    name: str

    def decide(self, snapshot: Snapshot, state: ClusterState) -> Decision: ...


def idle_when_nothing_fits(policy: Any) -> str | None:
    """What ``policy`` declares in ``idle_when_nothing_fits``: it keeps no state between
    decisions and only starts jobs alone on free GPUs (no preemption, colocation or resize), so
    when no job that could start fits the free GPUs of a type it may use (inside its tenant's
    quota where the tenant may not borrow), its decision starts nothing and changes nothing.
    ``"any"``: every pending job could start (backfill); ``"head"``: only the first pending
    job by ``(submit_s, id)`` of each queue (strict FIFO: it blocks the rest of its queue; one
    queue for the cluster, or one per tenant when tenants may not borrow, ``partitioned``: see
    :func:`optsched.sim.policies.fifo_queue`); ``None``: no such promise."""
    value = getattr(policy, "idle_when_nothing_fits", None)
    if value not in (None, "any", "head"):
        raise ValueError(f"idle_when_nothing_fits must be 'any', 'head' or None, not {value!r}")
    return value


def clock_free(policy: Any) -> bool:
    """Whether ``policy`` declares ``clock_free``: it keeps no state between decisions, draws
    no random numbers, and its decision is a function of the jobs, their states, the nodes and
    the tenants only, never of the clock (``now``) or of quantities that grow with it (a
    running job's ``restart_cost_s`` may only price a preemption it chose without it). Asked
    again with nothing changed since a decision of its that started, stopped and resized
    nothing, such a policy gives that decision again."""
    value = getattr(policy, "clock_free", False)
    if not isinstance(value, bool):
        raise ValueError(f"clock_free must be True or False, not {value!r}")
    return value


STARTS_BY = ("alone", "guest", "quota")
"""The ways a :func:`starts_by` policy may start a job."""


def starts_by(policy: Any) -> frozenset[str]:
    """What ``policy`` declares in ``starts_by``: it keeps no state between decisions, and its
    decision starts, stops or resizes something only if some waiting job can start in one of
    the ways it names, and its loans are a pure function of the running jobs' use (as for
    :func:`idle_when_nothing_fits`): ``"alone"`` on GPUs no running job holds, of a type it may
    use (inside its tenant's quota where tenants may not borrow); ``"guest"`` as the MPS guest
    of a running job that holds its GPUs alone; ``"quota"`` by preempting other work so that it
    runs inside its tenant's quota (reclaim). The simulator tests a necessary condition of each
    (:meth:`Simulator._could_start`) and, when none holds, logs the decision without asking the
    policy. Empty: no such promise."""
    value = getattr(policy, "starts_by", ())
    if isinstance(value, str) or set(value) - set(STARTS_BY):
        raise ValueError(f"starts_by must name some of {STARTS_BY}, not {value!r}")
    return frozenset(value)


_Figures = tuple[dict[str, float], dict[str, dict[str, Any]]]
"""A decision's ``assurance`` and ``assurance_state``."""


def unchanged_figures(policy: Any) -> Callable[..., _Figures | None] | None:
    """What ``policy`` declares in ``unchanged``: a method ``unchanged(event, tenant_ids,
    assurance_state, state)`` giving the ``assurance`` and ``assurance_state`` of its decision
    (``event``: the event path's, else the epoch's) when no job can start in any way it has
    (:meth:`Simulator._may_change`), from the previous ``assurance_state`` and, when it needs
    them, the engine state (``state()`` builds it); None when that decision may still stop
    something. Its decisions may depend on the clock and carry state from one to the next
    (optsched's assurance signal), so they cannot be repeated; but a decision that changes
    nothing moves only these figures on, and the simulator logs them without asking for it.
    None: no such method."""
    value = getattr(policy, "unchanged", None)
    return value if callable(value) else None


EPOCH, TRIGGER, EVENT = 0, 1, 2
"""``job`` field of a DECIDE event: an epoch tick, a (min-gap) trigger, an event decision."""


@dataclass(frozen=True)
class SimConfig:
    """Simulator parameters (see the module docstring)."""

    epoch_s: float = 300.0
    trigger: bool = True
    min_gap_s: float = 60.0
    checkpoint_s: float = 1800.0
    restart_overhead_s: float = 60.0
    resize_overhead_s: float = 30.0
    """Seconds of progress an elastic job loses per resize (its snapshot's ``resize_overhead_s``)."""
    runtime_jitter: float = 0.05
    pair_jitter: float = 0.03
    guaranteed_shareable: bool = True
    oracle_runtime: bool = False
    check: bool = True
    round_trip_json: bool = False
    max_sim_s: float | None = None
    """Stop at this time (default: last submission + 90 days); unfinished jobs are reported."""
    use_history: bool = True
    """Merge :class:`~optsched.predict.history.RuntimeHistory` ``hist_*`` features."""
    events: bool = True
    """Decide at every arrival and completion instant (no minimum gap; ``trigger`` and
    ``min_gap_s`` are then unused): a policy with ``decide_event`` (optsched: the event path,
    :func:`optsched.engine.admit.decide_event`) uses it there and its full ``decide`` at
    epoch ticks; the other policies use ``decide`` at both."""
    mode: str = "pooled"
    """``pooled`` (tenants borrow idle quota of others) or ``partitioned`` (every tenant's
    quota is a hard partition: ``borrow_limit`` 0 on every type, so nothing runs on loan)."""
    load_scale: float = 1.0
    """Time-compress arrivals by this factor: submission times (from the first one) are
    divided by it, so the offered load grows by the same factor."""
    verify_unchanged: bool = False
    """Ask the policy even where the simulator would log its unchanged decision without asking
    (:func:`unchanged_figures`), and fail when that decision starts, stops or resizes anything
    or carries other assurance figures: the check of :meth:`Simulator._may_change` (tests)."""


class GroundTruth:
    """What really happens: true runtimes and colocation speeds (never shown to policies)."""

    def __init__(self, trace: Trace, seed: int, config: SimConfig,
                 interference: Interference | None = None) -> None:
        self.seed = seed
        self.interference = interference or trace.interference or synthetic_interference()
        self.pair_jitter = config.pair_jitter
        rng = random.Random(seed)
        self.runtime: dict[str, float] = {}
        self.profile: dict[str, ProfileKey | None] = {}
        self.memory: dict[str, float | None] = {}
        for j in trace.jobs:
            f = math.exp(rng.gauss(0.0, config.runtime_jitter)) if config.runtime_jitter else 1.0
            self.runtime[j.id] = max(1.0, j.duration_s * f)
            self.profile[j.id] = j.profile
            self.memory[j.id] = j.memory_gib

    def pair_speeds(self, host: str, guest: str) -> tuple[float, float]:
        """True colocated speeds of ``host`` and ``guest``."""
        a, b = self.interference.pair_speeds(self.profile.get(host), self.profile.get(guest))
        if self.pair_jitter:
            r = random.Random(f"{self.seed}:{host}:{guest}")
            a *= math.exp(r.gauss(0.0, self.pair_jitter))
            b *= math.exp(r.gauss(0.0, self.pair_jitter))
        return (min(1.0, max(0.3, a)), min(1.0, max(0.3, b)))


PENDING, RUNNING, DONE, FUTURE = 1, 2, 3, 0
GC_EVERY = 500


class _SimJob:
    __slots__ = (
        "alloc", "end", "first_start", "gpu_type", "gpus", "guest", "host", "i", "id",
        "last_t", "lost_gpu_s", "lost_work_gpu_s", "on_loan", "pending_job", "preemptions",
        "rate", "refs", "restart_due", "restarts", "run_start", "running_job", "seg_host",
        "seg_start",
        "spec", "state", "tenant", "version", "work_left", "work_run_start",
    )

    def __init__(self, i: int, spec: TraceJob, true_s: float) -> None:
        self.i = i
        self.id = spec.id
        self.spec = spec
        self.tenant = spec.tenant
        self.gpus = spec.gpus
        self.state = FUTURE
        self.work_left = true_s
        self.rate = 1.0
        self.last_t = 0.0
        self.alloc: list[tuple[int, int]] = []
        self.refs: list[GpuRef] = []
        self.gpu_type = ""
        self.run_start = 0.0
        self.work_run_start = 0.0
        self.first_start: float | None = None
        self.end: float | None = None
        self.on_loan = False
        self.host: _SimJob | None = None
        self.guest: _SimJob | None = None
        self.version = 0
        self.pending_job: Job | None = None
        self.running_job: Job | None = None
        self.preemptions = 0
        self.restarts = 0
        self.restart_due = False
        self.lost_gpu_s = 0.0
        self.lost_work_gpu_s = 0.0
        self.seg_start = 0.0
        self.seg_host = True


@dataclass
class EventLog:
    """Everything that happened in one run; metrics are pure functions of it.

    Tables are column dicts (lists of equal length):

    * ``jobs``: ``id, tenant, user, qos, gpus, submit_s, start_s`` (first start, NaN if never),
      ``end_s`` (NaN if unfinished), ``true_s, estimate_s, preemptions, restarts,
      lost_gpu_s, lost_work_gpu_s``;
    * ``segments``: ``job, t0, t1, gpus, rate, host`` — a job ran on ``gpus`` GPUs at
      ``rate`` from ``t0`` to ``t1``; ``host`` = it held the GPUs (guests share a host's);
    * ``preemptions``: ``t, job, reason, lost_s, gpus``;
    * ``resizes``: ``t, job, reason, from_gpus, to_gpus, lost_s`` (elastic jobs);
    * ``decisions``: ``t, seconds`` (policy), ``snapshot_s, state_s, check_s`` (building the
      snapshot, ``ClusterState.from_snapshot``, ``check_decision``), ``pending, running,
      started, preempted, loaned_gpus, on_loan_started, status``;
    * ``assurance``: ``t, tenant, value``;
    * ``expected``: ``t, job, expected_s, actual_s`` — the expected start a decision at ``t``
      announced for a queued job and its actual next start (:mod:`optsched.sim.expected`).
    """

    trace: str
    policy: str
    seed: int
    capacity: int
    window: tuple[float, float]
    tenants: dict[str, dict[str, float]]
    restart_overhead_s: float
    jobs: dict[str, list[Any]] = field(default_factory=dict)
    segments: dict[str, list[Any]] = field(default_factory=dict)
    preemptions: dict[str, list[Any]] = field(default_factory=dict)
    decisions: dict[str, list[Any]] = field(default_factory=dict)
    assurance: dict[str, list[Any]] = field(default_factory=dict)
    resizes: dict[str, list[Any]] = field(
        default_factory=lambda: _cols("t", "job", "reason", "from_gpus", "to_gpus", "lost_s")
    )
    expected: dict[str, list[Any]] = field(default_factory=dict)
    epoch_s: float = 300.0
    """The decision epoch of the run (what "within one epoch" means for expected starts)."""
    sim_seconds: float = 0.0
    """Wall-clock seconds of the run."""
    cpu_seconds: float = 0.0
    """CPU seconds of the simulating process (excludes solver worker processes)."""
    end_time: float = 0.0
    notes: list[str] = field(default_factory=list)
    interference: str = ""
    """Where the colocation speeds came from: ``"lucid:<folder>"`` or ``"synthetic"``."""


def _cols(*names: str) -> dict[str, list[Any]]:
    return {n: [] for n in names}


class HeldGpus(dict[tuple[int, int], Any]):
    """The held (node index, GPU) pairs -> their holder, with the GPUs held on each node
    (``per_node``) kept up to date as pairs are set and deleted: the free GPUs per node are
    read at every decision, and counting them from every held pair each time cost more than the
    decisions that changed nothing (only ``[k] = v`` and ``del [k]`` change it)."""

    __slots__ = ("per_node",)

    def __init__(self, nodes: int) -> None:
        super().__init__()
        self.per_node = [0] * nodes

    def __setitem__(self, key: tuple[int, int], value: Any) -> None:
        if key not in self:
            self.per_node[key[0]] += 1
        super().__setitem__(key, value)

    def __delitem__(self, key: tuple[int, int]) -> None:
        super().__delitem__(key)
        self.per_node[key[0]] -= 1

    def _uncounted(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("HeldGpus changes only by [key] = holder and del [key] (they keep per_node)")

    # the dict methods that would change the pairs without passing through the two above
    pop = popitem = setdefault = update = clear = __ior__ = _uncounted

    def free(self, node_gpus: Sequence[int]) -> list[int]:
        """Per node index, its GPUs nobody holds."""
        return [g - u for g, u in zip(node_gpus, self.per_node, strict=True)]


def free_gpu_shape(
    free_per_node: Sequence[int],
    node_type: Sequence[str],
    largest: Mapping[str, int],
    waiting: Mapping[tuple[str, tuple[str, ...], int], int],
) -> tuple[int, float, int]:
    """The free GPUs (``free_per_node``: per node index, its GPUs nobody holds), and how many
    of them the waiting jobs cannot use in their node shape.

    A waiting job of ``g`` GPUs on a type whose largest node has ``L`` GPUs runs on one node
    when ``g <= L``, else on whole nodes (:func:`optsched.engine.shape.default_pieces`): its
    largest piece is ``min(g, L)`` GPUs, and a node with fewer free GPUs cannot hold it.
    ``waiting`` counts the waiting jobs per (tenant, allowed types, GPUs).

    * **fragmented** (FGD's measure, Weng et al., ATC'23, against the waiting jobs): the free
      GPUs of each node times the share of the type's waiting jobs whose largest piece is
      larger than the node's free GPUs;
    * **stranded**: the free GPUs on nodes that hold no waiting job's largest piece at all.

    Both are 0 where nothing waits for the type.
    """
    pieces: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for (_, types, gpus), count in waiting.items():
        for t in types:
            pieces[t][max(default_pieces(gpus, largest[t]))] += count
    free = 0
    frag = 0.0
    stranded = 0
    for t, f in zip(node_type, free_per_node, strict=True):
        if f <= 0:
            continue
        free += f
        want = pieces.get(t)
        if not want:
            continue
        total = sum(want.values())
        larger = sum(c for p, c in want.items() if p > f)
        frag += f * larger / total
        if larger == total:
            stranded += f
    return free, frag, stranded


class Simulator:
    """Replays a :class:`~optsched.sim.trace.Trace` under one policy.

    Parameters
    ----------
    trace, policy, seed, config:
        The workload, the policy (see :mod:`optsched.sim.policies`), the seed of the ground
        truth's jitter, and the simulator parameters.
    truth:
        Built from ``trace``/``seed``/``config`` when not given (pass the same one to an oracle
        predictor).
    on_decision:
        Called after every applied decision with ``(snapshot, decision)`` (for dumping
        snapshots or tests).
    """

    def __init__(
        self,
        trace: Trace,
        policy: Policy,
        seed: int = 0,
        config: SimConfig | None = None,
        truth: GroundTruth | None = None,
        on_decision: Any = None,
    ) -> None:
        self.trace = trace
        self.policy = policy
        self.seed = seed
        self.cfg = config or SimConfig()
        self.truth = truth or GroundTruth(trace, seed, self.cfg)
        self.on_decision = on_decision
        self.q = EventQueue()
        self.now = 0.0
        self.jobs = [_SimJob(i, j, self.truth.runtime[j.id]) for i, j in enumerate(trace.jobs)]
        self.by_id = {j.id: j for j in self.jobs}
        self.node_index = {n.id: k for k, n in enumerate(trace.nodes)}
        self.node_type = [n.gpu_type for n in trace.nodes]
        self.node_gpus = [n.gpus for n in trace.nodes]
        self._largest: dict[str, int] = defaultdict(int)
        for n in trace.nodes:
            self._largest[n.gpu_type] = max(self._largest[n.gpu_type], n.gpus)
        self.owner = HeldGpus(len(trace.nodes))
        self.pending: dict[int, _SimJob] = {}
        self.running: dict[int, _SimJob] = {}
        self.quota = {(t.id, g): q for t in trace.tenants for g, q in t.quota.items()}
        self.own_use: dict[tuple[str, str], int] = defaultdict(int)
        self.assurance_state: dict[str, dict[str, Any]] | None = None
        self.history: Any = None
        if self.cfg.use_history:
            try:
                from optsched.predict.history import RuntimeHistory
            except ImportError:  # pragma: no cover - the module ships with the package
                self.history = None
            else:
                self.history = RuntimeHistory()
        self._types = {
            g.name: GpuType(memory_gib=g.memory_gib, mps=g.mps, speed=1.0)
            for g in trace.gpu_types
        }
        self._nodes = [Node(id=n.id, gpu_type=n.gpu_type, gpus=n.gpus) for n in trace.nodes]
        if self.cfg.mode not in ("pooled", "partitioned"):
            raise ValueError(f"mode must be pooled or partitioned, not '{self.cfg.mode}'")
        no_loans = self.cfg.mode == "partitioned"
        self._tenants = [
            Tenant(
                id=t.id,
                quota=dict(t.quota),
                qos=TenantQos(max_queue_delay_s=t.max_queue_delay_s, target=t.qos_target),
                borrow_limit={g.name: 0 for g in trace.gpu_types} if no_loans else None,
            )
            for t in trace.tenants
        ]
        self._event_at: float | None = None
        self._single_type = trace.gpu_types[0].name if len(trace.gpu_types) == 1 else None
        self._dirty = False
        self._n_decisions = 0
        self._last_decision = -math.inf
        self._next_trigger: float | None = None
        self._next_tick = math.inf
        self._arrived = 0
        self._done = 0
        cap = trace.total_gpus
        submits = [j.submit_s for j in trace.jobs]
        self.log = EventLog(
            trace=trace.name,
            policy=getattr(policy, "name", type(policy).__name__),
            seed=seed,
            capacity=cap,
            window=(min(submits), max(submits)),
            tenants={
                t.id: {"quota": float(sum(t.quota.values())),
                       "max_queue_delay_s": t.max_queue_delay_s}
                for t in trace.tenants
            },
            restart_overhead_s=self.cfg.restart_overhead_s,
            segments=_cols("job", "t0", "t1", "gpus", "rate", "host"),
            preemptions=_cols("t", "job", "reason", "lost_s", "gpus"),
            decisions=_cols("t", "seconds", "snapshot_s", "state_s", "check_s", "pending",
                            "running", "started", "preempted", "loaned_gpus",
                            "on_loan_started", "status", "event", "free_gpus",
                            "fragmented_gpus", "stranded_gpus"),
            assurance=_cols("t", "tenant", "value"),
            notes=list(trace.notes),
            interference=self.truth.interference.source,
            epoch_s=self.cfg.epoch_s,
        )
        self.expected = ExpectedStarts({j.id: j.i for j in self.jobs})
        caps = trace.capacity()
        self._caps = caps
        self._unplaceable: set[int] = set()
        self._fit_key: dict[int, tuple[str, tuple[str, ...], int]] = {}
        """Per placeable job: (tenant, GPU types it may use, fewest GPUs it starts on)."""
        self._pending_fit: dict[tuple[str, tuple[str, ...], int], int] = defaultdict(int)
        """How many pending jobs have each ``_fit_key`` (see :meth:`_could_start`)."""
        self._pending_guaranteed: dict[tuple[str, tuple[str, ...], int], int] = defaultdict(int)
        """Of those, how many are guaranteed (see :meth:`_may_change`)."""
        self._spread_keys: set[tuple[str, tuple[str, ...], int]] = set()
        """``_fit_key`` of the elastic jobs: they may spread over nodes (the engine's rule), the
        others take their default node shape (:func:`optsched.engine.shape.default_pieces`)."""
        self._skip_idle = idle_when_nothing_fits(policy) if on_decision is None else None
        self._starts_by = starts_by(policy) if on_decision is None and not self._skip_idle else frozenset()
        self._fifo: dict[str, list[tuple[float, str, int]]] = defaultdict(list)
        """Per queue (the tenant when tenants may not borrow, else ``""``: one queue), the
        (submit_s, id, index) of its pending jobs, a heap; entries of jobs no longer pending
        are dropped when they reach the top."""
        self._use_version = 0
        """Bumped whenever a job starts, stops or resizes (the loans in force may change)."""
        self._idle_loans: tuple[int, int] | None = None
        """(``_use_version``, loaned GPUs) after the last decision the policy made."""
        self._no_borrow = self.cfg.mode == "partitioned"
        self._clock_free = clock_free(policy) and on_decision is None
        self._quiet: tuple[tuple[int, int], Decision] | None = None
        """(:meth:`_change_key` at, the decision of) the last decision the policy was asked
        for that changed nothing (a :func:`clock_free` policy gives it again until something
        changes)."""
        for sj in self.jobs:
            mem = sj.spec.memory_gib  # a type with less memory per GPU never runs it (the engine's rule)
            allowed = tuple(
                t for t in sj.spec.gpu_types or tuple(caps)
                if mem is None or t not in self._types or mem <= self._types[t].memory_gib + MEMORY_EPS
            )
            if not allowed or sj.gpus > max(caps.get(t, 0) for t in allowed):
                self._unplaceable.add(sj.i)
            else:
                need = min(sj.gpus, spec_min) if (spec_min := sj.spec.min_gpus) else sj.gpus
                self._fit_key[sj.i] = (sj.tenant, allowed, need)
                if sj.spec.min_gpus is not None or sj.spec.max_gpus is not None:
                    self._spread_keys.add(self._fit_key[sj.i])
        if self._unplaceable:
            self.log.notes.append(f"{len(self._unplaceable)} job(s) larger than the cluster")
        self._unchanged = (
            unchanged_figures(policy)
            if on_decision is None and self._no_borrow and not self._spread_keys
            and not self._skip_idle and not self._starts_by
            else None
        )
        """The policy's :func:`unchanged_figures` where the simulator may use it: tenants may not
        borrow (``partitioned``) and no job is elastic (a running elastic job may grow with no
        job waiting)."""
        self._event_hosts = getattr(policy, "event_hosts", None)
        """The policy's ``event_hosts`` (see :meth:`_may_change`), if it has one."""
        self._event_preempts = bool(getattr(policy, "event_preempts", True))
        """Whether the policy's event decisions may stop a job (see :meth:`_may_change`)."""
        self._tenant_ids = tuple(t.id for t in self._tenants)
        self.unasked = 0
        """Decisions logged from :func:`unchanged_figures` without asking the policy."""

    # ------------------------------------------------------------------ main loop
    def run(self) -> EventLog:
        """Run to the end and return the event log.

        Python's cyclic garbage collector is paused during the run (a young-generation pass
        runs every ``GC_EVERY`` decisions): the run allocates millions of short-lived, acyclic
        objects, and automatic full passes over the growing event log cost about twice the
        simulation itself.
        """
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return self._run()
        finally:
            if was_enabled:
                gc.enable()

    def _run(self) -> EventLog:
        t_wall = time.perf_counter()
        t_cpu = time.process_time()
        for sj in self.jobs:
            if sj.i not in self._unplaceable:
                self.q.push(sj.spec.submit_s, Kind.ARRIVAL, sj.i)
        first = min((j.spec.submit_s for j in self.jobs), default=0.0)
        last = max((j.spec.submit_s for j in self.jobs), default=0.0)
        stop = self.cfg.max_sim_s if self.cfg.max_sim_s is not None else last + 90 * 86400.0
        self._next_tick = math.floor(first / self.cfg.epoch_s) * self.cfg.epoch_s
        self.q.push(self._next_tick, Kind.DECIDE, EPOCH)
        total = len(self.jobs) - len(self._unplaceable)
        while len(self.q):
            ev = self.q.pop()
            if ev.time > stop:
                break
            self.now = ev.time
            if ev.kind == Kind.COMPLETION:
                sj = self.jobs[ev.job]
                if sj.state == RUNNING and ev.version == sj.version:
                    self._complete(sj)
            elif ev.kind == Kind.ARRIVAL:
                self._arrive(self.jobs[ev.job])
            else:
                tick = ev.job == EPOCH
                if ev.job == TRIGGER:
                    self._next_trigger = None
                elif ev.job == EVENT:
                    self._event_at = None
                if self.pending and self.now > self._last_decision and (self._dirty or tick):
                    self._decide(event=ev.job == EVENT)
                if tick:
                    if self._done >= total:
                        continue
                    self._next_tick = self.now + self.cfg.epoch_s
                    self.q.push(self._next_tick, Kind.DECIDE, EPOCH)
            if self._done >= total and self._arrived >= total:
                break
        self.log.end_time = self.now
        self._close_log()
        self.log.sim_seconds = time.perf_counter() - t_wall
        self.log.cpu_seconds = time.process_time() - t_cpu
        return self.log

    def _request_decision(self) -> None:
        self._dirty = True
        if self.cfg.events:
            if self._event_at is None:
                self._event_at = self.now
                self.q.push(self.now, Kind.DECIDE, EVENT)
            return
        if not self.cfg.trigger or self._next_trigger is not None:
            return
        t = max(self.now, self._last_decision + self.cfg.min_gap_s)
        if t >= self._next_tick:
            return
        self._next_trigger = t
        self.q.push(t, Kind.DECIDE, TRIGGER)

    # ------------------------------------------------------------------ events
    def _arrive(self, sj: _SimJob) -> None:
        spec = sj.spec
        sj.state = PENDING
        self._arrived += 1
        feats: dict[str, str | float | int | bool] = {}
        if spec.user:
            feats["user"] = spec.user
        if spec.name:
            feats["name"] = spec.name
        if spec.profile is not None:
            feats["model"], feats["dataset"] = spec.profile[0], spec.profile[1]
            feats["batchsize"], feats["amp"] = spec.profile[2], spec.profile[3]
        if spec.cpu_num is not None:
            feats["cpu_num"] = spec.cpu_num
        if spec.node_num is not None:
            feats["node_num"] = spec.node_num
        feats.update(spec.workload)
        if spec.gpu_milli is not None:
            feats["gpu_milli"] = spec.gpu_milli
        if self._single_type is not None:
            feats["gpu_type"] = self._single_type
        feats["t0_weekday"] = self.trace.t0_weekday
        if self.history is not None:
            for k, v in self.history.features_for(spec.tenant, spec.user, spec.submit_s).items():
                if not (isinstance(v, float) and math.isnan(v)):
                    feats[k] = v
        runtime = self.truth.runtime[spec.id] if self.cfg.oracle_runtime else spec.estimate_s
        shareable: bool | None = True if self.cfg.guaranteed_shareable else None
        elastic: dict[str, Any] = {}
        if spec.min_gpus is not None or spec.max_gpus is not None:
            elastic = {"min_gpus": spec.min_gpus, "max_gpus": spec.max_gpus, "gpus_step": spec.gpus_step}
            shareable = False
        sj.pending_job = Job.model_construct(
            id=spec.id,
            tenant=spec.tenant,
            qos=spec.qos,
            gpus=spec.gpus,
            gpu_types=list(spec.gpu_types) if spec.gpu_types is not None else None,
            submit_s=spec.submit_s,
            state="pending",
            runtime_s=runtime,
            memory_gib=spec.memory_gib,
            shareable=shareable,
            features=feats,
            **elastic,
        )
        self._add_pending(sj)
        self._request_decision()

    def _complete(self, sj: _SimJob) -> None:
        self._advance(sj)
        self._stop(sj)
        sj.state = DONE
        sj.end = self.now
        self._done += 1
        if self.history is not None:
            self.history.observe(sj.tenant, sj.spec.user, self.now, self.truth.runtime[sj.id])
        self._request_decision()

    def _add_pending(self, sj: _SimJob) -> None:
        self.pending[sj.i] = sj
        self._pending_fit[self._fit_key[sj.i]] += 1
        if sj.spec.qos == "guaranteed":
            self._pending_guaranteed[self._fit_key[sj.i]] += 1
        if self._skip_idle == "head":
            queue = sj.tenant if self._no_borrow else ""
            heapq.heappush(self._fifo[queue], (sj.spec.submit_s, sj.id, sj.i))

    def _del_pending(self, sj: _SimJob) -> None:
        del self.pending[sj.i]
        key = self._fit_key[sj.i]
        self._pending_fit[key] -= 1
        if not self._pending_fit[key]:
            del self._pending_fit[key]
        if sj.spec.qos == "guaranteed":
            self._pending_guaranteed[key] -= 1
            if not self._pending_guaranteed[key]:
                del self._pending_guaranteed[key]

    def _free_nodes(self) -> dict[str, list[int]]:
        """Per GPU type, the GPUs no running job holds on each node that has any, most first."""
        out: dict[str, list[int]] = defaultdict(list)
        free = self.owner.free(self.node_gpus)
        for t, f in zip(self.node_type, free, strict=True):
            if f > 0:
                out[t].append(f)
        for counts in out.values():
            counts.sort(reverse=True)
        return out

    def _fits_free(self, key: tuple[str, tuple[str, ...], int], free: dict[str, list[int]]) -> bool:
        """Whether a job of ``_fit_key`` ``key`` fits GPUs no running job holds on a type it
        may use, inside its tenant's quota of that type when tenants may not borrow
        (``partitioned``), in its node shape: the k-th largest piece of its default shape
        (:func:`optsched.engine.shape.default_pieces`) needs the k-th most free node to have
        as many free GPUs (an elastic job: as many free GPUs in all). A necessary condition of
        any placement the engine's node pool makes (it may also count CPU, memory, topology)."""
        ten, types, need = key
        for t in types:
            if self._no_borrow and not self._in_quota(ten, t, need):
                continue
            nodes = free.get(t, ())
            if key in self._spread_keys:
                if sum(nodes) >= need:
                    return True
                continue
            pieces = default_pieces(need, self._largest[t])
            if len(nodes) >= len(pieces) and all(nodes[k] >= p for k, p in enumerate(pieces)):
                return True
        return False

    def _in_quota(self, tenant: str, gpu_type: str, gpus: int) -> bool:
        """Whether ``gpus`` more GPUs of ``gpu_type`` keep ``tenant``'s own use inside its quota."""
        return self.own_use.get((tenant, gpu_type), 0) + gpus <= self.quota.get((tenant, gpu_type), 0)

    def _could_start(self) -> bool:
        """Whether some pending job could start: a necessary condition of any start of an
        :func:`idle_when_nothing_fits` policy (alone on free GPUs in its node shape,
        :meth:`_fits_free`; only the first job of each queue for ``"head"``) or of a
        :func:`starts_by` policy (each way it names: ``alone`` as above, ``quota`` its
        tenant's own use of a type it may use plus its GPUs inside its quota, ``guest``
        :meth:`_could_host`). Checked per distinct (tenant, types, GPUs) of the queue, not per
        job, but for ``guest``."""
        free = self._free_nodes()
        keys: Iterable[tuple[str, tuple[str, ...], int]] = self._pending_fit
        if self._skip_idle == "head":
            heads = []
            for queue, fifo in list(self._fifo.items()):
                while fifo and fifo[0][2] not in self.pending:
                    heapq.heappop(fifo)
                if fifo:
                    heads.append(self._fit_key[fifo[0][2]])
                else:
                    del self._fifo[queue]
            keys = heads
        by = self._starts_by or {"alone"}
        if "alone" in by and any(self._fits_free(key, free) for key in keys):
            return True
        if "quota" in by and any(self._in_quota(ten, t, need) for ten, types, need in keys for t in types):
            return True
        return "guest" in by and self._could_host()

    def _could_host(self, tenants: frozenset[str] | None = None) -> bool:
        """Whether some running job could be the MPS host of some pending one: a shareable
        pending job with a known memory, and a running shareable job that holds its GPUs alone
        (no guest, not a guest) with at least its GPUs, on an MPS type it may use, with memory
        for both (of its own tenant when tenants may not borrow). ``tenants``: only running jobs of
        these tenants may host; when tenants may not borrow, every pair is of one tenant, sealed
        on the type, and any running job may host (``optsched.engine.assurance.pair_limit``)."""
        hosts: dict[tuple[str, str], list[tuple[int, float]]] = defaultdict(list)
        for r in self.running.values():
            rj = r.pending_job
            assert rj is not None
            if r.host is None and r.guest is None and rj.is_shareable and rj.memory_gib is not None:
                if tenants is not None and r.tenant not in tenants and not self._no_borrow:
                    continue
                t = r.gpu_type
                if self._types[t].mps:
                    hosts[(r.tenant if self._no_borrow else "", t)].append((r.gpus, rj.memory_gib))
        if not hosts:
            return False
        for sj in self.pending.values():
            job = sj.pending_job
            assert job is not None
            fit = self._fit_key.get(sj.i)
            mem = job.memory_gib
            if fit is None or mem is None or not job.is_shareable:
                continue
            ten = sj.tenant if self._no_borrow else ""
            for t in fit[1]:
                room = self._types[t].memory_gib + 1e-9 - mem
                if any(g >= sj.gpus and m <= room for g, m in hosts.get((ten, t), ())):
                    return True
        return False

    # ------------------------------------------------------------------ progress
    def _advance(self, sj: _SimJob) -> None:
        if self.now > sj.last_t:
            sj.work_left -= sj.rate * (self.now - sj.last_t)
            sj.last_t = self.now

    def _set_rate(self, sj: _SimJob, rate: float, host: bool | None = None) -> None:
        """Close the current segment and continue at ``rate`` (``host``: holds its GPUs)."""
        self._advance(sj)
        self._close_segment(sj)
        sj.running_job = None
        sj.rate = rate
        if host is not None:
            sj.seg_host = host
        sj.seg_start = self.now
        sj.version += 1
        self.q.push(self.now + max(sj.work_left, 0.0) / rate, Kind.COMPLETION, sj.i, sj.version)

    def _close_segment(self, sj: _SimJob) -> None:
        if self.now > sj.seg_start:
            s = self.log.segments
            s["job"].append(sj.i)
            s["t0"].append(sj.seg_start)
            s["t1"].append(self.now)
            s["gpus"].append(sj.gpus)
            s["rate"].append(sj.rate)
            s["host"].append(sj.seg_host)
        sj.seg_start = self.now

    def _stop(self, sj: _SimJob) -> None:
        """Release ``sj``'s GPUs (it was running); un-pair or promote its partner."""
        self._use_version += 1
        self._close_segment(sj)
        sj.version += 1
        sj.running_job = None
        del self.running[sj.i]
        if sj.host is not None:  # a guest leaves: its host runs alone again
            host = sj.host
            host.guest = None
            sj.host = None
            self._set_rate(host, 1.0)
        else:
            key = (sj.tenant, sj.gpu_type)
            if not sj.on_loan:
                self.own_use[key] -= sj.gpus
            guest = sj.guest
            for g in sj.alloc:
                del self.owner[g]
            if guest is not None:  # the guest keeps its GPUs and runs alone
                sj.guest = None
                guest.host = None
                gkey = (guest.tenant, guest.gpu_type)
                guest.on_loan = self.own_use[gkey] + guest.gpus > self.quota.get(gkey, 0)
                if not guest.on_loan:
                    self.own_use[gkey] += guest.gpus
                for g in guest.alloc:
                    self.owner[g] = guest
                self._set_rate(guest, 1.0, host=True)
                self._dirty = True
        sj.alloc = []
        sj.refs = []

    # ------------------------------------------------------------------ snapshots
    def snapshot(self) -> Snapshot:
        """The format-1 snapshot of the cluster now (what a policy may see)."""
        jobs: list[Job] = []
        for sj in self.pending.values():
            assert sj.pending_job is not None
            jobs.append(sj.pending_job)
        ck = self.cfg.checkpoint_s
        for sj in self.running.values():
            ran = self.now - sj.run_start
            lost = (ran % ck if ck > 0 else ran) + self.cfg.restart_overhead_s
            rj = sj.running_job
            if rj is None:
                rj = sj.running_job = self._running_job(sj, lost)
            else:
                # the only field that changes while nothing else does (plain attribute write;
                # the value is a valid non-negative float)
                rj.__dict__["restart_cost_s"] = lost
            jobs.append(rj)
        snap = Snapshot.model_construct(
            format=1,
            now=self.now,
            epoch_s=self.cfg.epoch_s,
            gpu_types=self._types,
            nodes=self._nodes,
            tenants=self._tenants,
            jobs=jobs,
            assurance_state=self.assurance_state,
        )
        if self.cfg.round_trip_json:
            snap = Snapshot.model_validate_json(snap.model_dump_json())
        return snap

    def _running_job(self, sj: _SimJob, lost: float) -> Job:
        p = sj.pending_job
        assert p is not None
        return Job.model_construct(
            id=sj.id,
            tenant=sj.tenant,
            qos=p.qos,
            gpus=sj.gpus,
            gpu_types=p.gpu_types,
            submit_s=p.submit_s,
            state="running",
            allocation=sj.refs,
            start_s=sj.run_start,
            on_loan=sj.on_loan,
            colocated=sj.host is not None or sj.guest is not None,
            guest_of=sj.host.id if sj.host is not None else None,
            runtime_s=p.runtime_s,
            memory_gib=p.memory_gib,
            shareable=p.shareable,
            restart_cost_s=lost,
            features=p.features,
            min_gpus=p.min_gpus,
            max_gpus=p.max_gpus,
            gpus_step=p.gpus_step,
            resize_overhead_s=self.cfg.resize_overhead_s if p.min_gpus or p.max_gpus else 0.0,
        )

    # ------------------------------------------------------------------ decisions
    def _decide(self, event: bool = False) -> None:
        self._dirty = False
        self._last_decision = self.now
        self._n_decisions += 1
        if self._n_decisions % GC_EVERY == 0:
            gc.collect(1)
        if (self._skip_idle or self._starts_by) and self._record_idle(event):
            return
        if self._quiet is not None and self._quiet[0] == self._change_key():
            self._record_repeat(self._quiet[1], event)
            return
        built: list[tuple[Snapshot, ClusterState, float, float]] = []
        """The snapshot and engine state, once built, with the seconds each took."""

        def build() -> ClusterState:
            if not built:
                t = time.perf_counter()
                snap = self.snapshot()
                t_mid = time.perf_counter()
                st = ClusterState.from_snapshot(snap)
                built.append((snap, st, t_mid - t, time.perf_counter() - t_mid))
            return built[0][1]

        unchanged = False
        if self._unchanged is not None and not self._may_change(event):
            t_fig = time.perf_counter()
            figures = self._unchanged(event, self._tenant_ids, self.assurance_state, build)
            unchanged = figures is not None
            if figures is not None and not self.cfg.verify_unchanged:
                self._record_unchanged(figures, t_fig, event)
                return
        build()
        snap, state, snapshot_s, state_s = built[0]
        t0 = time.perf_counter()
        decide_event = getattr(self.policy, "decide_event", None) if event else None
        if decide_event is not None:
            decision = decide_event(snap, state)
        else:
            decision = self.policy.decide(snap, state)
        t1 = time.perf_counter()
        seconds = t1 - t0
        if self.cfg.check and not getattr(self.policy, "checks_itself", False):
            # (a policy that checks itself, optsched, ran this very check on this very state)
            # work conservation (invariant 8) is optsched's promise, not every baseline's:
            # FIFO's head-of-line blocking, for one, leaves work queued on purpose
            bad = check_decision(state, decision, work_conserving=self.log.policy == "optsched")
            if bad:
                lines = "; ".join(str(v) for v in bad[:5])
                raise SimulationError(
                    f"policy '{self.log.policy}' at t={self.now}: {len(bad)} violation(s): {lines}"
                )
        t2 = time.perf_counter()
        if unchanged:
            self._verify_unchanged(decision, event, state)
        self._apply(decision)
        if self._clock_free and not (decision.start or decision.preempt or decision.resize):
            self._quiet = (self._change_key(), decision)
        self.expected.record(self.now, decision)
        loaned = sum(loan.gpus for loan in decision.loans)
        self._idle_loans = (self._use_version, loaned)
        d = self.log.decisions
        d["t"].append(self.now)
        d["seconds"].append(seconds)
        d["snapshot_s"].append(snapshot_s)
        d["state_s"].append(state_s)
        d["check_s"].append(t2 - t1)
        d["pending"].append(len(self.pending))
        d["running"].append(len(self.running))
        d["started"].append(len(decision.start))
        d["preempted"].append(len(decision.preempt))
        d["loaned_gpus"].append(loaned)
        d["on_loan_started"].append(sum(1 for s in decision.start if s.on_loan))
        d["status"].append(decision.status)
        d["event"].append(event)
        self._record_free(d)
        self._log_assurance(decision)
        if self.on_decision is not None:
            self.on_decision(snap, decision)

    def _may_change(self, event: bool) -> bool:
        """Whether a :func:`unchanged_figures` policy's decision may start, stop or resize
        anything now (tenants may not borrow, no job is elastic): a necessary condition of each
        way optsched has, checked per distinct (tenant, types, GPUs) of the queue.

        * A pending job could start on free GPUs (:meth:`_fits_free`: in its node shape, inside
          its tenant's quota).
        * A guaranteed pending job would fit its tenant's quota once the tenant's running
          best-effort jobs of that type stopped: the only preemptions inside quota, in the
          event path and in the epoch's model alike, are of best-effort jobs for guaranteed
          starts inside quota, and a start on loan never preempts (none here). Not asked at an
          event of a policy whose ``event_preempts`` is False (optsched: its event path runs
          without ``preempt_own``, so it stops nothing between epochs).
        * A pending job could be the MPS guest of a running job (:meth:`_could_host`); at an
          event, of a running job whose tenant the policy's ``event_hosts`` names, if it has
          that method (optsched: a tenant whose assurance still lets its hosts share).

        Stops that need no start (an epoch's evicted MPS guests, reclaimed jobs on loan) are
        the policy's to rule out: its ``unchanged`` gives no figures then.
        """
        keys = self._pending_fit
        if not keys:
            return False
        free = self._free_nodes()
        if any(self._fits_free(key, free) for key in keys):
            return True
        if self._event_preempts or not event:
            best_effort: dict[tuple[str, str], int] = defaultdict(int)
            for sj in self.running.values():
                if sj.host is None and sj.spec.qos != "guaranteed":
                    best_effort[(sj.tenant, sj.gpu_type)] += sj.gpus
            for ten, types, need in self._pending_guaranteed:
                for t in types:
                    be = best_effort.get((ten, t), 0)
                    if be and self.own_use.get((ten, t), 0) - be + need <= self.quota.get((ten, t), 0):
                        return True
        hosts = self._event_hosts if event else None
        return self._could_host(hosts(self._tenant_ids, self.assurance_state) if hosts else None)

    def _record_unchanged(self, figures: _Figures, t0: float, event: bool) -> None:
        """Log the decision of a :func:`unchanged_figures` policy that changes nothing
        (:meth:`_may_change`, and the policy's own figures say so) without asking it: its
        assurance figures only (no expected starts are recorded for it)."""
        self.unasked += 1
        self._log_no_change(t0, 0, "unchanged", event)
        self._log_figures(figures)

    def _verify_unchanged(self, decision: Decision, event: bool, state: ClusterState) -> None:
        """``verify_unchanged``: the decision the simulator would have logged unchanged does
        not change anything, and carries the figures it would have logged."""
        changed = [f"{len(v)} {k}" for k, v in (("start(s)", decision.start), ("preemption(s)",
                   decision.preempt), ("resize(s)", decision.resize)) if v]
        assert self._unchanged is not None
        figures = self._unchanged(event, self._tenant_ids, self.assurance_state, lambda: state)
        if changed or figures != (decision.assurance, decision.assurance_state):
            raise SimulationError(
                f"policy '{self.log.policy}' at t={self.now}: the simulator would have logged its "
                f"decision unchanged, but it has {', '.join(changed) or 'other assurance figures'}"
            )

    def _record_idle(self, event: bool) -> bool:
        """Log the decision of an :func:`idle_when_nothing_fits` policy without asking it, when
        no pending job fits (:meth:`_could_start`); ``False`` when it must be asked.

        Its decision would start, stop and resize nothing, and its loans (a pure function of
        the running jobs' use) are those of the last decision when nothing started or stopped
        since (none at all when tenants may not borrow). In a saturated cluster most decisions
        are such: rebuilding the snapshot, the engine state, the sorted queue and the check
        over the whole queue for each of them made replays quadratic in the queue length.
        """
        if self._no_borrow:
            loaned = 0
        elif self._idle_loans is not None and self._idle_loans[0] == self._use_version:
            loaned = self._idle_loans[1]
        else:
            return False
        t0 = time.perf_counter()
        if self._could_start():
            return False
        self._log_no_change(t0, loaned, "feasible", event)
        self.assurance_state = None
        return True

    def _log_no_change(self, t0: float, loaned: int, status: str, event: bool) -> None:
        """One row of the decisions table for a decision that started, stopped and resized
        nothing (measured from ``t0``), with the free-GPU shape after it."""
        d = self.log.decisions
        d["t"].append(self.now)
        d["seconds"].append(0.0)
        d["snapshot_s"].append(time.perf_counter() - t0)
        d["state_s"].append(0.0)
        d["check_s"].append(0.0)
        d["pending"].append(len(self.pending))
        d["running"].append(len(self.running))
        d["started"].append(0)
        d["preempted"].append(0)
        d["loaned_gpus"].append(loaned)
        d["on_loan_started"].append(0)
        d["status"].append(status)
        d["event"].append(event)
        self._record_free(d)

    def _change_key(self) -> tuple[int, int]:
        """Changes a policy can see: starts, stops and resizes (``_use_version``) and
        arrivals. A completion stops its job; nothing else changes a pending job."""
        return (self._use_version, self._arrived)

    def _record_repeat(self, decision: Decision, event: bool) -> None:
        """Log ``decision`` again, the :func:`clock_free` policy's no-op decision on the same
        jobs, without asking it (nothing changed since, so it would give the same answer).

        Inside saturated partitions nearly every epoch tick is such a decision: hundreds of
        jobs wait for GPUs that no completion has freed, and rebuilding the snapshot, the
        engine state, the node pool and the check for them cost as much as a real decision.
        """
        t0 = time.perf_counter()
        self.expected.record(self.now, decision)
        loaned = sum(loan.gpus for loan in decision.loans)
        self._log_no_change(t0, loaned, decision.status, event)
        self._log_assurance(decision)

    def _log_assurance(self, decision: Decision) -> None:
        """The decision's assurance per tenant into the log, and its state for the next one."""
        self._log_figures((decision.assurance, decision.assurance_state))

    def _log_figures(self, figures: _Figures) -> None:
        """A decision's ``assurance`` per tenant into the log, its ``assurance_state`` for the
        next one."""
        assurance, state = figures
        a = self.log.assurance
        for ten in sorted(assurance):
            a["t"].append(self.now)
            a["tenant"].append(ten)
            a["value"].append(float(assurance[ten]))
        self.assurance_state = state or None

    def _record_free(self, d: dict[str, list[Any]]) -> None:
        """Free, fragmented and stranded GPUs after a decision (see :func:`free_gpu_shape`)."""
        free, frag, stranded = free_gpu_shape(
            self.owner.free(self.node_gpus), self.node_type, self._largest, self._pending_fit
        )
        d["free_gpus"].append(free)
        d["fragmented_gpus"].append(frag)
        d["stranded_gpus"].append(stranded)

    def _apply(self, decision: Decision) -> None:
        ck = self.cfg.checkpoint_s
        for p in decision.preempt:
            sj = self.by_id[p.job]
            self._advance(sj)
            ran = self.now - sj.run_start
            lost_wall = ran % ck if ck > 0 else ran
            done_in_run = max(0.0, sj.work_run_start - sj.work_left)
            lost_work = min(done_in_run, lost_wall * sj.rate)
            self._stop(sj)
            sj.work_left += lost_work
            sj.state = PENDING
            sj.on_loan = False
            sj.preemptions += 1
            sj.restart_due = True
            sj.lost_gpu_s += lost_wall * sj.gpus
            sj.lost_work_gpu_s += lost_work * sj.spec.gpus  # work is counted at the trace's size
            self._add_pending(sj)
            pr = self.log.preemptions
            pr["t"].append(self.now)
            pr["job"].append(sj.i)
            pr["reason"].append(str(p.reason))
            pr["lost_s"].append(lost_wall)
            pr["gpus"].append(sj.gpus)
            self._dirty = True
        grows = [rz for rz in decision.resize if rz.to_gpus > rz.from_gpus]
        for rz in decision.resize:  # shrinks free their GPUs before anything starts
            if rz.to_gpus < rz.from_gpus:
                self._resize(rz)
        for s in decision.start:
            sj = self.by_id[s.job]
            self._del_pending(sj)
            self._use_version += 1
            sj.state = RUNNING
            sj.gpus = len(s.allocation)
            sj.alloc = [(self.node_index[r.node], r.gpu) for r in s.allocation]
            sj.refs = [GpuRef.model_construct(node=r.node, gpu=r.gpu) for r in s.allocation]
            sj.gpu_type = self.node_type[sj.alloc[0][0]]
            if sj.restart_due:
                sj.work_left += self.cfg.restart_overhead_s
                sj.restart_due = False
                sj.restarts += 1
            sj.run_start = self.now
            sj.last_t = self.now
            sj.seg_start = self.now
            sj.work_run_start = sj.work_left
            if sj.first_start is None:
                sj.first_start = self.now
            self.expected.started(sj.i, self.now)
            sj.on_loan = bool(s.on_loan)
            self.running[sj.i] = sj
            if s.colocated_with:
                host = self.by_id[s.colocated_with[0]]
                sj.host = host
                host.guest = sj
                hs, gs = self.truth.pair_speeds(host.id, sj.id)
                self._set_rate(host, hs)
                sj.rate = 1.0
                self._set_rate(sj, gs, host=False)
            else:
                for g in sj.alloc:
                    self.owner[g] = sj
                if not sj.on_loan:
                    self.own_use[(sj.tenant, sj.gpu_type)] += sj.gpus
                sj.rate = 1.0
                self._set_rate(sj, sj.gpus / sj.spec.gpus, host=True)
        for rz in grows:
            self._resize(rz)

    def _resize(self, rz: Any) -> None:
        """Apply one resize of a running elastic job: a checkpoint, the new GPUs, the overhead."""
        sj = self.by_id[rz.job]
        self._use_version += 1
        self._advance(sj)
        new = [(self.node_index[r.node], r.gpu) for r in rz.allocation]
        for g in sj.alloc:
            if self.owner.get(g) is sj:
                del self.owner[g]
        for g in new:
            self.owner[g] = sj
        if not sj.on_loan:
            self.own_use[(sj.tenant, sj.gpu_type)] += len(new) - sj.gpus
        self._close_segment(sj)  # the segment so far ran on the old size
        old = sj.gpus
        sj.alloc = new
        sj.refs = [GpuRef.model_construct(node=r.node, gpu=r.gpu) for r in rz.allocation]
        sj.gpus = len(new)
        rate = sj.gpus / sj.spec.gpus
        overhead = self.cfg.resize_overhead_s
        sj.work_left += overhead * rate  # the pause, at the new size
        sj.lost_gpu_s += overhead * sj.gpus
        sj.lost_work_gpu_s += overhead * sj.gpus
        sj.run_start = self.now  # the resize checkpoints the job
        sj.work_run_start = sj.work_left
        self._set_rate(sj, rate, host=True)
        r = self.log.resizes
        r["t"].append(self.now)
        r["job"].append(sj.i)
        r["reason"].append(str(rz.reason))
        r["from_gpus"].append(old)
        r["to_gpus"].append(sj.gpus)
        r["lost_s"].append(overhead)
        self._dirty = True

    # ------------------------------------------------------------------ log
    def _close_log(self) -> None:
        for sj in list(self.running.values()):
            self._advance(sj)
            self._close_segment(sj)
        cols = _cols("id", "tenant", "user", "qos", "gpus", "submit_s", "start_s", "end_s",
                     "true_s", "estimate_s", "preemptions", "restarts", "lost_gpu_s",
                     "lost_work_gpu_s")
        nan = math.nan
        for sj in self.jobs:
            cols["id"].append(sj.id)
            cols["tenant"].append(sj.tenant)
            cols["user"].append(sj.spec.user)
            cols["qos"].append(sj.spec.qos)
            cols["gpus"].append(sj.gpus)
            cols["submit_s"].append(sj.spec.submit_s)
            cols["start_s"].append(sj.first_start if sj.first_start is not None else nan)
            cols["end_s"].append(sj.end if sj.end is not None else nan)
            cols["true_s"].append(self.truth.runtime[sj.id])
            cols["estimate_s"].append(sj.spec.estimate_s if sj.spec.estimate_s else nan)
            cols["preemptions"].append(sj.preemptions)
            cols["restarts"].append(sj.restarts)
            cols["lost_gpu_s"].append(sj.lost_gpu_s)
            cols["lost_work_gpu_s"].append(sj.lost_work_gpu_s)
        self.log.jobs = cols
        self.log.expected = self.expected.cols

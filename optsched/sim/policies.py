"""Scheduling policies for the simulator, all behind one interface and all producing format-1
:class:`~optsched.schema.Decision` objects that pass :func:`optsched.check_decision`.

=================  ====================================================================  =====================
name               what it does                                                           follows
=================  ====================================================================  =====================
``fifo``           strict FIFO: jobs start in submission order; the first job that does   the classic baseline
                   not fit blocks the rest of its queue (no backfill): one queue over
                   the pooled cluster, one per tenant whose quota is a hard partition
                   (:func:`fifo_queue`); use above quota borrows idle quota (loans
                   declared), never reclaimed
``sjf``            shortest *estimated* runtime first (the snapshot's ``runtime_s``,      SJF on estimates
                   else the user's history mean, else 4 h), with backfill; pooled
``qssf``           quasi-shortest-service-first: smallest estimated GPU-time              Helios (SC'21)
                   (``runtime_s × gpus``) first, with backfill; pooled
``tiresias``       discretised 2D-LAS: jobs in queues by attained GPU-service             Tiresias (NSDI'19)
                   (thresholds 1 h and 10 h GPU-time), FIFO inside a queue; a pending
                   job preempts preemptible jobs of lower queues; pooled
``kueue``          strict per-tenant quota, then borrowing of idle quota (FIFO,           Kueue (cohorts,
                   backfill), and *reclaim*: a tenant's job that fits its own quota       reclaimWithinCohort)
                   preempts other tenants' jobs running on loan; no GPU sharing
``gandiva``        FIFO with backfill; a job that cannot start alone is packed as an      Gandiva (OSDI'18),
                   MPS guest on the first running job whose GPUs fit it in memory (no      packing only
                   interference model); pooled
``lucid``          priority = estimated runtime × GPUs; packs a job (≤ 8 GPUs) first on   Lucid (ASPLOS'23)
                   a running job of the same GPU count whose measured share score adds
                   to at most 2 with its own and whose memory fits; packing off under
                   low recent arrival rate (then strict priority, blocking per queue as
                   ``fifo``); no preemption
``antman``         guaranteed jobs on quota (FIFO), preempting opportunistic work to get  AntMan (OSDI'20)
                   it; opportunistic jobs on idle GPUs, squeezed in as MPS guests when
                   none are left
``optsched``       the engine: :func:`optsched.solve_epoch` (lazy import)                 this project
=================  ====================================================================  =====================

"Pooled" means the policy treats the cluster as one pool: it uses idle quota of other tenants
whenever it can (every such start is ``on_loan`` and the loans are declared), but never
preempts to give a tenant its quota back. Guaranteed jobs are not preemptible (the spec's
default), so the preempting baselines only preempt best-effort jobs and MPS guests.
"""

from __future__ import annotations

import bisect
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from optsched.engine.ledger import NodePool
from optsched.engine.shape import shape_of
from optsched.predict.base import JobEstimate, PairEstimate, Predictions
from optsched.schema.decision import Decision, Loan, Preempt, PreemptReason, SolverInfo, Start
from optsched.schema.snapshot import GpuRef, Job, Snapshot
from optsched.sim.names import POLICIES
from optsched.sim.profiles import Interference
from optsched.sim.synthetic import synthetic_interference

if TYPE_CHECKING:
    from optsched.engine.state import ClusterState
    from optsched.sim.cluster import GroundTruth, Policy

DEFAULT_RUNTIME_S = 4 * 3600.0


def estimate(job: Job) -> float:
    """The runtime a baseline may use: ``runtime_s``, else the user's history, else 4 h."""
    if job.runtime_s is not None:
        return job.runtime_s
    f = job.features or {}
    for key in ("hist_user_mean_s", "hist_tenant_mean_s"):
        v = f.get(key)
        if isinstance(v, int | float) and not isinstance(v, bool) and v > 0:
            return float(v)
    return DEFAULT_RUNTIME_S


class DecisionBuilder:
    """Incremental bookkeeping that keeps a heuristic's decision valid.

    Tracks free GPUs per node, per-tenant use (hosts only: MPS guests use no quota), the
    tenant's own (not-on-loan) use, and builds the ``loans`` in force after the decision as a
    pure function of the use: each tenant's use above quota is covered by idle quota of
    others (largest idle first, ties by id), within ``borrow_limit`` and ``lend_limit``.
    """

    def __init__(self, state: ClusterState, *, placement: str = "buddy") -> None:
        self.state = state
        snap = state.snapshot
        self.now = snap.now
        self.types = state.type_names
        # the engine's one placement rule: node shape, host CPU and memory, topology, shares
        self.pool = NodePool.of(state)
        self.pool.best_fit = placement_best_fit(placement)
        self.node_gpus: dict[str, int] = {node.id: node.gpus for node in snap.nodes}
        self._victims: dict[str, list[Job]] | None = None
        self.use: dict[tuple[str, str], int] = defaultdict(int)
        self.own: dict[tuple[str, str], int] = defaultdict(int)
        self.running: dict[str, Job] = {}
        self.guest_of_host: dict[str, str] = {}
        for job in state.running():
            self.running[job.id] = job
            if job.id in state.host_of:
                self.guest_of_host[state.host_of[job.id]] = job.id
                continue
            t = state.job_type(job)
            self.use[(job.tenant, t)] += job.gpus
            if not job.on_loan:
                self.own[(job.tenant, t)] += job.gpus
        self.starts: list[Start] = []
        self.started: dict[str, Job] = {}
        self.preempts: list[Preempt] = []
        self.preempted: set[str] = set()

    # ---------------------------------------------------------------- capacity
    def free_count(self, t: str) -> int:
        """Whole GPUs of type ``t`` free on available nodes."""
        return self.pool.total[t]

    def _place(self, job: Job, t: str) -> list[GpuRef] | None:
        """The job's GPUs of type ``t`` in its node shape (:class:`NodePool`), or ``None``."""
        return self.pool.place(t, shape_of(self.state, job, t))

    def _unplace(self, job: Job, refs: list[GpuRef], t: str) -> None:
        self.pool.release(refs, shape_of(self.state, job, t))

    def loans(self, t: str) -> list[Loan] | None:
        """Loans covering every tenant's use of ``t`` above quota, or ``None`` if impossible."""
        st = self.state
        need: list[tuple[str, int]] = []
        give: list[tuple[int, str]] = []
        for ten in st.tenant_ids:
            q = st.quota(ten, t)
            u = self.use.get((ten, t), 0)
            if u > q:
                bl = st.borrow_limit(ten, t)
                if bl is not None and u - q > bl:
                    return None
                need.append((ten, u - q))
            elif q > u:
                ll = st.lend_limit(ten, t)
                idle = q - u if ll is None else min(q - u, ll)
                if idle > 0:
                    give.append((idle, ten))
        if not need:
            return []
        give.sort(key=lambda x: (-x[0], x[1]))
        out: list[Loan] = []
        k = 0
        left = [g for g, _ in give]
        for ten, n in need:
            while n > 0:
                if k >= len(give):
                    return None
                take = min(n, left[k])
                if take > 0:
                    out.append(Loan.model_construct(
                        lender=give[k][1], borrower=ten, gpu_type=t, gpus=take))
                    left[k] -= take
                    n -= take
                if left[k] == 0:
                    k += 1
        return out

    # ---------------------------------------------------------------- actions
    def start(self, job: Job, *, allow_loan: bool = True, own_only: bool = False) -> bool:
        """Start ``job`` exclusively if some allowed type has room (and loans can cover it)."""
        for t in self.state.allowed_types(job):
            if self.free_count(t) < job.gpus:
                continue
            key = (job.tenant, t)
            on_loan = self.own[key] + job.gpus > self.state.quota(job.tenant, t)
            if on_loan and (not allow_loan or own_only):
                continue
            self.use[key] += job.gpus
            if self.loans(t) is None:
                self.use[key] -= job.gpus
                continue
            refs = self._place(job, t)
            if refs is None:
                self.use[key] -= job.gpus
                continue
            if not on_loan:
                self.own[key] += job.gpus
            self.starts.append(Start.model_construct(job=job.id, allocation=refs,
                                                     on_loan=on_loan, colocated_with=None))
            self.started[job.id] = job
            return True
        return False

    def hosts(self) -> list[Job]:
        """Running (kept) jobs that hold their GPUs alone: candidate MPS hosts."""
        out = [j for j in self.running.values()
               if j.id not in self.preempted and j.id not in self.guest_of_host
               and j.id not in self.state.host_of]
        out.extend(j for j in self.started.values()
                   if j.id not in self.guest_of_host and not self._is_guest(j.id))
        return out

    def _is_guest(self, job_id: str) -> bool:
        return job_id in self.state.host_of or any(
            s.job == job_id and s.colocated_with for s in self.starts)

    def _memory(self, job: Job) -> float | None:
        return job.memory_gib

    def can_share(self, guest: Job, host: Job) -> bool:
        st = self.state
        if guest.gpus > host.gpus or not guest.is_shareable or not host.is_shareable:
            return False
        if host.id in self.guest_of_host or host.id in self.preempted:
            return False
        refs = host.allocation if host.id in self.running else (
            next(s.allocation for s in self.starts if s.job == host.id))
        assert refs is not None
        t = st.node_type(refs[0].node)
        if t not in st.allowed_types(guest) or not st.snapshot.gpu_types[t].mps:
            return False
        if guest.tenant != host.tenant and st.borrow_limit(guest.tenant, t) == 0:
            return False  # a tenant that may not borrow shares only its own hosts
        mg, mh = self._memory(guest), self._memory(host)
        if mg is None or mh is None:
            return False
        return mg + mh <= st.snapshot.gpu_types[t].memory_gib + 1e-9

    def start_guest(self, guest: Job, host: Job) -> bool:
        if not self.can_share(guest, host):
            return False
        refs = host.allocation if host.id in self.running else (
            next(s.allocation for s in self.starts if s.job == host.id))
        assert refs is not None
        alloc = [GpuRef.model_construct(node=r.node, gpu=r.gpu) for r in refs[: guest.gpus]]
        self.starts.append(Start.model_construct(job=guest.id, allocation=alloc,
                                                 on_loan=False, colocated_with=[host.id]))
        self.started[guest.id] = guest
        self.guest_of_host[host.id] = guest.id
        return True

    def preempt(self, job: Job, reason: PreemptReason) -> None:
        """Stop a running job (and its MPS guest, if any)."""
        if job.id in self.preempted:
            return
        self.preempted.add(job.id)
        st = self.state
        lost = job.restart_cost_s
        self.preempts.append(Preempt.model_construct(job=job.id, reason=reason, lost_s=lost))
        if job.id in st.host_of:  # a guest: its host keeps the GPUs
            self.guest_of_host.pop(st.host_of[job.id], None)
            return
        guest = self.guest_of_host.pop(job.id, None)
        if guest is not None and guest in self.running:
            # a guest runs on no loan: it goes with its host, by priority
            why = PreemptReason.PRIORITY if reason == PreemptReason.RECLAIM else reason
            self.preempt(self.running[guest], why)
        t = st.job_type(job)
        key = (job.tenant, t)
        self.use[key] -= job.gpus
        if not job.on_loan:
            self.own[key] -= job.gpus
        assert job.allocation is not None
        self._unplace(job, list(job.allocation), t)

    def loan_victims(self, t: str) -> list[Job]:
        """Running jobs of type ``t`` on loan (not guests), most recently started first."""
        if self._victims is None:
            st = self.state
            by_type: dict[str, list[Job]] = {tt: [] for tt in self.types}
            for j in self.running.values():
                if j.on_loan and j.id not in st.host_of:
                    by_type[st.job_type(j)].append(j)
            for lst in by_type.values():
                lst.sort(key=lambda j: (-(j.start_s or 0.0), j.id))
            self._victims = by_type
        return self._victims[t]

    def reclaim_for(self, job: Job) -> bool:
        """Preempt other tenants' on-loan jobs so that ``job`` (inside its own quota) fits."""
        st = self.state
        for t in st.allowed_types(job):
            key = (job.tenant, t)
            if self.own[key] + job.gpus > st.quota(job.tenant, t):
                continue
            short = job.gpus - self.free_count(t)
            chosen: list[Job] = []
            for v in self.loan_victims(t):
                if short <= 0:
                    break
                if v.tenant == job.tenant or v.id in self.preempted:
                    continue
                chosen.append(v)
                short -= v.gpus
            if short > 0:
                continue
            for v in chosen:
                self.preempt(v, PreemptReason.RECLAIM)
            if self.start(job, own_only=True):
                return True
        return False

    # ---------------------------------------------------------------- result
    def decision(self, name: str, order: list[Job], seconds: float) -> Decision:
        """The decision: starts, preemptions, every other pending job queued in ``order``."""
        loans: list[Loan] = []
        for t in self.types:
            got = self.loans(t)
            if got is None:  # pragma: no cover - guarded at every start
                raise AssertionError(f"{name}: loans of type '{t}' cannot be covered")
            loans.extend(got)
        queue = [j.id for j in order if j.id not in self.started]
        return Decision.model_construct(
            format=1,
            now=self.now,
            status="feasible",
            solver=SolverInfo.model_construct(
                backend=name, seconds=seconds, objective=None, bound=None, gap=None,
                status_detail=None, fallback_reason=None, stage_seconds={}, notes=[]),
            start=self.starts,
            preempt=self.preempts,
            resize=[],
            queue=queue,
            queue_reasons={},
            explanations={},
            loans=loans,
            kept_over_quota=[],
            assurance={},
            assurance_state={},
            expected_start_s={},
            reservations=[],
            predictions=None,
            workflow_plan=None,
        )  # every field given: pydantic's model_construct inspects each default factory's
        # signature when a field is left out (about 1 ms per decision)


# --------------------------------------------------------------------------- baselines
def _fifo_key(j: Job) -> tuple[float, str]:
    return (j.submit_s, j.id)


PLACEMENTS = ("buddy", "best_fit")
"""Node choice of a baseline's jobs: ``buddy``, the engine's rule (the node whose free chunks
the piece breaks least, then fewest free GPUs; :class:`NodePool`), or ``best_fit``, Lucid's
``ConsolidatePlacement`` (a job of one node on the node with the fewest free GPUs that holds
it, a job of several nodes on the freest nodes; ties in node order; docs/fidelity.md, rule 2)."""


def placement_best_fit(placement: str) -> bool:
    """Whether ``placement`` (one of :data:`PLACEMENTS`) is ``best_fit``."""
    if placement not in PLACEMENTS:
        raise ValueError(f"unknown placement '{placement}' ({', '.join(PLACEMENTS)})")
    return placement == "best_fit"


def fifo_queue(state: ClusterState, tenant: str) -> str | None:
    """The queue a blocked head blocks, for the policies that block (FIFO, and Lucid-like with
    packing off): ``tenant`` when its quota is a hard partition (``borrow_limit`` 0 on every
    GPU type: it can only ever start inside its own quota, as a virtual cluster of Lucid's
    simulator or of Venus' Slurm, each with its own queue), else ``None``, the one queue that
    every tenant that may borrow shares (the pooled cluster)."""
    if all(state.borrow_limit(tenant, t) == 0 for t in state.type_names):
        return tenant
    return None


def fill_blocking(b: DecisionBuilder, order: list[Job]) -> None:
    """Start the jobs of ``order`` in that order; the first job of a queue (:func:`fifo_queue`)
    that does not start blocks the rest of *that* queue, and the others go on. In ``pooled``
    mode that is the whole cluster's one queue; in ``partitioned`` mode one queue per tenant,
    so a tenant whose partition is full does not hold back the others (docs/fidelity.md,
    rule 1)."""
    queue_of = {ten: fifo_queue(b.state, ten) for ten in b.state.tenant_ids}
    queues = len(set(queue_of.values()))
    blocked: set[str | None] = set()
    for job in order:
        q = queue_of[job.tenant]
        if q in blocked:
            continue
        if not b.start(job):
            blocked.add(q)
            if len(blocked) == queues:
                break


class _Hosts:
    """The MPS host candidates of a decision (:meth:`DecisionBuilder.hosts`) in one order,
    kept as jobs start (a job started alone is a host) and hosts take a guest (it is no longer
    one), instead of listing and sorting every running job again for each waiting job.

    :meth:`for_guest` gives the hosts a guest may try, in order, less those the guest can never
    share with (:meth:`DecisionBuilder.can_share`): hosts of other tenants when the guest's
    tenant may borrow nothing on any type, and, with ``by_gpus``, hosts with fewer GPUs than the
    guest. The first host that takes the guest is the one the full sorted list would give.
    """

    def __init__(self, b: DecisionBuilder, key: Callable[[Job], tuple[Any, ...]], *,
                 by_gpus: bool = False) -> None:
        st = b.state
        self.key = key
        self.by_gpus = by_gpus
        self.all: list[tuple[tuple[Any, ...], Job]] = []
        self.mine: dict[str, list[tuple[tuple[Any, ...], Job]]] = defaultdict(list)
        self.own_only = {ten: all(st.borrow_limit(ten, t) == 0 for t in st.type_names)
                         for ten in st.tenant_ids}
        for h in b.hosts():
            self.add(h)

    def add(self, host: Job) -> None:
        item = (self.key(host), host)
        bisect.insort(self.all, item, key=lambda x: x[0])
        bisect.insort(self.mine[host.tenant], item, key=lambda x: x[0])

    def remove(self, host: Job) -> None:
        for items in (self.all, self.mine[host.tenant]):
            k = bisect.bisect_left(items, self.key(host), key=lambda x: x[0])
            assert items[k][1] is host
            del items[k]

    def for_guest(self, guest: Job) -> list[Job]:
        items = self.mine[guest.tenant] if self.own_only[guest.tenant] else self.all
        lo = bisect.bisect_left(items, (guest.gpus,), key=lambda x: x[0]) if self.by_gpus else 0
        return [h for _, h in items[lo:]]


class _Heuristic:
    name = "heuristic"
    backfill = True
    placement = "buddy"
    """See :data:`PLACEMENTS`."""

    def order(self, pending: list[Job], snapshot: Snapshot) -> list[Job]:
        return sorted(pending, key=_fifo_key)

    def decide(self, snapshot: Snapshot, state: ClusterState) -> Decision:
        t0 = time.perf_counter()
        b = DecisionBuilder(state, placement=self.placement)
        order = self.order(state.pending(), snapshot)
        self.fill(b, order)
        return b.decision(self.name, order, time.perf_counter() - t0)

    def fill(self, b: DecisionBuilder, order: list[Job]) -> None:
        if not self.backfill:
            fill_blocking(b, order)
            return
        for job in order:
            b.start(job)


class FifoPolicy(_Heuristic):
    """Strict FIFO, no backfill: the first job of a queue that does not fit blocks the rest of
    its queue (:func:`fill_blocking`)."""

    name = "fifo"
    backfill = False
    idle_when_nothing_fits = "head"  # see optsched.sim.cluster.idle_when_nothing_fits
    clock_free = True  # see optsched.sim.cluster.clock_free

    def __init__(self, *, placement: str = "buddy") -> None:
        placement_best_fit(placement)
        self.placement = placement


class SjfPolicy(_Heuristic):
    name = "sjf"
    idle_when_nothing_fits = "any"
    clock_free = True

    def order(self, pending: list[Job], snapshot: Snapshot) -> list[Job]:
        return sorted(pending, key=lambda j: (estimate(j), j.submit_s, j.id))


class QssfPolicy(_Heuristic):
    name = "qssf"
    idle_when_nothing_fits = "any"
    clock_free = True

    def order(self, pending: list[Job], snapshot: Snapshot) -> list[Job]:
        return sorted(pending, key=lambda j: (estimate(j) * j.gpus, j.submit_s, j.id))


class TiresiasPolicy(_Heuristic):
    """Discretised 2D-LAS; attained service is tracked across epochs by the policy itself."""

    name = "tiresias"

    def __init__(self, thresholds_gpu_s: tuple[float, ...] = (3600.0, 36000.0)) -> None:
        self.thresholds = thresholds_gpu_s
        self.attained: dict[str, float] = defaultdict(float)
        self._seen: dict[str, float] = {}

    def _queue(self, job: Job) -> int:
        a = self.attained.get(job.id, 0.0)
        return sum(1 for th in self.thresholds if a >= th)

    def decide(self, snapshot: Snapshot, state: ClusterState) -> Decision:
        t0 = time.perf_counter()
        now = snapshot.now
        running = state.running()
        seen: dict[str, float] = {}
        for j in running:
            since = max(self._seen.get(j.id, j.start_s or now), j.start_s or now)
            self.attained[j.id] += j.gpus * max(0.0, now - since)
            seen[j.id] = now
        self._seen = seen
        b = DecisionBuilder(state)

        def key(j: Job) -> tuple[int, float, str]:
            return (self._queue(j), j.submit_s, j.id)

        order = sorted(state.pending(), key=key)
        qrun = {r.id: self._queue(r) for r in running}
        victims = sorted(
            (r for r in running if r.is_preemptible and r.id not in state.host_of),
            key=lambda r: (-qrun[r.id], -(r.start_s or 0.0), r.id),
        )
        for job in order:
            if b.start(job):
                continue
            q = self._queue(job)
            if not victims or qrun[victims[0].id] <= q:
                continue  # nobody of a lower-priority queue to preempt
            for t in state.allowed_types(job):
                short = job.gpus - b.free_count(t)
                chosen: list[Job] = []
                for v in victims:
                    if short <= 0 or qrun[v.id] <= q:
                        break
                    if v.id in b.preempted or state.job_type(v) != t:
                        continue
                    chosen.append(v)
                    short -= v.gpus
                if short > 0 or not chosen:
                    continue
                for v in chosen:
                    b.preempt(v, PreemptReason.PRIORITY)
                if b.start(job):
                    break
        for jid in list(self.attained):
            if jid not in state.job_index:
                del self.attained[jid]
        return b.decision(self.name, order, time.perf_counter() - t0)


class KueuePolicy(_Heuristic):
    """Strict quota first (with reclaim), then borrowing; FIFO with backfill; no sharing."""

    name = "kueue"
    clock_free = True  # reclaim chooses victims by start time, never by the clock
    starts_by = ("alone", "quota")  # see optsched.sim.cluster.starts_by

    def fill(self, b: DecisionBuilder, order: list[Job]) -> None:
        for job in order:  # nominal quota, reclaiming lent quota when needed
            if not b.start(job, own_only=True):
                b.reclaim_for(job)
        for job in order:  # borrowing
            if job.id not in b.started:
                b.start(job)


class GandivaPolicy(_Heuristic):
    """FIFO with backfill; pack what does not fit onto the first host whose memory allows."""

    name = "gandiva"
    clock_free = True
    starts_by = ("alone", "guest")  # see optsched.sim.cluster.starts_by

    def fill(self, b: DecisionBuilder, order: list[Job]) -> None:
        hosts = _Hosts(b, lambda h: (h.gpus, h.id), by_gpus=True)  # (smallest host first)
        for job in order:
            if b.start(job):
                hosts.add(job)
                continue
            if not job.is_shareable:
                continue
            for host in hosts.for_guest(job):
                if b.start_guest(job, host):
                    hosts.remove(host)
                    break


class LucidPolicy(_Heuristic):
    """Lucid-like (ASPLOS'23), following the rules of Lucid's own simulator policy:

    * **priority from the runtime estimate**: the queue is sorted by ``runtime_s × gpus``
      (Lucid multiplies its LightGBM estimate by the GPU count; the snapshot's ``runtime_s``
      is that estimate when ``Venus_Sept_lgb.csv`` sits next to the trace), smallest first;
    * **packing rule on measured share scores**: a job of at most ``max_pack_gpus`` GPUs is
      first offered to a running job that holds its GPUs alone, has the same GPU count, fits
      with it in GPU memory, whose profiled share score (``single_data.csv`` ``label``: 0
      tiny, 1 medium, 2 jumbo) adds with the job's to at most ``max_label_sum``, and whose
      priority is at least half the job's (Lucid's time-aware pair picker); the first such
      job in start order becomes its host. Otherwise the job starts alone where it fits, and
      the queue goes on (no blocking);
    * **adaptive switch-off of packing under low load**: Lucid turns packing off when its
      throughput predictor expects at most ``low_load_jobs`` GPU jobs per 10-minute bin over
      the next five bins; this policy has no look into the future and uses the arrivals of
      the last five bins instead (jobs it has seen submitted). With packing off, the queue is
      strict priority order: the first job that does not fit blocks the rest of its queue
      (:func:`fill_blocking`: each tenant's own queue in partitioned mode, as Lucid runs one
      policy per virtual cluster; the whole cluster's when pooled).

    Never preempts; pooled like the other heuristics (``borrow_limit`` 0 in partitioned mode
    keeps every tenant inside its quota).
    """

    name = "lucid"

    def __init__(self, max_label_sum: int = 2, interference: Interference | None = None,
                 *, max_pack_gpus: int = 8, low_load_jobs: float = 2.0,
                 bin_s: float = 600.0, bins: int = 5, placement: str = "buddy") -> None:
        placement_best_fit(placement)
        self.placement = placement
        self.max_label_sum = max_label_sum
        self.max_pack_gpus = max_pack_gpus
        self.low_load_jobs = low_load_jobs
        self.bin_s = bin_s
        self.bins = bins
        self.prof = interference or synthetic_interference()
        self._seen: set[str] = set()
        self._arrivals: list[float] = []  # submission times seen, ascending

    def order(self, pending: list[Job], snapshot: Snapshot) -> list[Job]:
        return sorted(pending, key=lambda j: (self.priority(j), j.submit_s, j.id))

    @staticmethod
    def priority(job: Job) -> float:
        return estimate(job) * job.gpus

    def label(self, job: Job) -> int | None:
        f = job.features or {}
        try:
            key = (str(f["model"]), str(f["dataset"]), int(f["batchsize"]), int(f["amp"]))
        except (KeyError, TypeError, ValueError):
            return None
        p = self.prof.profile(key)
        return None if p is None else p.label

    def packing_on(self, snapshot: Snapshot) -> bool:
        """Whether recent arrivals (jobs per bin over the last ``bins`` bins) exceed the
        low-load threshold."""
        for job in snapshot.jobs:
            if job.id not in self._seen:
                self._seen.add(job.id)
                bisect.insort(self._arrivals, job.submit_s)
        since = snapshot.now - self.bins * self.bin_s
        k = bisect.bisect_right(self._arrivals, since)
        del self._arrivals[:k]
        return len(self._arrivals) / self.bins > self.low_load_jobs

    def decide(self, snapshot: Snapshot, state: ClusterState) -> Decision:
        t0 = time.perf_counter()
        b = DecisionBuilder(state, placement=self.placement)
        order = self.order(state.pending(), snapshot)
        if self.packing_on(snapshot):
            self.fill(b, order)
        else:
            fill_blocking(b, order)
        return b.decision(self.name, order, time.perf_counter() - t0)

    def fill(self, b: DecisionBuilder, order: list[Job]) -> None:
        for job in order:
            if job.gpus <= self.max_pack_gpus and self._pack(b, job):
                continue
            b.start(job)

    def _pack(self, b: DecisionBuilder, job: Job) -> bool:
        lj = self.label(job)
        if lj is None:
            return False
        prio = self.priority(job)
        hosts = sorted(b.hosts(), key=lambda h: (h.start_s if h.start_s is not None
                                                 else b.now, h.id))
        for host in hosts:
            if host.gpus != job.gpus:
                continue
            lh = self.label(host)
            if lh is None or lj + lh > self.max_label_sum:
                continue
            if prio > 2.0 * self.priority(host):
                continue
            if b.start_guest(job, host):
                return True
        return False


class AntManPolicy(_Heuristic):
    """AntMan-like (OSDI'20) guaranteed / opportunistic scheduling.

    * **guaranteed jobs** (``qos: guaranteed``) run on their tenant's quota, in FIFO order;
      when the free GPUs do not hold one that fits its tenant's quota, opportunistic work is
      preempted for it (on-loan jobs first, then best-effort jobs and MPS guests, most
      recently started first) — AntMan's guaranteed jobs take their GPUs back at once;
    * **opportunistic jobs** (best-effort, and guaranteed ones beyond their quota), FIFO:
      they start on idle GPUs (on loan when above quota, within every ``borrow_limit``), and
      when no idle GPUs are left a job of at most ``max_guest_gpus`` GPUs is *squeezed* in as
      an MPS guest of a running job whose GPU memory leaves room (most free memory first),
      as AntMan packs opportunistic jobs onto GPUs under-used by guaranteed ones. The
      simulator's measured pair speeds slow both jobs of a pair (AntMan's GPU-level priority
      for the guaranteed job is not modelled).

    Preempts only preemptible work, on-loan jobs and guests (the checker's rule).
    """

    name = "antman"
    clock_free = True  # victims by (on loan, start time), never by the clock
    starts_by = ("alone", "guest", "quota")  # see optsched.sim.cluster.starts_by

    def __init__(self, max_guest_gpus: int = 8) -> None:
        self.max_guest_gpus = max_guest_gpus

    def decide(self, snapshot: Snapshot, state: ClusterState) -> Decision:
        t0 = time.perf_counter()
        b = DecisionBuilder(state)
        order = sorted(state.pending(), key=_fifo_key)
        opportunistic: list[Job] = []
        for job in order:
            if job.qos != "guaranteed" or (not b.start(job, own_only=True) and not self._make_room(b, job)):
                opportunistic.append(job)
        hosts = _Hosts(b, lambda h: (-self._room(b, h), h.id))  # (most free memory first)
        for job in opportunistic:
            if b.start(job):
                hosts.add(job)
                continue
            if job.gpus > self.max_guest_gpus or not job.is_shareable:
                continue
            for host in hosts.for_guest(job):
                if b.start_guest(job, host):
                    hosts.remove(host)
                    break
        return b.decision(self.name, order, time.perf_counter() - t0)

    @staticmethod
    def _room(b: DecisionBuilder, host: Job) -> float:
        st = b.state
        refs = host.allocation if host.allocation is not None else [
            r for s in b.starts if s.job == host.id for r in s.allocation]
        mem = st.snapshot.gpu_types[st.node_type(refs[0].node)].memory_gib
        return mem - (host.memory_gib or mem)

    def _make_room(self, b: DecisionBuilder, job: Job) -> bool:
        """Preempt opportunistic work so that guaranteed ``job`` starts inside its quota."""
        st = b.state
        for t in st.allowed_types(job):
            if b.own[(job.tenant, t)] + job.gpus > st.quota(job.tenant, t):
                continue
            short = job.gpus - b.free_count(t)
            victims = [v for v in b.running.values()
                       if v.id not in b.preempted and v.id not in st.host_of
                       and st.job_type(v) == t and (v.on_loan or v.is_preemptible)]
            victims.sort(key=lambda v: (not v.on_loan, -(v.start_s or 0.0), v.id))
            chosen: list[Job] = []
            for v in victims:
                if short <= 0:
                    break
                chosen.append(v)
                short -= v.gpus
            if short > 0:
                continue
            for v in chosen:
                b.preempt(v, PreemptReason.RECLAIM if v.on_loan else PreemptReason.PRIORITY)
            if b.start(job, own_only=True):
                return True
        return False


# --------------------------------------------------------------------------- optsched
class ReplayPredictor:
    """The engine's trained predictor with each job's estimate kept for the replay.

    The simulator builds a job's ``Job`` once when it arrives (its features never change after)
    and once when it starts, with the same prediction inputs, so an estimate made once holds
    for the job's lifetime: only jobs not seen yet (by id and size, and the very features
    object they carry) are predicted, each as it would be in a full call (a job's estimate
    depends on the job and the GPU types alone). Without a base that predicts a subset of a
    snapshot's jobs, every call goes to the base.
    """

    def __init__(self, base: Any) -> None:
        self.base = base
        self.name = base.name
        self._jobs: dict[tuple[str, int], tuple[object, JobEstimate]] = {}
        self._source = ""
        try:
            from optsched.predict.lgbm import LightGBMPredictor
        except ImportError:  # pragma: no cover - lightgbm is a dependency
            self._subset = False
        else:
            self._subset = isinstance(base, LightGBMPredictor)

    def predict_jobs(self, state: ClusterState) -> Predictions:
        if not self._subset:
            preds: Predictions = self.base.predict_jobs(state)
            return preds
        out: dict[str, JobEstimate] = {}
        todo: list[Job] = []
        for job in state.snapshot.jobs:
            got = self._jobs.get((job.id, job.gpus))
            if got is not None and got[0] is job.features:
                out[job.id] = got[1]
            else:
                todo.append(job)
        if todo or not self._source:
            fresh = self.base.predict_jobs(state, todo)
            self._source = fresh.source
            for job in todo:
                est = fresh.jobs[job.id]
                self._jobs[(job.id, job.gpus)] = (job.features, est)
                out[job.id] = est
        return Predictions(jobs={j.id: out[j.id] for j in state.snapshot.jobs}, source=self._source)

    def predict_pair(self, state: ClusterState, host: Job, guest: Job) -> PairEstimate:
        pair: PairEstimate = self.base.predict_pair(state, host, guest)
        return pair


class OraclePredictor:
    """Returns the simulator's ground truth: true total runtime, memory and pair speeds.

    For the predictor comparison only (issue 4): no real scheduler can have it.
    """

    name = "oracle"

    def __init__(self, truth: GroundTruth) -> None:
        self.truth = truth

    def predict_jobs(self, state: ClusterState) -> Predictions:
        out: dict[str, JobEstimate] = {}
        for job in state.snapshot.jobs:
            rt = self.truth.runtime.get(job.id)
            mem = self.truth.memory.get(job.id) or job.memory_gib
            if mem is None:
                mem = max(state.snapshot.gpu_types[t].memory_gib for t in state.allowed_types(job))
            out[job.id] = JobEstimate(
                rt if rt is not None else DEFAULT_RUNTIME_S, mem, "oracle", "oracle")
        return Predictions(jobs=out, source="oracle")

    def predict_pair(self, state: ClusterState, host: Job, guest: Job) -> PairEstimate:
        hs, gs = self.truth.pair_speeds(host.id, guest.id)
        return PairEstimate(hs, gs, "oracle")


class OptschedPolicy:
    """The engine: :func:`optsched.solve_epoch` with a backend, time limit and predictor.

    ``backend="auto"`` is the engine's one default backend (:data:`optsched.engine.epoch.DEFAULT_BACKEND`);
    ``predictor`` is ``trained`` (the engine's default: shipped models when present),
    ``fallback`` (the snapshot's estimates only) or ``oracle`` (:class:`OraclePredictor`).
    """

    name = "optsched"
    event_preempts = False
    """Its event decisions stop no job: :meth:`decide_event` runs the event path without
    ``preempt_own`` (the simulator's test of an unchanged event decision relies on it, as on
    :meth:`event_hosts`: both describe the event path, which decides every event the checker
    lets it)."""
    checks_itself = True
    """Every decision it returns passed :func:`~optsched.engine.check.check_decision` against
    the state it was given, work conservation included (the engine's epoch path and event path
    check before they return), so the simulator does not run that check a second time."""

    def __init__(self, *, backend: str = "auto", time_limit_s: float = 0.2, seed: int = 0,
                 predictor: str = "trained", truth: GroundTruth | None = None,
                 num_workers: int = 1, lookahead_epochs: int | None = None,
                 reserve_min_gpus: int | None = None) -> None:
        from optsched.engine.backends.base import SolveParams

        # the look-ahead's options travel in the snapshot (None: the engine's defaults)
        self.lookahead = {k: v for k, v in (("lookahead_epochs", lookahead_epochs),
                                            ("reserve_min_gpus", reserve_min_gpus)) if v is not None}

        self.params = SolveParams(backend=backend, time_limit_s=time_limit_s, seed=seed,
                                  num_workers=num_workers)
        self.predictor_name = predictor
        self.event_fallbacks = 0
        """Event decisions the event path could not make (the full model made them)."""
        self.predictor: Any = None
        if predictor == "oracle":
            if truth is None:
                raise ValueError("the oracle predictor needs the simulator's ground truth")
            self.predictor = OraclePredictor(truth)
        elif predictor == "fallback":
            from optsched.predict.fallback import EstimatePredictor

            self.predictor = EstimatePredictor()
        elif predictor != "trained":
            raise ValueError(f"unknown predictor '{predictor}' (trained, fallback, oracle)")
        else:
            # the engine's default (trained models when present), each job predicted once
            from optsched.engine.epoch import default_predictor

            self.predictor = ReplayPredictor(default_predictor())

    def decide(self, snapshot: Snapshot, state: ClusterState) -> Decision:
        from optsched.engine.epoch import DEFAULT_BACKEND, solve_epoch

        params = self.params
        if params.backend == "auto":
            params = params.with_(backend=DEFAULT_BACKEND)
        if self.lookahead:
            from optsched.schema.snapshot import Options

            snap = state.snapshot
            snap.options = (snap.options or Options()).model_copy(update=self.lookahead)
        # the state is already validated: solve_epoch accepts it as is
        return solve_epoch(state, params=params, predictor=self.predictor)

    def unchanged(
        self, event: bool, tenant_ids: Sequence[str], assurance_state: dict[str, dict[str, Any]] | None,
        state: Callable[[], ClusterState],
    ) -> tuple[dict[str, float], dict[str, dict[str, Any]]] | None:
        """The ``assurance`` and ``assurance_state`` of this policy's decision when no job can
        start (see :func:`optsched.sim.cluster.unchanged_figures`): the event path, which then
        stops nothing, carries the previous state
        (:func:`optsched.engine.admit.quiet_event_assurance`); an epoch computes the signal
        from the snapshot, and may still stop evicted MPS guests or jobs on loan: None then
        (:func:`optsched.engine.assurance.quiet_figures`)."""
        if event:
            from optsched.engine.admit import quiet_event_assurance

            return quiet_event_assurance(tenant_ids, assurance_state)
        from optsched.engine.assurance import quiet_figures

        return quiet_figures(state())

    def event_hosts(
        self, tenant_ids: Sequence[str], assurance_state: dict[str, dict[str, Any]] | None
    ) -> frozenset[str]:
        """The tenants whose running jobs may host an MPS guest in an event decision
        (:func:`optsched.engine.admit.sharing_tenants`): what the simulator's test of an
        unchanged event decision asks of a host (see
        :func:`optsched.sim.cluster.unchanged_figures`)."""
        from optsched.engine.admit import sharing_tenants

        return sharing_tenants(tenant_ids, assurance_state)

    def decide_event(self, snapshot: Snapshot, state: ClusterState) -> Decision:
        """Between epochs: the engine's event path (:func:`optsched.engine.admit.decide_event`),
        or the full model when the event path cannot give a checked decision."""
        from optsched.engine.admit import EventPathError, decide_event
        from optsched.engine.epoch import default_predictor

        pred = self.predictor if self.predictor is not None else default_predictor()
        try:
            return decide_event(state, predictor=pred, weights=self.params.objective)
        except EventPathError:
            self.event_fallbacks += 1
            return self.decide(snapshot, state)


def make_policy(name: str, *, seed: int = 0, truth: GroundTruth | None = None,
                options: dict[str, Any] | None = None) -> Policy:
    """A fresh policy by name (policies may keep state across epochs of one run). ``options``
    are the policy's keyword arguments: optsched's (:class:`OptschedPolicy`), or ``placement``
    for ``fifo`` and ``lucid`` (:data:`PLACEMENTS`)."""
    opts = dict(options or {})
    if opts and name not in ("optsched", "fifo", "lucid"):
        raise ValueError(f"policy '{name}' takes no options (given: {', '.join(sorted(opts))})")
    if name in ("fifo", "lucid") and set(opts) - {"placement"}:
        raise ValueError(f"policy '{name}' takes only the option 'placement' "
                         f"(given: {', '.join(sorted(opts))})")
    factories: dict[str, Callable[[], Policy]] = {
        "fifo": lambda: FifoPolicy(**opts),
        "sjf": SjfPolicy,
        "qssf": QssfPolicy,
        "tiresias": TiresiasPolicy,
        "kueue": KueuePolicy,
        "gandiva": GandivaPolicy,
        "lucid": lambda: LucidPolicy(interference=truth.interference if truth else None, **opts),
        "antman": AntManPolicy,
        "optsched": lambda: OptschedPolicy(seed=seed, truth=truth, **opts),
    }
    if name not in factories:
        raise ValueError(f"unknown policy '{name}' (choose from {', '.join(POLICIES)})")
    return factories[name]()

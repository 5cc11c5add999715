"""The serving pool's size as a decision: cluster GPUs lent to the workflow pool under a burst.

:func:`decide_pool` runs inside :func:`optsched.engine.epoch.solve_epoch`, before the cluster
part, on the snapshot's ``workflows.pool_lending`` rules and its lent pool GPUs
(``Device.lent_by``). It weighs the workflow backlog's marginal value of one more pool GPU
against the cluster value of that GPU and returns a :class:`PoolDecision`; the cluster part
and the workflow planner then see the pool it leaves
(:func:`optsched.engine.workflows.check.effective_state`), and invariant 9
(:func:`optsched.engine.workflows.check.check_pool_decision`) checks it.

**Backlog and drain time (fluid).** ``W`` = the predicted seconds, on the reference GPU
(``h100``, speed 1), of every pending activation run alone (no fusion), plus the running work
left on each device (``busy_until_s - now`` times its speed). A device of type ``t`` has speed
``latency(h100) / latency(t)`` of a reference activation (8B model, 1,000 prompt and 200
output tokens): h100 1.0, a100 0.57, l40s 0.27, a10g 0.17. The pool drains ``W`` in
``D = W / R`` seconds at its summed speed ``R``.

**Lending (grow).** While ``D > grow_drain_s`` and the pool is below ``max_size``, the next GPU
is the one with the largest net value over one epoch (``snapshot.epoch_s``):

* workflow value: ``session_value x N x (D - W / (R + s)) / 2`` session-seconds, ``N`` the
  sessions with pending work (on a fluid drain the mean session finishes half the drain-time
  reduction earlier);
* cost: the load of the most demanded model that fits the GPU (GPU-seconds), plus ``epoch_s``
  GPU-seconds of cluster work when a queued cluster job that could borrow the GPU would
  otherwise get it (free GPUs beyond the queued demand cost nothing).

The pool never grows beyond the *runnable width*: running activations plus the pending ones
whose dependencies are all done (no more GPUs can start work now; a GPU beyond it waits with a
model resident). It must be a free cluster GPU (on an available node, no running job) of a type in
``pool_lending.gpu_types``, from the idle quota of an allowed lender: ``quota - own use -
already lent to the pool - the in-quota demand of its own queued guaranteed jobs`` (owner
first), within ``lend_limit``, while every tenant's running borrowed use stays covered by the
remaining idle quota of the type (no reclaim is caused) and the free GPUs left still hold the
owners' queued in-quota demand. Among GPUs of a type, the most fragmented node goes first
(whole nodes stay free for gangs); among lenders, the one with the most lendable quota.

**Returning (shrink).** A lent GPU goes back

* at once when its node is lost (``node_unavailable``);
* when its lender has queued guaranteed work that fits its quota but not its quota less the
  pool's GPUs, or that finds too few free GPUs of the type (``owner_needs``): as many as that
  work needs, so the owner's job starts in the same call without reclaiming a borrower's job;
* when the snapshot no longer allows it (``not_lendable``: type, lender or ``max_size``);
* when the burst has passed: it has been lent ``min_lend_s`` or longer and the backlog drains
  within ``return_drain_s`` without it, or the pool has more GPUs than the runnable width
  (``burst_passed``); slowest GPUs first.

Only idle lent GPUs go back (no running activation, ``busy_until_s`` not after ``now``; a busy
one goes back at the first epoch it is idle), except on a lost node. The band between
``return_drain_s`` and ``grow_drain_s`` plus ``min_lend_s`` is the hysteresis that keeps the
pool from thrashing; an epoch that returns a GPU lends none. Everything is a pure function of
the snapshot: same snapshot, same pool.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache

from optsched.engine.state import ClusterState, GpuKey
from optsched.engine.workflows.check import lent_devices, model_load_s
from optsched.engine.workflows.problem import model_spec
from optsched.predict.activation import ActivationPredictor, ModelSpec
from optsched.schema.decision import PoolDecision, PoolLoan, PoolReturn
from optsched.schema.snapshot import GpuRef, Job

REF_TYPE = "h100"
"""The reference GPU type (speed 1.0) of backlog work."""
REF_SPEC = ModelSpec(params_b=8.0, memory_gib=18.5)
REF_TOKENS = (1000, 200)


@lru_cache(maxsize=64)
def _speed(pred: ActivationPredictor, gtype: str) -> float:
    try:
        ref = pred.latency_s(REF_SPEC, *REF_TOKENS, REF_TYPE)
        return ref / pred.latency_s(REF_SPEC, *REF_TOKENS, gtype)
    except KeyError:
        return 0.0


def type_speed(gtype: str, pred: ActivationPredictor | None = None) -> float:
    """Speed of one GPU of ``gtype`` for workflow work relative to ``h100``; 0 when uncalibrated."""
    return _speed(pred or ActivationPredictor.default(), gtype)


@dataclass(frozen=True)
class Backlog:
    """The workflow backlog of a snapshot, as the pool decision sees it."""

    work_s: float
    """Pending work (reference seconds, unfused) plus the running work left on each device."""
    waiting: int
    """Sessions with pending activations."""
    activations: int
    """Pending and running activations."""
    width: int
    """Running activations plus the pending ones whose dependencies are all done: no more
    GPUs than this can start work now; a GPU beyond it waits for running work to release
    more (and idles with a model resident)."""
    rate: float
    """Summed speed of the pool's GPUs."""
    demand: tuple[tuple[str, float], ...]
    """(model, pending reference seconds), most demanded first."""

    def drain_s(self, rate: float | None = None) -> float:
        r = self.rate if rate is None else rate
        if self.work_s <= 0:
            return 0.0
        return math.inf if r <= 0 else self.work_s / r


def backlog(state: ClusterState, pred: ActivationPredictor | None = None) -> Backlog:
    """Fluid view of the snapshot's workflow backlog on its pool."""
    pred = pred or ActivationPredictor.default()
    snap = state.snapshot
    wf = snap.workflows
    if wf is None:
        return Backlog(0.0, 0, 0, 0, 0.0, ())
    now = snap.now
    specs = {m: model_spec(x.params_b, x.memory_gib) for m, x in wf.models.items()}
    work = 0.0
    waiting = acts = width = 0
    demand: dict[str, float] = defaultdict(float)
    for s in wf.sessions:
        pending = [a for a in s.activations if a.state == "pending"]
        waiting += bool(pending)
        acts += sum(1 for a in s.activations if a.state != "done")
        done = {a.id for a in s.activations if a.state == "done"}
        width += sum(
            1
            for a in s.activations
            if a.state == "running" or (a.state == "pending" and all(x in done for x in a.after))
        )
        for a in pending:
            sec = pred.latency_s(specs[a.model], a.input_tokens, a.output_tokens, REF_TYPE)
            work += sec
            demand[a.model] += sec
    rate = 0.0
    for d in wf.pool:
        sp = _speed(pred, state.node_type(d.node))
        rate += sp
        work += sp * max(0.0, d.busy_until_s - now)
    order = tuple(sorted(demand.items(), key=lambda kv: (-kv[1], kv[0])))
    return Backlog(work, waiting, acts, width, rate, order)


def _own_use(state: ClusterState) -> dict[tuple[str, str], int]:
    """GPUs per (tenant, type) held by running jobs, MPS guests excluded."""
    use: dict[tuple[str, str], int] = defaultdict(int)
    for job in state.running():
        if job.id in state.host_of:
            continue
        use[(job.tenant, state.job_type(job))] += job.gpus
    return use


def _in_quota_demand(
    state: ClusterState, use: dict[tuple[str, str], int], lent: dict[tuple[str, str], int]
) -> dict[tuple[str, str], tuple[int, int]]:
    """Per (tenant, type): queued guaranteed GPUs that fit its quota, and those that fit its
    quota only without the GPUs it lends to the pool (the owner needs them back)."""
    out: dict[tuple[str, str], tuple[int, int]] = {}
    jobs: dict[str, list[Job]] = defaultdict(list)
    for job in state.pending():
        if job.qos == "guaranteed":
            jobs[job.tenant].append(job)
    for ten, js in jobs.items():
        for t in state.type_names:
            q = state.quota(ten, t)
            u = use.get((ten, t), 0)
            lp = lent.get((ten, t), 0)
            fit = blocked = 0
            for job in sorted(js, key=lambda j: (j.submit_s, j.id)):
                if t not in state.allowed_types(job):
                    continue
                if u + fit + job.gpus <= q:
                    fit += job.gpus
                    if u + fit + lp > q:
                        blocked = u + fit + lp - q
            if fit:
                out[(ten, t)] = (fit, min(lp, blocked))
    return out


def decide_pool(state: ClusterState, pred: ActivationPredictor | None = None) -> PoolDecision | None:
    """The pool decision of one epoch (see the module docstring); ``None`` when the snapshot
    neither allows lending (``workflows.pool_lending``) nor holds lent pool GPUs."""
    snap = state.snapshot
    wf = snap.workflows
    lent_by = lent_devices(state)
    if wf is None or (wf.pool_lending is None and not lent_by):
        return None
    pred = pred or ActivationPredictor.default()
    pl = wf.pool_lending
    now = snap.now
    bl = backlog(state, pred)
    notes: list[str] = []
    busy = {
        a.device.key()
        for s in wf.sessions
        for a in s.activations
        if a.state == "running" and a.device is not None
    }
    devs = {d.key(): d for d in wf.pool}

    def idle(key: GpuKey) -> bool:
        return key not in busy and devs[key].busy_until_s <= now + 1e-9

    use = _own_use(state)
    lent: dict[tuple[str, str], int] = defaultdict(int)
    for key, ten in lent_by.items():
        lent[(ten, state.node_type(key[0]))] += 1
    need = _in_quota_demand(state, use, lent)
    free_n: dict[str, int] = defaultdict(int)
    for key in state.cluster_gpus():
        if key not in state.gpu_holders:
            free_n[state.node_type(key[0])] += 1
    size = len(wf.pool)
    rate = bl.rate
    returns: list[PoolReturn] = []
    gone: set[GpuKey] = set()

    def give_back(key: GpuKey, reason: str, why: str) -> None:
        nonlocal size, rate
        ten = lent_by[key]
        t = state.node_type(key[0])
        returns.append(PoolReturn(gpu=GpuRef(node=key[0], gpu=key[1]), lender=ten, reason=reason))
        gone.add(key)
        lent[(ten, t)] -= 1
        size -= 1
        rate -= _speed(pred, t)
        notes.append(f"return {key[0]}/{key[1]} to '{ten}': {why}")

    # slowest first, then the most recently lent, then by id: a stable order
    def ret_key(key: GpuKey) -> tuple[float, float, GpuKey]:
        since = devs[key].lent_since_s
        return (_speed(pred, state.node_type(key[0])), -(since if since is not None else -math.inf), key)

    lent_keys = sorted(lent_by, key=ret_key)
    for key in lent_keys:
        if not state.node_available(key[0]):
            give_back(key, "node_unavailable", "its node is unavailable")
    owner_back: set[tuple[str, str]] = set()
    for key in lent_keys:
        if key in gone or not idle(key):
            continue
        ten, t = lent_by[key], state.node_type(key[0])
        fit, blocked = need.get((ten, t), (0, 0))
        # its quota back, and room: free GPUs of the type first, then its own lent ones (a
        # borrower's job is not reclaimed for work the pool's GPUs can make room for)
        short = max(0, fit - free_n[t])
        want = max(blocked, short)
        if want > 0:
            owner_back.add((ten, t))
            free_n[t] += 1
            need[(ten, t)] = (fit, max(0, blocked - 1))
            give_back(key, "owner_needs", f"its queued guaranteed work needs {want} more GPU(s) "
                      "of its quota")
    for key in lent_keys:
        if key in gone or not idle(key):
            continue
        ten, t = lent_by[key], state.node_type(key[0])
        why = None
        if pl is None:
            why = "the snapshot no longer allows pool lending"
        elif t not in pl.gpu_types:
            why = f"type '{t}' is no longer lendable"
        elif pl.lenders is not None and ten not in pl.lenders:
            why = f"'{ten}' is no longer a lender"
        elif pl.max_size is not None and size > pl.max_size:
            why = f"the pool is above max_size {pl.max_size}"
        if why is not None:
            give_back(key, "not_lendable", why)
    if pl is not None and (bl.drain_s(rate) <= pl.return_drain_s or size > bl.width):
        for key in lent_keys:
            if key in gone or not idle(key) or size - 1 < pl.min_size:
                continue
            since = devs[key].lent_since_s
            if since is not None and now - since < pl.min_lend_s:
                continue
            sp = _speed(pred, state.node_type(key[0]))
            after = bl.drain_s(rate - sp)
            if after <= pl.return_drain_s:
                give_back(key, "burst_passed", f"the backlog drains in {after:.1f} s without it "
                          f"(return_drain_s {pl.return_drain_s:g})")
            elif size > bl.width:
                give_back(key, "burst_passed", f"{bl.width} activation(s) can run now on {size} pool GPUs")

    lends: list[PoolLoan] = []
    if pl is not None and not returns:
        lends = _grow(state, pred, bl, rate, size, use, lent, need, owner_back, notes)
        for loan in lends:
            lent[(loan.lender, loan.gpu_type)] += 1
            rate += _speed(pred, loan.gpu_type)
        size += len(lends)
    drain = bl.drain_s(rate)
    per: dict[str, dict[str, int]] = defaultdict(dict)
    for (ten, t), n in sorted(lent.items()):
        if n > 0:
            per[ten][t] = n
    return PoolDecision(
        lend=lends,
        returned=returns,
        size=size,
        lent=dict(per),
        backlog_s=round(bl.work_s, 6),
        drain_s=None if math.isinf(drain) else round(drain, 6),
        notes=notes,
    )


def _grow(
    state: ClusterState,
    pred: ActivationPredictor,
    bl: Backlog,
    rate: float,
    size: int,
    use: dict[tuple[str, str], int],
    lent: dict[tuple[str, str], int],
    need: dict[tuple[str, str], tuple[int, int]],
    owner_back: set[tuple[str, str]],
    notes: list[str],
) -> list[PoolLoan]:
    snap = state.snapshot
    wf = snap.workflows
    assert wf is not None and wf.pool_lending is not None
    pl = wf.pool_lending
    if bl.drain_s(rate) <= pl.grow_drain_s or bl.waiting == 0:
        return []
    lenders = list(pl.lenders) if pl.lenders is not None else list(state.tenant_ids)
    held = state.gpu_holders
    free: dict[str, list[GpuKey]] = defaultdict(list)
    per_node: dict[str, int] = defaultdict(int)
    for key in state.cluster_gpus():
        if key in held:
            continue
        per_node[key[0]] += 1
        t = state.node_type(key[0])
        if t in pl.gpu_types and _speed(pred, t) > 0:
            free[t].append(key)
    for t in free:
        free[t].sort(key=lambda k: (per_node[k[0]], k[0], k[1]))
    # per type: free GPUs left for queued work, borrowers' coverage, lendable quota per lender
    queued_any: dict[str, int] = defaultdict(int)
    for job in state.pending():
        for t in state.allowed_types(job):
            queued_any[t] += job.gpus
    lendable: dict[tuple[str, str], int] = {}
    budget: dict[str, int] = {}
    for t in free:
        idle_total = over = owner = 0
        for ten in state.tenant_ids:
            q = state.quota(ten, t) - lent.get((ten, t), 0)
            u = use.get((ten, t), 0)
            idle_total += max(0, q - u)
            over += max(0, u - q)
            fit = need.get((ten, t), (0, 0))[0]
            owner += fit
            if ten not in lenders or (ten, t) in owner_back:
                continue
            room = q - u - fit
            ll = state.lend_limit(ten, t)
            if ll is not None:
                room = min(room, ll - lent.get((ten, t), 0))
            if room > 0:
                lendable[(ten, t)] = room
        budget[t] = min(idle_total - over - owner, len(free[t]) - owner)
    taken: dict[str, int] = defaultdict(int)
    out: list[PoolLoan] = []
    epoch = snap.epoch_s
    mem = {m: x.memory_gib for m, x in wf.models.items()}
    while (pl.max_size is None or size < pl.max_size) and size < bl.width:
        drain = bl.drain_s(rate)
        if drain <= pl.grow_drain_s:
            break
        best: tuple[float, str] | None = None
        for t in sorted(free):
            k = taken[t]
            if k >= budget[t] or k >= len(free[t]):
                continue
            if not any(lendable.get((ten, t), 0) > 0 for ten in lenders):
                continue
            sp = _speed(pred, t)
            gain = pl.session_value * bl.waiting * (drain - bl.drain_s(rate + sp)) / 2.0
            top = next((m for m, _ in bl.demand if mem[m] <= snap.gpu_types[t].memory_gib), None)
            load = model_load_s(state, top, t) if top is not None else 0.0
            # the k-th GPU of the type: free GPUs beyond the queued demand cost no cluster work
            cluster = epoch if len(free[t]) - k <= queued_any[t] else 0.0
            net = gain - load - cluster
            if net > 0 and (best is None or net > best[0]):
                best = (net, t)
        if best is None:
            break
        net, t = best
        key = free[t][taken[t]]
        taken[t] += 1
        ten = min((x for x in lenders if lendable.get((x, t), 0) > 0), key=lambda x: (-lendable[(x, t)], x))
        lendable[(ten, t)] -= 1
        out.append(PoolLoan(gpu=GpuRef(node=key[0], gpu=key[1]), lender=ten, gpu_type=t))
        rate += _speed(pred, t)
        size += 1
        notes.append(f"lend {key[0]}/{key[1]} ('{t}') from '{ten}': drain {drain:.1f} s -> "
                     f"{bl.drain_s(rate):.1f} s for {bl.waiting} waiting sessions (net {net:.1f})")
    return out

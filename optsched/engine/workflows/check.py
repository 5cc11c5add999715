"""Invariant 6 of the spec: the rules every workflow plan must hold.

Written without any solver or predictor, so it can judge every planner. The rules
(each broken one gives a :class:`~optsched.engine.check.Violation` with ``invariant=6``):

1. **ids** — every unit has a unique id, a known session, and lists known, *pending*
   activations of that session; each pending activation is planned at most once.
2. **fusion** — all activations of a unit use the unit's ``model`` (one model per unit) and
   belong to the unit's session; a dependency between two members of one unit must point to
   an earlier member (a fused chain keeps its order, so each activation computes the same thing).
3. **times** — ``now <= start_s < end_s``.
4. **devices** — a unit runs on a GPU of the serving pool, and model actions name pool GPUs
   and known models.
5. **dependencies** — a unit starts no earlier than the end of every unit holding an activation
   it depends on (outside the unit itself); a dependency that is neither done, running nor
   planned makes the unit invalid. A *running* activation is taken to end at
   ``max(now, busy_until_s)`` of its device (the snapshot's promise of when the device is free).
6. **one at a time** — units on one device do not overlap, and none starts before the device's
   ``busy_until_s`` (which covers its running activation).
7. **loaded before use** — the unit's model is resident on its device for the whole of
   ``[start_s, end_s]``: resident at ``now`` or loaded by a ``load`` action that completes
   (``at_s + load time``) by ``start_s``, and not evicted before ``end_s``. A running
   activation's model is not evicted before the activation ends.
8. **memory** — at every instant, the memory of the models resident or being loaded on a device
   stays within the GPU's memory. A load starts occupying memory at ``at_s``; an evict frees it
   at ``at_s``.
9. **actions** — a model is not loaded while resident (or being loaded) and not evicted while
   absent; actions happen no earlier than ``now``.

Invariant 9 (pool-lending), for decisions that lend cluster GPUs to the pool or return them,
is :func:`check_pool_decision`; :func:`effective_state` is the state the cluster part and the
planner see once the pool decision is applied.

Load time (:func:`model_load_s`): the model's ``load_s`` for the GPU type when the snapshot
gives it, else ``memory_gib / DEFAULT_LOAD_GIB_S`` (a conservative SSD safetensors rate).
"""

from __future__ import annotations

import itertools
from collections import defaultdict

from optsched.engine.state import ClusterState, GpuKey
from optsched.engine.violations import Violation
from optsched.schema.decision import Decision, ModelAction, PoolDecision, Unit, WorkflowPlan
from optsched.schema.snapshot import Activation, Device

EPS = 1e-6
DEFAULT_LOAD_GIB_S = 2.0
"""Loading rate (GiB/s) assumed when a model has no measured ``load_s`` for a GPU type."""

INV = 6


def model_load_s(state: ClusterState, model: str, gpu_type: str) -> float:
    """Seconds to load ``model`` onto one GPU of ``gpu_type`` (as the checker counts it)."""
    wf = state.snapshot.workflows
    assert wf is not None
    m = wf.models[model]
    if m.load_s and gpu_type in m.load_s:
        return float(m.load_s[gpu_type])
    return m.memory_gib / DEFAULT_LOAD_GIB_S


def device_free_at(state: ClusterState, key: GpuKey) -> float:
    """When a pool device can start its next unit: ``max(now, busy_until_s)``."""
    wf = state.snapshot.workflows
    assert wf is not None
    for dev in wf.pool:
        if dev.key() == key:
            return max(state.snapshot.now, dev.busy_until_s)
    return state.snapshot.now


def _v(msg: str, *ids: str) -> Violation:
    return Violation(INV, msg, tuple(ids))


def check_workflow_plan(state: ClusterState, plan: WorkflowPlan) -> list[Violation]:
    """Every broken rule of invariant 6 for ``plan`` (empty when the plan is valid)."""
    snap = state.snapshot
    wf = snap.workflows
    now = snap.now
    out: list[Violation] = []
    if wf is None:
        if plan.units or plan.model_actions:
            out.append(_v("a workflow plan is given but the snapshot has no workflows"))
        return out

    devices = {d.key(): d for d in wf.pool}
    dev_mem = {k: snap.gpu_types[state.node_type(k[0])].memory_gib for k in devices}
    sessions = {s.id: s for s in wf.sessions}
    act_info: dict[tuple[str, str], Activation] = {}
    for s in wf.sessions:
        for a in s.activations:
            act_info[(s.id, a.id)] = a
    running_on: dict[GpuKey, list[tuple[str, str]]] = defaultdict(list)
    for (sid, aid), a in act_info.items():
        if a.state == "running" and a.device is not None:
            running_on[a.device.key()].append((sid, aid))

    # ---------------------------------------------------------------- rules 1-4
    unit_ids: set[str] = set()
    planned: dict[tuple[str, str], Unit] = {}
    good_units: list[Unit] = []
    for u in plan.units:
        ok = True
        if u.id in unit_ids:
            out.append(_v(f"unit id '{u.id}' is used twice", u.id))
            ok = False
        unit_ids.add(u.id)
        if u.session not in sessions:
            out.append(_v(f"unit '{u.id}' names unknown session '{u.session}'", u.id))
            continue
        if not u.activations:
            out.append(_v(f"unit '{u.id}' has no activation", u.id))
            ok = False
        if u.model not in wf.models:
            out.append(_v(f"unit '{u.id}' uses unknown model '{u.model}'", u.id))
            ok = False
        if len(set(u.activations)) != len(u.activations):
            out.append(_v(f"unit '{u.id}' lists an activation twice", u.id))
            ok = False
        members = set(u.activations)
        seen_before: set[str] = set()
        for aid in u.activations:
            found = act_info.get((u.session, aid))
            if found is None:
                out.append(_v(f"unit '{u.id}': unknown activation '{aid}' in '{u.session}'", u.id))
                ok = False
                continue
            a = found
            if a.state != "pending":
                out.append(_v(f"unit '{u.id}' plans '{aid}', which is {a.state}", u.id, aid))
                ok = False
            if a.model != u.model:
                out.append(
                    _v(
                        f"unit '{u.id}' fuses '{aid}' of model '{a.model}' into a '{u.model}' unit",
                        u.id,
                        aid,
                    )
                )
                ok = False
            for dep in a.after:
                if dep in members and dep not in seen_before:
                    out.append(_v(f"unit '{u.id}': '{aid}' comes before its dependency '{dep}'", u.id))
                    ok = False
            seen_before.add(aid)
            akey = (u.session, aid)
            if akey in planned:
                out.append(_v(f"'{aid}' is planned twice ('{planned[akey].id}', '{u.id}')", aid))
                ok = False
            else:
                planned[akey] = u
        if not u.end_s > u.start_s + EPS:
            out.append(_v(f"unit '{u.id}' ends at {u.end_s} <= start {u.start_s}", u.id))
            ok = False
        if u.start_s < now - EPS:
            out.append(_v(f"unit '{u.id}' starts at {u.start_s}, before now {now}", u.id))
            ok = False
        if u.device.key() not in devices:
            out.append(_v(f"unit '{u.id}' runs on {u.device.node}/{u.device.gpu}, not a pool GPU", u.id))
            ok = False
        if ok:
            good_units.append(u)

    # ---------------------------------------------------------------- rule 5: dependencies
    for u in good_units:
        members = set(u.activations)
        for aid in u.activations:
            a = act_info[(u.session, aid)]
            for dep in a.after:
                if dep in members:
                    continue
                d = act_info[(u.session, dep)]
                if d.state == "done":
                    continue
                if d.state == "running":
                    assert d.device is not None
                    end = device_free_at(state, d.device.key())
                    if u.start_s < end - EPS:
                        out.append(
                            _v(
                                f"unit '{u.id}' starts at {u.start_s:.3f} before running "
                                f"'{dep}' ends ({end:.3f})",
                                u.id,
                                dep,
                            )
                        )
                    continue
                du = planned.get((u.session, dep))
                if du is None:
                    out.append(
                        _v(
                            f"unit '{u.id}': dependency '{dep}' of '{aid}' is not planned",
                            u.id,
                            dep,
                        )
                    )
                elif u.start_s < du.end_s - EPS:
                    out.append(
                        _v(
                            f"unit '{u.id}' starts at {u.start_s:.3f} before unit '{du.id}' "
                            f"(holding '{dep}') ends at {du.end_s:.3f}",
                            u.id,
                            du.id,
                        )
                    )

    # ---------------------------------------------------------------- rule 6: one at a time
    by_dev: dict[GpuKey, list[Unit]] = defaultdict(list)
    for u in good_units:
        by_dev[u.device.key()].append(u)
    for key, units in by_dev.items():
        free = device_free_at(state, key)
        units.sort(key=lambda x: (x.start_s, x.end_s, x.id))
        for u in units:
            if free > now and u.start_s < free - EPS:
                out.append(
                    _v(
                        f"unit '{u.id}' starts at {u.start_s:.3f} on {key[0]}/{key[1]}, busy "
                        f"until {free:.3f}",
                        u.id,
                    )
                )
        for p, q in itertools.pairwise(units):
            if q.start_s < p.end_s - EPS:
                out.append(_v(f"units '{p.id}' and '{q.id}' overlap on {key[0]}/{key[1]}", p.id, q.id))

    # ---------------------------------------------------------------- rules 7-9: residency
    actions_by_dev: dict[GpuKey, list[ModelAction]] = defaultdict(list)
    for k, act in enumerate(plan.model_actions):
        key = act.device.key()
        if key not in devices:
            out.append(_v(f"model_actions[{k}] on {act.device.node}/{act.device.gpu}, not a pool GPU"))
            continue
        if act.model not in wf.models:
            out.append(_v(f"model_actions[{k}] names unknown model '{act.model}'"))
            continue
        if act.at_s < now - EPS:
            out.append(_v(f"model_actions[{k}] at {act.at_s} is before now {now}"))
        actions_by_dev[key].append(act)

    for key, dev in devices.items():
        gtype = state.node_type(key[0])
        where = f"{key[0]}/{key[1]}"
        # residency intervals per model: list of (ready_from, occupied_from, until)
        intervals: dict[str, list[list[float]]] = defaultdict(list)
        for m in dev.resident:
            intervals[m].append([now, now, float("inf")])
        acts = sorted(actions_by_dev.get(key, []), key=lambda a: (a.at_s, a.action != "evict", a.model))
        for act in acts:
            ivs = intervals[act.model]
            current = ivs[-1] if ivs and ivs[-1][2] == float("inf") else None
            if act.action == "load":
                if current is not None:
                    out.append(_v(f"loads '{act.model}' on {where} at {act.at_s}, already there"))
                    continue
                ready = act.at_s + model_load_s(state, act.model, gtype)
                ivs.append([ready, act.at_s, float("inf")])
            else:
                if current is None:
                    out.append(_v(f"evicts '{act.model}' on {where} at {act.at_s}, not there"))
                    continue
                current[2] = act.at_s
        # memory: sweep over occupation intervals
        events: list[tuple[float, int, float]] = []
        for m, ivs in intervals.items():
            mem = wf.models[m].memory_gib
            for _, occ, until in ivs:
                events.append((occ, 1, mem))
                if until != float("inf"):
                    events.append((until, 0, -mem))
        events.sort()
        used = 0.0
        for t, _, delta in events:
            used += delta
            if used > dev_mem[key] + EPS:
                out.append(
                    _v(f"{where} holds {used:.1f} GiB of models at {t:.3f}, the GPU has {dev_mem[key]:.1f}")
                )
                break
        # loaded before use
        for u in by_dev.get(key, []):
            ivs = intervals.get(u.model, [])
            if not any(r <= u.start_s + EPS and u.end_s <= until + EPS for r, _, until in ivs):
                out.append(
                    _v(
                        f"unit '{u.id}' uses '{u.model}' on {where} during "
                        f"[{u.start_s:.3f}, {u.end_s:.3f}] while it is not loaded",
                        u.id,
                    )
                )
        for sid, aid in running_on.get(key, []):
            a = act_info[(sid, aid)]
            end = device_free_at(state, key)
            ivs = intervals.get(a.model, [])
            if not any(r <= now + EPS and end <= until + EPS for r, _, until in ivs):
                out.append(_v(f"'{a.model}' is evicted from {where} while '{aid}' still runs on it", aid))
    return out


# ---------------------------------------------------------------------------- pool lending
POOL_INV = 9
"""Invariant 9 (pool-lending): the rules of a decision's ``pool`` part."""


def lent_devices(state: ClusterState) -> dict[GpuKey, str]:
    """Pool GPUs lent from the cluster: GPU -> the tenant whose quota holds it."""
    wf = state.snapshot.workflows
    if wf is None:
        return {}
    return {d.key(): d.lent_by for d in wf.pool if d.lent_by is not None}


def effective_state(state: ClusterState, pool: PoolDecision | None) -> ClusterState:
    """The state the cluster part and the workflow planner see once ``pool`` is applied.

    Lent GPUs that stay and GPUs lent now are pool GPUs (no cluster job may use them), returned
    ones are cluster GPUs again, and every lender's ``quota`` (and ``lend_limit``) of a type is
    lowered by the GPUs of that type it has lent to the pool: the cluster model sees them as
    the lender's use. Entries the pool checker rejects (unknown GPUs, GPUs held by running
    jobs, busy returns) are left out so that the state stays valid. Without lent GPUs and
    without a pool decision, ``state`` itself.
    """
    snap = state.snapshot
    wf = snap.workflows
    if wf is None or (pool is None and not lent_devices(state)):
        return state
    now = snap.now
    running_on = _running_devices(state)
    returned: set[GpuKey] = set()
    if pool is not None:
        for r in pool.returned:
            key = r.gpu.key()
            avail = key[0] in state.node_index and state.node_available(key[0])
            if key not in running_on or not avail:
                returned.add(key)
    lent: dict[tuple[str, str], int] = defaultdict(int)
    devices: list[Device] = []
    for d in wf.pool:
        if d.lent_by is not None:
            if d.key() in returned and d.key() not in running_on:
                continue
            lent[(d.lent_by, state.node_type(d.node))] += 1
        devices.append(d.model_copy(update={"lent_by": None, "lent_since_s": None}))
    keys = {d.key() for d in devices}
    for loan in pool.lend if pool is not None else []:
        key = loan.gpu.key()
        i = state.node_index.get(key[0])
        if i is None or key[1] >= snap.nodes[i].gpus or key in keys or key in state.gpu_holders:
            continue
        if loan.lender not in state.tenant_index:
            continue
        keys.add(key)
        devices.append(Device(node=key[0], gpu=key[1], busy_until_s=now))
        lent[(loan.lender, state.node_type(key[0]))] += 1
    tenants = []
    for ten in snap.tenants:
        mine = {t: n for (who, t), n in lent.items() if who == ten.id}
        if not mine:
            tenants.append(ten)
            continue
        quota = dict(ten.quota)
        for t, n in mine.items():
            quota[t] = max(0, quota.get(t, 0) - n)
        upd: dict[str, object] = {"quota": quota}
        if ten.lend_limit is not None:
            upd["lend_limit"] = {
                t: max(0, v - mine.get(t, 0)) for t, v in ten.lend_limit.items()
            }
        tenants.append(ten.model_copy(update=upd))
    new_wf = wf.model_copy(update={"pool": devices, "pool_lending": None})
    return ClusterState.from_snapshot(snap.model_copy(update={"workflows": new_wf, "tenants": tenants}))


def _running_devices(state: ClusterState) -> set[GpuKey]:
    wf = state.snapshot.workflows
    assert wf is not None
    return {
        a.device.key()
        for s in wf.sessions
        for a in s.activations
        if a.state == "running" and a.device is not None
    }


def _use_after(state: ClusterState, decision: Decision) -> dict[tuple[str, str], int]:
    """GPUs per (tenant, type) held after the decision; MPS guests use no quota."""
    preempted = {p.job for p in decision.preempt}
    use: dict[tuple[str, str], int] = defaultdict(int)
    for job in state.running():
        if job.id in preempted or job.id in state.host_of:
            continue
        use[(job.tenant, state.job_type(job))] += job.gpus
    for s in decision.start:
        if s.colocated_with or s.job not in state.job_index or not s.allocation:
            continue
        if s.allocation[0].node not in state.node_index:
            continue
        use[(state.job(s.job).tenant, state.node_type(s.allocation[0].node))] += len(s.allocation)
    return use


def check_pool_decision(state: ClusterState, decision: Decision) -> list[Violation]:
    """Invariant 9 (pool-lending): the ``pool`` part of ``decision`` against ``state``.

    * a lent GPU is a cluster GPU on an available node, of the type it names, of a type
      ``pool_lending.gpu_types`` lists, lent by a tenant ``pool_lending.lenders`` allows, held by
      no running job and given to no started job, lent once; nothing is lent without
      ``pool_lending``;
    * idle quota only: for each lender and type it lends now, its use after the decision plus
      what it lends to tenants plus what the pool holds of its quota is within its quota, and
      loans to tenants plus the pool's within its ``lend_limit``;
    * owner first: a lender does not lend a type while one of its guaranteed jobs allowed on
      that type stays queued and would fit in its quota without the new pool loans;
    * a returned GPU is a lent pool GPU of that lender, idle (no running activation and
      ``busy_until_s`` not after ``now``) unless its node is unavailable;
    * ``size`` and ``lent`` state the pool after the decision; growth stays within
      ``max_size``; a ``burst_passed``/``not_lendable`` return does not take the pool below
      ``min_size`` (an owner's need and a lost node may).
    """
    pool = decision.pool
    if pool is None:
        return []
    out: list[Violation] = []

    def bad(msg: str, *ids: str) -> None:
        out.append(Violation(POOL_INV, msg, tuple(ids)))

    snap = state.snapshot
    wf = snap.workflows
    if wf is None:
        bad("the decision changes the workflow pool but the snapshot has no workflows")
        return out
    pl = wf.pool_lending
    now = snap.now
    in_pool = {d.key(): d for d in wf.pool}
    running_on = _running_devices(state)
    started = {ref.key(): s.job for s in decision.start for ref in s.allocation}
    lent_after: dict[tuple[str, str], int] = defaultdict(int)
    new_lent: dict[tuple[str, str], int] = defaultdict(int)
    seen: set[GpuKey] = set()
    n_lend = 0
    for k, loan in enumerate(pool.lend):
        where = f"pool.lend[{k}] ({loan.gpu.node}/{loan.gpu.gpu})"
        key = loan.gpu.key()
        if pl is None:
            bad(f"{where}: the snapshot has no workflows.pool_lending", loan.lender)
        i = state.node_index.get(key[0])
        if i is None or key[1] >= snap.nodes[i].gpus:
            bad(f"{where}: unknown GPU")
            continue
        t = snap.nodes[i].gpu_type
        if key in in_pool:
            bad(f"{where}: already in the pool")
            continue
        if key in seen:
            bad(f"{where}: lent twice")
            continue
        seen.add(key)
        if not snap.nodes[i].available:
            bad(f"{where}: node is unavailable")
        if loan.gpu_type != t:
            bad(f"{where}: names type '{loan.gpu_type}' but the GPU is '{t}'")
        if pl is not None and t not in pl.gpu_types:
            bad(f"{where}: type '{t}' may not be lent to the pool (pool_lending.gpu_types)")
        if loan.lender not in state.tenant_index:
            bad(f"{where}: unknown tenant '{loan.lender}'", loan.lender)
            continue
        if pl is not None and pl.lenders is not None and loan.lender not in pl.lenders:
            bad(f"{where}: '{loan.lender}' is not among pool_lending.lenders", loan.lender)
        if key in state.gpu_holders:
            bad(f"{where}: held by running job(s) {list(state.gpu_holders[key])}", *state.gpu_holders[key])
            continue
        if key in started:
            bad(f"{where}: the decision starts '{started[key]}' on it", started[key])
            continue
        lent_after[(loan.lender, t)] += 1
        new_lent[(loan.lender, t)] += 1
        n_lend += 1
    n_ret = 0
    shrink_below_min = False
    returned: set[GpuKey] = set()
    for k, r in enumerate(pool.returned):
        key = r.gpu.key()
        where = f"pool.returned[{k}] ({key[0]}/{key[1]})"
        dev = in_pool.get(key)
        if dev is None or dev.lent_by is None:
            bad(f"{where}: not a lent pool GPU")
            continue
        if key in returned:
            bad(f"{where}: returned twice")
            continue
        if dev.lent_by != r.lender:
            bad(f"{where}: lent by '{dev.lent_by}', not '{r.lender}'", r.lender)
        avail = state.node_available(key[0])
        if avail and (key in running_on or dev.busy_until_s > now + EPS):
            bad(f"{where}: still busy (a running activation or busy_until_s after now)")
            continue
        returned.add(key)
        n_ret += 1
        shrink_below_min |= r.reason in ("burst_passed", "not_lendable")
    for key, dev in in_pool.items():
        if dev.lent_by is not None and key not in returned:
            lent_after[(dev.lent_by, state.node_type(key[0]))] += 1
    size = len(wf.pool) - n_ret + n_lend
    if pool.size != size:
        bad(f"pool.size is {pool.size}, the pool has {size} GPUs after the decision")
    stated = {(ten, t): n for ten, per in pool.lent.items() for t, n in per.items() if n}
    actual = {k: v for k, v in lent_after.items() if v}
    if stated != actual:
        bad(f"pool.lent {dict(sorted(stated.items()))} differs from the GPUs lent after the decision "
            f"{dict(sorted(actual.items()))}")
    if pl is not None and n_lend and pl.max_size is not None and size > pl.max_size:
        bad(f"the pool grows to {size} GPUs, max_size {pl.max_size}")
    if pl is not None and shrink_below_min and size < pl.min_size:
        bad(f"returns take the pool to {size} GPUs, min_size {pl.min_size}")
    use = _use_after(state, decision)
    loans_out: dict[tuple[str, str], int] = defaultdict(int)
    loans_in: dict[tuple[str, str], int] = defaultdict(int)
    for tl in decision.loans:
        loans_out[(tl.lender, tl.gpu_type)] += tl.gpus
        loans_in[(tl.borrower, tl.gpu_type)] += tl.gpus
    queued = set(decision.queue)
    for (ten, t), n_new in sorted(new_lent.items()):
        q = state.quota(ten, t)
        # own use: what it holds less what it borrows (borrowed GPUs use the lenders' quota)
        u = use.get((ten, t), 0) - loans_in[(ten, t)]
        lo, lp = loans_out[(ten, t)], lent_after[(ten, t)]
        if u + lo + lp > q:
            bad(f"tenant '{ten}' lends {lp} '{t}' GPUs to the pool and {lo} to tenants and uses {u} "
                f"of its own: beyond its quota {q} (only idle quota may be lent)", ten)
        ll = state.lend_limit(ten, t)
        if ll is not None and lo + lp > ll:
            bad(f"tenant '{ten}' lends {lo + lp} '{t}' GPUs (pool {lp}), lend_limit {ll}", ten)
        for job in state.pending():
            if job.tenant != ten or job.id not in queued or job.qos != "guaranteed":
                continue
            if t not in state.allowed_types(job):
                continue
            if u + lo + lp - n_new + job.gpus <= q:
                bad(f"tenant '{ten}' lends {n_new} '{t}' GPUs to the pool while its guaranteed job "
                    f"'{job.id}' ({job.gpus} GPUs) waits within its quota", ten, job.id)
                break
    return out

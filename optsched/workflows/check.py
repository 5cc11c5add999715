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

Load time (:func:`model_load_s`): the model's ``load_s`` for the GPU type when the snapshot
gives it, else ``memory_gib / DEFAULT_LOAD_GIB_S`` (a conservative SSD safetensors rate).
"""

from __future__ import annotations

import itertools
from collections import defaultdict

from optsched.engine.state import ClusterState, GpuKey
from optsched.engine.violations import Violation
from optsched.schema.decision import ModelAction, Unit, WorkflowPlan
from optsched.schema.snapshot import Activation

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

r"""The workflow planner: one CP-SAT model per epoch over a rolling window, greedy fallback.

:func:`plan_workflows` is what :func:`optsched.engine.epoch.solve_epoch` calls. Steps:

1. :func:`~optsched.engine.workflows.problem.build_workflow_problem` — predictor, constructor (fusion
   alternatives), DAG forecast (release times, ranks, model demand).
2. The greedy list schedule (:data:`~optsched.engine.workflows.greedy.OURS_GREEDY`: shortest remaining
   session work first, earliest finish with setup, load-ahead, demand-aware eviction). It is
   the fallback and the CP-SAT hint.
3. The *window*: the first ``window`` activations of the greedy order (closed under
   dependencies). CP-SAT chooses alternatives, device and order jointly on the window:

   .. math::

      \sum_{c \ni a} sel_c = 1 \quad \forall a; \qquad \sum_d x_{cd} = sel_c; \qquad
      x_{cd} \Rightarrow e_c = s_c + p_{cd},\; s_c \ge free_d; \qquad s_c \ge r_c

      NoOverlap_d(\{[s_c, s_c + p_{cd}) : x_{cd}\}); \qquad
      sel_c \wedge sel_{c'} \Rightarrow s_c \ge e_{c'} \text{ if } c \text{ depends on } c'

      x_{cd} \Rightarrow e_c \le ev_{dm} \text{ (m resident) or } (ld_{dm} \wedge
      s_c \ge ls_{dm} + L_{dm}); \quad NoOverlap_d(\text{loads}); \quad
      Cumulative_d(\{[0, ev_{dm}) : m \text{ resident}\} \cup \{[ls_{dm}, H) : ld_{dm}\},
      mem_m, M_d)

   objective :math:`\min \sum_s w_s C_s + \beta\, T + \gamma(\sum p_{cd} x_{cd} +
   \sum L_{dm} ld_{dm}) + \lambda \sum L_{dm} ld_{dm} - \lambda \sum L_{dm} keep_{dm}` with
   :math:`C_s \ge e_c + tail_c` (the predicted critical path after the unit) and
   :math:`T \ge C_s`. A resident model is evicted at :math:`ev_{dm}` when that is before the
   horizon (never before the running activation that uses it ends).
4. The rest of the pending activations (the tail) are list-scheduled after the window from the
   residency CP-SAT left. The plan with the better predicted score (CP-SAT+tail or greedy)
   wins; the result is checked by invariant 6 and replaced by the greedy plan if it fails.

``time_limit_s`` is a hard deadline for the whole call: CP-SAT gets what is left after steps 1–2
minus a margin; when it returns no solution in time the greedy plan is returned with
``status="fallback"``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace

from optsched.engine.state import ClusterState
from optsched.engine.workflows.check import check_workflow_plan
from optsched.engine.workflows.greedy import (
    OURS_GREEDY,
    DevState,
    ListPolicy,
    Placed,
    Schedule,
    list_schedule,
)
from optsched.engine.workflows.problem import ActKey, Cand, Problem, build_workflow_problem
from optsched.predict.activation import ActivationPredictor
from optsched.schema.decision import WorkflowPlan

SCALE = 100
"""CP-SAT time unit: 1/100 s."""


@dataclass(frozen=True)
class PlannerConfig:
    """Knobs of the CP-SAT planner."""

    window: int = 24
    """Pending activations given to CP-SAT per epoch (the rest are list-scheduled)."""
    beta_tail: float = 0.0
    """Weight of the window makespan; 0 = number of sessions in the window / 4."""
    gamma_gpu: float = 0.3
    """Weight of GPU-seconds (compute + loading)."""
    completion_weight: float = 1.0
    """Weight of the sum of (weighted) session completions."""
    keep_bonus: bool = True
    """Reward keeping a resident model that pending work still wants (``load_penalty`` x its
    load seconds, in the same units as session completion)."""
    load_penalty: float = 2.0
    """Extra weight of each load second (on top of ``gamma_gpu``), as in the greedy placement."""
    makespan_slack: float = 0.0
    """Keep the CP-SAT plan only if its predicted makespan is within this share of the greedy's."""
    tail_estimate: bool = True
    """Add each unit's predicted remaining critical path to its session's completion."""
    num_workers: int = 1
    work_share: float = 0.5
    """CP-SAT's deterministic-time budget as a share of the planner's nominal time limit."""
    margin_s: float = 0.1
    fusion: bool = True
    keep_warm: bool = True
    """Evict models whose predicted next use comes after their reload cost is repaid
    (:mod:`optsched.engine.workflows.warm`)."""


def _makespan(sched: Schedule) -> float:
    return max((p.end for p in sched.placed), default=0.0)


def score(prob: Problem, sched: Schedule, cfg: PlannerConfig) -> float:
    """Predicted quality of a schedule (lower is better), the CP-SAT objective over all units."""
    comp: dict[str, float] = {}
    gpu = 0.0
    for p in sched.placed:
        comp[p.cand.session] = max(comp.get(p.cand.session, prob.now), p.end)
        gpu += p.end - p.start
    for d, m, what, _ in sched.actions:
        if what == "load":
            gpu += (1.0 + cfg.load_penalty / max(cfg.gamma_gpu, 1e-9)) * prob.load[(m, prob.devices[d].gtype)]
    if not comp:
        return 0.0
    beta = cfg.beta_tail or max(1.0, len(comp) / 4.0)
    total = sum(prob.session_weight[s] * (c - prob.now) for s, c in comp.items())
    return total + beta * (max(comp.values()) - prob.now) + cfg.gamma_gpu * gpu


def plan_workflows(
    state: ClusterState,
    *,
    time_limit_s: float,
    seed: int = 0,
    predictor: ActivationPredictor | None = None,
    config: PlannerConfig | None = None,
    work_s: float | None = None,
) -> WorkflowPlan:
    """Plan every pending activation of ``state``; always returns a plan passing invariant 6.

    ``work_s`` is CP-SAT's deterministic-time budget (default: ``work_share`` of
    ``time_limit_s``); ``time_limit_s`` is the wall-clock safety net.
    """
    t0 = time.monotonic()
    deadline = t0 + max(0.0, time_limit_s)
    cfg = config or PlannerConfig()
    prob = build_workflow_problem(state, predictor, fusion=cfg.fusion)
    if not prob.acts:
        # nothing to plan, but the resident models still cost idle GPU-seconds: the keep-warm
        # rule decides which of them go (a running activation's model after it ends)
        idle = list_schedule(prob, OURS_GREEDY if cfg.keep_warm else replace(OURS_GREEDY, keep_warm=False))
        return idle.to_plan(prob, "optimal", ["no pending activation"])
    greedy_policy = replace(OURS_GREEDY, fusion=cfg.fusion, keep_warm=cfg.keep_warm)
    greedy = list_schedule(prob, greedy_policy)
    g_plan = greedy.to_plan(prob, "fallback", ["greedy list schedule"])
    # reserve time after CP-SAT for the tail schedule, the plan and its check: about what the
    # problem and the greedy took, plus a fixed margin
    reserve = cfg.margin_s + 1.5 * (time.monotonic() - t0)
    left = deadline - time.monotonic() - reserve
    if left < 0.02:
        g_plan.notes.append("no time left for CP-SAT")
        return g_plan
    # the search stops on deterministic work derived from the nominal limit (never from the
    # time measured so far), so the same snapshot gives the same plan; the wall clock left is
    # only the safety net
    work = work_s if work_s is not None else cfg.work_share * max(0.0, time_limit_s)
    result = _solve_window(prob, greedy, cfg, left * 0.9, seed, greedy_policy, work_s=work)
    if result is None:
        g_plan.notes.append("CP-SAT found no solution in time")
        return g_plan
    sched, status, note = result
    worse_tail = _makespan(sched) > _makespan(greedy) * (1.0 + cfg.makespan_slack) + 1e-6
    if worse_tail or score(prob, sched, cfg) > score(prob, greedy, cfg) + 1e-6:
        g_plan.status = "feasible"
        why = "a later predicted makespan" if worse_tail else "a worse predicted score"
        g_plan.notes = [f"greedy list schedule (the CP-SAT window gave {why})", note]
        return g_plan
    plan = sched.to_plan(prob, status, [note])
    bad = check_workflow_plan(state, plan)
    if bad:
        g_plan.notes.append(f"CP-SAT plan rejected by invariant 6: {bad[0]}")
        return g_plan
    return plan


def _ceil(x: float) -> int:
    return max(0, math.ceil(x * SCALE - 1e-7))


def _solve_window(
    prob: Problem,
    greedy: Schedule,
    cfg: PlannerConfig,
    limit_s: float,
    seed: int,
    tail_policy: ListPolicy,
    bound: list[float] | None = None,
    work_s: float | None = None,
) -> tuple[Schedule, str, str] | None:
    """CP-SAT on the window; ``bound`` (if given) receives [objective, best bound].

    ``limit_s`` counts from the call: building the model uses part of it, the search the rest.
    """
    solve_deadline = time.monotonic() + limit_s
    # imported here, inside the limit: a solve, not ``import optsched``, pays for loading OR-Tools
    from ortools.sat.python import cp_model
    now = prob.now
    order = sorted(greedy.placed, key=lambda p: (p.start, p.dev))
    window: set[ActKey] = set()
    for p in order:
        if len(window) + len(p.cand.members) > cfg.window and window:
            break
        window.update((p.cand.session, a) for a in p.cand.members)
    cands = [c for c in prob.cands if all((c.session, a) in window for a in c.members)]
    devs = prob.devices
    nd = len(devs)
    m = cp_model.CpModel()

    hz = float(max(_ceil(d.free_at - now) for d in devs))
    hz += max(_ceil(prob.acts[k].release - now) for k in window)
    hz += sum(max(c.dur.values()) for c in cands if c.kind == "single") * SCALE
    hz += sum(_ceil(v) for v in prob.load.values()) + SCALE
    horizon = int(hz)

    sel = [m.new_bool_var(f"sel{i}") for i in range(len(cands))]
    s = [m.new_int_var(0, horizon, f"s{i}") for i in range(len(cands))]
    e = [m.new_int_var(0, horizon, f"e{i}") for i in range(len(cands))]
    x: dict[tuple[int, int], cp_model.IntVar] = {}
    dur: dict[tuple[int, int], int] = {}
    by_dev: dict[int, list[cp_model.IntervalVar]] = {d: [] for d in range(nd)}
    for i, c in enumerate(cands):
        rel = max(prob.acts[(c.session, a)].release for a in c.members if not _dep_in(c, a, prob))
        m.add(s[i] >= _ceil(rel - now))
        m.add(e[i] >= s[i])
        opts = []
        for d, dev in enumerate(devs):
            if not prob.fits(c.model, dev):
                continue
            v = m.new_bool_var(f"x{i}_{d}")
            pd = max(1, _ceil(c.dur[dev.gtype]))
            x[(i, d)], dur[(i, d)] = v, pd
            by_dev[d].append(m.new_optional_fixed_size_interval_var(s[i], pd, v, f"iv{i}_{d}"))
            m.add(e[i] == s[i] + pd).only_enforce_if(v)
            m.add(s[i] >= _ceil(dev.free_at - now)).only_enforce_if(v)
            opts.append(v)
        if not opts:
            return None
        m.add(sum(opts) == sel[i])
    for k in sorted(window):
        m.add_exactly_one(sel[i] for i, c in enumerate(cands) if c.session == k[0] and k[1] in c.members)
    # precedence
    holders: dict[ActKey, list[int]] = {}
    for i, c in enumerate(cands):
        for a in c.members:
            holders.setdefault((c.session, a), []).append(i)
    for i, c in enumerate(cands):
        for a in c.members:
            for dep in prob.acts[(c.session, a)].deps:
                if dep in c.members:
                    continue
                for j in holders[(c.session, dep)]:
                    if j == i:
                        continue
                    if set(cands[j].members) & set(c.members):
                        continue
                    m.add(s[i] >= e[j]).only_enforce_if([sel[i], sel[j]])
    # residency: resident models stay until ev (evicted then, if before the horizon), loaded
    # models occupy memory from the load's start on; cumulative memory per device.
    ev: dict[tuple[int, str], cp_model.IntVar] = {}
    keep: dict[tuple[int, str], cp_model.IntVar] = {}
    ld: dict[tuple[int, str], cp_model.IntVar] = {}
    ls: dict[tuple[int, str], cp_model.IntVar] = {}
    load_len: dict[tuple[int, str], int] = {}
    obj_terms: list[cp_model.LinearExprT] = []
    for d, dev in enumerate(devs):
        used_models = sorted({cands[i].model for (i, dd) in x if dd == d})
        res_ivs: list[cp_model.IntervalVar] = []
        demands: list[int] = []
        for mod in dev.resident:
            lo = _ceil(dev.free_at - now) if mod in dev.pinned else 0
            ev[(d, mod)] = m.new_int_var(min(lo, horizon), horizon, f"ev{d}_{mod}")
            keep[(d, mod)] = m.new_bool_var(f"keep{d}_{mod}")
            m.add(ev[(d, mod)] == horizon).only_enforce_if(keep[(d, mod)])
            m.add(ev[(d, mod)] < horizon).only_enforce_if(keep[(d, mod)].Not())
            res_ivs.append(m.new_interval_var(0, ev[(d, mod)], ev[(d, mod)], f"res{d}_{mod}"))
            demands.append(round(prob.mem[mod] * 1000))
        loads = []
        for mod in used_models:
            if mod in dev.resident:
                continue
            ld[(d, mod)] = m.new_bool_var(f"ld{d}_{mod}")
            ls[(d, mod)] = m.new_int_var(0, horizon, f"ls{d}_{mod}")
            load_len[(d, mod)] = max(1, _ceil(prob.load[(mod, dev.gtype)]))
            loads.append(
                m.new_optional_fixed_size_interval_var(
                    ls[(d, mod)], load_len[(d, mod)], ld[(d, mod)], f"load{d}_{mod}"
                )
            )
            size = m.new_int_var(0, horizon, f"occ{d}_{mod}")
            m.add(size == horizon - ls[(d, mod)])
            res_ivs.append(
                m.new_optional_interval_var(ls[(d, mod)], size, horizon, ld[(d, mod)], f"resl{d}_{mod}")
            )
            demands.append(round(prob.mem[mod] * 1000))
        m.add_no_overlap(loads)
        m.add_no_overlap(by_dev[d])
        m.add_cumulative(res_ivs, demands, math.floor(dev.mem_gib * 1000 + 1e-6))
        for (i, dd), v in x.items():
            if dd != d:
                continue
            mod = cands[i].model
            if mod in dev.resident:
                m.add(e[i] <= ev[(d, mod)]).only_enforce_if(v)
            else:
                m.add_implication(v, ld[(d, mod)])
                m.add(s[i] >= ls[(d, mod)] + load_len[(d, mod)]).only_enforce_if(v)
    # objective: C_s >= end of each unit plus the predicted critical path after it
    sessions = sorted({c.session for c in cands})
    comp = {sid: m.new_int_var(0, 2 * horizon, f"C{sid}") for sid in sessions}
    single = {(c.session, c.members[0]): c for c in prob.cands if c.kind == "single"}
    for i, c in enumerate(cands):
        after = 0.0
        for a in c.members if cfg.tail_estimate else ():
            sd = single[(c.session, a)].dur
            after = max(after, prob.rank[(c.session, a)] - sum(sd.values()) / len(sd))
        m.add(comp[c.session] >= e[i] + _ceil(max(0.0, after))).only_enforce_if(sel[i])
    tmax = m.new_int_var(0, 2 * horizon, "T")
    for v in comp.values():
        m.add(tmax >= v)
    beta = cfg.beta_tail or max(1.0, len(sessions) / 4.0)
    w = {sid: prob.session_weight[sid] for sid in sessions}
    gam = cfg.gamma_gpu
    cw = cfg.completion_weight
    obj_terms += [round(10 * cw * w[sid]) * comp[sid] for sid in sessions]
    obj_terms.append(round(10 * beta) * tmax)
    obj_terms += [round(10 * gam * dur[k]) * v for k, v in x.items()]
    lp = cfg.load_penalty
    obj_terms += [round(10 * (gam + lp) * load_len[k]) * v for k, v in ld.items()]
    obj_terms += [
        -round(10 * lp * prob.load[(mod, devs[d].gtype)] * SCALE) * v
        for (d, mod), v in keep.items()
        if cfg.keep_bonus and prob.demand.get(mod, 0.0) > 0
    ]
    m.minimize(sum(obj_terms))

    # hint from the greedy schedule (units, device, times, loads, evictions)
    g_units = {(p.cand.session, p.cand.members): p for p in greedy.placed}
    for i, c in enumerate(cands):
        gp = g_units.get((c.session, c.members))
        m.add_hint(sel[i], gp is not None)
        if gp is not None:
            m.add_hint(s[i], _ceil(gp.start - now))
            m.add_hint(e[i], _ceil(gp.start - now) + dur.get((i, gp.dev), 0))
        for d in range(nd):
            if (i, d) in x:
                m.add_hint(x[(i, d)], gp is not None and gp.dev == d)
    first: dict[tuple[int, str, str], float] = {}
    for d, mod, what, at in sorted(greedy.actions, key=lambda a: a[3]):
        first.setdefault((d, mod, what), at)
    for (d, mod), v in ev.items():
        t_ev = first.get((d, mod, "evict"))
        m.add_hint(keep[(d, mod)], t_ev is None)
        m.add_hint(v, horizon if t_ev is None else min(horizon - 1, _ceil(t_ev - now)))
    for (d, mod), v in ld.items():
        t_ld = first.get((d, mod, "load"))
        m.add_hint(v, t_ld is not None)
        if t_ld is not None:
            m.add_hint(ls[(d, mod)], _ceil(t_ld - now))

    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.01, solve_deadline - time.monotonic())
    solver.parameters.num_workers = cfg.num_workers
    solver.parameters.random_seed = seed
    if work_s is not None:
        solver.parameters.max_deterministic_time = max(0.001, work_s)
    from optsched.engine.backends.stdio import solver_output_to_stderr

    with solver_output_to_stderr():  # solver text never reaches stdout
        status = solver.solve(m)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    if status == cp_model.FEASIBLE and work_s is not None and solver.deterministic_time < 0.999 * work_s:
        return None  # stopped by the wall clock (a safety net): its incumbent depends on the load

    sched = Schedule()
    states = [DevState(free_at=dv.free_at, load_free_at=now, models={}) for dv in devs]
    for d, dev in enumerate(devs):
        for mod in dev.resident:
            t_ev = solver.value(ev[(d, mod)])
            if t_ev >= horizon:
                last = dev.free_at if mod in dev.pinned else now
                states[d].models[mod] = [now, last]
            else:
                sched.actions.append((d, mod, "evict", now + t_ev / SCALE))
                # tail loads start after every window eviction has freed its memory
                states[d].load_free_at = max(states[d].load_free_at, now + t_ev / SCALE)
        for (dd, mod), v in ld.items():
            if dd == d and solver.value(v):
                at = now + solver.value(ls[(d, mod)]) / SCALE
                ready = at + prob.load[(mod, dev.gtype)]
                sched.actions.append((d, mod, "load", at))
                states[d].models[mod] = [ready, ready]
                states[d].load_free_at = max(
                    states[d].load_free_at,
                    now + (solver.value(ls[(d, mod)]) + load_len[(d, mod)]) / SCALE,
                )
    win_end: dict[ActKey, float] = {}
    for (i, d), v in sorted(x.items()):
        if not solver.value(v):
            continue
        c = cands[i]
        st, en = now + solver.value(s[i]) / SCALE, now + solver.value(e[i]) / SCALE
        sched.placed.append(Placed(cand=c, dev=d, start=st, end=en))
        states[d].free_at = max(states[d].free_at, en)
        if c.model in states[d].models:  # else evicted after its last window use
            states[d].models[c.model][1] = max(states[d].models[c.model][1], en)
        for a in c.members:
            win_end[(c.session, a)] = en
    # tail: everything outside the window, list-scheduled after it
    tail_acts = {k: a for k, a in prob.acts.items() if k not in window}
    if tail_acts:
        new_acts = dict(prob.acts)
        for k, ta in tail_acts.items():
            rel = ta.release
            deps = []
            for dep in ta.deps:
                if (k[0], dep) in win_end:
                    rel = max(rel, win_end[(k[0], dep)])
                else:
                    deps.append(dep)
            new_acts[k] = replace(ta, deps=tuple(deps), release=rel)
        tail_prob = replace(prob, acts=new_acts)
        tail_units = [c for c in _select_tail(prob, tail_acts, tail_policy)]
        tail = list_schedule(tail_prob, tail_policy, units=tail_units, states=states)
        sched.placed += tail.placed
        sched.actions += tail.actions
    label = "optimal" if status == cp_model.OPTIMAL and not tail_acts else "feasible"
    note = (
        f"CP-SAT {solver.status_name(status)} on {len(window)} of {len(prob.acts)} "
        f"activations in {solver.wall_time:.3f}s (objective {solver.objective_value:.0f}, "
        f"bound {solver.best_objective_bound:.0f})"
    )
    if bound is not None:
        bound[:] = [solver.objective_value, solver.best_objective_bound]
    return sched, label, note


def _dep_in(c: Cand, a: str, prob: Problem) -> bool:
    """True when ``a`` depends on another member of ``c`` (its release is then irrelevant)."""
    return any(dep in c.members for dep in prob.acts[(c.session, a)].deps)


def _select_tail(prob: Problem, tail: Mapping[ActKey, object], policy: ListPolicy) -> list[Cand]:
    covered: set[ActKey] = set()
    chosen: list[Cand] = []
    rank = {"siblings": 0, "chain": 1, "single": 2}
    for c in sorted(prob.cands, key=lambda c: (rank[c.kind], -len(c.members), c.session, c.members)):
        if c.kind != "single" and not policy.fusion:
            continue
        keys = [(c.session, a) for a in c.members]
        if any(k not in tail or k in covered for k in keys):
            continue
        covered.update(keys)
        chosen.append(c)
    return chosen

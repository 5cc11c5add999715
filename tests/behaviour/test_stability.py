"""Stable when nothing changes: solve, apply as a host would, advance one epoch, solve again.

With no arrival, completion or node change, a decision must not be undone by the next ones:

* **no churn**: once the run has settled, nothing is preempted, and no job an epoch started is
  ever stopped by a later epoch for priority (only a documented trigger may take it back, see
  below);
* **preemptions are used**: every ``reclaim`` or ``priority`` preemption frees GPUs that starts
  of the same decision use (same GPU type, counted in GPUs). ``interference`` (an MPS guest
  whose host tenant fell below the sharing threshold) and ``node_unavailable`` are the
  exceptions: they free nothing a start needs; so is a type on which running on-loan use is
  no longer covered by any lender (a generated snapshot may start that way): those jobs stop
  whatever starts, whole gangs at a time.

**Node loss and return** (``node_loss``): nodes holding guaranteed work become unavailable at
epoch 5 and come back at 25, others at 40 and 55 (:data:`NODE_EVENTS`). A change is a documented
reason for the next decisions to differ (settling restarts from it), and a job started before a
loss may be stopped for priority after it (capacity fell), for guaranteed starts inside quota
only. What must never happen is a **flip-flop**:

* a job started in the decision that stops guaranteed jobs for ``node_unavailable`` is stopped
  (reclaim or priority) by a later decision that restarts one of those jobs on its GPUs, or by
  the very next decision, which restarts one of them anywhere (the freed quota or GPUs were
  handed out for one epoch);
* a job an epoch started is stopped for priority when it started after the last node loss;
* best-effort jobs inside their tenant's quota free, on a type, more GPUs for priority than the
  decision's guaranteed starts inside quota take there (they were stopped for best-effort work).

After settling, the one start allowed is an MPS guest's: use (c)'s interference limit grows
continuously with the host tenant's recovering assurance, so a pair may become admissible later;
it starts queued work on GPUs already held and stops nothing.

Settling. Time still passes, so the assurance signal moves: a tenant whose guaranteed jobs wait
falls below ``THETA_RECLAIM`` (use (b): it takes back capacity it lent, possibly from a job an
earlier epoch started on loan) or below ``THETA_SHARE`` (use (c): its MPS guests are evicted).
Those crossings are the documented reasons for a later decision to differ, so the run counts as
settled two epochs after the last crossing (and never before epoch 2: the first epoch stops
jobs on drained nodes and evicts guests, the second may start what they left). A tenant's
``max_gpus_per_epoch`` spreads what one decision would do over several epochs: the run counts
as settled two epochs after the last decision whose priority victims of one tenant reached its
cap (a run that never stops doing so fails the final check), and two epochs after a running
job's minimum runtime ran out (it may then be stopped for a waiting guaranteed job).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from optsched.engine import assurance as asr
from optsched.engine.apply import apply_decision
from optsched.engine.backends.base import SolveParams
from optsched.engine.budget import WALL_SAFETY
from optsched.engine.epoch import solve_epoch
from optsched.engine.quota_tree import LoanMatcher
from optsched.engine.rules import protected
from optsched.engine.state import ClusterState, parse_snapshot
from optsched.instances import generate
from optsched.predict.fallback import EstimatePredictor
from optsched.schema.decision import Decision
from optsched.schema.snapshot import Snapshot
from optsched.testing import assert_decision_valid

EPOCHS = 100
SETTLE = 2
OBSERVED = 10
"""Epochs observed with nothing moving after the last documented reason to move."""
EXTRA = 30
"""Epochs a run may go on past ``epochs`` to observe that long."""
PREDICTOR = EstimatePredictor()


def _triggers(state: ClusterState) -> tuple[tuple[bool, bool], ...]:
    """Per tenant: (reclaims, may host guests) — the assurance uses that change decisions."""
    sig = asr.compute(state)
    return tuple((sig[t].reclaim, asr.max_host_slowdown(sig[t].value) > 0) for t in state.tenant_ids)


def _deficit(state: ClusterState) -> Counter[str]:
    """On-loan GPUs per type that no lender's idle quota covers any more: they must be
    reclaimed whatever starts (a generated snapshot may hold such use)."""
    held: Counter[tuple[str, str]] = Counter()
    for job in state.running():
        if job.id not in state.host_of:
            held[(job.tenant, state.job_type(job))] += job.gpus
    out: Counter[str] = Counter()
    for t in state.type_names:
        if not state.tree.empty and state.tree.limited(t):
            out[t] = _tree_deficit(state, held, t)
            continue
        pool, over = 0, 0
        for ten in state.tenant_ids:
            idle = state.quota(ten, t) - held[(ten, t)]
            lim = state.lend_limit(ten, t)
            pool += max(0, idle if lim is None else min(idle, lim))
            over += max(0, -idle)
        out[t] = max(0, over - pool)
    return out


def _tree_deficit(state: ClusterState, held: Counter[tuple[str, str]], t: str) -> int:
    """:func:`_deficit` on a type quota groups limit: the cover is matched inside subtrees
    first, within every group's borrow and lend limits."""
    supply: dict[int, int] = {}
    demands: list[tuple[int, int]] = []
    for i, ten in enumerate(state.tenant_ids):
        idle = state.quota(ten, t) - held[(ten, t)]
        lim = state.lend_limit(ten, t)
        if idle > 0:
            supply[i] = idle if lim is None else min(idle, lim)
        elif idle < 0:
            demands.append((i, -idle))
    match = LoanMatcher(state.tree, t, supply, range(len(state.tenant_ids)))
    covered = sum(g for _, _, g in match.cover(demands))
    return sum(n for _, n in demands) - covered


def _young(state: ClusterState) -> set[str]:
    """Running jobs a minimum runtime still protects from priority preemption."""
    snap = state.snapshot
    return {
        j.id
        for j in state.running()
        if protected(snap, snap.tenants[state.tenant_index[j.tenant]], j)
    }


def _rationed(state: ClusterState, d: Decision) -> bool:
    """Whether a tenant's priority victims reached its ``max_gpus_per_epoch``: the cap spreads
    what one decision would do over several epochs, so the next decisions go on with it."""
    lost: Counter[str] = Counter()
    for p in d.preempt:
        job = state.job(p.job)
        if p.reason == "priority" and not job.on_loan and p.job not in state.host_of:
            lost[job.tenant] += job.gpus
    for ten in state.snapshot.tenants:
        cap = ten.preemption.max_gpus_per_epoch if ten.preemption is not None else None
        if cap is not None and lost[ten.id] >= cap > 0:
            return True
    return False


def _freed_and_used(state: ClusterState, d: Decision) -> tuple[Counter[str], Counter[str]]:
    """GPUs freed by reclaim/priority preemptions and GPUs taken by exclusive starts, per type.

    A tenant's own best-effort job stopped for priority while the tenant starts guaranteed work
    inside its quota on the type frees *quota* for that start: in node shape the start may need
    a whole node elsewhere, so those GPUs (up to what the tenant starts inside quota there)
    count as used by the start, wherever they are."""
    freed: Counter[str] = Counter()
    own_in_quota: Counter[tuple[str, str]] = Counter()
    for s in d.start:
        job = state.job(s.job)
        if not s.on_loan and not s.colocated_with and job.qos == "guaranteed":
            own_in_quota[(job.tenant, state.node_type(s.allocation[0].node))] += len(s.allocation)
    for_quota: Counter[tuple[str, str]] = Counter()
    for p in d.preempt:
        if p.reason in ("reclaim", "priority") and p.job not in state.host_of:
            job = state.job(p.job)
            t = state.job_type(job)
            key = (job.tenant, t)
            if p.reason == "priority" and job.qos != "guaranteed" and not job.on_loan:
                take = max(0, min(job.gpus, own_in_quota[key] - for_quota[key]))
                for_quota[key] += take
                freed[t] += job.gpus - take
                continue
            freed[t] += job.gpus
    used: Counter[str] = Counter()
    for s in d.start:
        if not s.colocated_with:
            used[state.node_type(s.allocation[0].node)] += len(s.allocation)
    return freed, used


NODE_EVENTS = {5: "loss", 25: "return", 40: "loss", 55: "return"}
"""Epoch -> node change of a node-loss run: a loss takes the nodes holding most GPUs of
guaranteed jobs not on loan (ids break ties; never the same node twice), a return brings every
node back."""


def _nodes_to_lose(state: ClusterState, k: int, lost: set[str]) -> list[str]:
    held: Counter[str] = Counter()
    for job in state.running():
        if job.qos == "guaranteed" and not job.on_loan and job.allocation is not None:
            for r in job.allocation:
                held[r.node] += 1
    return sorted((n for n in held if n not in lost), key=lambda n: (-held[n], n))[:k]


def _with_down(snap: Snapshot, down: set[str]) -> Snapshot:
    nodes = [n.model_copy(update={"available": n.id not in down}) for n in snap.nodes]
    return snap.model_copy(update={"nodes": nodes})


def _best_effort_for_priority(state: ClusterState, d: Decision) -> list[str]:
    """Types on which in-quota best-effort jobs free more GPUs for priority than the decision's
    guaranteed starts inside quota take, plus less than the type's largest such gang (the
    documented rule, counted independently): with no such start, any is a flip-flop."""
    freed: Counter[str] = Counter()
    taken: Counter[str] = Counter()
    for p in d.preempt:
        job = state.job(p.job)
        in_quota = not job.on_loan and p.job not in state.host_of
        if p.reason == "priority" and job.qos != "guaranteed" and in_quota:
            freed[state.job_type(job)] += job.gpus
    for s in d.start:
        if not s.on_loan and not s.colocated_with and state.job(s.job).qos == "guaranteed":
            taken[state.node_type(s.allocation[0].node)] += len(s.allocation)
    gang: Counter[str] = Counter()  # a gang stops whole, also for a smaller start
    for job in state.running():
        mine = job.qos != "guaranteed" and not job.on_loan and job.id not in state.host_of
        if mine and job.allocation and all(state.node_available(r.node) for r in job.allocation):
            gang[state.job_type(job)] = max(gang[state.job_type(job)], job.gpus)
    return [
        f"{t}: {g} freed, {taken[t]} taken"
        for t, g in sorted(freed.items())
        if g > (taken[t] + gang[t] - 1 if taken[t] else 0)
    ]


def run_epochs(snap: Snapshot, params: SolveParams, epochs: int = EPOCHS, node_loss: int = 0) -> list[str]:
    """Run ``epochs`` epochs and assert the properties above; ``node_loss``: nodes lost at each
    loss of :data:`NODE_EVENTS` (0: none). Returns the flip-flops seen (asserted empty)."""
    started_at: dict[str, int] = {}
    settled_from = SETTLE
    last = None
    young: set[str] = set()
    lost: set[str] = set()
    last_loss = -1
    stopped_by_loss: dict[int, set[str]] = {}  # epoch -> jobs its decision stopped on lost nodes
    flips: list[str] = []
    e = -1
    # at least OBSERVED epochs after the last documented reason to move (a minimum runtime that
    # runs out late extends the run, up to EXTRA epochs, rather than shortening the observation)
    while e + 1 < epochs or (e + 1 < epochs + EXTRA and e + 1 < settled_from + OBSERVED):
        e += 1
        event = NODE_EVENTS.get(e) if node_loss else None
        if event is not None:
            down: set[str] = set()
            if event == "loss":
                down = set(_nodes_to_lose(ClusterState.from_snapshot(snap), node_loss, lost))
                assert down, f"epoch {e}: no node left that holds a guaranteed job"
                lost |= down
                last_loss = e
            snap = _with_down(snap, down)
            settled_from = max(settled_from, e + SETTLE)
        state = ClusterState.from_snapshot(snap)
        trig = _triggers(state)
        if last is not None and trig != last:
            settled_from = max(settled_from, e + SETTLE)
        last = trig
        now_young = _young(state)
        if young - now_young - {j.id for j in state.pending()}:
            settled_from = max(settled_from, e + SETTLE)  # a minimum runtime ran out
        young = now_young
        d = solve_epoch(state, params=params, predictor=PREDICTOR)
        assert_decision_valid(state, d)
        if _rationed(state, d):
            settled_from = max(settled_from, e + SETTLE)
        where = f"epoch {e}"
        freed, used = _freed_and_used(state, d)
        deficit = _deficit(state)
        for t, g in freed.items():
            if deficit[t]:  # uncovered loans stop whatever starts, whole gangs at a time
                continue
            assert g <= used[t], f"{where}: preemptions free {g} '{t}' GPUs, starts use {used[t]}"
        lossy = {p.job for p in d.preempt if p.reason == "node_unavailable"}
        if lossy:
            stopped_by_loss[e] = lossy
        on_gpu = {(r.node, r.gpu): s.job for s in d.start for r in s.allocation}
        restarted = {s.job for s in d.start}
        for p in d.preempt:
            if p.job in started_at and p.reason in ("reclaim", "priority"):
                s0 = started_at[p.job]
                owners = stopped_by_loss.get(s0, set())
                alloc = state.job(p.job).allocation or []
                takers = {on_gpu[r.key()] for r in alloc if r.key() in on_gpu} & owners
                if takers or (e == s0 + 1 and owners & restarted):
                    flips.append(
                        f"{where}: {p.job} started at epoch {s0} (when a node loss stopped "
                        f"{sorted(owners)[:3]}) stopped for {p.reason}; restarted "
                        f"{sorted(takers or owners & restarted)[:3]}"
                    )
            if p.job in started_at and p.reason == "priority" and started_at[p.job] >= last_loss:
                msg = f"{where}: {p.job} started at epoch {started_at[p.job]} stopped for priority"
                if not node_loss:
                    raise AssertionError(msg)
                flips.append(msg + f" (last node loss at epoch {last_loss})")
        for x in _best_effort_for_priority(state, d):
            flips.append(f"{where}: best-effort stopped for priority on {x}")
        if e >= settled_from:
            # an MPS guest may still start late: use (c)'s interference limit grows continuously
            # with the host tenant's recovering assurance, so a pair can become admissible;
            # that starts queued work and stops nothing
            moved = [p.job for p in d.preempt] + [s.job for s in d.start if not s.colocated_with]
            assert not moved, f"{where} (settled since {settled_from}): moved {moved[:10]}"
        for s in d.start:
            started_at[s.job] = e
        snap = apply_decision(state.snapshot, d)
    assert not flips, "flip-flops:\n" + "\n".join(flips[:10])
    assert settled_from + OBSERVED <= e + 1, f"still settling at epoch {settled_from} of {e + 1}"
    return flips


GREEDY = SolveParams(backend="greedy")
# the deterministic work budgets of a 0.5 s and a 2 s call under a wall-clock net no load reaches:
# the property is about the decisions, not about how busy the machine running the suite is
CPSAT = SolveParams(backend="cpsat", time_limit_s=60.0, work_s=0.5 / WALL_SAFETY)


@pytest.mark.parametrize("seed", range(6))
def test_greedy_is_stable_on_tiny_snapshots(seed: int) -> None:
    run_epochs(parse_snapshot(generate("tiny", seed)), GREEDY)


@pytest.mark.slow  # Venus size: about 400 s together; .ci/run runs them
def test_greedy_is_stable_on_a_venus_sized_snapshot() -> None:
    run_epochs(parse_snapshot(generate("venus", 0)), GREEDY)


@pytest.mark.parametrize("seed", range(3))
def test_cpsat_is_stable_on_tiny_snapshots(seed: int) -> None:
    run_epochs(parse_snapshot(generate("tiny", seed)), CPSAT)


def with_every_knob(snap: dict[str, object], seed: int) -> Snapshot:
    """The same snapshot with every operator control on: per-tenant minimum runtime, a cap on
    GPUs preempted per epoch and hysteresis, per-job minimum runtimes, and priority classes
    (tenant-level and snapshot-level) on a deterministic share of the jobs."""
    import random

    rng = random.Random(seed)
    tenants = snap["tenants"]
    assert isinstance(tenants, list)
    snap["priority_classes"] = {"low": 0.5, "normal": 1.0, "high": 2.0}
    for k, t in enumerate(tenants):
        t["preemption"] = {
            "min_runtime_s": float(rng.choice((0, 300, 1800))),
            "max_gpus_per_epoch": rng.choice((None, 1, 4, 8)),
            "hysteresis": rng.choice((0.0, 0.2, 1.0)),
        }
        if k % 2 == 0:
            t["priority_classes"] = {"batch": 0.25, "urgent": 4.0}
    classes = {t["id"]: [*snap["priority_classes"], *(t.get("priority_classes") or {})] for t in tenants}
    jobs = snap["jobs"]
    assert isinstance(jobs, list)
    for j in jobs:
        if rng.random() < 0.6:
            j["priority_class"] = rng.choice(classes[j["tenant"]])
        if rng.random() < 0.2:
            j["min_runtime_s"] = float(rng.choice((60, 600, 3600)))
    return parse_snapshot(snap)


HIGHS = SolveParams(backend="highs", time_limit_s=120.0, work_s=2.0 / WALL_SAFETY)


@pytest.mark.parametrize("seed", range(4))
def test_greedy_is_stable_with_every_knob(seed: int) -> None:
    run_epochs(with_every_knob(generate("tiny", seed), seed), GREEDY)


@pytest.mark.parametrize("seed", range(2))
def test_highs_is_stable_with_every_knob(seed: int) -> None:
    run_epochs(with_every_knob(generate("tiny", seed), seed), HIGHS)


@pytest.mark.slow  # Venus size: about 400 s together; .ci/run runs them
def test_greedy_is_stable_with_every_knob_at_venus_size() -> None:
    run_epochs(with_every_knob(generate("venus", 1), 1), GREEDY)


VENUS_HIGHS_KNOWN: dict[int, str] = {}
"""Seeds known to break the property, with why (seed 1's rationing, epoch 38, went with node
shape: the one model now places the wave's jobs on other nodes)."""


@pytest.mark.slow  # Venus size: about 400 s together; .ci/run runs them
@pytest.mark.parametrize(
    "seed",
    [
        pytest.param(s, marks=pytest.mark.xfail(reason=VENUS_HIGHS_KNOWN[s], strict=True))
        if s in VENUS_HIGHS_KNOWN
        else s
        for s in range(4)
    ],
)  # seed 1 passes since node shape (the wave no longer takes it): VENUS_HIGHS_KNOWN is empty
def test_highs_is_stable_with_every_knob_at_venus_size(seed: int) -> None:
    run_epochs(with_every_knob(generate("venus", seed), seed), HIGHS)


NODE_LOSS_BACKENDS = {"greedy": GREEDY, "highs": HIGHS, "cpsat": CPSAT}


def _lost_per_event(snap: Snapshot) -> int:
    """Nodes lost at each loss: one of a tiny cluster's four, a thirtieth of a larger one."""
    return max(1, len(snap.nodes) // 30)


@pytest.mark.parametrize("backend_name", sorted(NODE_LOSS_BACKENDS))
@pytest.mark.parametrize("seed", range(3))
def test_no_flip_flop_after_a_node_loss_on_tiny_snapshots(backend_name: str, seed: int) -> None:
    snap = parse_snapshot(generate("tiny", seed))
    assert run_epochs(snap, NODE_LOSS_BACKENDS[backend_name], node_loss=_lost_per_event(snap)) == []


NODE_LOSS_SHAPE_KNOWN = {
    ("venus", "cpsat"): "epoch 56: two 1-GPU best-effort jobs started at epoch 55 stopped for priority",
    ("venus", "highs"): "epoch 55: one job started at epoch 41 stopped for priority",
    ("medium", "cpsat"): "epochs 26 and 56: jobs started the epoch before stopped for priority",
    ("medium", "greedy"): "epoch 26: one job started at epoch 25 stopped for priority",
    # since node-held gang reservations (traced; see below)
    ("venus", "greedy"): "epoch 5: a 4-GPU gang on loan is reclaimed whole for a 2- and a 1-GPU start "
    "on its node (the one free node is held for a 64-GPU gang): stops free 4 'V100' GPUs, starts use 3",
    ("medium", "highs"): "epoch 42: backfilled jobs on a reserved gang's nodes are stopped for priority "
    "the epoch after they started, once the reservation holds none of those nodes' GPUs",
}
"""Node-loss runs that still swap after a node returns in node shape: the preemption rows count
GPUs per type, so guaranteed starts inside quota on whole returned nodes let the plan stop
best-effort jobs inside quota whose GPUs (or quota) then go to other starts; the placement
step and :func:`~optsched.engine.backends.greedy.keep_loan_funded_victims` undo the swaps whose
GPUs stay idle or fund loans, not those another start inside quota takes (open in issue 19).

The two since node-held reservations, traced. ``venus-greedy``: the decision is sound (the gang
is the cheapest victim that frees two GPUs on one node), but this test counts GPUs, not whole
gangs. ``medium-highs``: the running jobs are past their predicted runtimes, so each is
predicted to end at the next epoch (``MIN_REMAINING_S``) and the 64-GPU gang's start stays one
epoch away; at epoch 41 short jobs are backfilled onto the one held node, at 42 that node has no
free GPU to hold and the gang's eight equally ready nodes (ties by snapshot order) hold nothing,
so guaranteed starts stop the backfilled jobs. Three fixes were tried and reverted (each failed
all six runs at scale): a preemption cost of at least the value a job was started for (the flip
stayed: it comes from the released node, not from values); keeping the jobs on a reservation's
chosen nodes from being priority victims (the chosen set moves from epoch to epoch, and the runs
moved more); an overdue job's remaining time growing with its overrun (``max(60, runtime -
elapsed, elapsed - runtime)``: the gangs' starts moved, and other epochs swapped)."""


def _node_loss_case(size: str, backend_name: str) -> Any:
    why = NODE_LOSS_SHAPE_KNOWN.get((size, backend_name))
    marks = [pytest.mark.xfail(reason=why, strict=True)] if why else []
    return pytest.param(backend_name, size, marks=marks, id=f"{size}-{backend_name}")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("backend_name", "size"),
    [_node_loss_case(size, b) for size in ("venus", "medium") for b in sorted(NODE_LOSS_BACKENDS)],
)
def test_no_flip_flop_after_a_node_loss_at_scale(backend_name: str, size: str) -> None:
    snap = parse_snapshot(generate(size, 0))  # type: ignore[arg-type]
    assert run_epochs(snap, NODE_LOSS_BACKENDS[backend_name], node_loss=_lost_per_event(snap)) == []


@pytest.mark.parametrize("quota_b", [4, 8])
def test_a_node_loss_holds_the_quota_and_gpus_its_guaranteed_job_restarts_on(quota_b: int) -> None:
    """The decision that stops a guaranteed job on a lost node neither lends the quota it frees
    (``quota_b`` 4: ``bb`` could only borrow it) nor starts anything on the free GPUs it needs
    (8: ``bb`` fits its own quota, and would be stopped for ``ga`` next); the next decision
    restarts it there, stopping nothing."""
    snap = {
        "format": 1,
        "now": 1000.0,
        "gpu_types": {"A100": {"memory_gib": 80, "mps": False}},
        "nodes": [
            {"id": "n0", "gpu_type": "A100", "gpus": 4, "available": False},
            {"id": "n1", "gpu_type": "A100", "gpus": 8},
        ],
        "tenants": [
            {"id": "a", "quota": {"A100": 4}},
            {"id": "b", "quota": {"A100": quota_b}},
        ],
        "jobs": [
            {"id": "ga", "tenant": "a", "qos": "guaranteed", "gpus": 4, "submit_s": 0.0,
             "state": "running", "start_s": 10.0, "on_loan": False,
             "allocation": [{"node": "n0", "gpu": g} for g in range(4)]},
            {"id": "gb", "tenant": "b", "qos": "guaranteed", "gpus": 4, "submit_s": 0.0,
             "state": "running", "start_s": 10.0, "on_loan": False,
             "allocation": [{"node": "n1", "gpu": g} for g in range(4)]},
            {"id": "bb", "tenant": "b", "qos": "best_effort", "gpus": 4, "submit_s": 900.0,
             "state": "pending"},
        ],
    }
    for params in NODE_LOSS_BACKENDS.values():
        state = ClusterState.from_snapshot(parse_snapshot(snap))
        d = solve_epoch(state, params=params, predictor=PREDICTOR)
        assert_decision_valid(state, d)
        assert [(p.job, p.reason) for p in d.preempt] == [("ga", "node_unavailable")]
        assert (d.start, d.loans, d.queue) == ([], [], ["bb"])
        state = ClusterState.from_snapshot(apply_decision(state.snapshot, d))
        d = solve_epoch(state, params=params, predictor=PREDICTOR)
        assert_decision_valid(state, d)
        assert d.preempt == []
        assert [(s.job, s.on_loan, sorted(r.node for r in s.allocation)) for s in d.start] == [
            ("ga", False, ["n1"] * 4)
        ]

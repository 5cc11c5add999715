r"""The per-tenant assurance signal: how well each tenant's guarantee is being met right now.

For tenant :math:`i` at an epoch, with its GPUs held inside quota :math:`h_i` (jobs not on
loan), its guaranteed demand :math:`d_i = \min(q_i, h_i + p_i)` (held plus the GPUs
:math:`g_j` of its pending guaranteed jobs, capped by quota :math:`q_i`, summed over GPU
types), and the waits :math:`w_j` of its pending guaranteed jobs against the tenant's
``qos.max_queue_delay_s`` :math:`D_i`:

.. math::

    \sigma_i &= \begin{cases} 1 & d_i = 0 \\
        \max\Bigl(0, 1 - \frac{\min(q_i, \sum_j g_j \min(1, w_j / D_i))}{d_i}\Bigr)
        & \text{otherwise} \end{cases}
        \qquad\text{(quota satisfaction)}\\
    \delta_i &= \min\Bigl(\min_j \bigl(1 - \min(1, w_j / D_i)\bigr)^{1/2},\;
        \min\bigl(1, c_i / \tau_i\bigr)\Bigr)\qquad\text{(delay headroom)}\\
    r_i &= \min(\sigma_i^{\,\gamma}, \delta_i), \quad \gamma = 0.5\\
    a_i &= \begin{cases} \beta_\downarrow a_i^{-} + (1-\beta_\downarrow) r_i & r_i < a_i^{-}\\
                          \beta_\uparrow a_i^{-} + (1-\beta_\uparrow) r_i & \text{otherwise}
            \end{cases}

so a guaranteed GPU that was just asked for does not yet count as unmet, and one whose job
has waited its whole target counts fully; :math:`c_i` is the smoothed fraction of the
tenant's guaranteed jobs that started within :math:`D_i` (an exponentially decayed count kept
in ``assurance_state``), :math:`\tau_i` the tenant's ``qos.target``, and :math:`a_i^{-}` the
previous value (1 on the first epoch). The signal falls fast (:math:`\beta_\downarrow = 0.2`)
and recovers slowly (:math:`\beta_\uparrow = 0.7`), so a tenant at risk is protected at once
and stays protected for a few epochs. Tenants without ``qos`` use ``DEFAULT_MAX_DELAY_S`` and target 0.9.

Its three uses (see ``docs/assurance.md``):

(a) **weight**: the tenant's jobs are weighted by
    :math:`W_i = \text{weight}_i \,(1 + \kappa (1 - a_i))`, :math:`\kappa = 2`;
(b) **reclaim**: when :math:`a_i < \theta_{\text{reclaim}}` (0.8) and the tenant has guaranteed
    work waiting that fits in its quota, those jobs carry a reclaim bonus larger than any
    preemption cost, so capacity the tenant lent is taken back this epoch;
(c) **sharing**: MPS guests of other tenants may slow the tenant's jobs by at most
    :math:`s_{\max}\, a_i^2` (:math:`s_{\max} = 0.35`), and not at all once
    :math:`a_i < \theta_{\text{share}}` (0.5); on a type where the tenant may not borrow, its
    own guests by :math:`s_{\max}` (:func:`pair_limit`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from optsched.engine.state import ClusterState
from optsched.schema.snapshot import Job

KAPPA = 2.0
THETA_RECLAIM = 0.8
THETA_SHARE = 0.5
MAX_SLOWDOWN = 0.35
BETA_DOWN = 0.2
BETA_UP = 0.7
GAMMA = 0.5
DECAY = 0.9
DEFAULT_MAX_DELAY_S = 3600.0
DEFAULT_TARGET = 0.9


@dataclass(frozen=True)
class TenantAssurance:
    """The signal of one tenant this epoch, with the parts it was made of."""

    value: float
    quota_satisfaction: float
    delay_headroom: float
    compliance: float
    waiting_guaranteed: int

    @property
    def reclaim(self) -> bool:
        """Use (b): below the reclaim threshold with guaranteed work waiting."""
        return self.value < THETA_RECLAIM and self.waiting_guaranteed > 0


def tenant_weight(base: float, a: float) -> float:
    """Use (a): the objective weight of a tenant's jobs."""
    return base * (1.0 + KAPPA * (1.0 - a))


def max_host_slowdown(a: float) -> float:
    """Use (c): the largest slowdown MPS guests may inflict on this tenant's jobs."""
    if a < THETA_SHARE:
        return 0.0
    return MAX_SLOWDOWN * a * a


def pair_limit(limits: Mapping[str, float], host_tenant: str, guest_tenant: str, sealed: bool) -> float:
    """The most slowdown an MPS guest of ``guest_tenant`` may inflict on a host of
    ``host_tenant``: the host tenant's limit (use (c), ``limits`` from :func:`share_limits`),
    except for a guest of the host's own tenant on a type where that tenant may not borrow
    (``sealed``: its ``borrow_limit`` there is 0, a hard partition), which gets
    :data:`MAX_SLOWDOWN` whatever the assurance. The limit protects a tenant from other
    tenants' guests; a sealed tenant whose assurance falls has its own guaranteed work waiting
    and no loan or reclaim to start it with, so a guest of its own running job is its only way
    to start more, and the limit had stopped the very starts the falling signal asks for. A
    tenant that may borrow starts its waiting work on loans and reclaims instead (uses (a) and
    (b)), and its pairs keep the limit."""
    if sealed and host_tenant == guest_tenant:
        return MAX_SLOWDOWN
    return limits[host_tenant]


def share_limits(signal: dict[str, TenantAssurance]) -> dict[str, float]:
    """Per tenant: :func:`max_host_slowdown` at its assurance."""
    return {t: max_host_slowdown(a.value) for t, a in signal.items()}


def max_delay(state: ClusterState, tenant: str) -> tuple[float, float]:
    """``(max_queue_delay_s, target)`` of a tenant, with defaults."""
    ten = state.snapshot.tenants[state.tenant_index[tenant]]
    if ten.qos is None:
        return DEFAULT_MAX_DELAY_S, DEFAULT_TARGET
    return ten.qos.max_queue_delay_s, ten.qos.target


def compute(state: ClusterState) -> dict[str, TenantAssurance]:
    """The assurance of every tenant at the start of this epoch (before the decision)."""
    snap = state.snapshot
    prev_state = snap.assurance_state or {}
    held: dict[str, int] = dict.fromkeys(state.tenant_ids, 0)
    for job in state.running():
        if not job.on_loan and job.id not in state.host_of:
            held[job.tenant] += job.gpus
    pend: dict[str, int] = dict.fromkeys(state.tenant_ids, 0)
    unmet: dict[str, float] = dict.fromkeys(state.tenant_ids, 0.0)
    headroom: dict[str, float] = dict.fromkeys(state.tenant_ids, 1.0)
    waiting: dict[str, int] = dict.fromkeys(state.tenant_ids, 0)
    for job in state.pending():
        if job.qos != "guaranteed":
            continue
        d, _ = max_delay(state, job.tenant)
        pend[job.tenant] += job.gpus
        waiting[job.tenant] += 1
        wait = max(0.0, snap.now - job.submit_s)
        frac = 1.0 if d <= 0 else min(1.0, wait / d)
        unmet[job.tenant] += job.gpus * frac
        headroom[job.tenant] = min(headroom[job.tenant], (1.0 - frac) ** 0.5)
    out: dict[str, TenantAssurance] = {}
    for ten in snap.tenants:
        q = sum(ten.quota.values())
        demand = min(q, held[ten.id] + pend[ten.id])
        sigma = 1.0 if demand <= 0 else max(0.0, 1.0 - min(q, unmet[ten.id]) / demand)
        st = prev_state.get(ten.id, {})
        met = float(st.get("met", 0.0))
        total = float(st.get("total", 0.0))
        _, target = max_delay(state, ten.id)
        compliance = 1.0 if total < 1e-9 else met / total
        comp_term = 1.0 if target <= 0 else min(1.0, compliance / target)
        delta = min(headroom[ten.id], comp_term)
        raw = min(sigma**GAMMA, delta)
        prev = float(st.get("a", 1.0))
        beta = BETA_DOWN if raw < prev else BETA_UP
        a = min(1.0, max(0.0, beta * prev + (1.0 - beta) * raw))
        out[ten.id] = TenantAssurance(a, sigma, headroom[ten.id], compliance, waiting[ten.id])
    return out


def start_counts(job: Job, now: float, delay: float, missed: Collection[str]) -> tuple[float, float]:
    """What a guaranteed job starting at ``now`` adds to its tenant's QoS counts (met, total):
    one job, met when it waited at most ``delay``; nothing when it was already counted as
    missed (in ``missed``: its wait passed the delay while it was pending). The epoch's
    :func:`next_state` and the event path's (:func:`optsched.engine.admit.decide_event`) count
    starts through this one rule."""
    if job.id in missed:
        return 0.0, 0.0
    return (1.0 if now - job.submit_s <= delay else 0.0), 1.0


def next_state(
    state: ClusterState, signal: dict[str, TenantAssurance], started: list[str]
) -> dict[str, dict[str, Any]]:
    """The opaque ``assurance_state`` to feed back: the signal and decayed QoS counts.

    A guaranteed job counts as *met* when it starts within its tenant's max delay; a pending
    guaranteed job already past the delay counts once as *missed* (flagged in ``missed``).
    """
    snap = state.snapshot
    prev_state = snap.assurance_state or {}
    started_set = set(started)
    guaranteed: dict[str, list[Job]] = {}  # pending guaranteed jobs per tenant, snapshot order
    for job in state.pending():
        if job.qos == "guaranteed":
            guaranteed.setdefault(job.tenant, []).append(job)
    out: dict[str, dict[str, Any]] = {}
    for ten in snap.tenants:
        st = prev_state.get(ten.id, {})
        met = float(st.get("met", 0.0)) * DECAY
        total = float(st.get("total", 0.0)) * DECAY
        missed_before = set(st.get("missed", []))
        missed_now: list[str] = []
        d, _ = max_delay(state, ten.id)
        for job in guaranteed.get(ten.id, ()):
            wait = snap.now - job.submit_s
            if job.id in started_set:
                m, t = start_counts(job, snap.now, d, missed_before)
                met += m
                total += t
            elif wait > d:
                if job.id not in missed_before:
                    total += 1.0
                missed_now.append(job.id)
        out[ten.id] = {
            "a": round(signal[ten.id].value, 6),
            "met": round(met, 6),
            "total": round(total, 6),
            "missed": sorted(missed_now),
        }
    return out


def figures(
    state: ClusterState, signal: dict[str, TenantAssurance], started: list[str]
) -> tuple[dict[str, float], dict[str, dict[str, Any]]]:
    """A decision's ``assurance`` (each tenant's signal, rounded) and ``assurance_state``
    (:func:`next_state`) when it starts ``started``."""
    return (
        {t: round(signal[t].value, 6) for t in state.tenant_ids},
        next_state(state, signal, started),
    )


def evicted_guest(state: ClusterState, job: Job, share_limit: Mapping[str, float]) -> bool:
    """Whether a running job is an MPS guest whose pair may no longer share (its host tenant's
    assurance-driven slowdown limit, ``share_limit`` per tenant, is 0): the epoch stops it. A
    guest of its host's own tenant, on a type where that tenant may not borrow, stays
    (``assurance.pair_limit``)."""
    host_id = state.host_of.get(job.id)
    if host_id is None:
        return False
    host_tenant = state.job(host_id).tenant
    sealed = state.borrow_limit(job.tenant, state.job_type(job)) == 0
    return pair_limit(share_limit, host_tenant, job.tenant, sealed) <= 0.0


def quiet_figures(state: ClusterState) -> tuple[dict[str, float], dict[str, dict[str, Any]]] | None:
    """:func:`figures` of an epoch decision that starts nothing, with the signal computed from
    the snapshot (:func:`compute`), so a host that knows nothing can start (``optsched.sim``'s
    replay) can log the assurance without asking for the decision; None when the epoch may
    stop work without starting anything: a job on an unavailable node, an MPS guest whose
    host's tenant may no longer share at this signal, or a job on loan (its lender may take
    the GPUs back)."""
    signal = compute(state)
    limits = share_limits(signal)
    for job in state.running():
        if job.on_loan or evicted_guest(state, job, limits):
            return None
        if job.id in state.on_lost_nodes:
            return None
    return figures(state, signal, [])

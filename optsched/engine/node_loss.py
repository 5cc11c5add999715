"""Quota a node loss frees is held for the job it stopped, not lent for one epoch.

A running job on an unavailable node is preempted (reason ``node_unavailable``) and is pending
again at the next epoch; in the decision that stops it, it is neither running nor pending, so
its tenant's quota looks idle. Lent to another tenant's start in that decision, it would be
reclaimed at the next one to restart the same job, often on exactly those GPUs: a flip-flop
(a start, then a reclaim, for nothing). For guaranteed jobs not on loan (the ones that get
their quota back), on every type each allows (:func:`restart_types`), that decision starts no
job on loan (``EpochProblem.no_loan``), starts no best-effort job, and makes no new loan
(:func:`lend_limits_after_node_loss`, :func:`borrow_limits_after_node_loss`), so that no job
starts there only to be stopped for them at the next one. Holding the loans alone is not
enough: where a start inside quota lets the decision stop on-loan jobs, a tenant could swap a
reclaimed on-loan job for a start on loan within the same borrowing, and the restart inside
quota at the next decision takes GPUs back from on-loan jobs first. A guaranteed start inside
quota may take the free GPUs they held: it is never stopped for them, so it is no flip-flop, and
keeping those GPUs idle would only make the decision stop other jobs to start it elsewhere.

The hold never makes running loans uncoverable: on a type it is at most the lendable idle
quota that current borrowing leaves over (so no on-loan job must stop for it), and types on
which a tenant already runs above quota without a loan, or whose quota groups limit loans,
get no hold.
"""

from __future__ import annotations

from collections import defaultdict

from optsched.engine.state import ClusterState

__all__ = ["borrow_limits_after_node_loss", "lend_limits_after_node_loss", "restart_types"]


def restart_types(state: ClusterState) -> set[str]:
    """GPU types on which guaranteed jobs not on loan that the decision stops on unavailable
    nodes may restart (every type each allows). No best-effort job starts on them in that
    decision, not even on GPUs its preemptions free, and no job starts on loan there: it would
    be stopped for them at the next one (invariant 8 exempts best-effort jobs there)."""
    down = {n.id for n in state.snapshot.nodes if not n.available}
    out: set[str] = set()
    if not down:
        return out
    for job in state.running():
        if job.qos != "guaranteed" or job.on_loan or job.id in state.host_of or job.allocation is None:
            continue
        if any(r.node in down for r in job.allocation):
            out.update(state.allowed_types(job))
    return out


def borrow_limits_after_node_loss(state: ClusterState) -> dict[tuple[str, str], int]:
    """(tenant, GPU type) -> the borrow limit to plan with this epoch on the types of
    :func:`lend_limits_after_node_loss`: what the tenant runs above quota now (kept running
    jobs), so no start on loan is added there however the decision's preemptions free loans
    (a tenant's own lower ``borrow_limit`` is kept)."""
    return _after_node_loss(state)[1]


def lend_limits_after_node_loss(state: ClusterState) -> dict[tuple[str, str], int]:
    """See :func:`_after_node_loss`."""
    return _after_node_loss(state)[0]


def _after_node_loss(state: ClusterState) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], int]]:
    """(tenant, GPU type) -> the lend limit to plan with this epoch, on the types where a node
    loss stopped guaranteed in-quota jobs (other pairs keep their own ``lend_limit``).

    The types are those on which such jobs may restart (every type each allows): no new loan
    is made on them in that decision (a start on loan there would be reclaimed for them at the
    next). Per such type ``t``, with ``u`` the GPUs of a tenant's kept running jobs (MPS guests
    and jobs on unavailable nodes left out), its lendable idle quota is
    ``s = min(lend_limit, quota - u)`` (0 at or above quota); the type's slack is
    ``sum(s) - borrowing`` (borrowing: use above quota, which stays covered); tenants in id
    order hold ``h = min(s, slack left)`` and get ``s - h`` as their lend limit.
    """
    snap = state.snapshot
    down = {n.id for n in snap.nodes if not n.available}
    if not down:
        return {}, {}
    use: dict[tuple[str, str], int] = defaultdict(int)
    own: dict[tuple[str, str], int] = defaultdict(int)
    hold: dict[tuple[str, str], int] = defaultdict(int)
    for job in state.running():
        if job.id in state.host_of or job.allocation is None:
            continue
        key = (job.tenant, state.job_type(job))
        if any(r.node in down for r in job.allocation):
            if job.qos == "guaranteed" and not job.on_loan:
                for t in state.allowed_types(job):  # it may restart on any of them
                    hold[(job.tenant, t)] += job.gpus
            continue
        use[key] += job.gpus
        if not job.on_loan:
            own[key] += job.gpus
    out: dict[tuple[str, str], int] = {}
    frozen: dict[tuple[str, str], int] = {}
    tree = state.tree
    for t in sorted({t for _, t in hold}):
        if not tree.empty and tree.limited(t):
            continue
        if any(own[(ten, t)] > state.quota(ten, t) for ten in state.tenant_ids):
            continue  # use kept above quota: its cover is the over-quota rule's, not touched here
        share: dict[str, int] = {}
        borrowed = 0
        for ten in state.tenant_ids:
            q, u = state.quota(ten, t), use[(ten, t)]
            ll = state.lend_limit(ten, t)
            share[ten] = max(0, q - u if ll is None else min(ll, q - u))
            borrowed += max(0, u - q)
        for ten in state.tenant_ids:  # nobody borrows more than it runs on loan now
            q, u = state.quota(ten, t), use[(ten, t)]
            bl = state.borrow_limit(ten, t)
            if bl is None or bl >= max(0, u - q):
                frozen[(ten, t)] = max(0, u - q)
        slack = sum(share.values()) - borrowed
        for ten in state.tenant_ids:
            h = min(share[ten], slack)
            if h > 0:
                out[(ten, t)] = share[ten] - h
                slack -= h
    return out, frozen

r"""The one objective of an epoch: its weights, and the one function that evaluates it.

Every place that needs the objective asks this module: the linear model
(:mod:`optsched.engine.formulation`) takes its coefficients from the values and costs
:mod:`optsched.engine.candidates` computes with :func:`job_value` and :func:`preemption_cost`
and from the weights (``EpochProblem.objective``), and the greedy plan, the fill pass, the
fallback decision and the report are scored by :func:`value`, so the exact backends, the
heuristic and ``decision.solver.objective`` measure the same quantity.

For pending class :math:`c` (interchangeable jobs, members sorted by value, see
:mod:`optsched.engine.candidates`) starting :math:`n_{c,t}^{own}` members inside quota and
:math:`n_{c,t}^{loan}` on loan on GPU type :math:`t` (:math:`n_c` in all), guest pairs
:math:`y_k` and preemptions :math:`z_r`:

.. math::

    \max \sum_c \Bigl(\sum_{k < n_c} v_{c,k}
        + \sum_t \bigl(\beta_{c,t} (n^{own}_{c,t} + n^{loan}_{c,t})
        - \lambda_c n^{loan}_{c,t}\bigr)\Bigr)
        + \sum_k u_k y_k - \sum_r \kappa_r z_r - \epsilon \sum_{i,t} b_{i,t}
        + \sum_r (\eta_r u_r - \sigma_r d_r)

with :math:`v_{c,k}` the value of the class's :math:`k`-th member (:func:`job_value`, sorted
descending, so the model starts a prefix), :math:`\beta_{c,t}` the speed preference of type
:math:`t`, :math:`\lambda_c` the loan penalty, :math:`u_k` a guest pair's value,
:math:`\kappa_r` a preemption's cost (:func:`preemption_cost`), :math:`\epsilon` the
borrow tie-breaker, and for a running elastic job :math:`r` growing :math:`u_r` or shrinking
:math:`d_r` steps, :math:`\eta_r` the value of a step of growth and :math:`\sigma_r` the cost of a
step of shrinking (:mod:`optsched.engine.elastic`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from optsched.engine.problem import Assignment, EpochProblem


@dataclass(frozen=True)
class ObjectiveWeights:
    """Every weight of the objective, in one typed object (``[objective]`` in a solver preset).

    The defaults are what ``docs/benchmarks.md`` and the simulator results were measured with.
    """

    guaranteed_mult: float = 2.0
    """Value of a guaranteed job relative to a best-effort one of the same size and wait."""
    gpu_exponent: float = 0.5
    """How a job's value grows with its gang size (1: per GPU, 0: per job). 0.5 measured best
    on the imbalanced Venus surrogate (queueing delay counts jobs, utilisation counts GPUs)."""
    starve_after: float = 3.0
    """After this many times its tenant's max delay, a job's value grows linearly with its
    gang size, so large best-effort gangs stop starving behind streams of small jobs."""
    urgency_cap_guaranteed: float = 4.0
    """Cap of the urgency :math:`w_j / D_i` of guaranteed jobs."""
    urgency_cap_best_effort: float = 6.0
    """Cap of the urgency :math:`w_j / 2D_i` of best-effort jobs."""
    shortness: float = 3.0
    """Bonus of short jobs: :math:`s_j = \\text{shortness} / (1 + \\ln(1 + g_j r_j / 600))`."""
    type_preference: float = 0.1
    """Share of a class's value earned by starting on the fastest type instead of the slowest."""
    loan_penalty: float = 0.01
    """Per job started on loan, as a fraction of its class's top value: prefer own quota."""
    borrow_penalty: float = 0.01
    """Per GPU borrowed (a tie-breaker that keeps borrow variables minimal)."""
    preempt_scale: float = 7.0
    """Preemption cost per GPU relative to a fresh best-effort job (so best-effort jobs never
    churn each other out; urgent guaranteed work and reclaim still pay for it)."""
    preempt_lost_s: float = 1800.0
    """Lost work at which the preemption cost doubles."""
    preempt_remaining_s: float = 600.0
    """Remaining time at which a nearly finished job's cost is 1.5 times a fresh one's."""
    guest_interference: float = 4.0
    """Cost of a guest per host GPU and unit of predicted host slowdown, times the host
    tenant's weight."""
    min_guest_speed: float = 0.5
    """A pair whose guest would run slower than this is not a candidate."""
    elastic_grow: float = 0.5
    """Value of one GPU an elastic job takes beyond its requested size (growth, or a start
    above ``gpus``), as a fraction of the lowest value per GPU of any pending job: below 1, any
    start is worth more than growth on the same GPUs."""
    fragmentation: float = 0.02
    """Cost of one fragmented GPU after the decision (the FGD measure on the chunks of
    :mod:`optsched.engine.chunks`), as a fraction of the lowest value per GPU of any waiting job:
    among plans that start the same work, the one that leaves the free GPUs in the largest
    pieces wins; it never outweighs a start."""
    elastic_shrink: float = 0.25
    """Cost of shrinking an elastic job by some GPUs, as a fraction of the cost of preempting
    a job of that many GPUs whose lost work is the resize overhead: shrinking is the cheaper
    way to free GPUs."""

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "objective") -> ObjectiveWeights:
        """Weights from a TOML table.

        Raises
        ------
        ValueError
            For an unknown key or a negative value, naming it.
        """
        known = {f.name for f in fields(cls)}
        out: dict[str, float] = {}
        for key, val in data.items():
            if key not in known:
                raise ValueError(f"{where}.{key}: unknown objective weight (known: {sorted(known)})")
            if not isinstance(val, int | float) or isinstance(val, bool) or val < 0 or not math.isfinite(val):
                raise ValueError(f"{where}.{key}: must be a finite number >= 0, got {val!r}")
            out[key] = float(val)
        return cls(**out)


DEFAULT_WEIGHTS = ObjectiveWeights()


def shortness(w: ObjectiveWeights, gpu_seconds: float) -> float:
    return w.shortness / (1.0 + math.log1p(max(gpu_seconds, 0.0) / 600.0))


def job_value(
    w: ObjectiveWeights,
    weight: float,
    gpus: int,
    guaranteed: bool,
    wait_s: float,
    max_delay_s: float,
    runtime_s: float,
) -> float:
    r"""Value of starting a job now.

    .. math:: v_j = W_i\, g_j^{\,\gamma}\, m_j\, (1 + u_j)\, (1 + s_j)

    with :math:`W_i` the assurance-scaled tenant weight, :math:`g_j` the gang size
    (:math:`\gamma` = ``gpu_exponent``, 1 once the job has waited ``starve_after`` times
    :math:`D_i`), :math:`m_j` ``guaranteed_mult`` for guaranteed and 1 for best-effort jobs,
    the urgency :math:`u_j = \min(4, w_j / D_i)` (best-effort: :math:`\min(6, w_j / 2D_i)`, so
    a waiting best-effort job ages past fresh ones instead of starving), and the shortness
    :math:`s_j` on predicted GPU-seconds.
    """
    d = max(max_delay_s, 1.0)
    if guaranteed:
        urg = min(w.urgency_cap_guaranteed, wait_s / d)
    else:
        urg = min(w.urgency_cap_best_effort, wait_s / (2.0 * d))
    mult = w.guaranteed_mult if guaranteed else 1.0
    exponent = 1.0 if wait_s >= w.starve_after * d else w.gpu_exponent
    return weight * gpus**exponent * mult * (1.0 + max(urg, 0.0)) * (1.0 + shortness(w, gpus * runtime_s))


def preemption_cost(
    w: ObjectiveWeights, weight: float, gpus: int, guaranteed: bool, lost_s: float, remaining_s: float
) -> float:
    r"""Cost of stopping a running job.

    .. math:: \kappa_r = 7\, W_i\, g_r\, m_r\, (1 + \ell_r / 1800)\, (1 + 600 / (600 + \rho_r))

    (the constants are ``preempt_scale``, ``preempt_lost_s`` and ``preempt_remaining_s``):
    at least what a best-effort job of the same size is worth at its highest urgency, more when
    restarting loses work (:math:`\ell_r`) and when it is close to done (remaining
    :math:`\rho_r`).
    """
    mult = w.guaranteed_mult if guaranteed else 1.0
    return (
        w.preempt_scale
        * weight
        * gpus
        * mult
        * (1.0 + lost_s / w.preempt_lost_s)
        * (1.0 + w.preempt_remaining_s / (w.preempt_remaining_s + remaining_s))
    )


def value(problem: EpochProblem, a: Assignment) -> float:
    """The objective of an assignment: the one formula every backend optimises."""
    w = problem.objective
    val = 0.0
    for c, counts in a.starts.items():
        cls = problem.pending[c]
        n = sum(counts.values())
        val += sum(cls.values[:n])
        for (t, loan), k in counts.items():
            val += k * cls.type_bonus[cls.types.index(t)]
            if loan:
                val -= k * cls.loan_penalty
            elif cls.reclaim:
                val += k * problem.reclaim_of(cls)  # a reclaim starts inside quota
    by_pair = {(g.pending, g.running): g.value for g in problem.guests}
    for c, r in a.guests.items():
        val += by_pair[(c, r)]
    for r in a.preempt:
        val -= problem.running[r].cost
    for r, d in a.resize.items():
        run = problem.running[r]
        val += d * run.grow_value if d > 0 else d * run.shrink_cost
    val -= w.borrow_penalty * (a.borrowed(problem) + a.inflow(problem))
    if problem.frag_scale and problem.placement:
        from optsched.engine.chunks import ChunkBook

        val -= problem.frag_scale * ChunkBook(problem, a).fragmented()
    return val

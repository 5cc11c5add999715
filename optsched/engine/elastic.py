r"""Elastic jobs: the size of a job is a choice of the epoch's one model.

A job that declares ``min_gpus`` / ``max_gpus`` (and ``gpus_step``) may run on any size
:math:`g \in \{\text{min}, \text{min} + \text{step}, \dots, \text{max}\}`
(``docs/snapshot-format.md``, "Elastic jobs").

* **Start** (pending job): every allowed size is a singleton pending class of the job's
  *group*; at most one of the group starts (``add_start_or_queue``). Throughput is linear in
  the size, so the value of a start of size :math:`g` is

  .. math:: v(g) = v_j \, g / g_j \quad (g \le g_j), \qquad
            v(g) = v_j + \eta\,(g - g_j) \quad (g > g_j)

  with :math:`v_j` the value of the job at its requested size :math:`g_j` (``gpus``) and
  :math:`\eta` the *growth rate*: ``elastic_grow`` times the lowest value per GPU of any pending
  job, so a GPU beyond the requested size is worth less than the same GPU given to any start.
  Sizes above :math:`g_j` add nothing to the static value that pays for preemptions.
* **Grow** (running job): :math:`u_r` steps, worth :math:`\eta\,\text{step}` each, only into
  GPUs that stay idle after every start of the decision: on a type where the decision stops
  nothing (no preemption, no shrink, ``grow_idle_only``); inside its tenant's quota if it runs
  on own quota, borrowed if it runs on loan. Only a job that may shrink later (one that may
  be preempted: best-effort, or on loan) grows or starts above its requested size, so growth
  never locks GPUs up in a job that cannot give them back.
* **Shrink** (running job that may be preempted): :math:`d_r` steps, each costing
  ``elastic_shrink`` times the cost of preempting ``step`` GPUs of it with the resize
  overhead as lost work, at its tenant's static weight (no assurance scaling); the GPUs it
  frees count as freed by a preemption (they must be used by starts of the same decision, the
  same ``preemption_pays`` rows charge that cost, times ``1 + hysteresis`` for a priority
  shrink). A start's value is at least its static worth, so a start that pays for a shrink is
  worth more than the shrink from its first epoch on: waiting never tips a job into shrinking
  another.
  Since :math:`\sigma_r (g_r - \text{min})/\text{step} < \kappa_r`, shrinking is preferred to
  preempting whenever the GPUs it frees are enough.

No thrash: growth is paid only by idle GPUs and shrinking only by starts that use what it
frees, so with nothing changing a grown job is never shrunk back, and a shrunk job grows back
only into GPUs nothing else starts on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from optsched.engine.objective import ObjectiveWeights, preemption_cost

if TYPE_CHECKING:
    from optsched.schema.snapshot import Job


def growth_rate(w: ObjectiveWeights, densities: list[float]) -> float:
    """Value of one GPU beyond a requested size: ``elastic_grow`` times the lowest value per GPU
    among ``densities`` (of every pending job); 0 when there is none to compare with."""
    return w.elastic_grow * min(densities) if densities else 0.0


def start_value(job: Job, size: int, value: float, rate: float) -> float:
    """Value of starting ``job`` (worth ``value`` at its requested size) on ``size`` GPUs."""
    if size <= job.gpus:
        return value * size / job.gpus
    return value + rate * (size - job.gpus)


def static_value(job: Job, size: int, value: float) -> float:
    """Static worth of a start of ``size`` GPUs (growth above ``gpus`` pays for nothing)."""
    return value * min(size, job.gpus) / job.gpus


def steps(job: Job, may_shrink: bool) -> tuple[int, int, int]:
    """(step, steps it may grow, steps it may shrink) of a running elastic job; a job that may
    not shrink (it could not be preempted, or it shares its GPUs through MPS) does not grow
    either: it would hold the GPUs."""
    if not job.is_elastic or not may_shrink:
        return (job.gpus_step, 0, 0) if job.is_elastic else (0, 0, 0)
    lo, hi = job.size_range
    step = job.gpus_step
    return step, (hi - job.gpus) // step, (job.gpus - lo) // step


def start_sizes(job: Job) -> tuple[int, ...]:
    """Sizes a pending elastic job may start on: above its requested ``gpus`` only if it may
    be preempted (so it may shrink back later); a guaranteed job would hold the extra GPUs."""
    sizes = job.sizes()
    return sizes if job.is_preemptible else tuple(g for g in sizes if g <= job.gpus)


def shrink_cost(
    w: ObjectiveWeights, weight: float, job: Job, guaranteed: bool, remaining_s: float
) -> float:
    """Cost of one step of shrinking: ``elastic_shrink`` times a preemption of ``gpus_step``
    GPUs whose lost work is the resize overhead."""
    return w.elastic_shrink * preemption_cost(
        w, weight, job.gpus_step, guaranteed, job.resize_overhead_s, remaining_s
    )

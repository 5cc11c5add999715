"""The time budget of one :func:`~optsched.solve_epoch` call: every share of ``time_limit_s``.

A call has two budgets:

* **Deterministic work**, in *nominal seconds*: a pure function of ``time_limit_s`` and of the
  snapshot's size (never of measured time). Each exact solver turns its share into its own
  work limit (CP-SAT deterministic time, HiGHS nodes, CBC nodes, the ``highspy`` worker's work
  meter), so the same snapshot gives the same decision from a fresh process or a warm one, on
  an idle or a loaded machine.
* **The wall clock**, ``time_limit_s`` from the start of the call: only a safety net. A stage
  that the net stops gives a deterministic, labelled answer instead (the greedy plan for the
  epoch's solver, the greedy schedule for look-ahead and workflows), never a time-dependent
  incumbent (:data:`WALL_CLOCK_FALLBACK`).

:class:`Budget` hands out every share; the constants below are the whole of the rule. How many
nodes or deterministic-time units a nominal second is belongs to each backend (its
calibration), not here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

DEFAULT_TIME_LIMIT_S = 1.0
"""The time limit when neither the parameters nor the snapshot's options give one."""
SOLVER_SHARE = 0.6
"""Share of the time limit that is the solver's nominal deterministic work budget."""
OVERHEAD_PER_JOB_S = 40e-6
"""Nominal seconds of fixed stages per job of the snapshot (validation, predictions,
candidates, decoding, checking), taken from the work budget so large snapshots keep their
deadline; calibrated in ``docs/benchmarks.md``."""
SHAPED_OVERHEAD_PER_JOB_S = 60e-6
"""Further nominal seconds per job where node rows are a relaxation (CPU, memory, topology or
shares): there the greedy plan tries two orders and the candidates carry node shapes (medium
--shapes: the stages before the solver took 0.35-0.4 s against 0.2 s without, and 8 of 10
seeds ran into the wall clock at 1 s on an idle machine)."""
OVERHEAD_KNEE_JOBS = 3000
"""Jobs past which each further job takes :data:`OVERHEAD_PER_JOB_PAST_KNEE_S` from the work
budget instead of :data:`OVERHEAD_PER_JOB_S`."""
OVERHEAD_PER_JOB_PAST_KNEE_S = 130e-6
"""Nominal seconds per job past :data:`OVERHEAD_KNEE_JOBS`. At 10,662 jobs (10,000 GPUs) the
stages take 0.8 s before the solver and 0.7 s after it, and the RINS step's root grows faster
than its free variables there (3,700 free: 0.55 s; 4,700: 0.9 s; 5,650: 1.7 s). With 40 us per
job a 3 s call's budget asked for a RINS step of 1.7 s where the wall clock left 1.2 s, and 2 and
3 s calls answered with the labelled greedy plan (10% below the LP's bound on seed 0). The knee
keeps every snapshot of up to 3,000 jobs (Venus and 2,500-GPU sizes) on the rule it had."""
MIN_WORK_S = 0.02
"""The smallest solver work budget, however large the snapshot."""
RESERVE_FRACTION = 0.1
"""Share of the time limit kept on the wall clock after the solver (decoding, fill, checking)."""
RESERVE_PER_JOB_S = 150e-6
"""Wall seconds kept per job, for the first :data:`RESERVE_KNEE_JOBS` jobs, after the solver for
the fill pass, decoding, the look-ahead and the checker, on an idle machine."""
RESERVE_KNEE_JOBS = 1000
"""Jobs past which each further job keeps :data:`RESERVE_PER_JOB_PAST_KNEE_S`: the stages after
the solver cost a fixed part plus a smaller one per job (CPU seconds measured: 0.18-0.24 at
1,150-1,200 jobs, 0.15-0.22 at 2,700, 0.61 at 10,662; a flat 150 us per job kept 0.5 s at
2,700 jobs and 1.7 s at 10,662, which the solver then did not get)."""
RESERVE_PER_JOB_PAST_KNEE_S = 60e-6
MAX_SLOWDOWN = 6.0
"""The most the reserve after the solver is stretched for a loaded machine (:meth:`Budget.slowdown`)."""
MIN_MEASURED_S = 0.02
"""Below this much process CPU time since the call began, the slowdown is not measured (1)."""
MIN_SOLVER_WALL_S = 0.005
"""Below this much wall time left for it, the solver is not started (the greedy plan answers)."""
WORKFLOW_SHARE = 0.4
"""Share of the time limit given to the workflow planner when the snapshot has workflows (on
the wall clock; half of it is the planner's deterministic work)."""
WORKFLOW_WORK_FRACTION = 0.5
"""Part of the workflow share that is the planner's deterministic work."""
LOOKAHEAD_SHARE = 0.05
"""Share of the time limit given to the look-ahead's CP-SAT slot model as deterministic work."""
PART_SHARE = 0.7
"""Share of the time limit each part of a partitioned epoch gets (parts run in parallel; the
split and the merge use the rest)."""
PART_GRACE = 0.1
"""The parts' deadline is ``PART_SHARE + PART_GRACE`` of the call's limit from the start of the
call (:attr:`Budget.part_deadline`), worker start and setup included: a part that has not
answered by then is cut off, and then every part is answered by its greedy plan
(:data:`PART_WALL_CLOCK_FALLBACK`)."""
PART_WALL_CLOCK_FALLBACK = (
    "partitions: the wall clock cut off a part (its worker not ready, or no answer by the "
    "parts' deadline: a loaded machine, or a worker's start); every part answered by its greedy plan"
)
"""The one label of a partitioned decision whose parts the wall clock cut off (a part not
answered by the parts' deadline, or a part's solver stopped by its own wall-clock net): every
part is then answered by its greedy plan, so the decision is the same however many parts
were late."""
WALL_SAFETY = 1.5
"""A backend called without ``work_s`` (outside :func:`~optsched.solve_epoch`) takes the
wall-clock limit divided by this as its work budget."""
WALL_CLOCK_FALLBACK = (
    "wall clock hit before the deterministic work budget was spent (a loaded machine, or a "
    "limit the stages around the solver leave no time of at this snapshot's size); greedy plan used"
)
"""The one label of a solver that the wall clock stopped or left no time for: the same text
whatever the solver had found by then, so the decision is the same whenever the net fires."""


def default_work_s(time_limit_s: float, work_s: float | None) -> float:
    """A backend's deterministic work budget: ``work_s`` when given, else the wall-clock limit
    divided by :data:`WALL_SAFETY`."""
    if work_s is not None:
        return max(0.0, work_s)
    return time_limit_s / WALL_SAFETY


@dataclass(frozen=True)
class Budget:
    """The shares of one call's ``limit_s``, for a snapshot of ``jobs`` jobs.

    Work shares (``*_work_s``) are nominal and never read the clock; wall shares
    (``*_wall_s``) read it and only ever serve as safety nets.
    """

    limit_s: float
    jobs: int = 0
    workflows: bool = False
    work_s: float | None = None
    """An explicit solver work budget (``SolveParams.work_s``) instead of the rule."""
    t0: float = field(default_factory=time.monotonic)
    cpu0: float = field(default_factory=time.process_time)
    """The process's CPU time at ``t0`` (:meth:`slowdown`)."""

    @property
    def deadline(self) -> float:
        """The call's deadline on ``time.monotonic``'s clock."""
        return self.t0 + self.limit_s

    def left_s(self) -> float:
        """Wall seconds left in the call."""
        return self.deadline - time.monotonic()

    # --- deterministic work (nominal seconds; never the clock) ------------------------------

    @property
    def solver_work_s(self) -> float:
        """The solver's work budget: its share of the limit less the nominal cost of the fixed
        stages for this many jobs (less the workflow planner's share when there is one)."""
        if self.work_s is not None:
            return self.work_s
        share = SOLVER_SHARE * self.limit_s
        if self.workflows:
            share -= WORKFLOW_SHARE * self.limit_s
        knee = min(self.jobs, OVERHEAD_KNEE_JOBS)
        overhead = OVERHEAD_PER_JOB_S * knee + OVERHEAD_PER_JOB_PAST_KNEE_S * (self.jobs - knee)
        return max(MIN_WORK_S, share - overhead)

    def shaped_work_s(self) -> float:
        """:attr:`solver_work_s` on a problem whose node rows are a relaxation (less
        :data:`SHAPED_OVERHEAD_PER_JOB_S` per job, unless a work budget was given)."""
        if self.work_s is not None:
            return self.work_s
        return max(MIN_WORK_S, self.solver_work_s - SHAPED_OVERHEAD_PER_JOB_S * self.jobs)

    @property
    def workflow_work_s(self) -> float:
        """The workflow planner's deterministic work."""
        return WORKFLOW_WORK_FRACTION * WORKFLOW_SHARE * self.limit_s

    @property
    def lookahead_work_s(self) -> float:
        """The look-ahead slot model's deterministic work."""
        return lookahead_work_s(self.limit_s)

    @property
    def part_limit_s(self) -> float:
        """The time limit of each part of a partitioned epoch."""
        return PART_SHARE * self.limit_s

    @property
    def part_deadline(self) -> float:
        """When every part of a partitioned epoch must have answered (``time.monotonic``)."""
        return self.t0 + (PART_SHARE + PART_GRACE) * self.limit_s

    # --- the wall clock (safety nets) ---------------------------------------------------------

    def slowdown(self) -> float:
        """Wall time over this process's CPU time since the call began, in ``[1, MAX_SLOWDOWN]``:
        how much slower than its CPU time the call runs because other processes share the cores.
        The stages before the solver are single-threaded, so on an idle machine this is 1; on
        two cores loaded by four CPU-bound processes it is about 3."""
        cpu = time.process_time() - self.cpu0
        if cpu < MIN_MEASURED_S:
            return 1.0
        return min(MAX_SLOWDOWN, max(1.0, (time.monotonic() - self.t0) / cpu))

    @property
    def reserve_s(self) -> float:
        """Wall seconds kept after the solver for the fill pass, decoding, the look-ahead and the
        checker on an idle machine."""
        knee = min(self.jobs, RESERVE_KNEE_JOBS)
        return (RESERVE_FRACTION * self.limit_s + RESERVE_PER_JOB_S * knee
                + RESERVE_PER_JOB_PAST_KNEE_S * (self.jobs - knee))

    @property
    def workflow_wall_s(self) -> float:
        """Wall seconds held back from the solver for the workflow planner."""
        return WORKFLOW_SHARE * self.limit_s if self.workflows else 0.0

    def solver_wall_s(self) -> float:
        """The solver's wall-clock net: what is left less the reserves after it, the reserve
        stretched by the machine's :meth:`slowdown` so that the stages after the solver still
        end within the limit on a loaded machine. Only the net moves with the load, never the
        deterministic work: a net that fires gives the one labelled greedy plan."""
        return self.left_s() - self.reserve_s * self.slowdown() - self.workflow_wall_s

    def workflow_left_s(self) -> float:
        """The workflow planner's wall-clock net: what is left less the reserve."""
        return max(0.01, self.left_s() - self.reserve_s)


def lookahead_work_s(limit_s: float) -> float:
    """The look-ahead slot model's deterministic work for a call limited to ``limit_s``."""
    return LOOKAHEAD_SHARE * limit_s

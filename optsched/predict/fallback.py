"""The fallback predictor: the snapshot's own estimates, then conservative defaults.

Rules (documented in ``docs/predictors.md``):

* runtime: the job's ``runtime_s`` if given (source ``estimate``), else
  ``DEFAULT_RUNTIME_S`` (source ``default``);
* memory: the job's ``memory_gib`` if given, else the full memory of the largest GPU type the
  job may use (source ``default``), so that a job of unknown memory never passes the MPS
  memory-fit test;
* pair speeds: ``DEFAULT_PAIR_SPEED`` for both jobs (source ``default``), below the 10th
  percentile (0.78) of the 2,776 colocated speeds measured in Lucid's 1,388 profiled pairs
  (median 0.955): without a model, sharing is priced pessimistically.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from optsched.predict.base import JobEstimate, PairEstimate, Predictions

if TYPE_CHECKING:
    from optsched.engine.state import ClusterState
    from optsched.schema.snapshot import Job

DEFAULT_RUNTIME_S = 4 * 3600.0
DEFAULT_PAIR_SPEED = 0.75


class EstimatePredictor:
    """Uses only what the snapshot says; needs no trained artifact."""

    name = "fallback"

    def predict_jobs(self, state: ClusterState) -> Predictions:
        out: dict[str, JobEstimate] = {}
        types = state.snapshot.gpu_types
        for job in state.snapshot.jobs:
            if job.runtime_s is not None:
                rt, rsrc = job.runtime_s, "estimate"
            else:
                rt, rsrc = DEFAULT_RUNTIME_S, "default"
            if job.memory_gib is not None:
                mem, msrc = job.memory_gib, "estimate"
            else:
                mem = max(types[t].memory_gib for t in state.allowed_types(job))
                msrc = "default"
            out[job.id] = JobEstimate(rt, mem, rsrc, msrc)
        return Predictions(jobs=out, source="fallback")

    def predict_pair(self, state: ClusterState, host: Job, guest: Job) -> PairEstimate:
        return PairEstimate(DEFAULT_PAIR_SPEED, DEFAULT_PAIR_SPEED, "default")

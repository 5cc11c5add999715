"""The reasons hosts show operators: the text of ``optsched explain``, for every job a decision
starts, preempts or queues.

The CLI, the HTTP service and the Slurm adapter all print what
:func:`optsched.engine.explain.describe_job` says, so an operator reads the same words wherever
they look. Hosts compute the texts once per epoch, when the snapshot is at hand, and keep them
in the store (:meth:`optsched.hosts.store.Store.record_epoch`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from optsched import ClusterState, Decision

SUMMARY_CHARS = 500
"""At most this many characters of a reason go where space is short (Slurm's AdminComment)."""


def explain_jobs(state: ClusterState, decision: Decision) -> dict[str, str]:
    """``{job: text}`` for every job ``decision`` starts, preempts or queues: the lines of
    ``optsched explain`` joined by newlines. A job the decision cannot explain (a decision
    without explanations, from an older optsched) is left out."""
    from optsched.engine.explain import describe_job

    jobs = [s.job for s in decision.start] + [p.job for p in decision.preempt] + list(decision.queue)
    out: dict[str, str] = {}
    for job in dict.fromkeys(jobs):
        if job not in state.job_index:
            continue
        try:
            out[job] = "\n".join(describe_job(state, decision, job))
        except LookupError:
            continue
    return out


def summary(text: str) -> str:
    """The reason in one line: ``optsched explain``'s first two lines (what happens, and why),
    cut to :data:`SUMMARY_CHARS`."""
    line = " ".join(text.splitlines()[:2])
    return line if len(line) <= SUMMARY_CHARS else line[: SUMMARY_CHARS - 3] + "..."

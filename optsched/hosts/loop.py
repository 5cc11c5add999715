"""The host loop every host shares: read -> snapshot -> decide -> check -> apply -> record.

A *host* (the Slurm adapter, a test double) knows how to observe its cluster as a format-1
snapshot and how to carry a decision out; :class:`HostLoop` does the rest, the same way for
every host:

1. **read and snapshot**: the host builds the snapshot, given the :class:`History` read from
   the store (the assurance state the last decision returned, which running jobs run on loan);
2. **decide**: :func:`optsched.solve_epoch`;
3. **check**: :func:`optsched.check_decision` on the same snapshot. A decision that fails it is
   *never* acted on: the epoch is recorded as ``refused`` with one action row per violated
   invariant, and the previous assurance state stays the one to feed back. A host may name
   starts it cannot carry out (``unrealizable``: a job's per-node shape); the epoch is then
   decided again without those jobs (``deferred`` actions), at most ``MAX_REDECIDE`` times;
4. **record the intent**: the epoch (snapshot hash, decision, assurance state) is stored
   *before* anything is done, so a crash while applying loses no decision;
5. **apply**: the host carries out preemptions, starts and loans, reporting each action
   (job, action, outcome, reason) as it goes; each lands in the store at once. Before an
   action that changes the cluster the host reports it ``pending``: that intent row is
   committed before the host acts, and the action's outcome later fills in the same row;
6. **record the outcome**: which running jobs run on loan (``meta['on_loan']``) is updated
   from the actions that succeeded.

Everything a restart needs is in the store, so a new loop on the same store continues where
the last one stopped and does not flip the previous decision. An intent still ``pending`` when
the next epoch starts was interrupted (the host died between acting and recording): the next
epoch reconciles it against its fresh read (:meth:`HostLoop.reconcile`): a start whose job
runs is ``ok`` (and, when its decision started it on loan, the job stays on loan), a preempt
whose job no longer runs is ``ok``; otherwise ``skipped`` / ``failed``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from optsched.hosts.store import PENDING, ActionRecord, Store

if TYPE_CHECKING:
    from optsched import Decision, Snapshot, SolveParams

log = logging.getLogger("optsched.hosts")

MAX_REDECIDE = 2
"""How many times an epoch is decided again without the starts the host cannot carry out."""
ON_LOAN_KEY = "on_loan"
"""Store meta key: {job id: true} for the running jobs a decision started on loan."""


@dataclass(frozen=True)
class Action:
    """One thing a host did (or tried to do) about a decision, and why."""

    job: str
    action: str
    """``start``, ``preempt``, ``loan``, ``hold``, ``refuse``, ..."""
    outcome: str
    """``ok``, ``skipped`` (the job changed under us, the capacity is not there), ``failed``."""
    reason: str

    def row(self) -> tuple[str, str, str, str]:
        return (self.job, self.action, self.outcome, self.reason)


@dataclass
class History:
    """What the store remembers of the previous epochs, for the next snapshot."""

    seq: int
    """The last recorded epoch (0 before the first)."""
    assurance_state: dict[str, Any] | None
    on_loan: dict[str, bool]
    last_decision: dict[str, Any] | None
    """The last decision that was applied (not a refused one)."""
    pending: list[tuple[int, ActionRecord]] = field(default_factory=list)
    """Intents an earlier epoch recorded and never finished (``(row id, action)``): the host
    was interrupted while acting. :meth:`HostLoop.reconcile` settles them."""


Report = Callable[[Action], None]


class Host(Protocol):
    """What a host provides to the loop."""

    cluster: str

    def snapshot(self, history: History) -> Snapshot:
        """Observe the cluster now, as a format-1 snapshot."""
        ...

    def apply(self, snapshot: Snapshot, decision: Decision, history: History, report: Report) -> None:
        """Carry out a checked decision; call ``report`` once per action, as it happens."""
        ...

    # Optional: ``unrealizable(snapshot, decision) -> {job: reason}``, the starts of a checked
    # decision the host cannot carry out; the loop decides again without those jobs.
    # Optional: ``publish_reasons(decision, {job: text})``, called after ``apply`` with the text
    # ``optsched explain`` prints for each job, to show it where the host's users look.


@dataclass
class EpochResult:
    """What one step of the loop did."""

    seq: int
    snapshot: Snapshot
    decision: Decision
    refused: bool
    violations: list[str] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)
    """``optsched explain``'s text for every job the decision starts, preempts or queues."""


class HostLoop:
    """Runs epochs of one host against one store.

    Parameters
    ----------
    host:
        The cluster adapter.
    store:
        The store the loop's state lives in (shared by restarts).
    params:
        Solver parameters (``None``: the snapshot's options, then the engine's defaults).
    work_conserving:
        Whether the check includes invariant 8 (the engine's own promise; on by default).
    """

    def __init__(
        self,
        host: Host,
        store: Store,
        params: SolveParams | None = None,
        *,
        work_conserving: bool = True,
        decide: Callable[[Snapshot], Decision] | None = None,
    ) -> None:
        self.host = host
        self.store = store
        self.params = params
        self.work_conserving = work_conserving
        self._decide = decide
        self._stop = threading.Event()

    # ------------------------------------------------------------------ history
    def history(self) -> History:
        """The state of the previous epochs, read from the store (never from memory)."""
        cluster = self.host.cluster
        recs = self.store.epochs(cluster, limit=50)
        last_applied = next((r.decision for r in recs if r.status != "refused"), None)
        on_loan = {str(k): bool(v) for k, v in (self.store.get_meta(cluster, ON_LOAN_KEY) or {}).items()}
        pending = self.store.pending_actions(cluster)
        decided = {r.seq: r.decision for r in recs}
        for _, a in pending:
            # a start interrupted before its outcome: on loan if its decision said so (the
            # snapshot applies it only should the job be running)
            starts = decided.get(a.seq, {}).get("start", [])
            if a.action == "start" and any(s.get("job") == a.job and s.get("on_loan") for s in starts):
                on_loan[a.job] = True
        return History(
            seq=recs[0].seq if recs else 0,
            assurance_state=recs[0].assurance_state or None if recs else None,
            on_loan=on_loan,
            last_decision=last_applied,
            pending=pending,
        )

    def reconcile(self, hist: History, snapshot: Snapshot) -> list[Action]:
        """Settle the intents an interrupted epoch left ``pending``, against ``snapshot`` (the
        cluster as read now): a start whose job runs is ``ok``, else ``skipped``; a preempt
        whose job no longer runs is ``ok``, else ``failed``. The started jobs their decision put
        on loan are recorded on loan at once. Returns the settled actions."""
        if not hist.pending:
            return []
        running = {j.id for j in snapshot.jobs if j.state == "running"}
        settled: list[Action] = []
        for rowid, a in hist.pending:
            if a.action == "start":
                outcome, seen = ("ok", "running") if a.job in running else ("skipped", "not running")
            elif a.action == "preempt":
                outcome, seen = ("ok", "not running") if a.job not in running else ("failed", "still running")
            else:
                outcome, seen = "skipped", "outcome unknown"
            why = (f"{a.reason}; interrupted before its outcome was recorded: {seen} "
                   f"at epoch {hist.seq + 1}'s read")
            self.store.finish_action(rowid, outcome, why)
            settled.append(Action(a.job, a.action, outcome, why))
            log.warning("epoch %d: %s %s was interrupted; reconciled: %s (%s)",
                        a.seq, a.action, a.job, outcome, seen)
        on_loan = {str(k): True for k in (self.store.get_meta(self.host.cluster, ON_LOAN_KEY) or {})}
        for done in settled:
            if done.action == "start" and done.outcome == "ok" and hist.on_loan.get(done.job):
                on_loan[done.job] = True
        self.store.set_meta(self.host.cluster, ON_LOAN_KEY, {k: True for k in sorted(on_loan)})
        return settled

    # ------------------------------------------------------------------ one epoch
    def decide(self, snapshot: Snapshot) -> Decision:
        if self._decide is not None:
            return self._decide(snapshot)
        from optsched import solve_epoch

        return solve_epoch(snapshot, params=self.params)

    def step(self) -> EpochResult:
        """Run one epoch: snapshot, decide, check, record, apply, record."""
        from optsched import ClusterState, check_decision

        cluster = self.host.cluster
        hist = self.history()
        snap = self.host.snapshot(hist)
        self.reconcile(hist, snap)
        deferred: list[Action] = []
        for round_ in range(MAX_REDECIDE + 1):
            decision = self.decide(snap)
            state = ClusterState.from_snapshot(snap)
            violations = [
                str(v) for v in check_decision(state, decision, work_conserving=self.work_conserving)
            ]
            unrealizable = getattr(self.host, "unrealizable", None)
            bad = {} if violations or unrealizable is None else unrealizable(snap, decision)
            if not bad or round_ == MAX_REDECIDE:
                break  # the last round's leftovers are skipped by the host when it applies
            # The host cannot carry these starts out (e.g. a job's per-node shape): decide again
            # without them, so the GPUs they would hold go to jobs that can start.
            deferred += [Action(j, "start", "deferred", why) for j, why in sorted(bad.items())]
            snap = snap.model_copy(update={"jobs": [j for j in snap.jobs if j.id not in bad]})
        snap_json = snap.model_dump_json(exclude_none=True)
        dec = json.loads(decision.model_dump_json(exclude_none=True))
        if violations:
            # Never act on it; keep the previous assurance state as the one to feed back.
            refused = {
                "now": decision.now,
                "status": "refused",
                "assurance_state": hist.assurance_state or {},
                "refused_decision": dec,
                "violations": violations,
            }
            acts = [Action("*", "refuse", "skipped", v) for v in violations]
            seq = self.store.record_epoch(cluster, snap_json, refused, [a.row() for a in acts])
            for v in violations:
                log.error("epoch %d: decision refused, nothing applied: %s", seq, v)
            return EpochResult(seq, snap, decision, True, violations, acts)

        from optsched.hosts.reasons import explain_jobs

        reasons = explain_jobs(state, decision)
        seq = self.store.record_epoch(cluster, snap_json, dec, [a.row() for a in deferred], reasons)
        for a in deferred:
            log.warning("epoch %d: start %s deferred: %s", seq, a.job, a.reason)
        log.info(
            "epoch %d: %s, %d start, %d preempt, %d loans, %d queued",
            seq,
            decision.status,
            len(decision.start),
            len(decision.preempt),
            len(decision.loans),
            len(decision.queue),
        )
        actions: list[Action] = []
        intents: dict[tuple[str, str], int] = {}

        def report(a: Action) -> None:
            if a.outcome == PENDING:  # the intent, committed before the host acts
                intents[(a.job, a.action)] = self.store.begin_action(cluster, seq, a.row())
                log.debug("epoch %d: %s %s: intent recorded (%s)", seq, a.action, a.job, a.reason)
                return
            actions.append(a)
            rowid = intents.pop((a.job, a.action), None)
            if rowid is None:
                self.store.record_actions(cluster, seq, [a.row()])
            else:
                self.store.finish_action(rowid, a.outcome, a.reason)
            level = logging.INFO if a.outcome == "ok" else logging.WARNING
            log.log(level, "epoch %d: %s %s: %s (%s)", seq, a.action, a.job, a.outcome, a.reason)

        try:
            self.host.apply(snap, decision, hist, report)
        finally:
            self._record_loans(hist, decision, actions, snap)
        publish = getattr(self.host, "publish_reasons", None)
        if publish is not None:
            publish(decision, reasons)
        return EpochResult(seq, snap, decision, False, [], deferred + actions, reasons)

    def _record_loans(self, hist: History, decision: Decision, actions: list[Action], snap: Snapshot) -> None:
        """Which running jobs run on loan after this epoch: started on loan and still running."""
        started = {a.job for a in actions if a.action == "start" and a.outcome == "ok"}
        stopped = {a.job for a in actions if a.action == "preempt" and a.outcome == "ok"}
        on_loan = dict(hist.on_loan)
        for j in snap.jobs:  # what the snapshot says is what the engine saw and kept
            if j.state == "running" and j.on_loan:
                on_loan[j.id] = True
        for s in decision.start:
            if s.job in started and s.on_loan:
                on_loan[s.job] = True
        live = {j.id for j in snap.jobs if j.state == "running"} | started
        on_loan = {k: True for k in on_loan if k in live and k not in stopped}
        self.store.set_meta(self.host.cluster, ON_LOAN_KEY, on_loan)

    # ------------------------------------------------------------------ the daemon
    def run(self, interval_s: float, *, epochs: int | None = None) -> int:
        """Run epochs every ``interval_s`` seconds until :meth:`stop` (or ``epochs`` ran).

        An epoch that raises is logged and the loop goes on (the cluster may be briefly
        unreachable); returns the number of epochs run.
        """
        done = 0
        while not self._stop.is_set() and (epochs is None or done < epochs):
            t0 = time.monotonic()
            try:
                self.step()
            except Exception:
                log.exception("epoch failed; retrying at the next interval")
            done += 1
            if epochs is not None and done >= epochs:
                break
            self._stop.wait(max(0.0, interval_s - (time.monotonic() - t0)))
        return done

    def stop(self) -> None:
        self._stop.set()

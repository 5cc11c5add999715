"""The hosts' embedded state store (SQLite): what a restart must not lose.

One database file holds, per cluster id, every epoch a host decided (the snapshot's hash, the
decision, the assurance state to feed back, when), and every action the host carried out with
its reason. An action that changes the cluster is written as an intent (outcome ``pending``,
committed) *before* the host acts, and its outcome is filled in after, so a host killed
between acting and recording leaves a row to reconcile, never nothing. A host that restarts
reads its last assurance state and decision from here, so the next epoch continues where the
last one ended and decisions do not flip.

Writes are transactions (an epoch and its actions land together or not at all); the database
runs in WAL mode so a reader (the HTTP service's ``GET``) never blocks the writer.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS epochs (
    cluster TEXT NOT NULL,
    seq INTEGER NOT NULL,
    now REAL NOT NULL,
    wall REAL NOT NULL,
    snapshot_sha256 TEXT NOT NULL,
    status TEXT NOT NULL,
    decision TEXT NOT NULL,
    assurance_state TEXT NOT NULL,
    PRIMARY KEY (cluster, seq)
);
CREATE TABLE IF NOT EXISTS actions (
    cluster TEXT NOT NULL,
    seq INTEGER NOT NULL,
    job TEXT NOT NULL,
    action TEXT NOT NULL,
    outcome TEXT NOT NULL,
    reason TEXT NOT NULL,
    wall REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS actions_by_job ON actions (cluster, job);
CREATE TABLE IF NOT EXISTS reasons (
    cluster TEXT NOT NULL,
    seq INTEGER NOT NULL,
    job TEXT NOT NULL,
    text TEXT NOT NULL,
    PRIMARY KEY (cluster, job)
);
CREATE TABLE IF NOT EXISTS meta (
    cluster TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (cluster, key)
);
"""


PENDING = "pending"
"""The outcome of an action whose intent is recorded and whose outcome is not (yet)."""


@dataclass(frozen=True)
class EpochRecord:
    """One decided epoch as stored."""

    cluster: str
    seq: int
    now: float
    wall: float
    snapshot_sha256: str
    status: str
    decision: dict[str, Any]
    assurance_state: dict[str, Any]


@dataclass(frozen=True)
class ActionRecord:
    """One action a host carried out (or tried to), with its reason."""

    cluster: str
    seq: int
    job: str
    action: str
    outcome: str
    reason: str
    wall: float


class Store:
    """A SQLite file shared by the hosts of one machine (thread-safe).

    Parameters
    ----------
    path:
        The database file (created with its folder); ``":memory:"`` for tests.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    # ------------------------------------------------------------------ epochs
    def record_epoch(
        self,
        cluster: str,
        snapshot_json: str,
        decision: dict[str, Any],
        actions: list[tuple[str, str, str, str]] = (),  # type: ignore[assignment]
        reasons: dict[str, str] | None = None,
    ) -> int:
        """Store a decided epoch (and the actions taken on it) in one transaction.

        ``actions`` are ``(job, action, outcome, reason)``; ``reasons`` are the texts of
        ``optsched explain`` by job (:func:`optsched.hosts.reasons.explain_jobs`). Returns the
        epoch's sequence number.
        """
        now = float(decision.get("now", 0.0))
        wall = time.time()
        sha = hashlib.sha256(snapshot_json.encode()).hexdigest()
        with self._tx() as db:
            q = "SELECT COALESCE(MAX(seq), 0) FROM epochs WHERE cluster = ?"
            row = db.execute(q, (cluster,)).fetchone()
            seq = int(row[0]) + 1
            db.execute(
                "INSERT INTO epochs VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    cluster,
                    seq,
                    now,
                    wall,
                    sha,
                    str(decision.get("status", "")),
                    json.dumps(decision, sort_keys=True),
                    json.dumps(decision.get("assurance_state", {}), sort_keys=True),
                ),
            )
            db.executemany(
                "INSERT INTO actions VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(cluster, seq, job, act, out, why, wall) for job, act, out, why in actions],
            )
            db.executemany(
                "INSERT OR REPLACE INTO reasons VALUES (?, ?, ?, ?)",
                [(cluster, seq, job, text) for job, text in sorted((reasons or {}).items())],
            )
        return seq

    def reason(self, cluster: str, job: str) -> tuple[int, str] | None:
        """``(epoch, text)``: the newest ``optsched explain`` text stored for ``job`` (one row per
        job is kept: the last epoch that started, preempted or queued it)."""
        with self._lock:
            row = self._db.execute(
                "SELECT seq, text FROM reasons WHERE cluster = ? AND job = ?",
                (cluster, job),
            ).fetchone()
        return None if row is None else (int(row[0]), str(row[1]))

    def record_actions(self, cluster: str, seq: int, actions: list[tuple[str, str, str, str]]) -> None:
        """Add actions to an already stored epoch."""
        wall = time.time()
        with self._tx() as db:
            db.executemany(
                "INSERT INTO actions VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(cluster, seq, job, act, out, why, wall) for job, act, out, why in actions],
            )

    def begin_action(self, cluster: str, seq: int, row: tuple[str, str, str, str]) -> int:
        """Record the intent of an action before the host carries it out (committed at once):
        ``row`` is ``(job, action, "pending", reason)``. Returns the row's id, for
        :meth:`finish_action`. A row still pending at the next epoch was interrupted (the host
        died while acting) and is reconciled against what the cluster shows then."""
        job, act, outcome, why = row
        with self._tx() as db:
            cur = db.execute(
                "INSERT INTO actions VALUES (?, ?, ?, ?, ?, ?, ?)",
                (cluster, seq, job, act, outcome, why, time.time()),
            )
            rowid = cur.lastrowid
        assert rowid is not None
        return int(rowid)

    def finish_action(self, rowid: int, outcome: str, reason: str) -> None:
        """Set the outcome and reason of an action recorded by :meth:`begin_action`."""
        with self._tx() as db:
            db.execute(
                "UPDATE actions SET outcome = ?, reason = ?, wall = ? WHERE rowid = ?",
                (outcome, reason, time.time(), rowid),
            )

    def pending_actions(self, cluster: str) -> list[tuple[int, ActionRecord]]:
        """``(row id, action)`` of every intent of ``cluster`` with no outcome yet, oldest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT rowid, * FROM actions WHERE cluster = ? AND outcome = ? ORDER BY rowid",
                (cluster, PENDING),
            ).fetchall()
        return [(int(r[0]), ActionRecord(*r[1:])) for r in rows]

    def latest(self, cluster: str) -> EpochRecord | None:
        """The last decided epoch of ``cluster`` (``None`` before the first)."""
        with self._lock:
            row = self._db.execute(
                "SELECT * FROM epochs WHERE cluster = ? ORDER BY seq DESC LIMIT 1", (cluster,)
            ).fetchone()
        return None if row is None else _epoch(row)

    def epochs(self, cluster: str, limit: int = 100) -> list[EpochRecord]:
        """The last ``limit`` epochs of ``cluster``, newest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT * FROM epochs WHERE cluster = ? ORDER BY seq DESC LIMIT ?", (cluster, limit)
            ).fetchall()
        return [_epoch(r) for r in rows]

    def assurance_state(self, cluster: str) -> dict[str, Any] | None:
        """The assurance state the last decision returned, to feed into the next snapshot."""
        rec = self.latest(cluster)
        return None if rec is None else rec.assurance_state

    def actions(
        self, cluster: str, job: str | None = None, limit: int = 1000, *, newest_first: bool = False
    ) -> list[ActionRecord]:
        """Actions of ``cluster`` (of one job if given), oldest first (or newest first)."""
        q = "SELECT * FROM actions WHERE cluster = ?"
        args: tuple[Any, ...] = (cluster,)
        if job is not None:
            q += " AND job = ?"
            args += (job,)
        q += f" ORDER BY rowid {'DESC' if newest_first else 'ASC'} LIMIT ?"
        with self._lock:
            rows = self._db.execute(q, (*args, limit)).fetchall()
        return [ActionRecord(*r) for r in rows]

    def clusters(self) -> list[str]:
        with self._lock:
            rows = self._db.execute("SELECT DISTINCT cluster FROM epochs ORDER BY cluster").fetchall()
        return [r[0] for r in rows]

    # ------------------------------------------------------------------ small key/value state
    def get_meta(self, cluster: str, key: str) -> Any:
        with self._lock:
            row = self._db.execute(
                "SELECT value FROM meta WHERE cluster = ? AND key = ?", (cluster, key)
            ).fetchone()
        return None if row is None else json.loads(row[0])

    def set_meta(self, cluster: str, key: str, value: Any) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO meta VALUES (?, ?, ?) "
                "ON CONFLICT (cluster, key) DO UPDATE SET value = excluded.value",
                (cluster, key, json.dumps(value, sort_keys=True)),
            )


def _epoch(row: tuple[Any, ...]) -> EpochRecord:
    cluster, seq, now, wall, sha, status, decision, state = row
    return EpochRecord(
        cluster, int(seq), float(now), float(wall), sha, status, json.loads(decision), json.loads(state)
    )

"""The hosts' SQLite store: epochs, actions and state survive a reopen."""

from __future__ import annotations

from pathlib import Path

from optsched.hosts.store import Store


def _decision(now: float, a: float) -> dict[str, object]:
    return {"now": now, "status": "optimal", "assurance_state": {"t": {"a": a}}, "start": []}


def test_epochs_and_actions_survive_a_reopen(tmp_path: Path) -> None:
    db = tmp_path / "state" / "optsched.db"
    s = Store(db)
    assert s.latest("c1") is None and s.assurance_state("c1") is None
    seq1 = s.record_epoch("c1", '{"now": 1}', _decision(1.0, 0.5), [("j1", "start", "ok", "in quota")])
    seq2 = s.record_epoch("c1", '{"now": 2}', _decision(2.0, 0.7))
    s.record_actions("c1", seq2, [("j2", "preempt", "ok", "reclaim for t")])
    s.record_epoch("c2", '{"now": 5}', _decision(5.0, 0.1))
    s.set_meta("c1", "cursor", {"job": 7})
    s.close()

    s = Store(db)
    assert (seq1, seq2) == (1, 2)
    last = s.latest("c1")
    assert last is not None and last.seq == 2 and last.now == 2.0
    assert s.assurance_state("c1") == {"t": {"a": 0.7}}
    assert [e.seq for e in s.epochs("c1")] == [2, 1]
    assert [(a.job, a.action, a.reason) for a in s.actions("c1")] == [
        ("j1", "start", "in quota"),
        ("j2", "preempt", "reclaim for t"),
    ]
    assert [a.seq for a in s.actions("c1", job="j2")] == [2]
    assert [a.job for a in s.actions("c1", newest_first=True, limit=1)] == ["j2"]
    assert s.clusters() == ["c1", "c2"]
    assert s.get_meta("c1", "cursor") == {"job": 7} and s.get_meta("c2", "cursor") is None
    s.set_meta("c1", "cursor", {"job": 8})
    assert s.get_meta("c1", "cursor") == {"job": 8}


def test_a_failed_transaction_leaves_nothing(tmp_path: Path) -> None:
    s = Store(tmp_path / "x.db")
    bad_actions = [("j1", "start", "ok", "x"), ("j2", "start")]  # second row is malformed
    try:
        s.record_epoch("c", "{}", _decision(1.0, 1.0), bad_actions)  # type: ignore[arg-type]
    except Exception:
        pass
    else:  # pragma: no cover - the malformed row must fail
        raise AssertionError("a malformed action row was accepted")
    assert s.latest("c") is None and s.actions("c") == []


def test_an_intent_is_committed_before_its_outcome(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    s = Store(db)
    seq = s.record_epoch("c", "{}", _decision(1.0, 1.0))
    rowid = s.begin_action("c", seq, ("j1", "start", "pending", "in quota on n1:2"))
    s.record_actions("c", seq, [("j0", "loan", "ok", "a lends 2")])
    s.close()  # what a kill leaves: the intent, committed
    s = Store(db)
    assert [(i, a.job, a.outcome) for i, a in s.pending_actions("c")] == [(rowid, "j1", "pending")]
    assert s.pending_actions("other") == []
    s.finish_action(rowid, "ok", "in quota on n1:2; running")
    assert s.pending_actions("c") == []
    assert [(a.job, a.outcome, a.reason) for a in s.actions("c")] == [
        ("j1", "ok", "in quota on n1:2; running"),
        ("j0", "ok", "a lends 2"),
    ]

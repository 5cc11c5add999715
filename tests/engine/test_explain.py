"""Explanations (``Decision.explanations``, ``optsched explain``): every statement holds.

The numbers of every explanation are recomputed here from the snapshot and the decision alone,
by the rules of docs/snapshot-format.md ("Explanations"), for generated snapshots (tiny and
Venus, several seeds, as generated and with free capacity and tight limits), the hand-made
instances and snapshots built to hit each binding.
"""

from __future__ import annotations

import copy
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from optsched.cli import main
from optsched.engine.assurance import THETA_SHARE
from optsched.engine.check import _cap_starved
from optsched.engine.epoch import solve_epoch
from optsched.engine.state import ClusterState, parse_snapshot
from optsched.instances import generate
from optsched.predict.fallback import EstimatePredictor
from optsched.schema.decision import Decision, Explanation
from tests.conftest import DATA

NEVER = {"gang_size", "type_unavailable", "gpu_memory"}
RANK = [
    "not_chosen",
    "priority",
    "no_lender",
    "lend_limit",
    "borrow_limit",
    "over_quota_kept",
    "capacity",
    "gang_size",
    "type_unavailable",
    "gpu_memory",
]
MAX_IDS = 10


class After:
    """The cluster after a decision, computed from the snapshot and the decision only."""

    def __init__(self, snap: dict[str, Any], d: Decision) -> None:
        self.snap = snap
        self.state = ClusterState.from_snapshot(parse_snapshot(snap))
        self.jobs = {j["id"]: j for j in snap["jobs"]}
        self.node_type = {n["id"]: n["gpu_type"] for n in snap["nodes"]}
        pool = {(g["node"], g["gpu"]) for g in (snap.get("workflows") or {}).get("pool", [])}
        self.types = list(snap["gpu_types"])
        self.cap: dict[str, int] = defaultdict(int)
        for n in snap["nodes"]:
            if n.get("available", True):
                self.cap[n["gpu_type"]] += sum((n["id"], g) not in pool for g in range(n["gpus"]))
        self.preempted = {p.job for p in d.preempt}
        self.resized = {rz.job: rz for rz in d.resize}
        hosts = self.state.host_of
        self.use: dict[tuple[str, str], int] = defaultdict(int)
        self.before: dict[tuple[str, str], int] = defaultdict(int)
        for j in snap["jobs"]:
            if j["state"] != "running" or j["id"] in hosts:
                continue
            key = (j["tenant"], self.node_type[j["allocation"][0]["node"]])
            self.before[key] += j["gpus"]
            if j["id"] in self.resized:
                self.use[key] += self.resized[j["id"]].to_gpus
            elif j["id"] not in self.preempted:
                self.use[key] += j["gpus"]
        self.started: dict[str, list[str]] = defaultdict(list)  # type -> non-guest starts
        self.start_gpus: dict[str, int] = defaultdict(int)
        self.on_gpu: dict[tuple[str, int], set[str]] = defaultdict(set)
        for s in d.start:
            for r in s.allocation:
                self.on_gpu[(r.node, r.gpu)].add(s.job)
            if s.colocated_with:
                continue
            t = self.node_type[s.allocation[0].node]
            self.use[(self.jobs[s.job]["tenant"], t)] += len(s.allocation)
            self.started[t].append(s.job)
            self.start_gpus[t] += len(s.allocation)
        self.on_loan_start = {s.job for s in d.start if s.on_loan}
        self.lent_in: dict[tuple[str, str], int] = defaultdict(int)
        self.lent_out: dict[tuple[str, str], int] = defaultdict(int)
        for ln in d.loans:
            self.lent_in[(ln.borrower, ln.gpu_type)] += ln.gpus
            self.lent_out[(ln.lender, ln.gpu_type)] += ln.gpus
        self.tenants = {t["id"]: t for t in snap["tenants"]}

    def quota(self, ten: str, t: str) -> int:
        return int(self.tenants[ten]["quota"].get(t, 0))

    def limit(self, ten: str, which: str, t: str) -> int | None:
        table = self.tenants[ten].get(which)
        return None if table is None or t not in table else int(table[t])

    def expected_fit(self, ten: str, g: int, t: str, mem: float | None = None) -> dict[str, Any]:
        cap = self.cap[t]
        total = sum(v for (_, tt), v in self.use.items() if tt == t)
        free = cap - total
        q, u = self.quota(ten, t), self.use[(ten, t)]
        li, lo = self.lent_in[(ten, t)], self.lent_out[(ten, t)]
        idle = q - u - lo
        to_borrow = max(0, g - idle - li)
        lendable = idle_else = 0
        for o in self.tenants:
            if o == ten:
                continue
            lo_o = self.lent_out[(o, t)]
            idle_o = max(0, self.quota(o, t) - self.use[(o, t)] - lo_o)
            ll = self.limit(o, "lend_limit", t)
            idle_else += idle_o
            lendable += idle_o if ll is None else max(0, min(idle_o, ll - lo_o))
        bl = self.limit(ten, "borrow_limit", t)
        room = None if bl is None else bl - li
        started = self.start_gpus[t]
        if mem is not None and mem > self.snap["gpu_types"][t]["memory_gib"]:
            binding, missing = "gpu_memory", g  # the job's stated memory per GPU does not fit
        elif cap == 0:
            binding, missing = "type_unavailable", g
        elif cap < g:
            binding, missing = "gang_size", g - cap
        elif free < g:
            binding, missing = ("priority" if free + started >= g else "capacity"), g - free
        elif to_borrow == 0:
            binding, missing = "not_chosen", 0
        elif u - q - li > 0:
            binding, missing = "over_quota_kept", to_borrow
        elif room is not None and room < to_borrow:
            binding, missing = "borrow_limit", to_borrow - max(0, room)
        elif lendable < to_borrow:
            binding = "lend_limit" if idle_else >= to_borrow else "no_lender"
            missing = to_borrow - lendable
        else:
            binding, missing = "not_chosen", 0
        return {
            "gpu_type": t,
            "binding": binding,
            "missing": missing,
            "capacity": cap,
            "free": free,
            "started": started,
            "kept": total - started,
            "quota": q,
            "use": u,
            "idle_quota": idle,
            "borrowed": li,
            "to_borrow": to_borrow,
            "lendable": lendable,
            "idle_elsewhere": idle_else,
            "borrow_room": room,
            "group": None,  # flat snapshots: no quota group binds
        }


def verify(snap: dict[str, Any], d: Decision, reclaim_for: set[str] | None = None) -> set[tuple[str, str]]:
    """Assert every explanation of ``d`` holds; return the (code, binding) pairs seen.

    ``reclaim_for`` (partitioned decisions): the pending jobs the coordination step may stop
    running jobs for (guaranteed, of a tenant due a reclaim); a preemption may then also name
    such a job, started now on its type, that does not use its GPUs."""
    a = After(snap, d)
    explained = set(d.explanations)
    assert explained == set(d.queue) | a.preempted | set(a.resized), (
        "exactly the queued, the preempted and the resized jobs"
    )
    seen: set[tuple[str, str]] = set()
    for jid in d.queue:
        e = d.explanations[jid]
        check_queued(a, jid, e, d)
        seen.add((e.code, e.binding))
    for p in d.preempt:
        e = d.explanations[p.job]
        assert e.code == p.reason.value
        check_preempted(a, p.job, e, d, reclaim_for or set())
        seen.add((e.code, e.binding))
    for jid, rz in a.resized.items():
        e = d.explanations[jid]
        assert e.code == rz.reason.value and e.tenant == a.jobs[jid]["tenant"]
        assert e.resource is not None and e.resource.gpus == abs(rz.to_gpus - rz.from_gpus)
        gone = {(r["node"], r["gpu"]) for r in a.jobs[jid]["allocation"]} - {r.key() for r in rz.allocation}
        assert set(e.made_room_for) == {j for k in gone for j in a.on_gpu.get(k, ())}
        assert ("grows" if rz.reason == "grow" else "shrinks") in e.text
        assert f"from {rz.from_gpus} " in e.text and f"to {rz.to_gpus} " in e.text
        seen.add((e.code, e.binding))
    return seen


def check_queued(a: After, jid: str, e: Explanation, d: Decision) -> None:
    job = a.jobs[jid]
    ten, g = job["tenant"], job.get("min_gpus") or job["gpus"]  # an elastic job at its smallest
    assert e.code == d.queue_reasons[jid].value
    assert e.tenant == ten
    allowed = job["gpu_types"] if job.get("gpu_types") is not None else a.types
    want = {t: a.expected_fit(ten, g, t, job.get("memory_gib")) for t in allowed}
    got = [f.model_dump() for f in e.types]
    assert sorted(f["gpu_type"] for f in got) == sorted(allowed)
    for f in got:
        assert f == want[f["gpu_type"]], (jid, f, want[f["gpu_type"]])
    keys = [
        (f["binding"] in NEVER, f["missing"], RANK.index(f["binding"]), a.types.index(f["gpu_type"]))
        for f in got
    ]
    assert keys == sorted(keys), f"{jid}: types not best first"
    best = got[0]
    if e.binding == "preemption_cap":
        # a best-effort job whose every type holds quota of a tenant its preemption cap starves
        # (the checker's own rule): it waits for that tenant's queued guaranteed jobs (its own
        # tenant's when starved), whatever its types' numbers say
        starved = _cap_starved(a.state)
        owners = [
            o for t in allowed for o in a.state.tenant_ids if o in starved and a.state.quota(o, t) > 0
        ]
        assert job.get("qos") != "guaranteed" and owners, jid
        assert all(any(a.state.quota(o, t) > 0 for o in starved) for t in allowed), jid
        named = ten if ten in owners else owners[0]
        assert e.code == "preemption_cap" and "max_gpus_per_epoch" in e.text and named in e.text
        waiting = [
            j for j in d.queue if a.jobs[j]["tenant"] == named and a.jobs[j].get("qos") == "guaranteed"
        ]
        assert e.blocked_by == waiting[:MAX_IDS], jid
        return
    if e.binding == "reservation":
        # the types' numbers know no reservation: it waits for a gang's held GPUs (a gang in
        # node shape may hold them although its GPUs are free, on too few whole nodes)
        assert e.code == "reserved" and e.reserved_for in {r.job for r in d.reservations}, jid
        assert best["binding"] in ("capacity", "priority", "not_chosen"), (jid, best)
        return
    assert e.binding == best["binding"]
    assert e.resource is not None and (e.resource.gpu_type, e.resource.gpus) == (best["gpu_type"], g)
    t = best["gpu_type"]
    if best["binding"] in ("priority", "capacity"):
        pool = a.started[t]
    elif best["binding"] in NEVER:
        pool = []
    else:
        pool = [j for j in a.started[t] if a.jobs[j]["tenant"] == ten]
    assert set(e.blocked_by) <= set(pool) and len(e.blocked_by) == min(MAX_IDS, len(pool)), jid
    assert not e.made_room_for and e.lender is None
    # the text says the same numbers
    for f in got:
        tt = f["gpu_type"]
        if f["binding"] in ("priority", "capacity"):
            assert f"'{tt}': {f['free']} free after this decision" in e.text
            assert f"{f['started']} " in e.text and f"{f['kept']} " in e.text
        elif f["binding"] == "gang_size":
            assert f"'{tt}': only {f['capacity']} GPU" in e.text
        elif f["binding"] in ("borrow_limit", "lend_limit", "no_lender"):
            assert f"'{tt}': {f['free']} free, but its tenant {ten}" in e.text
            assert f"take {f['to_borrow']} more on loan" in e.text
            if f["binding"] != "borrow_limit":
                assert f"lend {f['lendable']}" in e.text


def check_preempted(a: After, jid: str, e: Explanation, d: Decision, reclaim_for: set[str]) -> None:
    job = a.jobs[jid]
    ten = job["tenant"]
    t = a.node_type[job["allocation"][0]["node"]]
    assert e.tenant == ten
    assert e.resource is not None and (e.resource.gpu_type, e.resource.gpus) == (t, job["gpus"])
    takers = {j for r in job["allocation"] for j in a.on_gpu.get((r["node"], r["gpu"]), ())}
    host = a.state.host_of.get(jid)
    assert e.host == host
    # starts its stop made room for elsewhere on the type (a partitioned epoch's coordination
    # step): guaranteed jobs of tenants due a reclaim, started now on the same type
    elsewhere = set(e.made_room_for) - takers if "stopping it makes room for" in e.text else set()
    if elsewhere:
        assert e.code in ("reclaim", "priority") and host is None, jid
        assert elsewhere <= reclaim_for & set(a.started[t]), jid
        takers |= elsewhere
    if takers:
        assert set(e.made_room_for) == takers, jid
        for j in takers:
            assert j in e.text
    reason = e.code
    if reason == "node_unavailable":
        down = [r["node"] for r in job["allocation"] if not a.state.node_available(r["node"])]
        assert down and e.binding == "node_unavailable" and down[0] in e.text
    elif reason == "reclaim":
        assert job.get("on_loan")

        def gain(o: str) -> int:
            q = a.quota(o, t)
            return min(q, a.use[(o, t)]) - min(q, a.before[(o, t)])

        if e.lender is not None:
            assert e.binding == "quota" and e.lender != ten and gain(e.lender) > 0
            assert f"uses {a.use[(e.lender, t)]} of its {a.quota(e.lender, t)} '{t}' quota" in e.text
            assert f"{a.before[(e.lender, t)]} before" in e.text
        else:
            assert all(gain(o) <= 0 for o in a.tenants if o != ten)
            assert e.binding == ("capacity" if takers else "no_lender")
    elif reason == "interference" and host is not None:
        hten = a.jobs[host]["tenant"]
        if e.binding == "assurance":
            assert d.assurance[hten] < THETA_SHARE and f"{d.assurance[hten]:.3f}" in e.text
        elif e.binding == "host_preempted":
            assert host in a.preempted
        elif e.binding == "priority":
            assert takers and host not in a.preempted
        else:
            assert e.binding == "interference" and not takers and host not in a.preempted
    else:
        assert e.binding == "priority"
        if not takers:
            own = {j for j in a.started[t] if a.jobs[j]["tenant"] == ten and j not in a.on_loan_start}
            assert set(e.made_room_for) <= own


def solve(snap: dict[str, Any]) -> Decision:
    return solve_epoch(copy.deepcopy(snap), predictor=EstimatePredictor())


def loosen(snap: dict[str, Any], seed: int) -> dict[str, Any]:
    """Free capacity (drop about half of the running jobs that share no GPU) and tighten some
    tenants' borrow and lend limits, so quota, loans and limits bind."""
    rng = np.random.default_rng(seed)
    s = copy.deepcopy(snap)
    s["jobs"] = [
        j
        for j in s["jobs"]
        if j["state"] == "pending" or j.get("colocated") or j.get("guest_of") or rng.random() < 0.5
    ]
    types = list(s["gpu_types"])
    for ten in s["tenants"]:
        if rng.random() < 0.4:
            ten["borrow_limit"] = {t: int(rng.integers(0, 4)) for t in types}
        if rng.random() < 0.4:
            ten["lend_limit"] = {t: int(rng.integers(0, 4)) for t in types}
    return s


GENERATED = [("tiny", s) for s in range(6)] + [("venus", 0), ("venus", 1)]


@pytest.mark.parametrize(("size", "seed"), GENERATED)
def test_generated_explanations_hold(size: str, seed: int) -> None:
    snap = generate(size, seed)  # type: ignore[arg-type]
    seen = verify(snap, solve(snap))
    seen |= verify(loosen(snap, seed), solve(loosen(snap, seed)))
    assert seen


def test_the_corpus_reaches_the_bindings() -> None:
    """Across loosened tiny snapshots, the quota-side bindings occur (so they are tested)."""
    seen: set[str] = set()
    for seed in range(12):
        snap = loosen(generate("tiny", seed), seed)
        seen |= {b for _, b in verify(snap, solve(snap))}
    assert {"capacity", "priority", "gang_size"} <= seen
    assert seen & {"no_lender", "lend_limit", "borrow_limit", "over_quota_kept"}, seen


@pytest.mark.parametrize("path", sorted((DATA / "tiny").glob("*.json")), ids=lambda p: p.stem)
def test_instances(path: Path) -> None:
    snap = json.loads(path.read_text())
    verify(snap, solve(snap))


# snapshots built to hit one binding each ------------------------------------------------------


def base(quota_a: int, quota_b: int, nodes: int = 3, **tenant_b: Any) -> dict[str, Any]:
    """Tenant b runs 12 guaranteed GPUs of type A; a waits with an 8-GPU guaranteed gang."""
    jobs: list[dict[str, Any]] = [
        {
            "id": f"b{k}",
            "tenant": "b",
            "qos": "guaranteed",
            "gpus": 4,
            "submit_s": 0.0,
            "state": "running",
            "start_s": 10.0,
            "on_loan": False,
            "allocation": [{"node": f"n{k}", "gpu": g} for g in range(4)],
        }
        for k in range(3)
    ]
    jobs.append(
        {"id": "wait", "tenant": "a", "qos": "guaranteed", "gpus": 8, "submit_s": 50.0, "state": "pending"}
    )
    return {
        "format": 1,
        "now": 100.0,
        "gpu_types": {"A": {"memory_gib": 80}, "B": {"memory_gib": 80}},
        "nodes": [{"id": f"n{k}", "gpu_type": "A", "gpus": 8} for k in range(nodes)]
        + [{"id": "nb", "gpu_type": "B", "gpus": 8, "available": False}],
        "tenants": [
            {"id": "a", "quota": {"A": quota_a}},
            {"id": "b", "quota": {"A": quota_b}, **tenant_b},
        ],
        "jobs": jobs,
    }


def one(snap: dict[str, Any], job: str) -> Explanation:
    d = solve(snap)
    verify(snap, d)
    return d.explanations[job]


def test_no_lender() -> None:
    e = one(base(4, 12), "wait")
    assert e.binding == "no_lender" and e.code == "quota_and_no_lender"
    assert "has 4 idle quota" in e.text and "take 4 more on loan" in e.text and "can lend 0" in e.text


def test_lend_limit() -> None:
    e = one(base(4, 20, lend_limit={"A": 2}), "wait")
    assert e.binding == "lend_limit"
    assert "have 8 idle quota, but their lend_limit lets them lend 2" in e.text


def test_borrow_limit() -> None:
    snap = base(4, 20)
    snap["tenants"][0]["borrow_limit"] = {"A": 2}
    e = one(snap, "wait")
    assert e.binding == "borrow_limit" and e.code == "borrow_limit"
    assert "it may borrow 2 more (borrow_limit 2, borrows 0)" in e.text


def test_over_quota_kept_and_type_unavailable() -> None:
    snap = base(4, 12)
    snap["jobs"][-1].update(gpus=1, gpu_types=["A", "B"])
    # a runs 6 GPUs on a quota of 4, no lender: it keeps them, nothing starts on top
    snap["jobs"].append(
        {
            "id": "a-old",
            "tenant": "a",
            "qos": "guaranteed",
            "gpus": 6,
            "submit_s": 0.0,
            "state": "running",
            "start_s": 10.0,
            "on_loan": False,
            "allocation": [{"node": "n0", "gpu": g} for g in range(4, 8)]
            + [{"node": "n1", "gpu": g} for g in range(4, 6)],
        }
    )
    e = one(snap, "wait")
    assert [f.binding for f in e.types] == ["over_quota_kept", "type_unavailable"]
    assert "2 GPUs of it run above quota with no lender" in e.text
    assert "'B': no GPU of this type is on an available node" in e.text


def test_reclaim_names_the_lender_and_the_starts() -> None:
    snap = base(4, 12, nodes=2)

    def running(jid: str, ten: str, node: str, first: int, on_loan: bool) -> dict[str, Any]:
        alloc = [{"node": node, "gpu": g} for g in range(first, first + 4)]
        return {
            "id": jid,
            "tenant": ten,
            "qos": "guaranteed",
            "gpus": 4,
            "submit_s": 0.0,
            "state": "running",
            "start_s": 10.0,
            "allocation": alloc,
            "on_loan": on_loan,
        }

    # b runs 4 of its 12 'A' GPUs and lends 8 to a, which runs 4 in quota too; all 16 are busy
    # when b's 8-GPU gang arrives: b takes its quota back
    snap["jobs"] = [
        running("b-run", "b", "n0", 0, False),
        running("a-own", "a", "n0", 4, False),
        running("a-loan1", "a", "n1", 0, True),
        running("a-loan2", "a", "n1", 4, True),
        {"id": "b-wait", "tenant": "b", "qos": "guaranteed", "gpus": 8, "submit_s": 50.0, "state": "pending"},
    ]
    snap["now"] = 10000.0  # b has waited past its queueing-delay target: its assurance falls
    snap["tenants"][1]["qos"] = {"max_queue_delay_s": 600.0}
    d = solve(snap)
    verify(snap, d)
    assert {p.job for p in d.preempt} == {"a-loan1", "a-loan2"}
    for jid in ("a-loan1", "a-loan2"):
        e = d.explanations[jid]
        assert e.code == "reclaim" and e.lender == "b" and e.binding == "quota"
        assert e.made_room_for == ["b-wait"]
        back = "b takes its quota back: it uses 12 of its 12 'A' quota after this decision, 4 before"
        assert back in e.text


def test_drained_node() -> None:
    snap = json.loads((DATA / "tiny" / "drained_node.json").read_text())
    d = solve(snap)
    e = [d.explanations[p.job] for p in d.preempt if p.reason.value == "node_unavailable"]
    assert e and all(x.binding == "node_unavailable" and "unavailable" in x.text for x in e)


# the command ---------------------------------------------------------------------------------


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def test_explain_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    snap = generate("tiny", 2)
    sp, dp = tmp_path / "s.json", tmp_path / "d.json"
    sp.write_text(json.dumps(snap))
    assert run(["solve", str(sp), "-o", str(dp), "--predictor", "fallback"], capsys)[0] == 0
    d = Decision.model_validate_json(dp.read_text())
    assert d.queue and d.preempt and d.start
    code, out, _ = run(["explain", str(sp), str(dp), d.queue[0]], capsys)
    assert code == 0 and f"queued ({d.queue_reasons[d.queue[0]].value})" in out
    assert d.explanations[d.queue[0]].text in out
    code, out, _ = run(["explain", str(sp), str(dp), d.preempt[0].job], capsys)
    assert code == 0 and f"preempted ({d.preempt[0].reason.value})" in out
    for s in d.start:
        code, out, _ = run(["explain", str(sp), str(dp), s.job], capsys)
        assert code == 0 and "starts now on node" in out
        why = "MPS guest" if s.colocated_with else "on loan" if s.on_loan else "inside its tenant's quota"
        assert why in out
    running = next(j["id"] for j in snap["jobs"] if j["state"] == "running" and j["id"] not in d.explanations)
    code, out, _ = run(["explain", str(sp), str(dp), running], capsys)
    assert code == 0 and "keeps running" in out


def test_explain_command_refuses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    snap = generate("tiny", 2)
    sp, dp, old = tmp_path / "s.json", tmp_path / "d.json", tmp_path / "old.json"
    sp.write_text(json.dumps(snap))
    assert run(["solve", str(sp), "-o", str(dp), "--predictor", "fallback"], capsys)[0] == 0
    code, _, err = run(["explain", str(sp), str(dp), "no-such-job"], capsys)
    assert code == 2 and "unknown job 'no-such-job'" in err
    raw = json.loads(dp.read_text())
    raw.pop("explanations")
    old.write_text(json.dumps(raw))
    code, _, err = run(["explain", str(sp), str(old), raw["queue"][0]], capsys)
    assert code == 2 and "no explanations" in err

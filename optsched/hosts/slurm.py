"""The Slurm adapter: optsched as the scheduling policy of a Slurm cluster.

Slurm keeps every job held at submission (a ``job_submit.lua`` gate sets priority 0); each
epoch the adapter

* **reads** ``squeue --json`` and ``sinfo --json`` and builds a format-1 snapshot
  (:func:`build_snapshot`, a pure function of the two documents, the config and the store's
  history): nodes and GPU types from the gres strings, running jobs with their node / GPU
  index allocation from ``gres_detail`` (``gpu:a100:4(IDX:0-3)``), ``on_loan`` from the store,
  pending jobs that are held (or released but not started), tenants and quotas from the config;
* lets :class:`optsched.hosts.loop.HostLoop` decide and check;
* **applies** the checked decision (:meth:`SlurmHost.apply`): preemptions by
  ``scontrol requeuehold`` (the job goes back to held, its GPUs free at once), then starts by
  pinning the job to the chosen nodes and releasing it, after checking on a fresh read that
  the job is still the one decided about and that the nodes have the GPUs free. A released job
  that does not show as running on those nodes within ``start_wait_s`` is held again (Slurm
  would otherwise start it later on its own). Loans are recorded. Each action is logged with
  its reason and outcome (logging and the store).

A job that changed under us (cancelled, finished, edited, started by someone else) is logged
and skipped; a failing ``scontrol`` is logged as ``failed``; neither stops the epoch.

Slurm places GPUs itself: a start pins the nodes (``ReqNodeList``, ``NumNodes``), not the GPU
indices, so the next snapshot reads the indices Slurm chose. MPS guests are not started (a
decision's ``colocated_with`` start is logged and skipped): sharing needs Slurm's ``mps`` gres.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from optsched.hosts.config import SlurmConfig
from optsched.hosts.loop import Action, History, Report

if TYPE_CHECKING:
    from optsched import Decision, Snapshot
    from optsched.hosts.store import Store

log = logging.getLogger("optsched.hosts.slurm")

UNMANAGED = "_unmanaged"
"""Tenant of running GPU jobs that no configured tenant owns (their GPUs are used)."""
SUBMIT_KEY = "first_submit"
"""Store meta key: {job id: first submit time seen}, since a requeue moves Slurm's submit_time."""
PENDING_SKIP_REASONS = ("Dependency", "BeginTime", "DependencyNeverSatisfied")
RUNNING_STATES = {"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED"}
DOWN_STATES = ("down", "drain", "fail", "maint", "unknown", "future", "not_responding", "reboot")


# ---------------------------------------------------------------------------------- parsing
def expand_hostlist(text: str) -> list[str]:
    """``n[1-3],m5`` -> ``['n1', 'n2', 'n3', 'm5']`` (Slurm's compressed host lists)."""
    out: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?[^,]*", text or ""):
        m = re.fullmatch(r"([^\[]*)\[([^\]]*)\](.*)", part)
        if not m:
            out.append(part)
            continue
        pre, ranges, post = m.groups()
        for r in ranges.split(","):
            if "-" in r:
                a, b = r.split("-", 1)
                out += [f"{pre}{i:0{len(a)}d}{post}" for i in range(int(a), int(b) + 1)]
            else:
                out.append(f"{pre}{r}{post}")
    return out


def parse_indices(text: str) -> list[int]:
    """``0-2,5`` -> ``[0, 1, 2, 5]``; ``N/A`` -> ``[]``."""
    out: list[int] = []
    for r in text.split(","):
        r = r.strip()
        if not r or not r[0].isdigit():
            continue
        if "-" in r:
            a, b = r.split("-", 1)
            out += list(range(int(a), int(b) + 1))
        else:
            out.append(int(r))
    return out


_GRES = re.compile(r"^(?:gres[:/])?gpu(?::([^:(]+))?:(\d+)(?:\(IDX:([^)]*)\))?$")


def parse_gpu_gres(text: str) -> tuple[str | None, int, list[int] | None] | None:
    """The GPU part of a gres / tres string: ``(type or None, count, indices or None)``.

    ``gres:gpu:a100:4`` -> ``('a100', 4, None)``; ``gpu:v100:2(IDX:0-1)`` -> ``('v100', 2,
    [0, 1])``; ``gres:gpu:3`` -> ``(None, 3, None)``; no GPU part -> ``None``.
    """
    for item in re.split(r",(?![^(]*\))", text or ""):
        m = _GRES.match(item.strip())
        if m:
            typ, n, idx = m.groups()
            return typ, int(n), (parse_indices(idx) if idx is not None else None)
    return None


@dataclass(frozen=True)
class SlurmNode:
    name: str
    gres_type: str
    gpus: int
    used: frozenset[int]
    state: str
    available: bool


@dataclass(frozen=True)
class SlurmJob:
    id: str
    account: str
    partition: str
    state: str
    """``PENDING``, ``RUNNING``, ..."""
    reason: str
    priority: int
    held: bool
    gres_type: str | None
    gpus: int
    """Total GPUs of the gang."""
    per_node: int | None
    """GPUs per node when the job asked per node (``--gres``), else ``None`` (``--gpus``)."""
    node_count: int
    nodes: tuple[str, ...]
    allocation: tuple[tuple[str, int], ...]
    submit_s: float
    start_s: float | None
    time_limit_s: float | None
    qos: str
    comment: str
    name: str
    user: str


def _num(v: Any) -> float | None:
    """squeue 22.05 writes numbers plainly; later versions wrap them as {set, number}."""
    if isinstance(v, dict):
        if not v.get("set", True) or v.get("infinite"):
            return None
        v = v.get("number")
    return None if v is None else float(v)


def _state(v: Any) -> str:
    if isinstance(v, list):
        return str(v[0]) if v else ""
    return str(v or "")


def parse_nodes(sinfo: dict[str, Any]) -> list[SlurmNode]:
    """The GPU nodes of ``sinfo --json`` (one per name; nodes without GPUs are left out)."""
    out: dict[str, SlurmNode] = {}
    for n in sinfo.get("nodes", []):
        name = str(n.get("name") or n.get("hostname"))
        g = parse_gpu_gres(str(n.get("gres", "")))
        if g is None or g[0] is None or name in out:
            continue
        used = parse_gpu_gres(str(n.get("gres_used", "")))
        state = " ".join(_state(n.get("state")).lower().split())
        flags = " ".join(str(f).lower() for f in n.get("state_flags", []) or [])
        down = any(d in f"{state} {flags}" for d in DOWN_STATES)
        out[name] = SlurmNode(
            name=name,
            gres_type=g[0],
            gpus=g[1],
            used=frozenset((used[2] or []) if used else []),
            state=state,
            available=not down,
        )
    return list(out.values())


def parse_jobs(squeue: dict[str, Any]) -> list[SlurmJob]:
    """The GPU jobs of ``squeue --json`` (jobs asking for no GPU are left out)."""
    out: list[SlurmJob] = []
    for j in squeue.get("jobs", []):
        per_node = parse_gpu_gres(str(j.get("tres_per_node", "")))
        per_job = parse_gpu_gres(str(j.get("tres_per_job", "")))
        node_count = int(_num(j.get("node_count")) or 1)
        if per_node is not None:
            gres_type, gpus, pn = per_node[0], per_node[1] * node_count, per_node[1]
        elif per_job is not None:
            gres_type, gpus, pn = per_job[0], per_job[1], None
        else:
            continue
        nodes: list[str] = []
        res = j.get("job_resources") or {}
        if isinstance(res.get("allocated_nodes"), list):
            nodes = [str(a.get("nodename")) for a in res["allocated_nodes"] if a.get("nodename")]
        if not nodes and j.get("nodes"):
            nodes = expand_hostlist(str(j["nodes"]))
        alloc: list[tuple[str, int]] = []
        for node, detail in zip(nodes, j.get("gres_detail") or [], strict=False):
            g = parse_gpu_gres(str(detail))
            if g is not None and g[2]:
                alloc += [(node, i) for i in g[2]]
        state = _state(j.get("job_state")).upper()
        reason = str(j.get("state_reason") or "")
        priority = int(_num(j.get("priority")) or 0)
        tl = _num(j.get("time_limit"))
        out.append(
            SlurmJob(
                id=str(j["job_id"]),
                account=str(j.get("account") or ""),
                partition=str(j.get("partition") or ""),
                state=state,
                reason=reason,
                priority=priority,
                held=priority == 0 or "held" in reason.lower(),
                gres_type=gres_type,
                gpus=gpus,
                per_node=pn,
                node_count=node_count,
                nodes=tuple(nodes),
                allocation=tuple(alloc),
                submit_s=float(_num(j.get("submit_time")) or 0.0),
                start_s=_num(j.get("start_time")) or None,
                time_limit_s=None if tl is None else tl * 60.0,
                qos=str(j.get("qos") or ""),
                comment=str(j.get("comment") or ""),
                name=str(j.get("name") or ""),
                user=str(j.get("user_name") or ""),
            )
        )
    return out


# ---------------------------------------------------------------------------------- snapshot
def tenant_of(cfg: SlurmConfig, job: SlurmJob) -> str | None:
    """The configured tenant of a job: by account first, then by partition."""
    for t in cfg.tenants:
        if job.account and job.account in t.accounts:
            return t.id
    for t in cfg.tenants:
        if job.partition and any(p in t.partitions for p in job.partition.split(",")):
            return t.id
    return None


def qos_of(cfg: SlurmConfig, job: SlurmJob, tenant: str) -> str:
    """The job's QoS class: its comment tag, else its Slurm QOS, else the tenant's / global default."""
    prefix = cfg.qos.comment_prefix
    for word in job.comment.replace(",", " ").split():
        if prefix and word.startswith(prefix):
            tag = word[len(prefix) :]
            if tag in ("guaranteed", "best_effort"):
                return tag
    if job.qos in cfg.qos.guaranteed:
        return "guaranteed"
    if job.qos in cfg.qos.best_effort:
        return "best_effort"
    t = next((t for t in cfg.tenants if t.id == tenant), None)
    return (t.default_qos if t and t.default_qos else None) or cfg.qos.default


@dataclass
class Observation:
    """One read of the cluster, parsed."""

    jobs: list[SlurmJob]
    nodes: list[SlurmNode]
    now: float


@dataclass
class BuiltSnapshot:
    snapshot: dict[str, Any]
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """(job id, why it is not in the snapshot)."""
    unheld: list[str] = field(default_factory=list)
    """Pending jobs not held (released, not started): re-held when not started."""
    shapes: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Pending jobs that ask GPUs per node: (GPUs per node, nodes)."""


def build_snapshot(
    cfg: SlurmConfig,
    obs: Observation,
    *,
    on_loan: dict[str, bool] | None = None,
    assurance_state: dict[str, Any] | None = None,
    first_submit: dict[str, float] | None = None,
) -> BuiltSnapshot:
    """A format-1 snapshot (as a dict) of one read of the cluster. Pure: no I/O."""
    on_loan = on_loan or {}
    first_submit = first_submit or {}
    now = float(obs.now)
    types = {g: cfg.type_name(g) for g in cfg.gpu_types}
    nodes = [n for n in obs.nodes if n.gres_type in types]
    node_ids = {n.name for n in nodes}
    out = BuiltSnapshot(snapshot={})
    jobs: list[dict[str, Any]] = []
    unmanaged_use: dict[str, int] = {}
    node_type = {n.name: types[n.gres_type] for n in nodes}
    for sj in sorted(obs.jobs, key=lambda j: (j.submit_s, _job_key(j.id))):
        tenant = tenant_of(cfg, sj)
        if sj.gres_type is not None and sj.gres_type not in types:
            out.skipped.append((sj.id, f"gres type '{sj.gres_type}' is not in gpu_types"))
            continue
        submit = min(first_submit.get(sj.id, sj.submit_s), sj.submit_s, now)
        if sj.state in RUNNING_STATES:
            alloc = [(n, i) for n, i in sj.allocation if n in node_ids]
            if len(alloc) != sj.gpus or len(set(alloc)) != len(alloc):
                out.skipped.append(
                    (sj.id, f"running allocation {list(sj.allocation)} is not {sj.gpus} known GPUs")
                )
                continue
            if tenant is None:
                if cfg.unmanaged == "ignore":
                    out.skipped.append((sj.id, "no tenant owns it (unmanaged = 'ignore')"))
                    continue
                tenant = UNMANAGED
                t = node_type[alloc[0][0]]
                unmanaged_use[t] = unmanaged_use.get(t, 0) + sj.gpus
            start = sj.start_s if sj.start_s is not None else now
            start = min(start, now)
            job: dict[str, Any] = {
                "id": sj.id,
                "tenant": tenant,
                "qos": "guaranteed" if tenant == UNMANAGED else qos_of(cfg, sj, tenant),
                "gpus": sj.gpus,
                "gpu_types": [types[sj.gres_type]] if sj.gres_type else None,
                "submit_s": min(submit, start),
                "state": "running",
                "allocation": [{"node": n, "gpu": i} for n, i in alloc],
                "start_s": start,
                "on_loan": bool(on_loan.get(sj.id, False)) and tenant != UNMANAGED,
                "restart_cost_s": max(0.0, now - start),
            }
            if tenant == UNMANAGED:
                job["preemptible"] = False
        elif sj.state == "PENDING":
            if tenant is None:
                out.skipped.append((sj.id, "no tenant owns its account or partition"))
                continue
            if any(r in sj.reason for r in PENDING_SKIP_REASONS):
                out.skipped.append((sj.id, f"not startable ({sj.reason})"))
                continue
            if not sj.held:
                out.unheld.append(sj.id)
            if sj.per_node is not None:
                out.shapes[sj.id] = (sj.per_node, sj.node_count)
            job = {
                "id": sj.id,
                "tenant": tenant,
                "qos": qos_of(cfg, sj, tenant),
                "gpus": sj.gpus,
                "gpu_types": [types[sj.gres_type]] if sj.gres_type else None,
                "submit_s": submit,
                "state": "pending",
            }
        else:
            continue
        if sj.time_limit_s is not None:
            job["runtime_s"] = sj.time_limit_s
        feats = {k: v for k, v in (("user", sj.user), ("name", sj.name), ("account", sj.account)) if v}
        if feats:
            job["features"] = feats
        jobs.append(job)

    tenants: list[dict[str, Any]] = []
    for tc in cfg.tenants:
        td: dict[str, Any] = {
            "id": tc.id,
            "quota": {types[g]: q for g, q in tc.quota.items()},
            "borrow_limit": None
            if tc.borrow_limit is None
            else {types[g]: q for g, q in tc.borrow_limit.items()},
            "lend_limit": None if tc.lend_limit is None else {types[g]: q for g, q in tc.lend_limit.items()},
            "weight": tc.weight,
        }
        if tc.qos is not None:
            td["qos"] = tc.qos.model_dump()
        tenants.append(td)
    if any(j["tenant"] == UNMANAGED for j in jobs):
        zero = {t: 0 for t in types.values()}
        tenants.append(
            {"id": UNMANAGED, "quota": dict(unmanaged_use), "borrow_limit": zero, "lend_limit": zero}
        )
    known = {t["id"] for t in tenants}
    state = {k: v for k, v in (assurance_state or {}).items() if k in known}
    out.snapshot = {
        "format": 1,
        "now": now,
        "epoch_s": cfg.epoch_s,
        "gpu_types": {
            types[g]: {"memory_gib": c.memory_gib, "mps": c.mps, "speed": c.speed}
            for g, c in cfg.gpu_types.items()
        },
        "nodes": [
            {"id": n.name, "gpu_type": types[n.gres_type], "gpus": n.gpus, "available": n.available}
            for n in nodes
        ],
        "tenants": tenants,
        "jobs": jobs,
        "options": {"time_limit_s": cfg.time_limit_s, "backend": cfg.backend},
    }
    if state:
        out.snapshot["assurance_state"] = state
    return out


def _job_key(job_id: str) -> tuple[int, str]:
    return (int(job_id), "") if job_id.isdigit() else (1 << 62, job_id)


# ---------------------------------------------------------------------------------- commands
class SlurmError(RuntimeError):
    """A Slurm command failed (its stderr is the message)."""


class SlurmCommands:
    """The Slurm commands the adapter runs (``squeue``, ``sinfo``, ``scontrol``).

    ``env`` is passed to every command (e.g. ``SLURM_CONF``); tests swap this class for a fake.
    """

    def __init__(self, env: dict[str, str] | None = None, timeout_s: float = 30.0) -> None:
        self.env = env
        self.timeout_s = timeout_s

    def _run(self, *args: str) -> str:
        exe = shutil.which(args[0]) or args[0]
        try:
            p = subprocess.run(
                [exe, *args[1:]],
                capture_output=True,
                text=True,
                timeout=self.timeout_s,
                env=self.env,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SlurmError(f"{' '.join(args)}: {exc}") from None
        if p.returncode != 0:
            raise SlurmError(f"{' '.join(args)}: {(p.stderr or p.stdout).strip()}")
        return p.stdout

    def squeue(self) -> dict[str, Any]:
        return dict(json.loads(self._run("squeue", "--all", "--json")))

    def sinfo(self) -> dict[str, Any]:
        return dict(json.loads(self._run("sinfo", "--json")))

    def start(self, job: str, nodes: list[str]) -> None:
        self._run(
            "scontrol",
            "update",
            f"JobId={job}",
            f"NumNodes={len(nodes)}",
            f"ReqNodeList={','.join(nodes)}",
            "StartTime=now",
        )
        self._run("scontrol", "release", job)

    def requeue_hold(self, job: str) -> None:
        self._run("scontrol", "requeuehold", job)

    def hold(self, job: str) -> None:
        self._run("scontrol", "hold", job)


# ---------------------------------------------------------------------------------- the host
class SlurmHost:
    """A :class:`optsched.hosts.loop.Host` over a Slurm cluster."""

    def __init__(
        self,
        cfg: SlurmConfig,
        store: Store,
        commands: SlurmCommands | None = None,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.cfg = cfg
        self.cluster = cfg.cluster
        self.store = store
        self.cmd = commands or SlurmCommands()
        self.clock = clock
        self.sleep = sleep
        self.last_built: BuiltSnapshot | None = None

    # ------------------------------------------------------------------ read
    def observe(self) -> Observation:
        squeue, sinfo = self.cmd.squeue(), self.cmd.sinfo()
        return Observation(parse_jobs(squeue), parse_nodes(sinfo), self.clock())

    def snapshot(self, history: History) -> Snapshot:
        from optsched import Snapshot

        obs = self.observe()
        first = {str(k): float(v) for k, v in (self.store.get_meta(self.cluster, SUBMIT_KEY) or {}).items()}
        built = build_snapshot(
            self.cfg,
            obs,
            on_loan=history.on_loan,
            assurance_state=history.assurance_state,
            first_submit=first,
        )
        live = {j.id for j in obs.jobs}
        new_first = {k: v for k, v in first.items() if k in live}
        for j in built.snapshot["jobs"]:
            new_first.setdefault(j["id"], j["submit_s"])
        if new_first != first:
            self.store.set_meta(self.cluster, SUBMIT_KEY, new_first)
        for job, why in built.skipped:
            log.debug("job %s left out of the snapshot: %s", job, why)
        self.last_built = built
        return Snapshot.model_validate(built.snapshot)

    # ------------------------------------------------------------------ feasibility
    def unrealizable(self, snapshot: Snapshot, decision: Decision) -> dict[str, str]:
        """Starts Slurm cannot carry out: a job asking G GPUs on each of K nodes that the
        decision splits otherwise, when no K nodes of the decided type have G GPUs free after
        the decision (the loop then decides again without it)."""
        shapes = self.last_built.shapes if self.last_built else {}
        if not any(s.job in shapes for s in decision.start):
            return {}
        node_type = {n.id: n.gpu_type for n in snapshot.nodes if n.available}
        free = {n.id: n.gpus for n in snapshot.nodes if n.available}
        stopped = {p.job for p in decision.preempt}
        for j in snapshot.jobs:
            if j.state == "running" and j.id not in stopped and j.guest_of is None:
                for r in j.allocation or []:
                    if r.node in free:
                        free[r.node] -= 1
        split: list[Any] = []
        for s in decision.start:
            counts: dict[str, int] = {}
            for r in s.allocation:
                counts[r.node] = counts.get(r.node, 0) + 1
            shape = shapes.get(s.job)
            if shape is not None and (len(counts) != shape[1] or set(counts.values()) != {shape[0]}):
                split.append((s, counts, shape))
                continue
            if not s.colocated_with:
                for n, c in counts.items():
                    free[n] = free.get(n, 0) - c
        bad: dict[str, str] = {}
        for s, counts, (per, k) in split:
            typ = node_type.get(next(iter(counts)), "")
            fits = sorted(
                (n for n, t in node_type.items() if t == typ and free[n] >= per),
                key=lambda n: (-counts.get(n, 0), -free[n], n),
            )
            if len(fits) < k:
                where = ",".join(f"{n}:{c}" for n, c in counts.items())
                bad[s.job] = (
                    f"decided on {where}; it asks {per} GPUs on each of {k} node(s) "
                    "and no such nodes are free"
                )
                continue
            for n in fits[:k]:
                free[n] -= per
        return bad

    # ------------------------------------------------------------------ act
    def apply(self, snapshot: Snapshot, decision: Decision, history: History, report: Report) -> None:
        snap_jobs = {j.id: j for j in snapshot.jobs}
        for loan in decision.loans:
            report(
                Action(
                    "-", "loan", "ok", f"{loan.lender} lends {loan.gpus} {loan.gpu_type} to {loan.borrower}"
                )
            )

        # 1. preemptions (requeue-hold: back to held, GPUs free)
        fresh = self._fresh(report)
        if fresh is None:
            return
        jobs, _ = fresh
        stopped: list[str] = []
        for p in decision.preempt:
            sj, old = jobs.get(p.job), snap_jobs.get(p.job)
            why = f"{p.reason}: lost {p.lost_s:.0f} s of work"
            if old is None:
                report(Action(p.job, "preempt", "skipped", f"{why}; not a job of the snapshot"))
                continue
            if sj is None or sj.state not in RUNNING_STATES:
                report(Action(p.job, "preempt", "skipped", f"{why}; job is {sj.state if sj else 'gone'} now"))
                continue
            if old.allocation and sorted({r.node for r in old.allocation}) != sorted(set(sj.nodes)):
                report(Action(p.job, "preempt", "skipped", f"{why}; job moved to {','.join(sj.nodes)}"))
                continue
            try:
                self.cmd.requeue_hold(p.job)
            except SlurmError as exc:
                report(Action(p.job, "preempt", "failed", f"{why}; {exc}"))
                continue
            stopped.append(p.job)
            report(Action(p.job, "preempt", "ok", f"{why}; requeued held"))

        starts = [s for s in decision.start if not s.colocated_with]
        for s in decision.start:
            if s.colocated_with:
                report(Action(s.job, "start", "skipped", "MPS guest: sharing needs Slurm's mps gres"))

        # 2. wait for the preempted jobs' GPUs, then re-read
        fresh = self._fresh(report)
        if fresh is None:
            return
        jobs, free = fresh
        deadline = time.monotonic() + self.cfg.free_wait_s
        while stopped and any(jobs.get(j) and jobs[j].state in RUNNING_STATES for j in stopped):
            if time.monotonic() > deadline:
                break
            self.sleep(0.1)
            fresh = self._fresh(report)
            if fresh is None:
                return
            jobs, free = fresh
        if starts and stopped:
            deadline = time.monotonic() + self.cfg.free_wait_s
            while not self._fits_all(starts, free) and time.monotonic() < deadline:
                self.sleep(0.1)
                fresh = self._fresh(report)
                if fresh is None:
                    return
                jobs, free = fresh

        # 3. starts: check each on the fresh read, pin its nodes, release
        node_types = {n.id: n.gpu_type for n in snapshot.nodes}
        released: dict[str, tuple[list[str], str]] = {}
        for s in starts:
            nodes: dict[str, int] = {}
            for r in s.allocation:
                nodes[r.node] = nodes.get(r.node, 0) + 1
            where = ",".join(f"{n}:{c}" for n, c in nodes.items())
            why = ("on loan" if s.on_loan else "in quota") + f" on {where}"
            sj = jobs.get(s.job)
            old = snap_jobs.get(s.job)
            if old is None:
                report(Action(s.job, "start", "skipped", f"{why}; not a job of the snapshot"))
                continue
            changed = self._changed(old.gpus, old.tenant, sj)
            if changed:
                report(Action(s.job, "start", "skipped", f"{why}; {changed}"))
                continue
            assert sj is not None
            if sj.per_node is not None and (
                len(nodes) != sj.node_count or set(nodes.values()) != {sj.per_node}
            ):
                shaped = self._reshape(sj, nodes, free, node_types)
                if shaped is None:
                    report(
                        Action(
                            s.job,
                            "start",
                            "skipped",
                            f"{why}; job asks {sj.per_node} GPUs on each of "
                            f"{sj.node_count} nodes and no such nodes of that type are free",
                        )
                    )
                    continue
                nodes = shaped
                why += f" (reshaped to {sj.per_node} per node: {','.join(nodes)})"
            short = [f"{n} has {free.get(n, 0)} free" for n, c in nodes.items() if free.get(n, 0) < c]
            if short:
                report(Action(s.job, "start", "skipped", f"{why}; no capacity: {', '.join(short)}"))
                continue
            try:
                self.cmd.start(s.job, list(nodes))
            except SlurmError as exc:
                report(Action(s.job, "start", "failed", f"{why}; {exc}"))
                self._hold_quietly(s.job)
                continue
            for n, c in nodes.items():
                free[n] = free.get(n, 0) - c
            released[s.job] = (list(nodes), why)

        # 4. confirm: running on exactly those nodes, else hold again
        deadline = time.monotonic() + self.cfg.start_wait_s
        confirmed: dict[str, SlurmJob] = {}
        while released.keys() - confirmed.keys():
            fresh = self._fresh(report, quiet=True)
            if fresh is not None:
                jobs, _ = fresh
                for j in released.keys() - confirmed.keys():
                    sj = jobs.get(j)
                    if sj is not None and sj.state != "PENDING":
                        confirmed[j] = sj
            if released.keys() <= confirmed.keys() or time.monotonic() > deadline:
                break
            self.sleep(0.1)
        for j, (nodes_, why) in released.items():
            sj = confirmed.get(j)
            if sj is None:
                self._hold_quietly(j)
                pend = jobs.get(j)
                report(
                    Action(
                        j,
                        "start",
                        "skipped",
                        f"{why}; still pending after {self.cfg.start_wait_s:.1f} s "
                        f"({pend.reason if pend else 'gone'}); held again",
                    )
                )
            elif sj.state not in RUNNING_STATES:
                report(Action(j, "start", "ok", f"{why}; ran and is {sj.state} already"))
            elif set(sj.nodes) != set(nodes_):
                report(Action(j, "start", "ok", f"{why}; but Slurm placed it on {','.join(sj.nodes)}"))
            else:
                report(Action(j, "start", "ok", f"{why}; running"))

        # 5. pending jobs that were released earlier and are not started now: hold them
        built = self.last_built
        started = set(released)
        for j in built.unheld if built else []:
            if j in started:
                continue
            try:
                self.cmd.hold(j)
                report(
                    Action(j, "hold", "ok", "not started by this decision; held so Slurm does not start it")
                )
            except SlurmError as exc:
                report(Action(j, "hold", "failed", str(exc)))

    # ------------------------------------------------------------------ helpers
    def _fresh(
        self, report: Report, quiet: bool = False
    ) -> tuple[dict[str, SlurmJob], dict[str, int]] | None:
        try:
            obs = self.observe()
        except (SlurmError, ValueError) as exc:
            if not quiet:
                report(Action("*", "read", "failed", f"cannot read the cluster: {exc}; nothing more applied"))
            return None
        free = {n.name: (n.gpus - len(n.used)) if n.available else 0 for n in obs.nodes}
        return {j.id: j for j in obs.jobs}, free

    def _reshape(
        self, sj: SlurmJob, decided: dict[str, int], free: dict[str, int], node_types: dict[str, str]
    ) -> dict[str, int] | None:
        """Nodes for a job that asks ``per_node`` GPUs on each of ``node_count`` nodes, when the
        decision split it otherwise: the same GPU type, the decided nodes first."""
        assert sj.per_node is not None
        typ = node_types[next(iter(decided))]
        order = sorted(
            (n for n, t in node_types.items() if t == typ and free.get(n, 0) >= sj.per_node),
            key=lambda n: (-decided.get(n, 0), -free.get(n, 0), n),
        )
        if len(order) < sj.node_count:
            return None
        return {n: sj.per_node for n in order[: sj.node_count]}

    def _fits_all(self, starts: Iterable[Any], free: dict[str, int]) -> bool:
        need: dict[str, int] = {}
        for s in starts:
            for r in s.allocation:
                need[r.node] = need.get(r.node, 0) + 1
        return all(free.get(n, 0) >= c for n, c in need.items())

    def _changed(self, gpus: int, tenant: str, sj: SlurmJob | None) -> str:
        if sj is None:
            return "job is gone (cancelled or finished)"
        if sj.state != "PENDING":
            return f"job is {sj.state} now"
        if sj.gpus != gpus:
            return f"job was edited: asks {sj.gpus} GPUs, not {gpus}"
        now_tenant = tenant_of(self.cfg, sj)
        if now_tenant != tenant:
            return f"job was edited: tenant is {now_tenant}, not {tenant}"
        return ""

    def _hold_quietly(self, job: str) -> None:
        try:
            self.cmd.hold(job)
        except SlurmError as exc:
            log.warning("could not hold %s again: %s", job, exc)


def make_loop(cfg: SlurmConfig, store: Store, commands: SlurmCommands | None = None) -> Any:
    """A :class:`HostLoop` of a :class:`SlurmHost` with the config's solver settings."""
    from optsched import SolveParams
    from optsched.hosts.loop import HostLoop

    host = SlurmHost(cfg, store, commands)
    return HostLoop(host, store, SolveParams(backend=cfg.backend, time_limit_s=cfg.time_limit_s))

"""The Slurm adapter: optsched as the scheduling policy of a Slurm cluster.

Slurm keeps every job held at submission (a ``job_submit.lua`` gate sets priority 0); each
epoch the adapter

* **reads** the cluster through :class:`optsched.hosts.slurmcli.SlurmClient` (``squeue --json``,
  ``sinfo --json``, parsed there) and builds a format-1 snapshot (:func:`build_snapshot`, a pure
  function of the jobs and nodes read, the config and the store's history): nodes and GPU types
  from the gres strings, running jobs with their node / GPU index allocation from
  ``gres_detail`` (``gpu:a100:4(IDX:0-3)``), ``on_loan`` from the store, pending jobs that are
  held (or released but not started), tenants and quotas from the config;
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

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from optsched.hosts.config import SlurmConfig
from optsched.hosts.loop import Action, History, Report
from optsched.hosts.slurmcli import (
    HOLDING_STATES,
    SlurmClient,
    SlurmError,
    SlurmJob,
    SlurmNode,
    SlurmSwitch,
)

if TYPE_CHECKING:
    from optsched import Decision, Snapshot
    from optsched.hosts.store import Store

log = logging.getLogger("optsched.hosts.slurm")

UNMANAGED = "_unmanaged"
"""Tenant of running GPU jobs that no configured tenant owns (their GPUs are used)."""
SUBMIT_KEY = "first_submit"
"""Store meta key: {job id: first submit time seen}, since a requeue moves Slurm's submit_time."""
PENDING_SKIP_REASONS = ("Dependency", "BeginTime", "DependencyNeverSatisfied")
RUNNING_STATES = HOLDING_STATES
MILLI = 1000
"""Thousandths of a CPU per CPU, and of a GPU per GPU."""
LEAF_LEVEL = "switch0"
"""The snapshot's topology level of Slurm's leaf switches (``Level=0``); ``switchK`` is the
level of Slurm's switches of ``Level=K``."""


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
    """One read of the cluster (:meth:`SlurmClient.jobs`, :meth:`SlurmClient.nodes`, and
    :meth:`SlurmClient.switches` / :meth:`SlurmClient.topology`)."""

    jobs: list[SlurmJob]
    nodes: list[SlurmNode]
    now: float
    switches: dict[int, int] = field(default_factory=dict)
    """{job id: N} of the jobs that asked ``--switches=N``."""
    topology: list[SlurmSwitch] = field(default_factory=list)
    """The switch tree (topology/tree); empty: no topology."""


@dataclass
class BuiltSnapshot:
    snapshot: dict[str, Any]
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """(job id, why it is not in the snapshot)."""
    unheld: list[str] = field(default_factory=list)
    """Pending jobs not held (released, not started): re-held when not started."""
    shapes: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Pending jobs that ask GPUs per node: (GPUs per node, nodes)."""
    sharded: set[str] = field(default_factory=set)
    """Pending jobs of shards (gres/shard): fractional jobs of the snapshot."""


def node_domains(
    switches: list[SlurmSwitch], nodes: Iterable[str]
) -> tuple[list[str], dict[str, dict[str, str]]]:
    """The snapshot's topology levels (``switchK`` for Slurm's switch ``Level=K``, outermost
    first) and each node's domain at every level: the switch of the highest level at most K
    above it, or, for a node under no switch of such a level, the node itself (a domain of its
    own). No switches: no levels."""
    if not switches:
        return [], {}
    top = max(sw.level for sw in switches)
    levels = [f"switch{k}" for k in range(top, -1, -1)]
    out: dict[str, dict[str, str]] = {}
    for n in nodes:
        above = sorted((sw.level, sw.name) for sw in switches if n in sw.nodes)
        dom: dict[str, str] = {}
        for k in range(top + 1):
            inside = [name for lvl, name in above if lvl <= k]
            dom[f"switch{k}"] = inside[-1] if inside else n
        out[n] = dom
    return levels, out


def shards_per_gpu(nodes: Iterable[SlurmNode], types: dict[str, str]) -> dict[str, int]:
    """Per snapshot GPU type, the fewest shards (gres/shard) any of its nodes has on one GPU;
    types whose nodes have no shards are left out."""
    out: dict[str, int] = {}
    for n in nodes:
        if n.gpu_type in types and n.shards_per_gpu > 0:
            t = types[n.gpu_type]
            out[t] = min(out.get(t, n.shards_per_gpu), n.shards_per_gpu)
    return out


def _host_fields(sj: SlurmJob) -> dict[str, Any]:
    """A job's CPUs and host memory per node, as far as Slurm reports them."""
    out: dict[str, Any] = {}
    if sj.cpus_per_node > 0:
        out["cpu_milli"] = sj.cpus_per_node * MILLI
    if sj.memory_per_node_mib:
        out["memory_mib"] = sj.memory_per_node_mib
    return out


def _gang(sj: SlurmJob) -> int:
    """The job's gang in the snapshot: its GPUs, or 1 for a job of shards (a share of one GPU)."""
    return 1 if sj.sharded else sj.gpus


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
    nodes = [n for n in obs.nodes if n.gpu_type in types]
    node_ids = {n.name for n in nodes}
    out = BuiltSnapshot(snapshot={})
    jobs: list[dict[str, Any]] = []
    unmanaged_use: dict[str, int] = {}
    node_type = {n.name: types[n.gpu_type] for n in nodes if n.gpu_type}
    node_shards = {n.name: n.shards_per_gpu for n in nodes}
    type_shards = shards_per_gpu(nodes, types)
    levels, domains = node_domains(obs.topology, [n.name for n in nodes])
    gpu_jobs = [j for j in obs.jobs if j.gpus > 0 or j.sharded]
    # GPUs that running whole-GPU jobs hold: a job of shards reported on one of them (Slurm's
    # view while a job ends, or a stale read) would make the snapshot invalid and lose the epoch
    whole_held = {
        (n, i): str(j.job_id)
        for j in gpu_jobs if j.state in RUNNING_STATES and not j.sharded for n, i in j.allocation
    }
    for sj in sorted(gpu_jobs, key=lambda j: (_submit_s(j), j.job_id)):
        jid = str(sj.job_id)
        tenant = tenant_of(cfg, sj)
        want_type = sj.shard_type if sj.sharded else sj.gpu_type
        if want_type is not None and want_type not in types:
            out.skipped.append((jid, f"gres type '{want_type}' is not in gpu_types"))
            continue
        submit = min(first_submit.get(jid, _submit_s(sj)), _submit_s(sj), now)
        shape: dict[str, Any] = _host_fields(sj)
        if sj.sharded:
            per = min((type_shards.get(t, 0) for t in ([types[want_type]] if want_type else types.values())),
                      default=0)
            if sj.state in RUNNING_STATES:
                per = node_shards.get(sj.shard_alloc[0].node, 0) if sj.shard_alloc else 0
            if per <= 0 or sj.shards_per_node > per:
                out.skipped.append((jid, f"asks {sj.shards_per_node} shards of one GPU; "
                                         f"its GPUs have {per} each"))
                continue
            shape["gpu_milli"] = -(-sj.shards_per_node * MILLI // per)
        elif sj.gpus_per_node > 0:
            shape["gpus_per_node"] = sj.gpus_per_node
        if obs.switches.get(sj.job_id) == 1 and levels and _node_count(sj) > 1:
            shape["topology"] = {"level": LEAF_LEVEL, "mode": "required"}
        if sj.state in RUNNING_STATES:
            if sj.sharded:
                held = [(a.node, i) for a in sj.shard_alloc for i in a.indices]
                alloc = [(n, i) for n, i in held if n in node_ids]
                if len(alloc) != 1:
                    out.skipped.append((jid, f"running shards on {held} are not on one known GPU"))
                    continue
                if alloc[0] in whole_held:
                    n, i = alloc[0]
                    out.skipped.append((jid, f"its shards are reported on GPU {n}/{i}, which whole-GPU job "
                                             f"{whole_held[alloc[0]]} holds (left out of this epoch)"))
                    continue
            else:
                alloc = [(n, i) for n, i in sj.allocation if n in node_ids]
                if len(alloc) != sj.gpus or len(set(alloc)) != len(alloc):
                    out.skipped.append(
                        (jid, f"running allocation {list(sj.allocation)} is not {sj.gpus} known GPUs")
                    )
                    continue
            if tenant is None:
                if cfg.unmanaged == "ignore":
                    out.skipped.append((jid, "no tenant owns it (unmanaged = 'ignore')"))
                    continue
                tenant = UNMANAGED
                t = node_type[alloc[0][0]]
                unmanaged_use[t] = unmanaged_use.get(t, 0) + _gang(sj)
            start = sj.start_time if sj.start_time is not None else now
            start = min(start, now)
            job: dict[str, Any] = {
                "id": jid,
                "tenant": tenant,
                "qos": "guaranteed" if tenant == UNMANAGED else qos_of(cfg, sj, tenant),
                "gpus": _gang(sj),
                "gpu_types": [types[want_type]] if want_type else None,
                "submit_s": min(submit, start),
                "state": "running",
                "allocation": [{"node": n, "gpu": i} for n, i in alloc],
                "start_s": start,
                "on_loan": bool(on_loan.get(jid, False)) and tenant != UNMANAGED,
                "restart_cost_s": max(0.0, now - start),
            }
            if tenant == UNMANAGED:
                job["preemptible"] = False
        elif sj.state == "PENDING":
            if tenant is None:
                out.skipped.append((jid, "no tenant owns its account or partition"))
                continue
            if any(r in sj.reason for r in PENDING_SKIP_REASONS):
                out.skipped.append((jid, f"not startable ({sj.reason})"))
                continue
            if not _held(sj):
                out.unheld.append(jid)
            if _per_node(sj) is not None:
                out.shapes[jid] = (sj.gpus_per_node, _node_count(sj))
            if sj.sharded:
                out.sharded.add(jid)
            job = {
                "id": jid,
                "tenant": tenant,
                "qos": qos_of(cfg, sj, tenant),
                "gpus": _gang(sj),
                "gpu_types": [types[want_type]] if want_type else None,
                "submit_s": submit,
                "state": "pending",
            }
        else:
            continue
        job.update(shape)
        if sj.time_limit_min is not None:
            job["runtime_s"] = sj.time_limit_min * 60.0
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
        "nodes": [_node(n, node_type[n.name], domains.get(n.name)) for n in nodes],
        "tenants": tenants,
        "jobs": jobs,
        "options": {"time_limit_s": cfg.time_limit_s, "backend": cfg.backend},
    }
    if cfg.reserve_min_gpus is not None:
        out.snapshot["options"]["reserve_min_gpus"] = cfg.reserve_min_gpus
    if levels:
        out.snapshot["topology"] = {"levels": levels}
    if state:
        out.snapshot["assurance_state"] = state
    return out


def _node(n: SlurmNode, gpu_type: str, domains: dict[str, str] | None) -> dict[str, Any]:
    """A snapshot node: its GPUs, CPUs and memory as Slurm configures them, and its switches."""
    node: dict[str, Any] = {"id": n.name, "gpu_type": gpu_type, "gpus": n.gpus, "available": n.available}
    if n.cpus > 0:
        node["cpu_milli"] = n.cpus * MILLI
    if n.real_memory_mib > 0:
        node["memory_mib"] = n.real_memory_mib
    if domains is not None:
        node["topology"] = domains
    return node


def shard_room(jobs: Iterable[SlurmJob], nodes: Iterable[SlurmNode]) -> dict[str, int]:
    """Per node, the most shards still free on one of its GPUs (a GPU that holds no whole-GPU
    job), counted from the running jobs' shards (``gres_detail``)."""
    used: dict[tuple[str, int], int] = {}
    for j in jobs:
        if j.state in RUNNING_STATES:
            for a in j.shard_alloc:
                for i in a.indices:
                    used[(a.node, i)] = used.get((a.node, i), 0) + a.count // max(len(a.indices), 1)
    out: dict[str, int] = {}
    for n in nodes:
        if not n.available or n.shards_per_gpu <= 0:
            continue
        whole = set(n.used_gpu_indices)
        out[n.name] = max(
            (n.shards_per_gpu - used.get((n.name, i), 0) for i in range(n.gpus) if i not in whole), default=0
        )
    return out


def _submit_s(job: SlurmJob) -> float:
    return job.submit_time or 0.0


def _held(job: SlurmJob) -> bool:
    """Held: priority 0 (the gate, ``scontrol hold``) or a held reason."""
    return job.priority == 0 or "held" in job.reason.lower()


def _per_node(job: SlurmJob) -> int | None:
    """GPUs per node when the job asked per node (``--gres``), else ``None`` (``--gpus``)."""
    return job.gpus_per_node or None


def _node_count(job: SlurmJob) -> int:
    return max(job.num_nodes, 1)


def _id(job: str) -> int:
    """A decision's job id as Slurm's (the snapshot's ids are Slurm's job ids)."""
    return int(job)


# ---------------------------------------------------------------------------------- the host
class SlurmHost:
    """A :class:`optsched.hosts.loop.Host` over a Slurm cluster."""

    def __init__(
        self,
        cfg: SlurmConfig,
        store: Store,
        client: SlurmClient | None = None,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.cfg = cfg
        self.cluster = cfg.cluster
        self.store = store
        self.slurm = client or SlurmClient()
        self.clock = clock
        self.sleep = sleep
        self.last_built: BuiltSnapshot | None = None
        self.last_obs: Observation | None = None
        self._shard_room: dict[str, int] = {}

    # ------------------------------------------------------------------ read
    def observe(self) -> Observation:
        return Observation(self.slurm.jobs(), self.slurm.nodes(), self.clock(),
                           switches=self.slurm.switches(), topology=self.slurm.topology())

    def snapshot(self, history: History) -> Snapshot:
        from optsched import Snapshot

        obs = self.observe()
        self.last_obs = obs
        first = {str(k): float(v) for k, v in (self.store.get_meta(self.cluster, SUBMIT_KEY) or {}).items()}
        built = build_snapshot(
            self.cfg,
            obs,
            on_loan=history.on_loan,
            assurance_state=history.assurance_state,
            first_submit=first,
        )
        live = {str(j.job_id) for j in obs.jobs}
        new_first = {k: v for k, v in first.items() if k in live}
        for j in built.snapshot["jobs"]:
            new_first.setdefault(j["id"], j["submit_s"])
        if new_first != first:
            self.store.set_meta(self.cluster, SUBMIT_KEY, new_first)
        for job, why in built.skipped:
            log.debug("job %s left out of the snapshot: %s", job, why)
        self.last_built = built
        return Snapshot.model_validate(built.snapshot)

    # ------------------------------------------------------------------ reasons
    def publish_reasons(self, decision: Decision, reasons: dict[str, str]) -> None:
        """Write each job's reason (:func:`optsched.hosts.reasons.summary` of its ``optsched
        explain`` text, prefixed ``optsched: ``) to its AdminComment when it differs from what the
        last read showed. A failing ``scontrol`` is logged, never fatal."""
        from optsched.hosts.reasons import summary

        if not self.cfg.publish_reasons or self.last_obs is None:
            return
        seen = {str(j.job_id): j.admin_comment for j in self.last_obs.jobs}
        for job, text in sorted(reasons.items()):
            want = "optsched: " + summary(text)
            if job not in seen or seen[job] == want:
                continue
            try:
                self.slurm.set_admin_comment(_id(job), want)
            except (SlurmError, ValueError) as exc:
                log.warning("job %s: could not publish its reason: %s", job, exc)

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
            report(Action(p.job, "preempt", "pending", why))  # the intent, stored before acting
            try:
                self.slurm.requeue_hold(_id(p.job))
            except SlurmError as exc:
                report(Action(p.job, "preempt", "failed", f"{why}; {exc}"))
                continue
            stopped.append(p.job)
            report(Action(p.job, "preempt", "ok", f"{why}; requeued held"))

        # Jobs of shards last: Slurm picks the GPU a shard goes on, and a shard on a GPU that a
        # whole-GPU start of this decision counted on would leave that start short.
        sharded = self.last_built.sharded if self.last_built else set()
        starts = sorted((s for s in decision.start if not s.colocated_with), key=lambda s: s.job in sharded)
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
            per_node = _per_node(sj)
            if per_node is not None and (len(nodes) != _node_count(sj) or set(nodes.values()) != {per_node}):
                shaped = self._reshape(sj, nodes, free, node_types)
                if shaped is None:
                    report(
                        Action(
                            s.job,
                            "start",
                            "skipped",
                            f"{why}; job asks {per_node} GPUs on each of "
                            f"{_node_count(sj)} nodes and no such nodes of that type are free",
                        )
                    )
                    continue
                nodes = shaped
                why += f" (reshaped to {per_node} per node: {','.join(nodes)})"
            if sj.sharded:
                room = self._shard_room.get(next(iter(nodes)), 0)
                short = [] if room >= sj.shards_per_node else [
                    f"{n} has {room} shards free on one GPU, it asks {sj.shards_per_node}" for n in nodes
                ]
            else:
                short = [f"{n} has {free.get(n, 0)} free" for n, c in nodes.items() if free.get(n, 0) < c]
            if short:
                report(Action(s.job, "start", "skipped", f"{why}; no capacity: {', '.join(short)}"))
                continue
            report(Action(s.job, "start", "pending", why))  # the intent, stored before acting
            try:
                self.slurm.start(_id(s.job), list(nodes), confirm_s=None)
            except SlurmError as exc:
                report(Action(s.job, "start", "failed", f"{why}; {exc}"))
                self._hold_quietly(s.job)
                continue
            if sj.sharded:
                n0 = next(iter(nodes))
                self._shard_room[n0] = self._shard_room.get(n0, 0) - sj.shards_per_node
            else:
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
                self.slurm.hold(_id(j))
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
        free = {n.name: n.free_gpus for n in obs.nodes}
        self._shard_room = shard_room(obs.jobs, obs.nodes)
        return {str(j.job_id): j for j in obs.jobs if j.gpus > 0 or j.sharded}, free

    def _reshape(
        self, sj: SlurmJob, decided: dict[str, int], free: dict[str, int], node_types: dict[str, str]
    ) -> dict[str, int] | None:
        """Nodes for a job that asks ``per_node`` GPUs on each of ``node_count`` nodes, when the
        decision split it otherwise: the same GPU type, the decided nodes first."""
        per_node = _per_node(sj)
        assert per_node is not None
        typ = node_types[next(iter(decided))]
        order = sorted(
            (n for n, t in node_types.items() if t == typ and free.get(n, 0) >= per_node),
            key=lambda n: (-decided.get(n, 0), -free.get(n, 0), n),
        )
        if len(order) < _node_count(sj):
            return None
        return {n: per_node for n in order[: _node_count(sj)]}

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
        if _gang(sj) != gpus:
            return f"job was edited: asks {_gang(sj)} GPUs, not {gpus}"
        now_tenant = tenant_of(self.cfg, sj)
        if now_tenant != tenant:
            return f"job was edited: tenant is {now_tenant}, not {tenant}"
        return ""

    def _hold_quietly(self, job: str) -> None:
        try:
            self.slurm.hold(_id(job))
        except SlurmError as exc:
            log.warning("could not hold %s again: %s", job, exc)


def make_loop(cfg: SlurmConfig, store: Store, client: SlurmClient | None = None) -> Any:
    """A :class:`HostLoop` of a :class:`SlurmHost` with the config's solver settings."""
    from optsched import SolveParams
    from optsched.hosts.loop import HostLoop

    host = SlurmHost(cfg, store, client)
    return HostLoop(host, store, SolveParams(backend=cfg.backend, time_limit_s=cfg.time_limit_s))

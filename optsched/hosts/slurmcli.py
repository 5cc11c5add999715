"""A typed client over Slurm's command-line tools (``squeue``, ``sinfo``, ``scontrol``,
``scancel``, ``sbatch``), written against Slurm 22.05 (JSON output OpenAPI v0.0.38).

It reads the cluster (:meth:`SlurmClient.jobs`, :meth:`SlurmClient.nodes`) and carries out a
policy's actions on it (:meth:`SlurmClient.start`, :meth:`SlurmClient.hold`,
:meth:`SlurmClient.requeue_hold`, :meth:`SlurmClient.release`, :meth:`SlurmClient.cancel`);
:meth:`SlurmClient.submit` is an ``sbatch`` wrapper for tests and demos. Each command runs as a
subprocess with the caller's ``SLURM_CONF`` and a timeout; a failure raises :class:`SlurmError`
with the command line and Slurm's stderr.

The cluster is expected to run optsched's *gate* (``docs/slurm.md``): a ``job_submit.lua`` that
gives every job priority 0, so Slurm starts nothing by itself and a job starts only when
:meth:`SlurmClient.start` pins its nodes and releases it.

No Python dependency: only the standard library.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

__all__ = [
    "ENDED_STATES",
    "HOLDING_STATES",
    "GresAlloc",
    "GresSpec",
    "JobCompRecord",
    "SlurmClient",
    "SlurmError",
    "SlurmJob",
    "SlurmNode",
    "SlurmStartError",
    "SlurmSwitch",
    "expand_hostlist",
    "parse_gres",
    "parse_gres_request",
    "parse_index_list",
    "parse_jobs",
    "parse_nodes",
    "parse_switches",
    "parse_topology",
    "read_jobcomp",
]


class SlurmError(RuntimeError):
    """A Slurm command failed (non-zero exit, timeout, unreadable output)."""

    def __init__(self, command: Sequence[str], message: str, *, returncode: int | None = None,
                 stderr: str = "") -> None:
        self.command = list(command)
        self.returncode = returncode
        self.stderr = stderr.strip()
        detail = f": {self.stderr}" if self.stderr else ""
        super().__init__(f"{' '.join(self.command)}: {message}{detail}")


class SlurmStartError(SlurmError):
    """A released job did not reach RUNNING in time; it was held again (the nodes were busy)."""


# --------------------------------------------------------------------------- parsing helpers


def expand_hostlist(hostlist: str) -> list[str]:
    """Expand a Slurm host list (``n[1-3,7],gpu[01-02]x``) into names, in Slurm's order."""
    hostlist = hostlist.strip()
    if not hostlist or hostlist == "(null)":
        return []
    out: list[str] = []
    for item in _split_outside_brackets(hostlist, ","):
        out.extend(_expand_one(item.strip()))
    return out


def _split_outside_brackets(text: str, sep: str, *, open_: str = "[", close: str = "]") -> list[str]:
    parts: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in text:
        if ch == open_:
            depth += 1
        elif ch == close:
            depth -= 1
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p for p in parts if p]


def _expand_one(item: str) -> list[str]:
    m = re.search(r"\[([^\]]*)\]", item)
    if not m:
        return [item] if item else []
    head, tail = item[: m.start()], item[m.end() :]
    tails = _expand_one(tail) if tail else [""]
    out: list[str] = []
    for rng in m.group(1).split(","):
        if "-" in rng:
            lo, hi = rng.split("-", 1)
            width = len(lo)
            for k in range(int(lo), int(hi) + 1):
                out.extend(f"{head}{k:0{width}d}{t}" for t in tails)
        else:
            out.extend(f"{head}{rng}{t}" for t in tails)
    return out


def parse_index_list(text: str) -> tuple[int, ...]:
    """``0-3,6-7`` -> (0, 1, 2, 3, 6, 7); ``N/A`` or empty -> ()."""
    text = text.strip()
    if not text or text.upper() == "N/A":
        return ()
    out: list[int] = []
    for part in text.split(","):
        if "-" in part:
            lo, hi = part.split("-", 1)
            out.extend(range(int(lo), int(hi) + 1))
        elif part:
            out.append(int(part))
    return tuple(out)


@dataclass(frozen=True)
class GresSpec:
    """One generic resource: ``gpu:a100:4(IDX:0-3)`` -> name gpu, type a100, count 4, (0..3)."""

    name: str
    type: str | None
    count: int
    indices: tuple[int, ...] = ()


_GRES_RE = re.compile(r"^(?P<body>[^()]+?)(?:\((?P<extra>[^)]*)\))?$")


def parse_gres(text: str) -> list[GresSpec]:
    """Parse a node's ``gres``/``gres_used`` or a job's ``gres_detail`` entry as 22.05 writes it:
    ``gpu:a100:8``, ``gpu:a100:6(IDX:0-3,6-7)``, ``gpu:8(S:0-1)``, ``gpu:a100:0(IDX:N/A)``, several
    separated by commas; ``(null)``/``N/A``/empty give []."""
    text = text.strip()
    if not text or text in ("(null)", "N/A"):
        return []
    out: list[GresSpec] = []
    for item in _split_outside_brackets(text, ",", open_="(", close=")"):
        m = _GRES_RE.match(item.strip())
        if not m:
            continue
        fields = m.group("body").split(":")
        indices: tuple[int, ...] = ()
        for extra in _split_outside_brackets(m.group("extra") or "", " "):
            if extra.startswith("IDX:"):
                indices = parse_index_list(extra[4:])
        name = fields[0]
        if name.startswith("gres/"):
            name = name[5:]
        if len(fields) == 1:
            gtype, count = None, 1
        elif len(fields) == 2:
            gtype, count = (None, int(fields[1])) if fields[1].isdigit() else (fields[1], 1)
        else:
            gtype, count = fields[1], int(fields[2]) if fields[2].isdigit() else 0
        out.append(GresSpec(name=name, type=gtype or None, count=count, indices=indices))
    return out


def parse_gres_request(text: str) -> list[GresSpec]:
    """A job's request as in ``tres_per_node``/``tres_per_job``: ``gres:gpu:a100:4``,
    ``gres:gpu:2``, ``gres/gpu=2`` or several separated by commas."""
    out: list[GresSpec] = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        if item.startswith("gres:"):
            item = item[5:]
        elif item.startswith("gres/"):
            item = item[5:].replace("=", ":")
        out.extend(parse_gres(item))
    return out


def _num(value: Any) -> int | None:
    """An integer field: 22.05 gives a plain number or null; later versions give
    ``{"set": bool, "infinite": bool, "number": n}``."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite", False):
            return None
        value = value.get("number")
        if value is None:
            return None
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def _time(value: Any) -> float | None:
    n = _num(value)
    return float(n) if n else None


def _state(value: Any) -> str:
    if isinstance(value, list):
        return str(value[0]) if value else ""
    return str(value or "")


def _str(value: Any) -> str:
    return "" if value is None else str(value)


# --------------------------------------------------------------------------- jobs


@dataclass(frozen=True)
class GresAlloc:
    """GPUs one running job holds on one node."""

    node: str
    type: str | None
    count: int
    indices: tuple[int, ...]


@dataclass(frozen=True)
class SlurmJob:
    """One job as ``squeue --json`` shows it. Times are UNIX seconds (None when unset)."""

    job_id: int
    name: str
    account: str
    partition: str
    user: str
    state: str
    """PENDING, RUNNING, COMPLETED, CANCELLED, FAILED, ... (Slurm's job_state)."""
    reason: str
    """Slurm's state_reason: ``JobHeldUser`` (the gate), ``JobHeldAdmin``, ``Resources``, ..."""
    priority: int
    """0 while held (the gate gives every new job 0)."""
    num_nodes: int
    nodes: tuple[str, ...]
    """Allocated nodes (running or ended jobs), expanded, in Slurm's order."""
    required_nodes: tuple[str, ...]
    gpus_per_node: int
    """GPUs requested per node (``--gres=gpu[:TYPE]:K``), 0 when none."""
    gpus_per_job: int
    """GPUs requested for the whole job (``--gpus=[TYPE:]K``), 0 when none."""
    gpu_type: str | None
    """The requested GPU type, None when any type will do."""
    gpu_alloc: tuple[GresAlloc, ...]
    """Per node, the GPUs (with indices) a running job holds."""
    submit_time: float | None
    start_time: float | None
    end_time: float | None
    time_limit_min: int | None
    """Time limit in minutes, None when unlimited."""
    restart_count: int
    comment: str
    admin_comment: str
    system_comment: str
    exit_code: int | None
    qos: str = ""
    """Slurm's QOS name."""
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False, hash=False)
    cpus_per_node: int = 0
    """CPUs the job needs on each of its nodes (``minimum_cpus_per_node``, at least its CPUs
    over its nodes); 0 when Slurm reports none."""
    memory_per_node_mib: int | None = None
    """Host memory per node the job asked for explicitly (``--mem``, or ``--mem-per-cpu`` x its
    CPUs per node); None when it asked none (Slurm's default then gives it the whole node,
    which the dev cluster does not count: memory is not a consumable there)."""
    shards_per_node: int = 0
    """Shards of one GPU asked per node (``--gres=shard[:TYPE]:N``, Slurm's gres/shard), 0 when none."""
    shard_type: str | None = None
    """The GPU type of a typed shard request, None when any type will do."""
    shard_alloc: tuple[GresAlloc, ...] = ()
    """Per node, the shards a running job holds (``count`` shards, ``indices`` the GPUs)."""

    @property
    def gpus(self) -> int:
        """GPUs the job asks for in all (0 for a job of shards)."""
        return self.gpus_per_job or self.gpus_per_node * max(self.num_nodes, 1)

    @property
    def sharded(self) -> bool:
        """The job asks shards of a GPU, no whole GPU."""
        return self.shards_per_node > 0 and self.gpus == 0

    @property
    def held(self) -> bool:
        return self.state == "PENDING" and self.priority == 0

    @property
    def running(self) -> bool:
        return self.state == "RUNNING"

    @property
    def pending(self) -> bool:
        return self.state == "PENDING"

    @property
    def ended(self) -> bool:
        """The job is over (completed, cancelled, failed, ...); the controller still shows it
        for ``MinJobAge``."""
        return self.state in ENDED_STATES

    @property
    def gpu_indices(self) -> dict[str, tuple[int, ...]]:
        """Node -> GPU indices held there (running jobs)."""
        return {a.node: a.indices for a in self.gpu_alloc}

    @property
    def allocation(self) -> tuple[tuple[str, int], ...]:
        """(node, GPU index) of every GPU the job holds, node by node in Slurm's order."""
        return tuple((a.node, i) for a in self.gpu_alloc for i in a.indices)


HOLDING_STATES = frozenset({"RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING"})
"""Job states in which a job holds its nodes' GPUs (``gpu_alloc`` is read for these)."""
ENDED_STATES = frozenset({"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                          "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY"})


_FINISHED_HAS_NO_ALLOC = ("PENDING",)


def parse_job(raw: Mapping[str, Any]) -> SlurmJob:
    """One entry of ``squeue --json``'s ``jobs``."""
    state = _state(raw.get("job_state"))
    num_nodes = _num(raw.get("node_count")) or 0
    nodes = tuple(expand_hostlist(_str(raw.get("nodes")))) if state not in _FINISHED_HAS_NO_ALLOC else ()
    per_node = [g for g in parse_gres_request(_str(raw.get("tres_per_node"))) if g.name == "gpu"]
    per_job = [g for g in parse_gres_request(_str(raw.get("tres_per_job"))) if g.name == "gpu"]
    gpu_type = next((g.type for g in per_node + per_job if g.type), None)
    alloc_nodes = [
        _str(n.get("nodename"))
        for n in (raw.get("job_resources") or {}).get("allocated_nodes") or []
        if isinstance(n, Mapping)
    ] or list(nodes)
    shards = [g for g in parse_gres_request(_str(raw.get("tres_per_node"))) if g.name == "shard"]
    gpu_alloc: list[GresAlloc] = []
    shard_alloc: list[GresAlloc] = []
    if state in HOLDING_STATES:
        for node, detail in zip(alloc_nodes, raw.get("gres_detail") or [], strict=False):
            for g in parse_gres(_str(detail)):
                if g.name == "gpu" and g.count:
                    gpu_alloc.append(GresAlloc(node=node, type=g.type, count=g.count, indices=g.indices))
                elif g.name == "shard" and g.count:
                    shard_alloc.append(GresAlloc(node=node, type=g.type, count=g.count, indices=g.indices))
    cpus = _num(raw.get("cpus")) or 0
    cpus_per_node = max(_num(raw.get("minimum_cpus_per_node")) or 0,
                        -(-cpus // max(num_nodes, 1)) if cpus else 0)
    mem_node = _num(raw.get("memory_per_node"))
    mem_cpu = _num(raw.get("memory_per_cpu"))
    memory = mem_node if mem_node else (mem_cpu * max(cpus_per_node, 1) if mem_cpu else None)
    return SlurmJob(
        job_id=_num(raw.get("job_id")) or 0,
        name=_str(raw.get("name")),
        account=_str(raw.get("account")),
        partition=_str(raw.get("partition")),
        user=_str(raw.get("user_name")) or _str(raw.get("user_id")),
        state=state,
        reason=_str(raw.get("state_reason")),
        priority=_num(raw.get("priority")) or 0,
        num_nodes=num_nodes,
        nodes=nodes,
        required_nodes=tuple(expand_hostlist(_str(raw.get("required_nodes")))),
        gpus_per_node=sum(g.count for g in per_node),
        gpus_per_job=sum(g.count for g in per_job),
        gpu_type=gpu_type,
        gpu_alloc=tuple(gpu_alloc),
        submit_time=_time(raw.get("submit_time")),
        start_time=_time(raw.get("start_time")) if state != "PENDING" else None,
        end_time=_time(raw.get("end_time")) if state not in ("PENDING", "RUNNING", "SUSPENDED") else None,
        time_limit_min=_num(raw.get("time_limit")),
        restart_count=_num(raw.get("restart_cnt")) or 0,
        comment=_str(raw.get("comment")),
        admin_comment=_str(raw.get("admin_comment")),
        system_comment=_str(raw.get("system_comment")),
        exit_code=_num(raw.get("exit_code")),
        qos=_str(raw.get("qos")),
        raw=raw,
        cpus_per_node=cpus_per_node,
        memory_per_node_mib=memory,
        shards_per_node=sum(g.count for g in shards),
        shard_type=next((g.type for g in shards if g.type), None),
        shard_alloc=tuple(shard_alloc),
    )


def parse_jobs(document: Mapping[str, Any] | str) -> list[SlurmJob]:
    """``squeue --json`` output (text or parsed) -> jobs, in Slurm's order."""
    doc = json.loads(document) if isinstance(document, str) else document
    return [parse_job(j) for j in doc.get("jobs") or []]


# --------------------------------------------------------------------------- nodes


@dataclass(frozen=True)
class SlurmNode:
    """One node as ``sinfo --json`` shows it."""

    name: str
    state: str
    """idle, mixed, allocated, down, drained, ... (lower case, as sinfo gives it)."""
    state_flags: tuple[str, ...]
    """DRAIN, NOT_RESPONDING, ... ."""
    partitions: tuple[str, ...]
    cpus: int
    alloc_cpus: int
    gres: tuple[GresSpec, ...]
    gres_used: tuple[GresSpec, ...]
    reason: str
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False, hash=False)
    real_memory_mib: int = 0
    """The node's memory (``RealMemory``), MiB; 0 when Slurm reports none."""

    @property
    def gpus(self) -> int:
        return sum(g.count for g in self.gres if g.name == "gpu")

    @property
    def shards(self) -> int:
        """Shards of its GPUs (gres/shard) in all."""
        return sum(g.count for g in self.gres if g.name == "shard")

    @property
    def shards_per_gpu(self) -> int:
        """Shards of each of its GPUs (Slurm spreads a node's shards evenly over its GPUs)."""
        return self.shards // self.gpus if self.gpus else 0

    @property
    def gpu_types(self) -> dict[str | None, int]:
        """GPU type -> count on this node."""
        out: dict[str | None, int] = {}
        for g in self.gres:
            if g.name == "gpu":
                out[g.type] = out.get(g.type, 0) + g.count
        return out

    @property
    def gpu_type(self) -> str | None:
        """The node's one GPU type (None when it has none, an untyped one, or several)."""
        types = self.gpu_types
        return next(iter(types)) if len(types) == 1 else None

    @property
    def gpus_used(self) -> int:
        return sum(g.count for g in self.gres_used if g.name == "gpu")

    @property
    def used_gpu_indices(self) -> tuple[int, ...]:
        return tuple(sorted(i for g in self.gres_used if g.name == "gpu" for i in g.indices))

    @property
    def sharded_gpu_indices(self) -> tuple[int, ...]:
        """GPUs holding shards of running jobs (Slurm gives such a GPU to no whole-GPU job)."""
        return tuple(sorted({i for g in self.gres_used if g.name == "shard" and g.count for i in g.indices}))

    @property
    def free_gpus(self) -> int:
        """Whole GPUs free: neither allocated nor holding shards."""
        busy = max(self.gpus_used, 0) + len(set(self.sharded_gpu_indices) - set(self.used_gpu_indices))
        return max(self.gpus - busy, 0) if self.available else 0

    @property
    def available(self) -> bool:
        """The node can take new work (not down, drained, failing, powered off, reserved ...)."""
        bad_states = ("down", "drain", "drained", "draining", "fail", "failing", "future", "unknown",
                      "power_down", "powered_down", "maint", "reserved", "reboot", "not_responding")
        bad_flags = ("DRAIN", "DRAINED", "DRAINING", "NOT_RESPONDING", "FAIL", "MAINTENANCE",
                     "POWERED_DOWN", "POWER_DOWN", "RESERVED", "REBOOT", "REBOOT_REQUESTED",
                     "REBOOT_ISSUED")
        state = self.state.lower().rstrip("*~#!%$@^-")
        return state not in bad_states and not any(f.upper() in bad_flags for f in self.state_flags)


def parse_node(raw: Mapping[str, Any]) -> SlurmNode:
    flags = raw.get("state_flags") or []
    state = raw.get("state")
    if isinstance(state, list):  # later versions: ["IDLE", "DRAIN"]
        flags = [*state[1:], *flags]
        state = state[0] if state else ""
    return SlurmNode(
        name=_str(raw.get("name")),
        state=_str(state).lower(),
        state_flags=tuple(str(f) for f in flags),
        partitions=tuple(str(p) for p in raw.get("partitions") or []),
        cpus=_num(raw.get("cpus")) or 0,
        alloc_cpus=_num(raw.get("alloc_cpus")) or 0,
        gres=tuple(parse_gres(_str(raw.get("gres")))),
        gres_used=tuple(parse_gres(_str(raw.get("gres_used")))),
        reason=_str(raw.get("reason")),
        raw=raw,
        real_memory_mib=_num(raw.get("real_memory")) or 0,
    )


def parse_nodes(document: Mapping[str, Any] | str) -> list[SlurmNode]:
    """``sinfo --json`` output -> one node each (sinfo may list a node once per partition)."""
    doc = json.loads(document) if isinstance(document, str) else document
    seen: dict[str, SlurmNode] = {}
    for raw in doc.get("nodes") or []:
        node = parse_node(raw)
        seen.setdefault(node.name, node)
    return list(seen.values())


# --------------------------------------------------------------------------- topology


@dataclass(frozen=True)
class SlurmSwitch:
    """One switch of ``scontrol show topology`` (topology/tree): its level (0: a leaf switch,
    which holds nodes) and every node below it."""

    name: str
    level: int
    nodes: tuple[str, ...]
    switches: tuple[str, ...] = ()


def parse_topology(text: str) -> list[SlurmSwitch]:
    """``scontrol show topology`` -> switches (none without ``TopologyPlugin=topology/tree``):
    ``SwitchName=s1 Level=0 LinkSpeed=1 Nodes=n[1-2]``,
    ``SwitchName=top Level=1 LinkSpeed=1 Nodes=n[1-4] Switches=s[1-2]``."""
    out: list[SlurmSwitch] = []
    for line in text.splitlines():
        kv = dict(w.split("=", 1) for w in line.split() if "=" in w)
        if "SwitchName" not in kv:
            continue
        level = _num(kv.get("Level"))
        out.append(SlurmSwitch(
            name=kv["SwitchName"],
            level=level if level is not None else 0,
            nodes=tuple(expand_hostlist(kv.get("Nodes", ""))),
            switches=tuple(expand_hostlist(kv.get("Switches", ""))),
        ))
    return out


def parse_switches(text: str) -> dict[int, int]:
    """``squeue -h -O JobID:|,ReqSwitch:|`` -> {job id: the most leaf switches it asked for
    (``--switches=N``)}, jobs that asked none left out."""
    out: dict[int, int] = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit() and int(parts[1]) > 0:
            out[int(parts[0])] = int(parts[1])
    return out


# --------------------------------------------------------------------------- jobcomp/filetxt


@dataclass(frozen=True)
class JobCompRecord:
    """One line of ``JobCompType=jobcomp/filetxt``: written when a job ends or is requeued
    (``scontrol requeuehold`` writes one with state PENDING)."""

    job_id: int
    name: str
    state: str
    partition: str
    account: str
    nodes: tuple[str, ...]
    submit_time: float | None
    start_time: float | None
    end_time: float | None
    fields: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False, hash=False)


_KV_RE = re.compile(r"(\w+)=(.*?)(?=\s+\w+=|\s*$)")


def _local_time(text: str) -> float | None:
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def parse_jobcomp_line(line: str) -> JobCompRecord | None:
    kv = {m.group(1): m.group(2) for m in _KV_RE.finditer(line.strip())}
    if "JobId" not in kv:
        return None
    return JobCompRecord(
        job_id=int(kv["JobId"]),
        name=kv.get("Name", ""),
        state=kv.get("JobState", ""),
        partition=kv.get("Partition", ""),
        account=kv.get("Account", ""),
        nodes=tuple(expand_hostlist(kv.get("NodeList", ""))),
        submit_time=_local_time(kv.get("SubmitTime", "")),
        start_time=_local_time(kv.get("StartTime", "")),
        end_time=_local_time(kv.get("EndTime", "")),
        fields=kv,
    )


def read_jobcomp(path: str | os.PathLike[str], *, offset: int = 0) -> tuple[list[JobCompRecord], int]:
    """Records of a jobcomp/filetxt file from byte ``offset`` on, and the offset to read from
    next time (a partly written last line is left for then). A missing file gives ([], offset)."""
    p = Path(path)
    try:
        with p.open("rb") as fh:
            fh.seek(offset)
            data = fh.read()
    except FileNotFoundError:
        return [], offset
    end = data.rfind(b"\n") + 1
    records = [
        r for line in data[:end].decode("utf-8", "replace").splitlines()
        if (r := parse_jobcomp_line(line)) is not None
    ]
    return records, offset + end


# --------------------------------------------------------------------------- the client


class SlurmClient:
    """Slurm's command-line tools with one ``SLURM_CONF`` (None: the caller's environment) and
    one timeout per command."""

    def __init__(self, slurm_conf: str | os.PathLike[str] | None = None, *, timeout_s: float = 30.0,
                 env: Mapping[str, str] | None = None) -> None:
        self.slurm_conf = str(slurm_conf) if slurm_conf is not None else None
        self.timeout_s = timeout_s
        self._env = dict(os.environ if env is None else env)
        if self.slurm_conf is not None:
            self._env["SLURM_CONF"] = self.slurm_conf

    # -- running commands

    def run(self, *args: str, timeout_s: float | None = None) -> str:
        """Run one Slurm command; its stdout, or SlurmError."""
        cmd = [str(a) for a in args]
        try:
            proc = subprocess.run(cmd, env=self._env, capture_output=True, text=True,
                                  timeout=timeout_s or self.timeout_s, check=False)
        except FileNotFoundError as exc:
            raise SlurmError(cmd, f"{cmd[0]} not found (is Slurm's client installed?)") from exc
        except subprocess.TimeoutExpired as exc:
            err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
            raise SlurmError(cmd, f"timed out after {timeout_s or self.timeout_s:g} s",
                             stderr=err) from exc
        if proc.returncode != 0:
            raise SlurmError(cmd, f"exit status {proc.returncode}", returncode=proc.returncode,
                             stderr=proc.stderr)
        return proc.stdout

    def _json(self, *args: str) -> dict[str, Any]:
        out = self.run(*args)
        try:
            doc = json.loads(out)
        except json.JSONDecodeError as exc:
            raise SlurmError(list(args), f"output is not JSON ({exc})", stderr=out[:500]) from exc
        if not isinstance(doc, dict):
            raise SlurmError(list(args), "output is not a JSON object")
        errors = doc.get("errors") or []
        if errors:
            raise SlurmError(list(args), "Slurm reported errors", stderr=json.dumps(errors))
        return doc

    # -- reading

    def jobs(self) -> list[SlurmJob]:
        """Every job the controller still knows (pending, running, and ended ones for
        ``MinJobAge``). ``squeue --json`` ignores -t/-j in 22.05: filter the result."""
        return parse_jobs(self._json("squeue", "--all", "--json"))

    def job(self, job_id: int) -> SlurmJob | None:
        return next((j for j in self.jobs() if j.job_id == job_id), None)

    def job_state(self, job_id: int) -> tuple[str, str]:
        """(state, reason) of one job, cheaply (plain squeue honours -j); ("", "") when the
        controller does not know the job (any more)."""
        try:
            out = self.run("squeue", "-h", "-j", str(job_id), "-t", "all", "-o", "%T|%r").strip()
        except SlurmError as exc:
            if "Invalid job id" in exc.stderr:
                return "", ""
            raise
        if not out:
            return "", ""
        state, _, reason = out.splitlines()[0].partition("|")
        return state, reason

    def nodes(self) -> list[SlurmNode]:
        return parse_nodes(self._json("sinfo", "--json"))

    def topology(self) -> list[SlurmSwitch]:
        """The switch tree (``scontrol show topology``); [] without topology/tree."""
        try:
            return parse_topology(self.run("scontrol", "show", "topology"))
        except SlurmError as exc:
            if "No topology" in exc.stderr:
                return []
            raise

    def switches(self) -> dict[int, int]:
        """{job id: N} of every job that asked ``--switches=N`` (``squeue --json`` 22.05 lacks
        the field; ``squeue -O ReqSwitch`` has it)."""
        return parse_switches(self.run("squeue", "--all", "-h", "-O", "JobID:|,ReqSwitch:|"))

    def ping(self) -> bool:
        try:
            self.run("scontrol", "ping")
        except SlurmError:
            return False
        return True

    # -- acting

    def start(self, job_id: int, nodes: Sequence[str], *, confirm_s: float | None = 5.0,
              poll_s: float = 0.1) -> None:
        """Start a held job on exactly ``nodes``: pin them (ReqNodeList, NumNodes, StartTime=now)
        and release it. With ``confirm_s`` wait that long for RUNNING; a job still pending then
        (its nodes were busy) is held again, so Slurm never starts it later by itself, and
        SlurmStartError says why."""
        if not nodes:
            raise ValueError("start needs at least one node")
        jid = str(job_id)
        self.run("scontrol", "update", f"JobId={jid}", f"NumNodes={len(nodes)}",
                 f"ReqNodeList={','.join(nodes)}", "StartTime=now")
        self.run("scontrol", "release", jid)
        if confirm_s is None:
            return
        deadline = time.monotonic() + confirm_s
        state, reason = self.job_state(job_id)
        while state == "PENDING" and time.monotonic() < deadline:
            time.sleep(poll_s)
            state, reason = self.job_state(job_id)
        if state == "PENDING":
            self.hold(job_id)
            state2, _ = self.job_state(job_id)
            if state2 == "PENDING":
                raise SlurmStartError(
                    ["scontrol", "release", jid],
                    f"job {jid} still pending after {confirm_s:g} s on {','.join(nodes)} "
                    f"(reason {reason or 'unknown'}); held again")
            state = state2
        if state not in ("RUNNING", "CONFIGURING", "COMPLETING", "COMPLETED"):
            raise SlurmStartError(["scontrol", "release", jid],
                                  f"job {jid} is {state or 'gone'}, not running")

    def hold(self, job_id: int) -> None:
        """Priority 0 again (pending jobs only): Slurm will not start it by itself."""
        self.run("scontrol", "hold", str(job_id))

    def release(self, job_id: int) -> None:
        self.run("scontrol", "release", str(job_id))

    def set_admin_comment(self, job_id: int, text: str) -> None:
        """Set the job's AdminComment (``scontrol show job`` shows it; needs the
        rights of SlurmUser or an operator)."""
        self.run("scontrol", "update", f"JobId={job_id}", f"AdminComment={text}")

    def requeue_hold(self, job_id: int) -> None:
        """Preempt: stop a running job, free its GPUs (about 0.2 s) and put it back held."""
        self.run("scontrol", "requeuehold", str(job_id))

    def cancel(self, job_id: int) -> None:
        self.run("scancel", str(job_id))

    def submit(self, *, command: str | None = None, seconds: float | None = None, name: str | None = None,
               account: str | None = None, partition: str | None = None, gpus: int = 0,
               gpu_type: str | None = None, nodes: int | None = None, comment: str | None = None,
               hold: bool = False, output: str = "/dev/null", extra: Iterable[str] = ()) -> int:
        """``sbatch --wrap`` (``command``, or ``sleep SECONDS``); GPUs per node as
        ``--gres=gpu[:TYPE]:K``. Returns the job id."""
        if command is None:
            if seconds is None:
                raise ValueError("submit needs command or seconds")
            command = f"sleep {seconds:g}"
        args = ["sbatch", "--parsable", f"--output={output}", f"--wrap={command}"]
        if name:
            args.append(f"--job-name={name}")
        if account:
            args.append(f"--account={account}")
        if partition:
            args.append(f"--partition={partition}")
        if gpus:
            args.append(f"--gres=gpu:{gpu_type}:{gpus}" if gpu_type else f"--gres=gpu:{gpus}")
        if nodes:
            args.append(f"--nodes={nodes}")
        if comment is not None:
            args.append(f"--comment={comment}")
        if hold:
            args.append("--hold")
        args.extend(extra)
        out = self.run(*args).strip()
        try:
            return int(out.split(";", 1)[0])
        except ValueError as exc:
            raise SlurmError(args, f"unexpected sbatch output {out!r}") from exc

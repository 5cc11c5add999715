"""The service's API models: the pydantic request and answer bodies of ``optsched serve``.

The routes are in :mod:`optsched.hosts.service`; the snapshot and the decision are the
engine's own models (:mod:`optsched.schema`). The Kubernetes ones speak
``k8s.io/kube-scheduler/extender/v1`` exactly (Go field names as keys; see ``docs/service.md``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

JOB_ANNOTATION = "optsched.io/job"
"""Pod annotation naming the optsched job a pod belongs to (else the pod's name is the job)."""
MAX_EXTENDER_PRIORITY = 10
"""``extenderv1.MaxExtenderPriority``: the score of the node the plan chose."""


class ErrorBody(BaseModel):
    """Every error answer: one line naming the field when the input is at fault."""

    error: str = Field(description="What went wrong, e.g. `jobs[3].tenant: unknown tenant 'x'`.")


class Health(BaseModel):
    status: Literal["ok"] = "ok"
    version: str
    workers: int


class JobEntry(BaseModel):
    """A job's entry in the latest decision that names it."""

    cluster: str
    job: str
    epoch: int = Field(description="The epoch's sequence number in the store.")
    now: float = Field(description="The epoch's snapshot time.")
    status: str = Field(description="The decision's status (optimal, feasible, fallback).")
    action: Literal["start", "preempt", "queue"]
    reason: str = Field(
        description="start: `in quota`, `on loan` or `MPS guest of …`; preempt: its reason; "
        "queue: its queue reason."
    )
    allocation: list[dict[str, Any]] | None = Field(default=None, description="start: the GPUs.")
    on_loan: bool | None = None
    colocated_with: list[str] | None = None
    lost_s: float | None = Field(default=None, description="preempt: seconds of work the stop costs.")
    queue_position: int | None = Field(default=None, description="queue: 0 = most important.")
    notes: list[str] = Field(default_factory=list, description="The decision's `solver.notes`.")
    explanation: list[str] = Field(
        default_factory=list,
        description="What `optsched explain` prints for the job on that epoch's snapshot and decision "
        "(empty when none was stored).",
    )


class _K8s(BaseModel):
    """Kubernetes objects: only the fields optsched reads are declared, the rest is kept."""

    model_config = ConfigDict(extra="allow")


class ObjectMeta(_K8s):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    annotations: dict[str, str] | None = None


class K8sPod(_K8s):
    """``core/v1.Pod`` (``metadata.name``, ``metadata.uid`` and ``metadata.annotations`` are read)."""

    metadata: ObjectMeta = Field(default_factory=ObjectMeta)


class K8sNode(_K8s):
    """``core/v1.Node`` (``metadata.name`` is the snapshot's node id)."""

    metadata: ObjectMeta = Field(default_factory=ObjectMeta)


class NodeList(_K8s):
    """``core/v1.NodeList``."""

    items: list[K8sNode] = Field(default_factory=list)


class ExtenderArgs(BaseModel):
    """``extenderv1.ExtenderArgs``: the pod and its candidate nodes (``Nodes`` when the
    extender is not node-cache capable, else ``NodeNames``)."""

    Pod: K8sPod
    Nodes: NodeList | None = None
    NodeNames: list[str] | None = None


class ExtenderFilterResult(BaseModel):
    """``extenderv1.ExtenderFilterResult``."""

    Nodes: NodeList | None = None
    NodeNames: list[str] | None = None
    FailedNodes: dict[str, str] = Field(default_factory=dict)
    FailedAndUnresolvableNodes: dict[str, str] = Field(default_factory=dict)
    Error: str = ""


class HostPriority(BaseModel):
    """``extenderv1.HostPriority`` (a ``HostPriorityList`` is a JSON array of these)."""

    Host: str
    Score: int


class MetaPod(BaseModel):
    UID: str


class MetaVictims(BaseModel):
    Pods: list[MetaPod] = Field(default_factory=list)
    NumPDBViolations: int = 0


class Victims(BaseModel):
    Pods: list[K8sPod] = Field(default_factory=list)
    NumPDBViolations: int = 0


class ExtenderPreemptionArgs(BaseModel):
    """``extenderv1.ExtenderPreemptionArgs``."""

    Pod: K8sPod
    NodeNameToVictims: dict[str, Victims] | None = None
    NodeNameToMetaVictims: dict[str, MetaVictims] | None = None


class ExtenderPreemptionResult(BaseModel):
    """``extenderv1.ExtenderPreemptionResult``."""

    NodeNameToMetaVictims: dict[str, MetaVictims] = Field(default_factory=dict)


def pod_job(pod: K8sPod) -> str:
    """The job a pod belongs to: its ``optsched.io/job`` annotation, else its name."""
    ann = pod.metadata.annotations or {}
    return ann.get(JOB_ANNOTATION) or pod.metadata.name


__all__ = [
    "JOB_ANNOTATION",
    "MAX_EXTENDER_PRIORITY",
    "ErrorBody",
    "ExtenderArgs",
    "ExtenderFilterResult",
    "ExtenderPreemptionArgs",
    "ExtenderPreemptionResult",
    "Health",
    "HostPriority",
    "JobEntry",
    "K8sNode",
    "K8sPod",
    "MetaPod",
    "MetaVictims",
    "NodeList",
    "ObjectMeta",
    "Victims",
    "pod_job",
]

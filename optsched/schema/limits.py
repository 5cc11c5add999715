"""Size limits of a snapshot: the most of everything optsched reads.

Every count, length and magnitude a snapshot states has a maximum here, far above any real
cluster, so that a hostile or mistaken number (one node of 10^12 GPUs) is refused while the
snapshot is parsed, before any work, instead of allocating memory or looping in proportion to
it. The pydantic models of :mod:`optsched.schema.snapshot` enforce them (as ``le`` /
``max_length`` bounds that also appear in the JSON Schema), and ``docs/snapshot-format.md``
("Size limits") lists them. A value above a limit is an error naming the field, e.g.
``nodes[0].gpus: at most 128 GPUs per node (got 1000000000000)``: exit 2 in the CLI, 422 in
the service.

With these bounds, what the engine allocates per snapshot is linear in the snapshot's size:
each GPU index it enumerates belongs to a node entry of bounded size, each elastic size
option to a job entry with a bounded number of them.
"""

from __future__ import annotations

MAX_GPUS_PER_NODE = 128
"""GPUs on one node (``nodes[].gpus``). Real nodes have 4-16; a 72-GPU NVLink rack modelled as
one node still fits."""

MAX_NODES = 200_000
"""Entries of ``nodes``."""

MAX_TOTAL_GPUS = 1_000_000
"""GPUs of all nodes together; also the bound of every GPU count that is not one gang (quotas,
borrow and lend limits, pool sizes, ``max_gpus_per_epoch``)."""

MAX_GANG = 65_536
"""GPUs of one job: ``gpus``, ``min_gpus``, ``max_gpus``, ``gpus_step``, ``reserve_min_gpus``,
and so the length of an ``allocation``."""

MAX_ELASTIC_SIZES = 128
"""Sizes one elastic job may run on (``(max_gpus - min_gpus) // gpus_step + 1``): the engine
considers a start at each of them."""

MAX_JOBS = 1_000_000
"""Entries of ``jobs``."""

MAX_TENANTS = 10_000
"""Entries of ``tenants`` (and of ``groups``)."""

MAX_GROUP_DEPTH = 64
"""Levels of the quota tree: groups above one tenant."""

MAX_GPU_TYPES = 256
"""Entries of ``gpu_types``, and so of any per-type table or list."""

MAX_ID_LENGTH = 256
"""Characters of an id or a name (node, job, tenant, group, GPU type, model, session,
activation, priority class, feature key)."""

MAX_TEXT_LENGTH = 4_096
"""Characters of a string feature value."""

MAX_FEATURES = 256
"""Entries of one job's ``features``, of ``options.extra``, of a priority-class table."""

MAX_ASSURANCE_HISTORY = MAX_JOBS
"""Job ids in one tenant's ``assurance_state`` list (``missed``)."""

MAX_MODELS = 1_024
"""Entries of ``workflows.models`` (and of a device's ``resident`` list)."""

MAX_SESSIONS = 100_000
"""Entries of ``workflows.sessions``."""

MAX_ACTIVATIONS = 1_000_000
"""Activations of all sessions together (and of one session, and dependencies of one)."""

MAX_TOKENS = 100_000_000
"""``input_tokens`` or ``output_tokens`` of one activation."""

MAX_SECONDS = 1e12
"""Magnitude of every time (``now``, ``submit_s``, ...) and duration (``runtime_s``,
``epoch_s``, ...), seconds: about 31,700 years."""

MAX_TIME_LIMIT_S = 86_400.0
"""``options.time_limit_s``: one day."""

MAX_MEMORY_GIB = 1e6
"""GiB of one GPU, one job's need per GPU, or one model."""

MAX_CPU_MILLI = 100_000_000
"""Milli-CPUs of one node, or one job's need on each of its nodes (``cpu_milli``): 100,000 cores."""

MAX_MEMORY_MIB = 1 << 30
"""MiB of host memory of one node, or one job's need on each of its nodes (``memory_mib``): 1 PiB."""

MILLI_PER_GPU = 1_000
"""A fractional job's ``gpu_milli`` is a share of one GPU in thousandths: 1 to this."""

MAX_TOPOLOGY_LEVELS = 8
"""Levels of ``topology.levels`` (block, rack, ...: nodes are the implicit last level)."""

MAX_FACTOR = 1e6
"""Weights, speeds and other dimensionless factors (``weight``, ``speed``, priority-class
weights, ``hysteresis``, ``session_value``)."""

MAX_WORKERS = 1_024
"""``options.num_workers`` (solver threads)."""

MAX_PARTITIONS = 1_024
"""``options.partitions``."""

MAX_SEED = 2**31 - 1
"""``options.seed`` (the solvers take a 32-bit seed)."""

LIMIT_NOUNS: dict[tuple[str, str], str] = {
    ("Node", "gpus"): "GPUs per node",
    ("Snapshot", "nodes"): "nodes",
    ("Snapshot", "jobs"): "jobs",
    ("Snapshot", "tenants"): "tenants",
    ("Snapshot", "groups"): "quota groups",
    ("Snapshot", "gpu_types"): "GPU types",
    ("Job", "gpus"): "GPUs in one job",
    ("Job", "min_gpus"): "GPUs in one job",
    ("Job", "max_gpus"): "GPUs in one job",
    ("Job", "gpus_step"): "GPUs in one job",
    ("Job", "allocation"): "GPUs in one allocation",
    ("Job", "gpus_per_node"): "GPUs per node",
    ("Job", "cpu_milli"): "milli-CPUs",
    ("Job", "memory_mib"): "MiB",
    ("Node", "cpu_milli"): "milli-CPUs",
    ("Node", "memory_mib"): "MiB",
    ("Topology", "levels"): "topology levels",
    ("Job", "features"): "features per job",
    ("Options", "num_workers"): "solver threads",
    ("Options", "seed"): "(a 32-bit seed)",
    ("Options", "time_limit_s"): "seconds",
    ("Options", "reserve_min_gpus"): "GPUs in one job",
    ("Workflows", "sessions"): "sessions",
    ("Workflows", "pool"): "pool GPUs",
    ("Workflows", "models"): "models",
    ("Session", "activations"): "activations per session",
    ("Activation", "input_tokens"): "tokens",
    ("Activation", "output_tokens"): "tokens",
}
"""How an error names what a limit counts, by (model, field): ``nodes[0].gpus: at most 128
GPUs per node (got 1000000000000)``; other bounds say ``at most N``."""

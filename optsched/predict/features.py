"""Feature rows of the three predictors: the only place features are defined.

Runtime features (:data:`RUNTIME_FEATURES`) are known at submission: the job's ``features``
(keys below), the GPU request, the hour of ``submit_s``, the snapshot's own runtime estimate
(``Job.runtime_s``, when given) and the ``hist_*`` statistics of
:class:`~optsched.predict.history.RuntimeHistory` for the job's user and tenant.

Job feature keys read from ``Job.features`` (all optional; a missing one is a missing value):

``user`` (read by :class:`~optsched.predict.history.RuntimeHistory`), ``name`` (job name;
its first alphabetic token is used), ``model``, ``dataset`` (str), ``batchsize`` (int),
``amp`` (0/1), ``cpu_num`` (cores), ``node_num``, ``mem_gib`` (requested host memory),
``gpu_milli`` (fraction of a GPU in thousandths, fractional-GPU traces), ``gpu_type`` and the
``hist_*`` keys of :data:`~optsched.predict.history.HIST_KEYS`.

Time convention: ``submit_s`` counts seconds from an origin at midnight;
``hour = (submit_s mod 86400) / 3600``.

Categorical values are encoded with the vocabulary stored in each model's ``card.json``
(unknown values become missing), so encoding is deterministic and needs no pandas.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from optsched.predict.history import HIST_KEYS

if TYPE_CHECKING:
    from optsched.schema.snapshot import Job

Value = str | float | int | bool | None
Row = dict[str, Value]

RUNTIME_CATEGORICAL: tuple[str, ...] = (
    "name_tok",
    "gpu_type",
    "model",
    "dataset",
)
RUNTIME_NUMERIC: tuple[str, ...] = (
    "gpus",
    "gpu_milli",
    "cpu_num",
    "mem_gib",
    "node_num",
    "batchsize",
    "amp",
    "hour",
    "estimate_s",
    *HIST_KEYS,
)
"""Tenant and user enter through their ``hist_*`` statistics, not as category ids: ids
memorise the training period and scored worse on every future split (as did the weekday,
on traces a month long)."""
RUNTIME_FEATURES: tuple[str, ...] = RUNTIME_CATEGORICAL + RUNTIME_NUMERIC

MEMORY_CATEGORICAL: tuple[str, ...] = ("model", "dataset")
MEMORY_FEATURES: tuple[str, ...] = (*MEMORY_CATEGORICAL, "batchsize", "amp")

PROFILE_COLUMNS: tuple[str, ...] = ("speed", "gpu_util", "gmem_util", "gmem")
"""Single-run profile columns looked up by ``(model, dataset, batchsize, amp)``."""

_SIDE: tuple[str, ...] = ("batchsize", "amp", *PROFILE_COLUMNS)
PAIR_CATEGORICAL: tuple[str, ...] = ()
"""No model-name categories: the pair model reads only profiles, so it serves any job whose
profile is in the table, including models never measured in a pair."""
PAIR_FEATURES: tuple[str, ...] = (
    *(f"self_{c}" for c in _SIDE),
    *(f"other_{c}" for c in _SIDE),
    "sum_gpu_util",
    "sum_gmem_util",
    "sum_gmem",
)

FEATURES: dict[str, tuple[str, ...]] = {
    "runtime": RUNTIME_FEATURES,
    "memory": MEMORY_FEATURES,
    "interference": PAIR_FEATURES,
}
"""Features of each predictor, in the order of the booster's columns (== ``card.json``)."""

CATEGORICAL: dict[str, tuple[str, ...]] = {
    "runtime": RUNTIME_CATEGORICAL,
    "memory": MEMORY_CATEGORICAL,
    "interference": PAIR_CATEGORICAL,
}

_TOKEN = re.compile(r"[A-Za-z]+")


def name_token(name: Value) -> str | None:
    """First alphabetic token of a job name, lower-cased (``"bert_ft-3"`` -> ``"bert"``)."""
    if name is None:
        return None
    m = _TOKEN.search(str(name))
    return m.group(0).lower() if m else None


def _num(value: Value) -> float:
    if value is None or (isinstance(value, str) and not value.strip()):
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _str(value: Value) -> str | None:
    if value is None:
        return None
    if isinstance(value, float) and math.isnan(value):
        return None
    s = str(value)
    return s if s else None


RUNTIME_INPUT_KEYS: tuple[str, ...] = (
    "user",
    "name",
    "gpu_type",
    "model",
    "dataset",
    "gpu_milli",
    "cpu_num",
    "mem_gib",
    "node_num",
    "batchsize",
    "amp",
)
"""The job-feature keys :func:`runtime_row` reads (besides the ``hist_*`` statistics); the
trainer copies exactly these from its records, so train and serve rows agree."""


def runtime_row(
    tenant: str,
    gpus: float,
    submit_s: float,
    features: Mapping[str, Value] | None,
    estimate_s: float | None = None,
) -> Row:
    """The runtime feature row of one job from submit-time information only.

    ``estimate_s`` is the runtime estimate the snapshot carries (``Job.runtime_s``: the
    user's, or an upstream estimator's), if any.
    """
    f = features or {}
    row: Row = {
        "tenant": _str(tenant),
        "user": _str(f.get("user")),
        "name_tok": name_token(_str(f.get("name"))),
        "gpu_type": _str(f.get("gpu_type")),
        "model": _str(f.get("model")),
        "dataset": _str(f.get("dataset")),
        "gpus": float(gpus),
        "gpu_milli": _num(f.get("gpu_milli")),
        "cpu_num": _num(f.get("cpu_num")),
        "mem_gib": _num(f.get("mem_gib")),
        "node_num": _num(f.get("node_num")),
        "batchsize": _num(f.get("batchsize")),
        "amp": _num(f.get("amp")),
        "hour": (submit_s % 86400.0) / 3600.0,
        "estimate_s": _num(estimate_s),
    }
    for key in HIST_KEYS:
        row[key] = _num(f.get(key))
    return row


def job_runtime_row(job: Job) -> Row:
    """:func:`runtime_row` of a snapshot job (``gpu_type`` from a single allowed type)."""
    feats: dict[str, Value] = dict(job.features or {})
    if "gpu_type" not in feats and job.gpu_types is not None and len(job.gpu_types) == 1:
        feats["gpu_type"] = job.gpu_types[0]
    return runtime_row(job.tenant, float(job.gpus), job.submit_s, feats, job.runtime_s)


def memory_row(features: Mapping[str, Value] | None) -> Row:
    """The memory feature row of a workload profile."""
    f = features or {}
    return {
        "model": _str(f.get("model")),
        "dataset": _str(f.get("dataset")),
        "batchsize": _num(f.get("batchsize")),
        "amp": _num(f.get("amp")),
    }


ProfileKey = tuple[str, str, int, int]


def profile_key(features: Mapping[str, Value] | None) -> ProfileKey | None:
    """``(model, dataset, batchsize, amp)`` of a job, or ``None`` if any part is missing."""
    f = features or {}
    model, dataset = _str(f.get("model")), _str(f.get("dataset"))
    bs, amp = _num(f.get("batchsize")), _num(f.get("amp"))
    if model is None or dataset is None or math.isnan(bs) or math.isnan(amp):
        return None
    return (model, dataset, int(bs), int(amp))


def own_profile(features: Mapping[str, Value] | None) -> dict[str, float] | None:
    """The job's single-run profile carried in its own features (``speed``, ``gpu_util``,
    ``gmem_util``, ``gmem`` in MiB), or ``None`` when any column is missing."""
    f = features or {}
    if not all(c in f for c in PROFILE_COLUMNS):
        return None  # a missing column is a missing value (same answer, without the work)
    vals = {c: _num(f.get(c)) for c in PROFILE_COLUMNS}
    if any(math.isnan(v) for v in vals.values()):
        return None
    return vals


def find_profile(
    features: Mapping[str, Value] | None, profiles: Mapping[ProfileKey, Mapping[str, float]]
) -> Mapping[str, float] | None:
    """The job's profile: its own feature columns first, else the table by profile key."""
    own = own_profile(features)
    if own is not None:
        return own
    key = profile_key(features)
    return profiles.get(key) if key is not None else None


def pair_row(
    self_feats: Mapping[str, Value] | None,
    other_feats: Mapping[str, Value] | None,
    profiles: Mapping[ProfileKey, Mapping[str, float]],
) -> Row:
    """Features for the colocated speed of ``self`` when sharing GPUs with ``other``.

    Profile columns come from the job's own features when it carries them, else from
    ``profiles`` (single-run measurements by profile key); a job whose profile is unknown gets
    missing values there.
    """
    row: Row = {}
    sums = {"gpu_util": 0.0, "gmem_util": 0.0, "gmem": 0.0}
    for side, feats in (("self", self_feats), ("other", other_feats)):
        f = feats or {}
        row[f"{side}_batchsize"] = _num(f.get("batchsize"))
        row[f"{side}_amp"] = _num(f.get("amp"))
        prof = find_profile(f, profiles)
        for col in PROFILE_COLUMNS:
            row[f"{side}_{col}"] = float(prof[col]) if prof is not None else math.nan
        for col in sums:
            sums[col] += float(prof[col]) if prof is not None else math.nan
    row["sum_gpu_util"] = sums["gpu_util"]
    row["sum_gmem_util"] = sums["gmem_util"]
    row["sum_gmem"] = sums["gmem"]
    return row


def build_vocab(
    rows: Iterable[Row], columns: Sequence[str], max_size: int = 256, min_count: int = 1
) -> dict[str, list[str]]:
    """Vocabulary of each categorical column: the most frequent values (ties by name)."""
    counts: dict[str, Counter[str]] = {c: Counter() for c in columns}
    for row in rows:
        for c in columns:
            v = row.get(c)
            if v is not None:
                counts[c][str(v)] += 1
    vocab: dict[str, list[str]] = {}
    for c in columns:
        items = sorted(counts[c].items(), key=lambda kv: (-kv[1], kv[0]))
        vocab[c] = [k for k, n in items if n >= min_count][:max_size]
    return vocab


def encode(
    rows: Sequence[Row], features: Sequence[str], vocab: Mapping[str, Sequence[str]]
) -> np.ndarray:
    """Float matrix of ``rows`` in ``features`` order; categories -> vocabulary index.

    Values outside the vocabulary, and missing values, become NaN.
    """
    index = {c: {v: float(i) for i, v in enumerate(vals)} for c, vals in vocab.items()}
    out = np.full((len(rows), len(features)), np.nan, dtype=np.float64)
    if not rows:
        return out
    nan = math.nan
    for j, col in enumerate(features):
        values = [row.get(col) for row in rows]
        lookup = index.get(col)
        if lookup is not None:
            column = [nan if v is None else lookup.get(str(v), nan) for v in values]
        else:
            column = [nan if v is None else float(v) for v in values]
        out[:, j] = column
    return out


def runtime_matrix(jobs: Sequence[Job], vocab: Mapping[str, Sequence[str]]) -> np.ndarray:
    """``encode([job_runtime_row(j) for j in jobs], RUNTIME_FEATURES, vocab)``, column by column.

    The same matrix, bit for bit, without a row dict per job: a feature key that no job
    carries is a column of missing values, and each column is built from the jobs' own
    fields with the same :func:`_num` / :func:`_str` / :func:`name_token` conversions.
    """
    if any(c not in vocab for c in RUNTIME_CATEGORICAL) or any(c in vocab for c in RUNTIME_NUMERIC):
        return encode([job_runtime_row(j) for j in jobs], RUNTIME_FEATURES, vocab)
    nan = math.nan
    out = np.full((len(jobs), len(RUNTIME_FEATURES)), nan, dtype=np.float64)
    if not jobs:
        return out
    feats: list[Mapping[str, Value]] = [j.features or {} for j in jobs]
    present: set[str] = set()
    for f in feats:
        present.update(f)
    index = {c: {v: float(i) for i, v in enumerate(vocab[c])} for c in RUNTIME_CATEGORICAL}
    col = {c: k for k, c in enumerate(RUNTIME_FEATURES)}

    def category(name: str, raw: list[Value]) -> None:
        lookup = index[name]
        codes: list[float] = []
        for v in raw:
            sv = _str(v)
            codes.append(nan if sv is None else lookup.get(sv, nan))
        out[:, col[name]] = codes

    if "name" in present:
        lookup = index["name_tok"]
        memo: dict[str | None, float] = {}
        codes: list[float] = []
        for f in feats:
            sv = _str(f.get("name"))
            code = memo.get(sv)
            if code is None:
                tok = name_token(sv)
                code = memo[sv] = nan if tok is None else lookup.get(tok, nan)
            codes.append(code)
        out[:, col["name_tok"]] = codes
    # gpu_type: the job's feature, else its single allowed type (as in job_runtime_row)
    gpu_type: list[Value] = []
    for j, f in zip(jobs, feats, strict=True):
        if "gpu_type" in f:
            gpu_type.append(f["gpu_type"])
        elif j.gpu_types is not None and len(j.gpu_types) == 1:
            gpu_type.append(j.gpu_types[0])
        else:
            gpu_type.append(None)
    category("gpu_type", gpu_type)
    for name in ("model", "dataset"):
        if name in present:
            category(name, [f.get(name) for f in feats])
    out[:, col["gpus"]] = [float(j.gpus) for j in jobs]
    for name in ("gpu_milli", "cpu_num", "mem_gib", "node_num", "batchsize", "amp", *HIST_KEYS):
        if name in present:
            out[:, col[name]] = [_num(f.get(name)) for f in feats]
    out[:, col["hour"]] = [(j.submit_s % 86400.0) / 3600.0 for j in jobs]
    out[:, col["estimate_s"]] = [_num(j.runtime_s) for j in jobs]
    return out

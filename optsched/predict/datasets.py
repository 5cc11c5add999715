"""Read the public traces into the tables the predictors train on.

Every reader takes an explicit path (a file, or the trace folder it lives in). The runtime
readers return one canonical table with the columns of :data:`JOB_COLUMNS`:

* ``tenant``, ``user``, ``name`` and the other ``Job.features`` keys of
  :mod:`optsched.predict.features` (``None``/NaN where the trace lacks them);
* ``submit_s`` (seconds from the trace's origin), ``end_s``,
  ``runtime_s``.

Trace-specific choices (documented in ``docs/predictors.md``):

* **alibaba_gpu_v2023 (openb)**: ``openb_pod_list_default``; tenant = ``qos``; no user or job
  name; duration = ``deletion_time - creation_time``; the pods still alive at the trace's
  last timestamp are censored and dropped.
* **alibaba_gpu_v2025**: tenant = ``app_name``, name = ``role`` (CN/HN); instances lacking a
  creation or a deletion time (alive at the trace's start or end) are dropped.
* **Venus surrogate** (SYNTHETIC durations): tenant = ``vc``; the anchor row before Sept 2020 is
  dropped; the trace has no start times, so ``end_s = submit_s + duration`` (a lower bound of
  the real end). ``estimate_s`` is Lucid's QSSF estimate from ``Venus_Sept_lgb.csv`` when that
  file is in the traces folder (values <= 0 become 1000 s, Lucid's rule), as the simulator
  does. The surrogate's durations were drawn rank-correlated with that estimate.

pandas is imported lazily: it is an optional dependency (the ``ml`` extra).
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

JOB_COLUMNS: tuple[str, ...] = (
    "job_id",
    "tenant",
    "user",
    "name",
    "gpus",
    "gpu_milli",
    "gpu_type",
    "cpu_num",
    "mem_gib",
    "node_num",
    "model",
    "dataset",
    "batchsize",
    "amp",
    "estimate_s",
    "submit_s",
    "end_s",
    "runtime_s",
)

RUNTIME_TRACES: dict[str, str] = {
    "alibaba_gpu_v2023": "alibaba_gpu_v2023/openb_pod_list_default.csv.gz",
    "alibaba_gpu_v2025": "alibaba_gpu_v2025/disaggregated_DLRM_trace.csv.gz",
    "venus_surrogate": "venus_surrogate_SYNTHETIC/cluster_full_log_SYNTHETIC_matched_seed0.csv.gz",
}
"""Default file of each runtime trace, relative to the traces folder."""

VENUS_ESTIMATES = "lucid_venus/Venus_Sept_lgb.csv"
"""Lucid's QSSF LightGBM duration estimates of the Sept Venus jobs (the simulator puts them
into ``Job.runtime_s``)."""
SINGLE_DATA = "lucid_venus/single_data.csv"
COLOCATE_INFO = "lucid_venus/colocate_info.csv"


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file's bytes (recorded in model cards)."""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def resolve(traces: Path, relative: str) -> Path:
    """``traces / relative`` when ``traces`` is a folder, else ``traces`` itself.

    Raises
    ------
    FileNotFoundError
        Naming the missing file.
    """
    p = traces / relative if traces.is_dir() else traces
    if not p.is_file():
        raise FileNotFoundError(f"trace file '{p}' does not exist")
    return p


def _finish(df: pd.DataFrame) -> pd.DataFrame:
    for col in JOB_COLUMNS:
        if col not in df.columns:
            df[col] = None
    df = df[list(JOB_COLUMNS)]
    df = df[(df["runtime_s"] > 0) & df["submit_s"].notna() & df["end_s"].notna()]
    df = df.sort_values(["submit_s", "job_id"], kind="mergesort").reset_index(drop=True)
    return df


def load_openb(path: Path) -> pd.DataFrame:
    """The Alibaba 2023 (openb) pod list as a canonical job table."""
    import pandas as pd

    raw = pd.read_csv(path)
    last = raw["deletion_time"].max()
    raw = raw[raw["deletion_time"] < last]  # censored: still alive at the trace's end
    df = pd.DataFrame(
        {
            "job_id": raw["name"].astype(str),
            "tenant": raw["qos"].astype(str),
            "user": None,
            "name": None,
            "gpus": raw["num_gpu"].astype(float),
            "gpu_milli": raw["gpu_milli"].astype(float),
            "gpu_type": raw["gpu_spec"].where(raw["gpu_spec"].notna(), None),
            "cpu_num": raw["cpu_milli"].astype(float) / 1000.0,
            "mem_gib": raw["memory_mib"].astype(float) / 1024.0,
            "submit_s": raw["creation_time"].astype(float),
            "end_s": raw["deletion_time"].astype(float),
        }
    )
    df["runtime_s"] = df["end_s"] - df["submit_s"]
    return _finish(df)


def load_alibaba2025(path: Path) -> pd.DataFrame:
    """The Alibaba 2025 disaggregated-DLRM instances as a canonical job table."""
    import pandas as pd

    raw = pd.read_csv(path)
    raw = raw[raw["creation_time"].notna() & raw["deletion_time"].notna()]
    df = pd.DataFrame(
        {
            "job_id": raw["instance_sn"].astype(str),
            "tenant": raw["app_name"].astype(str),
            "user": None,
            "name": raw["role"].astype(str),
            "gpus": raw["gpu_request"].astype(float),
            "cpu_num": raw["cpu_request"].astype(float),
            "mem_gib": raw["memory_request"].astype(float),
            "submit_s": raw["creation_time"].astype(float),
            "end_s": raw["deletion_time"].astype(float),
        }
    )
    df["runtime_s"] = df["end_s"] - df["submit_s"]
    return _finish(df)


def read_estimates(path: Path) -> dict[str, float]:
    """Lucid's estimator file (``job_id, priority``) as seconds by job id (<= 0 -> 1000)."""
    import pandas as pd

    raw = pd.read_csv(path)
    return {
        str(j): (1000.0 if float(v) <= 0 else float(v))
        for j, v in zip(raw["job_id"], raw["priority"], strict=True)
    }


def load_venus(path: Path, estimates: Path | None = None) -> pd.DataFrame:
    """A Venus surrogate log (Lucid's ``cluster_full_log`` schema) as a canonical job table.

    The durations of the surrogate are SYNTHETIC. ``submit_s`` counts from midnight of the
    first real day (2020-09-01). ``estimates``: an estimator file for ``estimate_s``.
    """
    import pandas as pd

    raw = pd.read_csv(path)
    ts = pd.to_datetime(raw["submit_time"])
    keep = ts >= pd.Timestamp("2020-09-01")  # drops the anchor row of 2020-04-01
    raw, ts = raw[keep], ts[keep]
    origin = ts.min().normalize()
    submit = (ts - origin).dt.total_seconds()
    df = pd.DataFrame(
        {
            "job_id": raw["job_id"].astype(str),
            "tenant": raw["vc"].astype(str),
            "user": raw["user"].astype(str),
            "name": raw["jobname"].astype(str),
            "gpus": raw["gpu_num"].astype(float),
            "cpu_num": raw["cpu_num"].astype(float),
            "node_num": raw["node_num"].astype(float),
            "model": raw["model"].astype(str),
            "dataset": raw["dataset"].astype(str),
            "batchsize": raw["batchsize"].astype(float),
            "amp": raw["amp"].astype(float),
            "submit_s": submit.astype(float),
            "runtime_s": raw["duration"].astype(float),
        }
    )
    df["end_s"] = df["submit_s"] + df["runtime_s"]
    if estimates is not None:
        est = read_estimates(estimates)
        df["estimate_s"] = [est.get(j, math.nan) for j in df["job_id"]]
    return _finish(df)


LOADERS = {
    "alibaba_gpu_v2023": load_openb,
    "alibaba_gpu_v2025": load_alibaba2025,
    "venus_surrogate": load_venus,
}


def load_runtime_trace(name: str, traces: Path) -> tuple[pd.DataFrame, list[Path]]:
    """Canonical job table of the runtime trace ``name`` found under ``traces``, and the files
    read (the Venus surrogate also reads :data:`VENUS_ESTIMATES` when present).

    Raises
    ------
    KeyError
        For an unknown trace name.
    FileNotFoundError
        When the trace file is missing.
    """
    if name not in LOADERS:
        raise KeyError(f"unknown runtime trace '{name}'; known: {sorted(LOADERS)}")
    path = resolve(traces, RUNTIME_TRACES[name])
    if name == "venus_surrogate" and traces.is_dir() and (traces / VENUS_ESTIMATES).is_file():
        return load_venus(path, traces / VENUS_ESTIMATES), [path, traces / VENUS_ESTIMATES]
    return LOADERS[name](path), [path]


def load_single(path: Path) -> pd.DataFrame:
    """Lucid's single-run profiles (``single_data.csv``)."""
    import pandas as pd

    df = pd.read_csv(path)
    df["batchsize"] = df["batchsize"].astype(int)
    df["amp"] = df["amp"].astype(int)
    return df


def load_colocate(path: Path) -> pd.DataFrame:
    """Lucid's measured MPS pairs (``colocate_info.csv``)."""
    import pandas as pd

    df = pd.read_csv(path, index_col=0)
    for side in ("1", "2"):
        df[f"batchsize{side}"] = df[f"batchsize{side}"].astype(int)
        df[f"amp{side}"] = df[f"amp{side}"].astype(int)
    return df


def job_records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows of a canonical job table as plain dicts (NaN -> ``None`` for text columns)."""
    recs: list[dict[str, Any]] = [{str(k): v for k, v in r.items()} for r in df.to_dict("records")]
    for r in recs:
        for k in ("user", "name", "gpu_type", "model", "dataset"):
            v = r.get(k)
            if v is None or (isinstance(v, float) and math.isnan(v)):
                r[k] = None
    return recs

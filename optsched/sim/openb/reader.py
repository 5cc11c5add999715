"""Exact, typed readers for the openb node list and pod lists.

Node list columns: ``sn, cpu_milli, memory_mib, gpu, model``. Pod list columns: ``name,
cpu_milli, memory_mib, num_gpu, gpu_milli`` are required; ``gpu_spec`` (allowed GPU models,
``|``-separated, empty = any), ``qos`` and ``creation_time`` are optional (the ``multigpu*``
lists have only the five required columns; their order is then the file order). A bad file
raises :class:`OpenbError` naming the file, the row and the column.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from optsched.errors import SnapshotError

MILLI = 1000
MAX_GPUS_PER_NODE = 8

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
POD_OPTIONAL = ("gpu_spec", "qos", "creation_time")

IntArray = npt.NDArray[np.int64]


class OpenbError(SnapshotError):
    """An openb CSV is malformed; ``path`` is ``file:row:column``."""


@dataclass(frozen=True)
class Nodes:
    """The node list, one entry per node (arrays of equal length)."""

    names: tuple[str, ...]
    cpu_milli: IntArray
    memory_mib: IntArray
    gpus: IntArray
    models: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.names)

    @property
    def gpu_capacity_milli(self) -> int:
        """Total GPUs of the cluster in milli-GPU."""
        return int(self.gpus.sum()) * MILLI

    def take(self, index: npt.NDArray[np.int64] | list[int]) -> Nodes:
        """The nodes at ``index``, in that order (a permutation reorders the list)."""
        idx = np.asarray(index, dtype=np.int64)
        return Nodes(
            names=tuple(self.names[i] for i in idx),
            cpu_milli=self.cpu_milli[idx],
            memory_mib=self.memory_mib[idx],
            gpus=self.gpus[idx],
            models=tuple(self.models[i] for i in idx),
        )


@dataclass(frozen=True)
class Pods:
    """A pod list in arrival order (arrays of equal length).

    ``gpu_spec[i]`` is the set of GPU models pod ``i`` may use; the empty set means any.
    """

    names: tuple[str, ...]
    cpu_milli: IntArray
    memory_mib: IntArray
    num_gpu: IntArray
    gpu_milli: IntArray
    gpu_spec: tuple[frozenset[str], ...]
    qos: tuple[str, ...]
    creation_time: IntArray

    def __len__(self) -> int:
        return len(self.names)

    @property
    def gpu_request_milli(self) -> IntArray:
        """Each pod's GPU request in milli-GPU (``num_gpu * gpu_milli``)."""
        return self.num_gpu * self.gpu_milli

    def take(self, index: npt.NDArray[np.int64] | list[int]) -> Pods:
        """The pods at ``index``, in that order (repeats allowed)."""
        idx = np.asarray(index, dtype=np.int64)
        names = tuple(self.names[i] for i in idx)
        return Pods(
            names=names,
            cpu_milli=self.cpu_milli[idx],
            memory_mib=self.memory_mib[idx],
            num_gpu=self.num_gpu[idx],
            gpu_milli=self.gpu_milli[idx],
            gpu_spec=tuple(self.gpu_spec[i] for i in idx),
            qos=tuple(self.qos[i] for i in idx),
            creation_time=self.creation_time[idx],
        )


def _rows(path: Path, required: tuple[str, ...]) -> tuple[list[str], list[list[str]]]:
    import csv
    import gzip
    import io

    if not path.is_file():
        raise OpenbError(str(path), "no such file")
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise OpenbError(str(path), f"cannot read: {exc}") from None
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        raise OpenbError(str(path), "empty file (no header)")
    header = [h.strip() for h in rows[0]]
    for col in required:
        if col not in header:
            raise OpenbError(f"{path}:{col}", f"missing column {col!r} (header: {','.join(header)})")
    body = [r for r in rows[1:] if r]
    for n, r in enumerate(body, start=2):
        if len(r) != len(header):
            raise OpenbError(f"{path}:row {n}", f"{len(r)} fields, header has {len(header)}")
    return header, body


def _ints(
    path: Path, header: list[str], body: list[list[str]], col: str, lo: int, hi: int | None
) -> IntArray:
    j = header.index(col)
    out = np.empty(len(body), dtype=np.int64)
    for n, r in enumerate(body):
        text = r[j].strip()
        try:
            v = int(text)
        except ValueError:
            raise OpenbError(f"{path}:row {n + 2}:{col}", f"not an integer: {text!r}") from None
        if v < lo or (hi is not None and v > hi):
            bound = f"{lo}..{hi}" if hi is not None else f">= {lo}"
            raise OpenbError(f"{path}:row {n + 2}:{col}", f"{v} is outside {bound}")
        out[n] = v
    return out


def read_nodes(path: str | Path) -> Nodes:
    """Read an openb node list (CSV or gzip CSV)."""
    p = Path(path)
    header, body = _rows(p, NODE_COLUMNS)
    if not body:
        raise OpenbError(str(p), "no nodes")
    gpus = _ints(p, header, body, "gpu", 0, MAX_GPUS_PER_NODE)
    names = tuple(r[header.index("sn")].strip() for r in body)
    models = tuple(r[header.index("model")].strip() for r in body)
    for n, (g, m) in enumerate(zip(gpus, models, strict=True)):
        if g > 0 and not m:
            raise OpenbError(f"{p}:row {n + 2}:model", "a node with GPUs needs a model")
    if len(set(names)) != len(names):
        raise OpenbError(f"{p}:sn", "duplicate node names")
    return Nodes(
        names=names,
        cpu_milli=_ints(p, header, body, "cpu_milli", 0, None),
        memory_mib=_ints(p, header, body, "memory_mib", 0, None),
        gpus=gpus,
        models=models,
    )


def read_pods(path: str | Path) -> Pods:
    """Read an openb pod list (CSV or gzip CSV), in creation-time order (stable, then name)."""
    p = Path(path)
    header, body = _rows(p, POD_COLUMNS)
    if not body:
        raise OpenbError(str(p), "no pods")
    num = _ints(p, header, body, "num_gpu", 0, MAX_GPUS_PER_NODE)
    milli = _ints(p, header, body, "gpu_milli", 0, MILLI)
    for n in range(len(body)):
        where = f"{p}:row {n + 2}:gpu_milli"
        if num[n] == 0 and milli[n] != 0:
            raise OpenbError(where, f"{milli[n]} with num_gpu 0 (a CPU-only pod asks 0)")
        if num[n] > 0 and milli[n] == 0:
            raise OpenbError(where, "0 with num_gpu > 0")
        if num[n] > 1 and milli[n] != MILLI:
            raise OpenbError(where, f"{milli[n]} with num_gpu {num[n]}: a multi-GPU pod takes whole GPUs")
    spec_col = header.index("gpu_spec") if "gpu_spec" in header else None
    qos_col = header.index("qos") if "qos" in header else None
    specs = tuple(
        frozenset(s for s in r[spec_col].strip().split("|") if s) if spec_col is not None else frozenset()
        for r in body
    )
    if "creation_time" in header:
        created = _ints(p, header, body, "creation_time", 0, None)
    else:
        created = np.arange(len(body), dtype=np.int64)
    pods = Pods(
        names=tuple(r[header.index("name")].strip() for r in body),
        cpu_milli=_ints(p, header, body, "cpu_milli", 0, None),
        memory_mib=_ints(p, header, body, "memory_mib", 0, None),
        num_gpu=num,
        gpu_milli=milli,
        gpu_spec=specs,
        qos=tuple(r[qos_col].strip() for r in body) if qos_col is not None else ("",) * len(body),
        creation_time=created,
    )
    order = sorted(range(len(pods)), key=lambda i: (int(pods.creation_time[i]), pods.names[i]))
    return pods.take(order)


__all__ = ["MAX_GPUS_PER_NODE", "MILLI", "Nodes", "OpenbError", "Pods", "read_nodes", "read_pods"]

"""Where the public trace data lives.

The project never ships the traces; commands take a path, and default to
``$OPTSCHED_TRACES`` or, when it exists, ``../shared/traces`` seen from the working directory.
"""

from __future__ import annotations

import os
from pathlib import Path


def default_traces_dir() -> Path | None:
    """The traces folder to use when a command is given none, or ``None`` if there is none."""
    env = os.environ.get("OPTSCHED_TRACES")
    if env:
        return Path(env)
    for base in (Path.cwd(), *Path.cwd().parents[:2]):
        cand = base / ".." / "shared" / "traces"
        if cand.is_dir():
            return cand.resolve()
    return None


def require_traces_dir(path: str | Path | None = None) -> Path:
    """``path`` if given, else the default; raises ``FileNotFoundError`` naming what was tried."""
    if path is not None:
        p = Path(path)
        if not p.exists():
            raise FileNotFoundError(f"trace path '{p}' does not exist")
        return p
    found = default_traces_dir()
    if found is None:
        raise FileNotFoundError(
            "no trace folder: pass --traces PATH or set OPTSCHED_TRACES (default ../shared/traces)"
        )
    return found

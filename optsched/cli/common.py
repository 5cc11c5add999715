"""Helpers shared by the command groups: bad-input exits, reading inputs, atomic writes."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import NoReturn

import typer

DEBUG = {"on": False}
"""Set by ``optsched --debug``: internal errors show their traceback."""


def fail(path: str, message: str) -> NoReturn:
    """Report bad input and exit 2."""
    text = f"{path}: {message}" if path else message
    typer.echo(f"error: {text}", err=True)
    raise typer.Exit(2)


def read_text(source: str) -> str:
    """Read a file, or standard input for ``-``."""
    if source == "-":
        return sys.stdin.read()
    p = Path(source)
    if not p.is_file():
        fail("", f"cannot read '{source}': no such file")
    try:
        return p.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        fail("", f"cannot read '{source}': {exc}")


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file in the same folder, then rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def emit(text: str, out: Path | None) -> None:
    """Print ``text``, or write it (atomically) to ``out``."""
    if out is None:
        typer.echo(text)
    else:
        write_atomic(out, text + "\n")

"""Helpers shared by the command groups: bad-input exits, reading inputs, atomic writes.

Every command validates its paths and options with these *before* any work, so a user error
exits 2 naming the option and leaves nothing behind (no empty output folder, no half file).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
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


def read_text(source: str, name: str = "") -> str:
    """Read a file, or standard input for ``-`` (``name``: the argument or option, for errors)."""
    if source == "-":
        return sys.stdin.read()
    p = Path(source)
    if p.is_dir():
        fail(name, f"cannot read '{source}': it is a folder, not a file")
    if not p.is_file():
        fail(name, f"cannot read '{source}': no such file")
    try:
        return p.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        fail(name, f"cannot read '{source}': {exc}")


def check_input_file(path: Path, option: str) -> None:
    """``path`` must be a readable file (exit 2 naming ``option`` otherwise)."""
    if path.is_dir():
        fail(option, f"'{path}' is a folder, not a file")
    if not path.is_file():
        fail(option, f"no such file '{path}'")
    if not os.access(path, os.R_OK):
        fail(option, f"cannot read '{path}'")


def check_input_dir(path: Path, option: str) -> None:
    """``path`` must be an existing folder (exit 2 naming ``option`` otherwise)."""
    if path.is_file():
        fail(option, f"'{path}' is a file, not a folder")
    if not path.is_dir():
        fail(option, f"no such folder '{path}'")


def _check_parent(path: Path, option: str) -> None:
    """The nearest existing ancestor of ``path`` is a folder we may write in."""
    anc = path.parent
    while not anc.exists():
        anc = anc.parent
    if not anc.is_dir():
        fail(option, f"cannot create '{path}': '{anc}' is a file, not a folder")
    if not os.access(anc, os.W_OK | os.X_OK):
        fail(option, f"cannot create '{path}': no permission to write in '{anc}'")


def check_out_file(path: Path | None, option: str = "--out") -> None:
    """``path`` can be written as a file: not a folder, its folder creatable and writable."""
    if path is None:
        return
    if path.is_dir():
        fail(option, f"'{path}' is a folder, not a file")
    if path.exists() and not os.access(path, os.W_OK):
        fail(option, f"cannot write '{path}': no permission")
    _check_parent(path, option)


def check_out_dir(path: Path, option: str = "--out") -> None:
    """``path`` can be an output folder: an existing folder we may write in, or creatable."""
    if path.exists():
        if not path.is_dir():
            fail(option, f"'{path}' is a file, not a folder")
        if not os.access(path, os.W_OK | os.X_OK):
            fail(option, f"cannot write in '{path}': no permission")
        return
    _check_parent(path, option)


@contextmanager
def out_dir(path: Path, option: str = "--out") -> Iterator[Path]:
    """Check ``path`` (:func:`check_out_dir`), create it, and remove it again should the block
    fail (an exception, or exit 2), when this call created it; a folder that existed before is
    left as it was, and so is one a run ending in exit 1 wrote its partial results to."""
    check_out_dir(path, option)
    created = not path.exists()
    path.mkdir(parents=True, exist_ok=True)
    try:
        yield path
    except BaseException as exc:
        if created and (not isinstance(exc, typer.Exit) or exc.exit_code == 2):
            shutil.rmtree(path, ignore_errors=True)
        raise


def parse_ints(text: str, option: str, *, minimum: int | None = 0) -> list[int]:
    """A comma-separated list of integers (at least one), each ``>= minimum``."""
    items = [s.strip() for s in text.split(",") if s.strip()]
    out: list[int] = []
    for s in items:
        try:
            v = int(s)
        except ValueError:
            fail(option, f"'{s}' is not an integer (a comma-separated list, e.g. 0,1,2)")
        if minimum is not None and v < minimum:
            fail(option, f"{v} is below {minimum}")
        out.append(v)
    if not out:
        fail(option, "give at least one value (a comma-separated list, e.g. 0,1,2)")
    return out


def parse_floats(text: str, option: str) -> list[float]:
    """A comma-separated list of positive finite numbers (at least one)."""
    import math

    out: list[float] = []
    for s in (x.strip() for x in text.split(",")):
        if not s:
            continue
        try:
            v = float(s)
        except ValueError:
            fail(option, f"'{s}' is not a number (a comma-separated list, e.g. 1,0.5)")
        if not v > 0 or math.isinf(v):
            fail(option, f"{s} is not a positive number")
        out.append(v)
    if not out:
        fail(option, "give at least one value (a comma-separated list, e.g. 1,0.5)")
    return out


def require(ok: bool, option: str, message: str) -> None:
    """Exit 2 naming ``option`` unless ``ok``."""
    if not ok:
        fail(option, message)


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

"""Run the real ``optsched serve`` in a subprocess on a free loopback port (tests, benchmarks).

It starts ``python -m optsched.cli serve`` and talks to it over HTTP only, so it imports neither
FastAPI nor the engine.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import optsched


class ServeStartError(RuntimeError):
    """``optsched serve`` did not come up (:func:`serve_subprocess`)."""


@dataclass(frozen=True)
class ServeProcess:
    """A running ``optsched serve`` subprocess (:func:`serve_subprocess`)."""

    proc: subprocess.Popen[bytes]
    base: str
    """``http://127.0.0.1:PORT``."""


def free_port() -> int:
    """A loopback TCP port nobody listens on (now)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve_subprocess(
    db: str | Path,
    *,
    token: str | None = None,
    workers: int = 1,
    log_level: str = "warning",
    capture: bool = False,
    start_timeout_s: float = 30.0,
    stop_timeout_s: float = 20.0,
) -> Iterator[ServeProcess]:
    """Run the real ``optsched serve`` (``python -m optsched.cli serve``) on a free loopback
    port until the block ends, for tests and benchmarks.

    Waits until ``/healthz`` answers 200 (:class:`ServeStartError` when the process exits first or
    ``start_timeout_s`` passes, with its output when ``capture``). ``token`` is given as
    ``OPTSCHED_TOKEN``; ``capture`` sends stdout and stderr to ``proc.stdout`` (read it after the
    block). On exit the server gets SIGTERM, and SIGKILL after ``stop_timeout_s``.
    """
    port = free_port()
    cmd = [sys.executable, "-m", "optsched.cli", "serve", "--port", str(port), "--workers", str(workers)]
    cmd += ["--db", str(db), "--log-level", log_level]
    env = dict(os.environ)
    if token is not None:
        env["OPTSCHED_TOKEN"] = token
    out = subprocess.PIPE if capture else None
    err = subprocess.STDOUT if capture else None
    cwd = Path(optsched.__file__).resolve().parents[1]
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=err)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + start_timeout_s
        while not _healthy(base):
            if proc.poll() is not None:
                said = proc.stdout.read().decode() if proc.stdout else ""
                raise ServeStartError(f"optsched serve exited with status {proc.returncode}: {said}")
            if time.monotonic() > deadline:
                raise ServeStartError(f"optsched serve did not answer /healthz within {start_timeout_s:g} s")
            time.sleep(0.2)
        yield ServeProcess(proc, base)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=stop_timeout_s)
        except subprocess.TimeoutExpired:  # pragma: no cover
            proc.kill()
            proc.wait()


def _healthy(base: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base}/healthz", timeout=1) as r:
            return bool(r.status == 200)
    except (OSError, ValueError):
        return False


__all__ = ["ServeProcess", "ServeStartError", "free_port", "serve_subprocess"]

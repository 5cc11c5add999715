"""A solver in its own persistent worker process, abandoned (killed) at the deadline.

Two backends run their solver this way: ``highspy`` (highspy and OR-Tools each bundle HiGHS and
cannot share an interpreter; HiGHS can overshoot its time limit) and ``pulp`` (PuLP waits for
its CBC subprocess without a timeout, so a CBC that overshoots its ``-sec`` limit would hold the
call past its deadline).

The parent side, :class:`WorkerProcess`, starts ``python -m <module>`` once per Python process
(a fresh interpreter, not a multiprocessing child, so the caller's ``__main__`` is never
re-imported) in its own session, speaks length-prefixed pickles over its stdin/stdout, and on a
missed deadline kills the worker's whole process group: the worker and any solver binary it
started (CBC) go together, and a fresh worker starts on the next call. The worker side,
:func:`serve`, says ready once its solver is imported and answers each job until stdin closes;
anything the solver prints goes to stderr, never into the channel. Standard library only: the
worker imports nothing else from here.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from optsched.engine.backends.base import SolveResult

KILL_GRACE_S = 0.05
"""The solver's own limit ends this much before the deadline, so that its answer can arrive."""


class Channel:
    """Length-prefixed pickles over the worker's stdin/stdout, read without buffering so that
    ``poll`` (``select``) sees every byte."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self.proc = proc
        self._in = proc.stdin
        self._fd = proc.stdout.fileno()

    def send(self, obj: Any) -> None:
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        self._in.write(struct.pack("<Q", len(data)) + data)
        self._in.flush()

    def poll(self, timeout: float) -> bool:
        ready, _, _ = select.select([self._fd], [], [], max(0.0, timeout))
        return bool(ready)

    def _read(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = os.read(self._fd, n - len(buf))
            if not chunk:
                raise EOFError("the solver worker exited")
            buf += chunk
        return buf

    def recv(self) -> Any:
        (n,) = struct.unpack("<Q", self._read(8))
        return pickle.loads(self._read(n))

    def close(self) -> None:
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


class Late(Exception):
    """The worker did not answer by the deadline (``starting``: it was still starting)."""

    def __init__(self, starting: bool) -> None:
        super().__init__("still starting" if starting else "no answer")
        self.starting = starting


class WorkerProcess:
    """One persistent worker process running ``python -m module`` (see the module's text)."""

    def __init__(self, module: str) -> None:
        self.module = module
        self.lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None
        self.conn: Channel | None = None
        self.ready = False
        _ALL.append(self)

    def channel(self) -> Channel:
        """The running worker's channel, the worker started if needed."""
        if self.proc is None or self.conn is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", self.module],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # its own process group: killed with what it starts
            )
            self.conn = Channel(self.proc)
            self.ready = False
        return self.conn

    def wait_ready(self, timeout: float) -> bool:
        """Consume the worker's ready message; ``False`` if it did not come in time."""
        conn = self.channel()
        if not self.ready and conn.poll(max(0.0, timeout)):
            kind, _ = conn.recv()
            self.ready = kind == "ready"
        return self.ready

    def warm_up(self, wait: bool = True) -> None:
        """Start the worker ahead of the first call; with ``wait``, until its solver is loaded."""
        with self.lock:
            self.channel()
            if wait:
                self.wait_ready(30.0)

    def call(self, job: dict[str, Any], deadline: float) -> tuple[str, Any]:
        """Send ``job`` with ``job["time_limit_s"]`` set to what is left before ``deadline``
        (a ``time.monotonic()`` instant) less :data:`KILL_GRACE_S`; return the worker's
        ``(kind, payload)``.

        Raises
        ------
        Late
            When no answer came by the deadline. A worker that had the job is killed; one
            still starting is left to start.
        """
        with self.lock:
            conn = self.channel()
            if not self.wait_ready(deadline - time.monotonic()):
                raise Late(starting=True)  # no job sent: left starting for the next call
            job["time_limit_s"] = max(0.01, deadline - time.monotonic() - KILL_GRACE_S)
            conn.send(job)
            if not conn.poll(max(0.0, deadline - time.monotonic())):
                self.kill()
                raise Late(starting=False)
            reply: tuple[str, Any] = conn.recv()
            return reply

    def kill(self) -> None:
        """Kill the worker's process group (the worker and any solver it started)."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(1.0)
        if self.conn is not None:
            self.conn.close()
        self.proc, self.conn, self.ready = None, None, False

    def shutdown(self) -> None:
        """Close the worker's stdin (it exits on EOF), then reap it; kill it if it lingers."""
        if self.proc is None or self.conn is None:
            return
        self.conn.close()
        try:
            self.proc.wait(1.0)
        except subprocess.TimeoutExpired:
            self.kill()
        self.proc, self.conn, self.ready = None, None, False


def ask(
    worker: WorkerProcess, job: dict[str, Any], deadline: float, t0: float, backend: str, solver: str
) -> tuple[tuple[str, Any], float] | SolveResult:
    """``worker.call`` for a backend called ``backend`` running ``solver``: the reply and the
    seconds since ``t0``, or, when no answer came by the deadline, the backend's
    ``SolveResult`` (no solution, the wall clock named as what stopped it)."""
    try:
        reply = worker.call(job, deadline)
    except Late as late:
        from optsched.engine.backends.base import WALL_CLOCK_HIT, SolveResult, SolveStatus

        why = (
            f"the {solver} worker was still starting at the deadline ({WALL_CLOCK_HIT})"
            if late.starting
            else f"abandoned at the deadline: {WALL_CLOCK_HIT} ({solver} overshot its limit)"
        )
        return SolveResult(SolveStatus.NO_SOLUTION, backend, time.monotonic() - t0, detail=why)
    return reply, time.monotonic() - t0


_ALL: list[WorkerProcess] = []


@atexit.register
def _shutdown_all() -> None:
    for w in _ALL:
        w.shutdown()


def serve(solve: Callable[[dict[str, Any]], Any]) -> None:
    """The worker's loop over stdin/stdout (call it once the solver is imported): say ready,
    then answer each job with ``("ok", solve(job))`` or ``("error", text)`` until stdin closes.
    Anything printed goes to stderr, never into the channel."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    inp = sys.stdin.buffer

    def send(obj: Any) -> None:
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        out.write(struct.pack("<Q", len(data)) + data)
        out.flush()

    send(("ready", None))
    while True:
        head = inp.read(8)
        if len(head) < 8:
            return
        (n,) = struct.unpack("<Q", head)
        job = pickle.loads(inp.read(n))
        try:
            send(("ok", solve(job)))
        except Exception as exc:  # report every failure to the parent, never die silently
            send(("error", f"{type(exc).__name__}: {exc}"))

"""One executor for independent tasks: Ray tasks, else worker processes, else this process.

The simulator's replays (:func:`optsched.sim.runner.run_many`), the sweeps
(:mod:`optsched.sim.sweep`) and the parts of a partitioned epoch
(:func:`optsched.engine.partition.run_parts`) all run through :func:`run`:

* ``ray``: every task is a Ray task (``max_retries`` / ``retry_exceptions`` = ``retries``);
  ``auto`` picks it when Ray is initialised in this process (or ``ray_address`` is given).
* ``process``: worker processes kept for the life of this process. A worker is a **fresh
  interpreter** (``sys.executable -c ...``, started by exec, never a ``fork`` of this process),
  so nothing a parent initialised (OpenMP thread pools of LightGBM, solver threads, locks)
  is copied into it, and the caller's ``__main__`` is never re-imported. Only what the task
  names crosses the boundary, pickled: a top-level function (by name) and its arguments.
  Workers die with their parent: on Linux ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` (the workers
  are started from one long-lived thread of this module, because the kernel sends the signal
  when the *thread* that started a process ends), elsewhere and as a net a watchdog thread
  that exits when the parent pid changes; an idle worker also exits on the closed pipe. A
  worker's stdout is this process's stderr, so nothing a task prints lands on our stdout.
* ``serial``: one after the other in this process.

Every task is retried ``retries`` times after an exception (in place, or on another
worker). ``timeout_s`` cuts off a task that runs longer: in processes its worker is killed
(and replaced) and the task is reported as a :class:`Failure` with ``timed_out`` set, never
retried. The clock of a task starts when it is handed to a worker that has finished its
start and its ``setup`` (a worker's start and setup are bounded by ``setup_timeout_s``); on
Ray a task may also wait for a CPU and set up its worker, so it is cut off only after
``timeout_s + setup_timeout_s`` from its submission; in this process nothing can be cut off.
``deadline`` (on ``time.monotonic``'s clock) bounds the whole call instead, start and setup
included: every task without an answer by then is a :class:`Failure` with ``timed_out`` (a
task still queued, or whose worker is still starting, as one that is running; in this process
a task is not started after the deadline and one that ends after it is reported late). A
running task's worker is killed; a worker still starting or setting up is kept for the next
call (the setup goes on), so a process that calls again (the service) gets ready workers;
:func:`prestart` starts and sets up workers ahead of a call (before its clock starts).
Results come back as a dict in the order of the input, with the failures beside them.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import ctypes
import json
import math
import os
import pickle
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, Literal

Mode = Literal["auto", "ray", "process", "serial"]
MODES: tuple[str, ...] = ("auto", "ray", "process", "serial")
SETUP_TIMEOUT_S = 120.0
"""Default bound on a worker's start (interpreter, imports) plus its ``setup``."""
KEEP_IDLE = max(1, os.cpu_count() or 1)
"""Idle workers kept for the next call (starting one costs more than most tasks)."""
WATCHDOG_S = 0.5
"""How often a worker checks that its parent is alive (the net below ``PR_SET_PDEATHSIG``)."""

Task = tuple[Any, Callable[..., Any], tuple[Any, ...]]
"""``(key, fn, args)``: ``fn`` is a top-level function (it pickles by name)."""


@dataclass
class Failure:
    """A task that failed after its retries, or was cut off (``timed_out``)."""

    key: Any
    error: str
    """``"ExceptionType: message"``."""
    timed_out: bool = False
    exception: BaseException | None = field(default=None, compare=False, repr=False)
    """The exception itself, when it could cross the process boundary."""


def ray_ready() -> bool:
    """Whether Ray is imported and initialised in this process (never imports it: that alone
    costs most of a second, inside the caller's time limit)."""
    ray = sys.modules.get("ray")
    return ray is not None and bool(ray.is_initialized())


def init_ray(address: str | None) -> None:
    """Start (``"local"`` or None) or join (any other address) a Ray cluster, once."""
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - depends on the extra
        raise RuntimeError("--ray needs the 'ray' extra: pip install 'optsched[ray]'") from exc
    if ray.is_initialized():
        return
    if address in (None, "local"):
        ray.init(include_dashboard=False, log_to_driver=False)
    else:
        ray.init(address=address, include_dashboard=False, log_to_driver=False)


def resolve_mode(mode: str, tasks: int, workers: int | None = None, ray_address: str | None = None) -> str:
    """The concrete mode for ``mode`` (``auto``: Ray when initialised or an address is given,
    else processes for more than one task and worker, else serial)."""
    if mode not in MODES:
        raise ValueError(f"executor: {', '.join(MODES)} (got {mode!r})")
    if mode != "auto":
        return mode
    if ray_address is not None or ray_ready():
        return "ray"
    n = default_workers(tasks) if workers is None else workers
    return "process" if tasks > 1 and n > 1 else "serial"


def default_workers(tasks: int) -> int:
    """One worker per task, at most one per CPU."""
    return max(1, min(tasks, os.cpu_count() or 1))


def run(
    tasks: Iterable[Task],
    *,
    mode: str = "auto",
    workers: int | None = None,
    retries: int = 0,
    timeout_s: float | None = None,
    setup: tuple[Callable[..., Any], tuple[Any, ...]] | None = None,
    setup_timeout_s: float = SETUP_TIMEOUT_S,
    ray_address: str | None = None,
    on_done: Callable[[Any, Any], None] | None = None,
    on_fail: Callable[[Any, str], None] | None = None,
    deadline: float | None = None,
) -> tuple[dict[Any, Any], list[Failure]]:
    """Run ``fn(*args)`` for every ``(key, fn, args)``; return the results by key (ordered as
    the input) and the failures (see the module docstring). ``setup`` = ``(fn, args)`` runs
    once in every worker before its first task of this call (e.g. loading models), outside
    the tasks' clocks (not outside ``deadline``, the bound of the whole call on
    ``time.monotonic``'s clock); ``on_done(key, result)`` / ``on_fail(key, error)`` are called
    here, as tasks finish."""
    items = list(tasks)
    kind = resolve_mode(mode, len(items), workers, ray_address)
    results: dict[Any, Any] = {}
    failures: list[Failure] = []

    def done(key: Any, value: Any) -> None:
        results[key] = value
        if on_done:
            on_done(key, value)

    def fail(f: Failure) -> None:
        failures.append(f)
        if on_fail:
            on_fail(f.key, f.error)

    if not items:
        return results, failures
    if kind == "serial":
        if setup is not None:
            try:
                setup[0](*setup[1])
            except Exception as exc:
                for key, _, _ in items:
                    fail(Failure(key, f"RuntimeError: setup failed: {_describe(exc)}", exception=exc))
                return results, failures
        for key, fn, args in items:
            for attempt in range(retries + 1):
                if deadline is not None and time.monotonic() >= deadline:
                    fail(Failure(key, LATE, timed_out=True))
                    break
                try:
                    value = fn(*args)
                except Exception as exc:
                    if attempt == retries:
                        fail(Failure(key, _describe(exc), exception=exc))
                    continue
                if deadline is not None and time.monotonic() > deadline:
                    fail(Failure(key, LATE, timed_out=True))
                else:
                    done(key, value)
                break
    elif kind == "ray":
        _run_ray(items, retries, timeout_s, setup, setup_timeout_s, ray_address, done, fail, deadline)
    else:
        n = default_workers(len(items)) if workers is None else max(1, min(workers, len(items)))
        _run_processes(items, n, retries, timeout_s, setup, setup_timeout_s, done, fail, deadline)
    order = {key: k for k, (key, _, _) in enumerate(items)}
    return dict(sorted(results.items(), key=lambda kv: order[kv[0]])), failures


LATE = "TimeoutError: no answer by the call's deadline"
"""The error of a task cut off by ``deadline``."""


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


# --------------------------------------------------------------------------- Ray


def _ray_call(setup: tuple[Callable[..., Any], tuple[Any, ...]] | None, fn: Callable[..., Any],
              args: tuple[Any, ...]) -> Any:
    """The body of a Ray task: the setup (idempotent, cached by the caller), then the task."""
    if setup is not None:
        setup[0](*setup[1])
    return fn(*args)


def _run_ray(
    items: list[Task],
    retries: int,
    timeout_s: float | None,
    setup: tuple[Callable[..., Any], tuple[Any, ...]] | None,
    setup_timeout_s: float,
    ray_address: str | None,
    done: Callable[[Any, Any], None],
    fail: Callable[[Failure], None],
    deadline: float | None = None,
) -> None:
    import ray

    init_ray(ray_address)
    remote: Any = ray.remote(max_retries=retries, retry_exceptions=True)(_ray_call)
    pending: dict[Any, tuple[Any, float]] = {}
    for key, fn, args in items:
        pending[remote.remote(setup, fn, args)] = (key, time.monotonic())
    allowance = None if timeout_s is None else timeout_s + setup_timeout_s
    while pending:
        wait_s = None
        if allowance is not None:
            first = min(t for _, t in pending.values())
            wait_s = max(0.0, first + allowance - time.monotonic())
        if deadline is not None:
            wait_s = max(0.0, min(deadline - time.monotonic(), wait_s if wait_s is not None else math.inf))
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=wait_s)
        for ref in ready:
            key, _ = pending.pop(ref)
            try:
                value = ray.get(ref)
            except Exception as exc:
                cause = getattr(exc, "cause", None)
                err = cause if isinstance(cause, Exception) else exc
                fail(Failure(key, _describe(err), exception=err))
            else:
                done(key, value)
        if allowance is not None:
            now = time.monotonic()
            for ref, (key, t) in list(pending.items()):
                if now - t >= allowance:
                    del pending[ref]
                    ray.cancel(ref, force=True)
                    fail(Failure(key, f"TimeoutError: no answer within {allowance:g} s", timed_out=True))
        if deadline is not None and pending and time.monotonic() >= deadline:
            for ref, (key, _) in list(pending.items()):
                del pending[ref]
                ray.cancel(ref, force=True)
                fail(Failure(key, LATE, timed_out=True))


# --------------------------------------------------------------------------- worker processes


_BOOT = (
    "import json, sys; sys.path[:] = json.loads(sys.argv[1]); "
    "from optsched.parallel import worker_main; "
    "worker_main(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))"
)


class _Spawner:
    """Starts every worker from one long-lived daemon thread, so ``PR_SET_PDEATHSIG`` (sent
    when the thread that started a process ends) fires only when this process ends."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future[Any]]]
        self._jobs = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._pid = 0

    def call(self, fn: Callable[[], Any]) -> Any:
        with self._lock:
            if self._thread is None or not self._thread.is_alive() or self._pid != os.getpid():
                self._jobs = queue.SimpleQueue()
                self._thread = threading.Thread(target=self._loop, name="optsched-spawner", daemon=True)
                self._thread.start()
                self._pid = os.getpid()
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._jobs.put((fn, fut))
        return fut.result()

    def _loop(self) -> None:
        while True:
            fn, fut = self._jobs.get()
            try:
                fut.set_result(fn())
            except BaseException as exc:  # handed to the caller
                fut.set_exception(exc)


_SPAWNER = _Spawner()


class _Worker:
    """One worker process and the two pipes to it."""

    def __init__(self) -> None:
        to_r, to_w = os.pipe()
        from_r, from_w = os.pipe()
        cmd = [sys.executable, "-c", _BOOT, json.dumps(sys.path), str(to_r), str(from_w), str(os.getpid())]
        try:
            self.proc: subprocess.Popen[bytes] = _SPAWNER.call(
                lambda: subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=2, pass_fds=(to_r, from_w))
            )
        except BaseException:
            for fd in (to_r, to_w, from_r, from_w):
                os.close(fd)
            raise
        os.close(to_r)
        os.close(from_w)
        self.inbox = Connection(from_r, writable=False)
        self.outbox = Connection(to_w, readable=False)
        self.started = False
        self.setups: set[bytes] = set()
        self.pending_setup: bytes | None = None
        """The setup sent and not yet acknowledged (a worker kept while setting up)."""

    @property
    def ready(self) -> bool:
        """Started, and no setup under way."""
        return self.started and self.pending_setup is None

    def send(self, msg: Any) -> bool:
        try:
            self.outbox.send(msg)
        except (OSError, ValueError):
            return False
        return True

    def kill(self) -> None:
        for conn in (self.inbox, self.outbox):
            with contextlib.suppress(OSError):
                conn.close()
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):  # (uninterruptible sleep)
            self.proc.wait(5.0)

    def close(self) -> None:
        """Ask an idle worker to exit, then make sure it has."""
        self.send(None)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(1.0)
        self.kill()


_IDLE: list[_Worker] = []
_IDLE_LOCK = threading.Lock()


def _checkout(n: int) -> list[_Worker]:
    with _IDLE_LOCK:
        got = [w for w in _IDLE if w.proc.poll() is None][:n]
        for w in _IDLE:
            if w not in got and w.proc.poll() is not None:
                w.kill()
        del _IDLE[:]
    return got


def _checkin(ws: list[_Worker]) -> None:
    with _IDLE_LOCK:
        for w in ws:
            if len(_IDLE) < KEEP_IDLE and w.proc.poll() is None:
                _IDLE.append(w)
            elif w.ready:
                w.close()
            else:  # (busy starting: it would not read a request to exit)
                w.kill()


def prestart(
    n: int,
    setup: tuple[Callable[..., Any], tuple[Any, ...]] | None = None,
    timeout_s: float = SETUP_TIMEOUT_S,
) -> int:
    """Start ``n`` worker processes (reusing idle ones) and run ``setup`` in each, then keep
    them idle for the next :func:`run` in ``process`` mode with the same ``setup``, which then
    hands its tasks to them at once: a host calls this *before* a call's clock starts (the
    CLI does, for a partitioned solve), as it loads the predictor. Waits at most ``timeout_s``;
    a worker still starting or setting up then is kept (its setup goes on), one that failed is
    stopped. Returns how many workers are ready and set up. (:func:`run` alone cannot do this:
    it hands tasks to the first ready workers and stops the others when its tasks are done.)"""
    n = max(0, min(n, KEEP_IDLE))
    key = pickle.dumps(setup) if setup is not None else b""
    ws = _checkout(n)
    try:
        while len(ws) < n:
            ws.append(_Worker())
    except BaseException:
        _checkin(ws)
        raise

    def advance(w: _Worker) -> bool:
        """Send our setup to a started, idle worker without it; False if the pipe is gone."""
        if setup is not None and w.ready and key not in w.setups:
            w.pending_setup = key
            return w.send(("setup", setup[0], setup[1]))
        return True

    def set_up(w: _Worker) -> bool:
        return w.ready and (setup is None or key in w.setups)

    end = time.monotonic() + timeout_s
    live: list[_Worker] = []
    for w in ws:
        if advance(w):
            live.append(w)
        else:
            w.kill()
    while True:
        waiting = [w for w in live if not set_up(w)]
        left = end - time.monotonic()
        if not waiting or left <= 0:
            break
        for conn in wait([w.inbox for w in waiting], left):
            w = next(w for w in waiting if w.inbox is conn)
            try:
                msg = w.inbox.recv()
            except (EOFError, OSError, pickle.UnpicklingError, AttributeError, ImportError):
                msg = ("err", "worker died")
            if not w.started:
                w.started = True
            elif msg[0] == "ok" and w.pending_setup is not None:
                w.setups.add(w.pending_setup)
                w.pending_setup = None
            else:  # its setup failed or it died: no use to the next call
                w.kill()
                live.remove(w)
                continue
            if not advance(w):
                w.kill()
                live.remove(w)
    ready = sum(1 for w in live if set_up(w))
    _checkin(live)
    return ready


def shutdown() -> None:
    """Stop the idle workers (also run at exit)."""
    with _IDLE_LOCK:
        ws = list(_IDLE)
        del _IDLE[:]
    for w in ws:
        if w.ready:
            w.close()
        else:  # still starting or setting up: it would not read a request to exit
            w.kill()


atexit.register(shutdown)


@dataclass
class _Slot:
    worker: _Worker
    phase: Literal["start", "setup", "idle", "busy"] = "start"
    deadline: float | None = None
    task: int = -1
    attempt: int = 0


def _run_processes(
    items: list[Task],
    n: int,
    retries: int,
    timeout_s: float | None,
    setup: tuple[Callable[..., Any], tuple[Any, ...]] | None,
    setup_timeout_s: float,
    done: Callable[[Any, Any], None],
    fail: Callable[[Failure], None],
    deadline: float | None = None,
) -> None:
    setup_key = pickle.dumps(setup) if setup is not None else b""
    todo: deque[tuple[int, int]] = deque((k, 0) for k in range(len(items)))
    slots: list[_Slot] = []
    last_error = "worker did not start"

    def new_slot(worker: _Worker | None = None) -> None:
        w = worker or _Worker()
        s = _Slot(w, "idle" if w.ready else "start" if not w.started else "setup")
        if not w.ready:
            s.deadline = time.monotonic() + setup_timeout_s
        slots.append(s)

    def to_setup_or_idle(s: _Slot) -> None:
        if setup is not None and setup_key not in s.worker.setups:
            s.phase, s.deadline = "setup", time.monotonic() + setup_timeout_s
            s.worker.pending_setup = setup_key
            if not s.worker.send(("setup", setup[0], setup[1])):
                drop(s, "worker died before its setup")
        else:
            s.phase, s.deadline = "idle", None

    def drop(s: _Slot, why: str) -> None:
        nonlocal last_error
        s.worker.kill()
        slots.remove(s)
        if s.phase == "busy":
            key = items[s.task][0]
            if why.startswith("TimeoutError"):
                fail(Failure(key, why, timed_out=True))
            elif s.attempt < retries:
                todo.append((s.task, s.attempt + 1))
            else:
                fail(Failure(key, why))
            if todo:  # a replacement for the tasks left
                new_slot()
        else:
            last_error = why

    kept: list[_Worker] = []  # starting or setting up at the deadline: for the next call
    try:
        for w in _checkout(n):
            new_slot(w)
        while len(slots) < n:
            new_slot()
        for s in list(slots):
            if s.phase == "idle":
                to_setup_or_idle(s)
        while todo or any(s.phase == "busy" for s in slots):
            if deadline is not None and time.monotonic() >= deadline:
                for s in list(slots):
                    if s.phase == "busy":
                        fail(Failure(items[s.task][0], LATE, timed_out=True))
                        s.worker.kill()
                        slots.remove(s)
                    elif s.phase in ("start", "setup"):
                        kept.append(s.worker)
                        slots.remove(s)
                while todo:
                    k, _ = todo.popleft()
                    fail(Failure(items[k][0], LATE, timed_out=True))
                break
            for s in slots:
                if s.phase == "idle" and todo:
                    s.task, s.attempt = todo.popleft()
                    _, fn, args = items[s.task]
                    s.phase = "busy"
                    s.deadline = None if timeout_s is None else time.monotonic() + timeout_s
                    if not s.worker.send(("task", fn, args)):
                        drop(s, "worker died before its task")
                        break
            if not slots:
                while todo:
                    k, _ = todo.popleft()
                    fail(Failure(items[k][0], f"RuntimeError: {last_error}"))
                break
            busy = [s for s in slots if s.phase != "idle"]
            if not busy:
                continue
            deadlines = [s.deadline for s in busy if s.deadline is not None]
            if deadline is not None:
                deadlines.append(deadline)
            wait_s = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
            ready = wait([s.worker.inbox for s in busy], wait_s)
            for s in busy:
                if s.worker.inbox in ready:
                    try:
                        msg = s.worker.inbox.recv()
                    except (EOFError, OSError, pickle.UnpicklingError, AttributeError, ImportError) as exc:
                        code = s.worker.proc.poll()
                        why = f"worker died (exit code {code})" if isinstance(exc, EOFError | OSError) else \
                            f"{type(exc).__name__}: reply could not be read: {exc}"
                        drop(s, f"RuntimeError: {why}" if s.phase == "busy" else why)
                        continue
                    _handle(s, msg, items, retries, todo, done, fail, to_setup_or_idle, drop)
                elif s.deadline is not None and time.monotonic() >= s.deadline:
                    if s.phase == "busy":
                        drop(s, f"TimeoutError: no answer within {timeout_s:g} s")
                    else:
                        drop(s, f"worker did not start within {setup_timeout_s:g} s")
    except BaseException:
        for s in slots:
            s.worker.kill()
        for w in kept:
            w.kill()
        raise
    _checkin([s.worker for s in slots if s.phase == "idle"] + kept)
    for s in slots:
        if s.phase != "idle":
            s.worker.kill()


def _handle(
    s: _Slot,
    msg: Any,
    items: list[Task],
    retries: int,
    todo: deque[tuple[int, int]],
    done: Callable[[Any, Any], None],
    fail: Callable[[Failure], None],
    to_setup_or_idle: Callable[[_Slot], None],
    drop: Callable[[_Slot, str], None],
) -> None:
    kind = msg[0]
    if s.phase == "start":
        s.worker.started = True
        to_setup_or_idle(s)
    elif s.phase == "setup":
        if kind == "ok":
            if s.worker.pending_setup is not None:  # (maybe an earlier call's: then ours next)
                s.worker.setups.add(s.worker.pending_setup)
            s.worker.pending_setup = None
            to_setup_or_idle(s)
        else:
            drop(s, f"worker setup failed: {msg[1]}")
    elif s.phase == "busy":
        key = items[s.task][0]
        s.phase, s.deadline = "idle", None
        if kind == "ok":
            done(key, msg[1])
        elif s.attempt < retries:
            todo.append((s.task, s.attempt + 1))
        else:
            fail(Failure(key, msg[1], exception=msg[2]))


# --------------------------------------------------------------------------- inside a worker


PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int) -> None:
    """Be killed when the parent ends: the kernel's parent-death signal (Linux), a watchdog
    thread on the parent's pid (everywhere; also covers a parent that died before)."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):  # pragma: no cover - no prctl
            pass
    if os.getppid() != parent:
        os._exit(0)

    def watch() -> None:
        while True:
            time.sleep(WATCHDOG_S)
            if os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=watch, name="optsched-watchdog", daemon=True).start()


def worker_main(inbox_fd: int, outbox_fd: int, parent: int) -> None:
    """A worker's loop (started by :class:`_Worker`): say ready, then run every ``("setup" |
    "task", fn, args)`` message and answer ``("ok", value)`` or ``("err", text, exception)``;
    exit on ``None`` or a closed pipe."""
    _die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides what an interrupt stops
    inbox = Connection(inbox_fd, writable=False)
    outbox = Connection(outbox_fd, readable=False)
    outbox.send(("ready", os.getpid()))
    while True:
        try:
            raw = inbox.recv_bytes()
        except (EOFError, OSError):
            return
        reply: tuple[Any, ...]
        try:
            msg = pickle.loads(raw)
            if msg is None:
                return
            _, fn, args = msg
            reply = ("ok", fn(*args))
        except Exception as exc:
            reply = ("err", _describe(exc), _portable(exc))
        try:
            data = pickle.dumps(reply)
        except Exception as exc:
            why = f"{type(exc).__name__}: the result could not be pickled: {exc}"
            data = pickle.dumps(("err", why, None))
        try:
            outbox.send_bytes(data)
        except OSError:
            return


def _portable(exc: Exception) -> Exception | None:
    """``exc`` if it survives pickling, else ``None``."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return None
    return exc

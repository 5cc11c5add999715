"""Keep solver output off standard output: the decision is the only thing on file descriptor 1.

Solvers running in this process (HiGHS through OR-Tools, CP-SAT, PuLP's solvers and the
programs they start) can print to file descriptor 1 from C/C++, below Python's ``sys.stdout``
(HiGHS prints ``HighsMipSolverData::transformNewIntegerFeasibleSolution tmpSolver.run();``
whatever its log options say). :func:`solver_output_to_stderr` points descriptor 1 at
descriptor 2 while a solver runs and puts it back afterwards, flushing Python's ``sys.stdout``
and C's stdio buffers on both sides, so the text goes to stderr and never into the JSON a
caller reads from stdout.

Thread safety: the descriptor is process-wide. The guard is reference-counted under a lock,
so overlapping solves in several threads swap it once and restore it when the last one ends;
while any solve runs, *anything* written to descriptor 1 by any thread goes to stderr. The
engine never writes to descriptor 1 during a solve (the CLI prints the decision after
``solve_epoch`` returns; the HTTP service answers on sockets), so a host that prints to
stdout from another thread while a solve runs is the one case that sees its text on stderr.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress

_LOCK = threading.Lock()
_DEPTH = 0
_SAVED: int | None = None
_LIBC: ctypes.CDLL | None = None


def _flush() -> None:
    """Python's then C's buffered standard output, to wherever descriptor 1 points now."""
    global _LIBC
    for stream in (sys.stdout, sys.__stdout__):
        if stream is not None:
            with suppress(OSError, ValueError):
                stream.flush()
    try:
        if _LIBC is None:
            _LIBC = ctypes.CDLL(None)
        _LIBC.fflush(None)
    except (OSError, AttributeError):  # pragma: no cover - no C library to flush
        pass


@contextmanager
def solver_output_to_stderr() -> Iterator[None]:
    """Run the body with descriptor 1 pointing at descriptor 2 (see the module docstring)."""
    global _DEPTH, _SAVED
    with _LOCK:
        if _DEPTH == 0:
            _flush()
            try:
                saved = os.dup(1)
            except OSError:  # no descriptor 1: nothing to protect
                saved = None
            if saved is not None:
                try:
                    os.dup2(2, 1)
                except OSError:  # no descriptor 2: send it nowhere
                    null = os.open(os.devnull, os.O_WRONLY)
                    os.dup2(null, 1)
                    os.close(null)
            _SAVED = saved
        _DEPTH += 1
    try:
        yield
    finally:
        with _LOCK:
            _DEPTH -= 1
            if _DEPTH == 0 and _SAVED is not None:
                _flush()
                os.dup2(_SAVED, 1)
                os.close(_SAVED)
                _SAVED = None

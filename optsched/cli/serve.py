"""``optsched serve``: the HTTP policy service (:mod:`optsched.hosts.service`).

Wire it into a Typer app with :func:`register`. FastAPI, uvicorn and the engine are imported
only when the command runs, so ``optsched --help`` stays cheap. Needs the ``serve`` extra
(``pip install -e ".[serve]"``).
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Annotated

import typer

from optsched.cli.common import check_out_file, fail

LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")
"""uvicorn's log levels."""


def _check_listen(host: str, port: int) -> None:
    """``host`` resolves and ``host:port`` can be listened on now (else exit 2 naming which)."""
    import errno
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        fail("--host", f"cannot resolve '{host}': {exc}")
    family, kind, proto, _, addr = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(addr)
        except OSError as exc:
            option = "--port" if exc.errno in (errno.EADDRINUSE, errno.EACCES) else "--host"
            fail(option, f"cannot listen on {host}:{port}: {exc.strerror or exc}")


def serve(
    host: Annotated[
        str, typer.Option(help="Address to bind; loopback unless you say otherwise (use a token then).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port (0: any free port).")] = 8080,
    db: Annotated[
        Path, typer.Option(help="The SQLite store: epochs, decisions, assurance state, actions.")
    ] = Path("optsched-serve.db"),
    token: Annotated[
        str | None,
        typer.Option(
            envvar="OPTSCHED_TOKEN",
            show_envvar=True,
            help="Bearer token every route but /healthz requires (401 without it).",
        ),
    ] = None,
    max_body_mb: Annotated[
        float, typer.Option("--max-body-mb", help="Larger request bodies get 413.")
    ] = 32.0,
    timeout_s: Annotated[
        float,
        typer.Option(
            "--timeout-s", help="Per request: 503 while waiting for the cluster, 504 while solving."
        ),
    ] = 30.0,
    workers: Annotated[
        int, typer.Option(help="Solver processes (epochs of different clusters in parallel).")
    ] = 2,
    log_level: Annotated[
        str, typer.Option("--log-level", help="uvicorn log level (critical ... trace).")
    ] = "info",
) -> None:
    """Serve decisions over HTTP: POST /v1/clusters/{id}/epochs, extender verbs, /metrics."""
    if workers < 1:
        fail("--workers", "must be >= 1")
    if timeout_s <= 0:
        fail("--timeout-s", "must be > 0")
    if max_body_mb <= 0:
        fail("--max-body-mb", "must be > 0")
    if not 0 <= port <= 65535:
        fail("--port", "must be in 0..65535")
    if token is not None and not token.strip():
        fail("--token", "must not be empty")
    if log_level.lower() not in LOG_LEVELS:
        fail("--log-level", f"unknown level '{log_level}' ({', '.join(LOG_LEVELS)})")
    if str(db) != ":memory:":
        check_out_file(db, "--db")
    _check_listen(host, port)
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback and token is None:
        typer.echo(f"warning: serving on {host} without a bearer token (--token / OPTSCHED_TOKEN)", err=True)
    try:
        from optsched.hosts.service import ServiceConfig, run
    except ImportError as exc:
        fail("", f"optsched serve needs the 'serve' extra (pip install 'optsched[serve]'): {exc}")
    cfg = ServiceConfig(
        db=db,
        token=token,
        max_body_bytes=int(max_body_mb * 1024 * 1024),
        timeout_s=timeout_s,
        workers=workers,
    )
    run(cfg, host=host, port=port, log_level=log_level.lower())


def register(app: typer.Typer) -> None:
    """Add ``serve`` to ``app``."""
    app.command()(serve)

"""The `nmt serve` process: listen, run uvicorn until SIGTERM / Ctrl-C, exit 0. On the signal it stops accepting,
the queued work that fits in serve.shutdown_timeout is finished and the rest answered 503 at once, uvicorn waits
for the answers to go out, then the model thread ends. Start-up problems (no checkpoint, a busy port, a model
that fails to load) are one error line. Nothing is ever written: the checkpoint is read once."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

from nmt.config.experiment import Config
from nmt.device import keep_freed_memory
from nmt.errors import NmtError, first_line
from nmt.log import console
from nmt.rundir import checkpoint_to_translate
from nmt.serve.app import create_app
from nmt.serve.connections import AcceptErrors, connection_cap, connection_protocol, raise_open_files_limit
from nmt.serve.models import Models
from nmt.serve.web import uvicorn
from nmt.serve.worker import ServeOptions, Service, open_model


def _listen(host: str, port: int) -> socket.socket:
    """Bind before starting uvicorn, so that a busy port is one error line (uvicorn would sys.exit). The socket
    states its protocol (TCP, from getaddrinfo): asyncio turns Nagle's algorithm off only on connections of such
    sockets, and with it on every small answer waited ~40 ms for the client's delayed ACK."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
        sock = socket.socket(family, kind, proto)
    except OSError as e:
        raise NmtError(f"cannot listen on {host}:{port}: {e.strerror or first_line(e)}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as e:
        sock.close()
        raise NmtError(f"cannot listen on {host}:{port}: {e.strerror or first_line(e)}") from None
    return sock


@contextlib.contextmanager
def _exit_zero_on_signals() -> Iterator[None]:
    """uvicorn answers SIGINT/SIGTERM with a graceful shutdown and then raises the signal again for the handler
    it found (default SIGTERM: death by signal; SIGINT: KeyboardInterrupt). Stopping is how a server ends, so the
    handler it finds here does nothing and `nmt serve` exits 0."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _log_config() -> dict[str, Any]:
    """uvicorn's logging with the access log on stderr too: stdout carries no logs in any nmt command."""
    config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    config["handlers"]["access"]["stream"] = "ext://sys.stderr"
    return config


def _stop_once_started(server: Any, wait: float = 60.0) -> None:
    """Make uvicorn stop (its loop checks should_exit every 0.1 s), but not before it has started: older uvicorn
    (0.30) skips the lifespan shutdown of a server told to stop while starting, and logs a CancelledError."""
    deadline = time.monotonic() + wait
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    server.should_exit = True


class _Server(uvicorn.Server):
    """uvicorn's server, draining the models' queues as its shutdown begins (uvicorn would wait for every queued
    request, then cancel the handlers still waiting past its timeout: 500s in plain text)."""

    def __init__(self, config: Any, models: Models, drain_within: float):
        super().__init__(config)
        self.models, self.drain_within = models, drain_within

    async def startup(self, sockets: Any = None) -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(AcceptErrors(loop))
        await super().startup(sockets=sockets)

    async def shutdown(self, sockets: Any = None) -> None:
        self.models.drain(self.drain_within)
        await super().shutdown(sockets=sockets)


def _server(cfg: Config, models: Models, app: Any, access_log: bool) -> _Server:
    limits = cfg.serve
    open_files = raise_open_files_limit()
    cap = connection_cap(limits.max_connections, open_files)
    if cap < limits.max_connections:
        console.print(f"[yellow]warning:[/yellow] serve.max_connections lowered to {cap}: the open-files limit is "
                      f"{open_files} (ulimit -n)")
    config = uvicorn.Config(
        app, log_config=_log_config(), access_log=access_log, lifespan="on", loop="asyncio",
        http=connection_protocol(limits.read_timeout, cap),
        timeout_graceful_shutdown=limits.shutdown_timeout + 3)  # the answers to the drained requests go out
    return _Server(config, models, drain_within=limits.shutdown_timeout)


def _checkpoints(cfg: Config, opts: ServeOptions) -> list[Path]:
    ckpts = opts.checkpoints or [checkpoint_to_translate(None, cfg.train.run_dir, opts.config_given)]
    for ckpt in ckpts:
        if not ckpt.is_file():
            raise NmtError(f"checkpoint not found: {ckpt}")
    return ckpts


def run(cfg: Config, opts: ServeOptions) -> None:
    """The `nmt serve` command: returns when the server was stopped (SIGTERM / Ctrl-C)."""
    keep_freed_memory()
    ckpts = _checkpoints(cfg, opts)
    sock = _listen(cfg.serve.host, cfg.serve.port)
    services = [Service(partial(open_model, ckpt, cfg, opts), cfg.serve, opts.threads) for ckpt in ckpts]
    models = Models(services)
    server = _server(cfg, models, create_app(services, cfg.serve, opts.api_key), opts.access_log)
    models.on_failure(partial(_stop_once_started, server))
    host, port = sock.getsockname()[:2]
    url = f"http://{f'[{host}]' if ':' in host else host}:{port}"
    names = ", ".join(str(c) for c in ckpts)
    console.print(f"serving {names} on {url} (loading; GET /health answers 200 once every model is ready)")
    with _exit_zero_on_signals():
        server.run(sockets=[sock])
    if models.error is not None:
        raise NmtError(models.error)
    if not server.started:
        raise NmtError("the server did not start (see the log above)")
    if models.busy:  # a batch ran past every timeout (or a second Ctrl-C): torch must not be torn down under it
        console.print("[yellow]warning:[/yellow] stopped with a batch still running")
        sys.stdout.flush(), sys.stderr.flush()
        os._exit(0)
    console.print("stopped")

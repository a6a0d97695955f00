"""The connections of `nmt serve`: uvicorn's h11 protocol with what it lacks against hostile clients.

- Headers must arrive within serve.read_timeout of a connection opening or of a request's first byte: a
  connection that never sends a byte, or sends its headers a byte at a time, is closed (uvicorn only times out
  idle keep-alive connections). The body's own deadline is nmt.serve.guards.BodyLimits.
- More than serve.max_connections open at once: the newcomer's request is answered 503 (JSON) and closed.
- uvicorn's own 400 (a request that is not HTTP) is JSON like every other error.
- A failed accept() (out of file descriptors) is logged once per interval with a count, not once per waiting
  connection per loop pass with a traceback each, as asyncio does.
The open-files limit is raised to its hard limit at start, and the connection cap kept under it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from http import HTTPStatus
from typing import Any

from nmt.serve.guards import REFUSAL_PAUSE
from nmt.serve.http_errors import json_error
from nmt.serve.web import H11Protocol, h11

log = logging.getLogger("uvicorn.error")
RESERVED_FILES = 64  # descriptors kept for what is not a client: the checkpoint, logs, the listening socket


def raise_open_files_limit() -> int:
    """Raise the soft limit on open files to the hard one; the soft limit now in force."""
    try:
        import resource
    except ImportError:  # not on Windows
        return 1 << 16
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        wanted = 1 << 20 if hard == resource.RLIM_INFINITY else hard
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):
            pass
    return soft


def connection_cap(max_connections: int, open_files: int) -> int:
    return max(1, min(max_connections, open_files - RESERVED_FILES))


def _raw_response(status: int, message: str, limit: str | None = None) -> bytes:
    """A whole JSON error response that closes the connection, for where no ASGI app runs."""
    body = json.dumps({"error": message, **({"limit": limit} if limit else {})}).encode()
    head = (f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n")
    return head.encode() + body


class Connection(H11Protocol):
    """One client connection; `connection_protocol` sets the limits."""

    read_timeout = 10.0
    max_connections = 1000

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._header_timer: asyncio.TimerHandle | None = None
        self._received = False
        timeout = self.read_timeout
        if len(self.connections) > self.max_connections:
            self.app = _busy(self.max_connections)
            timeout = min(timeout, 2 * REFUSAL_PAUSE)  # nor does it get to hold a descriptor long
        self._header_timer = self.loop.call_later(timeout, self._headers_too_slow)

    def data_received(self, data: bytes) -> None:
        self._received = True
        super().data_received(data)
        waiting = self.conn.their_state is h11.IDLE and not self.transport.is_closing()
        if waiting and self._header_timer is None:  # the first bytes of a request on a kept-alive connection
            self._header_timer = self.loop.call_later(self.read_timeout, self._headers_too_slow)
        elif not waiting:
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self.conn.their_state is not h11.IDLE or self.transport.is_closing():
            return
        if self._received:  # partial headers: say why; a connection that sent nothing gets nothing
            self.transport.write(_raw_response(408, f"request headers not received within serve.read_timeout="
                                                    f"{self.read_timeout:g} s", "serve.read_timeout"))
        self.transport.close()

    def send_400_response(self, msg: str) -> None:
        self.transport.write(_raw_response(400, "invalid HTTP request"))
        self.transport.close()


def _busy(cap: int) -> Any:
    async def app(scope: dict, receive: Any, send: Any) -> None:
        # answered after a pause: a client that reconnects at once must not keep the event loop (and with it the
        # model thread, which shares its CPU and GIL) busy accepting and refusing
        await asyncio.sleep(REFUSAL_PAUSE)
        response = json_error(503, f"too many open connections: over the limit serve.max_connections={cap}",
                              "serve.max_connections", headers={"Retry-After": "1", "Connection": "close"})
        await response(scope, receive, send)
    return app


def connection_protocol(read_timeout: float, max_connections: int) -> type[Connection]:
    """The protocol class uvicorn is given (`http=`): Connection with these limits."""
    return type("Connection", (Connection,), {"read_timeout": read_timeout, "max_connections": max_connections})


class AcceptErrors:
    """The event loop's exception handler: failed accept()s counted and logged once per `interval` seconds;
    everything else as before."""

    def __init__(self, loop: asyncio.AbstractEventLoop, interval: float = 10.0):
        self.previous, self.interval = loop.get_exception_handler(), interval
        self.count, self.logged = 0, -float("inf")

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if not str(context.get("message", "")).startswith("socket.accept() out of system resource"):
            if self.previous is not None:
                self.previous(loop, context)
            else:
                loop.default_exception_handler(context)
            return
        self.count += 1
        now = time.monotonic()
        if now - self.logged >= self.interval:
            log.error("cannot accept connections: %s (%d times since the last report; raise `ulimit -n` or lower "
                      "serve.max_connections)", context.get("exception"), self.count)
            self.count, self.logged = 0, now

"""What every request passes before an endpoint sees it, as ASGI middleware: the Host check (against DNS
rebinding), CORS (Starlette's own), the body's size and time limits, and the refusal of translation requests
a full queue would refuse anyway. Their errors are JSON like any other (Starlette's TrustedHostMiddleware answers
plain text, hence the Host check here)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from nmt.config.serve import ServeConfig
from nmt.serve.http_errors import ApiError, error_response, shown
from nmt.serve.web import FastAPI

Receive = Callable[[], Any]
FORM_OVERHEAD = 64 * 1024  # a multipart upload's bytes besides its file's (POST /translate_file)
REFUSAL_PAUSE = 1.0  # seconds a refusal of a client that may come straight back waits (`bench/serve_abuse.py`)


class HostCheck:
    """400 for a Host header not in serve.allowed_hosts: a page on evil.example that resolves its name to
    127.0.0.1 (DNS rebinding) sends `Host: evil.example`, so it cannot read a server that only answers its own
    names."""

    def __init__(self, app: Any, hosts: list[str]):
        self.app, self.hosts = app, {h.lower().strip("[]") for h in hosts}

    def allowed(self, host: str) -> bool:
        name = host.rsplit(":", 1)[0] if host.count(":") == 1 or host.startswith("[") else host
        return "*" in self.hosts or name.lower().strip("[]") in self.hosts

    async def __call__(self, scope: dict, receive: Receive, send: Callable) -> None:
        if scope["type"] == "http":
            host = dict(scope["headers"]).get(b"host", b"").decode("latin-1")
            if not self.allowed(host):
                error = ApiError(400, f"host '{shown(host)}' is not served here (serve.allowed_hosts)",
                                 "serve.allowed_hosts")
                return await error_response(error)(scope, receive, send)
        await self.app(scope, receive, send)


class BodyLimits:
    """413 for bodies over serve.max_body_bytes, by Content-Length before reading, else while reading (chunked
    bodies); 408 for a body not received within serve.read_timeout (a Content-Length larger than what comes).
    Once the body is in, receive() is passed through untimed: the endpoints wait on it for the client leaving."""

    def __init__(self, app: Any, max_bytes: int, timeout: float, paths: dict[str, tuple[int, str, int]] | None = None):
        self.app, self.max_bytes, self.timeout = app, max_bytes, timeout
        self.paths = paths or {}  # path -> (its body limit, the key to name, its value): uploads (nmt.serve.files)

    def too_large(self, limit: int, key: str) -> ApiError:
        return _closing(ApiError(413, f"request body over the limit {key}={limit}", key))

    async def __call__(self, scope: dict, receive: Receive, send: Callable) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        max_bytes, key, shown_limit = self.paths.get(scope["path"],
                                                     (self.max_bytes, "serve.max_body_bytes", self.max_bytes))
        length = dict(scope["headers"]).get(b"content-length", b"")
        if length.isdigit() and int(length) > max_bytes:
            return await error_response(self.too_large(shown_limit, key))(scope, receive, send)
        seen, complete = 0, False
        deadline = asyncio.get_running_loop().time() + self.timeout

        async def limited() -> dict:
            nonlocal seen, complete
            if complete:
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - asyncio.get_running_loop().time()))
            except asyncio.TimeoutError:
                raise _closing(ApiError(408, f"request body not received within serve.read_timeout="
                                        f"{self.timeout:g} s", "serve.read_timeout")) from None
            seen += len(message.get("body", b""))
            complete = message["type"] != "http.request" or not message.get("more_body", False)
            if seen > max_bytes:
                raise self.too_large(shown_limit, key)
            return message

        await self.app(scope, limited, send)


class EarlyBusy:
    """503 for a translation request whose Content-Length says the queue will refuse it, before its body is
    parsed or validated, and after a pause (REFUSAL_PAUSE): under a flood the event loop refuses thousands of
    requests a second from clients that ignore Retry-After, and the model thread shares the CPU and the GIL with
    it. The body is read and dropped, so the connection stays usable."""

    PATHS = ("/translate", "/v1/translate", "/v1/explain")

    def __init__(self, app: Any, refusal: Callable[[int], ApiError | None]):
        self.app, self.refusal = app, refusal

    async def __call__(self, scope: dict, receive: Receive, send: Callable) -> None:
        length = dict(scope.get("headers", ())).get(b"content-length", b"")
        if scope["type"] != "http" or scope["path"] not in self.PATHS or not length.isdigit():
            return await self.app(scope, receive, send)
        if (error := self.refusal(int(length))) is None:
            return await self.app(scope, receive, send)
        try:
            message = await receive()
            while message["type"] == "http.request" and message.get("more_body"):
                message = await receive()
        except ApiError as e:  # the body limits: outside FastAPI's handlers here, answered as they would be
            error = e
        else:
            await asyncio.sleep(REFUSAL_PAUSE)
        await error_response(error)(scope, receive, send)


def _closing(error: ApiError) -> ApiError:
    """The answer ends the connection: the rest of the body is never read."""
    error.headers = {**(error.headers or {}), "Connection": "close"}
    return error


def add_guards(app: FastAPI, limits: ServeConfig, refusal: Callable[[int], ApiError | None]) -> None:
    """Outermost first: the Host check, CORS (preflights answered before any limit), the body limits, the early
    refusal (`refusal`: the error for a request of that many bytes, if the queue would refuse it)."""
    from starlette.middleware.cors import CORSMiddleware

    app.add_middleware(EarlyBusy, refusal=refusal)
    upload = (max(limits.max_body_bytes, limits.max_file_bytes + FORM_OVERHEAD), "serve.max_file_bytes",
              limits.max_file_bytes)
    app.add_middleware(BodyLimits, max_bytes=limits.max_body_bytes, timeout=limits.read_timeout,
                       paths={"/translate_file": upload})
    if limits.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=limits.cors_origins, allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type"], max_age=600)
    app.add_middleware(HostCheck, hosts=limits.hosts())

"""How `nmt serve` answers errors: always a JSON body {"error": one line}, limit errors also name the config key
({"limit": "serve.KEY"}). The error the endpoints raise, the request-body limit, and the handlers that give
FastAPI's own errors (invalid requests, malformed JSON, anything unexpected) that shape."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nmt.serve.web import FastAPI, HTTPException, JSONResponse, Request, RequestValidationError


class ApiError(HTTPException):
    """An error answer: {"error": message} (+ "limit": the config key that was exceeded). An HTTPException, so
    FastAPI passes it through unchanged even when raised while it reads the body."""

    def __init__(self, status: int, message: str, limit: str | None = None):
        super().__init__(status_code=status, detail=message)
        self.limit = limit


class BodyLimit:
    """413 with a JSON error for bodies over `limit` bytes, by Content-Length before reading, else while reading
    (chunked bodies). (Starlette's own limit middleware is newer than the versions supported here, and its 413
    is plain text.)"""

    def __init__(self, app: Any, limit: int):
        self.app, self.limit = app, limit

    def error(self) -> ApiError:
        return ApiError(413, f"request body over the limit serve.max_body_bytes={self.limit}", "serve.max_body_bytes")

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length", b"")
        if length.isdigit() and int(length) > self.limit:
            return await _error_response(self.error())(scope, receive, send)
        seen = 0

        async def limited() -> dict:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise self.error()
            return message

        await self.app(scope, limited, send)


def _error_response(e: HTTPException) -> JSONResponse:
    body: dict[str, Any] = {"error": " ".join(str(e.detail).split())}
    if getattr(e, "limit", None):
        body["limit"] = e.limit
    return JSONResponse(body, status_code=e.status_code, headers=getattr(e, "headers", None))


def validation_message(errors: list[dict[str, Any]]) -> str:
    """The first of pydantic's errors as one line: "where: what"."""
    first = errors[0]
    where = ".".join(str(x) for x in first.get("loc", ()) if x != "body")
    return f"{where}: {first.get('msg', 'invalid')}" if where else str(first.get("msg", "invalid"))


async def _http_error(request: Request, e: HTTPException) -> JSONResponse:
    return _error_response(e)


async def _invalid(request: Request, e: RequestValidationError) -> JSONResponse:
    errors = list(e.errors())
    if any(err.get("type") == "json_invalid" for err in errors):
        reason = (errors[0].get("ctx") or {}).get("error", "JSON decode error")
        return JSONResponse({"error": f"malformed JSON body: {reason}"}, status_code=400)
    detail = [{k: err[k] for k in ("loc", "msg", "type") if k in err} for err in errors]
    return JSONResponse({"error": validation_message(errors), "detail": detail}, status_code=422)


async def _internal(request: Request, e: Exception) -> JSONResponse:  # logged by uvicorn; the client gets a line
    return JSONResponse({"error": f"internal error: {type(e).__name__}"}, status_code=500)


def add_error_handling(app: FastAPI, max_body_bytes: int) -> None:
    """The body limit, and a JSON answer for every error."""
    app.add_middleware(BodyLimit, limit=max_body_bytes)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(Exception, _internal)

"""How `nmt serve` answers errors: always a JSON body {"error": one line}, limit errors also name the config key
({"limit": "serve.KEY"}), and those worth retrying say when (Retry-After). The error the endpoints raise, and the
handlers that give FastAPI's own errors (invalid requests, malformed JSON, anything unexpected) that shape."""

from __future__ import annotations

import math
from typing import Any

from nmt.serve.web import FastAPI, HTTPException, JSONResponse, Request, RequestValidationError

MAX_MESSAGE = 300  # characters of an error line: a client's own input is never echoed whole


class ApiError(HTTPException):
    """An error answer: {"error": message} (+ "limit": the config key that was exceeded, + a Retry-After header
    in whole seconds). An HTTPException, so FastAPI passes it through unchanged even when raised while it reads
    the body."""

    def __init__(self, status: int, message: str, limit: str | None = None, retry_after: float | None = None):
        headers = {"Retry-After": str(max(1, math.ceil(retry_after)))} if retry_after is not None else None
        super().__init__(status_code=status, detail=message, headers=headers)
        self.limit = limit


def shown(value: Any, width: int = 40) -> str:
    """A client's value as an error message shows it: at most `width` characters."""
    text = str(value)
    return text if len(text) <= width else f"{text[:width]}... ({len(text)} characters)"


def error_body(message: str, limit: str | None = None) -> dict[str, Any]:
    line = " ".join(message.split())
    body: dict[str, Any] = {"error": line if len(line) <= MAX_MESSAGE else line[:MAX_MESSAGE] + "..."}
    if limit:
        body["limit"] = limit
    return body


def json_error(status: int, message: str, limit: str | None = None, headers: dict | None = None) -> JSONResponse:
    return JSONResponse(error_body(message, limit), status_code=status, headers=headers)


def error_response(e: HTTPException) -> JSONResponse:
    return json_error(e.status_code, str(e.detail), getattr(e, "limit", None), getattr(e, "headers", None))


def validation_message(errors: list[dict[str, Any]]) -> str:
    """The first of pydantic's errors as one line: "where: what"."""
    first = errors[0]
    where = ".".join(shown(x) for x in first.get("loc", ()) if x != "body")
    return f"{where}: {first.get('msg', 'invalid')}" if where else str(first.get("msg", "invalid"))


async def _http_error(request: Request, e: HTTPException) -> JSONResponse:
    return error_response(e)


async def _invalid(request: Request, e: RequestValidationError) -> JSONResponse:
    errors = list(e.errors())
    if any(err.get("type") == "json_invalid" for err in errors):
        reason = (errors[0].get("ctx") or {}).get("error", "JSON decode error")
        return json_error(400, f"malformed JSON body: {reason}")
    detail = [{k: err[k] for k in ("loc", "msg", "type") if k in err} for err in errors]
    return JSONResponse({**error_body(validation_message(errors)), "detail": detail}, status_code=422)


async def _internal(request: Request, e: Exception) -> JSONResponse:  # logged by uvicorn; the client gets a line
    return json_error(500, f"internal error: {type(e).__name__}")


def add_error_handlers(app: FastAPI) -> None:
    """A JSON answer for every error the app raises."""
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(Exception, _internal)

"""Request bodies as dicts, read by hand rather than by FastAPI's validation: the API key in a body is checked
before the rest of it is (a client without the key learns nothing of the schema), and what does not parse is a
400 that says why. JSON, or a form (urlencoded or multipart) as LibreTranslate accepts."""

from __future__ import annotations

import json
from typing import Any

from nmt.errors import first_line
from nmt.serve.http_errors import ApiError
from nmt.serve.web import HTTPException, Request


def _content_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


async def json_object(request: Request) -> dict[str, Any]:
    """The JSON body, which must be an object."""
    try:
        body = json.loads(await request.body())
    except RecursionError:
        raise ApiError(400, "malformed JSON body: nested too deep") from None
    except ValueError as e:  # JSON (or its UTF-8) that does not parse
        raise ApiError(400, f"malformed JSON body: {first_line(e)}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "Invalid request: the JSON body must be an object")
    return body


async def form_or_json(request: Request) -> dict[str, Any]:
    """The parameters as a dict: a JSON body, else the query string and a form body (repeated fields as lists;
    uploaded files ignored), as LibreTranslate reads them (some clients send everything in the query string)."""
    kind = _content_type(request)
    if (kind == "application/json" or kind.endswith("+json")) and await request.body():
        return await json_object(request)
    return {**dict(request.query_params), **await _form(request, kind)}


async def _form(request: Request, kind: str) -> dict[str, Any]:
    if kind in ("application/x-www-form-urlencoded", "multipart/form-data"):
        try:
            form = await request.form()
        except HTTPException:
            raise
        except Exception as e:  # multipart parser errors differ between versions
            raise ApiError(400, f"malformed form body: {first_line(e)}") from None
        values = {k: [v for v in form.getlist(k) if isinstance(v, str)] for k in form}
        return {k: v[0] if len(v) == 1 else v for k, v in values.items() if v}
    if not await request.body():  # nothing but the query string
        return {}
    raise ApiError(415, f"unsupported content type '{kind}': send JSON or a form")

"""What LibreTranslate's clients ask a server besides translations: `GET /frontend/settings` (its front-end and
desktop clients read the limits, the file formats and whether a key is needed), `GET /spec` (some clients accept a
server only if it calls itself LibreTranslate there), and `POST /suggest`, which this server does not offer, answered
as a LibreTranslate server with it switched off answers (files: nmt.serve.files)."""

from __future__ import annotations

import asyncio
import contextlib
import functools

from nmt.errors import NmtError
from nmt.serve.http_errors import ApiError
from nmt.serve.models import language_name
from nmt.serve.native import Api
from nmt.serve.web import FastAPI, JSONResponse
from nmt.translation.documents import FORMATS, REFUSED, format_module

FRONTEND_TIMEOUT_MS = 500  # how long a front-end waits after typing before it translates (LibreTranslate's)


@functools.cache
def supported_extensions() -> list[str]:
    """The document extensions served (nmt.serve.files), as LibreTranslate lists them ([".txt", ".docx", ...]): those
    of the formats whose module and library import here (PDF is refused: nmt.translation.documents.REFUSED)."""
    def available(fmt: str) -> bool:
        with contextlib.suppress(NmtError):
            return format_module(fmt) is not None
        return False

    return [ext for ext, fmt in FORMATS.items() if fmt not in REFUSED and available(fmt)]


def add_routes(app: FastAPI, api: Api) -> None:
    async def frontend_settings() -> JSONResponse:
        pairs = api.models.pairs()
        target = next(iter(pairs))[1]
        formats = await asyncio.to_thread(supported_extensions)  # imports the formats' libraries, once
        return JSONResponse({
            "charLimit": api.limits.max_chars,  # per line here: a text of lines within it is always taken
            "frontendTimeout": FRONTEND_TIMEOUT_MS,
            "apiKeys": api.api_key is not None, "keyRequired": api.api_key is not None,
            "suggestions": False, "filesTranslation": True, "supportedFilesFormat": formats,
            "language": {"source": {"code": "auto", "name": "Auto Detect"},
                         "target": {"code": target, "name": language_name(target)}},
        })

    async def spec() -> JSONResponse:
        document = app.openapi()
        info = {**document["info"], "title": "LibreTranslate", "x-server": "nmt serve"}
        return JSONResponse({**document, "info": info})

    async def suggest() -> JSONResponse:
        raise ApiError(403, "Suggestions are disabled on this server.")

    app.get("/frontend/settings", summary="LibreTranslate: limits, key and defaults for front-ends")(frontend_settings)
    app.get("/spec", summary="LibreTranslate: this API's OpenAPI document (titled LibreTranslate for its clients)"
            )(spec)
    app.post("/suggest", summary="LibreTranslate: suggestions (not offered: 403)")(suggest)

"""What LibreTranslate's clients ask a server besides translations: `GET /frontend/settings` (its front-end and
desktop clients read the limits and whether a key is needed), `GET /spec` (some clients accept a server only if it
calls itself LibreTranslate there), and `POST /suggest` and `POST /translate_file`, which this server does not
offer, answered as a LibreTranslate server with them switched off answers."""

from __future__ import annotations

from nmt.serve.http_errors import ApiError
from nmt.serve.models import language_name
from nmt.serve.native import Api
from nmt.serve.web import FastAPI, JSONResponse

FRONTEND_TIMEOUT_MS = 500  # how long a front-end waits after typing before it translates (LibreTranslate's)


def add_routes(app: FastAPI, api: Api) -> None:
    async def frontend_settings() -> JSONResponse:
        pairs = api.models.pairs()
        target = next(iter(pairs))[1]
        return JSONResponse({
            "charLimit": api.limits.max_chars,  # per line here: a text of lines within it is always taken
            "frontendTimeout": FRONTEND_TIMEOUT_MS,
            "apiKeys": api.api_key is not None, "keyRequired": api.api_key is not None,
            "suggestions": False, "filesTranslation": False, "supportedFilesFormat": [],
            "language": {"source": {"code": "auto", "name": "Auto Detect"},
                         "target": {"code": target, "name": language_name(target)}},
        })

    async def spec() -> JSONResponse:
        document = app.openapi()
        info = {**document["info"], "title": "LibreTranslate", "x-server": "nmt serve"}
        return JSONResponse({**document, "info": info})

    async def suggest() -> JSONResponse:
        raise ApiError(403, "Suggestions are disabled on this server.")

    async def translate_file() -> JSONResponse:
        raise ApiError(403, "Files translation are disabled on this server.")

    app.get("/frontend/settings", summary="LibreTranslate: limits, key and defaults for front-ends")(frontend_settings)
    app.get("/spec", summary="LibreTranslate: this API's OpenAPI document (titled LibreTranslate for its clients)"
            )(spec)
    app.post("/suggest", summary="LibreTranslate: suggestions (not offered: 403)")(suggest)
    app.post("/translate_file", summary="LibreTranslate: file translation (not offered: 403)")(translate_file)

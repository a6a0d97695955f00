"""The web page of `nmt serve` at `/`: a text box, source (with "detect") and target languages from
GET /languages, translate-as-you-type over POST /translate, alternatives, copy, the cross-attention heatmap of
a translated line from POST /v1/translate, and that line inside the model from POST /v1/explain, drawn by the
renderer of `nmt explain` (nmt/explain/static, served as static/explain.js and static/explain.css). Plain HTML,
CSS and JavaScript in the package (nmt/serve/static): no build step, nothing fetched from elsewhere at run time;
the page's Content-Security-Policy allows only this server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nmt.explain.page import RENDERER, STYLE
from nmt.serve.web import FastAPI

STATIC = Path(__file__).resolve().parent / "static"
# Only this server: no CDN, no inline script, no framing (the page holds an API key field); `data:` images for
# the empty favicon that keeps browsers from asking for /favicon.ico.
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def add_page(app: FastAPI) -> None:
    """GET / (the page) and GET /static/... (its script and style sheet), left out of the OpenAPI docs."""
    from starlette.responses import FileResponse
    from starlette.staticfiles import StaticFiles

    async def page() -> FileResponse:
        return FileResponse(STATIC / "index.html", media_type="text/html; charset=utf-8", headers=HEADERS)

    app.get("/", include_in_schema=False)(page)
    for path, media in ((RENDERER, "text/javascript"), (STYLE, "text/css")):  # shared with `nmt explain`'s pages
        app.get(f"/static/{path.name}", include_in_schema=False)(_file(path, media))
    app.mount("/static", StaticFiles(directory=STATIC), name="static")


def _file(path: Path, media: str) -> Any:
    """GET handler of one file of the package (before the /static mount, which would not find it)."""
    from starlette.responses import FileResponse

    async def get() -> FileResponse:
        return FileResponse(path, media_type=f"{media}; charset=utf-8", headers={
            "X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"})

    return get

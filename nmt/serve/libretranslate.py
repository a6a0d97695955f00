"""The LibreTranslate dialect of `nmt serve`: `POST /translate` and `GET /languages` as LibreTranslate answers
them, so that its clients work unchanged. Its requests come as JSON or as forms; they go through the native
API's checks and queue (nmt.serve.native.Api)."""

from __future__ import annotations

from typing import Any

from nmt.serve.bodies import form_or_json
from nmt.serve.html import parse_html
from nmt.serve.http_errors import ApiError, shown, validation_message
from nmt.serve.native import Api
from nmt.serve.web import BaseModel, FastAPI, Field, JSONResponse, Request, ValidationError


class LibreRequest(BaseModel):
    """LibreTranslate's /translate parameters (other fields are ignored, as LibreTranslate does)."""

    q: str | list[str]
    source: str = "auto"
    target: str | None = None
    format: str | None = "text"
    api_key: str | None = None
    alternatives: int = Field(0, ge=0)


LANGUAGE_NAMES = {
    "ar": "Arabic", "cs": "Czech", "da": "Danish", "de": "German", "el": "Greek", "en": "English", "es": "Spanish",
    "fi": "Finnish", "fr": "French", "hi": "Hindi", "hu": "Hungarian", "it": "Italian", "ja": "Japanese",
    "ko": "Korean", "nl": "Dutch", "pl": "Polish", "pt": "Portuguese", "ro": "Romanian", "ru": "Russian",
    "sv": "Swedish", "tr": "Turkish", "uk": "Ukrainian", "zh": "Chinese",
}


def add_routes(app: FastAPI, api: Api) -> None:
    """GET /languages and POST /translate over `api` (the handlers' names are the OpenAPI operation names)."""

    async def languages() -> JSONResponse:
        src, tgt = api.model().langs
        return JSONResponse([{"code": code, "name": LANGUAGE_NAMES.get(code, code), "targets": targets}
                             for code, targets in ((src, [tgt]), (tgt, []))])

    async def libre(request: Request) -> JSONResponse:
        return await translate(api, request)

    app.get("/languages", summary="LibreTranslate: the languages this model translates")(languages)
    app.post("/translate", summary="LibreTranslate: q (string or list), source, target, format=text; JSON or form",
             openapi_extra={"requestBody": {"content": {"application/json": {
                 "schema": LibreRequest.model_json_schema()}}}})(libre)


async def translate(api: Api, request: Request) -> JSONResponse:
    """POST /translate: each line of each text is one model sentence; `alternatives` are n-best 2, 3, ..."""
    src, tgt = api.model().langs
    body = await form_or_json(request)
    api.authorize(request, body.get("api_key"))
    try:
        req = LibreRequest.model_validate(body)
    except ValidationError as e:
        raise ApiError(400, f"Invalid request: {validation_message(e.errors())}") from None
    if req.source.lower() not in ("auto", src):
        raise ApiError(400, f"source language '{shown(req.source)}' is not available: this model translates "
                            f"{src}->{tgt}")
    if req.target is not None and req.target.lower() != tgt:
        raise ApiError(400, f"target language '{shown(req.target)}' is not available: this model translates "
                            f"{src}->{tgt}")
    fmt = (req.format or "text").lower()
    if fmt not in ("text", "html"):
        raise ApiError(400, f"{shown(req.format)} format is not supported")
    texts = [req.q] if isinstance(req.q, str) else req.q
    if fmt == "html":
        return JSONResponse(await _translate_html(api, request, req, texts))
    lines = [text.replace("\r\n", "\n").split("\n") for text in texts]  # one model sentence per line
    flat = [line for item in lines for line in item]
    api.check_sentences(flat)
    k = req.alternatives
    if k >= api.limits.max_beam:
        raise ApiError(400, f"alternatives {shown(k)} is over the limit serve.max_beam - 1 = {api.limits.max_beam - 1}",
                       "serve.max_beam")
    beam = api.model().translator.decode.beam
    search = api.search(None if k < beam else k + 1, k + 1)  # LibreTranslate's alternatives: n-best 2, 3, ...
    results = iter(await api.translate(request, flat, search))
    per_text = [[next(results) for _ in item] for item in lines]
    best = ["\n".join(r.text[0] for r in rs) for rs in per_text]
    answer: dict[str, Any] = {"translatedText": best[0] if isinstance(req.q, str) else best}
    if k:
        alts = [["\n".join(r.text[i] if i < len(r.text) else r.text[0] for r in rs) for i in range(1, k + 1)]
                for rs in per_text]
        answer["alternatives"] = alts[0] if isinstance(req.q, str) else alts
    return JSONResponse(answer)


async def _translate_html(api: Api, request: Request, req: LibreRequest, texts: list[str]) -> dict[str, Any]:
    """format=html: the sentences of each fragment's text nodes are translated (nmt.serve.html), the markup comes
    back as sent; `alternatives` are empty, as LibreTranslate gives them for HTML."""
    docs = [parse_html(text) for text in texts]
    flat = [sentence for doc in docs for sentence in doc.texts]
    api.check_sentences(flat)
    results = iter(await api.translate(request, flat, api.search(None, None)) if flat else [])
    rendered = [doc.render([next(results).text[0] for _ in doc.texts]) for doc in docs]
    answer: dict[str, Any] = {"translatedText": rendered[0] if isinstance(req.q, str) else rendered}
    if req.alternatives:
        answer["alternatives"] = [] if isinstance(req.q, str) else [[] for _ in texts]
    return answer

"""The LibreTranslate dialect of `nmt serve`: `POST /translate`, `POST /detect` and `GET /languages` as
LibreTranslate answers them (its error strings included, which clients match), so that its clients work unchanged.
Requests come as JSON or as forms; they go through the native API's checks and queue (nmt.serve.native.Api).
`source: "auto"` detects the language among those served (nmt.serve.detect). Codes are taken as clients write them
(zh-CN, zh_TW, ZH-hans, pt-br) and answered as nmt.langcodes writes them (zh, zh-Hant, pt-BR), as /languages
lists them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from nmt.errors import NmtError, first_line
from nmt.serve.bodies import form_or_json
from nmt.serve.detect import Candidates, Detector
from nmt.serve.http_errors import ApiError, shown, validation_message
from nmt.serve.native import Api
from nmt.serve.web import BaseModel, FastAPI, Field, JSONResponse, Request, ValidationError
from nmt.serve.worker import Service
from nmt.translation.alignment import aligned
from nmt.translation.documents.html import parse_html
from nmt.workbudget import OverBudget, WorkBudget, bounded

T = TypeVar("T")


class LibreRequest(BaseModel):
    """LibreTranslate's /translate parameters (other fields are ignored, as LibreTranslate does)."""

    q: str | list[str]
    source: str | None = None  # LibreTranslate requires it; missing here: the only model's source language
    target: str | None = None
    format: str | None = "text"
    api_key: str | None = None
    alternatives: int = Field(0, ge=0)


def add_routes(app: FastAPI, api: Api) -> None:
    """GET /languages and POST /translate over `api` (the handlers' names are the OpenAPI operation names)."""

    async def languages() -> JSONResponse:
        return JSONResponse(api.models.languages())

    async def libre(request: Request) -> JSONResponse:
        return await translate(api, request)

    async def detect(request: Request) -> JSONResponse:
        body = await form_or_json(request)
        api.authorize(request, body.get("api_key") or None)
        q = body.get("q")
        texts = [q] if isinstance(q, str) else q if isinstance(q, list) and all(isinstance(t, str) for t in q) else []
        if not "".join(texts).strip():
            raise ApiError(400, "Invalid request: missing q parameter")
        candidates = _merged(await asyncio.gather(*(_detect(api, t) for t in texts)))
        candidates = candidates or [(api.models.sources()[0], 0.0)]  # never empty, as LibreTranslate answers
        return JSONResponse([{"confidence": c, "language": code} for code, c in candidates])

    app.post("/detect", summary="LibreTranslate: the languages q may be in (among those served), best first")(detect)

    app.get("/languages", summary="LibreTranslate: the languages served, each with the targets it translates into"
            )(languages)
    app.post("/translate", summary="LibreTranslate: q (string or list), source, target, format=text; JSON or form",
             openapi_extra={"requestBody": {"content": {"application/json": {
                 "schema": LibreRequest.model_json_schema()}}}})(libre)


async def translate(api: Api, request: Request) -> JSONResponse:
    """POST /translate: each line of each text is one model sentence; `alternatives` are n-best 2, 3, ..."""
    api.models.ready()
    body = await form_or_json(request)
    api.authorize(request, body.get("api_key") or None)  # LibreTranslate's clients send "" or null for no key
    if not body.get("q"):
        raise ApiError(400, "Invalid request: missing q parameter")
    if isinstance(body.get("alternatives"), int | str) and str(body["alternatives"]).lstrip("-").isdigit():
        body["alternatives"] = max(0, int(body["alternatives"]))  # LibreTranslate takes a negative number as 0
    try:
        req = LibreRequest.model_validate(body)
    except ValidationError as e:
        raise ApiError(400, f"Invalid request: {validation_message(e.errors())}") from None
    fmt = (req.format or "text").lower()
    if fmt not in ("text", "html"):
        raise ApiError(400, f"{shown(req.format)} format is not supported")
    texts = [req.q] if isinstance(req.q, str) else req.q
    _check_size(api, texts)
    source, target = req.source or None, req.target or None  # as written: routing canonicalises (nmt.langcodes)
    detected = None
    if (source or "").lower() == "auto":  # LibreTranslate detects over all the texts together, answers it for each
        source, confidence = await _source_of(api, " ".join(texts), api.models.canonical(target))
        one = {"confidence": confidence, "language": source}
        detected = one if isinstance(req.q, str) else [one] * len(texts)
    service = api.models.route(source, target)
    if fmt == "html":
        answer = await _translate_html(api, request, service, req, texts)
        return JSONResponse(answer if detected is None else {**answer, "detectedLanguage": detected})
    lines = [text.replace("\r\n", "\n").split("\n") for text in texts]  # one model sentence per line
    flat = [line for item in lines for line in item]
    api.check_sentences(flat, libre=True)
    k = req.alternatives
    if k >= api.limits.max_beam:
        raise ApiError(400, f"alternatives {shown(k)} is over the limit serve.max_beam - 1 = {api.limits.max_beam - 1}",
                       "serve.max_beam")
    beam = service.model.translator.decode.beam  # type: ignore[union-attr]
    search = api.search(service, None if k < beam else k + 1, k + 1)  # LibreTranslate's alternatives: n-best 2, ...
    results = iter(await api.translate(request, service, flat, search))
    per_text = [[next(results) for _ in item] for item in lines]
    best = ["\n".join(r.text[0] for r in rs) for rs in per_text]
    answer: dict[str, Any] = {"translatedText": best[0] if isinstance(req.q, str) else best}
    if k:
        alts = [["\n".join(r.text[i] if i < len(r.text) else r.text[0] for r in rs) for i in range(1, k + 1)]
                for rs in per_text]
        answer["alternatives"] = alts[0] if isinstance(req.q, str) else alts
    if detected is not None:
        answer["detectedLanguage"] = detected
    return JSONResponse(answer)


async def _translate_html(api: Api, request: Request, service: Service, req: LibreRequest, texts: list[str]
                          ) -> dict[str, Any]:
    """format=html: the sentences of each fragment, across its inline tags, are translated with their attention and
    the inline tags put on the aligned words (nmt.translation.documents.html), the markup comes back as sent;
    `alternatives` are empty, as LibreTranslate gives them for HTML."""
    budget = WorkBudget.within("the request", api.limits.request_timeout)
    docs = await _bounded(budget, lambda: [parse_html(text) for text in texts])
    flat = [sentence for doc in docs for sentence in doc.texts]
    api.check_sentences(flat, libre=True)
    search = api.search(service, None, None)._replace(attention=True)
    results = list(await api.translate(request, service, flat, search) if flat else [])
    tokenizer = service.model.translator.tokenizer  # type: ignore[union-attr]

    def render() -> list[str]:
        done = iter(results)
        return [doc.render([aligned(tokenizer, next(done)) for _ in doc.texts]) for doc in docs]

    rendered = await _bounded(budget, render)
    answer: dict[str, Any] = {"translatedText": rendered[0] if isinstance(req.q, str) else rendered}
    if req.alternatives:
        answer["alternatives"] = [] if isinstance(req.q, str) else [[] for _ in texts]
    return answer


def _check_size(api: Api, texts: list[str]) -> None:
    """All of q within serve.max_sentences x serve.max_chars characters, before it is split or parsed (the
    sentences are checked one by one after)."""
    total, most = sum(len(text) for text in texts), api.limits.max_sentences * api.limits.max_chars
    if total > most:
        raise ApiError(400, f"Invalid request: request ({total}) exceeds text limit ({most}): q has {total} "
                       f"characters, over serve.max_sentences x serve.max_chars = {most}", "serve.max_chars")


async def _bounded(budget: WorkBudget, work: Callable[[], T]) -> T:
    """`work` under `budget` on a worker thread, so that the event loop (and /health) stays free; over the budget:
    a JSON 400 (past its deadline: 503)."""

    def run() -> T:
        with bounded(budget):
            return work()

    try:
        return await asyncio.to_thread(run)
    except OverBudget as e:
        raise ApiError(400, f"Invalid request: {first_line(e)}") from None
    except NmtError as e:  # TimedOut, Cancelled
        raise ApiError(503, first_line(e)) from None


async def _detect(api: Api, text: str) -> Candidates:
    """The candidates among the source languages served (the detector is built on first use, off the event
    loop)."""
    if api.detector is None:
        api.detector = await asyncio.to_thread(Detector, api.models.sources())
    return await asyncio.to_thread(api.detector.detect, text)


async def _source_of(api: Api, text: str, target: str | None) -> tuple[str, float]:
    """The detected source language (and its confidence) among those with a model into `target`; the first such
    language with confidence 0 when the text says nothing (LibreTranslate's fallback)."""
    fits = [src for src, tgt in api.models.pairs() if target in (None, tgt)] or api.models.sources()
    found = [c for c in _merged([await _detect(api, text)]) if c[0] in fits]
    return found[0] if found else (fits[0], 0.0)


def _merged(rankings: list[Candidates]) -> Candidates:
    """One ranking of several texts' candidates, confidences averaged (LibreTranslate's /detect of a list)."""
    totals: dict[str, float] = {}
    for ranking in rankings:
        for code, confidence in ranking:
            totals[code] = totals.get(code, 0.0) + confidence
    return sorted(((code, round(total / len(rankings), 2)) for code, total in totals.items()), key=lambda c: -c[1])

"""POST /v1/explain: one sentence walked through the model, the data `nmt explain` draws (nmt/explain/command.py), for
the web page's "inside the model" view, which draws it with the same renderer (nmt/explain/static/explain.js).

It goes where every translation request goes: the key, the body limits, serve.max_chars, the rate limits, then the
batcher's queue (bounded by serve.max_queue_seconds, answered within serve.request_timeout): the model thread
computes it between batches (nmt.serve.worker, Search.explain). A sentence of more than MAX_TOKENS pieces is
refused: its attention pictures grow with the square of its length, too much to send and draw on a page.
"""

from __future__ import annotations

from typing import Any

from nmt.serve.bodies import json_object
from nmt.serve.http_errors import ApiError, validation_message
from nmt.serve.native import Api
from nmt.serve.web import BaseModel, ConfigDict, FastAPI, Field, JSONResponse, Request, ValidationError

MAX_TOKENS = 128  # source pieces


class ExplainRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    sentence: str = Field(description="The sentence (one line) to translate and explain.")
    source: str | None = Field(None, description="Source language; needed only when the server has several models.")
    target: str | None = Field(None, description="Target language; needed only when the server has several models.")
    beam: int | None = Field(None, ge=1, description="Beam size (1 = greedy); default: the server's.")
    top_k: int = Field(5, ge=1, le=20, description="Pieces listed per step of the output softmax.")
    query: int = Field(0, ge=0, description="The position whose attention is worked out by hand.")
    api_key: str | None = None


def _request(body: dict[str, Any]) -> ExplainRequest:
    try:
        req = ExplainRequest.model_validate(body)
    except ValidationError as e:
        raise ApiError(422, validation_message(e.errors())) from None
    if "\n" in req.sentence or "\r" in req.sentence:
        raise ApiError(422, "the sentence holds a line break: explain one line at a time")
    if not req.sentence.strip():
        raise ApiError(422, "the sentence is empty: nothing to explain")
    return req


def add_explain(app: FastAPI, api: Api) -> None:
    """POST /v1/explain over `api`'s models and limits."""

    async def explain(request: Request) -> JSONResponse:
        api.models.ready()
        body = await json_object(request)
        api.authorize(request, body.get("api_key"))
        req = _request(body)
        api.check_sentences([req.sentence])
        service = api.models.route(req.source, req.target)
        translator = service.translator
        tokens = len(translator.tokenizer.encode_src([req.sentence])[0])
        if tokens > MAX_TOKENS:
            raise ApiError(400, f"the sentence has {tokens} pieces, over the limit of {MAX_TOKENS} for /v1/explain "
                                "(its pictures grow with the square of its length)")
        search = api.search(service, req.beam, 1)._replace(explain=(req.top_k, req.query))
        [data] = await api.translate(request, service, [req.sentence], search)
        return JSONResponse(data)

    app.post("/v1/explain", summary="One sentence through the model, step by step (what `nmt explain` draws)",
             openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
                 "schema": ExplainRequest.model_json_schema()}}}})(explain)

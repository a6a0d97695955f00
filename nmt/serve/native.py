"""`nmt serve`'s own API over one Service: GET /health (503 until the model is loaded), GET /v1/info, and
POST /v1/translate (a list of sentences, per-request beam / n-best / scores). `Api` also holds what every
translation endpoint does, the LibreTranslate dialect's too: check the key and the limits, choose the search
settings, queue the sentences and await them (dropping those not yet started when the client leaves)."""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import logging
from concurrent.futures import Future
from typing import Any

from nmt.config.serve import ServeConfig
from nmt.errors import first_line
from nmt.serve.batcher import Closed, Full
from nmt.serve.bodies import json_object
from nmt.serve.http_errors import ApiError, validation_message
from nmt.serve.models import Models
from nmt.serve.ratelimit import RateLimits
from nmt.serve.requested import requested_search
from nmt.serve.web import BaseModel, ConfigDict, Field, HTTPException, JSONResponse, Request, ValidationError
from nmt.serve.worker import Search, Service
from nmt.translation import glossary
from nmt.translation.translator import Translation

log = logging.getLogger("uvicorn.error")


class NativeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt option is an error, not silently ignored

    sentences: list[str] = Field(description="One sentence (line) each; answers come back in the same order.")
    source: str | None = Field(None, description="Source language; needed only when the server has several models.")
    target: str | None = Field(None, description="Target language; needed only when the server has several models.")
    beam: int | None = Field(None, ge=1, description="Beam size (1 = greedy); default: the server's.")
    nbest: int | None = Field(None, ge=1, description="Also return the N best hypotheses of each sentence.")
    scores: bool = Field(False, description="Add score (log-prob / length penalty) and logprob.")
    attention: bool = Field(False, description="Add the best translation's cross-attention: source and target "
                                               "pieces and weights[target][source] (what `nmt translate "
                                               "--attention` plots).")
    glossary: dict[str, str] | None = Field(None, description="Terms the translations must hold, {source: target} "
                                           "(an empty target: keep the source words), on top of the server's "
                                           "--glossary; rules as `nmt translate --glossary`.")
    api_key: str | None = None


async def disconnected(request: Request) -> None:
    """Returns when the client goes away (the body is read by now, so the next message can only be that)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _results(request: Request, futures: list[Future], timeout: float) -> list[Any]:
    """Await the sentences' results. When the client leaves, the request times out, or the handler is cancelled
    (a shutdown past its time), what has not started is dropped from the queue."""
    gathered = asyncio.gather(*(asyncio.wrap_future(f) for f in futures))
    gathered.add_done_callback(lambda g: g.cancelled() or g.exception())  # retrieved: no "never retrieved" log
    gone = asyncio.ensure_future(disconnected(request))
    try:
        await asyncio.wait({gathered, gone}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        gathered.cancel()  # reaches the queued futures: the model thread drops them
        raise
    finally:
        gone.cancel()
    if gathered.done():
        return gathered.result()
    gathered.cancel()
    if gone.done() and not gone.cancelled():
        log.info("%s:%d left before its answer (%d sentences unanswered): those not started are dropped",
                 *client_of(request), sum(not f.done() for f in futures))
        raise ApiError(499, "client closed the request")
    raise ApiError(503, f"not translated within serve.request_timeout={timeout:g} s (the server is busy)",
                   "serve.request_timeout", retry_after=timeout)


def _busy(full: Full) -> ApiError:
    return ApiError(503, str(full), "serve.max_queue_seconds", retry_after=full.retry_after)


def _closing(closed: Closed) -> ApiError:
    return ApiError(503, str(closed), retry_after=5)


def client_of(request: Request) -> tuple[str, int]:
    """Who a request is from: its address and port (the connection), as uvicorn gives it (behind a trusted proxy,
    the address it forwarded)."""
    return (request.client.host, request.client.port) if request.client else ("unknown", 0)


class Api:
    """The endpoints over the models (one Service each); checks limits and keys, queues sentences, shapes the
    answers."""

    def __init__(self, models: Models, limits: ServeConfig, api_key: str | None):
        self.models, self.limits, self.api_key = models, limits, api_key
        self.rate_limits = RateLimits(limits)
        self.detector: Any = None  # nmt.serve.detect.Detector over the languages served, built on first use
        self.requests = 0  # translation requests being answered (event-loop thread only)
        self.glossary = glossary.load(limits.glossary) if limits.glossary else None

    # ---- checks
    def authorize(self, request: Request, body_key: Any) -> None:
        """The key of `Authorization: Bearer KEY`, else the body's api_key (LibreTranslate clients send it there);
        anything else is 403."""
        if self.api_key is None:
            return
        header = request.headers.get("authorization")
        scheme, _, token = (header or "").strip().partition(" ")
        given = token.strip() if header is not None and scheme.lower() == "bearer" else None
        if header is None and isinstance(body_key, str):
            given = body_key
        if not given:  # LibreTranslate's words for both (clients match them)
            raise ApiError(403, "Please contact the server operator to obtain an API key")
        if not hmac.compare_digest(given.encode("utf-8", "surrogatepass"),
                                   self.api_key.encode("utf-8", "surrogatepass")):
            raise ApiError(403, "Invalid API key")

    def refusal(self, body_bytes: int) -> ApiError | None:
        """The 503 a translation request of this size gets when every model's queue is full (its characters are
        at most its bytes), known before it is read; None while there is room somewhere or no model yet."""
        refusals = [s.batcher.refusal(body_bytes) for s in self.models.services if s.batcher is not None]
        return _busy(refusals[0]) if refusals and all(r is not None for r in refusals) else None

    def check_sentences(self, lines: list[str], libre: bool = False) -> None:
        """serve.max_sentences and serve.max_chars; `libre`: worded as LibreTranslate words its text limit, which
        its clients match ("exceeds text limit"), our words after it."""
        n, limit = len(lines), self.limits
        over = [(i, len(line)) for i, line in enumerate(lines, 1) if len(line) > limit.max_chars][:1]
        if n > limit.max_sentences:
            size, most, ours = n, limit.max_sentences, (f"{n} sentences in one request, over the limit "
                                                        f"serve.max_sentences={limit.max_sentences}")
            key = "serve.max_sentences"
        elif over:
            (i, chars), most, key = over[0], limit.max_chars, "serve.max_chars"
            size, ours = chars, f"sentence {i} has {chars} characters, over the limit serve.max_chars={most}"
        else:
            return
        prefix = f"Invalid request: request ({size}) exceeds text limit ({most}): " if libre else ""
        raise ApiError(400, prefix + ours, key)

    def search(self, service: Service, beam: int | None, nbest: int | None,
               terms: dict[str, str] | None = None) -> Search:
        """The request's search settings (nmt.serve.requested)."""
        return requested_search(service.translator.decode, self.limits, self.glossary,
                                beam, nbest, terms)

    async def translate(self, request: Request, service: Service, lines: list[str], search: Search
                        ) -> list[Translation]:
        client = client_of(request)
        self.rate_limits.check(client[0], sum(map(len, lines)))
        try:
            futures = service.batcher.submit(lines, search, client[0])  # type: ignore[union-attr]
        except Full as e:
            raise _busy(e) from None
        except Closed as e:
            raise _closing(e) from None
        self.requests += 1
        try:
            results = await _results(request, futures, self.limits.request_timeout)
        except HTTPException:
            raise
        except Closed as e:  # shutdown came before its turn
            raise _closing(e) from None
        except Exception as e:  # the model failed on this batch: the operator gets the traceback, the client a line
            log.error("translation failed", exc_info=e)
            raise ApiError(500, f"Cannot translate text: {first_line(e)}") from None  # LibreTranslate's words
        finally:
            self.requests -= 1
        if long := [(i, r) for i, r in enumerate(results, 1) if getattr(r, "truncated_from", 0)]:  # explain: dicts
            named = ", ".join(f"{i} ({r.truncated_from} tokens)" for i, r in long[:5])
            log.warning("request from %s:%d: sentence %s%s truncated to %d tokens", *client, named,
                        f" and {len(long) - 5} more" if len(long) > 5 else "", len(long[0][1].src_ids))
        return results

    # ---- endpoints
    async def health(self) -> JSONResponse:  # async: FastAPI would run a plain def on a worker thread
        if (error := self.models.error) is not None:
            return JSONResponse({"status": "failed", "error": error}, status_code=503)
        batchers = [s.batcher for s in self.models.services]
        if any(b is None for b in batchers):
            return JSONResponse({"status": "loading"}, status_code=503)
        seconds = [b.queued_seconds for b in batchers if b.queued_seconds is not None]  # type: ignore[union-attr]
        return JSONResponse({"status": "ready", "requests": self.requests,
                             "queued": sum(b.queued for b in batchers),  # type: ignore[union-attr]
                             "queued_seconds": round(max(seconds), 3) if seconds else None,
                             "batches": sum(b.batches for b in batchers),  # type: ignore[union-attr]
                             "sentences": sum(b.sentences for b in batchers),  # type: ignore[union-attr]
                             "characters_per_second": round(sum(b.rate or 0 for b in batchers)),  # type: ignore
                             "models": [{"languages": "-".join(s.model.langs), "queued": s.batcher.queued,
                                         "sentences": s.batcher.sentences}  # type: ignore[union-attr]
                                        for s in self.models.services]})

    async def info(self) -> JSONResponse:
        """The first model's checkpoint, languages and search at the top (one-model clients), every model in
        "models", with the memory its weights take."""
        models = self.models.info()
        return JSONResponse({**{k: models[0][k] for k in ("model", "languages", "decode", "device", "dtype",
                                                          "quantize")}, "models": models,
                             "serve": {**{k: v for k, v in dataclasses.asdict(self.limits).items()
                                          if k not in ("host", "port", "glossary")},  # not the server's paths
                                       "glossary_terms": len(self.glossary.terms) if self.glossary else 0}})

    async def native(self, request: Request) -> JSONResponse:
        self.models.ready()
        body = await json_object(request)
        self.authorize(request, body.get("api_key"))
        try:
            req = NativeRequest.model_validate(body)
        except ValidationError as e:
            raise ApiError(422, validation_message(e.errors())) from None
        for i, s in enumerate(req.sentences, 1):
            if "\n" in s or "\r" in s:
                raise ApiError(422, f"sentence {i} holds a line break: send each line as its own sentence")
        self.check_sentences(req.sentences)
        service = self.models.route(req.source, req.target)
        search = self.search(service, req.beam, req.nbest, req.glossary)._replace(attention=req.attention)
        results = await self.translate(request, service, req.sentences, search)
        answers = [_native_answer(r, search.decode.nbest, req.scores) for r in results]
        if req.attention:
            tokenizer = service.translator.tokenizer
            for answer, r in zip(answers, results):
                answer["attention"] = _attention(r, tokenizer)
        return JSONResponse({"translations": answers})


def _native_answer(r: Translation, nbest: int, scores: bool) -> dict[str, Any]:
    """{"text"} (+ "score", "logprob" with scores; + "nbest": [{"text", "score"(, "logprob")}] for n-best > 1):
    the numbers `nmt translate --scores / --nbest` prints."""
    rows = [(text, h.score, h.logprob) for h, text in zip(r.hypotheses, r.text)] or [("", 0.0, 0.0)]
    answer: dict[str, Any] = {"text": rows[0][0]}
    if scores:
        answer.update(score=rows[0][1], logprob=rows[0][2])
    if nbest > 1:
        answer["nbest"] = [{"text": t, "score": s, **({"logprob": lp} if scores else {})} for t, s, lp in rows]
    return answer


def _attention(r: Translation, tokenizer: Any) -> dict[str, Any] | None:
    """{"source": pieces + EOS, "target": pieces + EOS, "weights": [target][source]} of the best hypothesis
    (weights rounded to 4 decimals; each row sums to 1); None for an empty line."""
    if not r.hypotheses or r.hypotheses[0].attention is None:
        return None
    hyp = r.hypotheses[0]
    weights = [[round(float(w), 4) for w in row] for row in hyp.attention.tolist()]
    return {"source": [*tokenizer.src_id_pieces(r.src_ids), "</s>"][:len(weights[0])],
            "target": [*tokenizer.tgt_pieces(hyp.tokens), "</s>"], "weights": weights}


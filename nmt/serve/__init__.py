"""`nmt serve`: one model behind HTTP, concurrent requests merged into batches.

- LibreTranslate-compatible `POST /translate` and `GET /languages`, so its clients work unchanged;
- native `POST /v1/translate` (a list of sentences, per-request beam / n-best / scores), `GET /health`
  (503 until the model is loaded), `GET /v1/info`.

The model loads on its own thread while the server already answers /health; that thread then does all
inference (nmt.serve.batcher), the asyncio side only validates, queues and awaits. Every error is a JSON body
{"error": one line}, limit errors also name the config key; uvicorn's graceful shutdown on SIGTERM/Ctrl-C
lets in-flight requests finish, and the command exits 0. Nothing is ever written: the checkpoint is read once.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import hmac
import logging
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import torch

from nmt.config import Config, ServeConfig
from nmt.device import keep_freed_memory
from nmt.errors import NmtError, first_line
from nmt.log import console
from nmt.rundir import checkpoint_to_translate
from nmt.serve.batcher import Batcher, Closed
from nmt.translator import ModelOptions, Translation, Translator

INSTALL_HINT = "serving needs FastAPI and uvicorn: pip install 'nmt[serve]'"
try:  # the optional extra: without it `nmt serve` is one error line, like plotting without matplotlib
    import python_multipart  # noqa: F401  (form bodies, as LibreTranslate clients send them)
    import uvicorn
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from pydantic import BaseModel, ConfigDict, Field, ValidationError
    from starlette.exceptions import HTTPException
except ImportError as e:
    raise NmtError(f"{INSTALL_HINT} ({e.name} is missing)") from None


@dataclass
class ServeOptions(ModelOptions):
    api_key: str | None = None
    access_log: bool = True


class Search(NamedTuple):
    """What a batch shares: sentences that ask for other search settings go into other batches."""

    beam: int
    nbest: int


@dataclass
class Model:
    """What the model thread loaded."""

    translator: Translator
    checkpoint: Path
    langs: tuple[str, str]
    config: dict[str, Any]  # the config the checkpoint was trained with
    vocab: dict[str, int]


def load_model(ckpt: Path, cfg: Config, opts: ServeOptions) -> Model:
    translator = Translator.load(ckpt, cfg, opts)
    saved = translator.trained_config
    data = {"src_lang": cfg.data.src_lang, "tgt_lang": cfg.data.tgt_lang, **(saved.get("data") or {})}
    src, tgt = translator.langs or (data["src_lang"], data["tgt_lang"])
    vocab = dict(zip(("src", "tgt"), translator.vocab_sizes))
    return Model(translator, ckpt, (str(src), str(tgt)), saved, vocab)


class Service:
    """The model side: loads the model on its own thread, then runs the batcher there until stopped."""

    def __init__(self, load: Callable[[], Model], limits: ServeConfig, threads: int = 0):
        self._load, self.limits, self._threads = load, limits, threads
        self.model: Model | None = None
        self.batcher: Batcher | None = None
        self.error: str | None = None
        self.on_failure: Callable[[], None] = lambda: None
        self._lock = threading.Lock()
        self._stopped = False
        self._thread = threading.Thread(target=self._main, name="nmt-model", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Finish what is queued and end the model thread (a load still running is abandoned: daemon)."""
        with self._lock:
            self._stopped = True
            batcher = self.batcher
        if batcher is not None:
            batcher.close()
            self._thread.join(self.limits.shutdown_timeout)

    def _main(self) -> None:
        if self._threads > 0:
            torch.set_num_threads(self._threads)
        try:
            model = self._load()
        except Exception as e:  # the server cannot serve: say why and make it exit
            self.error = str(e) if isinstance(e, NmtError) else f"loading the model failed: {first_line(e)}"
            self.on_failure()
            return
        t = model.translator
        batcher = Batcher(self._translate, self._cost, max_cost=t.decode.max_tokens,
                          max_delay=self.limits.max_delay_ms / 1000, batching=self.limits.batching)
        with self._lock:
            if self._stopped:
                return
            self.batcher = batcher  # first: the endpoints take a model that is set as ready to take work
            self.model = model
        console.print(f"ready: {'->'.join(model.langs)} on {t.device} in {t.precision}")
        batcher.serve_forever()

    def _cost(self, text: str) -> int:
        """Source tokens (EOS included), as the decode token budget counts them."""
        assert self.model is not None
        return len(self.model.translator.tokenizer.encode_src([text])[0]) + 1

    def _translate(self, search: Search, lines: list[str]) -> list[Translation]:
        assert self.model is not None
        return self.model.translator.translate_chunk(lines, beam=search.beam, nbest=search.nbest)


# --------------------------------------------------------------------------- HTTP


class ApiError(HTTPException):
    """An error answer: {"error": message} (+ "limit": the config key that was exceeded). An HTTPException, so
    FastAPI passes it through unchanged even when raised while it reads the body."""

    def __init__(self, status: int, message: str, limit: str | None = None):
        super().__init__(status_code=status, detail=message)
        self.limit = limit


class NativeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt option is an error, not silently ignored

    sentences: list[str] = Field(description="One sentence (line) each; answers come back in the same order.")
    beam: int | None = Field(None, ge=1, description="Beam size (1 = greedy); default: the server's.")
    nbest: int | None = Field(None, ge=1, description="Also return the N best hypotheses of each sentence.")
    scores: bool = Field(False, description="Add score (log-prob / length penalty) and logprob.")
    api_key: str | None = None


class LibreRequest(BaseModel):
    """LibreTranslate's /translate parameters (other fields are ignored, as LibreTranslate does)."""

    q: str | list[str]
    source: str = "auto"
    target: str | None = None
    format: str = "text"
    api_key: str | None = None
    alternatives: int = Field(0, ge=0)


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


def _validation_message(errors: list[dict[str, Any]]) -> str:
    first = errors[0]
    where = ".".join(str(x) for x in first.get("loc", ()) if x != "body")
    return f"{where}: {first.get('msg', 'invalid')}" if where else str(first.get("msg", "invalid"))


async def _disconnected(request: Request) -> None:
    """Returns when the client goes away (the body is read by now, so the next message can only be that)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _results(request: Request, futures: list[Future]) -> list[Any]:
    """Await the sentences' results, or cancel what has not started once the client has left."""
    gathered = asyncio.gather(*(asyncio.wrap_future(f) for f in futures))
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({gathered, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if not gathered.done():
        gathered.cancel()  # reaches the queued futures: the model thread drops them
        raise ApiError(499, "client closed the request")
    return gathered.result()


LANGUAGE_NAMES = {
    "ar": "Arabic", "cs": "Czech", "da": "Danish", "de": "German", "el": "Greek", "en": "English", "es": "Spanish",
    "fi": "Finnish", "fr": "French", "hi": "Hindi", "hu": "Hungarian", "it": "Italian", "ja": "Japanese",
    "ko": "Korean", "nl": "Dutch", "pl": "Polish", "pt": "Portuguese", "ro": "Romanian", "ru": "Russian",
    "sv": "Swedish", "tr": "Turkish", "uk": "Ukrainian", "zh": "Chinese",
}


class Api:
    """The endpoints over one Service; checks limits and keys, queues sentences, shapes the answers."""

    def __init__(self, service: Service, limits: ServeConfig, api_key: str | None):
        self.service, self.limits, self.api_key = service, limits, api_key
        self.requests = 0  # translation requests being answered (event-loop thread only)

    # ---- checks
    def model(self) -> Model:
        if self.service.model is None:
            raise ApiError(503, "the model is still loading (GET /health says when it is ready)")
        return self.service.model

    def authorize(self, request: Request, key: str | None) -> None:
        if self.api_key is None:
            return
        header = request.headers.get("authorization", "")
        given = key if key is not None else header.removeprefix("Bearer ").strip() if header else None
        if given is None or not hmac.compare_digest(given.encode(), self.api_key.encode()):
            raise ApiError(403, "invalid or missing API key (api_key field or 'Authorization: Bearer KEY' header)")

    def check_sentences(self, lines: list[str]) -> None:
        n, limit = len(lines), self.limits
        if n > limit.max_sentences:
            raise ApiError(400, f"{n} sentences in one request, over the limit serve.max_sentences="
                                f"{limit.max_sentences}", "serve.max_sentences")
        for i, line in enumerate(lines, 1):
            if len(line) > limit.max_chars:
                raise ApiError(400, f"sentence {i} has {len(line)} characters, over the limit serve.max_chars="
                                    f"{limit.max_chars}", "serve.max_chars")

    def search(self, beam: int | None, nbest: int | None) -> Search:
        """The request's search settings (the server's where it asks for none), within serve.max_beam."""
        decode, limit = self.model().translator.decode, self.limits.max_beam
        for name, value in (("beam", beam), ("nbest", nbest)):
            if value is not None and value > limit:
                raise ApiError(400, f"{name} {value} is over the limit serve.max_beam={limit}", "serve.max_beam")
        beam = decode.beam if beam is None else beam
        nbest = min(decode.nbest, beam) if nbest is None else nbest
        if nbest > beam:
            raise ApiError(422, f"nbest must be between 1 and the beam size ({beam}), got {nbest}")
        return Search(beam, nbest)

    async def translate(self, request: Request, lines: list[str], search: Search) -> list[Translation]:
        try:
            futures = self.service.batcher.submit(lines, search)
        except Closed as e:
            raise ApiError(503, str(e)) from None
        self.requests += 1
        try:
            return await _results(request, futures)
        except HTTPException:
            raise
        except Exception as e:  # the model failed on this batch: the operator gets the traceback, the client a line
            logging.getLogger("uvicorn.error").error("translation failed", exc_info=e)
            raise ApiError(500, f"translation failed: {first_line(e)}") from None
        finally:
            self.requests -= 1

    # ---- endpoints
    async def health(self) -> JSONResponse:  # async: FastAPI would run a plain def on a worker thread
        if self.service.error is not None:
            return JSONResponse({"status": "failed", "error": self.service.error}, status_code=503)
        batcher = self.service.batcher
        if batcher is None:
            return JSONResponse({"status": "loading"}, status_code=503)
        return JSONResponse({"status": "ready", "requests": self.requests, "queued": batcher.queued,
                             "batches": batcher.batches, "sentences": batcher.sentences})

    async def info(self) -> JSONResponse:
        m = self.model()
        t = m.translator
        return JSONResponse({
            "model": {"checkpoint": m.checkpoint.name, "architecture": m.config.get("model"), "vocab": m.vocab},
            "languages": {"source": m.langs[0], "target": m.langs[1]},
            "decode": dataclasses.asdict(t.decode),
            "device": str(t.device), "dtype": t.dtype, "quantize": t.quantize,
            "serve": {k: v for k, v in dataclasses.asdict(self.limits).items() if k not in ("host", "port")},
        })

    async def languages(self) -> JSONResponse:
        src, tgt = self.model().langs
        return JSONResponse([{"code": code, "name": LANGUAGE_NAMES.get(code, code), "targets": targets}
                             for code, targets in ((src, [tgt]), (tgt, []))])

    async def native(self, request: Request, body: NativeRequest) -> JSONResponse:
        self.model()
        self.authorize(request, body.api_key)
        for i, s in enumerate(body.sentences, 1):
            if "\n" in s or "\r" in s:
                raise ApiError(422, f"sentence {i} holds a line break: send each line as its own sentence")
        self.check_sentences(body.sentences)
        search = self.search(body.beam, body.nbest)
        results = await self.translate(request, body.sentences, search)
        return JSONResponse({"translations": [_native_answer(r, search.nbest, body.scores) for r in results]})

    async def libre(self, request: Request) -> JSONResponse:
        body = await _form_or_json(request)
        try:
            req = LibreRequest.model_validate(body)
        except ValidationError as e:
            raise ApiError(400, f"Invalid request: {_validation_message(e.errors())}") from None
        src, tgt = self.model().langs
        self.authorize(request, req.api_key)
        if req.source.lower() not in ("auto", src):
            raise ApiError(400, f"source language '{req.source}' is not available: this model translates {src}->{tgt}")
        if req.target is not None and req.target.lower() != tgt:
            raise ApiError(400, f"target language '{req.target}' is not available: this model translates {src}->{tgt}")
        if req.format != "text":
            raise ApiError(400, f"format '{req.format}' is not supported: this server translates plain text ('text')")
        texts = [req.q] if isinstance(req.q, str) else req.q
        lines = [text.replace("\r\n", "\n").split("\n") for text in texts]  # one model sentence per line
        flat = [line for item in lines for line in item]
        self.check_sentences(flat)
        k = req.alternatives
        if k >= self.limits.max_beam:
            raise ApiError(400, f"alternatives {k} is over the limit serve.max_beam - 1 = {self.limits.max_beam - 1}",
                           "serve.max_beam")
        beam = self.model().translator.decode.beam
        search = self.search(None if k < beam else k + 1, k + 1)  # LibreTranslate's alternatives: n-best 2, 3, ...
        results = iter(await self.translate(request, flat, search))
        per_text = [[next(results) for _ in item] for item in lines]
        best = ["\n".join(r.text[0] for r in rs) for rs in per_text]
        answer: dict[str, Any] = {"translatedText": best[0] if isinstance(req.q, str) else best}
        if k:
            alts = [["\n".join(r.text[i] if i < len(r.text) else r.text[0] for r in rs) for i in range(1, k + 1)]
                    for rs in per_text]
            answer["alternatives"] = alts[0] if isinstance(req.q, str) else alts
        return JSONResponse(answer)


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


async def _form_or_json(request: Request) -> dict[str, Any]:
    """The body as a dict: JSON, or a form (urlencoded or multipart), as LibreTranslate accepts both."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    try:
        if kind == "application/json" or kind.endswith("+json"):
            body = await request.json()
            if not isinstance(body, dict):
                raise ApiError(400, "Invalid request: the JSON body must be an object")
            return body
        if kind in ("application/x-www-form-urlencoded", "multipart/form-data"):
            form = await request.form()
            values = {k: [v for v in form.getlist(k) if isinstance(v, str)] for k in form}  # uploaded files: ignored
            return {k: v[0] if len(v) == 1 else v for k, v in values.items() if v}
    except HTTPException:
        raise
    except ValueError as e:  # JSON (or its UTF-8) that does not parse
        raise ApiError(400, f"malformed JSON body: {first_line(e)}") from None
    except Exception as e:  # multipart parser errors differ between versions
        raise ApiError(400, f"malformed form body: {first_line(e)}") from None
    if not kind and not await request.body():
        return {}
    raise ApiError(415, f"unsupported content type '{kind}': send JSON or a form")


def create_app(service: Service, limits: ServeConfig, api_key: str | None = None) -> Any:
    api = Api(service, limits, api_key)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> Any:
        service.start()
        yield
        await asyncio.to_thread(service.stop)  # in-flight requests are answered by now: uvicorn waited for them

    app = FastAPI(title="nmt serve", summary="Transformer translation with dynamic batching", lifespan=lifespan)
    app.add_middleware(BodyLimit, limit=limits.max_body_bytes)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, e: HTTPException) -> JSONResponse:
        return _error_response(e)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, e: RequestValidationError) -> JSONResponse:
        errors = list(e.errors())
        if any(err.get("type") == "json_invalid" for err in errors):
            reason = (errors[0].get("ctx") or {}).get("error", "JSON decode error")
            return JSONResponse({"error": f"malformed JSON body: {reason}"}, status_code=400)
        detail = [{k: err[k] for k in ("loc", "msg", "type") if k in err} for err in errors]
        return JSONResponse({"error": _validation_message(errors), "detail": detail}, status_code=422)

    @app.exception_handler(Exception)
    async def internal(request: Request, e: Exception) -> JSONResponse:  # logged by uvicorn; the client gets a line
        return JSONResponse({"error": f"internal error: {type(e).__name__}"}, status_code=500)

    app.get("/health", summary="200 once the model is loaded, 503 before")(api.health)
    app.get("/v1/info", summary="Model, languages, decode settings, limits")(api.info)
    app.get("/languages", summary="LibreTranslate: the languages this model translates")(api.languages)
    app.post("/v1/translate", summary="Translate sentences with per-request beam / n-best / scores")(api.native)
    app.post("/translate", summary="LibreTranslate: q (string or list), source, target, format=text; JSON or form",
             openapi_extra={"requestBody": {"content": {"application/json": {
                 "schema": LibreRequest.model_json_schema()}}}})(api.libre)
    return app


# --------------------------------------------------------------------------- the command


def _listen(host: str, port: int) -> socket.socket:
    """Bind before starting uvicorn, so that a busy port is one error line (uvicorn would sys.exit). The socket
    states its protocol (TCP, from getaddrinfo): asyncio turns Nagle's algorithm off only on connections of such
    sockets, and with it on every small answer waited ~40 ms for the client's delayed ACK."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
        sock = socket.socket(family, kind, proto)
    except OSError as e:
        raise NmtError(f"cannot listen on {host}:{port}: {e.strerror or first_line(e)}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as e:
        sock.close()
        raise NmtError(f"cannot listen on {host}:{port}: {e.strerror or first_line(e)}") from None
    return sock


@contextlib.contextmanager
def _exit_zero_on_signals() -> Iterator[None]:
    """uvicorn answers SIGINT/SIGTERM with a graceful shutdown and then raises the signal again for the handler
    it found (default SIGTERM: death by signal; SIGINT: KeyboardInterrupt). Stopping is how a server ends, so the
    handler it finds here does nothing and `nmt serve` exits 0."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _log_config() -> dict[str, Any]:
    """uvicorn's logging with the access log on stderr too: stdout carries no logs in any nmt command."""
    config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    config["handlers"]["access"]["stream"] = "ext://sys.stderr"
    return config


def _stop_once_started(server: Any, wait: float = 60.0) -> None:
    """Make uvicorn stop (its loop checks should_exit every 0.1 s), but not before it has started: older uvicorn
    (0.30) skips the lifespan shutdown of a server told to stop while starting, and logs a CancelledError."""
    deadline = time.monotonic() + wait
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    server.should_exit = True


def run(cfg: Config, opts: ServeOptions) -> None:
    """The `nmt serve` command: returns when the server was stopped (SIGTERM / Ctrl-C)."""
    keep_freed_memory()
    ckpt = checkpoint_to_translate(opts.checkpoint, cfg.train.run_dir, opts.config_given)
    if not ckpt.is_file():
        raise NmtError(f"checkpoint not found: {ckpt}")
    sock = _listen(cfg.serve.host, cfg.serve.port)
    service = Service(partial(load_model, ckpt, cfg, opts), cfg.serve, opts.threads)
    app = create_app(service, cfg.serve, opts.api_key)
    server = uvicorn.Server(uvicorn.Config(
        app, log_config=_log_config(), access_log=opts.access_log, lifespan="on",
        timeout_graceful_shutdown=cfg.serve.shutdown_timeout))
    service.on_failure = partial(_stop_once_started, server)
    host, port = sock.getsockname()[:2]
    url = f"http://{f'[{host}]' if ':' in host else host}:{port}"
    console.print(f"serving {ckpt} on {url} (loading the model; GET /health answers 200 once it is ready)")
    with _exit_zero_on_signals():
        server.run(sockets=[sock])
    if service.error is not None:
        raise NmtError(service.error)
    if not server.started:
        raise NmtError("the server did not start (see the log above)")
    console.print("stopped")

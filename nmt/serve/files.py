"""LibreTranslate's file translation: `POST /translate_file` (multipart `file`, `source`, `target`, `api_key`) answers
`{"translatedFileUrl": "<base>/download_file/<token>"}` once the document is translated (nmt.translation.documents), and
`GET /download_file/<token>` sends it. The sentences go through the model's queue like any request's, from one of
FILE_THREADS threads: the event loop never parses or waits. Each document is bounded by a work budget
(nmt.workbudget: its parsed XML, paragraphs, runs, sentences; serve.file_timeout and the client leaving, checked
inside the parse and translate loops, so a timed-out job stops and frees its thread). Files live in a directory of
the server's under an unguessable token, taken from the store by the first download (a link is used once; the
response owns the file and removes it once sent; LibreTranslate keeps them 30 minutes however often fetched, its
page fetches once), or after serve.file_ttl, a failure, the client leaving, shutdown."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import re
import shutil
import time
from pathlib import Path
from typing import Any

from nmt.config.experiment import DecodeConfig
from nmt.errors import NmtError, first_line
from nmt.serve.batcher import Closed, Full
from nmt.serve.filestore import Entry, FileStore
from nmt.serve.http_errors import ApiError, shown
from nmt.serve.libre_settings import supported_extensions
from nmt.serve.native import Api, client_of, disconnected
from nmt.serve.web import FastAPI, JSONResponse, Request
from nmt.serve.worker import Search, Service
from nmt.translation.documents import FORMATS, REFUSED, translate_document
from nmt.translation.glossary import Glossary
from nmt.translation.translator import Translation
from nmt.workbudget import Cancelled, OverBudget, TimedOut, WorkBudget

log = logging.getLogger("uvicorn.error")


class QueuedTranslator:
    """What nmt.translation.documents needs of a Translator, on a file thread: the sentences through the server's queue,
    in slices of serve.max_sentences (a full queue is waited out), within serve.max_file_sentences and the document's
    work budget (its deadline, serve.file_timeout, and the client leaving: checked while a slice waits)."""

    def __init__(self, api: Api, service: Service, client: str, budget: WorkBudget):
        self.api, self.service, self.client, self.budget = api, service, client, budget
        self.tokenizer = service.translator.tokenizer
        self.default = api.search(service, None, None)
        self.sentences = 0

    def translate_chunk(self, texts: list[str], *, decode: DecodeConfig | None = None, need_attention: bool = False,
                        glossary: Glossary | None = None, first_line: int = 1) -> list[Translation]:
        """nmt.translation.translator.SentenceTranslator: `glossary` None is the server's (serve.glossary)."""
        limits = self.api.limits
        search = Search(decode or self.default.decode, attention=need_attention,
                        glossary=glossary if glossary is not None else self.default.glossary)
        self.sentences += len(texts)
        if self.sentences > limits.max_file_sentences:
            raise ApiError(413, f"the file has over serve.max_file_sentences={limits.max_file_sentences} sentences",
                           "serve.max_file_sentences")
        step = limits.max_sentences
        return [r for i in range(0, len(texts), step) for r in self._slice(texts[i:i + step], search)]

    def _slice(self, texts: list[str], search: Search) -> list[Translation]:
        futures: list[concurrent.futures.Future] | None = None
        try:
            while futures is None:
                self.budget.check()
                try:
                    futures = self.service.batcher.submit(texts, search, self.client)  # type: ignore[union-attr]
                except Full as e:
                    time.sleep(min(e.retry_after, 1.0))
            while concurrent.futures.wait(futures, timeout=0.25)[1]:
                self.budget.check()
            return [f.result() for f in futures]
        except (TimedOut, Cancelled):
            raise
        except (ApiError, Closed) as e:
            raise e if isinstance(e, ApiError) else ApiError(503, str(e), retry_after=5) from None
        except Exception as e:  # the model failed on a batch: as /translate answers it
            log.error("file translation failed", exc_info=e)
            raise ApiError(500, f"Cannot translate file: {first_line(e)}") from None
        finally:
            for f in futures or ():
                f.cancel()  # those not started leave the queue


def safe_name(filename: str) -> str:
    """The client's file name as a plain name of a file of ours (LibreTranslate's secure_filename's idea)."""
    name = re.sub(r"[^\w.-]+", "_", filename.replace("\\", "/").rsplit("/", 1)[-1]).strip("._")
    stem, dot, ext = name.rpartition(".")
    return f"{stem[:80] or 'file'}{dot}{ext[:16]}" if dot else name[:80] or "file"


def _translate(api: Api, service: Service, entry: Entry, upload: Any, name: str, fmt: str, target: str,
               client: str) -> Path:
    """On a file thread: the upload into the entry's folder, translated next to it (NAME_TARGET.EXT, as Argos names
    it); the source removed."""
    src = entry.folder / name
    with open(src, "wb") as out:
        upload.file.seek(0)
        shutil.copyfileobj(upload.file, out)
    stem, dot, ext = name.rpartition(".")
    dst = entry.folder / f"{stem}_{target}.{ext}"
    limits = api.limits
    budget = WorkBudget.within(name, seconds=limits.file_timeout, cancel=entry.cancel)
    translator = QueuedTranslator(api, service, client, budget)
    try:
        translate_document(translator, src, dst, fmt, max_bytes=limits.max_file_bytes,
                           budget=budget)
    except TimedOut:
        raise _timeout(limits.file_timeout) from None
    except Cancelled:
        raise ApiError(499, "client closed the request") from None
    except NmtError as e:  # the file's fault; its path is ours, never shown
        message = str(e).replace(str(src), name)
        raise ApiError(413 if isinstance(e, OverBudget) else 400, f"Invalid request: {message}") from None
    finally:
        src.unlink(missing_ok=True)
    return dst


class FileRoutes:
    """POST /translate_file and GET /download_file/{token} of one server (`add_routes`)."""

    def __init__(self, api: Api) -> None:
        self.api, self.limits = api, api.limits
        self.store = FileStore(api.limits.max_files, api.limits.file_ttl)

    async def translate_file(self, request: Request) -> JSONResponse:
        self.api.models.ready()
        try:
            form = await request.form()
        except Exception as e:  # multipart parser errors (and the body limits' ApiErrors) as one line
            raise e if isinstance(e, ApiError) else ApiError(400, f"malformed form body: {first_line(e)}") from None
        try:
            return await self._translate_form(request, form)
        finally:
            await form.close()

    async def _translate_form(self, request: Request, form: Any) -> JSONResponse:
        fields = {k: v for k in ("api_key", "source", "target")
                  if isinstance(v := form.get(k, request.query_params.get(k)), str) and v}
        self.api.authorize(request, fields.get("api_key"))
        upload = form.get("file")
        if upload is None or isinstance(upload, str):
            raise ApiError(400, "Invalid request: missing file parameter")
        if not upload.filename:
            raise ApiError(400, "Invalid request: empty file")
        name = safe_name(upload.filename)
        ext = "." + name.rpartition(".")[2].lower() if "." in name else ""
        if FORMATS.get(ext) in REFUSED:
            raise ApiError(400, f"Invalid request: {REFUSED[FORMATS[ext]]}")
        if ext not in await asyncio.to_thread(supported_extensions):
            raise ApiError(400, "Invalid request: file format not supported")
        if (size := upload.size or 0) > self.limits.max_file_bytes:
            raise ApiError(413, f"the file has {size} bytes, over the limit serve.max_file_bytes="
                                f"{self.limits.max_file_bytes}", "serve.max_file_bytes")
        source = fields.get("source")  # "auto": the one source language into target (documents are not detected)
        service = self.api.models.route(None if (source or "").lower() == "auto" else source, fields.get("target"))
        # its bytes count as characters (LibreTranslate)
        self.api.rate_limits.check(client := client_of(request)[0], size)
        token, entry = self.store.reserve()
        job = asyncio.wrap_future(self.store.executor.submit(
            _translate, self.api, service, entry, upload, name, FORMATS[ext], service.model.langs[1],  # type: ignore[union-attr]
            client))
        gone = asyncio.ensure_future(disconnected(request))
        try:
            await asyncio.wait({job, gone}, timeout=self.limits.file_timeout + 5, return_when=asyncio.FIRST_COMPLETED)
        finally:  # (also when cancelled) an unfinished translation stops at its next slice of sentences; whatever
            left = gone.done()  # did not end in a download link leaves no file once its thread has ended
            gone.cancel()
            entry.cancel.set()
            job.add_done_callback(lambda _: entry.path is None and self.store.remove(token))
        if not job.done():
            raise ApiError(499, "client closed the request") if left else _timeout(self.limits.file_timeout)
        error = ApiError(503, "the server is shutting down", retry_after=5) if job.cancelled() else job.exception()
        if error is not None and not isinstance(error, ApiError):
            log.error("file translation failed", exc_info=error)
            error = ApiError(500, f"Cannot translate file: {first_line(error)}")
        if error is not None:
            raise error
        entry.path = job.result()
        entry.expires = time.monotonic() + self.limits.file_ttl
        return JSONResponse({"translatedFileUrl": str(request.url_for("download_file", token=token))})

    async def download_file(self, token: str) -> Any:
        from starlette.background import BackgroundTask
        from starlette.responses import FileResponse

        self.store.sweep()
        entry = self.store.entries.get(token) if re.fullmatch(r"[A-Za-z0-9_-]{20,64}", token) else None
        if entry is None or entry.path is None:
            raise ApiError(404, f"no file {shown(token, 12)}: a link is used once, within serve.file_ttl="
                                f"{self.limits.file_ttl:g} s", "serve.file_ttl")
        # single use: taken from the store before anything awaits, so a second GET is a 404
        del self.store.entries[token]
        return FileResponse(entry.path, filename=entry.path.name,  # this response owns the folder now
                            background=BackgroundTask(shutil.rmtree, entry.folder, ignore_errors=True),
                            headers={"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"})


def add_routes(app: FastAPI, api: Api) -> FileStore:
    """POST /translate_file and GET /download_file/{token}; the store, for the lifespan to open and close."""
    routes = FileRoutes(api)
    app.post("/translate_file", summary="LibreTranslate: translate a document (multipart file, source, target), "
             "answered with its download URL")(routes.translate_file)
    app.get("/download_file/{token}", summary="LibreTranslate: the translated document (once, within "
            "serve.file_ttl)")(routes.download_file)
    return routes.store


def _timeout(seconds: float) -> ApiError:
    return ApiError(503, f"the file was not translated within serve.file_timeout={seconds:g} s", "serve.file_timeout",
                    retry_after=seconds)

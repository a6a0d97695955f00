"""The HTTP app of `nmt serve`: the models' Services behind the native API and the LibreTranslate dialect, errors as
JSON, requests through the guards (Host, CORS, body limits). Its lifespan starts the model threads and, once
uvicorn has answered the requests in flight, stops them."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from nmt.config.serve import ServeConfig
from nmt.serve import files, libre_settings, libretranslate
from nmt.serve.explain_api import add_explain
from nmt.serve.guards import add_guards
from nmt.serve.http_errors import add_error_handlers
from nmt.serve.models import Models
from nmt.serve.native import Api, NativeRequest
from nmt.serve.page import add_page
from nmt.serve.web import FastAPI
from nmt.serve.worker import Service


def create_app(services: Service | list[Service], limits: ServeConfig, api_key: str | None = None) -> FastAPI:
    """The app over one model's Service, or several (one per language pair)."""
    models = Models(services if isinstance(services, list) else [services])
    api = Api(models, limits, api_key)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> Any:
        models.start()
        store.open()
        yield
        await asyncio.to_thread(models.stop)  # in-flight requests are answered by now: uvicorn waited for them
        await asyncio.to_thread(store.close)  # documents' temp files

    app = FastAPI(title="nmt serve", summary="Transformer translation with dynamic batching", lifespan=lifespan)
    add_guards(app, limits, api.refusal)
    add_error_handlers(app)
    app.get("/health", summary="200 once the model is loaded, 503 before")(api.health)
    app.get("/v1/info", summary="Model, languages, decode settings, limits")(api.info)
    app.post("/v1/translate", summary="Translate sentences with per-request beam / n-best / scores",
             openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
                 "schema": NativeRequest.model_json_schema()}}}})(api.native)
    add_explain(app, api)
    libretranslate.add_routes(app, api)
    libre_settings.add_routes(app, api)
    store = files.add_routes(app, api)
    add_page(app)
    return app

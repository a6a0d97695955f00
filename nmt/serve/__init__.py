"""`nmt serve`: translation models behind HTTP (one per language pair), concurrent requests merged into batches.

- LibreTranslate-compatible `POST /translate`, `POST /detect`, `GET /languages`, `GET /frontend/settings` and
  `GET /spec`, so its clients work unchanged; a web page at `/`;
- native `POST /v1/translate` (a list of sentences, per-request beam / n-best / scores / attention), `GET /health`
  (503 until the models are loaded), `GET /v1/info`.

The modules, from the model up:
- fairqueue, batcher: the fair, bounded queue; one model thread takes what waits as batches (serve only;
  nmt.data.batching is training's);
- worker: the model thread (`Service`) and what it loads (`open_model` -> a `Model` record); models: the
  Services of one server and the routing of language pairs;
- html: the sentences of an HTML fragment and the markup put back; detect: language identification;
- web: the serve extra's imports (FastAPI, uvicorn, ...): without it, one error line names the extra;
- http_errors: every error a JSON body {"error": one line}, limit errors also naming the config key;
- bodies, guards, connections, ratelimit: reading bodies; Host/CORS/body limits/early refusal; header timeout
  and connection cap; rate limits;
- native: the native API (`Api`: the checks and queue every endpoint shares);
- libretranslate, libre_settings: the LibreTranslate dialect over it; page: the web page;
- app: `create_app`, the HTTP app over the Services;
- runner: `run`, the process (listen, uvicorn, drain and exit 0 on SIGTERM / Ctrl-C).

The names below load their module when first used: the batcher and the model thread need no FastAPI, and
importing the package never does.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nmt.serve.app import create_app
    from nmt.serve.http_errors import ApiError
    from nmt.serve.native import Api
    from nmt.serve.runner import run
    from nmt.serve.worker import Model, Search, ServeOptions, Service, open_model

_HOMES = {"ServeOptions": "worker", "Search": "worker", "Model": "worker", "open_model": "worker",
          "Service": "worker", "ApiError": "http_errors", "Api": "native", "create_app": "app", "run": "runner"}
__all__ = ["Api", "ApiError", "Model", "Search", "ServeOptions", "Service", "create_app", "open_model", "run"]


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    globals()[name] = value
    return value

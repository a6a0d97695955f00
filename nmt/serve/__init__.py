"""`nmt serve`: one model behind HTTP, concurrent requests merged into batches.

- LibreTranslate-compatible `POST /translate` and `GET /languages`, so its clients work unchanged;
- native `POST /v1/translate` (a list of sentences, per-request beam / n-best / scores), `GET /health`
  (503 until the model is loaded), `GET /v1/info`.

The modules, from the model up:
- batcher: the queue; one model thread takes what waits as batches (serve only; nmt.batching is training's);
- worker: the model thread (`Service`) and what it loads (`open_model` -> a `Model` record);
- web: the serve extra's imports (FastAPI, uvicorn): without it, one error line names the extra;
- http_errors: every error a JSON body {"error": one line}, limit errors also naming the config key;
- native: the native API (`Api`: the checks and queue every endpoint shares);
- libretranslate: the LibreTranslate dialect over it;
- app: `create_app`, the HTTP app over one Service;
- runner: `run`, the process (listen, uvicorn, exit 0 on SIGTERM / Ctrl-C).

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

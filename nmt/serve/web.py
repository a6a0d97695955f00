"""The serve extra (FastAPI, uvicorn, pydantic, python-multipart, limits), imported here and nowhere else: every HTTP
module of `nmt serve` takes its names from this one, so that without the extra `nmt serve` is one error line
naming it (like plotting without matplotlib), whichever module is imported first."""

from __future__ import annotations

from nmt.errors import NmtError

INSTALL_HINT = "serving needs FastAPI and uvicorn: pip install 'nmt[serve]'"
try:
    import h11
    import limits  # noqa: F401  (rate limits, nmt.serve.ratelimit)
    import python_multipart  # noqa: F401  (form bodies, as LibreTranslate clients send them)
    import uvicorn
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from pydantic import BaseModel, ConfigDict, Field, ValidationError
    from starlette.exceptions import HTTPException
    from uvicorn.protocols.http.h11_impl import H11Protocol
except ImportError as e:
    raise NmtError(f"{INSTALL_HINT} ({e.name} is missing)") from None

__all__ = ["BaseModel", "ConfigDict", "FastAPI", "Field", "H11Protocol", "HTTPException", "JSONResponse", "Request",
           "RequestValidationError", "ValidationError", "h11", "uvicorn"]

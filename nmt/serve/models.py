"""The models one `nmt serve` holds: a Service (model thread, its own batcher and queue) per checkpoint, each a
language pair, and requests routed by (source, target) as LibreTranslate routes them. No pivoting through a third
language: a pair is served when a checkpoint translates it. Needs no FastAPI."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from nmt.serve.http_errors import ApiError, shown
from nmt.serve.worker import Service

LANGUAGE_NAMES = {
    "ar": "Arabic", "cs": "Czech", "da": "Danish", "de": "German", "el": "Greek", "en": "English", "es": "Spanish",
    "fi": "Finnish", "fr": "French", "hi": "Hindi", "hu": "Hungarian", "it": "Italian", "ja": "Japanese",
    "ko": "Korean", "nl": "Dutch", "pl": "Polish", "pt": "Portuguese", "ro": "Romanian", "ru": "Russian",
    "sv": "Swedish", "tr": "Turkish", "uk": "Ukrainian", "zh": "Chinese",
}


def language_name(code: str) -> str:
    return LANGUAGE_NAMES.get(code, code)


class Models:
    def __init__(self, services: list[Service]):
        self.services = services

    # ---- the model threads
    def start(self) -> None:
        for service in self.services:
            service.start()

    def drain(self, within: float) -> None:
        for service in self.services:
            service.drain(within)

    def stop(self) -> None:
        for service in self.services:
            service.stop()

    def on_failure(self, callback: Callable[[], None]) -> None:
        for service in self.services:
            service.on_failure = callback

    @property
    def error(self) -> str | None:
        return next((s.error for s in self.services if s.error is not None), None)

    @property
    def busy(self) -> bool:
        return any(s.busy for s in self.services)

    # ---- routing
    def ready(self) -> list[Service]:
        """Every service, once every model is loaded (503 before: a client asking for a pair that is still loading
        would otherwise get a 400)."""
        if any(s.batcher is None or s.model is None for s in self.services):
            raise ApiError(503, "the model is still loading (GET /health says when it is ready)")
        return self.services

    def pairs(self) -> dict[tuple[str, str], Service]:
        """(source, target) -> the service translating it; the first checkpoint of a pair given twice."""
        found: dict[tuple[str, str], Service] = {}
        for service in self.ready():
            found.setdefault(service.model.langs, service)  # type: ignore[union-attr]
        return found

    def sources(self) -> list[str]:
        return list(dict.fromkeys(src for src, _ in self.pairs()))

    def route(self, source: str | None, target: str | None) -> Service:
        """The service for this pair; a missing side is filled in when only one model fits. Errors as
        LibreTranslate words them (clients match "is not supported")."""
        pairs = self.pairs()
        codes = {code for pair in pairs for code in pair}
        for code in (source, target):
            if code is not None and code not in codes:
                raise ApiError(400, f"{shown(code)} is not supported")
        fits = [s for (src, tgt), s in pairs.items() if source in (None, src) and target in (None, tgt)]
        if len(fits) == 1:
            return fits[0]
        if not fits and source is not None and target is not None:
            raise ApiError(400, f"{language_name(target)} ({target}) is not available as a target language from "
                                f"{language_name(source)} ({source})")
        if not fits:
            code, side = (source, "source") if source is not None else (target, "target")
            raise ApiError(400, f"{language_name(code)} ({code}) is not available as a {side} language")
        raise ApiError(400, "Invalid request: this server translates several language pairs "
                            f"({', '.join('-'.join(p) for p in pairs)}): say source and target")

    def languages(self) -> list[dict]:
        """LibreTranslate's GET /languages: every language of every pair, with the targets it translates into."""
        pairs = self.pairs()
        codes = list(dict.fromkeys(code for pair in pairs for code in pair))
        return [{"code": code, "name": language_name(code),
                 "targets": sorted(tgt for src, tgt in pairs if src == code)} for code in codes]

    def info(self) -> list[dict[str, Any]]:
        """GET /v1/info's description of each model: checkpoint, languages, search, device, weights' memory."""
        described = []
        for service in self.ready():
            m = service.model
            assert m is not None
            t = m.translator
            described.append({
                "model": {"checkpoint": m.checkpoint.name, "architecture": m.config.get("model"), "vocab": m.vocab,
                          "memory_mb": round(m.memory_bytes / 2**20, 1)},
                "languages": {"source": m.langs[0], "target": m.langs[1]},
                "decode": dataclasses.asdict(t.decode), "device": str(t.device), "dtype": t.dtype,
                "quantize": t.quantize})
        return described

"""The models one `nmt serve` holds: a Service (model thread, its own batcher and queue) per checkpoint, each a
language pair, and requests routed by (source, target) as LibreTranslate routes them. No pivoting through a third
language: a pair is served when a checkpoint translates it. Needs no FastAPI."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from nmt import langcodes
from nmt.langcodes import language_name
from nmt.serve.http_errors import ApiError, shown
from nmt.serve.worker import Service

__all__ = ["Models", "language_name"]  # language_name: nmt.langcodes' (nmt.serve.libre_settings imports it here)


def served_langs(service: Service) -> tuple[str, str]:
    """The (source, target) codes a model is served under: its checkpoint's, canonical (a checkpoint written
    "zh-CN" serves "zh"); a code that is no language code (an old run's "src") is served as written."""
    assert service.model is not None
    return tuple(langcodes.canonical_or_none(code) or code for code in service.model.langs)  # type: ignore[return-value]


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
            found.setdefault(served_langs(service), service)
        return found

    def sources(self) -> list[str]:
        return list(dict.fromkeys(src for src, _ in self.pairs()))

    def canonical(self, code: str | None) -> str | None:
        """A request's language code as served (nmt.langcodes.canonical: zh-TW, zh_Hant and ZH-hant are all
        zh-Hant); None for none. A malformed code is answered as LibreTranslate answers a code it lacks."""
        if not code:
            return None
        try:
            return langcodes.canonical(code)
        except ValueError:
            raise ApiError(400, f"{shown(code)} is not supported") from None

    def route(self, source: str | None, target: str | None) -> Service:
        """The service for this pair (the codes as clients write them); a missing side is filled in when only one
        model fits. Errors as LibreTranslate words them (clients match "is not supported")."""
        pairs = self.pairs()
        codes = {code for pair in pairs for code in pair}
        for written in (source, target):
            if written and self.canonical(written) not in codes:
                raise ApiError(400, f"{shown(written)} is not supported")
        source, target = self.canonical(source), self.canonical(target)
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
                "languages": dict(zip(("source", "target"), served_langs(service))),
                "decode": dataclasses.asdict(t.decode), "device": str(t.device), "dtype": t.dtype,
                "quantize": t.quantize})
        return described

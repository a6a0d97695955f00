"""The `serve` section of the config: where `nmt serve` listens, how it batches, and the limits that keep it up
under load and abuse, each answered with a JSON error naming its key (README "Deploying" lists them with their
status codes). A module of its own for its size; nmt.config.experiment loads and type-checks it like any section."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from nmt.errors import ConfigError

LOOPBACK_NAMES = ["localhost", "127.0.0.1", "::1"]


@dataclass
class ServeConfig:
    """`nmt serve`: where it listens, how it batches, and what clients may ask of it."""

    host: str = "127.0.0.1"
    port: int = 5000  # LibreTranslate's port
    batching: bool = True  # false: one request at a time (for comparison; the OpenNMT-py server's way)
    max_delay_ms: float = 20.0  # longest the free model waits for the clients it just answered (see nmt.serve.batcher)
    max_batch_seconds: float = 1.0  # a batch holds at most this much work at the measured rate (what arrivals wait)
    # what one request may ask for (400 / 413 above)
    max_body_bytes: int = 1_000_000
    max_sentences: int = 128  # sentences (lines) per request
    max_chars: int = 2000  # characters per sentence
    max_beam: int = 16  # largest beam (and n-best) a request may ask for
    # load: queued work is bounded in seconds of this model's measured throughput (503 + Retry-After above); a
    # request not answered within request_timeout seconds has its queued sentences dropped (503)
    max_queue_seconds: float = 10.0
    request_timeout: float = 30.0
    # per client address, per minute (429 above; 0 = no limit)
    requests_per_minute: int = 0
    chars_per_minute: int = 0
    # connections: headers and body must each arrive within read_timeout seconds (else closed / 408); more than
    # max_connections open at once (lowered to fit the open-files limit) get 503
    read_timeout: float = 10.0
    max_connections: int = 1000
    # browsers: origins whose pages may call the API (CORS; "*" = any), and the Host names answered (None: the
    # loopback names when listening on loopback, else any) against DNS rebinding
    cors_origins: list[str] = field(default_factory=list)
    allowed_hosts: list[str] | None = None
    # documents (POST /translate_file): size, sentences and time of one; files held (in translation or awaiting
    # download; 503 above) and how long an undownloaded one is kept (seconds)
    max_file_bytes: int = 10_000_000
    max_file_sentences: int = 20_000
    file_timeout: float = 600.0
    max_files: int = 64
    file_ttl: float = 1800.0  # LibreTranslate's 30 minutes
    # terminology (nmt.translation.glossary): a file every translation obeys, and the terms one /v1/translate request
    # may add
    glossary: str | None = None
    max_terms: int = 1000
    shutdown_timeout: float = 60.0  # on SIGTERM/Ctrl-C: queued work that fits is finished, the rest gets 503

    def hosts(self) -> list[str]:
        """The Host header names answered ("*": any)."""
        if self.allowed_hosts is not None:
            return self.allowed_hosts
        return LOOPBACK_NAMES if self.host in LOOPBACK_NAMES or self.host.startswith("127.") else ["*"]


def check_serve(s: ServeConfig) -> None:
    """One-line ConfigErrors naming the key (called by nmt.config.experiment.check_config)."""
    if not 0 <= s.port < 2**16:
        raise ConfigError(f"serve.port must be in [0, 65535], got {s.port}")
    for key in ("max_body_bytes", "max_sentences", "max_chars", "max_beam", "max_connections", "max_file_bytes",
                "max_file_sentences", "max_files", "max_terms"):
        if getattr(s, key) <= 0:
            raise ConfigError(f"serve.{key} must be > 0, got {getattr(s, key)}")
    for key in ("requests_per_minute", "chars_per_minute"):
        if getattr(s, key) < 0:
            raise ConfigError(f"serve.{key} must be >= 0 (0: no limit), got {getattr(s, key)}")
    if not (math.isfinite(s.max_delay_ms) and s.max_delay_ms >= 0):
        raise ConfigError(f"serve.max_delay_ms must be finite and >= 0, got {s.max_delay_ms}")
    for key in ("max_batch_seconds", "max_queue_seconds", "request_timeout", "read_timeout", "shutdown_timeout",
                "file_timeout", "file_ttl"):
        value = getattr(s, key)
        if not (math.isfinite(value) and value > 0):
            raise ConfigError(f"serve.{key} must be finite and > 0, got {value}")
    for key in ("cors_origins", "allowed_hosts"):
        names = getattr(s, key) or []
        if not all(isinstance(n, str) and n for n in names):
            raise ConfigError(f"serve.{key} must be a list of names, got {names!r}")

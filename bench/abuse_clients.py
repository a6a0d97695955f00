"""The clients of `bench/serve_abuse.py`: the good client (one sentence at a time, timed), the flooders, the
RSS sampler, and the connections that say nothing, trickle their headers or send less body than promised."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from abuse_http import CONN_ERRORS, BadResponse, Connection, Reply, Server, parse_head, request_bytes, translate_body

GOOD_TIMEOUT = 10.0  # the good client's timeout: a request not answered by then is a failure of 10 s
RETRY_PAUSE = 0.5  # what flooders wait after a 503/429 or a failed connection
SAMPLE_EVERY = 0.5  # RSS sampling period


def fmt_counts(counts: dict[Any, int]) -> str:
    return ", ".join(f"{k}: {v:,}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))




def percentile(xs: list[float], q: float) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")


@dataclass
class GoodRun:
    """The good client's requests: one sentence each, one at a time."""

    latencies: list[float] = field(default_factory=list)
    failures: Counter[str] = field(default_factory=Counter)

    def add(self, seconds: float, failure: str | None) -> None:
        self.latencies.append(seconds)
        if failure is not None:
            self.failures[failure] += 1

    def rows(self) -> list[tuple[str, str]]:
        ms = lambda q: f"{1000 * percentile(self.latencies, q):,.0f}"  # noqa: E731
        failed = sum(self.failures.values())
        return [("good client: requests", str(len(self.latencies))),
                ("good client: p50 / p99 / max latency (ms)",
                 f"{ms(0.5)} / {ms(0.99)} / {ms(1.0)}"),
                ("good client: failures", f"{failed}" + (f" ({fmt_counts(self.failures)})" if failed else ""))]


async def timed_request(conn: Connection, body: bytes, timeout: float) -> tuple[float, str | None]:
    """(seconds, None for a 200 with translations, else what went wrong)."""
    start = time.perf_counter()
    try:
        reply = await asyncio.wait_for(conn.request("POST", "/v1/translate", body), timeout)
    except asyncio.TimeoutError:
        return timeout, "timeout"
    except CONN_ERRORS as e:
        return time.perf_counter() - start, type(e).__name__
    seconds = time.perf_counter() - start
    return seconds, None if reply.translated else reply.kind()


async def good_client(conn: Connection, lines: list[str], stop: asyncio.Event, pace: float = 0.0) -> GoodRun:
    """One sentence per request on `conn` until `stop`, the next when answered (at most one per `pace` seconds;
    0.1 s after a failure, so that a refusing server is not hammered)."""
    run = GoodRun()
    for line in itertools.cycle(lines):
        if stop.is_set():
            break
        began = time.monotonic()
        seconds, failure = await timed_request(conn, translate_body([line]), GOOD_TIMEOUT)
        run.add(seconds, failure)
        wait = max(pace - (time.monotonic() - began), 0.0 if failure is None else 0.1)
        if wait > 0:
            try:
                await asyncio.wait_for(stop.wait(), wait)
            except asyncio.TimeoutError:
                pass
    conn.close()
    return run


@dataclass
class Tally:
    """The flooders' answers."""

    kinds: Counter[str] = field(default_factory=Counter)  # Reply.kind()
    statuses: Counter[int] = field(default_factory=Counter)
    non_json_errors: int = 0  # non-200 without a JSON {"error": "..."} body
    no_retry_after: int = 0  # 503s without a Retry-After header
    conn_errors: Counter[str] = field(default_factory=Counter)
    limits: Counter[str] = field(default_factory=Counter)  # the "limit" key of the error answers

    def add(self, reply: Reply) -> None:
        self.statuses[reply.status] += 1
        payload = reply.payload()
        if reply.status != 200 and isinstance(payload, dict):
            self.limits[str(payload.get("limit"))] += 1
        self.kinds[reply.kind()] += 1
        self.non_json_errors += reply.status != 200 and not reply.json_error
        self.no_retry_after += reply.status == 503 and "retry-after" not in reply.headers

    def rows(self) -> list[tuple[str, str]]:
        s = self.statuses
        other = {k: v for k, v in self.kinds.items() if k not in ("200", "503 JSON", "429 JSON")}
        return [("flooders: 200 / 503 / 429", f"{s[200]:,} / {s[503]:,} / {s[429]:,}"),
                ("flooders: other answers", fmt_counts(other) or "0"),
                ("flooders: refused by", fmt_counts(self.limits) or "-"),
                ("flooders: non-JSON errors", str(self.non_json_errors)),
                ("flooders: 503 without Retry-After", str(self.no_retry_after)),
                ("flooders: connection errors", fmt_counts(self.conn_errors) or "0")]


async def flooder(port: int, body: bytes, tally: Tally) -> None:
    """POST `body` again and again on one keep-alive connection until cancelled; 0.5 s pause after a 503/429 or a
    broken connection (then a new one)."""
    conn = Connection(port)
    try:
        while True:
            try:
                reply = await conn.request("POST", "/v1/translate", body)
            except CONN_ERRORS as e:
                tally.conn_errors[type(e).__name__] += 1
                await asyncio.sleep(RETRY_PAUSE)
                continue
            tally.add(reply)
            if reply.status in (429, 503):
                await asyncio.sleep(RETRY_PAUSE)
    finally:
        conn.close()


async def sample_rss(server: Server, samples: list[int]) -> None:
    """Append the server's RSS every SAMPLE_EVERY seconds until cancelled."""
    while True:
        rss = server.rss()
        if rss is not None:
            samples.append(rss)
        await asyncio.sleep(SAMPLE_EVERY)


@dataclass
class Watch:
    """What the server did with a connection: seconds from connecting until its first bytes (answered) and until it
    closed it, and what it sent."""

    start: float = field(default_factory=time.monotonic)
    data: bytearray = field(default_factory=bytearray)
    answered: float | None = None
    closed: float | None = None
    ended: str = "still open"

    @property
    def reacted(self) -> float | None:
        """When the server first answered or closed."""
        times = [t for t in (self.answered, self.closed) if t is not None]
        return min(times) if times else None

    def answer(self) -> str:
        """The response it sent: "none", "408 JSON", "400 non-JSON", "garbage"."""
        if not self.data:
            return "none"
        head, _, body = bytes(self.data).partition(b"\r\n\r\n")
        try:
            status, headers = parse_head(head)
        except BadResponse:
            return "garbage"
        return Reply(status, headers, body).kind()

    def describe(self) -> str:
        after = lambda t: "never" if t is None else f"{t:.1f} s"  # noqa: E731
        return f"answer {self.answer()} after {after(self.answered)}, {self.ended} after {after(self.closed)}"


async def watch(reader: asyncio.StreamReader, w: Watch) -> None:
    """Read until the server closes (or resets) the connection."""
    try:
        while chunk := await reader.read(65536):
            if w.answered is None:
                w.answered = time.monotonic() - w.start
            w.data += chunk
        w.ended = "closed"
    except OSError:
        w.ended = "reset"
    w.closed = time.monotonic() - w.start


async def watched(port: int, bound: float, send: Callable[[asyncio.StreamWriter], Awaitable[None]]) -> Watch:
    """Connect, run `send` while watching what the server does, for at most `bound` seconds."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError as e:
        return Watch(ended=f"connect failed ({type(e).__name__})")
    w = Watch()
    sender = asyncio.create_task(send(writer))
    try:
        await asyncio.wait_for(watch(reader, w), bound)
    except asyncio.TimeoutError:
        pass
    finally:
        sender.cancel()
        writer.close()
    return w


async def say_nothing(writer: asyncio.StreamWriter) -> None:
    pass


async def drip(writer: asyncio.StreamWriter, data: Iterator[int]) -> None:
    """Send one byte per second (until the connection breaks)."""
    try:
        for byte in data:
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(1.0)
    except OSError:
        pass


def header_trickle(port: int) -> Callable[[asyncio.StreamWriter], Awaitable[None]]:
    """Headers one byte per second, never finished (an endless X-Slow header after the real ones)."""
    head = f"POST /v1/translate HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nX-Slow: "
    return lambda writer: drip(writer, itertools.chain(head.encode(), itertools.repeat(ord("a"))))


def short_body(port: int) -> Callable[[asyncio.StreamWriter], Awaitable[None]]:
    """Content-Length: 1000 and a 10-byte body, then silence."""
    head = request_bytes(port, "POST", "/v1/translate", b"", {"X-Pad": "x"}).replace(
        b"Content-Length: 0", b"Content-Length: 1000")

    async def send(writer: asyncio.StreamWriter) -> None:
        try:
            writer.write(head + b'{"sentenc')
            await writer.drain()
        except OSError:
            pass

    return send


async def one_shot(port: int, body: bytes, timeout: float) -> str:
    """POST once on a new connection: the answer's kind ("200", "503 JSON", ...) or what went wrong."""
    conn = Connection(port)
    try:
        return (await asyncio.wait_for(conn.request("POST", "/v1/translate", body), timeout)).kind()
    except asyncio.TimeoutError:
        return f"no answer within {timeout:g} s"
    except CONN_ERRORS as e:
        return f"connection error ({type(e).__name__})"
    finally:
        conn.close()

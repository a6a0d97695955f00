"""`nmt serve` under abuse: a flood of greedy clients, connections that never speak, and SIGTERM under load.

What it measures, each scenario against a fresh `python -m nmt serve` subprocess on a free loopback port (stderr
in a temp file, stopped with SIGTERM at the end, killed if it hangs):

  - flood: --flooders keep-alive connections, each POSTing --sentences-per-request sentences to /v1/translate in a
    loop (reconnecting when the server closes it; after a 503/429 it waits 0.5 s, ignoring Retry-After), for
    --seconds; meanwhile one good client sends one sentence at a time (10 s client timeout: a timeout is a failure
    with latency 10 s; it connects just before the flood, like a user already there). Reported: the good client's
    requests, p50/p99/max latency and failures; the flooders' answers by status, non-200 answers without a JSON
    {"error": "..."} body, 503s without Retry-After, connection errors; the server's RSS (VmRSS) when idle (after
    8 warm-up requests of the flooders' size sent at once: the memory of full batches is the server's working set,
    not the flood's), its peak (sampled every 0.5 s) and at the end (2 s after the
    flooders left); sentences translated (/health before and after).
  - silent: --silent TCP connections that never send a byte: how long until the server closes each (bounded to
    serve.read_timeout + 10 s); meanwhile a good client sends one sentence per second. Also one connection that
    sends its headers one byte per second (never finishing them) and one that announces Content-Length: 1000 and
    sends 10 bytes: when each was answered or closed, and with what.
  - sigterm: with serve.shutdown_timeout = --shutdown-timeout, --shutdown-requests requests of
    --sentences-per-request sentences at once, each on its own connection; once /health shows them queued (at most
    1 s), SIGTERM. Reported: every answer (status, JSON or not, connection errors), the time from SIGTERM to the
    process's exit and its exit code, and the "Traceback"s in the server's stderr.

Goals (PASS/FAIL each; the exit code is 0 either way, this is a measurement):
  - flood: peak RSS <= idle RSS + 200 MiB; the good client's p99 <= 2 s with no failures; the flooders got at least
    one 503/429 and every non-200 answer was a JSON error (and every 503 carried Retry-After);
  - silent: every silent connection closed within serve.read_timeout + 1 s; the good client answered every time;
    the header trickle and the short body closed or answered with a JSON 4xx (408) within serve.read_timeout + 1 s;
  - sigterm: every request answered 200 or with a JSON 503 (no connection errors, no 500, nothing non-JSON), exit
    code 0, exit within serve.shutdown_timeout + 5 s.

The client is asyncio over raw sockets with a minimal HTTP/1.1 client (keep-alive, Content-Length or chunked
bodies), so thousands of connections cost it little; its open-files limit is raised to the hard limit first (the
server inherits it). The client shares the machine with the server: on a small machine it takes CPU from it.

Usage (from the repository root):

    python bench/serve_abuse.py                                      # all three, full size, demo model
    python bench/serve_abuse.py --scenario flood --seconds 10 --flooders 100 --sentences-per-request 20
    python bench/serve_abuse.py --scenario silent --silent 20
    python bench/serve_abuse.py --scenario sigterm --shutdown-requests 20 --shutdown-timeout 5
    python bench/serve_abuse.py --checkpoint runs/multi30k-en-de/averaged.pt --set serve.read_timeout=5
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common import ROOT, table

MULTI30K = ROOT.parent / "shared" / "data" / "multi30k" / "test2016.en"
MIB = 2**20
GOOD_TIMEOUT = 10.0  # the good client's timeout: a request not answered by then is a failure of 10 s
RETRY_PAUSE = 0.5  # what flooders wait after a 503/429 or a failed connection
SAMPLE_EVERY = 0.5  # RSS sampling period
QUEUE_WAIT = 1.0  # sigterm: longest wait for the requests to show up as queued
RSS_GOAL = 200 * MIB
WARM_UP = 8  # flood: requests sent at once before "idle" is measured, so that the server has run full batches
P99_GOAL = 2.0


# ---- a minimal HTTP/1.1 client


class BadResponse(Exception):
    """What came back is not an HTTP response."""


# what a broken or closed connection raises (IncompleteReadError is an EOFError; ConnectionError an OSError)
CONN_ERRORS: tuple[type[BaseException], ...] = (OSError, EOFError, asyncio.LimitOverrunError, BadResponse,
                                                ValueError)


@dataclass
class Reply:
    status: int
    headers: dict[str, str]  # names lower-cased
    body: bytes

    def payload(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError:
            return None

    @property
    def json_error(self) -> bool:
        """A JSON body {"error": "..."}, as every error of `nmt serve` must be."""
        payload = self.payload()
        return isinstance(payload, dict) and isinstance(payload.get("error"), str)

    @property
    def translated(self) -> bool:
        """A 200 with {"translations": [{"text": ...}, ...]}."""
        payload = self.payload()
        rows = payload.get("translations") if isinstance(payload, dict) else None
        return self.status == 200 and isinstance(rows, list) and all(isinstance(r, dict) and "text" in r
                                                                     for r in rows)

    def kind(self) -> str:
        """The answer as the tables count it: "200", "503 JSON", "400 non-JSON", ..."""
        if self.status == 200:
            return "200" if self.translated else "200 unexpected body"
        return f"{self.status} {'JSON' if self.json_error else 'non-JSON'}"


def request_bytes(port: int, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Accept: application/json"]
    if body or method == "POST":
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise BadResponse(f"bad status line {lines[0][:80]!r}")
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return int(parts[1]), headers


async def read_chunked(reader: asyncio.StreamReader) -> bytes:
    body = bytearray()
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0].strip(), 16)
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers
                pass
            return bytes(body)
        body += await reader.readexactly(size)
        await reader.readexactly(2)


async def read_reply(reader: asyncio.StreamReader) -> Reply:
    status, headers = parse_head(await reader.readuntil(b"\r\n\r\n"))
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = await read_chunked(reader)
    elif "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    else:  # until the server closes
        body = await reader.read()
    return Reply(status, headers, body)


class Connection:
    """One keep-alive connection to 127.0.0.1:port: opened on first use, reopened after the server closed it. Any
    error (a cancellation too) closes it, so the next request starts on a fresh one."""

    def __init__(self, port: int):
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: bytes = b"") -> Reply:
        try:
            if self.writer is None:
                self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
            assert self.reader is not None
            self.writer.write(request_bytes(self.port, method, path, body))
            await self.writer.drain()
            reply = await read_reply(self.reader)
        except BaseException:
            self.close()
            raise
        if reply.headers.get("connection", "").lower() == "close":
            self.close()
        return reply

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def get_json(port: int, path: str, timeout: float = 10.0) -> dict[str, Any] | None:
    """GET path on a connection of its own: the JSON object of a 200, else None."""
    conn = Connection(port)
    try:
        reply = await asyncio.wait_for(conn.request("GET", path), timeout)
    except (asyncio.TimeoutError, *CONN_ERRORS):
        return None
    finally:
        conn.close()
    payload = reply.payload()
    return payload if reply.status == 200 and isinstance(payload, dict) else None


async def connected(port: int) -> Connection:
    """A keep-alive connection that has had one answer (/health): a client there before the abuse began."""
    conn = Connection(port)
    await conn.request("GET", "/health")
    return conn


def translate_body(sentences: list[str]) -> bytes:
    return json.dumps({"sentences": sentences}).encode()


# ---- the server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_bytes(pid: int) -> int | None:
    """VmRSS of a process (None once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


class Server:
    """`python -m nmt serve` on a free loopback port, its stderr in a temp file; `async with` waits until /health
    answers 200, and stops it at the end (SIGTERM, then kill)."""

    def __init__(self, args: argparse.Namespace, *settings: str):
        self.port = free_port()
        fd, name = tempfile.mkstemp(prefix="serve-abuse-", suffix=".log")
        self.log = Path(name)
        sets = [x for s in [*args.set, *settings] for x in ("--set", s)]  # the scenario's own settings win
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": str(args.threads)}
        with os.fdopen(fd, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "nmt", "serve", "--checkpoint", str(args.checkpoint), "--port", str(self.port),
                 "--threads", str(args.threads), "--dtype", args.dtype, "--no-access-log", *sets],
                stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=ROOT)
        self.limits: dict[str, Any] = {}

    async def __aenter__(self) -> Server:
        deadline = time.monotonic() + 300
        while await get_json(self.port, "/health") is None:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise SystemExit(f"nmt serve did not start; the end of its log:\n{self.log_tail()}")
            await asyncio.sleep(0.2)
        info = await get_json(self.port, "/v1/info") or {}
        self.limits = info.get("serve") or {}
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.stop)

    def limit(self, key: str, default: float) -> float:
        """A serve.KEY the server runs with (from /v1/info)."""
        value = self.limits.get(key)
        return float(value) if isinstance(value, int | float) else default

    def rss(self) -> int | None:
        return rss_bytes(self.proc.pid)

    async def exited(self, within: float) -> float | None:
        """Seconds until the process ended (None: still running after `within`)."""
        start = time.monotonic()
        while self.proc.poll() is None:
            if time.monotonic() - start > within:
                return None
            await asyncio.sleep(0.02)
        return time.monotonic() - start

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(self.limit("shutdown_timeout", 60) + 10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def tracebacks(self) -> int:
        return self.log.read_text(errors="replace").count("Traceback")

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def log_row(self) -> tuple[str, str]:
        """("Tracebacks in stderr", count): the log is kept (and named) when there are any, else removed."""
        count = self.tracebacks()
        if count:
            return "Tracebacks in server stderr", f"{count} (see {self.log})"
        self.log.unlink(missing_ok=True)
        return "Tracebacks in server stderr", "0"


# ---- clients


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


# ---- results


@dataclass
class Outcome:
    name: str
    rows: list[tuple[str, str]]
    goals: list[tuple[str, bool]]  # (the goal with what was measured, met)


def fmt_counts(counts: dict[Any, int]) -> str:
    return ", ".join(f"{k}: {v:,}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))


def mib(n: int | None) -> str:
    return "?" if n is None else f"{n / MIB:,.0f} MiB"


def show(outcome: Outcome) -> None:
    print(f"\n== {outcome.name}")
    print(table(["measure", "value"], [list(r) for r in outcome.rows]))
    for text, ok in outcome.goals:
        print(f"{'PASS' if ok else 'FAIL'}  {text}")


def bodies(lines: list[str], size: int, count: int) -> list[bytes]:
    """`count` request bodies of `size` sentences each, every one starting further along the lines (cyclic)."""
    return [translate_body([lines[(k * size + i) % len(lines)] for i in range(size)]) for k in range(count)]


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ---- scenarios


async def flood(args: argparse.Namespace, lines: list[str]) -> Outcome:
    async with Server(args) as server:
        work = bodies(lines, args.sentences_per_request, args.flooders)
        progress(f"flood: warm-up ({WARM_UP} requests at once), then {args.flooders} flooders x "
                 f"{args.sentences_per_request} sentences "
                 f"for {args.seconds:g} s")
        await asyncio.gather(*(one_shot(server.port, body, 120) for body in work[:WARM_UP]))
        idle, before = server.rss(), await get_json(server.port, "/health")
        samples: list[int] = []
        tally, stop = Tally(), asyncio.Event()
        sampler = asyncio.create_task(sample_rss(server, samples))
        good = asyncio.create_task(good_client(await connected(server.port), lines, stop))
        flooders = [asyncio.create_task(flooder(server.port, body, tally)) for body in work]
        began = time.monotonic()
        await asyncio.sleep(args.seconds)
        stop.set()
        for task in flooders:
            task.cancel()
        await asyncio.gather(*flooders, return_exceptions=True)
        run = await good
        seconds = time.monotonic() - began
        await asyncio.sleep(2.0)
        sampler.cancel()
        end, after = server.rss(), await get_json(server.port, "/health", 30)
        rows = [*run.rows(), *tally.rows(), ("server RSS idle / peak / end",
                                             f"{mib(idle)} / {mib(max(samples, default=None))} / {mib(end)}"),
                translated_row(before, after, seconds), server.log_row()]
    return Outcome(f"flood: {args.flooders} flooders x {args.sentences_per_request} sentences, {args.seconds:g} s",
                   rows, flood_goals(run, tally, idle, samples))


def translated_row(before: dict | None, after: dict | None, seconds: float) -> tuple[str, str]:
    if before is None or after is None:
        return "sentences translated", "? (/health did not answer)"
    n = after["sentences"] - before["sentences"]
    return "sentences translated", f"{n:,} ({n / seconds:,.1f}/s)"


def flood_goals(run: GoodRun, tally: Tally, idle: int | None, samples: list[int]) -> list[tuple[str, bool]]:
    peak = max(samples, default=None)
    p99, failed = percentile(run.latencies, 0.99), sum(run.failures.values())
    refused = tally.statuses[503] + tally.statuses[429]
    return [
        (f"peak RSS <= idle + 200 MiB (idle {mib(idle)}, peak {mib(peak)})",
         idle is not None and peak is not None and peak <= idle + RSS_GOAL),
        (f"good client p99 <= {P99_GOAL:g} s and no failures (p99 {p99:.2f} s, {failed} failures of "
         f"{len(run.latencies)})", p99 <= P99_GOAL and failed == 0),
        (f"flooders got JSON 503/429 ({refused:,}), no non-JSON errors ({tally.non_json_errors}), Retry-After on "
         f"every 503 ({tally.no_retry_after} without)",
         refused > 0 and tally.non_json_errors == 0 and tally.no_retry_after == 0),
    ]


async def silent(args: argparse.Namespace, lines: list[str]) -> Outcome:
    async with Server(args) as server:
        read_timeout = server.limit("read_timeout", 10.0)
        bound, port = read_timeout + 10, server.port
        progress(f"silent: {args.silent} silent connections, a header trickle and a short body "
                 f"(serve.read_timeout={read_timeout:g} s; watching up to {bound:g} s)")
        stop = asyncio.Event()
        good = asyncio.create_task(good_client(await connected(port), lines, stop, pace=1.0))
        trickle = asyncio.create_task(watched(port, bound, header_trickle(port)))
        short = asyncio.create_task(watched(port, bound, short_body(port)))
        watches = await asyncio.gather(*(watched(port, bound, say_nothing) for _ in range(args.silent)))
        slow = {"header trickle (1 byte/s)": await trickle, "Content-Length 1000, 10 bytes sent": await short}
        stop.set()
        run = await good
        rows = [*silent_rows(watches), *((name, w.describe()) for name, w in slow.items()), *run.rows(),
                server.log_row()]
    return Outcome(f"silent: {args.silent} connections that never send (serve.read_timeout={read_timeout:g} s)",
                   rows, silent_goals(watches, slow, run, read_timeout + 1))


def silent_rows(watches: list[Watch]) -> list[tuple[str, str]]:
    closed = [w.closed for w in watches if w.closed is not None]
    times = f"{statistics.median(closed):.2f} / {max(closed):.2f}" if closed else "-"
    answers = Counter(w.answer() for w in watches)
    return [("silent: closed by the server", f"{len(closed)} of {len(watches)}"),
            ("silent: how they ended", fmt_counts(Counter(w.ended for w in watches))),
            ("silent: what the server sent", fmt_counts(answers)),
            ("silent: median / max seconds to close", times)]


def silent_goals(watches: list[Watch], slow: dict[str, Watch], run: GoodRun, limit: float) -> list[tuple[str, bool]]:
    in_time = sum(w.closed is not None and w.closed <= limit for w in watches)
    failed = sum(run.failures.values())
    goals = [(f"silent connections all closed within {limit:g} s ({in_time} of {len(watches)})",
              in_time == len(watches)),
             (f"good client answered every time ({len(run.latencies) - failed} of {len(run.latencies)})",
              failed == 0 and bool(run.latencies))]
    for name, w in slow.items():
        answer = w.answer()
        fine = answer == "none" or (answer.endswith(" JSON") and answer[0] == "4")
        goals.append((f"{name}: closed or a JSON 4xx within {limit:g} s ({w.describe()})",
                      w.reacted is not None and w.reacted <= limit and fine))
    return goals


async def sigterm(args: argparse.Namespace, lines: list[str]) -> Outcome:
    n, grace = args.shutdown_requests, args.shutdown_timeout
    async with Server(args, f"serve.shutdown_timeout={grace:g}") as server:
        progress(f"sigterm: {n} requests x {args.sentences_per_request} sentences, then SIGTERM "
                 f"(serve.shutdown_timeout={grace:g} s)")
        tasks = [asyncio.create_task(one_shot(server.port, body, grace + 30))
                 for body in bodies(lines, args.sentences_per_request, n)]
        queued = await wait_queued(server.port, tasks)
        answered_before = sum(t.done() for t in tasks)
        server.proc.send_signal(signal.SIGTERM)
        took = await server.exited(grace + 30)
        exit_after = f"killed (still running after {grace + 30:g} s)" if took is None else f"{took:.2f} s"
        answers = Counter(await asyncio.gather(*tasks))
        code = server.stop()
        rows = [("at SIGTERM: requests in flight / sentences queued / already answered",
                 f"{queued.get('requests', '?')} / {queued.get('queued', '?')} / {answered_before}"),
                ("answers", fmt_counts(answers)),
                ("SIGTERM to exit", exit_after),
                ("exit code", str(code)), server.log_row()]
    good = answers["200"] + answers["503 JSON"]
    goals = [(f"every request answered 200 or JSON 503 ({good} of {n})", good == n),
             (f"exit code 0 (got {code})", code == 0 and took is not None),
             (f"exit within serve.shutdown_timeout + 5 s = {grace + 5:g} s (took "
              f"{'over ' + format(grace + 30, 'g') if took is None else format(took, '.2f')} s)",
              took is not None and took <= grace + 5)]
    return Outcome(f"sigterm: {n} requests x {args.sentences_per_request} sentences, serve.shutdown_timeout="
                   f"{grace:g} s", rows, goals)


async def wait_queued(port: int, tasks: list[asyncio.Task]) -> dict[str, Any]:
    """Poll /health until every request is in flight or answered, at most QUEUE_WAIT seconds; its last answer."""
    deadline, last = time.monotonic() + QUEUE_WAIT, {}
    while time.monotonic() < deadline:
        last = await get_json(port, "/health", max(0.1, deadline - time.monotonic())) or last
        if last.get("requests", 0) + sum(t.done() for t in tasks) >= len(tasks):
            break
        await asyncio.sleep(0.05)
    return last


SCENARIOS: dict[str, Callable[[argparse.Namespace, list[str]], Awaitable[Outcome]]] = {
    "flood": flood, "silent": silent, "sigterm": sigterm}


# ---- main


def raise_open_files_limit() -> int:
    """The soft RLIMIT_NOFILE raised to the hard one (thousands of connections); the limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft == resource.RLIM_INFINITY or soft >= target:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        pass
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def load_sentences(path: Path) -> list[str]:
    """The non-empty lines of `path`, else made-up short sentences."""
    if path.is_file():
        lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        if lines:
            return lines
    progress(f"{path} not found: made-up sentences")
    who = ["A man", "Two women", "A little girl", "An old dog", "Three boys"]
    what = ["is walking", "are playing", "is sitting", "runs", "is waiting"]
    where = ["in the park", "on the beach", "near a red car", "in a small kitchen", "under a tree"]
    return [f"{a} {b} {c}." for a, b, c in itertools.product(who, what, where)]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", type=Path, default=ROOT / "tests" / "data" / "demo-model.pt")
    p.add_argument("--source", type=Path, default=MULTI30K, help="sentences, one per line")
    p.add_argument("--threads", type=int, default=1, help="the server's torch threads")
    p.add_argument("--dtype", default="fp32", help="as nmt serve --dtype")
    p.add_argument("--scenario", choices=[*SCENARIOS, "all"], default="all")
    p.add_argument("--seconds", type=float, default=60.0, help="flood: how long")
    p.add_argument("--flooders", type=int, default=2000, help="flood: greedy connections")
    p.add_argument("--sentences-per-request", type=int, default=100, help="flood and sigterm: per request")
    p.add_argument("--silent", type=int, default=300, help="silent: connections that never send a byte")
    p.add_argument("--shutdown-requests", type=int, default=200, help="sigterm: requests queued before SIGTERM")
    p.add_argument("--shutdown-timeout", type=float, default=10.0, help="sigterm: serve.shutdown_timeout")
    p.add_argument("--set", action="append", default=[], metavar="serve.KEY=VALUE",
                   help="passed to every server (repeatable)")
    return p.parse_args()


def main() -> None:
    args = parse_args()
    files = raise_open_files_limit()
    lines = load_sentences(args.source)
    names = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
    progress(f"{args.checkpoint}, {args.threads} server threads, {len(lines)} sentences of {args.source.name}; "
             f"open-files limit {files}")
    outcomes = [asyncio.run(SCENARIOS[name](args, lines)) for name in names]
    for outcome in outcomes:
        show(outcome)
    failed = [(o.name.split(":")[0], text) for o in outcomes for text, ok in o.goals if not ok]
    total = sum(len(o.goals) for o in outcomes)
    print(f"\noverall: {'PASS' if not failed else 'FAIL'}: {total - len(failed)} of {total} goals met"
          + "".join(f"\n  FAIL {name}: {text}" for name, text in failed))


if __name__ == "__main__":
    main()

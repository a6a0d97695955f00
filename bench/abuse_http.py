"""The pieces of `bench/serve_abuse.py` that talk to a server: a minimal asyncio HTTP/1.1 client over raw
sockets (keep-alive, Content-Length or chunked bodies: thousands of connections cost it little) and `Server`,
`python -m nmt serve` run on a free loopback port for one scenario."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common import ROOT

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

"""Real `nmt serve` processes (`python -m nmt serve` on 127.0.0.1, a free port each) for the serve and explain
tests: start one, wait until it is ready, stop it."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from .cli import python_path
from .paths import DEMO_MODEL

CHECKPOINT = DEMO_MODEL  # a fixed small demo model (see tests/test_golden.py)
ENV = {**os.environ, "PYTHONPATH": python_path(), "OMP_NUM_THREADS": "1"}
LIMITS = ["--set", "serve.max_sentences=110", "--set", "serve.max_chars=300", "--set", "serve.max_body_bytes=32768",
          "--set", "serve.max_beam=8", "--set", "serve.max_delay_ms=50"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    proc: subprocess.Popen
    url: str
    log: Path
    out: Path

    def stderr(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def health(self) -> dict:
        return httpx.get(f"{self.url}/health", timeout=30).json()


def wait_ready(server: Server, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert server.proc.poll() is None, f"the server exited: {server.stderr()}"
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{server.url}/health", timeout=5).status_code == 200:
                return
        time.sleep(0.1)
    raise AssertionError(f"not ready within {seconds} s: {server.stderr()}")


@contextlib.contextmanager
def serving(tmp: Path, *args: str, checkpoint: Path = CHECKPOINT, preexec: Callable[[], None] | None = None,
            **env: str) -> Iterator[Server]:
    port = free_port()
    log, out = tmp / f"serve-{port}.err", tmp / f"serve-{port}.out"
    with open(log, "wb") as err, open(out, "wb") as stdout:
        proc = subprocess.Popen([sys.executable, "-m", "nmt", "serve", "--checkpoint", str(checkpoint), "--port",
                                 str(port), "--dtype", "fp32", "--threads", "1", "--no-access-log", *args],
                                stdout=stdout, stderr=err, env={**ENV, **env}, preexec_fn=preexec)
    server = Server(proc, f"http://127.0.0.1:{port}", log, out)
    try:
        wait_ready(server)
        yield server
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

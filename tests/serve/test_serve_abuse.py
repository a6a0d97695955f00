"""`nmt serve` against hostile and careless clients: floods (fairness, a bounded queue, deadlines, rate limits),
connections that hold without sending, shutdown under load, keys, browsers on other origins, and the noise each
used to leave in the log. Real servers on 127.0.0.1 (tests.helpers.serving), every loop bounded."""

from __future__ import annotations

import json
import logging
import math
import resource
import signal
import socket
import threading
import time

import httpx
import pytest

from nmt.config.experiment import Config
from tests.helpers import paths
from tests.helpers.serving import CHECKPOINT, Server, serving

MULTI30K = paths.MULTI30K / "test2016.en"


@pytest.fixture(scope="module")
def sentences() -> list[str]:
    if MULTI30K.is_file():
        return MULTI30K.read_text(encoding="utf-8").splitlines()[:300]
    return [f"a man in a blue shirt is standing on a ladder number {i} ." for i in range(300)]


def host_port(server: Server) -> tuple[str, int]:
    host, port = server.url.removeprefix("http://").split(":")
    return host, int(port)


def error_of(reply: httpx.Response, status: int, limit: str | None = None) -> str:
    """The one-line JSON error of a reply with this status (and limit key)."""
    assert reply.status_code == status, reply.text
    body = reply.json()
    assert isinstance(body["error"], str) and "\n" not in body["error"]
    assert body.get("limit") == limit, body
    return body["error"]


# --------------------------------------------------------------------------- 1. the queue: fair and bounded


def test_a_flood_gets_503_json_while_a_one_sentence_client_is_answered_at_once(tmp_path, sentences):
    bound = 6  # serve.max_queue_seconds: the queue holds 3x the two batches (1 s each) a small request may wait for
    with serving(tmp_path, "--set", f"serve.max_queue_seconds={bound}") as s:
        replies: list[httpx.Response] = []
        stop = threading.Event()
        # flooders enough for twice the bound of work at the rate this server measured on this machine
        per_request = sum(len(line) for line in sentences[:100])
        n = min(60, max(8, math.ceil(2 * bound * s.health()["characters_per_second"] / per_request)))

        def flooder(i: int) -> None:  # 100 sentences a request, again and again
            with httpx.Client(base_url=s.url, timeout=120) as http:
                while not stop.is_set():
                    try:
                        replies.append(http.post("/v1/translate", json={"sentences": sentences[i % 3 * 100:][:100]}))
                    except httpx.HTTPError:  # the server stopping at the end
                        return
                    if replies[-1].status_code != 200:
                        time.sleep(0.1)

        threads = [threading.Thread(target=flooder, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 120
        while (s.health()["queued_seconds"] or 0) < bound / 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        waits = []
        for word in ("forty-two", "seven", "nine"):
            ahead = s.health()  # what the flood has queued, by the server's own measure
            started = time.monotonic()
            reply = httpx.post(f"{s.url}/v1/translate", json={"sentences": [word]}, timeout=60)
            waits.append((time.monotonic() - started, ahead["queued_seconds"]))
            assert reply.status_code == 200
            # it went past the flood: answered before the sentences queued ahead of it were all translated
            assert s.health()["sentences"] - ahead["sentences"] < ahead["queued"], (ahead, s.health())
        stop.set()
        for t in threads:
            t.join(120)
    assert all(queued >= bound / 4 for _, queued in waits), waits  # the flood was there each time
    assert all(waited < queued for waited, queued in waits), waits  # sooner than the queue ahead would take
    busy = [r for r in replies if r.status_code == 503]
    assert busy and {r.status_code for r in replies} == {200, 503}
    assert "busy" in error_of(busy[0], 503, "serve.max_queue_seconds")
    assert int(busy[0].headers["retry-after"]) >= 1
    assert "Traceback" not in s.stderr()


def test_a_request_past_its_deadline_is_a_json_503_and_its_work_is_dropped():
    from fastapi.testclient import TestClient

    from nmt.serve import ServeOptions, Service, create_app, open_model

    ran: list[list[str]] = []

    def load():
        model = open_model(CHECKPOINT, Config(), ServeOptions(dtype="fp32", config_given=False))
        translate = model.translator.translate_chunk

        def slow(lines, **kwargs):
            ran.append(list(lines))
            if "slow" in lines:
                time.sleep(1.5)
            return translate(lines, **kwargs)

        model.translator.translate_chunk = slow
        return model

    limits = Config().serve
    limits.request_timeout = 0.5
    with TestClient(create_app(Service(load, limits), limits), base_url="http://localhost") as client:
        for _ in range(600):
            if client.get("/health").status_code == 200:
                break
            time.sleep(0.05)
        replies: dict[str, httpx.Response] = {}
        first = threading.Thread(target=lambda: replies.update(first=client.post(
            "/v1/translate", json={"sentences": ["slow"]})))
        first.start()
        time.sleep(0.2)
        late = client.post("/v1/translate", json={"sentences": ["dropped"]})  # queued behind the slow batch
        first.join(30)
        for reply in (late, replies["first"]):  # the running one is answered too: its batch finishes unread
            assert "serve.request_timeout=0.5" in error_of(reply, 503, "serve.request_timeout")
            assert reply.headers["retry-after"] == "1"
        for _ in range(100):
            if client.get("/health").json()["batches"] >= 1:  # the slow batch is over
                break
            time.sleep(0.05)
        kept = client.post("/v1/translate", json={"sentences": ["kept"]})
        assert kept.status_code == 200, kept.text
    assert ["dropped"] not in ran and ["kept"] in ran


def test_rate_limits_per_client_are_429_json(tmp_path):
    with serving(tmp_path, "--set", "serve.requests_per_minute=3", "--set", "serve.chars_per_minute=50") as s:
        over = httpx.post(f"{s.url}/translate", json={"q": "a" * 60})
        assert "60 characters in one request" in error_of(over, 429, "serve.chars_per_minute")
        for _ in range(3):
            assert httpx.post(f"{s.url}/translate", json={"q": "ab"}).status_code == 200
        refused = httpx.post(f"{s.url}/v1/translate", json={"sentences": ["ab"]})
        assert "too many requests" in error_of(refused, 429, "serve.requests_per_minute")
        assert 1 <= int(refused.headers["retry-after"]) <= 60
        assert httpx.get(f"{s.url}/health").status_code == 200  # reading the state is not rate limited


# --------------------------------------------------------------------------- 2. connections


def read_until_closed(sock: socket.socket, limit: float) -> tuple[bytes, float]:
    """What the server sends until it closes the connection, and when it closed (inf: not within `limit`)."""
    started, data = time.monotonic(), b""
    sock.settimeout(limit)
    try:
        while chunk := sock.recv(4096):
            data += chunk
    except TimeoutError:
        return data, math.inf
    except ConnectionResetError:
        pass
    return data, time.monotonic() - started


def test_connections_that_hold_without_sending_are_closed_within_the_read_timeout(tmp_path):
    with serving(tmp_path, "--set", "serve.read_timeout=1") as s:
        silent = [socket.create_connection(host_port(s)) for _ in range(20)]
        trickle = socket.create_connection(host_port(s))
        trickle.sendall(b"POST /v1/trans")  # headers that never end
        short = socket.create_connection(host_port(s))
        short.sendall(b"POST /v1/translate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 1000\r\n\r\n{\"sentences\"")  # a body shorter than promised
        for sock in silent:
            data, after = read_until_closed(sock, 5)
            assert data == b"" and after < 3
        for sock, what in ((trickle, b"headers"), (short, b"body")):
            data, after = read_until_closed(sock, 5)
            assert after < 3 and data.startswith(b"HTTP/1.1 408") and what + b" not received within" in data
            assert json.loads(data.split(b"\r\n\r\n", 1)[1])["limit"] == "serve.read_timeout"
        assert httpx.post(f"{s.url}/v1/translate", json={"sentences": ["forty-two"]}).status_code == 200


def test_out_of_descriptors_the_server_caps_connections_and_logs_accept_errors_once(tmp_path):
    """Under `ulimit -n 256`: the cap is lowered to fit, connections over it get a JSON 503, accept() failures
    are one log line per interval (asyncio wrote a traceback per waiting connection per loop pass), and once
    the silent connections are timed out a client is served again."""
    def low_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))

    with serving(tmp_path, "--set", "serve.read_timeout=2", preexec=low_limit) as s:
        assert "serve.max_connections lowered to 192" in s.stderr()
        held = [socket.create_connection(host_port(s)) for _ in range(300)]  # past the cap, then past the limit
        over = held[200]
        over.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        data, _ = read_until_closed(over, 5)
        assert data.startswith(b"HTTP/1.1 503")
        assert json.loads(data.split(b"\r\n\r\n", 1)[1])["limit"] == "serve.max_connections"
        time.sleep(1)
        for sock in held:
            sock.close()
        for _ in range(100):
            try:
                if httpx.post(f"{s.url}/v1/translate", json={"sentences": ["a"]}, timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        else:
            raise AssertionError("not served again")
        err = s.stderr()
    assert "Traceback" not in err and len(err) < 20_000
    assert 1 <= err.count("cannot accept connections") <= 2


def test_accept_errors_are_counted_and_logged_once_per_interval(caplog):
    import asyncio

    from nmt.serve.connections import AcceptErrors

    loop = asyncio.new_event_loop()
    try:
        handler = AcceptErrors(loop, interval=60)
        with caplog.at_level(logging.ERROR, logger="uvicorn.error"):
            for _ in range(2048):
                handler(loop, {"message": "socket.accept() out of system resource", "exception": OSError(24, "x")})
        assert len(caplog.records) == 1 and handler.count == 2047
    finally:
        loop.close()


def test_the_open_files_limit_is_raised_to_the_hard_limit():
    import subprocess
    import sys

    code = ("import resource; resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit("
            "resource.RLIMIT_NOFILE)[1])); from nmt.serve.connections import raise_open_files_limit; "
            "print(raise_open_files_limit(), resource.getrlimit(resource.RLIMIT_NOFILE)[0])")
    soft, now = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    assert int(soft) == int(now) == (hard if hard != resource.RLIM_INFINITY else 1 << 20) > 64


# --------------------------------------------------------------------------- 3. shutdown under load


def test_a_stop_signal_with_more_queued_than_the_shutdown_timeout_answers_all_and_exits_0(tmp_path, sentences):
    replies: dict[int, httpx.Response | Exception] = {}
    # the queue bound far away: what is refused here is refused for the stop, never for load
    with serving(tmp_path, "--set", "serve.shutdown_timeout=1", "--set", "serve.max_queue_seconds=3600") as s:
        # enough requests for ~4 s of queued work at the rate this server measured on this machine (slow or fast)
        per_request = sum(len(line) for line in sentences[:100])
        n = min(200, max(8, math.ceil(4 * s.health()["characters_per_second"] / per_request)))

        def client(i: int) -> None:
            try:
                replies[i] = httpx.post(f"{s.url}/v1/translate", timeout=120,
                                        json={"sentences": sentences[i % 3 * 100:i % 3 * 100 + 100]})
            except Exception as e:  # noqa: BLE001  (counted as a failure below)
                replies[i] = e

        threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for _ in range(1000):
            if (health := s.health())["queued_seconds"] and health["queued_seconds"] > 2:
                break
            time.sleep(0.02)
        assert health["queued_seconds"] > 1, health  # more than the shutdown timeout, by the server's own measure
        s.proc.send_signal(signal.SIGTERM)
        stopped = time.monotonic()
        for t in threads:
            t.join(120)
        assert s.proc.wait(30) == 0
        assert time.monotonic() - stopped < 1 + 5
    statuses = sorted(r.status_code for r in replies.values() if isinstance(r, httpx.Response))
    assert len(statuses) == n and set(statuses) <= {200, 503} and 503 in statuses, replies
    for r in replies.values():
        if r.status_code == 503:
            assert "shutting down" in r.json()["error"]
    err = s.stderr()
    assert "Traceback" not in err and "terminate called" not in err and err.rstrip().endswith("stopped")


# --------------------------------------------------------------------------- 4-6. keys, browsers, noise


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("guarded"), "--set", 'serve.cors_origins=["https://app.example"]',
                 "--set", "serve.max_beam=8", NMT_API_KEY="s3cret") as s:
        yield s


KEY = {"authorization": "Bearer s3cret"}


@pytest.mark.parametrize("what, body, headers", [
    ("a lone surrogate", '{"q": "a", "api_key": "\\udc80"}', {}),
    ("a bare Authorization header", '{"q": "a"}', {"authorization": "s3cret"}),
    ("another scheme", '{"q": "a"}', {"authorization": "Basic s3cret"}),
    ("a body key under a wrong header", '{"q": "a", "api_key": "s3cret"}', {"authorization": "Bearer nope"}),
])
def test_any_wrong_key_is_403_json(guarded, what, body, headers):
    reply = httpx.post(f"{guarded.url}/translate", content=body, headers={"content-type": "application/json",
                                                                           **headers})
    assert "API key" in error_of(reply, 403)


def test_the_header_key_wins_and_the_key_is_checked_before_the_body(guarded):
    ok = httpx.post(f"{guarded.url}/translate", json={"q": "forty-two", "api_key": ""}, headers=KEY)
    assert ok.status_code == 200
    for path, body in (("/v1/translate", {"sentences": "not a list"}), ("/translate", {"q": 3})):
        assert "API key" in error_of(httpx.post(f"{guarded.url}{path}", json=body), 403)
        assert httpx.post(f"{guarded.url}{path}", json=body, headers=KEY).status_code in (400, 422)


def test_cors_for_the_configured_origins_only_and_other_hosts_refused(guarded):
    preflight = httpx.options(f"{guarded.url}/translate", headers={
        "origin": "https://app.example", "access-control-request-method": "POST",
        "access-control-request-headers": "content-type, authorization"})
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == "https://app.example"
    mine = httpx.post(f"{guarded.url}/translate", json={"q": "a"}, headers={**KEY, "origin": "https://app.example"})
    assert mine.headers["access-control-allow-origin"] == "https://app.example"
    other = httpx.post(f"{guarded.url}/translate", json={"q": "a"}, headers={**KEY, "origin": "https://evil.example"})
    assert "access-control-allow-origin" not in other.headers
    rebound = httpx.get(f"{guarded.url}/health", headers={"host": "evil.example"})
    assert "evil.example" in error_of(rebound, 400, "serve.allowed_hosts")
    assert httpx.get(f"{guarded.url}/health", headers={"host": f"localhost:{host_port(guarded)[1]}"}).status_code == 200


def test_errors_stay_short_json_and_the_log_says_one_thing_per_event(guarded, sentences):
    deep = httpx.post(f"{guarded.url}/translate", content=b'{"q": ' + b"[" * 100_000, headers={
        **KEY, "content-type": "application/json"})
    assert error_of(deep, 400) == "malformed JSON body: nested too deep"
    huge = httpx.post(f"{guarded.url}/v1/translate", json={"sentences": ["a"], "beam": int("9" * 4000)}, headers=KEY)
    assert len(error_of(huge, 400, "serve.max_beam")) < 200
    with socket.create_connection(host_port(guarded)) as sock:
        sock.sendall(b"NOT HTTP\r\n\r\n")
        data, _ = read_until_closed(sock, 5)
    assert data.startswith(b"HTTP/1.1 400") and json.loads(data.split(b"\r\n\r\n", 1)[1])["error"]
    long = "a " * 400  # over the 255 source positions of the model
    reply = httpx.post(f"{guarded.url}/v1/translate", json={"sentences": ["a", "b", long, long]}, headers=KEY)
    assert reply.status_code == 200
    with socket.create_connection(host_port(guarded)) as sock:  # a client that leaves before its answer
        body = json.dumps({"sentences": sentences[:100], "beam": 8}).encode()
        sock.sendall(b"POST /v1/translate HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer s3cret\r\n"
                     b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        time.sleep(0.05)
    for _ in range(100):
        if "left before its answer" in (err := guarded.stderr()):
            break
        time.sleep(0.05)
    truncated = [line for line in err.splitlines() if "truncated to" in line]
    assert len(truncated) == 1 and "sentence 3 (400 tokens), 4 (400 tokens) truncated to 255 tokens" in truncated[0]
    assert err.count("left before its answer") == 1 and "never retrieved" not in err and "Traceback" not in err

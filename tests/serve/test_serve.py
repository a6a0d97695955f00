"""`nmt serve`: real servers (`python -m nmt serve` subprocesses on 127.0.0.1, a free port each) spoken to over
HTTP, their answers compared with what `nmt translate` prints for the same lines (the batcher on its own:
tests/serve/test_serve_batcher.py; abuse, clients, HTML, detection, the page: the other tests/serve/test_*.py)."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from nmt.config.experiment import Config, load_config
from nmt.demo.files import write_demo
from nmt.errors import ConfigError
from tests.helpers.cli import assert_one_line_error, nmt_process, run_cli
from tests.helpers.serving import CHECKPOINT, LIMITS, Server, serving

SCORE_TOL = 2e-4  # printed scores are rounded to 4 decimals, and batch shapes move the last digit


# --------------------------------------------------------------------------- config


def test_serve_config_keys_are_checked():
    cfg = load_config(None, ["serve.max_chars=10", "serve.port=0", "serve.batching=false"]).serve
    assert (cfg.max_chars, cfg.port, cfg.batching) == (10, 0, False)
    with pytest.raises(ConfigError, match="serve.max_chars"):
        load_config(None, ["serve.max_chars=0"])
    with pytest.raises(ConfigError, match="serve.port"):
        load_config(None, ["serve.port=70000"])
    with pytest.raises(ConfigError, match=r"unknown key 'serve.max_char'.*did you mean 'max_chars'"):
        load_config(None, ["serve.max_char=10"])


# --------------------------------------------------------------------------- in-process: the ready flag


def test_health_is_503_until_the_model_is_loaded():
    from fastapi.testclient import TestClient

    from nmt.serve import ServeOptions, Service, create_app, open_model

    release = threading.Event()

    def slow_load():
        assert release.wait(60)
        return open_model(CHECKPOINT, Config(), ServeOptions(dtype="fp32", config_given=False))

    limits = Config().serve
    service = Service(slow_load, limits)
    with TestClient(create_app(service, limits), base_url="http://localhost") as client:
        loading = client.get("/health")
        assert loading.status_code == 503 and loading.json() == {"status": "loading"}
        early = client.post("/v1/translate", json={"sentences": ["forty-two"]})
        assert early.status_code == 503 and "loading" in early.json()["error"]
        release.set()
        for _ in range(600):
            if (health := client.get("/health")).status_code == 200:
                break
            time.sleep(0.05)
        assert health.json()["status"] == "ready"
        answer = client.post("/v1/translate", json={"sentences": ["forty-two"]})
        assert answer.status_code == 200 and answer.json()["translations"][0]["text"]


def test_a_failing_batch_is_a_json_500_and_the_server_lives_on():
    from fastapi.testclient import TestClient

    from nmt.serve import ServeOptions, Service, create_app, open_model

    def broken(lines, **kwargs):
        raise RuntimeError("out of memory\n(details)")

    def load():
        model = open_model(CHECKPOINT, Config(), ServeOptions(dtype="fp32", config_given=False))
        model.translator.translate_chunk = broken
        return model

    limits = Config().serve
    with TestClient(create_app(Service(load, limits), limits), base_url="http://localhost") as client:
        for _ in range(600):
            if client.get("/health").status_code == 200:
                break
            time.sleep(0.05)
        for _ in range(2):
            reply = client.post("/translate", json={"q": "forty-two"})
            assert reply.status_code == 500 and reply.json() == {"error": "Cannot translate text: out of memory"}
        assert client.get("/health").json()["status"] == "ready"


# --------------------------------------------------------------------------- real servers


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    with serving(tmp_path_factory.mktemp("serve"), *LIMITS) as s:
        yield s
    assert "Traceback" not in s.stderr(), s.stderr()  # bad clients never crashed a request either


# what `nmt translate` prints, per mode: its options, and the same as /v1/translate options
MODES = {
    "checkpoint's search": ([], {}),
    "greedy": (["--beam", "1"], {"beam": 1}),
    "nbest3 with scores": (["--beam", "5", "--nbest", "3", "--scores"], {"beam": 5, "nbest": 3, "scores": True}),
}
ODD_LINES = ["", "   ", "forty-two", "Zürich ünïcödé ☃ 😀", "one two three four five six seven eight nine ten " * 5]


@pytest.fixture(scope="module")
def lines(tmp_path_factory) -> list[str]:
    raw = write_demo(tmp_path_factory.mktemp("serve-raw"), n_train=10, n_valid=10, n_test=100, seed=3)
    return Path(raw["test"] + ".en").read_text(encoding="utf-8").splitlines() + ODD_LINES


@pytest.fixture(scope="module")
def expected(tmp_path_factory, lines) -> dict[str, list[list[tuple]]]:
    """`nmt translate --checkpoint CHECKPOINT --dtype fp32 OPTIONS` of `lines`, per mode: for each line its
    hypotheses as (text,) or, with n-best, (text, score, log-prob)."""
    tmp = tmp_path_factory.mktemp("serve-expected")
    source = tmp / "in.en"
    source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    out: dict[str, list[list[tuple]]] = {}
    for mode, (options, _) in MODES.items():
        target = tmp / "out.txt"
        result = run_cli("translate", "--checkpoint", str(CHECKPOINT), "--dtype", "fp32", "--threads", "1",
                         "--no-progress", *options, "-i", str(source), "-o", str(target))
        assert result.exit_code == 0, result.output
        printed = target.read_text(encoding="utf-8").split("\n")[:-1]
        if "--nbest" in options:
            rows: list[list[tuple]] = [[] for _ in lines]
            for row in printed:
                number, text, score, logprob = row.split("\t")
                rows[int(number) - 1].append((text, float(score), float(logprob)))
            out[mode] = rows
        else:
            assert len(printed) == len(lines)
            out[mode] = [[(text,)] for text in printed]
    return out


def as_rows(answer: dict) -> list[tuple]:
    """A /v1/translate answer of one sentence in the shape of `expected`."""
    if "nbest" in answer:
        assert (answer["score"], answer["logprob"]) == (answer["nbest"][0]["score"], answer["nbest"][0]["logprob"])
        return [(h["text"], h["score"], h["logprob"]) for h in answer["nbest"]]
    return [(answer["text"],)]


def assert_same(got: list[list[tuple]], want: list[list[tuple]]) -> None:
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want), 1):
        assert [h[0] for h in g] == [h[0] for h in w], f"sentence {i}"
        for gh, wh in zip(g, w):
            assert all(abs(x - y) <= SCORE_TOL for x, y in zip(gh[1:], wh[1:])), f"sentence {i}: {gh} vs {wh}"


@pytest.mark.parametrize("mode", list(MODES))
def test_v1_translate_equals_nmt_translate(server, lines, expected, mode):
    reply = httpx.post(f"{server.url}/v1/translate", json={"sentences": lines, **MODES[mode][1]}, timeout=120)
    assert reply.status_code == 200, reply.text
    assert_same([as_rows(a) for a in reply.json()["translations"]], expected[mode])


def test_libretranslate_api_equals_nmt_translate(server, lines, expected):
    want = [rows[0][0] for rows in expected["checkpoint's search"]]
    languages = httpx.get(f"{server.url}/languages", timeout=30).json()
    assert languages[0] == {"code": "en", "name": "English", "targets": ["de"]}
    as_list = httpx.post(f"{server.url}/translate", json={"q": lines, "source": "en", "target": "de"}, timeout=120)
    assert as_list.status_code == 200 and as_list.json() == {"translatedText": want}
    one = httpx.post(f"{server.url}/translate", json={"q": lines[0], "source": "auto", "target": "de",
                                                      "format": "text"}, timeout=60)
    assert one.json() == {"translatedText": want[0], "detectedLanguage": {"confidence": 100.0, "language": "en"}}
    form = httpx.post(f"{server.url}/translate", data={"q": lines[1], "source": "en", "target": "de"}, timeout=60)
    assert form.json() == {"translatedText": want[1]}
    multipart = httpx.post(f"{server.url}/translate", files={"q": (None, lines[2]), "source": (None, "en")},
                           timeout=60)
    assert multipart.json() == {"translatedText": want[2]}
    text = httpx.post(f"{server.url}/translate", json={"q": "\n".join(lines[:3])}, timeout=60)  # a line at a time
    assert text.json() == {"translatedText": "\n".join(want[:3])}
    alternatives = httpx.post(f"{server.url}/translate", json={"q": lines[3], "alternatives": 2}, timeout=60).json()
    assert alternatives["translatedText"] and len(alternatives["alternatives"]) == 2


def test_info_says_model_languages_and_search(server):
    info = httpx.get(f"{server.url}/v1/info", timeout=30).json()
    assert info["languages"] == {"source": "en", "target": "de"} and info["model"]["checkpoint"] == CHECKPOINT.name
    assert info["decode"]["beam"] == 4 and info["dtype"] == "fp32" and info["serve"]["max_sentences"] == 110


def test_attention_comes_with_the_translation_when_asked(server, expected):
    reply = httpx.post(f"{server.url}/v1/translate", json={"sentences": ["forty-two", ""], "attention": True},
                       timeout=60).json()["translations"]
    plain = httpx.post(f"{server.url}/v1/translate", json={"sentences": ["forty-two"]}, timeout=60).json()
    assert reply[0]["text"] == plain["translations"][0]["text"] and reply[1] == {"text": "", "attention": None}
    attention = reply[0]["attention"]
    assert attention["source"][-1] == attention["target"][-1] == "</s>"
    assert len(attention["weights"]) == len(attention["target"])
    assert all(len(row) == len(attention["source"]) and abs(sum(row) - 1) < 1e-3 for row in attention["weights"])
    assert "attention" not in plain["translations"][0]


def test_small_answers_are_not_held_back(server):
    """Each connection has Nagle's algorithm off: with it, an answer written in two parts waited for the client's
    delayed ACK (~40 ms on Linux) and a 1-client server was twice as slow as translating in-process."""
    with httpx.Client(base_url=server.url, timeout=30) as http:
        took = []
        for _ in range(21):
            started = time.perf_counter()
            assert http.get("/health").status_code == 200
            took.append(time.perf_counter() - started)
    assert sorted(took)[10] < 0.02


def test_32_concurrent_clients_all_get_their_answers_in_order(server, lines, expected):
    want = [rows[0][0] for rows in expected["checkpoint's search"]]
    clients = 32
    start = threading.Barrier(clients)
    answers: dict[int, list[str]] = {}
    before = server.health()["batches"]

    def client(i: int) -> None:
        mine = [lines[(3 * i + k) % len(lines)] for k in range(3)]
        with httpx.Client(timeout=120) as http:
            start.wait(30)
            if i % 2:  # half speak LibreTranslate, half the native API
                answers[i] = http.post(f"{server.url}/translate", json={"q": mine}).json()["translatedText"]
            else:
                reply = http.post(f"{server.url}/v1/translate", json={"sentences": mine}).json()
                answers[i] = [t["text"] for t in reply["translations"]]

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    for i in range(clients):
        assert answers.get(i) == [want[(3 * i + k) % len(lines)] for k in range(3)], f"client {i}"
    assert server.health()["batches"] - before < clients // 2  # requests were merged into batches


@dataclass
class Bad:
    what: str
    path: str
    status: int
    needle: str
    limit: str | None = None
    json: object = None
    content: bytes | None = None
    data: dict | None = None
    method: str = "POST"
    headers: dict | None = None


def chunks(total: int) -> Iterator[bytes]:
    yield b'{"sentences": ["'
    for _ in range(total // 1000):
        yield b"a" * 1000
    yield b'"]}'


BAD = [
    Bad("body over the limit", "/v1/translate", 413, "serve.max_body_bytes", "serve.max_body_bytes",
        content=b'{"sentences": ["' + b"a" * 40_000 + b'"]}'),
    Bad("chunked body over the limit", "/translate", 413, "serve.max_body_bytes", "serve.max_body_bytes",
        content=chunks(40_000)),  # no Content-Length: counted while read
    Bad("too many sentences", "/v1/translate", 400, "111 sentences", "serve.max_sentences",
        json={"sentences": ["a"] * 111}),
    Bad("too many lines", "/translate", 400, "111 sentences", "serve.max_sentences", json={"q": "a\n" * 110 + "a"}),
    Bad("sentence too long", "/v1/translate", 400, "sentence 2 has 301 characters", "serve.max_chars",
        json={"sentences": ["a", "b" * 301]}),
    Bad("text too long", "/translate", 400, "301 characters", "serve.max_chars", json={"q": ["b" * 301]}),
    Bad("beam too large", "/v1/translate", 400, "beam 9", "serve.max_beam", json={"sentences": ["a"], "beam": 9}),
    Bad("too many alternatives", "/translate", 400, "alternatives 8", "serve.max_beam",
        json={"q": "a", "alternatives": 8}),
    Bad("nbest over beam", "/v1/translate", 422, "nbest", json={"sentences": ["a"], "beam": 2, "nbest": 3}),
    Bad("beam 0", "/v1/translate", 422, "beam", json={"sentences": ["a"], "beam": 0}),
    Bad("malformed JSON", "/v1/translate", 400, "malformed JSON", content=b'{"sentences": ["a"',
        headers={"content-type": "application/json"}),
    Bad("malformed JSON (LibreTranslate)", "/translate", 400, "malformed JSON", content=b'{"q": ',
        headers={"content-type": "application/json"}),
    Bad("invalid UTF-8", "/v1/translate", 400, "", content=b'{"sentences": ["\xff\xfe"]}',
        headers={"content-type": "application/json"}),
    Bad("sentences not a list", "/v1/translate", 422, "sentences", json={"sentences": "a"}),
    Bad("a sentence not a string", "/v1/translate", 422, "sentences.1", json={"sentences": ["a", 2]}),
    Bad("scores not a bool", "/v1/translate", 422, "scores", json={"sentences": ["a"], "scores": "maybe"}),
    Bad("misspelt option", "/v1/translate", 422, "", json={"sentences": ["a"], "nbets": 2}),
    Bad("a list body", "/v1/translate", 400, "object", json=["a"]),
    Bad("line break in a sentence", "/v1/translate", 422, "line break", json={"sentences": ["a\nb"]}),
    Bad("q missing", "/translate", 400, "q", json={"source": "en", "target": "de"}),
    Bad("q a number", "/translate", 400, "q", json={"q": 3}),
    Bad("JSON not an object", "/translate", 400, "object", json=["a"]),
    Bad("other source language", "/translate", 400, "fr is not supported", json={"q": "a", "source": "fr",
                                                                                "target": "de"}),
    Bad("other target language", "/translate", 400, "fr is not supported", json={"q": "a", "source": "en",
                                                                                "target": "fr"}),
    Bad("format pdf", "/translate", 400, "pdf format is not supported", json={"q": "a", "format": "pdf"}),
    Bad("plain text body", "/translate", 415, "text/plain", content=b"q=a", headers={"content-type": "text/plain"}),
    Bad("unknown path", "/v2/translate", 404, "Not Found", json={}),
    Bad("wrong method", "/translate", 405, "Method Not Allowed", method="GET"),
]


@pytest.mark.parametrize("bad", BAD, ids=[b.what for b in BAD])
def test_a_bad_request_gets_its_status_and_a_json_error_and_the_server_keeps_answering(server, bad):
    reply = httpx.request(bad.method, f"{server.url}{bad.path}", json=bad.json, content=bad.content, data=bad.data,
                          headers=bad.headers, timeout=60)
    assert reply.status_code == bad.status, reply.text
    body = reply.json()
    error = body["error"]
    assert isinstance(error, str) and error and "\n" not in error and "Traceback" not in reply.text
    assert bad.needle in error
    if bad.limit:
        assert body["limit"] == bad.limit and bad.limit in error
    good = httpx.post(f"{server.url}/v1/translate", json={"sentences": ["forty-two"]}, timeout=60)
    assert good.status_code == 200 and good.json()["translations"][0]["text"]


def raw(server: Server, data: bytes, read: bool = True) -> bytes:
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(data)
        return s.recv(65536) if read else b""


def test_bad_clients_do_not_block_others(server, lines, expected):
    want = [rows[0][0] for rows in expected["checkpoint's search"]]
    assert raw(server, b"NOT HTTP AT ALL\r\n\r\n").startswith(b"HTTP/1.1 400")
    # a body promised and never sent in full, then gone
    raw(server, b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: 1000\r\n\r\n{\"sentences\": [", read=False)
    # a large request, then gone before its answer: what has not started is dropped
    body = json.dumps({"sentences": lines[:100], "beam": 8}).encode()
    raw(server, b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body), read=False)
    started = time.monotonic()
    reply = httpx.post(f"{server.url}/v1/translate", json={"sentences": lines[:2]}, timeout=60)
    assert reply.json()["translations"] == [{"text": w} for w in want[:2]]
    assert time.monotonic() - started < 30
    for _ in range(300):  # and nothing stays queued for the clients that left
        if (health := server.health())["queued"] == 0 and health["requests"] == 0:
            break
        time.sleep(0.05)
    assert (health["queued"], health["requests"]) == (0, 0)


def test_api_key_is_required_when_set(tmp_path):
    with serving(tmp_path, NMT_API_KEY="s3cret") as s, httpx.Client(base_url=s.url, timeout=60) as http:
        for reply in (http.post("/translate", json={"q": "forty-two"}),
                      http.post("/translate", json={"q": "forty-two", "api_key": "wrong"}),
                      http.post("/v1/translate", json={"sentences": ["forty-two"]}),
                      http.post("/v1/translate", json={"sentences": ["a"]}, headers={"authorization": "Bearer x"})):
            assert reply.status_code == 403 and "API key" in reply.json()["error"]
        assert http.post("/translate", json={"q": "forty-two", "api_key": "s3cret"}).status_code == 200
        assert http.post("/translate", data={"q": "forty-two", "api_key": "s3cret"}).status_code == 200
        assert http.post("/v1/translate", json={"sentences": ["forty-two"]},
                         headers={"authorization": "Bearer s3cret"}).status_code == 200
        assert http.get("/languages").status_code == 200  # reading what it offers needs no key


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_a_stop_signal_answers_every_request_in_flight_and_exits_0(tmp_path, lines, expected, sig):
    want = [rows[0][0] for rows in expected["checkpoint's search"]]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    shutil.copy(CHECKPOINT, run_dir / "averaged.pt")
    before = {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in run_dir.iterdir()}
    requests = 5
    answers: dict[int, list[str]] = {}
    with serving(tmp_path, "--set", "serve.max_delay_ms=30000", "--set", "decode.max_tokens=65536",
                 checkpoint=run_dir / "averaged.pt") as s:
        # 110 sentences answered at once: the free model then waits (30 s at most: a loaded machine starts the
        # clients slowly) for 110 to come back, or for a full budget (set above what 100 sentences pad to), so the
        # 100 sentences of the requests below are all still queued when the signal comes (closing ends the wait)
        primer = httpx.post(f"{s.url}/v1/translate", json={"sentences": lines + lines[:5]}, timeout=120)
        assert primer.status_code == 200

        def client(i: int) -> None:
            reply = httpx.post(f"{s.url}/v1/translate", json={"sentences": lines[10 * i:10 * i + 20]}, timeout=120)
            answers[i] = [t["text"] for t in reply.json()["translations"]]

        threads = [threading.Thread(target=client, args=(i,)) for i in range(requests)]
        for t in threads:
            t.start()
        for _ in range(200):
            if (health := s.health())["requests"] == requests:
                break
            time.sleep(0.005)
        assert (health["requests"], health["queued"], health["sentences"]) == (requests, 20 * requests, 110)
        s.proc.send_signal(sig)
        for t in threads:
            t.join(120)
        assert s.proc.wait(60) == 0, s.stderr()
    for i in range(requests):
        assert answers.get(i) == want[10 * i:10 * i + 20], f"request {i}"
    err = s.stderr()
    assert "Traceback" not in err and err.rstrip().endswith("stopped") and s.out.read_bytes() == b""
    assert {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in run_dir.iterdir()} == before  # read-only


def test_without_the_extra_serve_is_a_one_line_error_naming_it():
    blocked = "import sys; sys.modules['fastapi'] = None; from nmt.cli.main import main; main()"
    assert_one_line_error(nmt_process("serve", "--checkpoint", str(CHECKPOINT), entry=("-c", blocked)),
                          "nmt[serve]", "fastapi")


def test_start_up_problems_are_one_line_errors(tmp_path):
    assert_one_line_error(nmt_process("serve", "--checkpoint", str(tmp_path / "none.pt")), "none.pt")
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"\x00" * 100)  # found, but fails to load on the model thread: the server stops
    assert_one_line_error(nmt_process("serve", "--checkpoint", str(bad), "--port", "0"), "bad.pt")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert_one_line_error(nmt_process("serve", "--checkpoint", str(CHECKPOINT), "--port", str(port)),
                              f"cannot listen on 127.0.0.1:{port}")

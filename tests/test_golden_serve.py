"""Golden answers of `nmt serve` (the rules: tests/golden.py): one real server (`python -m nmt serve` on 127.0.0.1,
a free port) with the demo model, asked one request at a time (so that each is one batch), its answers kept in
tests/fixtures/golden/serve.demo-model.json as the raw JSON bodies with their HTTP status.

Compared byte for byte, except:
- the numbers of "score" and "logprob" (/v1/translate with scores: full floats), within SCORE_TOL, as the scores of
  `nmt translate --scores`;
- the address and the token of translatedFileUrl (/translate_file): the port is a free one, the token random.
GET /health is left out: its counters and characters_per_second are the server's history and speed.

    NMT_UPDATE_GOLDEN=1 python3 -m pytest tests/test_golden_serve.py     # accept a deliberate change
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.helpers.cli import nmt_env
from tests.helpers.golden import DEMO, GOLDEN, SCORE_TOL, UPDATE, check

GOLDEN_FILE = GOLDEN / "serve.demo-model.json"
DOCUMENT = GOLDEN / "documents" / "doc.md"
S = ["I see the small red boat.", "the twenty-sixth of December eighteen forty-three", "three red cars",
     "We bought five big cups for nine euros.", "the small car"]
PAIR = {"source": "en", "target": "de"}
# name -> (method, path, httpx keyword arguments): each request the golden file answers
REQUESTS = {
    "GET /languages": ("GET", "/languages", {}),
    "GET /frontend/settings": ("GET", "/frontend/settings", {}),
    "GET /v1/info": ("GET", "/v1/info", {}),
    "POST /translate text": ("POST", "/translate", {"json": {"q": S[0], **PAIR, "format": "text"}}),
    "POST /translate form": ("POST", "/translate", {"data": {"q": S[1], **PAIR}}),
    "POST /translate q list": ("POST", "/translate", {"json": {"q": S, **PAIR}}),
    "POST /translate lines": ("POST", "/translate", {"json": {"q": "\n".join(S[:3]), **PAIR}}),
    "POST /translate html": ("POST", "/translate", {"json": {
        "q": '<p>I see the <b>small</b> red boat.</p><p>three <i>red</i> <a href="/cars">cars</a></p>',
        **PAIR, "format": "html"}}),
    "POST /translate alternatives": ("POST", "/translate", {"json": {"q": S[2], **PAIR, "alternatives": 3}}),
    "POST /translate source auto": ("POST", "/translate", {"json": {"q": S[3], "source": "auto", "target": "de"}}),
    "POST /translate unsupported target": ("POST", "/translate", {"json": {"q": S[0], "source": "en",
                                                                          "target": "fr"}}),
    "POST /detect": ("POST", "/detect", {"data": {"q": S[3]}}),
    "POST /v1/translate": ("POST", "/v1/translate", {"json": {"sentences": S}}),
    "POST /v1/translate nbest": ("POST", "/v1/translate", {"json": {"sentences": S, "beam": 5, "nbest": 3,
                                                                    "scores": True}}),
    "POST /v1/translate greedy": ("POST", "/v1/translate", {"json": {"sentences": S, "beam": 1}}),
    "POST /v1/translate glossary": ("POST", "/v1/translate", {"json": {"sentences": S, "glossary": {
        "small": "winzig", "cars": "Wagen", "December": "Dezember", "euros": ""}}}),
}
# the inherently variable: the server's address (a free port) and the download token in translatedFileUrl
FILE_URL = re.compile(r'"translatedFileUrl":"http://[^/"]+/download_file/[^"]+"')
SCORE = re.compile(r'"(score|logprob)":(-?\d+(?:\.\d+)?(?:[eE]-?\d+)?)')


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[str]:
    """The URL of one `nmt serve` of the demo model, ready; stopped (SIGTERM, then SIGKILL) after the module."""
    port, log = free_port(), tmp_path_factory.mktemp("golden-serve") / "serve.err"
    with open(log, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "nmt", "serve", "--checkpoint", str(DEMO), "--port", str(port),
                                 "--dtype", "fp32", "--threads", "1", "--no-access-log"],
                                stdout=subprocess.DEVNULL, stderr=err, env=nmt_env())
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, f"the server exited: {log.read_text(errors='replace')}"
            assert time.monotonic() < deadline, f"not ready within 120 s: {log.read_text(errors='replace')}"
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    break
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert "Traceback" not in log.read_text(errors="replace")


@pytest.fixture(scope="module")
def answers(server) -> dict[str, dict]:
    """name -> {"status", "body"} for every request of REQUESTS, then the document of /translate_file (the body
    of its /download_file) and its URL (masked), asked one at a time."""
    out = {}
    with httpx.Client(base_url=server, timeout=60) as client:
        for name, (method, path, kwargs) in REQUESTS.items():
            reply = client.request(method, path, **kwargs)
            out[name] = {"status": reply.status_code, "body": reply.text}
        with open(DOCUMENT, "rb") as f:
            reply = client.post("/translate_file", files={"file": (DOCUMENT.name, f)}, data=PAIR)
        out["POST /translate_file"] = {"status": reply.status_code, "body": FILE_URL.sub(
            '"translatedFileUrl":"http://HOST/download_file/TOKEN"', reply.text)}
        download = client.get(httpx.URL(reply.json()["translatedFileUrl"]).path) if reply.status_code == 200 else reply
        out["GET /download_file"] = {"status": download.status_code, "body": download.content.decode("utf-8")}
    return out


@pytest.fixture(scope="module")
def golden(answers) -> dict[str, dict]:
    """The golden answers (under NMT_UPDATE_GOLDEN=1 first rewritten where one differs beyond the tolerance)."""
    if UPDATE:
        check(GOLDEN_FILE, (json.dumps(answers, indent=1, ensure_ascii=False) + "\n").encode("utf-8"), same_answers)
    return json.loads(GOLDEN_FILE.read_text(encoding="utf-8"))


def same_answers(got: bytes, want: bytes) -> str | None:
    """None when every answer of the two golden files is the same (see same_answer)."""
    g, w = json.loads(got), json.loads(want)
    if list(g) != list(w):
        return f"requests {list(g)}, golden has {list(w)}"
    return next((f"{name}: {p}" for name in g if (p := same_answer(g[name], w[name])) is not None), None)


def same_answer(got: dict, want: dict) -> str | None:
    """None when the status is the same and the body too, but for the numbers of score and logprob (within
    SCORE_TOL); otherwise a description of the first difference."""
    if got["status"] != want["status"]:
        return f"status {got['status']}, golden {want['status']}: {got['body'][:300]}"
    g_body, w_body = SCORE.sub(r'"\1":NUMBER', got["body"]), SCORE.sub(r'"\1":NUMBER', want["body"])
    if g_body != w_body:
        where = next((i for i, (a, b) in enumerate(zip(g_body, w_body, strict=False)) if a != b),
                     min(len(g_body), len(w_body)))
        return f"body differs at {where}:\n  got:    {g_body[where - 80:where + 80]!r}\n" \
               f"  golden: {w_body[where - 80:where + 80]!r}"
    for (key, g), (_, w) in zip(SCORE.findall(got["body"]), SCORE.findall(want["body"]), strict=True):
        if abs(float(g) - float(w)) > SCORE_TOL:
            return f"{key} {g}, golden {w}"
    return None


@pytest.mark.parametrize("name", [*REQUESTS, "POST /translate_file", "GET /download_file"])
def test_serve_answer_matches_golden(name, answers, golden):
    problem = same_answer(answers[name], golden[name])
    assert problem is None, f"{GOLDEN_FILE.name}, {name}: {problem}"


def test_the_downloaded_document_is_what_nmt_translate_writes(golden):
    """/translate_file's document is the command line's translation of it (tests/test_golden_documents.py)."""
    assert golden["GET /download_file"]["body"] == (GOLDEN / "documents" / "doc.de.md").read_text(encoding="utf-8")

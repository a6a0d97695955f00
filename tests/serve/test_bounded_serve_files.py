"""Bounded document work in `nmt serve` (issue 43, items 2 and 8) on a real server on 127.0.0.1: a document past
serve.file_timeout is answered 503 and its file thread is free again right after (a small upload that follows is
answered at once), and a download link is used once even by 30 concurrent GETs (one 200 with the file, 404s
otherwise, never a 500 or an empty 200)."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.helpers.serving import LIMITS, Server, serving

TIMEOUT_S = 2


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("serve-bounded")
    (temp := tmp / "tmp").mkdir()
    with serving(tmp, *LIMITS, "--set", f"serve.file_timeout={TIMEOUT_S}", "--set", "serve.max_file_bytes=400000",
                 TMPDIR=str(temp)) as s:
        yield s
    assert "Traceback" not in s.stderr(), s.stderr()
    assert not list(temp.rglob("*")), "the temp files outlived the server"


def upload(server: Server, name: str, data: bytes) -> httpx.Response:
    return httpx.post(f"{server.url}/translate_file", files={"file": (name, data, "application/octet-stream")},
                      data={"source": "en", "target": "de"}, timeout=120)


def test_a_timed_out_document_frees_its_thread(server: Server) -> None:
    # ~4,000 sentences: minutes of the demo model on one thread, far past serve.file_timeout
    slow = "\n\n".join(f"the {k} red cars and the {k} green bikes" for k in range(4000)).encode()
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:  # both file threads (FILE_THREADS = 2)
        answers = list(pool.map(lambda n: upload(server, f"slow{n}.txt", slow), range(2)))
    for answer in answers:
        assert answer.status_code == 503, answer.text
        assert answer.json()["limit"] == "serve.file_timeout" and "\n" not in answer.json()["error"]
    assert time.monotonic() - started < TIMEOUT_S + 20  # generous: a shared machine
    after = time.monotonic()
    small = upload(server, "small.txt", b"three red cars\n")
    assert small.status_code == 200, small.text
    assert time.monotonic() - after < 15  # the threads stopped at the deadline, not at the documents' end


def test_a_download_link_is_used_once_by_concurrent_gets(server: Server) -> None:
    answer = upload(server, "once.txt", b"three red cars\n")
    assert answer.status_code == 200, answer.text
    url = answer.json()["translatedFileUrl"]
    with concurrent.futures.ThreadPoolExecutor(30) as pool:
        got = list(pool.map(lambda _: httpx.get(url, timeout=60), range(30)))
    statuses = sorted(g.status_code for g in got)
    assert statuses == [200] + [404] * 29, statuses
    sent = next(g for g in got if g.status_code == 200)
    assert sent.content.strip() and sent.headers["content-disposition"].endswith('once_de.txt"')
    assert all(g.json()["limit"] == "serve.file_ttl" for g in got if g.status_code == 404)
    assert httpx.get(url, timeout=30).status_code == 404

"""LibreTranslate's file translation in `nmt serve` (nmt/serve/files.py) on a real server: the request LibreTranslate's
web page sends (multipart file, source, target, api_key; libretranslatepy 2.1.4 has no file method), the documents
translated as `/translate` translates their sentences, the download link used once, LibreTranslate's errors as
one-line JSON for missing, unsupported, refused, corrupt and oversized files, the count limit, the API key, and no
file left in the server's temp dir after many requests or at shutdown."""

from __future__ import annotations

import io
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.helpers.browser import WAIT_S, browser_or_reason
from tests.helpers.serving import LIMITS, Server, serving

KEY = "s3cret"
MAX_FILE = 20_000
MAX_FILES = 3
LINES = ["three red cars", "two green bikes"]


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[tuple[Server, Path]]:
    tmp = tmp_path_factory.mktemp("serve-files")
    (temp := tmp / "tmp").mkdir()
    with serving(tmp, *LIMITS, "--api-key", KEY, "--set", f"serve.max_file_bytes={MAX_FILE}", "--set",
                 f"serve.max_files={MAX_FILES}", TMPDIR=str(temp)) as s:
        yield s, temp
    assert "Traceback" not in s.stderr(), s.stderr()
    assert not list(temp.rglob("*")), "the temp files outlived the server"


@pytest.fixture
def server(served) -> Server:
    return served[0]


def upload(server: Server, name: str, data: bytes, **form: str) -> httpx.Response:
    """What LibreTranslate's page sends (its app.js translateFile: FormData file, source, target, api_key)."""
    fields = {"source": "en", "target": "de", "api_key": KEY, **form}
    return httpx.post(f"{server.url}/translate_file", files={"file": (name, data, "application/octet-stream")},
                      data=fields, timeout=120)


def libre(server: Server, text: str) -> str:
    answer = httpx.post(f"{server.url}/translate", json={"q": text, "source": "en", "target": "de", "api_key": KEY},
                        timeout=60)
    assert answer.status_code == 200, answer.text
    return answer.json()["translatedText"]


def translated(server: Server, name: str, data: bytes) -> tuple[str, bytes]:
    """The download name and content of `name` translated, and the link used once."""
    answer = upload(server, name, data)
    assert answer.status_code == 200, answer.text
    url = answer.json()["translatedFileUrl"]
    assert url.startswith(f"{server.url}/download_file/")
    got = httpx.get(url, timeout=30)
    assert got.status_code == 200, got.text
    again = httpx.get(url, timeout=30)
    assert again.status_code == 404 and again.json()["limit"] == "serve.file_ttl"
    disposition = got.headers["content-disposition"]
    return disposition.split("filename=")[1].strip('"'), got.content


def test_settings_advertise_the_formats_as_libretranslate_lists_them(server):
    settings = httpx.get(f"{server.url}/frontend/settings", timeout=30).json()
    assert settings["filesTranslation"] is True
    formats = settings["supportedFilesFormat"]
    assert {".txt", ".md", ".html", ".srt", ".vtt"} <= set(formats) and ".pdf" not in formats
    assert all(f.startswith(".") and f == f.lower() for f in formats)


def test_markdown_and_subtitles_come_back_translated_in_their_format(server):
    want = [libre(server, line) for line in LINES]
    name, md = translated(server, "notes.md", f"# {LINES[0]}\n\n- {LINES[1]}\n\n```\n{LINES[0]}\n```\n".encode())
    assert name == "notes_de.md"
    assert md.decode() == f"# {want[0]}\n\n- {want[1]}\n\n```\n{LINES[0]}\n```\n"  # code blocks are not translated
    srt = f"1\n00:00:01,000 --> 00:00:02,500\n{LINES[0]}\n\n2\n00:00:03,000 --> 00:00:04,000\n{LINES[1]}\n"
    name, out = translated(server, "film.srt", srt.encode())
    assert name == "film_de.srt"
    assert out.decode() == srt.replace(LINES[0], want[0]).replace(LINES[1], want[1])


def test_errors_are_libretranslates_one_line_json(server):
    def error(answer: httpx.Response, status: int) -> dict:
        assert answer.status_code == status, answer.text
        body = answer.json()
        assert "\n" not in body["error"] and "/tmp" not in body["error"]
        return body

    post = f"{server.url}/translate_file"
    assert error(httpx.post(post, data={"source": "en", "target": "de", "api_key": KEY}, timeout=30), 400)[
        "error"] == "Invalid request: missing file parameter"
    assert error(upload(server, "a.exe", b"MZ"), 400)["error"] == "Invalid request: file format not supported"
    assert error(upload(server, "noext", b"hi"), 400)["error"] == "Invalid request: file format not supported"
    assert "PDF is refused" in error(upload(server, "paper.pdf", b"%PDF-1.4"), 400)["error"]
    assert "corrupt" in error(upload(server, "report.docx", b"PK\x03\x04 not really a zip"), 400)["error"]
    assert "wrong extension" in error(upload(server, "report.docx", b"plain text, not a docx"), 400)["error"]
    assert error(upload(server, "a.txt", b"\xff\xfe\xfa"), 400)["error"].startswith("Invalid request: a.txt")
    assert error(upload(server, "a.txt", b"x" * (MAX_FILE + 1)), 413)["limit"] == "serve.max_file_bytes"
    assert error(upload(server, "a.txt", b"x" * 200_000), 413)["limit"] == "serve.max_file_bytes"  # by the body
    assert error(upload(server, "a.txt", b"hi", api_key=""), 403)["error"].startswith("Please contact")
    assert error(upload(server, "a.txt", b"hi", api_key="wrong"), 403)["error"] == "Invalid API key"
    assert error(upload(server, "a.txt", b"hi", target="xx"), 400)["error"] == "xx is not supported"
    assert error(httpx.get(f"{server.url}/download_file/{'A' * 32}", timeout=30), 404)["limit"] == "serve.file_ttl"
    assert error(httpx.get(f"{server.url}/download_file/..%2F..%2Fetc%2Fpasswd", timeout=30), 404)
    docx = io.BytesIO()
    with zipfile.ZipFile(docx, "w") as z:
        z.writestr("[Content_Types].xml", "<Types/>")
    assert error(upload(server, "empty.docx", docx.getvalue()), 400)["error"].startswith("Invalid request: ")


def test_files_awaiting_download_are_bounded_by_max_files(server):
    urls = [upload(server, f"{i}.txt", b"three red cars\n").json()["translatedFileUrl"] for i in range(MAX_FILES)]
    full = upload(server, "one-more.txt", b"three red cars\n")
    assert full.status_code == 503 and full.json()["limit"] == "serve.max_files" and "Retry-After" in full.headers
    for url in urls:
        assert httpx.get(url, timeout=30).status_code == 200
    assert upload(server, "now.txt", b"three red cars\n").status_code == 200  # its link is left to the shutdown


def test_no_file_is_left_after_many_requests(served):
    server, temp = served
    started, n = time.monotonic(), 0
    with httpx.Client(timeout=60) as client:
        while n < 1000 and time.monotonic() - started < 6:  # 1,000 and files never fetched: bench/serve_files.py
            answer = client.post(f"{server.url}/translate_file", files={"file": ("t.txt", b"three red cars\n")},
                                 data={"source": "en", "target": "de", "api_key": KEY})
            assert answer.status_code == 200, answer.text
            got = client.get(answer.json()["translatedFileUrl"])
            assert got.status_code == 200 and got.content.strip()
            if n % 7 == 0:  # and bad ones
                assert client.post(f"{server.url}/translate_file", files={"file": ("b.docx", b"PK\x03\x04")},
                                   data={"api_key": KEY}).status_code == 400
            n += 1
    print(f"{n} requests in {time.monotonic() - started:.1f} s")
    assert n >= 30, f"only {n} requests in 6 s"
    deadline = time.monotonic() + 5  # a file goes just after its download's last byte
    while len(leftovers := [p for p in temp.rglob("*") if p.is_file()]) > 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(leftovers) <= 1, leftovers  # the one file of the test above, awaiting its download


def test_the_pages_file_tab_translates_a_file_and_links_its_download(server, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser, reason = browser_or_reason()
    if browser is None:
        pytest.skip(f"no browser to test the page in: {reason}")
    try:
        browser.set_page_load_timeout(WAIT_S)
        browser.get(f"{server.url}/")
        wait, find = WebDriverWait(browser, WAIT_S), browser.find_element
        wait.until(lambda b: find(By.ID, "file-input").is_enabled() and find(By.ID, "target-lang").is_enabled())
        assert ".srt" in find(By.ID, "file-formats").text
        browser.execute_script("document.getElementById('api-key').value = arguments[0]", KEY)
        (src := tmp_path / "cars.txt").write_text(f"{LINES[0]}\n", encoding="utf-8")
        find(By.ID, "file-input").send_keys(str(src))
        find(By.ID, "file-translate").click()
        wait.until(lambda b: find(By.ID, "file-download").is_displayed())
        href = find(By.ID, "file-download").get_attribute("href")
        assert href.startswith(f"{server.url}/download_file/"), find(By.ID, "file-status").text
        assert httpx.get(href, timeout=30).text == f"{libre(server, LINES[0])}\n"
        errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors  # the CSP refused nothing
    finally:
        browser.quit()

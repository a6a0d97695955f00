"""The web page of `nmt serve` (nmt/serve/page.py) on a real server: served with its static files and nothing from
elsewhere; and, in a real headless Chromium (Debian's `chromium` + `chromium-driver`, with selenium), translating
as you type exactly what the API translates, with the alternatives and the cross-attention heatmap of a line.

The browser test skips, saying why, where selenium, chromium or chromedriver is missing. It saves a screenshot of
the page: into the test's tmp dir, or where NMT_PAGE_SCREENSHOT says (the README's docs/serve-page.png is made so:
`NMT_PAGE_SCREENSHOT=docs/serve-page.png python -m pytest tests/serve/test_serve_page.py`)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers.browser import WAIT_S, browser_or_reason
from tests.helpers.serving import Server, serving

IDS = ["source-text", "source-lang", "target-lang", "translation", "alternatives", "copy", "heatmap", "status"]
FIRST = "A man is riding a bike."
SECOND = "three hundred forty-two euros"  # what the demo model knows: "zwei" looks at "two" before "vierzig"
ALTERNATIVES = 2  # what the page asks for


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    with serving(tmp_path_factory.mktemp("serve-page")) as s:
        yield s
    assert "Traceback" not in s.stderr(), s.stderr()


def test_the_page_and_its_files_are_served_and_nothing_comes_from_elsewhere(server):
    page = httpx.get(f"{server.url}/", timeout=30)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    for name in IDS:
        assert f'id="{name}"' in page.text, name
    assert "default-src 'none'" in page.headers["content-security-policy"]  # the browser fetches nothing else
    linked = [u for u in re.findall(r'(?:src|href)="([^"]*)"', page.text) if not u.startswith("data:")]
    assert {"static/app.js", "static/style.css"} <= set(linked)
    texts = [page.text]
    for url in linked:
        answer = httpx.get(f"{server.url}/{url}", timeout=30)
        assert answer.status_code == 200, url
        texts.append(answer.text)
    assert "javascript" in httpx.get(f"{server.url}/static/app.js", timeout=30).headers["content-type"]
    assert httpx.get(f"{server.url}/static/missing.js", timeout=30).status_code == 404
    for text in texts:  # no CDN, no web font, no protocol-relative URL
        assert not re.search(r"https?://|[\"'(]//\w", text), re.search(r"https?://|[\"'(]//\w", text)
    assert "/" not in {p for p in httpx.get(f"{server.url}/openapi.json", timeout=30).json()["paths"]}


# --------------------------------------------------------------------------- in a browser


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    driver, reason = browser_or_reason()
    if driver is None:
        pytest.skip(f"no browser to test the page in: {reason}")
    driver.set_page_load_timeout(WAIT_S)
    try:
        yield driver
    finally:
        driver.quit()


def libre(server: Server, text: str) -> dict:
    """What the page asks POST /translate for `text`."""
    answer = httpx.post(f"{server.url}/translate", json={"q": text, "source": "en", "target": "de", "format": "text",
                                                          "alternatives": ALTERNATIVES}, timeout=60)
    assert answer.status_code == 200, answer.text
    return answer.json()


def attention(server: Server, sentence: str) -> dict:
    """What the page asks POST /v1/translate for a line's heatmap: the search of the translation shown
    (LibreTranslate's alternatives k: an n-best of k + 1 with the server's beam, at least k + 1)."""
    beam = httpx.get(f"{server.url}/v1/info", timeout=30).json()["decode"]["beam"]
    answer = httpx.post(f"{server.url}/v1/translate", json={"sentences": [sentence], "attention": True,
                                                            "beam": max(beam, ALTERNATIVES + 1),
                                                            "nbest": ALTERNATIVES + 1}, timeout=60)
    assert answer.status_code == 200, answer.text
    return answer.json()["translations"][0]["attention"]


def label(piece: str) -> str:
    return piece.removeprefix("\u2581") or "\u2423"


def test_typing_translates_as_the_api_does_with_alternatives_and_the_attention_of_a_line(server, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select, WebDriverWait

    wait = WebDriverWait(browser, WAIT_S)
    find = browser.find_element

    def prop(selector: str, name: str) -> Any:
        return find(By.CSS_SELECTOR, selector).get_property(name)

    def translated(text: str) -> str | bool:
        """The translation shown, once it is the one of `text` (the page marks which text it translated)."""
        return find(By.ID, "translation").get_attribute("data-source") == text and prop("#translation", "textContent")

    def assert_heatmap(sentence: str) -> None:
        wait.until(lambda d: find(By.ID, "heatmap").get_attribute("data-source") == sentence)
        want = attention(server, sentence)
        rows = browser.find_elements(By.CSS_SELECTOR, "#heatmap tbody tr")
        assert len(rows) == len(want["target"]) == len(want["weights"])
        assert all(len(row.find_elements(By.TAG_NAME, "td")) == len(want["source"]) for row in rows)
        assert [row.find_element(By.TAG_NAME, "th").get_property("textContent") for row in rows] == \
            [label(p) for p in want["target"]]
        columns = browser.find_elements(By.CSS_SELECTOR, "#heatmap thead th[scope=col]")
        assert [c.get_property("textContent") for c in columns] == [label(p) for p in want["source"]]

    browser.get(f"{server.url}/")
    wait.until(lambda d: find(By.ID, "source-lang").is_enabled())
    assert Select(find(By.ID, "source-lang")).first_selected_option.get_attribute("value") == "en"
    assert Select(find(By.ID, "target-lang")).first_selected_option.get_attribute("value") == "de"
    assert [o.get_attribute("value") for o in Select(find(By.ID, "source-lang")).options] == ["auto", "en"]
    assert not find(By.ID, "swap").is_displayed()  # the demo model has no de->en

    # type a sentence: its translation is the API's, and so are the alternatives and the heatmap of the line
    find(By.ID, "source-text").send_keys(FIRST)
    shown = wait.until(lambda d: translated(FIRST))
    want = libre(server, FIRST)
    assert shown == want["translatedText"] and shown.strip()
    alternatives = [li.get_property("textContent") for li in browser.find_elements(By.CSS_SELECTOR, "#alternatives li")]
    assert alternatives == list(dict.fromkeys(a for a in want["alternatives"] if a != shown))
    assert_heatmap(FIRST)

    # a second line: both translated as the API does; a click on the second one shows its heatmap
    text = f"{FIRST}\n{SECOND}"
    find(By.ID, "source-text").send_keys(Keys.ENTER, SECOND)
    shown = wait.until(lambda d: translated(text))
    assert shown == libre(server, text)["translatedText"] and len(shown.split("\n")) == 2
    find(By.CSS_SELECTOR, '#translation .line[data-line="1"]').click()
    assert_heatmap(SECOND)
    assert "selected" in find(By.CSS_SELECTOR, '#translation .line[data-line="1"]').get_attribute("class")
    assert "error" not in find(By.ID, "status").get_attribute("class")
    screenshot = Path(os.environ.get("NMT_PAGE_SCREENSHOT") or tmp_path / "serve-page.png")
    height = browser.execute_script("return document.documentElement.scrollHeight + outerHeight - innerHeight")
    browser.set_window_size(1200, min(height, 1600))  # the whole page
    assert browser.save_screenshot(str(screenshot)), screenshot

    # an alternative swaps in for the translation; copy says it copied
    if alternatives := browser.find_elements(By.CSS_SELECTOR, "#alternatives button"):
        chosen = alternatives[0].get_property("textContent")
        alternatives[0].click()
        assert prop("#translation", "textContent") == chosen
        assert shown in [li.get_property("textContent") for li in
                         browser.find_elements(By.CSS_SELECTOR, "#alternatives li")]
    find(By.ID, "copy").click()
    wait.until(lambda d: "Copied" in find(By.ID, "status").text)

    severe = [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]
    assert not severe, severe

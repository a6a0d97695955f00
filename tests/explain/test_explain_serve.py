"""POST /v1/explain of `nmt serve` and the web page's "inside the model" view: the endpoint answers what `nmt explain`
computes (the same dict, the same translation as /v1/translate), within the server's limits; and in a headless
Chromium a click on a translated line, then on "Show line N inside the model", draws it with the renderer of
`nmt explain`, served as a static file."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import torch

from nmt import checkpoint
from nmt.explain.command import explain_sentence, load
from nmt.explain.numbers import dequantized
from tests.helpers.browser import wait_for
from tests.helpers.serving import CHECKPOINT, LIMITS, Server, serving

SENTENCE = "three hundred forty-two euros"  # as in test_explain.py: what the demo model knows
SECOND = "forty-one red cars"


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    with serving(tmp_path_factory.mktemp("serve-explain"), *LIMITS) as s:
        yield s
    assert "Traceback" not in s.stderr(), s.stderr()


def post(server: Server, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/explain", json=body, timeout=120)


def assert_same_explanation(a: Any, b: Any, where: str = "") -> None:
    """The same dict to float rounding: the server and this process may use different thread counts, so a number's
    last digit (4 significant ones) or a quantized weight (1/255) may differ by one step."""
    if isinstance(a, dict) and "b64" in a:
        torch.testing.assert_close(dequantized(a), dequantized(b), rtol=0, atol=1.01 / 255, msg=where)
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            if k != "seconds":
                assert_same_explanation(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same_explanation(x, y, f"{where}[{i}]")
    elif isinstance(a, float) or isinstance(b, float):
        assert abs(a - b) <= 2e-3 * max(abs(a), abs(b)) + 1e-6, (where, a, b)
    else:
        assert a == b, (where, a, b)


def test_the_endpoint_answers_what_nmt_explain_computes(server):
    answer = post(server, {"sentence": SENTENCE, "top_k": 3})
    assert answer.status_code == 200, answer.text
    data = answer.json()
    local = explain_sentence(load(CHECKPOINT), SENTENCE, top_k=3)
    assert_same_explanation(data, local)
    translated = httpx.post(f"{server.url}/v1/translate", json={"sentences": [SENTENCE]}, timeout=60).json()
    assert data["translation"] == translated["translations"][0]["text"]
    model = checkpoint.load(CHECKPOINT).build_model().eval()
    memory = model.encode(torch.tensor([data["source"]["ids"]]))[0][0]
    rows = torch.tensor(data["memory"]["rows"])
    torch.testing.assert_close(rows, memory[:, : rows.size(1)], rtol=1e-3, atol=1e-3)
    for layer in data["encoder"]:
        weights = dequantized(layer["self_attn"]["weights"])
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]), rtol=0, atol=weights.size(-1) / 255)


def test_the_beam_follows_the_request(server):
    data = post(server, {"sentence": SECOND, "beam": 2}).json()
    assert data["decode"]["beam"] == 2 and all(len(s["candidates"]) == 4 for s in data["beam"]["steps"])
    translated = httpx.post(f"{server.url}/v1/translate", json={"sentences": [SECOND], "beam": 2}, timeout=60).json()
    assert data["translation"] == translated["translations"][0]["text"]


@pytest.mark.parametrize(("body", "status", "fragment"), [
    ({"sentence": ""}, 422, "empty"),
    ({"sentence": "two\nlines"}, 422, "line break"),
    ({"sentence": "x" * 301}, 400, "serve.max_chars"),
    ({"sentence": "qz" * 100}, 400, "over the limit of 128"),  # 200 characters, 201 pieces
    ({"sentence": SENTENCE, "beam": 9}, 400, "serve.max_beam"),
    ({"sentence": SENTENCE, "top_k": 0}, 422, "top_k"),
    ({"sentence": SENTENCE, "typo": 1}, 422, "typo"),
    ({"sentences": [SENTENCE]}, 422, "sentence"),
])
def test_the_servers_limits_hold(server, body, status, fragment):
    answer = post(server, body)
    assert answer.status_code == status, answer.text
    assert fragment in answer.json()["error"]


def test_the_renderer_is_served_and_listed(server):
    for name, kind in (("explain.js", "javascript"), ("explain.css", "css")):
        answer = httpx.get(f"{server.url}/static/{name}", timeout=30)
        assert answer.status_code == 200 and kind in answer.headers["content-type"], name
        assert not re.search(r"https?://", answer.text)
    page = httpx.get(f"{server.url}/", timeout=30).text
    assert 'src="static/explain.js"' in page and 'href="static/explain.css"' in page
    assert "/v1/explain" in httpx.get(f"{server.url}/openapi.json", timeout=30).json()["paths"]


# --------------------------------------------------------------------------- in a browser


def test_a_click_shows_the_line_inside_the_model(server, chromium):  # noqa: F811  (the imported fixture)
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    find = chromium.find_element
    chromium.get(f"{server.url}/")
    assert wait_for(chromium, "return !document.getElementById('source-lang').disabled")
    find(By.ID, "source-text").send_keys(SENTENCE, Keys.ENTER, SECOND)
    text = f"{SENTENCE}\n{SECOND}"
    assert wait_for(chromium, "return document.getElementById('translation').dataset.source === arguments[0]", 60,
                    text)
    find(By.CSS_SELECTOR, '#translation .line[data-line="1"]').click()
    button = find(By.ID, "inside-show")
    assert wait_for(chromium, "return !document.getElementById('inside-show').disabled")
    assert button.text == "Show line 2 inside the model"
    button.click()
    caption = find(By.ID, "inside-caption")
    assert wait_for(chromium, "return document.querySelector('#inside .nx-final')", 60), caption.text
    shown_line = find(By.CSS_SELECTOR, '#translation .line[data-line="1"]').text
    assert find(By.CSS_SELECTOR, "#inside .nx-final").text == shown_line  # the translation the page shows
    assert find(By.ID, "inside").get_attribute("data-source") == SECOND
    assert len(chromium.find_elements(By.CSS_SELECTOR, "#inside canvas.nx-heatmap")) > 4
    # the open view follows the line clicked
    first = find(By.CSS_SELECTOR, '#translation .line[data-line="0"]')
    first.click()
    assert wait_for(chromium, "const f = document.querySelector('#inside .nx-final'); "
                              "return f && f.textContent === arguments[0]", 60, first.text)
    assert find(By.ID, "inside").get_attribute("data-source") == SENTENCE
    severe = [e for e in chromium.get_log("browser") if e.get("level") == "SEVERE"]
    assert not severe, severe

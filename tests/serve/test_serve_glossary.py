"""Terminology in `nmt serve`: the server-wide glossary (serve.glossary / --glossary) on every endpoint, a
/v1/translate request's own terms on top of it, serve.max_terms, and one-line errors (in-process app on the committed
demo model)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from nmt.config.experiment import load_config
from tests.helpers.cli import assert_one_line_error, run_cli
from tests.helpers.serving import CHECKPOINT


@pytest.fixture(scope="module")
def client(tmp_path_factory) -> Iterator:
    from fastapi.testclient import TestClient

    from nmt.serve import ServeOptions, Service, create_app, open_model

    terms = tmp_path_factory.mktemp("glossary") / "terms.tsv"
    terms.write_text("boat\tSchiff\nistanbul\tIstanbul\n", encoding="utf-8")
    cfg = load_config(None, [f"serve.glossary={terms}", "serve.max_terms=2"])
    service = Service(lambda: open_model(CHECKPOINT, cfg, ServeOptions(dtype="fp32", config_given=False)), cfg.serve)
    with TestClient(create_app(service, cfg.serve), base_url="http://localhost") as c:
        for _ in range(600):
            if c.get("/health").status_code == 200:
                break
            time.sleep(0.05)
        yield c


def native(client, *sentences: str, **body) -> list[str]:
    answer = client.post("/v1/translate", json={"sentences": list(sentences), **body})
    assert answer.status_code == 200, answer.text
    return [t["text"] for t in answer.json()["translations"]]


def test_the_servers_glossary_holds_on_every_endpoint(client):
    boat = "The small boat is in the garden."
    assert "Schiff" in native(client, boat)[0]
    assert "Schiff" in client.post("/translate", json={"q": boat, "source": "en", "target": "de"}).json()[
        "translatedText"]
    assert native(client, "forty-two") == ["zweiundvierzig"]
    serve = client.get("/v1/info").json()["serve"]
    assert serve["glossary_terms"] == 2 and "glossary" not in serve  # how many terms, not where the file is


def test_a_turkish_capital_in_a_batch_fails_nobody(client):
    """"İstanbul" matched the server's "istanbul" but its case-folded key did not: the whole batch got 500."""
    import concurrent.futures

    lines = ["I love İstanbul.", "The small boat is in the garden.", "forty-two"]
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda k: client.post("/v1/translate", json={"sentences": [lines[k % 3]]}), range(12)))
    assert [a.status_code for a in answers] == [200] * 12
    assert all("Istanbul" in a.json()["translations"][0]["text"] for a in answers[::3])


def test_a_requests_terms_go_on_top_of_the_servers(client):
    got = native(client, "The small boat is in the garden.", "I see blue doors.",
                 glossary={"boat": "Kahn", "doors": "Tore"})
    assert "Kahn" in got[0] and "Schiff" not in got[0] and "Tore" in got[1]
    assert "Schiff" in native(client, "The small boat is in the garden.")[0]  # the request's terms were its own


@pytest.mark.parametrize("terms, status, words", [
    ({"a": "b", "c": "d", "e": "f"}, 400, "over the limit serve.max_terms=2"),
    ({" ": "x"}, 422, "the source term is empty"),
    (["boat", "Schiff"], 422, "glossary"),
])
def test_bad_glossaries_are_json_errors(client, terms, status, words):
    answer = client.post("/v1/translate", json={"sentences": ["forty-two"], "glossary": terms})
    assert answer.status_code == status and words in answer.json()["error"], answer.text
    assert native(client, "forty-two") == ["zweiundvierzig"]


def test_a_missing_server_glossary_stops_serve_in_one_line(tmp_path):
    result = run_cli("serve", "--checkpoint", CHECKPOINT, "--port", "0", "--glossary", tmp_path / "none.tsv")
    assert_one_line_error(result, "none.tsv: no such file")

"""The requests real LibreTranslate clients send, byte for byte as their code builds them, and the fields they read
(README "Clients"): Mastodon 4.0 and 4.2+, Akkoma, Discourse's translator, libretranslatepy, LibreTranslate's own
web page, Dialect, Zammad, Nextcloud and KDE. Each is a real server on 127.0.0.1 (tests.helpers.serving)."""

from __future__ import annotations

import httpx
import pytest

from tests.helpers.serving import CHECKPOINT, serving

STATUS = ('<p>A man is riding a bike. <span translate="no">:blobcat:</span></p>'
          '<p><a href="https://x.example/@bob" class="u-url mention">@<span>bob</span></a> forty-two</p>')


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("clients")) as s:
        yield s.url


def assert_languages(url: str, **request) -> None:
    entries = httpx.request("GET", f"{url}/languages", **request).json()
    assert entries and all({"code", "name", "targets"} <= set(e) for e in entries)  # Mastodon, Akkoma need them


def test_mastodon(url):
    json_header = {"content-type": "application/json"}
    assert_languages(url, headers=json_header)  # sent with the JSON content type and no body
    old = httpx.post(f"{url}/translate", json={"q": STATUS, "source": "en", "target": "de", "format": "html",
                                               "api_key": None})
    assert old.status_code == 200 and isinstance(old.json()["translatedText"], str)  # 4.0/4.1
    q = [STATUS, "A spoiler &amp; more", "forty-two"]  # 4.2+: the status, its spoiler, a poll option
    new = httpx.post(f"{url}/translate", json={"q": q, "source": "auto", "target": "de", "format": "html",
                                               "api_key": None}).json()
    assert len(new["translatedText"]) == 3 and [d["language"] for d in new["detectedLanguage"]] == ["en"] * 3
    assert ':blobcat:</span>' in new["translatedText"][0] and '@<span>bob</span>' in new["translatedText"][0]


def test_akkoma(url):
    reply = httpx.post(f"{url}/translate", json={"q": STATUS, "source": "auto", "target": "de", "format": "html",
                                                 "api_key": None})
    assert reply.status_code == 200  # exactly 200, or Akkoma fails the translation
    assert isinstance(reply.json()["translatedText"], str) and reply.json()["detectedLanguage"]["language"] == "en"


def test_discourse(url):
    detected = httpx.post(f"{url}/detect", data={"q": "A man is riding a bike.", "api_key": ""}).json()
    assert detected[0]["language"] == "en"
    assert_languages(url)
    reply = httpx.post(f"{url}/translate", data={"q": STATUS, "source": detected[0]["language"], "target": "de",
                                                 "format": "html", "api_key": ""})
    assert reply.status_code == 200 and isinstance(reply.json()["translatedText"], str)


def test_libretranslatepy_and_kde(url):
    assert_languages(url, content=b"api_key=", headers={"content-type": "application/x-www-form-urlencoded"})
    plain = httpx.post(f"{url}/translate", data={"q": "forty-two", "source": "en", "target": "de"}).json()
    kde = httpx.post(f"{url}/translate", content=b"&q=forty-two&source=en&target=de",  # KDE's leading "&"
                     headers={"content-type": "application/x-www-form-urlencoded"}).json()
    assert plain["translatedText"] and kde == plain


def test_libretranslate_web_page_and_dialect(url):
    settings = httpx.get(f"{url}/frontend/settings").json()
    assert settings["charLimit"] > 0 and settings["apiKeys"] is False and settings["keyRequired"] is False
    assert settings["suggestions"] is False and settings["filesTranslation"] is True
    assert ".docx" in settings["supportedFilesFormat"] and ".pdf" not in settings["supportedFilesFormat"]
    assert settings["language"]["source"]["code"] == "auto"
    page = httpx.post(f"{url}/translate", files={k: (None, v) for k, v in {
        "q": "A man is riding a bike.", "source": "auto", "target": "de", "format": "text", "alternatives": "3",
        "api_key": ""}.items()}).json()
    assert len(page["alternatives"]) == 3 and page["detectedLanguage"]["language"] == "en"
    assert httpx.get(f"{url}/spec").json()["info"]["title"] == "LibreTranslate"  # how Dialect accepts a server
    assert "confidence" in httpx.post(f"{url}/detect", data={"q": "hello", "api_key": ""}).json()[0]
    refused = httpx.post(f"{url}/suggest", data={"q": "a", "s": "b", "source": "en", "target": "de"})
    assert refused.status_code == 403 and refused.json()["error"] == "Suggestions are disabled on this server."


def test_zammad_and_nextcloud(url):
    zammad = httpx.post(f"{url}/translate", json={"q": "forty-two", "source": "auto", "target": "de",
                                                  "format": "text"}).json()
    assert isinstance(zammad["translatedText"], str)
    unsupported = httpx.post(f"{url}/translate", json={"q": "a", "source": "en", "target": "de", "format": "pdf"})
    assert unsupported.status_code == 400 and "format is not supported" in unsupported.json()["error"]
    detect = httpx.post(f"{url}/detect", params={"q": "A man is riding a bike.", "api_key": ""})  # no body
    assert detect.status_code == 200 and detect.json()[0]["language"] == "en"
    nextcloud = httpx.post(f"{url}/translate", files={k: (None, v) for k, v in {
        "q": STATUS, "format": "html", "source": "en", "target": "de", "api_key": ""}.items()})
    assert nextcloud.status_code == 200 and nextcloud.json()["translatedText"].startswith("<p>")


def test_the_error_strings_clients_match(tmp_path):
    with serving(tmp_path, NMT_API_KEY="s3cret") as s:
        def error(**body) -> tuple[int, str]:
            reply = httpx.post(f"{s.url}/translate", json={"source": "en", "target": "de", **body})
            return reply.status_code, reply.json()["error"]

        assert error(q="a") == (403, "Please contact the server operator to obtain an API key")  # Dialect: equal
        assert error(q="a", api_key="wrong") == (403, "Invalid API key")
        assert error(api_key="s3cret") == (400, "Invalid request: missing q parameter")
        status, message = error(q="a", target="xx", api_key="s3cret")
        assert status == 400 and message == "xx is not supported"
        status, message = error(q="a" * 3000, api_key="s3cret")
        assert status == 400 and "exceeds text limit" in message  # Dialect and Zammad match this


# --------------------------------------------------------------------------- the dialect in detail


POST = ('<p>A man is riding a bike. Two dogs play in the snow.<br>Forty-two &amp; <b>seven</b>!</p>'
        '<p><a href="https://x.example/@bob" class="u-url mention">@<span>bob</span></a> <code>ls -la</code></p>')


def test_html_keeps_the_markup_and_translates_each_sentence_once_across_its_tags(url):
    """format=html: each sentence is translated once as plain text, inline tags and all
    (nmt.translation.documents.inline): the answer's words are those translations' words in order, and its markup is the
    post's."""
    import re

    from nmt.translation.documents.html import parse_html

    doc = parse_html(POST)
    plain = httpx.post(f"{url}/v1/translate", json={"sentences": doc.texts}, timeout=60).json()
    want_words = " ".join(t["text"] for t in plain["translations"]).split()
    answers = []
    for q in (POST, [POST, "<i>forty-two</i>"]):
        reply = httpx.post(f"{url}/translate", json={"q": q, "source": "en", "target": "de", "format": "html",
                                                            "alternatives": 1}, timeout=60).json()
        answers.append(reply["translatedText"] if isinstance(q, str) else reply["translatedText"][0])
        assert reply["alternatives"] == ([] if isinstance(q, str) else [[], []])
    got = answers[0]
    assert answers[1] == got
    assert re.findall(r"<[^>]*>", got) == re.findall(r"<[^>]*>", POST)  # every tag, in order, byte for byte
    text = re.sub(r"<[^>]*>", " ", got).replace("&amp;", "&")
    words = iter(text.split())
    assert all(any(w in word for word in words) for w in want_words), (want_words, text)  # in order
    assert "ls -la" in got and 'class="u-url mention">@<span>bob</span></a>' in got and "<br>" in got


def test_auto_source_and_detect_answer_as_libretranslate(url):
    one = httpx.post(f"{url}/translate", json={"q": "forty-two", "source": "auto", "target": "de"}).json()
    plain = httpx.post(f"{url}/translate", json={"q": "forty-two", "source": "en", "target": "de"}).json()
    assert one["translatedText"] == plain["translatedText"] and "detectedLanguage" not in plain
    assert one["detectedLanguage"]["language"] == "en" and 0 < one["detectedLanguage"]["confidence"] <= 100
    many = httpx.post(f"{url}/translate", data={"q": "seven", "source": "auto", "target": "de"}).json()
    assert many["detectedLanguage"]["language"] == "en"  # a form too
    listed = httpx.post(f"{url}/translate", json={"q": ["seven", "nine"], "source": "auto"}).json()
    assert [d["language"] for d in listed["detectedLanguage"]] == ["en", "en"]  # one per text, as Mastodon reads
    detected = httpx.post(f"{url}/detect", json={"q": "A man is riding a bike."}).json()
    assert detected[0]["language"] == "en" and 0 < detected[0]["confidence"] <= 100
    missing = httpx.post(f"{url}/detect", json={"q": ""})
    assert missing.status_code == 400 and missing.json()["error"] == "Invalid request: missing q parameter"


def test_several_models_in_one_server_are_routed_by_language_pair(tmp_path, url):
    import torch

    reverse = torch.load(CHECKPOINT, weights_only=False, map_location="cpu")
    reverse["langs"] = ["de", "en"]  # the same weights claiming the other direction: which model served shows
    torch.save(reverse, tmp_path / "de-en.pt")  # in /health's per-model counts
    lines = ["A man is riding a bike.", "forty-two", "Two dogs play in the snow."]
    want = httpx.post(f"{url}/translate", json={"q": lines, "source": "en", "target": "de"}).json()["translatedText"]
    with serving(tmp_path, "--checkpoint", str(tmp_path / "de-en.pt"), checkpoint=CHECKPOINT) as s:
        assert httpx.get(f"{s.url}/languages").json() == [
            {"code": "en", "name": "English", "targets": ["de"]}, {"code": "de", "name": "German", "targets": ["en"]}]
        ende = httpx.post(f"{s.url}/translate", json={"q": lines[:3], "source": "en", "target": "de"}).json()
        assert ende["translatedText"] == want  # what the one-model server answers
        deen = httpx.post(f"{s.url}/v1/translate", json={"sentences": lines[:2], "source": "de", "target": "en"})
        assert deen.status_code == 200 and [m["sentences"] for m in s.health()["models"]] == [3, 2]
        auto = httpx.post(f"{s.url}/translate", json={"q": "forty-two", "source": "auto", "target": "en"}).json()
        assert auto["detectedLanguage"]["language"] == "de"  # the only source with a model into English
        for body, needle in (({"q": "a"}, "several language pairs"), ({"q": "a", "source": "fr", "target": "de"},
                                                                      "fr is not supported"),
                             ({"q": "a", "source": "de", "target": "de"}, "German (de) is not available as a "
                                                                          "target language from German (de)")):
            reply = httpx.post(f"{s.url}/translate", json=body)
            assert reply.status_code == 400 and needle in reply.json()["error"], reply.text
        info = httpx.get(f"{s.url}/v1/info").json()
        assert [m["languages"] for m in info["models"]] == [{"source": "en", "target": "de"},
                                                            {"source": "de", "target": "en"}]
        assert all(m["model"]["memory_mb"] > 0 for m in info["models"])

"""Language codes as clients write them, in `nmt serve` (nmt.langcodes): zh-CN, zh_TW, ZH-hans, ja-JP ... reach the
model whose checkpoint says zh / zh-Hant / ja; /languages lists canonical codes; detection tells Chinese (both
scripts), Japanese, Korean and Thai apart on three-word texts. One app in this process (FastAPI's TestClient, as in
tests/serve/test_serve.py) over copies of the demo model that claim other language pairs: which model served a request
shows in /health's per-model counts."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from nmt.checkpoint import Checkpoint, load
from nmt.config.experiment import Config
from tests.helpers.serving import CHECKPOINT

# the language pairs the copies claim, as their checkpoints write them, and as the server serves them
WRITTEN = [("en", "zh-CN"), ("en", "zh-Hant-TW"), ("zh-Hans", "en"), ("zh_TW", "en"), ("ja", "en"), ("ko-KR", "en"),
           ("th", "en"), ("en", "ja")]
SERVED = [("en", "zh"), ("en", "zh-Hant"), ("zh", "en"), ("zh-Hant", "en"), ("ja", "en"), ("ko", "en"), ("th", "en"),
          ("en", "ja")]
# three-word texts and their language
TEXTS = [("我喜欢猫", "zh"), ("今天天气很好", "zh"), ("我喜歡貓", "zh-Hant"), ("今天天氣很好", "zh-Hant"),
         ("猫が好きです", "ja"), ("東京に行きます", "ja"), ("고양이를 좋아해요", "ko"), ("ฉันรักแมว", "th")]


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from nmt.serve import ServeOptions, Service, create_app, open_model

    tmp = tmp_path_factory.mktemp("langcodes")
    demo = load(CHECKPOINT)
    paths = []
    for src, tgt in WRITTEN:
        paths.append(tmp / f"{src}-{tgt}.pt")
        copy = Checkpoint.create(demo.weights, demo.config, demo.tokenizer(), demo.vocab_sizes, langs=(src, tgt))
        copy.save(paths[-1])

    def loader(path: Path):
        return lambda: open_model(path, Config(), ServeOptions(dtype="fp32", config_given=False))

    limits = Config().serve
    with TestClient(create_app([Service(loader(p), limits) for p in paths], limits),
                    base_url="http://localhost") as client:
        for _ in range(1200):  # at most a minute
            if client.get("/health").status_code == 200:
                break
            time.sleep(0.05)
        assert client.get("/health").status_code == 200, client.get("/health").text
        yield client


def counts(client) -> list[int]:
    return [m["sentences"] for m in client.get("/health").json()["models"]]


def served_by(client, path: str, **request) -> tuple[tuple[str, str], dict]:
    """The pair (as served) of the one model that translated this request, and the answer."""
    before = counts(client)
    reply = client.post(path, **request)
    assert reply.status_code == 200, reply.text
    changed = [i for i, (a, b) in enumerate(zip(before, counts(client))) if a != b]
    assert len(changed) == 1, changed
    return SERVED[changed[0]], reply.json()


ROUTES = [
    *[(code, "en", ("zh", "en")) for code in ("zh", "zh-CN", "zh-Hans", "ZH-hans", "zh_cn", "zh-SG", "zh-Hans-CN",
                                              "cmn")],
    *[(code, "en", ("zh-Hant", "en")) for code in ("zh-Hant", "zh-TW", "zh_TW", "zh-HK", "zh-hant", "ZH-HANT", "zt",
                                                   "zh-Hant-TW")],
    *[(code, "en", ("ja", "en")) for code in ("ja", "JA", "ja-JP", "ja_jp")],
    *[(code, "en", ("ko", "en")) for code in ("ko", "ko-KR", "KO_kr")],
    *[(code, "en", ("th", "en")) for code in ("th", "th-TH")],
    *[("en", code, ("en", "zh")) for code in ("zh", "zh-CN", "zh-Hans", "zh_SG")],
    *[("en-US", code, ("en", "zh-Hant")) for code in ("zh-Hant", "zh-TW", "zh_tw", "zh-MO")],
    ("EN", "ja-JP", ("en", "ja")),
]


@pytest.mark.parametrize(("source", "target", "pair"), ROUTES)
def test_every_spelling_reaches_its_model(client, source, target, pair):
    assert served_by(client, "/translate", json={"q": "forty-two", "source": source, "target": target})[0] == pair


@pytest.mark.parametrize(("source", "target", "pair"), [("zh_TW", "en", ("zh-Hant", "en")),
                                                        ("en", "ZH-hans", ("en", "zh"))])
def test_form_bodies_and_the_native_api_route_alike(client, source, target, pair):
    form = {"q": "forty-two", "source": source, "target": target}
    assert served_by(client, "/translate", data=form)[0] == pair
    native = {"sentences": ["forty-two"], "source": source, "target": target}
    assert served_by(client, "/v1/translate", json=native)[0] == pair


def test_languages_lists_canonical_codes_with_names(client):
    assert client.get("/languages").json() == [
        {"code": "en", "name": "English", "targets": ["ja", "zh", "zh-Hant"]},
        {"code": "zh", "name": "Chinese", "targets": ["en"]},
        {"code": "zh-Hant", "name": "Chinese (traditional)", "targets": ["en"]},
        {"code": "ja", "name": "Japanese", "targets": ["en"]},
        {"code": "ko", "name": "Korean", "targets": ["en"]},
        {"code": "th", "name": "Thai", "targets": ["en"]}]
    info = client.get("/v1/info").json()["models"]
    assert [(m["languages"]["source"], m["languages"]["target"]) for m in info] == SERVED


@pytest.mark.parametrize(("source", "target", "error"), [
    ("xx", "en", "xx is not supported"), ("zh-", "en", "zh- is not supported"), ("en", "auto", "auto is not supported"),
    ("en", "fr-FR", "fr-FR is not supported"), ("zh_Hant!", "en", "zh_Hant! is not supported"),
    ("ko", "zh-CN", "Chinese (zh) is not available as a target language from Korean (ko)"),
    ("zh-TW", "ja", "Japanese (ja) is not available as a target language from Chinese (traditional) (zh-Hant)"),
])
def test_unknown_or_unserved_codes_are_libretranslates_400(client, source, target, error):
    reply = client.post("/translate", json={"q": "forty-two", "source": source, "target": target})
    assert reply.status_code == 400 and reply.json() == {"error": error}


@pytest.mark.parametrize(("text", "lang"), [*TEXTS, ("I like cats", "en")])
def test_detect_tells_the_languages_apart_on_three_words(client, text, lang):
    found = client.post("/detect", json={"q": text}).json()
    assert found[0]["language"] == lang and found[0]["confidence"] > 90, found


@pytest.mark.parametrize(("text", "lang"), TEXTS)
def test_auto_source_reaches_the_detected_languages_model(client, text, lang):
    pair, answer = served_by(client, "/translate", json={"q": text, "source": "auto", "target": "en"})
    assert pair == (lang, "en") and answer["detectedLanguage"]["language"] == lang
    into = client.post("/translate", json={"q": text, "source": "AUTO", "target": "zh-TW"}).json()
    assert into["detectedLanguage"] == {"confidence": 0.0, "language": "en"}  # the only source into zh-Hant


# ---- the detector on its own


@pytest.fixture(scope="module")
def detector():
    pytest.importorskip("py3langid", reason="language detection needs py3langid (the serve extra)")
    from nmt.serve.detect import Detector

    return Detector(["en", "zh", "zh-Hant", "ja", "ko", "th"])


def test_kana_decides_japanese_even_beside_more_kanji(detector):
    assert detector.detect("東京都庁の職員") == [("ja", 100.0)]


def test_han_without_telling_characters_is_either_chinese_zh_first(detector):
    assert detector.detect("中文") == [("zh", 50.0), ("zh-Hant", 50.0)]


def test_one_chinese_served_takes_both_scripts():
    pytest.importorskip("py3langid")
    from nmt.serve.detect import Detector

    traditional = Detector(["en", "zh-Hant"])
    assert traditional.detect("我喜欢猫") == [("zh-Hant", 100.0)] and traditional.detect("I like cats")[0][0] == "en"
    assert Detector(["zh", "en"]).detect("我喜歡貓") == [("zh", 100.0)]


def test_without_chinese_served_han_text_goes_to_the_library():
    pytest.importorskip("py3langid")
    from nmt.serve.detect import Detector

    assert Detector(["en", "ja"]).detect("今天天气很好")[0][0] == "ja"  # the hint names no served language


def test_codes_py3langid_knows_by_another_name():
    pytest.importorskip("py3langid")
    from nmt.serve.detect import Detector

    found = Detector(["en", "pt", "pt-BR", "nb"]).detect("Eu gosto muito de gatos")
    assert [code for code, _ in found[:2]] == ["pt", "pt-BR"] and found[0][1] == found[1][1]  # no way to tell

"""nmt.serve.detect: language identification among the languages a server serves (`source: "auto"`, `/detect`).

Accuracy thresholds come from bench/detect.py (py3langid 0.4.0, Multi30k test2016, 1,000 sentences a language):
whole sentences 1.000 for each of en/de/fr/cs, among {en, de, fr, cs} and among {en, de}; their first 3 words
0.986-0.999 (0.99-1.00 on the 200 sentences tested here). The tests ask for >= 0.99 and >= 0.95 a language:
detection is deterministic, and the margin is there for a later library version, not for chance.
"""

from __future__ import annotations

import subprocess
import sys
import time
import types

import pytest

from nmt.errors import NmtError
from nmt.serve.detect import REQUIREMENT, Detector
from tests.helpers.paths import MULTI30K

LANGS = ["en", "de", "fr", "cs"]
# short, everyday sentences of each language (not from Multi30k), the one-liners a UI sends
SENTENCES = [
    ("en", "The weather is nice today."), ("en", "Where is the train station?"),
    ("en", "Two children are playing football in the park."),
    ("de", "Das Wetter ist heute schön."), ("de", "Wo ist der Bahnhof?"),
    ("de", "Zwei Kinder spielen im Park Fußball."),
    ("fr", "Il fait beau aujourd'hui."), ("fr", "Où est la gare ?"),
    ("fr", "Deux enfants jouent au football dans le parc."),
    ("cs", "Dnes je hezké počasí."), ("cs", "Kde je nádraží?"), ("cs", "Dvě děti hrají v parku fotbal."),
]
FRENCH = "Une femme lit un livre sur un banc."


@pytest.fixture(scope="module")
def four() -> Detector:
    pytest.importorskip("py3langid", reason="language detection needs py3langid (the serve extra)")
    return Detector(LANGS)


@pytest.fixture(scope="module")
def pair() -> Detector:
    pytest.importorskip("py3langid", reason="language detection needs py3langid (the serve extra)")
    return Detector(["en", "de"])


def check_candidates(candidates: list[tuple[str, float]], codes: list[str]) -> None:
    """Served codes only, each once, confidences in (0, 100] best first and adding up to at most 100."""
    langs = [code for code, _ in candidates]
    assert set(langs) <= set(codes) and len(set(langs)) == len(langs)
    confidences = [c for _, c in candidates]
    assert all(0 < c <= 100 for c in confidences)
    assert confidences == sorted(confidences, reverse=True)
    assert sum(confidences) <= 100 + 1e-9  # hundredths as floats: 99.98 + 0.02 may round to a hair above 100


# ---- always run: no library needed


def test_imports_without_fastapi_or_the_library() -> None:
    # a child process: these imports are blocked there, not in the suite's own process
    code = ("import sys; sys.modules['fastapi'] = sys.modules['py3langid'] = None; import nmt.serve.detect; "
            "assert 'py3langid.langid' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_missing_library_names_the_requirement(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "py3langid", None)  # `import py3langid...` raises ImportError
    monkeypatch.setitem(sys.modules, "py3langid.langid", None)
    with pytest.raises(NmtError, match=rf"needs {REQUIREMENT}: pip install 'nmt\[serve\]'"):
        Detector(LANGS)


def test_older_library_names_the_requirement(monkeypatch: pytest.MonkeyPatch) -> None:
    # py3langid < 0.4: the same module, another API (from_pickled_model)
    old = types.ModuleType("py3langid.langid")
    old.MODEL_FILE = "data/model.plzma"
    old.LanguageIdentifier = type("LanguageIdentifier", (), {"from_pickled_model": classmethod(lambda cls, f: None)})
    monkeypatch.setitem(sys.modules, "py3langid.langid", old)
    with pytest.raises(NmtError, match=rf"needs {REQUIREMENT}.*older"):
        Detector(LANGS)


def test_no_languages_is_an_error() -> None:
    with pytest.raises(NmtError, match="at least one language"):
        Detector([])


# ---- with py3langid


@pytest.mark.parametrize(("lang", "text"), SENTENCES)
def test_builtin_sentences(four: Detector, lang: str, text: str) -> None:
    candidates = four.detect(text)
    assert candidates[0][0] == lang, candidates
    check_candidates(candidates, LANGS)


def test_restriction_is_honored(pair: Detector) -> None:
    candidates = pair.detect(FRENCH)
    assert candidates, "a French sentence still gets an answer among en/de"
    check_candidates(candidates, ["en", "de"])


@pytest.mark.parametrize("text", ["", " ", "\n\t  \r\n"])
def test_empty_text_has_no_candidates(four: Detector, text: str) -> None:
    assert four.detect(text) == []


@pytest.mark.parametrize("text", ["123", "!!! ???", "42 + 17 = 59"])
def test_text_without_evidence_has_no_candidates(four: Detector, text: str) -> None:
    # an even split would name whichever language wins the tie
    assert four.detect(text) == []


def test_one_language_is_always_the_answer() -> None:
    pytest.importorskip("py3langid")
    one = Detector(["de"])
    assert one.detect("123") == [("de", 100.0)] and one.detect(FRENCH) == [("de", 100.0)]
    assert one.detect("  ") == []


def test_unknown_codes_are_named() -> None:
    pytest.importorskip("py3langid")
    with pytest.raises(NmtError, match="does not know 'xx', 'de-AT'") as caught:
        Detector(["en", "xx", "de-AT"])
    assert "'en'" not in str(caught.value).split(":")[0]


def test_codes_are_deduplicated_in_order() -> None:
    pytest.importorskip("py3langid")
    assert Detector(["fr", "en", "fr"]).codes == ("fr", "en")


def test_detect_many_is_detect_of_each(four: Detector) -> None:
    texts = [text for _, text in SENTENCES] + ["", "123", FRENCH]
    assert four.detect_many(texts) == [four.detect(text) for text in texts]
    assert four.detect_many([]) == []


def test_long_text(four: Detector) -> None:
    # a whole document: answered from its beginning, in about the time of a sentence or two
    text = " ".join(text for lang, text in SENTENCES if lang == "de") * 2000
    start = time.perf_counter()
    candidates = four.detect(text)
    assert time.perf_counter() - start < 0.5
    assert candidates[0][0] == "de"


def test_a_sentence_takes_well_under_10_ms(four: Detector) -> None:
    texts = [text for _, text in SENTENCES] * 20
    four.detect_many(texts[:5])
    start = time.perf_counter()
    four.detect_many(texts)
    assert (time.perf_counter() - start) / len(texts) < 0.005  # measured ~0.03 ms; room for a loaded machine


# ---- Multi30k (../shared/data/multi30k)

multi30k = pytest.mark.skipif(not (MULTI30K / "test2016.en").is_file(), reason="../shared/data/multi30k absent")


def accuracy(detector: Detector, lang: str, words: int = 0, lines: int = 200) -> float:
    text = (MULTI30K / f"test2016.{lang}").read_text(encoding="utf-8").splitlines()[:lines]
    texts = [" ".join(line.split()[:words]) if words else line for line in text]
    return sum(1 for c in detector.detect_many(texts) if c and c[0][0] == lang) / len(texts)


@multi30k
@pytest.mark.parametrize("lang", LANGS)
def test_multi30k_four_languages(four: Detector, lang: str) -> None:
    assert accuracy(four, lang) >= 0.99
    assert accuracy(four, lang, words=3) >= 0.95


@multi30k
@pytest.mark.parametrize("lang", ["en", "de"])
def test_multi30k_en_de(pair: Detector, lang: str) -> None:
    assert accuracy(pair, lang) >= 0.99
    assert accuracy(pair, lang, words=3) >= 0.95

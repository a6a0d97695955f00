"""What a rebuilt Office Open XML paragraph (nmt.translation.documents.ooxml_paragraph) must say anew, beyond its text:
the language of its translated runs and fresh ids for the revision marks it copied. A module of its own: these are
about the part (its ids, the translation's languages), not about placing a paragraph's runs.

Language (issue 46): a run the model wrote holds target-language text, so its language mark names the target, and
Word (PowerPoint) proofs, hyphenates and reads it aloud as such.
- WordprocessingML `w:rPr/w:lang`: `w:val` (the language of Latin-script text) becomes the target, written as Word
  writes it (`de-DE`, `fr-FR`, `ja-JP`; a language without a usual region: its bare code), unless it already named
  the target's language (`de-AT` stays); `w:eastAsia` and `w:bidi` become the target only where they named the
  source language (the model's, else the run's `w:val`): otherwise they name the text of another script, which the
  translation did not write. DrawingML (pptx, SmartArt, charts) `a:rPr/@lang` and `@altLang` likewise.
- The paragraph mark of a rebuilt paragraph (w:pPr/w:rPr, a:endParaRPr: what text typed at its end takes) likewise.
- Only what is written: a run without a language mark follows its style or the document's default (styles.xml,
  kept byte for byte); a kept run (an atom, a source copy, a deletion) keeps its mark: its text is the source's.
- A model whose languages are not language codes ("src", "tgt") leaves every mark as it was.

Revision ids: a tracked insertion or move (`w:ins`, `w:moveTo`) around translated words is written as a copy of its
element, once per place its words landed, and a run's properties (a `w:rPrChange` among them) once per run: two
copies must not share a `w:id` (Word reports such a document as corrupt). The first copy of an id keeps it, each
further one takes a fresh id, above every `w:id` in the part, so it collides with nothing there."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Protocol

from lxml import etree

from nmt.langcodes import LANGUAGE_NAMES, canonical_or_none


class Dialect(Protocol):
    """What is read of nmt.translation.documents.ooxml_paragraph.Dialect (a vocabulary's names): its language
    child of rPr ("": the rPr's own attributes), its revision marks, its tags."""

    @property
    def language(self) -> str: ...

    @property
    def revisions(self) -> frozenset[str]: ...

    def tag(self, local: str) -> str: ...

# The region Word writes with a language (its "Set Proofing Language" list); others: the bare code.
WORD_REGIONS = {"ar": "ar-SA", "bg": "bg-BG", "ca": "ca-ES", "cs": "cs-CZ", "da": "da-DK", "de": "de-DE",
                "el": "el-GR", "en": "en-US", "es": "es-ES", "et": "et-EE", "fi": "fi-FI", "fr": "fr-FR",
                "he": "he-IL", "hi": "hi-IN", "hr": "hr-HR", "hu": "hu-HU", "id": "id-ID", "it": "it-IT",
                "ja": "ja-JP", "ko": "ko-KR", "lt": "lt-LT", "lv": "lv-LV", "nb": "nb-NO", "nl": "nl-NL",
                "pl": "pl-PL", "pt": "pt-PT", "pt-BR": "pt-BR", "ro": "ro-RO", "ru": "ru-RU", "sk": "sk-SK",
                "sl": "sl-SI", "sr": "sr-Latn-RS", "sv": "sv-SE", "th": "th-TH", "tr": "tr-TR", "uk": "uk-UA",
                "vi": "vi-VN", "zh": "zh-CN", "zh-Hant": "zh-TW"}
# Revision marks, each with an id of its own (bookmarks, comment ranges and move ranges pair a start and an end by
# id: they are moved into a rebuilt paragraph, never copied)
REVISIONS = frozenset({"ins", "del", "moveTo", "moveFrom", "rPrChange", "pPrChange", "numberingChange"})


@dataclass(frozen=True)
class Language:
    """The translation's languages: `target` as Word writes it, `source` canonical (None: unknown)."""

    target: str
    target_canonical: str
    source: str | None = None

    @classmethod
    def of(cls, languages: tuple[str, str] | None) -> Language | None:
        """From a model's (source, target) codes; None where the target is no language code nmt knows."""
        if languages is None:
            return None
        source, target = (canonical_or_none(code) for code in languages)
        if target not in LANGUAGE_NAMES:
            return None
        return cls(WORD_REGIONS.get(target, target), target, source if source in LANGUAGE_NAMES else None)

    def relabel(self, rpr: etree._Element, d: Dialect) -> None:
        """A translated run's properties (a copy) marked with the target language (the module's rule)."""
        if d.language:  # WordprocessingML: a w:lang child
            el, main, others = rpr.find(d.tag(d.language)), d.tag("val"), (d.tag("eastAsia"), d.tag("bidi"))
        else:  # DrawingML: attributes of the a:rPr
            el, main, others = rpr, "lang", ("altLang",)
        if el is None:
            return
        written = el.get(main)
        source = {self.source, canonical_or_none(written) if written else None} - {None}
        if written is not None and canonical_or_none(written) != self.target_canonical:
            el.set(main, self.target)
        for name in others:
            value = el.get(name)
            if value is not None and canonical_or_none(value) in source:
                el.set(name, self.target)


class Marks:
    """One part's marks: the translation's `language` (None: marks kept) and the fresh revision ids."""

    def __init__(self, root: etree._Element, d: Dialect, language: Language | None = None):
        self.root, self.d, self.language = root, d, language
        self._next: int | None = None  # the next fresh id, found when one is first needed

    def rebuilt(self, p: etree._Element, ids: Counter[str]) -> None:
        """A paragraph rebuilt with translated runs: its revision marks renumbered (`renumber`), and its paragraph
        mark's language (w:pPr/w:rPr, a:endParaRPr: what text typed at its end takes) the target's."""
        self.renumber(p, ids)
        if self.language is None:
            return
        for child in p:
            rpr = child.find(self.d.tag("rPr")) if child.tag == self.d.tag("pPr") else \
                child if child.tag == self.d.tag("endParaRPr") else None
            if rpr is not None:
                self.language.relabel(rpr, self.d)

    def ids(self, p: etree._Element) -> Counter[str]:
        """The revision ids in a paragraph (before it is rebuilt: each may be written once again)."""
        return Counter(el.get(self.d.tag("id")) for el in self._revisions(p))

    def renumber(self, p: etree._Element, before: Counter[str]) -> None:
        """A rebuilt paragraph's revision marks: an id beyond the times the source paragraph held it, fresh."""
        left = Counter(before)
        for el in self._revisions(p):
            ident = el.get(self.d.tag("id"))
            if left[ident] > 0:
                left[ident] -= 1
                continue
            el.set(self.d.tag("id"), str(self._fresh()))

    def _revisions(self, p: etree._Element) -> list[etree._Element]:
        if not self.d.revisions:
            return []
        return [el for el in p.iter(*(self.d.tag(n) for n in self.d.revisions)) if el.get(self.d.tag("id"))]

    def _fresh(self) -> int:
        if self._next is None:
            key = self.d.tag("id")
            ids = [int(v) for el in self.root.iter(etree.Element) if (v := el.get(key)) is not None and v.isdigit()]
            self._next = max(ids, default=-1) + 1
        self._next += 1
        return self._next - 1

"""Office Open XML packages (docx, pptx): their text parts' paragraphs (nmt.translation.documents.ooxml_paragraph,
one w:p / a:p as inline runs) translated, and written back.

Worked on the XML parts with lxml rather than through python-docx / python-pptx: their APIs reach neither
footnotes, endnotes nor comments, and saving through them re-serializes every part they loaded; here only the
paragraphs whose text changed are rebuilt, every other byte of a part stays, and other parts are copied as they are.
A text box written twice (mc:AlternateContent: the DrawingML mc:Choice and its VML mc:Fallback) is translated once:
each Fallback paragraph whose text is its Choice paragraph's takes the Choice's translated content, so the copies
never differ."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from lxml import etree

from nmt import workbudget
from nmt.translation.documents.inline import Paragraph, Piece, Run
from nmt.translation.documents.ooxml_marks import Language, Marks
from nmt.translation.documents.ooxml_paragraph import ATOM_TEXT, Dialect, OoxmlParagraph, local
from nmt.translation.documents.opc import open_package, related
from nmt.translation.documents.safezip import removed_on_error

__all__ = ["ATOM_TEXT", "CHUNK", "Dialect", "OoxmlParagraph", "Parts", "TranslateParagraphs", "local",
           "translatable", "translate_elements", "translate_package"]

TranslateParagraphs = Callable[[list[Paragraph]], list[list[Piece]]]
MC = "http://schemas.openxmlformats.org/markup-compatibility/2006"


def translatable(sentence: str) -> bool:
    """Whether a sentence has a letter to translate (numbers, punctuation and symbols alone are kept)."""
    return any(c.isalpha() for c in sentence)


CHUNK = 256  # paragraphs of a part read, translated and written back at once (all their objects held then)


class Writable(Protocol):
    paragraph: Paragraph

    def write(self, pieces: list[Piece]) -> None: ...


def translate_elements(elements: list[etree._Element], make: Callable[[etree._Element], Writable],
                       translate_paragraphs: TranslateParagraphs) -> int:
    """The paragraph elements of a part translated CHUNK at a time, so that memory follows a chunk's paragraphs, not
    the part's; the work budget in force is checked between chunks and ticked per paragraph. The count translated."""
    budget, count = workbudget.current(), 0
    for start in range(0, len(elements), CHUNK):
        budget.check()
        chunk = []
        for el in elements[start:start + CHUNK]:
            budget.tick()
            if (p := make(el)).paragraph.texts:
                chunk.append(p)
        rendered = translate_paragraphs([p.paragraph for p in chunk]) if chunk else []
        for p, pieces in zip(chunk, rendered, strict=True):
            p.write(pieces)
        count += len(chunk)
    return count


@dataclass(frozen=True)
class Parts:
    """Which parts of a package are translated, and how: `names` in vocabulary `dialect` (their a:p / w:p), or, with
    `plain`, that element's whole text (a legacy pptx comment's p:text, which holds no runs). With `main`, also the
    main part wherever `_rels/.rels` puts it, and the parts its relationships of types `related` point to (a header
    named otherwise than Word names it): nmt.translation.documents.opc."""

    names: re.Pattern[str]
    dialect: Dialect
    plain: str | None = None
    main: bool = False
    related: frozenset[str] = frozenset()


class PlainText:
    """An element whose text is one run, no formatting: `paragraph` to translate; `write(pieces)`."""

    def __init__(self, el: etree._Element):
        self.el = el
        self.paragraph = Paragraph([Run(el.text or "")], translatable)

    def write(self, pieces: list[Piece]) -> None:
        self.el.text = "".join(p.text for p in pieces)


def translate_package(src: Path, dst: Path, kind: str, required: str, rules: Sequence[Parts],
                      translate_paragraphs: TranslateParagraphs, languages: tuple[str, str] | None = None) -> int:
    """A docx or pptx `src` (`kind`, its main part `required` unless `_rels/.rels` says otherwise) translated into
    `dst`: the paragraphs of every part a rule names, one part at a time as the output is written; the number of
    paragraphs translated. `languages`: the model's (source, target), for the language marks of translated runs
    (nmt.translation.documents.ooxml_marks)."""
    count = 0
    language = Language.of(languages)

    def translated(name: str) -> bytes | None:
        nonlocal count
        rule = next((r for r, more in zip(rules, named) if r.names.fullmatch(name) or name in more), None)
        if rule is None:
            return None
        part = box.part(name)
        root, d = part.tree.getroot(), rule.dialect
        if rule.plain is not None:
            count += translate_elements(list(root.iter(rule.plain)), PlainText, translate_paragraphs)
            return part.serialize()
        twins = alternate_twins(root, d)
        marks = Marks(root, d, language)
        count += translate_elements([p for p in root.iter(d.tag("p")) if p not in twins],
                                    lambda p: OoxmlParagraph(p, d, translatable, marks), translate_paragraphs)
        for fallback, choice in twins.items():
            if _text(choice, d) != _text(fallback, d):  # the choice was translated
                fallback[:] = [c for c in fallback if local(c) == "pPr"][:1] + [
                    copy.deepcopy(c) for c in choice if local(c) != "pPr"]
        return part.serialize()

    with removed_on_error(dst), open_package(src, kind, required) as (box, main):
        named = [related(box, main, r.related) | {main} if r.main else set() for r in rules]
        box.write(dst, translated)
    return count


def alternate_twins(root: etree._Element, d: Dialect) -> dict[etree._Element, etree._Element]:
    """Each mc:Fallback paragraph whose text is the one of the same rank in its mc:Choice: fallback -> choice (the
    same text box written twice, translated once)."""
    twins: dict[etree._Element, etree._Element] = {}
    for alternate in root.iter(f"{{{MC}}}AlternateContent"):
        choice, fallback = alternate.find(f"{{{MC}}}Choice"), alternate.find(f"{{{MC}}}Fallback")
        if choice is None or fallback is None:
            continue
        ours = [p for p in choice.iter(d.tag("p"))]
        theirs = [p for p in fallback.iter(d.tag("p"))]
        if len(ours) != len(theirs):
            continue
        for a, b in zip(ours, theirs):
            if _text(a, d) == _text(b, d) and b not in twins:
                twins[b] = a
    return twins


def _text(p: etree._Element, d: Dialect) -> str:
    return "".join(t.text or "" for t in p.iter(d.tag("t")))

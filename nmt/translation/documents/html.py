"""HTML fragments (`nmt serve`'s `format: "html"`, a Mastodon or Akkoma post, say) and whole .html documents: find
the sentences and put their translations back, leaving every byte outside the translated text as it was sent.

The parser is the standard library's `html.parser.HTMLParser`, not BeautifulSoup, lxml or selectolax: those build a
tree and serialize it again, which rewrites attribute quoting, entity forms, void tags and broken markup, while a
client expects its markup back untouched. HTMLParser is maintained with CPython, adds no dependency, tolerates broken
HTML, and reports where each construct starts (`getpos()`), so the fragment can be cut into source slices: markup
slices are copied as they are, and only text slices that were translated are written anew
(nmt.translation.documents.html_source cuts them).

Segmentation: a paragraph runs between block boundaries (p, div, li, td, br, h1..., any tag not known to be inline,
comments); inline elements (a, b, i, span, ..., and custom elements such as <my-widget>, inline as browsers show
them) do not end it. Its sentences are split over the text joined across the
inline tags, each is translated once as plain text, and each inline element is put back around the target words aligned
to its source words by the model's cross-attention (nmt.translation.documents.inline,
nmt.translation.documents.html_inline), so "the <b>red</b> car" is one sentence with <b>…</b> on the word for "red".
Text not to be translated (code, kbd, var, samp, MathML, SVG, ruby annotations, mentions, URLs, any element under
translate="no" or class="notranslate") inside a sentence is an atom: never sent, kept as written, in its place among
the words, with the punctuation written against it (nmt.translation.documents.atoms); a <ruby>'s base text stays in
its sentence. The translate attribute is inherited as the HTML standard defines it: a descendant's translate="yes"
translates its own subtree again, as paragraphs of its own (the kept text around it is neither sent nor joined to
it), a value other than yes, "" or no inherits; code and the other kept tags stay kept whatever is inside them.
(LibreTranslate translates each text node apart, which gives the model fragments: "the", "red", "car".)
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nmt.translation.documents.html_inline import HtmlParagraph, Token, inline, text_tokens
from nmt.translation.documents.html_source import INLINE_VOID, local_name, source_slices
from nmt.translation.documents.inline import Aligned, Paragraph, Piece
from nmt.translation.documents.sentences import ABBREVIATIONS, split_sentences
from nmt.translation.documents.txt import TranslateParagraphs, read_text, write_text

__all__ = ["ABBREVIATIONS", "HtmlDoc", "parse_html", "split_sentences"]

_TAG_LIKE = re.compile(r"<[a-zA-Z/!?]")


@dataclass
class HtmlDoc:
    """A parsed fragment: `texts` are the sentences to translate (entities decoded, whitespace collapsed), in order.
    A paragraph's atom may be a kept region with translate="yes" parts (`HtmlParagraph.kept`): an HtmlDoc of its
    own, whose texts and paragraphs follow the paragraph's own."""

    texts: list[str]
    # The fragment: markup between paragraphs (kept as it is) and paragraphs (sentences across inline tags).
    parts: list[str | HtmlParagraph] = field(default_factory=list, repr=False)

    def add(self, paragraph: HtmlParagraph) -> None:
        self.parts.append(paragraph)
        self.texts += paragraph.texts + [text for region in paragraph.kept for text in region.texts]

    def source(self) -> str:
        """The fragment as it was read."""
        return "".join(part if isinstance(part, str) else part.source() for part in self.parts)

    def render(self, translations: Sequence[str | Aligned]) -> str:
        """The fragment with texts[i] replaced by translations[i] (with word alignments, or plain: placed in order),
        escaped; an unchanged text keeps its source bytes, and so does every tag."""
        if len(translations) != len(self.texts):
            raise ValueError(f"{len(translations)} translations for {len(self.texts)} texts")
        return self._render(iter(translations))

    def _render(self, translations: Iterator[str | Aligned]) -> str:
        out = []
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
                continue
            own = [next(translations) for _ in part.texts]
            out.append(part.render(own, [region._render(translations) for region in part.kept]))
        return "".join(out)

    def paragraphs(self) -> list[Paragraph]:
        """The paragraphs with text to translate, in order (what `write` takes the rendered pieces of)."""
        out = []
        for part in self.parts:
            if isinstance(part, HtmlParagraph):
                out += [part.paragraph] if part.paragraph is not None else []
                out += [p for region in part.kept for p in region.paragraphs()]
        return out

    def write(self, pieces: Sequence[Sequence[Piece]]) -> str:
        """The fragment with each of `paragraphs()` written from its rendered pieces, the rest as it was."""
        return self._write(iter(pieces))

    def _write(self, pieces: Iterator[Sequence[Piece]]) -> str:
        out = []
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
                continue
            own = next(pieces) if part.paragraph is not None else None
            out.append(part.write(own, [region._write(pieces) for region in part.kept]))
        return "".join(out)


def translate(src: Path, dst: Path, translate_paragraphs: TranslateParagraphs) -> int:
    """A whole .html/.htm document (UTF-8): its text translated, every byte of markup kept."""
    text, style = read_text(src)
    doc = parse_html(text)
    paragraphs = doc.paragraphs()
    write_text(dst, doc.write(translate_paragraphs(paragraphs) if paragraphs else []), style)
    return len(paragraphs)


def parse_html(fragment: str, xml: bool = False) -> HtmlDoc:
    """Cut `fragment` into paragraphs and the markup between them (their concatenation is `fragment`) and collect
    the sentences. `xml`: XHTML (an EPUB's), where "<span/>" is an empty element, not a start tag. A translate="yes"
    subtree inside a kept region is read into a frame of its own (`_Frame.resume`): its own paragraphs."""
    doc = HtmlDoc(texts=[])
    frames = [_Frame(doc)]
    for raw, kind, tag in source_slices(fragment, xml):
        if kind == "resume":
            frames.append(frames[-1].resume())
        elif kind == "suspend":
            if len(frames) > 1:
                frames.pop().close()
        elif kind == "skip":
            frames[-1].kept(raw, tag)
        else:
            frames[-1].add(raw, kind, tag)
    while frames:
        frames.pop().close()
    return doc


class _Frame:
    """What `parse_html` reads into: a document's parts and the paragraph being read. `region`: the kept region
    being read here, if any: an inline one is an atom of the paragraph (an HtmlDoc: its markup, and the paragraphs of
    its translate="yes" subtrees), a "block" one markup between paragraphs (its translate="yes" subtrees' paragraphs
    go between them)."""

    def __init__(self, doc: HtmlDoc):
        self.doc = doc
        self.tokens: list[Token] = []
        self.region: HtmlDoc | str | None = None
        self._at = -1  # the inline region's atom in `tokens`

    def add(self, raw: str, kind: str, tag: str) -> None:
        """A slice outside kept regions."""
        self._end_region()
        if kind == "text":
            # A tag cut off by the fragment's end ("<div x") reaches us as text: from there on it is broken markup.
            cut = _TAG_LIKE.search(raw)
            prose = raw[:cut.start()] if cut else raw
            if prose:
                self.tokens.extend(text_tokens(prose))
            if len(prose) < len(raw):
                self.boundary(raw[len(prose):])
        elif kind == "start" and tag in INLINE_VOID or kind == "empty" and (inline(tag) or tag in INLINE_VOID):
            self.tokens.append(Token("atom", raw))
        elif kind in ("start", "end") and inline(tag):
            self.tokens.append(Token("open" if kind == "start" else "close", raw, tag))
        else:
            self.boundary(raw)

    def kept(self, raw: str, tag: str) -> None:
        """A slice of a kept region (`tag`: the element it starts with), or its continuation after a translate="yes"
        subtree."""
        if isinstance(self.region, HtmlDoc):
            self.region.parts.append(raw)
        elif self.region is None and inline(local_name(tag)):
            self.region, self._at = HtmlDoc(texts=[], parts=[raw]), len(self.tokens)
            self.tokens.append(Token("atom", raw))
        else:
            self.boundary(raw)
            self.region = "block"

    def resume(self) -> _Frame:
        """The frame of a translate="yes" subtree starting in the current kept region."""
        if isinstance(self.region, HtmlDoc):
            return _Frame(self.region)
        self.boundary("")
        return _Frame(self.doc)

    def boundary(self, raw: str) -> None:
        self._end_region()
        if self.tokens:
            self.doc.add(HtmlParagraph(self.tokens))
            self.tokens = []
        if raw:
            self.doc.parts.append(raw)

    def close(self) -> None:
        self.boundary("")

    def _end_region(self) -> None:
        region, self.region = self.region, None
        if isinstance(region, HtmlDoc) and any(isinstance(part, HtmlParagraph) for part in region.parts):
            self.tokens[self._at] = Token("atom", region.source(), kept=region)

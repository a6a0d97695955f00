"""HTML fragments (`nmt serve`'s `format: "html"`, a Mastodon or Akkoma post, say) and whole .html documents: find
the sentences and put their translations back, leaving every byte outside the translated text as it was sent.

The parser is the standard library's `html.parser.HTMLParser`, not BeautifulSoup, lxml or selectolax: those build a
tree and serialize it again, which rewrites attribute quoting, entity forms, void tags and broken markup, while a
client expects its markup back untouched. HTMLParser is maintained with CPython, adds no dependency, tolerates broken
HTML, and reports where each construct starts (`getpos()`), so the fragment can be cut into source slices: markup
slices are copied as they are, and only text slices that were translated are written anew.

Segmentation: a paragraph runs between block boundaries (p, div, li, td, br, h1..., any tag not known to be inline,
comments); inline elements (a, b, i, span, ..., and custom elements such as <my-widget>, inline as browsers show
them) do not end it. Its sentences are split over the text joined across the
inline tags, each is translated once as plain text, and each inline element is put back around the target words aligned
to its source words by the model's cross-attention (nmt.translation.documents.inline,
nmt.translation.documents.html_inline), so "the <b>red</b> car" is one sentence with <b>…</b> on the word for "red".
Text not to be translated (code, kbd, var, samp, MathML, SVG, ruby annotations, mentions, URLs, any element under
translate="no" or class="notranslate", descendants included: a translate="yes" inside is kept with it) inside a
sentence is an atom: never sent, kept as written, in its place among the words, with the
punctuation written against it (nmt.translation.documents.atoms); a <ruby>'s base text stays in its sentence.
(LibreTranslate translates each text node apart, which gives the model fragments: "the", "red", "car".)
"""

from __future__ import annotations

import html
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from html import parser as html_parser
from html.parser import HTMLParser
from pathlib import Path

from nmt import workbudget
from nmt.errors import NmtError
from nmt.translation.documents.html_inline import HtmlParagraph, Token, inline, text_tokens
from nmt.translation.documents.inline import Aligned, Paragraph, Piece
from nmt.translation.documents.sentences import ABBREVIATIONS, split_sentences
from nmt.translation.documents.txt import TranslateParagraphs, read_text, write_text

__all__ = ["ABBREVIATIONS", "HtmlDoc", "parse_html", "split_sentences"]

# Elements whose text is code, keyboard input, program output, a formula or a drawing, never prose; and ruby
# annotations (<rt>, <rp>, <rtc>: the reading of the base text, kept as written while the base text is translated in
# its sentence).
SKIP_TAGS = frozenset({"code", "pre", "script", "style", "kbd", "samp", "var", "math", "svg", "rt", "rp", "rtc"})
# Classes that say "do not translate": the Google/HTML convention, and Mastodon/Akkoma's mentions, hashtags and the
# pieces of shortened links (translating "bob" in "@bob" or a URL's hidden tail breaks them).
SKIP_CLASSES = frozenset({"notranslate", "mention", "hashtag", "h-card", "u-url", "invisible", "ellipsis"})
# Elements without content: a start tag of one opens nothing that an end tag would close.
VOID_TAGS = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source",
                       "track", "wbr"})
INLINE_VOID = frozenset({"img", "wbr"})  # kept in a sentence as atoms; other void tags (br, hr...) end a paragraph

_TAG_LIKE = re.compile(r"<[a-zA-Z/!?]")
_COMMENT_END = re.compile(r"--!?\s*>")
_SECTION_END = re.compile(r"\]\s*>")
_SECTION = re.compile(r"<!\[([a-zA-Z][-_.a-zA-Z0-9]*)?")  # a marked section and its keyword
_SECTION_NAMES = frozenset({"temp", "cdata", "ignore", "include", "rcdata", "if", "else", "endif"})


@dataclass
class HtmlDoc:
    """A parsed fragment: `texts` are the sentences to translate (entities decoded, whitespace collapsed), in order."""

    texts: list[str]
    # The fragment: markup between paragraphs (kept as it is) and paragraphs (sentences across inline tags).
    parts: list[str | HtmlParagraph] = field(default_factory=list, repr=False)

    def render(self, translations: Sequence[str | Aligned]) -> str:
        """The fragment with texts[i] replaced by translations[i] (with word alignments, or plain: placed in order),
        escaped; an unchanged text keeps its source bytes, and so does every tag."""
        if len(translations) != len(self.texts):
            raise ValueError(f"{len(translations)} translations for {len(self.texts)} texts")
        out, at = [], 0
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
                continue
            out.append(part.render(translations[at:at + len(part.texts)]))
            at += len(part.texts)
        return "".join(out)

    def paragraphs(self) -> list[Paragraph]:
        """The paragraphs with text to translate, in order (what `write` takes the rendered pieces of)."""
        return [p.paragraph for p in self.parts if isinstance(p, HtmlParagraph) and p.paragraph is not None]

    def write(self, pieces: Sequence[Sequence[Piece]]) -> str:
        """The fragment with each of `paragraphs()` written from its rendered pieces, the rest as it was."""
        rendered = iter(pieces)
        return "".join(part if isinstance(part, str) else part.write(next(rendered)) if part.paragraph else part._raw
                       for part in self.parts)


def translate(src: Path, dst: Path, translate_paragraphs: TranslateParagraphs) -> int:
    """A whole .html/.htm document (UTF-8): its text translated, every byte of markup kept."""
    text, style = read_text(src)
    doc = parse_html(text)
    paragraphs = doc.paragraphs()
    write_text(dst, doc.write(translate_paragraphs(paragraphs) if paragraphs else []), style)
    return len(paragraphs)


def parse_html(fragment: str, xml: bool = False) -> HtmlDoc:
    """Cut `fragment` into paragraphs and the markup between them (their concatenation is `fragment`) and collect
    the sentences. `xml`: XHTML (an EPUB's), where "<span/>" is an empty element, not a start tag."""
    doc = HtmlDoc(texts=[])
    tokens: list[Token] = []

    def boundary(raw: str) -> None:
        if tokens:
            paragraph = HtmlParagraph(tokens)
            doc.texts.extend(paragraph.texts)
            doc.parts.append(paragraph)
            tokens.clear()
        if raw:
            doc.parts.append(raw)

    for raw, kind, tag in source_slices(fragment, xml):
        if kind == "text":
            # A tag cut off by the fragment's end ("<div x") reaches us as text: from there on it is broken markup.
            cut = _TAG_LIKE.search(raw)
            prose = raw[:cut.start()] if cut else raw
            if prose:
                tokens.extend(text_tokens(prose))
            if len(prose) < len(raw):
                boundary(raw[len(prose):])
        elif (kind == "skip" and inline(local_name(tag)) or kind == "start" and tag in INLINE_VOID
              or kind == "empty" and (inline(tag) or tag in INLINE_VOID)):
            tokens.append(Token("atom", raw))
        elif kind in ("start", "end") and inline(tag):
            tokens.append(Token("open" if kind == "start" else "close", raw, tag))
        else:
            boundary(raw)
    boundary("")
    return doc


class _Scanner(HTMLParser):
    """Records each construct in document order as (source offset, kind, decoded text or tag); kind is "start",
    "end", "empty" (XHTML's "<tag/>"), "markup" (comments, declarations), "text", or "skip" for what is to be left
    alone (inside code, translate="no", ..., with the tags that open and close it)."""

    def __init__(self, source: str, xml: bool = False) -> None:
        super().__init__(convert_charrefs=True)
        self._xml = xml
        self.events: list[tuple[int, str, str]] = []
        self._stack: list[tuple[str, bool]] = []  # open elements: (tag, text inside is skipped)
        self._open: Counter[str] = Counter()  # of the open elements' tags: a stray end tag is known in O(1)
        # getpos() is (line, column); this turns it into an offset in the source.
        self._line_starts = [0] + [m.end() for m in re.finditer("\n", source)]
        self._guard = _Terminators(source)

    def _offset(self) -> int:
        line, column = self.getpos()
        return self._line_starts[line - 1] + column

    def _markup(self, kind: str = "markup", tag: str = "") -> None:
        self.events.append((self._offset(), kind, tag))
        workbudget.current().tick()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        skipped = self._skipping() or _skips(tag, attrs)
        self._markup("skip" if skipped else "start", tag)
        if tag not in VOID_TAGS:
            self._stack.append((tag, skipped))
            self._open[tag] += 1

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        """In HTML "<br/>" opens nothing (void), but "<code/>" opens a <code> in browsers: the slash is ignored; in
        XHTML (`xml`) a "<tag/>" is an empty element, opening nothing."""
        if not self._xml:
            self.handle_starttag(tag, attrs)
        else:
            self._markup("skip" if self._skipping() or _skips(tag, attrs) else "empty", tag)

    def handle_endtag(self, tag: str) -> None:
        # Close up to the matching open element, as browsers do with unclosed inner ones; a stray end tag closes none
        # (known from the count, not by a scan of the stack: the scan only passes elements it closes).
        if self._open[tag]:
            depth = len(self._stack) - 1
            while self._stack[depth][0] != tag:
                depth -= 1
            self._markup("skip" if self._stack[depth][1] else "end", tag)
            self._open.subtract(name for name, _ in self._stack[depth:])
            del self._stack[depth:]
            return
        self._markup("skip" if self._skipping() else "end", tag)

    def handle_data(self, data: str) -> None:
        self.events.append((self._offset(), "skip" if self._skipping() else "text", data))
        workbudget.current().tick()

    def _skipping(self) -> bool:
        return bool(self._stack) and self._stack[-1][1]

    def handle_comment(self, data: str) -> None:
        self._markup("skip" if self._skipping() else "markup")

    handle_decl = handle_pi = handle_unknown_decl = handle_comment

    # HTMLParser looks for the end of a construct from where it starts to the end of the input, and when there is
    # none (at close()) it moves on by one tag or one '<' and looks again: quadratic ("a <" * 10000: 12 s). These
    # answer "not terminated" at once where no terminator follows, which is what the full search would find.
    def check_for_whole_start_tag(self, i: int) -> int:
        return self._guard.start_tag(self, i, super().check_for_whole_start_tag)

    def parse_endtag(self, i: int) -> int:
        return -1 if self._guard.unclosed(self, i + 1) else super().parse_endtag(i)

    def parse_pi(self, i: int) -> int:
        return -1 if self._guard.unclosed(self, i + 2) else super().parse_pi(i)

    def parse_comment(self, i: int, report: int = 1) -> int:
        return -1 if self._guard.unclosed(self, i + 2, "comment") else super().parse_comment(i, report)

    def parse_html_declaration(self, i: int) -> int:
        if self.rawdata.startswith("<!--", i):
            return super().parse_html_declaration(i)
        section = _SECTION.match(self.rawdata, i)
        if section and section.group(1).lower() not in _SECTION_NAMES:
            return super().parse_html_declaration(i)  # refused by the parser at once (an AssertionError)
        return -1 if self._guard.unclosed(self, i + 2, "section" if section else ">") else super(
            ).parse_html_declaration(i)


class _Terminators:
    """Where the last terminator of each kind of construct is in the source (its start): a construct starting
    after it cannot end. Tolerant of the parser's version: a comment may end with "-->", "--!>", "-- >" or, abruptly,
    "<!-->"; a marked section with "]>" or "]]>"; the rest with ">". A start tag's attributes may hold quoted '>'s:
    the first whose attributes run to the end of the source marks every later start tag as unterminated too (the
    rest is then text, kept as written: see `parse_html`)."""

    def __init__(self, source: str) -> None:
        self._length = len(source)
        self._last = {">": source.rfind(">"), "comment": _last_match(_COMMENT_END, source),
                      "section": _last_match(_SECTION_END, source)}
        self._runaway = len(source) + 1  # where the first start tag running to the end starts

    def unclosed(self, parser: HTMLParser, i: int, kind: str = ">") -> bool:
        """Whether no `kind` terminator starts at or after `i` (an index into the parser's rawdata, a suffix of the
        source)."""
        return self._last[kind] < self._length - len(parser.rawdata) + i

    def start_tag(self, parser: HTMLParser, i: int, check: Callable[[int], int]) -> int:
        at = self._length - len(parser.rawdata) + i
        if at >= self._runaway or self.unclosed(parser, i):
            return -1  # without a '>' a start tag is never a tag (the parser gives it as text either way)
        end = check(i)
        tag_end = getattr(html_parser, "locatestarttagend_tolerant", None)
        if end < 0 and tag_end is not None and tag_end.match(parser.rawdata, i).end() == len(parser.rawdata):
            self._runaway = at
        return end


def _last_match(pattern: re.Pattern[str], source: str) -> int:
    """The start of the last match of `pattern` (one whose matches cannot overlap) in `source`; -1: none."""
    return max((m.start() for m in pattern.finditer(source)), default=-1)


def _skips(tag: str, attrs: list[tuple[str, str | None]]) -> bool:
    """Whether an element's own tag or attributes say its text is not to be translated."""
    values = {name: value or "" for name, value in attrs}
    return (local_name(tag) in SKIP_TAGS or values.get("translate", "").strip().lower() == "no"
            or not SKIP_CLASSES.isdisjoint(values.get("class", "").split()))


def local_name(tag: str) -> str:
    """A tag without its XML prefix: XHTML may write MathML as <m:math>."""
    return tag.rpartition(":")[2]


def source_slices(source: str, xml: bool = False) -> list[tuple[str, str, str]]:
    """`source` as consecutive (slice, kind, tag) triples: kind "text" (translatable text), "start"/"end" (a tag),
    "empty" (XHTML's "<tag/>"), "skip" (a whole subtree left alone; tag: the one it starts with) or "markup". A
    construct runs from its own offset to the next one's, consecutive text (skip) events make one slice, and a text
    node is only trusted when decoding its slice gives what the parser decoded: markup the parser consumed silently
    (`</>`) then stays markup."""
    scanner = _Scanner(source, xml)
    try:
        scanner.feed(source)
        scanner.close()
    except NmtError:  # over the work budget, past the deadline
        raise
    except Exception:  # e.g. AssertionError on `<![x[`: the rest is kept as it is, untranslated
        scanner.events.append((scanner._offset(), "markup", ""))
    events = [(0, "markup", "")] + scanner.events + [(len(source), "end-of-source", "")]
    offsets = [offset for offset, _, _ in events]
    if offsets != sorted(offsets):  # never seen; if a parser version ever reports positions otherwise, translate none
        return [(source, "markup", "")]
    slices: list[tuple[str, str, str]] = []
    decoded: list[str] = []  # the text events of the node being read
    start, first = 0, ""
    for (offset, kind, data), following in zip(events, events[1:]):
        if kind not in ("text", "skip"):
            slices.append((source[offset:following[0]], kind, data))
            continue
        if not decoded:
            start, first = offset, data
        decoded.append(data)
        if following[1] != kind:
            raw = source[start:following[0]]
            if kind == "skip":
                slices.append((raw, "skip", first))
            else:
                slices.append((raw, "text" if html.unescape(raw) == "".join(decoded) else "markup", ""))
            decoded = []
    return slices

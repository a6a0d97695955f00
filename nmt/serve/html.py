"""HTML fragments for `nmt serve`'s `format: "html"`: find the sentences in a fragment (a Mastodon or Akkoma post,
say) and put their translations back, leaving every byte outside the translated text as it was sent.

The parser is the standard library's `html.parser.HTMLParser`, not BeautifulSoup, lxml or selectolax: those build a
tree and serialize it again, which rewrites attribute quoting, entity forms, void tags and broken markup, while a
client expects its markup back untouched. HTMLParser is maintained with CPython, adds no dependency, tolerates broken
HTML, and reports where each construct starts (`getpos()`), so the fragment can be cut into source slices: markup
slices are copied as they are, and only text slices that were translated are written anew.

Segmentation (what LibreTranslate's own HTML translation does): each text node is on its own, split further into
sentences by `split_sentences`. Joining text across inline tags (`<a>`, `<b>`) would give the model whole sentences,
but its translation would then have to be spread back over the tags by alignment, which reorders or drops markup.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser

# Elements whose text is code, keyboard input or program output, never prose.
SKIP_TAGS = frozenset({"code", "pre", "script", "style", "kbd", "samp", "var"})
# Classes that say "do not translate": the Google/HTML convention, and Mastodon/Akkoma's mentions, hashtags and the
# pieces of shortened links (translating "bob" in "@bob" or a URL's hidden tail breaks them).
SKIP_CLASSES = frozenset({"notranslate", "mention", "hashtag", "h-card", "u-url", "invisible", "ellipsis"})
# Elements without content: a start tag of one opens nothing that an end tag would close.
VOID_TAGS = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source",
                       "track", "wbr"})
# Words before a "." that do not end a sentence ("Dr. Smith"); tokens with inner dots ("e.g", "U.S") count too.
ABBREVIATIONS = frozenset({"mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "vs", "etc", "cf", "fig", "no", "nr",
                           "vol", "approx", "ca", "inc", "ltd", "co", "corp", "dept", "gen", "lt", "col", "rev", "bzw",
                           "usw", "vgl", "ggf", "mme", "mlle", "sra"})

# html.unescape's own pattern, so that decoding atom by atom gives exactly what the parser decoded.
_CHARREF = re.compile(r"&(#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[^\t\n\f <&#;]{1,32};?)")
# End punctuation then whitespace (Latin-like scripts), or CJK end punctuation, which needs no space after it.
_BREAK = re.compile(r"[.!?…؟।]+[\"'”’»)\]]*(?=\s)|[。！？]+[」』”’）)]*(?=\s*\S)")
_OPENERS = "\"'“‘«([¿¡"
_NEXT_WORD = re.compile(rf"\s*[{re.escape(_OPENERS)}]*(\S)")  # the next word's first character, after its quotes
_URL_LIKE = re.compile(r"(?:[a-z][a-z0-9+.-]*://|www\.|mailto:)\S*|[@#][\w.@-]+|[\w.+-]+@[\w-]+(?:\.[\w-]+)+"
                       r"|(?:[\w-]+\.)+[a-z]{2,}/\S*", re.IGNORECASE)
_HTML_SPACE = re.compile(r"[ \t\n\r\f]+")  # HTML's whitespace; U+00A0 (&nbsp;) is meant and is kept
_TAG_LIKE = re.compile(r"<[a-zA-Z/!?]")


@dataclass
class HtmlDoc:
    """A parsed fragment: `texts` are the sentences to translate (entities decoded, whitespace collapsed), in order."""

    texts: list[str]
    # The fragment as consecutive source slices, each with the index of the text it holds, or -1 for one kept as is.
    _slices: list[tuple[str, int]] = field(default_factory=list, repr=False)

    def render(self, translations: Sequence[str]) -> str:
        """The fragment with texts[i] replaced by translations[i], escaped; an unchanged text keeps its source bytes."""
        if len(translations) != len(self.texts):
            raise ValueError(f"{len(translations)} translations for {len(self.texts)} texts")
        return "".join(raw if i < 0 or translations[i] == self.texts[i] else html.escape(translations[i], quote=False)
                       for raw, i in self._slices)


def parse_html(fragment: str) -> HtmlDoc:
    """Cut `fragment` into markup and text slices (their concatenation is `fragment`) and collect the sentences."""
    doc = HtmlDoc(texts=[])
    for raw, is_text in _source_slices(fragment):
        # A tag cut off by the fragment's end ("<div x") reaches us as text: from there on it is broken markup.
        cut = _TAG_LIKE.search(raw) if is_text else None
        prose = raw[:cut.start()] if cut else raw if is_text else ""
        if prose:
            _add_text(doc, prose)
        if len(prose) < len(raw):
            doc._slices.append((raw[len(prose):], -1))
    return doc


def split_sentences(text: str) -> list[str]:
    """The sentences of plain `text`, stripped, none empty (end punctuation, whitespace, then upper case or a digit)."""
    return [text[a:b] for a, b in _sentence_spans(text)]


class _Scanner(HTMLParser):
    """Records each construct in document order as (source offset, kind, decoded text); kind is "markup", "text",
    or "skip" for text to be left alone (inside code, translate="no", ...)."""

    def __init__(self, source: str) -> None:
        super().__init__(convert_charrefs=True)
        self.events: list[tuple[int, str, str]] = []
        self._stack: list[tuple[str, bool]] = []  # open elements: (tag, text inside is skipped)
        # getpos() is (line, column); this turns it into an offset in the source.
        self._line_starts = [0] + [m.end() for m in re.finditer("\n", source)]

    def _offset(self) -> int:
        line, column = self.getpos()
        return self._line_starts[line - 1] + column

    def _markup(self) -> None:
        self.events.append((self._offset(), "markup", ""))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._markup()
        if tag not in VOID_TAGS:
            self._stack.append((tag, self._skipping() or _skips(tag, attrs)))

    # "<br/>" opens nothing (void), but "<code/>" opens a <code> in browsers: the slash is ignored in HTML.
    handle_startendtag = handle_starttag

    def handle_endtag(self, tag: str) -> None:
        self._markup()
        # Close up to the matching open element, as browsers do with unclosed inner ones; a stray end tag closes none.
        for depth in range(len(self._stack) - 1, -1, -1):
            if self._stack[depth][0] == tag:
                del self._stack[depth:]
                break

    def handle_data(self, data: str) -> None:
        self.events.append((self._offset(), "skip" if self._skipping() else "text", data))

    def _skipping(self) -> bool:
        return bool(self._stack) and self._stack[-1][1]

    def handle_comment(self, data: str) -> None:
        self._markup()

    handle_decl = handle_pi = handle_unknown_decl = handle_comment


def _skips(tag: str, attrs: list[tuple[str, str | None]]) -> bool:
    """Whether an element's own tag or attributes say its text is not to be translated."""
    values = {name: value or "" for name, value in attrs}
    return (tag in SKIP_TAGS or values.get("translate", "").strip().lower() == "no"
            or not SKIP_CLASSES.isdisjoint(values.get("class", "").split()))


def _source_slices(source: str) -> list[tuple[str, bool]]:
    """`source` as consecutive (slice, is translatable text) pairs. A construct runs from its own offset to the next
    one's, consecutive text events make one text node, and a text node is only trusted when decoding its slice gives
    what the parser decoded: markup the parser consumed silently (`</>`) then stays markup."""
    scanner = _Scanner(source)
    try:
        scanner.feed(source)
        scanner.close()
    except Exception:  # e.g. AssertionError on `<![x[`: the rest is kept as it is, untranslated
        scanner.events.append((scanner._offset(), "markup", ""))
    events = [(0, "markup", "")] + scanner.events + [(len(source), "end", "")]
    offsets = [offset for offset, _, _ in events]
    if offsets != sorted(offsets):  # never seen; if a parser version ever reports positions otherwise, translate none
        return [(source, False)]
    slices: list[tuple[str, bool]] = []
    decoded: list[str] = []  # the text events of the node being read
    node_start = 0
    for (offset, kind, data), following in zip(events, events[1:]):
        if kind != "text":
            slices.append((source[offset:following[0]], False))
            continue
        node_start = offset if not decoded else node_start
        decoded.append(data)
        if following[1] != "text":
            raw = source[node_start:following[0]]
            slices.append((raw, html.unescape(raw) == "".join(decoded)))
            decoded = []
    return slices


def _add_text(doc: HtmlDoc, raw: str) -> None:
    """Append one text node's slices to `doc`: each translatable sentence as its own slice, the rest kept as is."""
    decoded, where = _decode(raw)
    spans = _sentence_spans(decoded)
    if any(where[i] < 0 for span in spans for i in span):  # a cut inside an entity's output (rare): one sentence
        stripped = decoded.strip()
        first = len(decoded) - len(decoded.lstrip())
        spans = [(first, first + len(stripped))] if stripped else []
        if any(where[i] < 0 for span in spans for i in span):
            doc._slices.append((raw, -1))
            return
    position = 0
    for a, b in spans:
        sentence = _HTML_SPACE.sub(" ", decoded[a:b])
        index = len(doc.texts) if _translatable(sentence) else -1
        if index >= 0:
            doc.texts.append(sentence)
        doc._slices += [(raw[position:where[a]], -1), (raw[where[a]:where[b]], index)]
        position = where[b]
    doc._slices.append((raw[position:], -1))


def _decode(raw: str) -> tuple[str, list[int]]:
    """`raw` with entities decoded, and for each index of the decoded text (and its end) the index in `raw` where
    that character's source starts, -1 for the 2nd character on of an entity that decodes to several."""
    parts: list[str] = []
    where: list[int] = []
    position = 0
    for match in _CHARREF.finditer(raw):
        parts.append(raw[position:match.start()])
        where += range(position, match.start())
        character = html.unescape(match.group())
        parts.append(character)
        where += ([match.start()] + [-1] * (len(character) - 1)) if character else []
        position = match.end()
    parts.append(raw[position:])
    where += range(position, len(raw) + 1)
    return "".join(parts), where


def _translatable(sentence: str) -> bool:
    """Whether a sentence has a word to translate: one with a letter that is not a URL, address, mention or hashtag
    (which a model would mangle); punctuation, digits and emoji alone are not."""
    return any(any(c.isalpha() for c in word) and not _URL_LIKE.fullmatch(word) for word in sentence.split())


def _sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence of `text`, whitespace around it left out."""
    cuts = [0] + [m.end() for m in _BREAK.finditer(text) if _ends_sentence(text, m)] + [len(text)]
    spans = []
    for a, b in zip(cuts, cuts[1:]):
        piece = text[a:b]
        stripped = piece.strip()
        if stripped:
            start = a + len(piece) - len(piece.lstrip())
            spans.append((start, start + len(stripped)))
    return spans


def _ends_sentence(text: str, match: re.Match[str]) -> bool:
    """Whether the end punctuation of `match` ends a sentence: CJK always; otherwise when the next word starts with
    a capital (or a caseless letter) or a digit, and the punctuation is not the dot of an abbreviation or initial."""
    if match.group()[0] in "。！？":
        return True
    following = _NEXT_WORD.match(text, match.end())
    first = following.group(1) if following else ""
    if not (first.isdigit() or (first.isalpha() and not first.islower())):
        return False
    if match.group() != ".":
        return True
    word = text[max(0, match.start() - 40):match.start()].split()[-1:] or [""]
    token = word[0].lstrip(_OPENERS).lower()
    is_initial = len(token) == 1 and token.isalpha()
    dotted = "." in token and all(part.isalpha() and len(part) <= 2 for part in token.split("."))  # e.g, u.s, z.b
    return not (token in ABBREVIATIONS or is_initial or dotted)

"""The paragraphs of an HTML fragment (nmt.translation.documents.html) as nmt.translation.documents.inline runs, and
their translations written back.

A paragraph's tokens (text, inline start and end tags, atoms) become runs: text with the path of inline elements
it is in (an element is known by the index of its start tag), or atoms kept as they are. Only well-nested pairs
in the paragraph are elements: a stray or unclosed tag, and an element with no text in it (<a name=x></a>,
<span><img></span>), is an atom, so nothing of it is ever moved apart or lost. URLs, addresses, mentions and
hashtags in the text are atoms too: never sent to the model. Writing back: between consecutive output pieces the
elements left are closed and those entered opened, each tag with its source bytes; in source order that gives
back exactly the source (between two runs a well-nested paragraph has only end tags, then start tags), and a
translated sentence's elements are each opened once (nmt.translation.documents.inline places every element on one
interval)."""

from __future__ import annotations

import bisect
import html
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from nmt import workbudget
from nmt.translation.documents import atoms
from nmt.translation.documents.atoms import Bit
from nmt.translation.documents.inline import Aligned, Paragraph, Path, Piece, Run

# Elements that stay inside a sentence (the rest, and comments, end a paragraph: p, div, li, td, br, h1...). MathML
# and SVG are inline in HTML (a formula or an icon among the words: an atom, nmt.translation.documents.html skips
# them); <ruby> holds its base text (<rb>) and annotations (<rt>, <rp>, <rtc>: atoms), all in the sentence.
INLINE_TAGS = frozenset({"a", "abbr", "b", "bdi", "bdo", "big", "cite", "code", "data", "del", "dfn", "em", "font",
                         "i", "ins", "kbd", "label", "mark", "nobr", "q", "s", "samp", "small", "span", "strong",
                         "sub", "sup", "time", "tt", "u", "var", "math", "svg", "ruby", "rb", "rt", "rp", "rtc"})
# A custom element's name (HTML's valid custom element name: a letter, then a hyphen somewhere; <my-widget>): inline,
# as browsers show an element they do not know, so its text stays in its sentence (or, under translate="no", it is
# one atom there).
_CUSTOM = re.compile(r"[a-z][^\s/>A-Z]*-[^\s/>A-Z]*")


def inline(tag: str) -> bool:
    """Whether an element stays inside a sentence: INLINE_TAGS, or a custom element."""
    return tag in INLINE_TAGS or _CUSTOM.fullmatch(tag) is not None


# html.unescape's own pattern, so that decoding atom by atom gives exactly what the parser decoded.
_CHARREF = re.compile(r"&(#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[^\t\n\f <&#;]{1,32};?)")
_URL_LIKE = re.compile(r"(?:[a-z][a-z0-9+.-]*://|www\.|mailto:)\S*|[@#][\w.@-]+|[\w.+-]+@[\w-]+(?:\.[\w-]+)+"
                       r"|(?:[\w-]+\.)+[a-z]{2,}/\S*", re.IGNORECASE)
_TRAILING = ".,;:!?)]»”’'\""  # punctuation after a URL or mention that belongs to the sentence


class Region(Protocol):
    """A kept region with translate="yes" parts (nmt.translation.documents.html.HtmlDoc): an atom of a paragraph
    whose text is written by its own paragraphs."""

    def source(self) -> str: ...


@dataclass(frozen=True)
class Token:
    """A piece of a paragraph's source: "text", "atom", "open" or "close" (an inline tag named `tag`); an atom may
    be a kept `Region` (its `raw`: the region's source)."""

    kind: str
    raw: str
    tag: str = ""
    kept: Region | None = None


def text_tokens(raw: str) -> list[Token]:
    """A text node's tokens: its text, with URL-like words (less their trailing punctuation) cut out as atoms."""
    decoded, where = _decode(raw)
    out, position = [], 0
    for match in re.finditer(r"\S+", decoded):
        core = match.group().rstrip(_TRAILING)
        a, b = where[match.start()], where[match.start() + len(core)]
        if core and _URL_LIKE.fullmatch(core) and a >= 0 and b >= 0:
            out += [Token("text", raw[position:a])] if a > position else []
            out.append(Token("atom", raw[a:b]))
            position = b
    return out + ([Token("text", raw[position:])] if position < len(raw) else [])


class HtmlParagraph:
    """One paragraph: `texts` to translate, `render` writes it back with their translations. `kept`: its atoms that
    are kept regions with translate="yes" parts, in order; `render` and `write` take their written text."""

    def __init__(self, tokens: Sequence[Token]):
        self._raw = "".join(t.raw for t in tokens)
        self.kept = [t.kept for t in tokens if t.kept is not None]
        self._spans: list[tuple[int, int]] = []  # each kept region's place in the paragraph's source
        at = 0
        for t in tokens:
            self._spans += [(at, at + len(t.raw))] if t.kept is not None else []
            at += len(t.raw)
        tokens = glue_separators(_atoms_for_unpaired(list(tokens)))
        self._open: dict[int, str] = {}
        self._close: dict[int, str] = {}
        self._sources: list[tuple[str, list[int] | None]] = []  # each run's raw text and decoded -> raw offsets
        self._atom_at: dict[int, int] = {}  # an atom run's offset in the paragraph's source (for `kept`)
        runs, stack, at = [], [], 0
        budget = workbudget.current()
        path: tuple[int, ...] = ()  # tuple(stack), built again only when the stack changed (runs share it)
        for k, token in enumerate(tokens):
            budget.tick()
            if token.kind == "open":
                self._open[k] = token.raw
                stack.append(k)
                budget.nest(len(stack))  # before a path that deep is built: no depth x runs paths
                path = tuple(stack)
            elif token.kind == "close":
                self._close[stack.pop()] = token.raw
                path = tuple(stack)
            elif token.kind == "atom":
                self._atom_at[len(runs)] = at
                runs.append(Run(token.raw, path, atom=True))
                self._sources.append((token.raw, None))
            else:
                decoded, where = _decode(token.raw)
                runs.append(Run(decoded, path))
                self._sources.append((token.raw, where))
            at += len(token.raw)
        self._paragraph = Paragraph(runs, translatable=_translatable)
        cuts = [(k, i) for k, a, b in self._paragraph.slices() for i in (a, b)]
        exact = all(self._sources[k][1] is None or self._sources[k][1][i] >= 0 for k, i in cuts)
        self.texts = self._paragraph.texts if exact else []  # a cut inside an entity's output (rare): keep it all

    @property
    def paragraph(self) -> Paragraph | None:
        """The runs to translate (None: nothing to, see `texts`), for
        nmt.translation.documents.paragraphs.translate_paragraphs."""
        return self._paragraph if self.texts else None

    def source(self) -> str:
        return self._raw

    def render(self, translations: Sequence[str | Aligned], kept: Sequence[str] = ()) -> str:
        """The paragraph with its texts translated, and `kept`: the written text of each of `self.kept`."""
        if all((t if isinstance(t, str) else t.text) == s for t, s in zip(translations, self.texts, strict=True)):
            return self._splice(self._raw, 0, kept)
        return self.write(self._paragraph.render(translations), kept)

    def write(self, pieces: Sequence[Piece] | None, kept: Sequence[str] = ()) -> str:
        """The paragraph's markup around rendered pieces (of `paragraph.render`; None: its source), each of
        `self.kept` written as `kept`."""
        if pieces is None:
            return self._splice(self._raw, 0, kept)
        out: list[str] = []
        path: Path = ()
        for piece in pieces:
            out += self._move(path, piece.path)
            out.append(self._text(piece, kept))
            path = piece.path
        return "".join(out + self._move(path, ()))

    def _move(self, old: Path, new: Path) -> list[str]:
        """The end tags of the elements left and the start tags of those entered, from `old` to `new`."""
        common = 0
        while common < min(len(old), len(new)) and old[common] == new[common]:
            common += 1
        return [self._close[k] for k in reversed(old[common:])] + [self._open[k] for k in new[common:]]  # type: ignore

    def _text(self, piece: Piece, kept: Sequence[str]) -> str:
        if piece.source is None:
            return html.escape(piece.text, quote=False)
        k, a, b = piece.source
        raw, where = self._sources[k]
        return self._splice(raw, self._atom_at[k], kept) if where is None else raw[where[a]:where[b]]

    def _splice(self, raw: str, offset: int, kept: Sequence[str]) -> str:
        """`raw` (the paragraph's source from `offset`) with the kept regions in it written as `kept`."""
        if not kept:
            return raw
        out, at, k = [], offset, bisect.bisect_left(self._spans, (offset, offset))
        while k < len(self._spans) and self._spans[k][1] <= offset + len(raw):
            a, b = self._spans[k]
            out += [raw[at - offset:a - offset], kept[k]]
            at, k = b, k + 1
        return "".join(out) + raw[at - offset:]


def _atoms_for_unpaired(tokens: list[Token]) -> list[Token]:
    """Tokens where only well-nested pairs with text inside stay tags: stray and unclosed tags become atoms, and an
    element without text becomes one atom from its start tag to its end tag."""
    stack, pairs, stray = [], {}, set()
    for k, token in enumerate(tokens):
        if token.kind == "open":
            stack.append(k)
        elif token.kind == "close":
            if stack and tokens[stack[-1]].tag == token.tag:
                pairs[stack.pop()] = k
            else:
                stray.add(k)
    stray.update(stack)
    texts = [0]  # texts[k]: how many text tokens come before token k (an element's text known in O(1))
    for token in tokens:
        texts.append(texts[-1] + (token.kind == "text"))
    out, k = [], 0
    while k < len(tokens):
        end = pairs.get(k)
        if end is not None and texts[end] == texts[k]:
            out.append(Token("atom", "".join(t.raw for t in tokens[k:end + 1])))
            k = end + 1
            continue
        out.append(Token("atom", tokens[k].raw) if k in stray else tokens[k])
        k += 1
    return out


def glue_separators(tokens: list[Token]) -> list[Token]:
    """Tokens with each atom's separators made part of it (nmt.translation.documents.atoms): punctuation written
    against it, and atoms with only spaces and punctuation between them one atom ("<kbd>Ctrl</kbd>+<kbd>C</kbd>")."""
    bits = [Bit(t.kind, t.raw, _decode(t.raw)[0] if t.kind == "text" else t.tag) for t in tokens]
    return [Token(b.kind, b.raw, b.text if b.kind in ("open", "close") else "") for b in atoms.glue_separators(bits)]


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

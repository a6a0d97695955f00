"""An HTML or XHTML source cut into consecutive slices (nmt.translation.documents.html reads them): text, tags,
markup, and the subtrees left alone (code, MathML, translate="no"...), each slice with its exact source bytes.

The parser is the standard library's `html.parser.HTMLParser` (see nmt.translation.documents.html for why), with
its quadratic searches for unterminated constructs cut short (`_Terminators`). What is left alone follows the HTML
standard's translate attribute: "no" (or class notranslate) keeps an element and its descendants, a descendant's
"yes" (or "") translates its own subtree again, any other value or none inherits the parent's; a subtree kept by
what it is (code, kbd, samp, var, pre, script, style, MathML, SVG, ruby annotations, a mention) stays kept whatever
is inside it. Where a translate="yes" subtree inside a kept region starts and ends is marked by the events "resume"
and "suspend" (empty slices)."""

from __future__ import annotations

import html
import re
from collections import Counter
from collections.abc import Callable
from html import parser as html_parser
from html.parser import HTMLParser
from typing import NamedTuple

from nmt import workbudget
from nmt.errors import NmtError

# Elements whose text is code, keyboard input, program output, a formula or a drawing, never prose; and ruby
# annotations (<rt>, <rp>, <rtc>: the reading of the base text, kept as written while the base text is translated in
# its sentence).
SKIP_TAGS = frozenset({"code", "pre", "script", "style", "kbd", "samp", "var", "math", "svg", "rt", "rp", "rtc"})
# Classes that say "do not translate": the Google/HTML convention, and Mastodon/Akkoma's mentions, hashtags and the
# pieces of shortened links (translating "bob" in "@bob" or a URL's hidden tail breaks them).
SKIP_CLASSES = frozenset({"notranslate", "mention", "hashtag", "h-card", "u-url", "invisible", "ellipsis"})
MAX_RESUMED = 32  # translate="yes" subtrees in kept regions in one another (no, yes, no, yes...); deeper: kept
# Elements without content: a start tag of one opens nothing that an end tag would close.
VOID_TAGS = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source",
                       "track", "wbr"})
INLINE_VOID = frozenset({"img", "wbr"})  # kept in a sentence as atoms; other void tags (br, hr...) end a paragraph

_COMMENT_END = re.compile(r"--!?\s*>")
_SECTION_END = re.compile(r"\]\s*>")
_SECTION = re.compile(r"<!\[([a-zA-Z][-_.a-zA-Z0-9]*)?")  # a marked section and its keyword
_SECTION_NAMES = frozenset({"temp", "cdata", "ignore", "include", "rcdata", "if", "else", "endif"})


class _Open(NamedTuple):
    """An open element: its tag, whether its text is kept (not translated), whether by a rule translate="yes" cannot
    lift (`hard`: code, a mention...), and how many translate="yes" subtrees inside kept regions it is in."""

    tag: str
    kept: bool = False
    hard: bool = False
    resumed: int = 0


_TOP = _Open("")


class _Scanner(HTMLParser):
    """Records each construct in document order as (source offset, kind, decoded text or tag); kind is "start",
    "end", "empty" (XHTML's "<tag/>"), "markup" (comments, declarations), "text", or "skip" for what is to be left
    alone (inside code, translate="no", ..., with the tags that open and close it); "resume" and "suspend" (no
    source of their own) mark where a translate="yes" subtree inside a kept region starts and ends."""

    def __init__(self, source: str, xml: bool = False) -> None:
        super().__init__(convert_charrefs=True)
        self._xml = xml
        self.events: list[tuple[int, str, str]] = []
        self._stack: list[_Open] = []  # the open elements
        self._open: Counter[str] = Counter()  # of the open elements' tags: a stray end tag is known in O(1)
        self._suspends = 0  # translate="yes" subtrees ended by the last end tag: marked before the next construct
        # getpos() is (line, column); this turns it into an offset in the source.
        self._line_starts = [0] + [m.end() for m in re.finditer("\n", source)]
        self._guard = _Terminators(source)

    def _offset(self) -> int:
        line, column = self.getpos()
        return self._line_starts[line - 1] + column

    def _markup(self, kind: str = "markup", tag: str = "") -> None:
        offset = self._offset()
        if self._suspends:
            self.flush(offset)
        self.events.append((offset, kind, tag))
        workbudget.current().tick()

    def flush(self, offset: int) -> None:
        """The suspends owed, at `offset` (the next construct's, or the source's end)."""
        self.events += [(offset, "suspend", "")] * self._suspends
        self._suspends = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = _element(tag, attrs, self._stack[-1] if self._stack else _TOP)
        if tag in VOID_TAGS:  # nothing inside: kept with its kept parent, whatever it says
            self._markup("skip" if element.kept or self._skipping() else "start", tag)
            return
        if self._skipping() and not element.kept:
            self._markup("resume")
        self._markup("skip" if element.kept else "start", tag)
        self._stack.append(element)
        self._open[tag] += 1

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        """In HTML "<br/>" opens nothing (void), but "<code/>" opens a <code> in browsers: the slash is ignored; in
        XHTML (`xml`) a "<tag/>" is an empty element, opening nothing."""
        if not self._xml:
            self.handle_starttag(tag, attrs)
        else:
            kept = self._skipping() or _element(tag, attrs, _TOP).kept
            self._markup("skip" if kept else "empty", tag)

    def handle_endtag(self, tag: str) -> None:
        # Close up to the matching open element, as browsers do with unclosed inner ones; a stray end tag closes none
        # (known from the count, not by a scan of the stack: the scan only passes elements it closes).
        if self._open[tag]:
            depth = len(self._stack) - 1
            while self._stack[depth].tag != tag:
                depth -= 1
            closing, parent = self._stack[depth], self._stack[depth - 1] if depth else _TOP
            # unclosed translate="yes" subtrees inside end before this tag, the one it closes after it
            self._suspends += sum(_resumes(e, p) for e, p in zip(self._stack[depth + 1:], self._stack[depth:]))
            self._markup("skip" if closing.kept else "end", tag)
            self._suspends += _resumes(closing, parent)
            self._open.subtract(element.tag for element in self._stack[depth:])
            del self._stack[depth:]
            return
        self._markup("skip" if self._skipping() else "end", tag)

    def handle_data(self, data: str) -> None:
        self._markup("skip" if self._skipping() else "text", data)

    def _skipping(self) -> bool:
        return bool(self._stack) and self._stack[-1].kept

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


def _element(tag: str, attrs: list[tuple[str, str | None]], parent: _Open) -> _Open:
    """An element opened under `parent`: kept if its tag or a class says so (SKIP_TAGS, SKIP_CLASSES: whatever is
    inside), or by the translate attribute as the HTML standard has it: "no" (or class notranslate) keeps it and its
    descendants, "yes" (or "") translates it again under a kept parent, any other value or none inherits. Past
    MAX_RESUMED translate="yes" subtrees in one another, the next is kept with its parent (bounded nesting)."""
    values: dict[str, str] = {}
    for name, value in attrs:  # the first of repeated attributes counts, as in browsers
        values.setdefault(name, value or "")
    classes = set(values.get("class", "").split())
    hard = parent.hard or local_name(tag) in SKIP_TAGS or not (SKIP_CLASSES - {"notranslate"}).isdisjoint(classes)
    mark = values.get("translate")
    mark = mark.strip().lower() if mark is not None else None
    if hard or mark == "no" or "notranslate" in classes:
        return _Open(tag, True, hard, parent.resumed)
    if parent.kept and mark in ("yes", "") and parent.resumed < MAX_RESUMED:
        return _Open(tag, False, False, parent.resumed + 1)
    return _Open(tag, parent.kept, False, parent.resumed)


def _resumes(element: _Open, parent: _Open) -> bool:
    """Whether `element` starts a translate="yes" subtree inside a kept region."""
    return parent.kept and not element.kept


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
        scanner.flush(len(source))
    except Exception:  # e.g. AssertionError on `<![x[`: the rest is kept as it is, untranslated
        scanner.flush(scanner._offset())
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

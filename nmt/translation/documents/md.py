"""Markdown documents: the prose of paragraphs, headings and table cells translated across their inline formatting,
every other byte kept.

The parser is markdown-it-py (CommonMark, with tables and strikethrough), maintained and already installed with rich;
its block tokens carry their source lines (`token.map`), its inline tokens the block's text with container prefixes
("> ", list indentation) removed. Each inline text is found back in its source lines, and its child tokens located
one after the other in it, so every token has its source bytes: emphasis, strong, strikethrough and links become
nmt.translation.documents.inline containers (their markup moves with their words; a link's target and title are its
closing markup, never translated), and inline code, images, inline HTML, autolinks and hard breaks atoms (kept as
written, among their words, with the punctuation written against them: nmt.translation.documents.atoms), as is a
container with no word in it ("[`xcolor`]"). A shortcut or collapsed reference link ("[text]", "[text][]") whose text is
translated is written as a full reference to its source label ("[Text][text]"): it finds its definition by its text,
which the translation changed. Code blocks, HTML blocks and YAML/TOML front matter have no inline text: untouched. A
block whose text cannot be found back in its source (tabs expanded by the parser) is kept as written. A soft line break
inside a translated sentence becomes a space: the paragraph renders the same; a hard break is an atom with a space
for the model after it (two words, not one). A rewritten paragraph stays one: a line of it that would open a block
("~~~~" of two strikethroughs, "* " after a hard break) has its mark escaped, a blank one a backslash break.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from markdown_it import MarkdownIt
from markdown_it.token import Token

from nmt.translation.documents import atoms
from nmt.translation.documents.atoms import Bit
from nmt.translation.documents.inline import Paragraph, Piece, Run
from nmt.translation.documents.inline import Path as RunPath
from nmt.translation.documents.txt import TranslateParagraphs, has_letter, read_text, write_text

_CONTAINERS = {"em_open": "em_close", "strong_open": "strong_close", "s_open": "s_close", "link_open": "link_close"}
_SOFTBREAK = re.compile(r"[ \t]*\n[ \t]*")
_HARDBREAK = re.compile(r"(?: {2,}|\\)\n[ \t]*")
_AUTOLINK = re.compile(r"<[^<>\s]*>")
_FRONT_MATTER = re.compile(r"(?:---|\+\+\+)\n(?:.*\n)*?(?:---|\.\.\.|\+\+\+)[ \t]*(?:\n|$)")
_SPECIAL = re.compile(r"([\\`*_\[\]<>|])")
# What opens a block at a line's start (a list item, heading, fence, thematic break, setext underline): in a rewritten
# paragraph, a line starting so (container markup, "~~" twice: a fence; a word after a hard break) is escaped
_BLOCK_START = re.compile(r"[ \t]*(?:#{1,6}(?=[ \t]|$)|[*+-](?=[ \t]|$)|\d{1,9}[.)](?=[ \t]|$)|`{3,}|~{3,}"
                          r"|(?:[*_-][ \t]*){3,}$|=+[ \t]*$)")
_LINE_PREFIX = re.compile(r"(?:[ \t]*>)*[ \t]*")  # a continuation line's block quote and list indentation


def parser() -> MarkdownIt:
    # text_join off: escapes and entities stay tokens of their own, whose markup is their source
    return MarkdownIt("commonmark").enable(["table", "strikethrough"]).disable("text_join")


@dataclass
class _Inline:
    """One block's inline text: [start, end) in the document, its runs, each run's source, containers' markup."""

    start: int
    end: int
    runs: list[Run] = field(default_factory=list)
    raws: list[str] = field(default_factory=list)
    opens: dict[int, str] = field(default_factory=dict)
    closes: dict[int, str] = field(default_factory=dict)
    # Shortcut and collapsed reference links ("[text]", "[text][]") resolve by their text: once it is translated,
    # their end is written as a full reference to the source's label, "[translated][text]", which still resolves.
    references: dict[int, str] = field(default_factory=dict)
    source: str = ""  # the block's source text, whose own lines are left as they are
    paragraph: bool = True  # a paragraph or setext heading: its first line could open a block (not "# ...", a cell)

    def write(self, pieces: list[Piece]) -> str:
        out: list[str] = []
        path: RunPath = ()
        changed = {k for piece in pieces if piece.source is None for k in piece.path}  # containers with new text
        for piece in [*pieces, Piece("", ())]:
            common = 0
            while common < min(len(path), len(piece.path)) and path[common] == piece.path[common]:
                common += 1
            out += [self.references[k] if k in changed and k in self.references else self.closes[k]  # type: ignore
                    for k in reversed(path[common:])] + [self.opens[k] for k in piece.path[common:]]  # type: ignore
            out.append(self._text(piece))
            path = piece.path
        return _guarded("".join(out), self.source, self.paragraph)

    def _text(self, piece: Piece) -> str:
        if piece.source is None:
            return _SPECIAL.sub(r"\\\1", piece.text)
        k, a, b = piece.source
        raw, text = self.raws[k], self.runs[k].text
        if raw == text or self.runs[k].atom:
            return raw[a:b] if not self.runs[k].atom else raw
        return raw if (a, b) == (0, len(text)) else _SPECIAL.sub(r"\\\1", text[a:b])


def _guarded(written: str, source: str, paragraph: bool) -> str:
    """`written` with each line that would open a block, or be blank and so end the paragraph, made text: its first
    mark escaped, a blank line's hard break written as a backslash; a line of the source as it is."""
    seen = {line[_LINE_PREFIX.match(line).end():] for line in source.split("\n")}  # type: ignore[union-attr]
    lines = written.split("\n")
    for i, line in enumerate(lines):
        at = _LINE_PREFIX.match(line).end() if i else 0  # type: ignore[union-attr]
        rest = line[at:]
        if rest in seen or (i == 0 and not paragraph):
            continue
        if not rest.strip() and 0 < i < len(lines) - 1:  # two hard breaks with no word between: "\\" marks one
            lines[i] = line + "\\"
        elif start := _BLOCK_START.match(rest):
            mark = at + len(start.group()) - len(start.group().lstrip(" \t"))
            mark += len(re.match(r"\d*", line[mark:]).group())  # type: ignore[union-attr]  # "1." -> "1\."
            lines[i] = line[:mark] + "\\" + line[mark:]
    return "\n".join(lines)


def translate(src: Path, dst: Path, translate_paragraphs: TranslateParagraphs) -> int:
    text, style = read_text(src)
    inlines = find_inlines(text)
    paragraphs = [Paragraph(i.runs, translatable=has_letter) for i in inlines]
    todo = [(i, p) for i, p in zip(inlines, paragraphs) if p.texts]
    rendered = translate_paragraphs([p for _, p in todo]) if todo else []
    out, at = [], 0
    for (inline, _), pieces in zip(todo, rendered):
        out += [text[at:inline.start], inline.write(pieces)]
        at = inline.end
    write_text(dst, "".join(out) + text[at:], style)
    return len(todo)


def find_inlines(text: str) -> list[_Inline]:
    """The inline texts of the document's paragraphs, headings and table cells that are found back in the source."""
    front = _FRONT_MATTER.match(text)
    lines = text.split("\n")
    skipped = front.group().count("\n") if front else 0
    parsed = "\n" * skipped + "\n".join(lines[skipped:])  # front matter as blank lines: line numbers unchanged
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)
    cursors: dict[int, int] = {}  # table rows: where the next cell's text is looked for
    out = []
    tokens = parser().parse(parsed)
    for parent, token in zip(tokens, tokens[1:]):
        if token.type != "inline" or token.map is None or not token.content.strip():
            continue
        cells = cursors if parent.type in ("th_open", "td_open") else None
        positions = _positions(token.content, token.map[0], lines, starts, cells)
        inline = _runs(token, text, positions) if positions else None
        if inline is not None:
            inline.source = text[inline.start:inline.end]
            inline.paragraph = parent.type == "paragraph_open" or parent.markup in ("=", "-")  # setext heading
            out.append(inline)
    return out


def _positions(content: str, first: int, lines: list[str], starts: list[int],
               cursors: dict[int, int] | None) -> list[int] | None:
    """The document offset of each character of `content` (and of its end), whose lines are the tails of source
    lines from `first` on (or, in a table row, the next cell's text of the row's line)."""
    positions: list[int] = []
    for i, part in enumerate(content.split("\n")):
        number = first + i
        if number >= len(lines):
            return None
        line = lines[number]
        if cursors is not None:
            column = line.find(part, cursors.get(number, 0))
            cursors[number] = column + len(part)
        else:
            column = line.rfind(part)
        if column < 0:
            return None
        positions += range(starts[number] + column, starts[number] + column + len(part))
        positions.append(starts[number] + len(line))  # the line end (after the last line: the text's end)
    positions[-1] = positions[-2] + 1 if len(positions) > 1 else positions[-1]
    return positions


def _runs(token: Token, text: str, positions: list[int]) -> _Inline | None:
    """The inline token's children as runs, each with its source bytes; None if one is not where it should be."""
    content = token.content
    spans = _locate(token.children or [], content)
    if spans is None:
        return None
    inline = _Inline(positions[0], positions[-1])
    bounds = [positions[a] for _, a in spans] + [positions[-1]]
    stack: list[tuple[int, int]] = []  # open containers: handle, where their text starts in `content`
    bits: list[Bit] = []
    wordless = _wordless(spans)
    k = 0
    while k < len(spans):
        (child, at), start, end = spans[k], bounds[k], bounds[k + 1]
        raw = text[start:end]
        index = len(bits) + len(inline.opens)
        k += 1
        if k - 1 in wordless:  # "[`xcolor`]": nothing to translate in it, so the whole link is an atom
            k = wordless[k - 1] + 1
            bits.append(Bit("atom", text[start:bounds[k]], text[start:bounds[k]], tuple(h for h, _ in stack)))
        elif child.type in _CONTAINERS:
            inline.opens[index] = raw
            stack.append((index, at + len(raw)))
        elif child.type in _CONTAINERS.values():
            handle, begin = stack.pop()
            inline.closes[handle] = raw
            if child.type == "link_close" and raw in ("]", "][]"):
                inline.references[handle] = f"][{' '.join(content[begin:at].split())}]"
        else:
            kind = child.type
            words = kind in ("text", "text_special", "softbreak")
            run_text = "\n" if kind == "softbreak" else child.content if words else raw
            bits.append(Bit("text" if words else "atom", raw, run_text, tuple(h for h, _ in stack)))
            if kind == "hardbreak":  # the words on either side are two words: a space for the model, written as ""
                bits.append(Bit("text", "", " ", tuple(h for h, _ in stack)))
    for bit in atoms.glue_separators(bits):  # an atom takes the punctuation written against it
        inline.runs.append(Run(bit.text if bit.kind == "text" else bit.raw, bit.group, atom=bit.kind == "atom"))
        inline.raws.append(bit.raw)
    return inline if not stack else None


def _wordless(spans: list[tuple[Token, int]]) -> dict[int, int]:
    """The outermost containers with no letter or digit in their text (a link around a code span): the index of
    each one's opening child -> that of its closing one."""
    out: dict[int, int] = {}
    stack: list[tuple[int, bool]] = []  # open containers: index, whether a word was seen in it
    for k, (child, _) in enumerate(spans):
        if child.type in _CONTAINERS:
            stack.append((k, False))
        elif child.type in _CONTAINERS.values() and stack:
            opened, word = stack.pop()
            if not word:  # it holds the wordless containers closed so far inside it: they go
                out = {start: end for start, end in out.items() if not opened < start < k}
                out[opened] = k
            if word and stack:
                stack[-1] = (stack[-1][0], True)
        elif child.type in ("text", "text_special") and any(c.isalnum() for c in child.content) and stack:
            stack[-1] = (stack[-1][0], True)
    return out


def _locate(children: list[Token], content: str) -> list[tuple[Token, int]] | None:
    """Each child's start in `content`, all of it covered in order (an autolink is one child)."""
    spans: list[tuple[Token, int]] = []
    at, k = 0, 0
    while k < len(children):
        child = children[k]
        if child.type == "text" and not child.content:  # the parser leaves some empty ones (before "**")
            k += 1
            continue
        if child.type == "link_open" and child.markup in ("autolink", "linkify"):
            match = _AUTOLINK.match(content, at)
            while children[k].type != "link_close":
                k += 1
            end = match.end() if match else -1
            child = Token("autolink", "", 0)
        else:
            end = _end(child, content, at)
        if end < 0:
            return None
        spans.append((child, at))
        at, k = end, k + 1
    return spans if at == len(content) else None


def _end(child: Token, content: str, at: int) -> int:
    """Where `child`, starting at `at`, ends in `content` (-1: not there)."""
    kind = child.type
    fixed = {"text": child.content, "text_special": child.markup, "html_inline": child.content,
             "link_open": "["}.get(kind, child.markup if kind in _CONTAINERS or kind in _CONTAINERS.values() else None)
    if kind == "link_close":
        return _after_brackets(content, at) if content.startswith("]", at) else -1
    if kind == "image":
        return _after_brackets(content, _bracket_end(content, at + 1)) if content.startswith("![", at) else -1
    if kind in ("softbreak", "hardbreak"):
        match = (_SOFTBREAK if kind == "softbreak" else _HARDBREAK).match(content, at)
        return match.end() if match else -1
    if kind == "code_inline":
        ticks = child.markup
        match = re.compile(rf"{ticks}(?!`)[\s\S]*?(?<!`){ticks}(?!`)").match(content, at)
        return match.end() if match else -1
    return at + len(fixed) if fixed is not None and fixed and content.startswith(fixed, at) else -1


def _bracket_end(content: str, at: int) -> int:
    """The index of the "]" closing the "[" at `at` (escapes and nesting counted; -1: none)."""
    depth, k = 0, at
    while 0 <= k < len(content):
        c = content[k]
        if c == "\\":
            k += 2
            continue
        depth += (c == "[") - (c == "]")
        if depth == 0:
            return k
        k += 1
    return -1


def _after_brackets(content: str, at: int) -> int:
    """After a link text's "]" at `at`: the end of its destination "(...)", reference "[...]" or of the "]"."""
    if at < 0:
        return -1
    k = at + 1
    if content.startswith("[", k):
        end = _bracket_end(content, k)
        return end + 1 if end >= 0 else -1
    if not content.startswith("(", k):
        return k
    depth, quote = 0, ""
    while k < len(content):
        c = content[k]
        if c == "\\":
            k += 2
            continue
        if quote:
            quote = "" if c == quote else quote
        elif c in "\"'" and depth == 1:
            quote = c
        else:
            depth += (c == "(") - (c == ")")
            if depth == 0:
                return k + 1
        k += 1
    return -1


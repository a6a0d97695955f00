"""Plain text documents (`--format txt`), and reading/writing the text formats' files.

A paragraph is a block of lines between blank lines; a line starting with a list marker ("- ", "* ", "• ", "1. ",
"2) ") starts an item of its own. A paragraph's lines are joined for translation, since hard-wrapped prose breaks
sentences across lines: its translation is wrapped again to the width of its longest source line (one line stays
one line), continuation lines indented as its second line was. Blank lines, indentation and list markers are kept.

Files are UTF-8: a BOM is kept, undecodable bytes are refused (one line naming the offset; nothing is guessed), and
line endings come back as the file had them (CRLF when most of its lines end so: a mixed file comes back uniform).
Subtitles (`legacy=True`) are also read as subtitle editors write them (Subtitle Edit, Aegisub, Windows Notepad):
a BOM names the encoding (UTF-8, UTF-16 LE/BE, UTF-32 LE/BE); without one, UTF-16 when NUL bytes fill every other
byte (the ASCII of numbers and timings; other NULs: a binary file, refused), else UTF-8 if the bytes decode as UTF-8
(a legacy file with accents almost never does), else Windows-1252 (what "ANSI" is on Western Windows, and a superset
of Latin-1's printable characters). They are written back in the encoding they came in, BOM kept; a translation
that encoding cannot hold (Czech or Hungarian from a Windows-1252 file) is written as UTF-8 with a BOM instead, which
players and editors recognise, with a warning (no "?" written into a subtitle, and no translation lost).
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from nmt import workbudget
from nmt.errors import NmtError
from nmt.io import atomic_write
from nmt.log import console
from nmt.translation.documents.inline import Paragraph, Piece, Run

TranslateParagraphs = Callable[[list[Paragraph]], list[list[Piece]]]
BOM = "\ufeff"
# Longest first: UTF-32 LE's BOM starts with UTF-16 LE's.
_BOMS = ((b"\xff\xfe\x00\x00", "utf-32-le"), (b"\x00\x00\xfe\xff", "utf-32-be"), (b"\xef\xbb\xbf", "utf-8"),
         (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"))
LEGACY = "cp1252"
_MARKER = re.compile(r"[ \t]*(?:[-*+•–]|\d{1,3}[.)])[ \t]+(?=\S)")
_INDENT = re.compile(r"[ \t]*")


@dataclass(frozen=True)
class TextStyle:
    """How a text file was written: a BOM, the line ending its text was normalized from, its encoding."""

    bom: bool = False
    newline: str = "\n"
    encoding: str = "utf-8"


def read_text(src: Path, normalize: bool = True, legacy: bool = False) -> tuple[str, TextStyle]:
    """The file's text (BOM removed; with `normalize`, line endings as "\\n") and how to write it back. UTF-8, or
    with `legacy` the encodings of the module docstring's rule."""
    data = src.read_bytes()
    encoding = detect_encoding(src, data) if legacy else "utf-8"
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as e:
        what = "UTF-8" if encoding == "utf-8" and not legacy else encoding.upper()
        raise NmtError(f"{src}: not {what} text (byte {data[e.start]:#04x} at offset {e.start}); save it as UTF-8 "
                       "first") from None
    bom = text.startswith(BOM)
    text = text.removeprefix(BOM)
    crlf = normalize and text.count("\r\n") * 2 > text.count("\n")
    if normalize:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text, TextStyle(bom, "\r\n" if crlf else "\n", encoding)


def detect_encoding(src: Path, data: bytes) -> str:
    """The encoding of a legacy text file (the rule of the module docstring); binary data is refused."""
    for mark, encoding in _BOMS:
        if data.startswith(mark):
            return encoding
    if 0 in data:  # NULs (valid UTF-8, but in no text file): UTF-16's high bytes, or a binary file
        even, odd = data[0::2].count(0), data[1::2].count(0)
        if len(data) % 2 == 0 and min(even, odd) == 0 and max(even, odd) * 3 >= len(data) // 2:
            return "utf-16-le" if odd else "utf-16-be"  # ASCII's zero byte after (LE) or before (BE) each one
        raise NmtError(f"{src}: not UTF-8, UTF-16 or Windows-1252 text (byte 0x00 at offset {data.index(0)}); "
                       "save it as UTF-8 first")
    try:
        data.decode("utf-8")
        return "utf-8"
    except UnicodeDecodeError:
        return LEGACY


def write_text(dst: Path, text: str, style: TextStyle) -> None:
    """`text` written as `style` says (atomically); where its encoding cannot hold the text, as UTF-8 with a BOM."""
    text = text.replace("\n", style.newline) if style.newline != "\n" else text
    try:
        data = ((BOM if style.bom else "") + text).encode(style.encoding)
    except UnicodeEncodeError as e:
        c = text[e.start - (1 if style.bom else 0)]
        console.print(f"[yellow]warning:[/yellow] {dst}: written as UTF-8 with a BOM, not {style.encoding} as its "
                      f"source: the translation has {c!r} (U+{ord(c):04X}), which {style.encoding} cannot hold")
        data = (BOM + text).encode("utf-8")
    atomic_write(dst, lambda f: f.write(data))


def has_letter(sentence: str) -> bool:
    """Whether a sentence is worth the model: digits and punctuation alone are kept as written."""
    return any(c.isalpha() for c in sentence)


def pieces_text(pieces: list[Piece]) -> str:
    return "".join(piece.text for piece in pieces)


@dataclass(slots=True)
class _Block:
    """A paragraph's lines: the prefix of its first line (indentation, list marker) and the offsets of the text after
    it (its lines are not held one by one: a text of millions of short lines stays one string)."""

    prefix: str
    start: int
    end: int
    indent: str  # of continuation lines when wrapped again
    width: int  # its longest line, prefix included
    lines: int = 1


CHUNK = 256  # paragraphs built, translated and rendered at once


def translate(src: Path, dst: Path, translate_paragraphs: TranslateParagraphs) -> int:
    text, style = read_text(src)
    parts = _parse(text)
    blocks = [p for p in parts if isinstance(p, _Block)]
    rendered: dict[int, str] = {}
    budget = workbudget.current()
    for start in range(0, len(blocks), CHUNK):  # a chunk's Paragraphs at a time: memory follows the text
        budget.check()
        chunk = [(b, Paragraph([Run(text[b.start:b.end])], has_letter)) for b in blocks[start:start + CHUNK]]
        todo = [(b, p) for b, p in chunk if p.texts]
        done = translate_paragraphs([p for _, p in todo]) if todo else []
        rendered.update((id(b), pieces_text(pieces)) for (b, _), pieces in zip(todo, done, strict=True))
    out = []
    for part in parts:
        if isinstance(part, str):
            out.append(part)
            continue
        new = rendered.get(id(part))
        source = text[part.start:part.end]
        out.append(part.prefix + (source if new is None or new == source else _wrap(new, part)))
    write_text(dst, "".join(out), style)
    return len(rendered)


def _parse(text: str) -> list[str | _Block]:
    """The text as blocks and what lies between them (blank lines, line ends), in order."""
    parts: list[str | _Block] = []
    current: _Block | None = None
    budget, blocks = workbudget.current(), 0
    for start, stop, newline in _lines(text):
        budget.tick()
        line, end = text[start:stop], "\n" if newline else ""
        marker = _MARKER.match(line)
        if not line.strip():
            current = None
            parts.append(line + end)
            continue
        if current is not None and not marker:
            parts.pop()  # the line end before this line is inside the block
            current.end, current.width, current.lines = stop, max(current.width, len(line)), current.lines + 1
            if current.lines == 2:
                current.indent = _INDENT.match(line).group()  # type: ignore[union-attr]
        else:
            prefix = marker.group() if marker else _INDENT.match(line).group()  # type: ignore[union-attr]
            current = _Block(prefix, start + len(prefix), stop, " " * len(prefix), len(line))
            parts.append(current)
            blocks += 1
            if blocks > budget.limits["paragraphs"]:  # refused here, before millions of blocks fill memory
                _over(budget, blocks)
        if end:
            parts.append(end)
    return parts


def _lines(text: str) -> Iterator[tuple[int, int, bool]]:
    """(start, end, whether a line end follows) of each line of `text`, without a list of them all."""
    start = 0
    while (end := text.find("\n", start)) >= 0:
        yield start, end, True
        start = end + 1
    yield start, len(text), False


def _over(budget: workbudget.WorkBudget, n: int) -> None:
    """OverBudget for `n` paragraphs, in the budget's words, without counting them in it
    (nmt.translation.documents.inline counts the paragraphs it builds)."""
    workbudget.WorkBudget(budget.what, limits=dict(budget.limits)).charge("paragraphs", n)


def _wrap(translation: str, block: _Block) -> str:
    """A translated paragraph wrapped as its source was: one line, or lines as wide as its longest source line."""
    if block.lines == 1:
        return translation
    lines = textwrap.wrap(translation, width=max(block.width, 20), initial_indent=" " * len(block.prefix),
                          subsequent_indent=block.indent, break_long_words=False, break_on_hyphens=False)
    return "\n".join(lines)[len(block.prefix):]

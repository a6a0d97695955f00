"""Subtitles: SubRip (.srt) and WebVTT (.vtt). Only the cues' text is translated; numbering, identifiers, timings,
cue settings, the WEBVTT header and NOTE, STYLE and REGION blocks are kept byte for byte.

A small block parser rather than the `srt` or `webvtt-py` packages: both parse into objects and compose the file
again (renumbered, timings reformatted, VTT blocks dropped), while a block is just "lines up to and including the
one with -->, then text lines", which keeps every byte outside the text for free.

A cue is translated on its own, its text lines joined (a line starting with "-", a dialogue turn, starts a new
paragraph): each cue stays on screen with its own timing, so a sentence running over two cues is translated in two
parts, and overlapping cues are simply two cues. A translated cue is wrapped again into as many lines as it had.
Tags (<i>, <b>, <u>, <font ...>, VTT's <c.x>, <v Name>, <lang x>) are inline containers placed on the aligned
words (nmt.translation.documents.html_inline); an unclosed tag (<v Name>) and VTT timestamps (<00:01.000>) are atoms.
Files in UTF-16 or Windows-1252, as subtitle editors save them, are read and written back in their encoding
(nmt.translation.documents.txt.read_text's legacy rule).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator
from pathlib import Path

from nmt.errors import NmtError
from nmt.translation.documents.html_inline import HtmlParagraph, Token, text_tokens
from nmt.translation.documents.inline import Piece
from nmt.translation.documents.txt import TranslateParagraphs, read_text, write_text

_TAG = re.compile(r"<(/?)([a-zA-Z][a-zA-Z0-9]*)[^<>\n]*>|<\d[\d:.]*>")
_BLOCK_WORDS = ("WEBVTT", "NOTE", "STYLE", "REGION")
_DIALOGUE = re.compile(r"-[ \t]*(?=\S)")


def translate(src: Path, dst: Path, translate_paragraphs: TranslateParagraphs) -> int:
    text, style = read_text(src, legacy=True)  # UTF-16 and Windows-1252 too: subtitle editors write them
    vtt = src.suffix.lower() == ".vtt" or text.startswith("WEBVTT")
    if vtt and not re.match(r"WEBVTT(?:[ \t\r\n]|$)", text):
        raise NmtError(f"{src}: not a WebVTT file (it must start with WEBVTT)")
    blocks = re.split(r"(\n[ \t]*\n+)", text)  # separators kept at odd indices
    cues = [_Cue(block) for block in blocks[::2]]
    if text.strip() and not any(cue.timing for cue in cues):
        raise NmtError(f"{src}: no subtitle cues (lines with -->) found: not a {'WebVTT' if vtt else 'SubRip'} file")
    paragraphs = [p.paragraph for cue in cues for p in cue.paragraphs if p.paragraph is not None]
    rendered = iter(translate_paragraphs(paragraphs) if paragraphs else [])
    blocks[::2] = [cue.write(rendered) for cue in cues]
    write_text(dst, "".join(blocks), style)
    return len(paragraphs)


class _Cue:
    """A block: what is kept (up to and including the timing line), and its text lines as paragraphs."""

    def __init__(self, block: str):
        lines = block.split("\n")
        timing = next((k for k, line in enumerate(lines) if "-->" in line), None)
        self.timing = timing is not None and not block.lstrip().startswith(_BLOCK_WORDS)
        keep = timing + 1 if self.timing and timing is not None else len(lines)
        self.head = "\n".join(lines[:keep])
        self.lines = lines[keep:]
        self.tail = ""
        while self.lines and not self.lines[-1].strip():  # the file's last line end(s)
            self.tail = "\n" + self.lines.pop() + self.tail
        self.groups: list[tuple[str, list[str]]] = []  # (dialogue dash, lines after it)
        for line in self.lines:
            dash = _DIALOGUE.match(line)
            if not self.groups or dash:
                self.groups.append((dash.group() if dash else "", []))
            self.groups[-1][1].append(line[len(self.groups[-1][0]):] if len(self.groups[-1][1]) == 0 else line)
        self.paragraphs = [HtmlParagraph(_tokens("\n".join(group))) for _, group in self.groups]

    def write(self, rendered: Iterator[list[Piece]]) -> str:
        if not self.lines:
            return self.head + self.tail
        texts = []
        for (dash, group), paragraph in zip(self.groups, self.paragraphs):
            source = "\n".join(group)
            new = paragraph.write(next(rendered)) if paragraph.paragraph is not None else source
            texts.append(dash + (new if new == source else _rewrap(new, len(group))))
        return self.head + "\n" + "\n".join(texts) + self.tail


def _tokens(text: str) -> list[Token]:
    """A cue's text as tokens: tags open and close containers, timestamps are atoms."""
    out: list[Token] = []
    position = 0
    for match in _TAG.finditer(text):
        if match.start() > position:
            out += text_tokens(text[position:match.start()])
        if match.group(2):
            out.append(Token("close" if match.group(1) else "open", match.group(), match.group(2).lower()))
        else:
            out.append(Token("atom", match.group()))
        position = match.end()
    return out + (text_tokens(text[position:]) if position < len(text) else [])


def _rewrap(text: str, lines: int) -> str:
    """A translated cue in `lines` lines of about equal length, broken at spaces outside tags: each break at the
    free space nearest its target (the first of equals), after the previous break. One pass to find the spaces, a
    bisection per break (it was a scan of every space per break, each counting the tags before it: a 2,000-line cue
    took minutes)."""
    text = " ".join(text.split())
    spaces, depth = [], 0  # depth: '<' minus '>' so far
    for k, c in enumerate(text):
        depth += (c == "<") - (c == ">")
        if c == " " and depth == 0:
            spaces.append(k)
    breaks: list[int] = []
    start = 0  # the first space after the last break
    for n in range(1, lines):
        target = len(text) * n / lines
        at = bisect.bisect_left(spaces, target, start)
        near = [k for k in (at - 1, at) if start <= k < len(spaces)]
        if near:
            best = min(near, key=lambda k: abs(spaces[k] - target))
            breaks.append(spaces[best])
            start = best + 1
    out = list(text)
    for k in breaks:
        out[k] = "\n"
    return "".join(out)

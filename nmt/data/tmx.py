"""A TMX file as a stream of (source, target) pairs: `tmx_pairs`, what `nmt.data.corpus.read_pairs` reads a .tmx or
.tmx.gz file with. TMX (Translation Memory eXchange 1.4b; 1.1 read too) is what OPUS, Trados, OmegaT, memoQ and
Okapi write: a <tu> per translation unit, in it a <tuv xml:lang=".."> per language holding the text in a <seg>.

Why the standard library (xml.etree.iterparse) and no TMX package: the format is small XML, a few rules
below, and iterparse streams it; each <tu> is cleared and taken out of <body> once read, so memory stays bounded
however long the file (OPUS' TMX files run to gigabytes). translate-toolkit, the usual TMX library, would be a heavy
dependency for these few rules.

The rules:
- language: a <tuv>'s xml:lang (TMX 1.1: lang), compared as a BCP 47 range (RFC 4647 basic filtering) in any case,
  `_` read as `-`: data.src_lang `en` takes en, EN-US, en-GB...; `en-US` takes en-US only. An exact match wins over
  a regional one; among several regional ones, the first. A <tu> without both languages is skipped; how many were
  is one line on stderr once the file is read.
- text: the <seg>'s own text and that of its <hi> (highlighted text) and of any unknown element. The native codes of
  <bpt>, <ept>, <it>, <ph> and <ut> (the formatting a tool wrapped: `&lt;b&gt;`, `{0}`) are no text and go, with
  any <sub> (a sub-flow: a footnote's or an alt text's own text, not the sentence's). Each side is then cleaned as
  every corpus line is (nmt.text.clean_text: line breaks become spaces, controls go, the ends are stripped), and a
  run of spaces (a segment's line breaks and indentation, the gap a dropped code leaves) becomes one space.
- safety: a DOCTYPE that declares an entity is refused, read up to the root element before the units are: TMX needs
  none, an internal entity can expand a few bytes into gigabytes (billion laughs) and an external one can name any
  file. Expat, the parser under ElementTree, fetches no external DTD (OmegaT's `<!DOCTYPE tmx SYSTEM "tmx11.dtd">`
  is fine).
- errors: a file that is not well-formed XML is a one-line NmtError naming the file and the line; so is one whose
  root element is not <tmx>, or a .gz that is no gzip file.
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO
from xml.etree.ElementTree import Element, ParseError, iterparse
from xml.parsers import expat

from nmt.errors import NmtError, first_line
from nmt.text import clean_text

SUFFIXES = (".tmx", ".tmx.gz")
XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"
CODES = frozenset({"bpt", "ept", "it", "ph", "ut", "sub"})  # inline elements whose content is not the sentence's
_SPACES = re.compile(" {2,}")
_READ_ERRORS = (OSError, EOFError, zlib.error)  # a truncated or broken .gz among them


def is_tmx(path: Path) -> bool:
    """A .tmx or .tmx.gz file name (any case)."""
    return path.name.lower().endswith(SUFFIXES)


def open_tmx(path: Path) -> IO[bytes]:
    """The file's bytes, gunzipped as they are read when the name ends in .gz."""
    return gzip.open(path, "rb") if path.name.lower().endswith(".gz") else open(path, "rb")


def tmx_pairs(path: Path, src_lang: str, tgt_lang: str) -> Iterator[tuple[str, str]]:
    """Stream the cleaned (source, target) text of each <tu> that has both languages (see the module docstring)."""
    refuse_entities(path)
    wanted = language_tag(src_lang), language_tag(tgt_lang)
    units = skipped = 0
    for tu in translation_units(path):
        units += 1
        segs = pick_segments(tu, *wanted)
        if segs is None:
            skipped += 1
        else:
            yield segment_text(segs[0]), segment_text(segs[1])
    if skipped:  # nmt.log imported here: it brings torch, which reading a corpus does not need
        from nmt.log import console

        console.print(f"{path}: skipped {skipped:,} of {units:,} translation units that lack {src_lang} or "
                      f"{tgt_lang}", markup=False, highlight=False)


def translation_units(path: Path) -> Iterator[Element]:
    """Each complete <tu> of the file, in order. Once the caller asks for the next one, the last is cleared and taken
    out of its parent (<body>), so the tree iterparse builds never holds more than one unit."""
    parent: Element | None = None
    try:
        with open_tmx(path) as f:
            for event, elem in iterparse(f, ("start", "end")):
                if event == "start":
                    if parent is None and elem.tag != "tmx":
                        raise NmtError(f"{path} is not a TMX file: its root element is <{elem.tag}>, not <tmx>")
                    if parent is None or elem.tag == "body":
                        parent = elem
                elif elem.tag == "tu":
                    yield elem
                    elem.clear()
                    if parent is not None:
                        parent.clear()
    except ParseError as e:
        line, column = e.position
        reason = str(e).partition(": line ")[0]
        raise NmtError(f"{path}:{line}: not well-formed XML ({reason}, column {column + 1})") from None
    except _READ_ERRORS as e:
        raise NmtError(f"{path}: cannot read: {first_line(e)}") from None


def language_tag(code: str) -> str:
    """A language code as TMX files are compared with it: lower case, `-` between subtags."""
    return code.strip().replace("_", "-").lower()


def pick_segments(tu: Element, src: str, tgt: str) -> tuple[Element, Element] | None:
    """The <seg> of the source's and of the target's <tuv> (tags from `language_tag`), or None where the unit lacks
    either (or only one <tuv> would serve both sides). Exact tag first, else the first regional one."""
    best: dict[str, tuple[int, Element]] = {}
    for tuv in tu:  # not iterfind: its path machinery is slow, and <tuv>s are children of <tu>
        if tuv.tag != "tuv":
            continue
        lang = tuv.get(XML_LANG) or tuv.get("lang")
        seg = tuv.find("seg")
        if lang is None or seg is None:
            continue
        lang = language_tag(lang)
        for want in (src, tgt):
            rank = 2 if lang == want else 1 if lang.startswith(want + "-") else 0
            if rank > best.get(want, (0, seg))[0]:
                best[want] = rank, seg
    if src not in best or tgt not in best or best[src][1] is best[tgt][1]:
        return None
    return best[src][1], best[tgt][1]


def segment_text(seg: Element) -> str:
    """A <seg>'s text without its inline codes, cleaned as a corpus line (see the module docstring)."""
    if len(seg) == 0:  # no inline markup, the common case
        text = clean_text(seg.text or "")
    else:
        parts: list[str] = []
        _collect_text(seg, parts)
        text = clean_text("".join(parts))
    return _SPACES.sub(" ", text) if "  " in text else text


def _collect_text(elem: Element, parts: list[str]) -> None:
    if elem.text:
        parts.append(elem.text)
    for child in elem:
        if child.tag not in CODES:
            _collect_text(child, parts)
        if child.tail:  # the text after a code is the sentence's
            parts.append(child.tail)


class _RootReached(Exception):
    """The prolog is over: no entity can be declared after it."""


def refuse_entities(path: Path) -> None:
    """A one-line NmtError where the file's DOCTYPE declares an entity (see the module docstring). Reads the file up
    to its root element only; malformed XML is left to the reading pass, which names its line."""
    parser = expat.ParserCreate()

    def declared(name: str, is_parameter: int, *_: object) -> None:
        shown = f"%{name}" if is_parameter else f"&{name};"
        raise NmtError(f"{path}:{parser.CurrentLineNumber}: the DOCTYPE declares the entity {shown}, refused: TMX "
                       "needs none, and an entity can expand into gigabytes or name another file")

    def root(*_: object) -> None:
        raise _RootReached

    parser.EntityDeclHandler = declared
    parser.StartElementHandler = root
    try:
        with open_tmx(path) as f:
            while chunk := f.read(1 << 16):
                parser.Parse(chunk, False)
    except (_RootReached, expat.ExpatError, ValueError):  # ValueError: an encoding expat cannot read
        return
    except _READ_ERRORS as e:
        raise NmtError(f"{path}: cannot read: {first_line(e)}") from None

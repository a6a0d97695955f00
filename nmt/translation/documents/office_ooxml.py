"""Office Open XML paragraphs (docx's w:p, DrawingML's a:p in pptx) as nmt.translation.documents.inline runs, and
written back.

Worked on the XML parts with lxml rather than through python-docx / python-pptx: their APIs reach neither
footnotes, endnotes nor comments, and saving through them re-serializes every part they loaded; here only the
paragraphs whose text changed are rebuilt, every other byte of a part stays, and other parts are copied as they are.

A paragraph's runs: each w:t / a:t of a run is text whose container is its run's properties (rPr): consecutive runs
with equal rPr (Word splits runs for revision ids) are one container, their handle ("r", n); the rPr covering most
of the paragraph's text is its base (no container: the words the placement leaves outside every span take it), as
plain text is in HTML. A docx hyperlink is a container ("a", n) around its runs. Anything else is an atom, kept as
it is at its anchored place: a run's other children (tab, break, drawing, footnote reference: written in a run of
their own with a copy of the rPr), the runs of a complex field from its begin to its end (fields are left alone),
and other paragraph children (bookmarks, a:fld, a:br, w:fldSimple, tracked changes w:ins/w:del, content controls).
Writing: a text piece becomes a run with a copy of its container's rPr (consecutive pieces of one container, one
run), pieces of a link go into a copy of the link element; a paragraph whose pieces are all source copies is left
untouched."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from lxml import etree

from nmt import workbudget
from nmt.translation.documents.inline import Paragraph, Piece, Run
from nmt.translation.documents.safezip import open_zip, removed_on_error

TranslateParagraphs = Callable[[list[Paragraph]], list[list[Piece]]]
ATOM_TEXT = "\ufffc"  # an atom's text: never sent to the model
XML_SPACE = "{http://www.w3.org/XML/1998/namespace}space"


@dataclass(frozen=True)
class Dialect:
    """The tag names of one vocabulary (namespace URI and local names)."""

    ns: str
    link: str | None = None  # a container element around runs (w:hyperlink)
    keep_last: frozenset[str] = frozenset()  # paragraph children kept at its end (a:endParaRPr)
    fields: bool = False  # w:fldChar begin/end bracket runs to keep (docx complex fields)
    preserve_space: bool = False  # w:t needs xml:space="preserve" to keep edge spaces

    def tag(self, local: str) -> str:
        return f"{{{self.ns}}}{local}"


def local(el: etree._Element) -> str:
    return etree.QName(el).localname if isinstance(el.tag, str) else ""


@dataclass
class _Source:
    """Where a run came from: a text element's run properties, or an atom's element (`wrap`: re-wrap it in a run
    with these run properties, for a run's own child)."""

    rpr: etree._Element | None = None
    atom: etree._Element | None = None
    wrap: bool = False


class OoxmlParagraph:
    """One w:p / a:p: `paragraph` to translate; `write(pieces)` puts the rendered pieces back."""

    def __init__(self, p: etree._Element, d: Dialect, translatable: Callable[[str], bool] = lambda t: True):
        self.p, self.d = p, d
        self._runs: list[tuple[str, tuple[object, ...], bytes | None, bool]] = []  # text, outer path, rPr key, atom
        self._sources: list[_Source] = []
        self._elements: dict[object, etree._Element] = {}  # a container's element (range: its start marker)
        self._ends: dict[object, etree._Element] = {}  # a range's end marker
        self._field = 0
        children = list(p)
        self.head = [c for c in children[:1] if local(c) == "pPr"]
        self.tail = [c for c in children if local(c) in d.keep_last]
        body = [c for c in children if c not in self.head and c not in self.tail]
        ranges = _ranges(body, d)
        outer: list[object] = []
        for k, child in enumerate(body):
            if k in ranges and ranges[k][0] == "start":
                outer.append(("c", k))
                self._elements[("c", k)], self._ends[("c", k)] = child, body[ranges[k][1]]
            elif k in ranges:
                outer.pop()
            else:
                self._scan(child, tuple(outer))
        self.paragraph = Paragraph(self._paths(), translatable)

    def _scan(self, el: etree._Element, outer: tuple[object, ...]) -> None:
        name = local(el)
        if self.d.link and name == self.d.link and not any(h[0] == "a" for h in outer):  # type: ignore[index]
            handle = ("a", len(self._elements))
            self._elements[handle] = el
            for child in el:
                self._scan(child, outer + (handle,))
        elif name == "r" and not self._in_field(el):
            rpr = el.find(self.d.tag("rPr"))
            key = b"" if rpr is None else etree.tostring(rpr)
            for child in el:
                if child is rpr:
                    continue
                if local(child) == "t":
                    self._add(child.text or "", outer, key, _Source(rpr=rpr))
                else:
                    self._add(ATOM_TEXT, outer, key, _Source(rpr=rpr, atom=child, wrap=True), atom=True)
        else:
            self._add(ATOM_TEXT, outer, None, _Source(atom=el), atom=True)

    def _in_field(self, r: etree._Element) -> bool:
        """Whether a run belongs to a complex field (from its begin fldChar to its end): kept as it is."""
        if not self.d.fields:
            return False
        inside = self._field > 0
        for char in r.iter(self.d.tag("fldChar")):
            kind = char.get(self.d.tag("fldCharType"))
            self._field += 1 if kind == "begin" else -1 if kind == "end" else 0
            inside = True
        self._field = max(self._field, 0)
        return inside

    def _add(self, text: str, outer: tuple[object, ...], key: bytes | None, source: _Source,
             atom: bool = False) -> None:
        self._runs.append((text, outer, key, atom))
        self._sources.append(source)

    def _paths(self) -> list[Run]:
        """Runs with paths: ranges and link, then ("r", group) for consecutive runs of equal rPr, none for the
        base."""
        weight: dict[bytes, int] = {}
        for text, outer, key, atom in self._runs:
            if not atom and not outer and key is not None:
                weight[key] = weight.get(key, 0) + len(text)
        self.base = max(weight, key=lambda k: weight[k]) if weight else b""
        self._rpr: dict[object, etree._Element | None] = {}
        runs, previous, group = [], None, -1
        for (text, outer, key, atom), source in zip(self._runs, self._sources):
            path: tuple[object, ...] = outer
            if key is not None and (outer or key != self.base):
                if (outer, key) != previous:
                    group += 1
                path += (("r", group),)
                self._rpr[("r", group)] = source.rpr
                for handle in outer:
                    self._rpr.setdefault(handle, source.rpr)  # text between a container's runs
            elif key is not None:
                self._rpr[()] = source.rpr
            previous = (outer, key)
            runs.append(Run(text, path, atom))
        return runs

    def write(self, pieces: list[Piece]) -> None:
        """The paragraph's body rebuilt from `pieces` (in target order); untouched if all are source copies."""
        if all(p.source is not None for p in pieces):
            return
        for child in list(self.p):
            self.p.remove(child)
        self.p.extend(self.head)
        open_: list[object] = []  # the containers entered (ranges, link)
        parent = self.p
        for piece in _single_spaces(pieces):
            el = self._element(piece)
            if el is None:
                continue
            outer = [h for h in piece.path if h[0] != "r"]  # type: ignore[index]
            common = 0
            while common < min(len(open_), len(outer)) and open_[common] == outer[common]:
                common += 1
            for handle in reversed(open_[common:]):
                parent = self.p
                if handle[0] == "c":  # type: ignore[index]
                    self.p.append(self._ends[handle])
            for handle in outer[common:]:
                source = self._elements[handle]
                if handle[0] == "c":  # type: ignore[index]
                    self.p.append(source)
                else:
                    parent = etree.SubElement(self.p, source.tag, dict(source.attrib), nsmap=source.nsmap)
            open_ = outer
            parent.append(el)
        for handle in reversed(open_):
            if handle[0] == "c":  # type: ignore[index]
                self.p.append(self._ends[handle])
        self.p.extend(self.tail)
        self._merge()

    def _element(self, piece: Piece) -> etree._Element | None:
        """A piece as an element: an atom's own element, or a new run holding the text."""
        if piece.source is not None and self.paragraph.runs[piece.source[0]].atom:
            source = self._sources[piece.source[0]]
            if not source.wrap:
                return source.atom
            return self._run(source.rpr, [source.atom])  # type: ignore[list-item]
        if not piece.text:
            return None
        t = etree.Element(self.d.tag("t"))
        t.text = piece.text
        if self.d.preserve_space and piece.text != piece.text.strip():
            t.set(XML_SPACE, "preserve")
        return self._run(self._rpr.get(piece.path[-1] if piece.path else (), None), [t])

    def _run(self, rpr: etree._Element | None, content: list[etree._Element]) -> etree._Element:
        r = etree.Element(self.d.tag("r"))
        r.extend(([copy.deepcopy(rpr)] if rpr is not None else []) + content)
        r.set("_nmt_text", "1")  # a mark for _merge, removed there
        return r

    def _merge(self) -> None:
        """Consecutive text runs of equal rPr, one run (the placement emits words and spaces apart)."""
        for parent in [self.p, *self.p.iter(self.d.tag(self.d.link or "_"))]:
            previous = None
            for r in list(parent):
                t = r.find(self.d.tag("t")) if r.get("_nmt_text") else None
                if t is not None and previous is not None and _same_rpr(previous, r, self.d):
                    last = previous.find(self.d.tag("t"))
                    last.text = (last.text or "") + (t.text or "")
                    if self.d.preserve_space:
                        last.attrib.pop(XML_SPACE, None)
                        if last.text != last.text.strip():
                            last.set(XML_SPACE, "preserve")
                    parent.remove(r)
                    continue
                previous = r if t is not None and len(r) == len(r.findall(self.d.tag("rPr"))) + 1 else None
        for r in self.p.iter(self.d.tag("r")):
            r.attrib.pop("_nmt_text", None)


def _single_spaces(pieces: list[Piece]) -> list[Piece]:
    """Without a new whitespace piece that follows whitespace across atoms (an atom anchored between two words
    brings the space it had on the word's side, the words their own separator)."""
    out, spaced = [], True
    for piece in pieces:
        if piece.source is None and piece.text and not piece.text.strip() and spaced:
            continue
        out.append(piece)
        if piece.text != ATOM_TEXT and piece.text:
            spaced = piece.text[-1].isspace()
    return out


def _ranges(body: list[etree._Element], d: Dialect) -> dict[int, tuple[str, int]]:
    """Comment and bookmark ranges (start and end markers, by id, among the paragraph's children) that are well
    nested and hold a run: index -> ("start", end index) / ("end", start index). Others stay atoms."""
    stack: list[tuple[str, str, int]] = []
    out: dict[int, tuple[str, int]] = {}
    for k, el in enumerate(body):
        name = local(el)
        kind = name[:-5] if name.endswith("Start") else name[:-3] if name.endswith("End") else ""
        if kind not in ("commentRange", "bookmark"):
            continue
        ident = el.get(d.tag("id"), "")
        if name.endswith("Start"):
            stack.append((kind, ident, k))
        elif stack and stack[-1][:2] == (kind, ident):
            start = stack.pop()[2]
            if k > start + 1:
                out[start], out[k] = ("start", k), ("end", start)
        else:
            stack = []  # crossing ranges: those open stay atoms
    return out


def _same_rpr(a: etree._Element, b: etree._Element, d: Dialect) -> bool:
    ra, rb = a.find(d.tag("rPr")), b.find(d.tag("rPr"))
    return (ra is None and rb is None) or (ra is not None and rb is not None and
                                           etree.tostring(ra) == etree.tostring(rb))


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


def translate_package(src: Path, dst: Path, kind: str, required: str, parts: re.Pattern, d: Dialect,
                      translate_paragraphs: TranslateParagraphs) -> int:
    """A docx or pptx `src` (`kind`, its main part `required`) translated into `dst`: the paragraphs of every part
    whose name matches `parts`, one part at a time as the output is written; the number of paragraphs translated."""
    count = 0

    def translated(name: str) -> bytes | None:
        nonlocal count
        if not parts.fullmatch(name):
            return None
        part = box.part(name)
        count += translate_elements(list(part.tree.getroot().iter(d.tag("p"))),
                                    lambda p: OoxmlParagraph(p, d, translatable), translate_paragraphs)
        return part.serialize()

    with removed_on_error(dst), open_zip(src, kind, required) as box:
        box.write(dst, translated)
    return count

"""One Office Open XML paragraph (docx's w:p, DrawingML's a:p in pptx) as nmt.translation.documents.inline runs, and
written back (nmt.translation.documents.office_ooxml reads and writes the parts).

A paragraph's runs: each w:t / a:t of a run is text whose container is its run's properties (rPr). Consecutive runs
whose rPr are equal once what is not formatting is left out (revision ids w:rsid*, w:lang, w:noProof; DrawingML's
lang, altLang, smtClean, smtId, err, dirty, noProof) are one container ("r", n): Word and PowerPoint split runs on
those, and a "." in a run of its own would be a word of its own. The rPr covering most of the paragraph's text is its
base (no container: the words the placement leaves outside every span take it), as plain text is in HTML.

Containers around runs (Dialect.wrappers: w:hyperlink, a tracked insertion or move w:ins / w:moveTo, a smart tag, a
custom XML element, a content control w:sdt, a simple field w:fldSimple) are translated as text inside a copy of
their element: the translated words aligned to an insertion are the insertion. Brackets (a complex field's result,
between its begin..separate runs and its end run; a bookmark or comment range holding runs) are containers ("c", n)
whose markers are written around the aligned target words; a field's instruction is kept. Proofing marks (w:proofErr)
are dropped from a rebuilt paragraph (they marked source words). Anything else is an atom, kept as it is at its
anchored place: a run's other children (tab, break, drawing, note reference: written in a run of their own with a copy
of the rPr), deletions (w:del, w:moveFrom: the text as it was), empty bookmarks, a:fld, a:br, and the text of a run
in a character style of code (Dialect.code_styles: pandoc's VerbatimChar, Word's HTML Code), as inline code is kept
in Markdown and HTML.
Writing: a text piece becomes a run with a copy of its container's rPr (consecutive pieces of one container, one
run); a paragraph whose pieces are all source copies is left untouched."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

from lxml import etree

from nmt.translation.documents.inline import Paragraph, Piece, Run
from nmt.translation.documents.ooxml_brackets import brackets, local
from nmt.translation.documents.ooxml_marks import Marks

ATOM_TEXT = "\ufffc"  # an atom's text: never sent to the model
XML_SPACE = "{http://www.w3.org/XML/1998/namespace}space"
BREAKS = {"tab": "\t", "ptab": "\t", "br": "\n", "cr": "\n"}  # what an atom shows, for the spacing around it
INVISIBLE = frozenset({"bookmarkStart", "bookmarkEnd", "commentRangeStart", "commentRangeEnd", "proofErr", "del",
                       "moveFrom", "moveFromRangeStart", "moveFromRangeEnd", "moveToRangeStart", "moveToRangeEnd",
                       "permStart", "permEnd", "lastRenderedPageBreak", "fldChar", "instrText", "endParaRPr",
                       "commentReference", "annotationRef"})  # a comment's anchor: a mark in the margin, not text


@dataclass(frozen=True)
class Dialect:
    """The tag names of one vocabulary (namespace URI and local names)."""

    ns: str
    wrappers: frozenset[str] = frozenset()  # elements around runs, copied around their translated words
    props: frozenset[str] = frozenset()  # a wrapper's property children, kept in its copy (w:sdtPr, w:smartTagPr)
    content: str = "sdtContent"  # a wrapper's child that holds its runs, when it has one (w:sdt)
    keep_last: frozenset[str] = frozenset()  # paragraph children kept at its end (a:endParaRPr)
    fields: bool = False  # w:fldChar begin/separate/end brackets (docx complex fields)
    preserve_space: bool = False  # w:t needs xml:space="preserve" to keep edge spaces
    dropped: frozenset[str] = frozenset()  # paragraph children left out of a rebuilt paragraph (w:proofErr)
    not_formatting: frozenset[str] = frozenset()  # rPr attributes and children that do not change the look
    language: str = ""  # the rPr child whose attributes name the language (w:lang); "": the rPr's own (a:rPr/@lang)
    revisions: frozenset[str] = frozenset()  # revision marks, each with an id of its own (w:ins, w:rPrChange...)
    code_styles: frozenset[str] = frozenset()  # character styles of code (lower case): their runs' text is atoms

    def tag(self, local: str) -> str:
        return f"{{{self.ns}}}{local}"


def rpr_key(rpr: etree._Element | None, d: Dialect) -> bytes:
    """The run properties as bytes, less what is not formatting (revision ids, language, proofing marks)."""
    if rpr is None:
        return b""
    clean = copy.deepcopy(rpr)
    for el in list(clean.iter()):
        if el is not clean and local(el) in d.not_formatting:
            el.getparent().remove(el)
            continue
        for name in list(el.attrib):
            short = etree.QName(name).localname
            if short in d.not_formatting or short.startswith("rsid"):
                del el.attrib[name]
    return etree.tostring(clean)


def visible(el: etree._Element, d: Dialect) -> str:
    """What a reader sees of an atom, for the spacing around it: a tab or break, its text, or an object."""
    name = local(el)
    if name in BREAKS:
        return BREAKS[name]
    if name in INVISIBLE:
        return ""
    return "".join(t.text or "" for t in el.iter(d.tag("t"))) or ATOM_TEXT


@dataclass
class _Source:
    """Where a run came from: a text element's run properties, or an atom's element (`wrap`: re-wrap it in a run
    with these run properties, for a run's own child); `shows`: an atom's visible text."""

    rpr: etree._Element | None = None
    atom: etree._Element | None = None
    wrap: bool = False
    shows: str = ""


class OoxmlParagraph:
    """One w:p / a:p: `paragraph` to translate; `write(pieces)` puts the rendered pieces back."""

    def __init__(self, p: etree._Element, d: Dialect, translatable: Callable[[str], bool] = lambda t: True,
                 marks: Marks | None = None):
        """`marks`: the part's (nmt.translation.documents.ooxml_marks): the target language written on translated
        runs, fresh ids for copied revision marks; None: neither."""
        self.p, self.d, self.marks = p, d, marks
        self._runs: list[tuple[str, tuple[object, ...], bytes | None, bool]] = []  # text, outer path, rPr key, atom
        self._sources: list[_Source] = []
        self._wrappers: dict[object, etree._Element] = {}  # ("w", n): the element copied around its words
        self._marks: dict[object, tuple[list[etree._Element], list[etree._Element]]] = {}  # ("c", n): start, end
        self._open_fields: list[bool] = []  # fields begun in this paragraph, no bracket: past their separate
        children = list(p)
        self.head = [c for c in children[:1] if local(c) == "pPr"]
        self.tail = [c for c in children if local(c) in d.keep_last]
        self._scan_list([c for c in children if c not in self.head and c not in self.tail], ())
        runs = self._paths()
        self.paragraph = Paragraph(runs, translatable, groups=self._groups(runs))

    def _scan_list(self, children: list[etree._Element], outer: tuple[object, ...]) -> None:
        """Siblings: brackets (fields, ranges) become containers around what they hold, the rest is scanned."""
        found = brackets(children, self.d)
        k = 0
        while k < len(children):
            if k in found:
                last_start, end = found[k]
                handle = ("c", len(self._marks))
                self._marks[handle] = children[k:last_start + 1], [children[end]]
                held = len(self._runs)
                self._scan_list(children[last_start + 1:end], outer + (handle,))
                if len(self._runs) == held:  # nothing left inside (proofing marks): the whole bracket is kept
                    del self._marks[handle]
                    for el in children[k:end + 1]:
                        self._add(ATOM_TEXT, outer, None, _Source(atom=el, shows=visible(el, self.d)), atom=True)
                k = end + 1
            else:
                self._scan(children[k], outer)
                k += 1

    def _scan(self, el: etree._Element, outer: tuple[object, ...]) -> None:
        name = local(el)
        nested_link = name == "hyperlink" and any(local(self._wrappers[h]) == "hyperlink"
                                                  for h in outer if h in self._wrappers)
        if name in self.d.wrappers and not nested_link:
            handle = ("w", len(self._wrappers))
            self._wrappers[handle] = el
            holder = el.find(self.d.tag(self.d.content))
            held = len(self._runs)
            self._scan_list([c for c in (el if holder is None else holder) if local(c) not in self.d.props],
                            outer + (handle,))
            if len(self._runs) == held:  # an empty field, smart tag or control: kept as it is
                del self._wrappers[handle]
                self._add(ATOM_TEXT, outer, None, _Source(atom=el, shows=visible(el, self.d)), atom=True)
        elif name in self.d.dropped:
            return
        elif name == "r" and not self._in_field(el):
            rpr = el.find(self.d.tag("rPr"))
            key = rpr_key(rpr, self.d)
            style = rpr.find(self.d.tag("rStyle")) if rpr is not None else None
            code = style is not None and style.get(self.d.tag("val"), "").lower() in self.d.code_styles
            for child in el:
                if child is rpr:
                    continue
                if local(child) == "t" and not code:
                    self._add(child.text or "", outer, key, _Source(rpr=rpr))
                else:
                    self._add(ATOM_TEXT, outer, key, _Source(rpr, child, True, visible(child, self.d)), atom=True)
        else:
            self._add(ATOM_TEXT, outer, None, _Source(atom=el, shows=visible(el, self.d)), atom=True)

    def _in_field(self, r: etree._Element) -> bool:
        """Whether a run is a field's own (its fldChar runs, its instruction) in a field that is no bracket here
        (it spans paragraphs: a bibliography, a table of contents): kept as it is; its result's runs are text."""
        if not self.d.fields:
            return False
        chars = list(r.iter(self.d.tag("fldChar")))
        for char in chars:
            kind = char.get(self.d.tag("fldCharType"))
            if kind == "begin":
                self._open_fields.append(False)
            elif kind == "separate" and self._open_fields:
                self._open_fields[-1] = True
            elif kind == "end" and self._open_fields:
                self._open_fields.pop()
        return bool(chars) or not all(self._open_fields)  # an instruction: before its separate

    def _add(self, text: str, outer: tuple[object, ...], key: bytes | None, source: _Source,
             atom: bool = False) -> None:
        self._runs.append((text, outer, key, atom))
        self._sources.append(source)

    def _paths(self) -> list[Run]:
        """Runs with paths: wrappers and brackets, then ("r", group) for consecutive runs of equal rPr (less what is
        not formatting), none for the base."""
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
                self._rpr.setdefault(("r", group), source.rpr)
                for handle in outer:
                    self._rpr.setdefault(handle, source.rpr)  # text between a container's runs
            elif key is not None:
                self._rpr.setdefault((), source.rpr)
            previous = (outer, key)
            runs.append(Run(text, path, atom, atom and source.shows in ("\t", "\n")))  # a tab, a break: a space
        return runs

    def _groups(self, runs: list[Run]) -> list[object]:
        """Each run's group for the separators of atoms (nmt.translation.documents.atoms.glue_runs): its containers
        other than formatting (a link, an insertion, a field); None for an atom a reader does not see as text or an
        object (a bookmark, a deletion, a tab or break): the punctuation beside it stays with the words."""
        return [tuple(h for h in run.path if h[0] != "r") if not run.atom or source.shows.strip() else None  # type: ignore[index]
                for run, source in zip(runs, self._sources, strict=True)]

    def write(self, pieces: list[Piece]) -> None:
        """The paragraph's body rebuilt from `pieces` (in target order); untouched if all are source copies."""
        if all(p.source is not None for p in pieces):
            return
        ids = self.marks.ids(self.p) if self.marks is not None else None
        for child in list(self.p):
            self.p.remove(child)
        self.p.extend(self.head)
        stack: list[tuple[object, etree._Element]] = []  # the containers entered, each with where its content goes
        self._parents = [self.p]
        for piece in self._single_spaces(pieces):
            el = self._element(piece)
            if el is None:
                continue
            outer = [h for h in piece.path if h[0] != "r"]  # type: ignore[index]
            common = 0
            while common < min(len(stack), len(outer)) and stack[common][0] == outer[common]:
                common += 1
            while len(stack) > common:
                self._close(*stack.pop())
            for handle in outer[common:]:
                stack.append((handle, self._open(handle, stack[-1][1] if stack else self.p)))
            (stack[-1][1] if stack else self.p).append(el)
        while stack:
            self._close(*stack.pop())
        self.p.extend(self.tail)
        self._merge()
        if self.marks is not None:
            self.marks.rebuilt(self.p, ids)  # type: ignore[arg-type]

    def _open(self, handle: object, parent: etree._Element) -> etree._Element:
        """A container entered in `parent`: a bracket's start markers, or a copy of a wrapper (its properties
        kept); returns where its content goes."""
        if handle in self._marks:
            parent.extend(self._marks[handle][0])
            return parent
        source = self._wrappers[handle]
        wrapper = etree.SubElement(parent, source.tag, dict(source.attrib), nsmap=source.nsmap)
        wrapper.extend(copy.deepcopy(child) for child in source if local(child) in self.d.props)
        holder = source.find(self.d.tag(self.d.content))
        if holder is not None:  # w:sdtPr, w:sdtEndPr, then w:sdtContent: the schema's order
            wrapper = etree.SubElement(wrapper, holder.tag, dict(holder.attrib))
        self._parents.append(wrapper)
        return wrapper

    def _close(self, handle: object, parent: etree._Element) -> None:
        if handle in self._marks:
            parent.extend(self._marks[handle][1])

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
        r = self._run(self._rpr.get(piece.path[-1] if piece.path else (), None), [t])
        rpr = r.find(self.d.tag("rPr"))
        if piece.source is None and rpr is not None and self.marks is not None and self.marks.language is not None:
            self.marks.language.relabel(rpr, self.d)  # the model's words: the target language
        return r

    def _run(self, rpr: etree._Element | None, content: list[etree._Element]) -> etree._Element:
        r = etree.Element(self.d.tag("r"))
        r.extend(([copy.deepcopy(rpr)] if rpr is not None else []) + content)
        r.set("_nmt_text", "1")  # a mark for _merge, removed there
        return r

    def _merge(self) -> None:
        """Consecutive text runs of equal rPr, one run (the placement emits words and spaces apart)."""
        for parent in self._parents:
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

    def _single_spaces(self, pieces: list[Piece]) -> list[Piece]:
        """Without a new whitespace piece that follows whitespace across invisible atoms (a bookmark anchored
        between two words brings the space it had on the word's side, the words their own separator); an atom a
        reader sees (a smart tag's or field's text, a drawing) is not whitespace: the space after it stays."""
        out, spaced = [], True
        for piece in pieces:
            if piece.source is None and piece.text and not piece.text.strip() and spaced:
                continue
            out.append(piece)
            atom = piece.source is not None and self.paragraph.runs[piece.source[0]].atom
            shows = self._sources[piece.source[0]].shows if atom else piece.text  # type: ignore[index]
            if shows:
                spaced = shows[-1].isspace()
        return out


def _same_rpr(a: etree._Element, b: etree._Element, d: Dialect) -> bool:
    ra, rb = a.find(d.tag("rPr")), b.find(d.tag("rPr"))
    return (ra is None and rb is None) or (ra is not None and rb is not None and
                                           etree.tostring(ra) == etree.tostring(rb))

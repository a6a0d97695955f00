"""OpenDocument text .odt: every text:p and text:h translated by sentence across its inline formatting
(nmt.translation.documents.inline).

Worked on the ODF XML with lxml (odfpy, used by the tests to build and read documents, re-serializes the whole
document on save; here only the paragraphs whose text changed are rebuilt). Parts: content.xml (body, tables,
frames, lists) and the master pages of styles.xml (headers and footers). Containers: text:span (a style) and text:a
(a link), nested as written. Atoms, kept as they are in their place: spaces and tabs (text:s, text:tab), line
breaks, bookmarks, fields, frames, a span of inline code, and notes (text:note): a note's own paragraphs are
translated as paragraphs of their own, inside the note element, which moves with its anchor. Inline code is a span in
a style of code (nmt.translation.documents.odt_styles): one named for code or deriving from one, always; one whose
font is monospaced (LibreOffice's automatic T3 in Liberation Mono) only in a paragraph with other text: a paragraph
all in a monospaced font (a screenplay's Courier) is prose."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from lxml import etree

from nmt.translation.documents.inline import Paragraph, Piece, Run
from nmt.translation.documents.odt_styles import BY_FONT, BY_NAME, CODE_STYLES, StyleTable
from nmt.translation.documents.office_ooxml import (
    ATOM_TEXT,
    TranslateParagraphs,
    local,
    translatable,
    translate_elements,
)
from nmt.translation.documents.safezip import open_zip, removed_on_error

TEXT = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
OFFICE = "urn:oasis:names:tc:opendocument:xmlns:office:1.0"
CONTAINERS = frozenset({"span", "a"})
SPACES = frozenset({"line-break", "tab", "s"})  # atoms seen as whitespace: the words around them are two words
STYLE_NAME = f"{{{TEXT}}}style-name"
NAMED_CODE = dict.fromkeys(CODE_STYLES, BY_NAME)  # without a document's styles: the code styles by name


class OdfParagraph:
    """One text:p / text:h: `paragraph` to translate; `write(pieces)` puts the pieces back."""

    def __init__(self, p: etree._Element, translatable: Callable[[str], bool] = lambda t: True,
                 code: Mapping[str, str] = NAMED_CODE):
        """`code`: the styles of inline code (nmt.translation.documents.odt_styles.StyleTable.code)."""
        self.p = p
        self._runs: list[Run] = []
        self._atoms: dict[int, etree._Element] = {}
        self._containers: dict[object, etree._Element] = {}
        self._code = code
        self._by_font = _prose(p, code)  # a span in a monospaced font is code only among other text
        self._scan(p, ())
        groups = [run.path if not run.atom or _seen(self._atoms[k]) else None for k, run in enumerate(self._runs)]
        self.paragraph = Paragraph(self._runs, translatable, groups=groups)

    def _scan(self, el: etree._Element, path: tuple[object, ...]) -> None:
        self._text(el.text, path)
        for child in el:  # (comments, processing instructions and entity references are atoms: no QName)
            if _container(child) and "".join(child.itertext()) and not self._is_code(child):
                handle = (local(child), len(self._containers))
                self._containers[handle] = child
                self._scan(child, path + (handle,))
            else:
                self._atoms[len(self._runs)] = child
                seen_as_space = isinstance(child.tag, str) and local(child) in SPACES
                self._runs.append(Run(ATOM_TEXT, path, atom=True, space=seen_as_space))
            self._text(child.tail, path)

    def code_spans(self) -> list[etree._Element]:
        """The spans kept as inline code, in order (what bench/office_fixtures.py counts)."""
        return [atom for _, atom in sorted(self._atoms.items()) if _container(atom) and self._is_code(atom)
                and "".join(atom.itertext())]

    def _is_code(self, span: etree._Element) -> bool:
        kind = self._code.get(span.get(STYLE_NAME, ""))
        return kind is not None and (kind != BY_FONT or self._by_font)

    def _text(self, text: str | None, path: tuple[object, ...]) -> None:
        if text:
            self._runs.append(Run(text, path))

    def write(self, pieces: list[Piece]) -> None:
        """The paragraph's content rebuilt from `pieces`; untouched if all are source copies."""
        if all(p.source is not None for p in pieces):
            return
        for child in list(self.p):
            self.p.remove(child)
        self.p.text = None
        stack: list[tuple[object, etree._Element]] = []
        for piece in pieces:
            common = 0
            while common < min(len(stack), len(piece.path)) and stack[common][0] == piece.path[common]:
                common += 1
            del stack[common:]
            for handle in piece.path[common:]:
                source = self._containers[handle]
                parent = stack[-1][1] if stack else self.p
                stack.append((handle, etree.SubElement(parent, source.tag, dict(source.attrib))))
            parent = stack[-1][1] if stack else self.p
            if piece.source is not None and piece.source[0] in self._atoms:
                atom = self._atoms[piece.source[0]]
                atom.tail = None
                parent.append(atom)
            else:
                _append_text(parent, piece.text)


def _container(el: etree._Element) -> bool:
    return isinstance(el.tag, str) and etree.QName(el).namespace == TEXT and local(el) in CONTAINERS


def _prose(el: etree._Element, code: Mapping[str, str]) -> bool:
    """Whether a paragraph (or a container in it) has text outside its spans of code: in itself or its containers,
    not in its atoms (a note's text, a field's)."""
    if (el.text or "").strip():
        return True
    for child in el:
        if (child.tail or "").strip() or _container(child) and child.get(STYLE_NAME, "") not in code \
                and _prose(child, code):
            return True
    return False


def _seen(atom: etree._Element) -> bool:
    """Whether a reader sees an atom as text or an object (a field, a note's citation, a frame), so that the
    punctuation written against it goes with it (nmt.translation.documents.atoms); spaces, tabs, breaks, bookmarks,
    reference marks and comments (office:annotation: not in the text's flow) leave it with the words."""
    if not isinstance(atom.tag, str) or local(atom) in ("annotation", "annotation-end"):
        return False
    return local(atom) == "frame" or bool("".join(atom.itertext()).strip())


def _append_text(parent: etree._Element, text: str) -> None:
    if len(parent):
        parent[-1].tail = (parent[-1].tail or "") + text
    else:
        parent.text = (parent.text or "") + text


def _paragraphs(root: etree._Element, styles: bool) -> list[etree._Element]:
    scope = root.findall(f".//{{{OFFICE}}}master-styles") if styles else [root]
    return [p for top in scope for p in top.iter(f"{{{TEXT}}}p", f"{{{TEXT}}}h")]


def translate(src: Path, dst: Path, translate_paragraphs: TranslateParagraphs) -> int:
    """`src` translated into `dst`, one part at a time as the output is written; the number of paragraphs
    translated."""
    count = 0
    named: StyleTable | None = None  # styles.xml's named styles and fonts, which content.xml's styles derive from

    def translated(name: str) -> bytes | None:
        nonlocal count, named
        if name not in ("content.xml", "styles.xml"):
            return None
        part = box.part(name)
        root = part.tree.getroot()
        if name == "styles.xml":
            named = named if named is not None else StyleTable.read(root, automatic=False)
        elif named is None:  # content.xml first (pandoc's order): styles.xml read for its styles alone
            named = StyleTable.read(box.xml("styles.xml").getroot(), False) if "styles.xml" in box.names() \
                else StyleTable()
        code = named.merged(StyleTable.read(root)).code()
        count += translate_elements(_paragraphs(root, name == "styles.xml"),
                                    lambda p: OdfParagraph(p, translatable, code), translate_paragraphs)
        return part.serialize()

    with removed_on_error(dst), open_zip(src, "odt", "content.xml") as box:
        box.write(dst, translated)
    return count

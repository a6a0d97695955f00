"""OpenDocument text .odt: every text:p and text:h translated by sentence across its inline formatting
(nmt.translation.documents.inline).

Worked on the ODF XML with lxml (odfpy, used by the tests to build and read documents, re-serializes the whole
document on save; here only the paragraphs whose text changed are rebuilt). Parts: content.xml (body, tables,
frames, lists) and the master pages of styles.xml (headers and footers). Containers: text:span (a style) and text:a
(a link), nested as written. Atoms, kept as they are in their place: spaces and tabs (text:s, text:tab), line
breaks, bookmarks, fields, frames, a span in a character style of code (CODE_STYLES), and notes (text:note): a
note's own paragraphs are translated as paragraphs of their own, inside the note element, which moves with its
anchor."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from lxml import etree

from nmt.translation.documents.inline import Paragraph, Piece, Run
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
# Character styles of inline code: LibreOffice's "Source Text", "Teletype" and "User Entry", pandoc's Source_Text (a
# span in one is an atom, as inline code is in Markdown and HTML; an automatic style deriving from one is not looked up)
CODE_STYLES = frozenset({"Source_20_Text", "Source_Text", "Teletype", "User_20_Entry"})


class OdfParagraph:
    """One text:p / text:h: `paragraph` to translate; `write(pieces)` puts the pieces back."""

    def __init__(self, p: etree._Element, translatable: Callable[[str], bool] = lambda t: True):
        self.p = p
        self._runs: list[Run] = []
        self._atoms: dict[int, etree._Element] = {}
        self._containers: dict[object, etree._Element] = {}
        self._scan(p, ())
        groups = [run.path if not run.atom or _seen(self._atoms[k]) else None for k, run in enumerate(self._runs)]
        self.paragraph = Paragraph(self._runs, translatable, groups=groups)

    def _scan(self, el: etree._Element, path: tuple[object, ...]) -> None:
        self._text(el.text, path)
        for child in el:  # (comments, processing instructions and entity references are atoms: no QName)
            if isinstance(child.tag, str) and etree.QName(child).namespace == TEXT and local(child) in CONTAINERS \
                    and "".join(child.itertext()) and child.get(f"{{{TEXT}}}style-name") not in CODE_STYLES:
                handle = (local(child), len(self._containers))
                self._containers[handle] = child
                self._scan(child, path + (handle,))
            else:
                self._atoms[len(self._runs)] = child
                self._runs.append(Run(ATOM_TEXT, path, atom=True))
            self._text(child.tail, path)

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

    def translated(name: str) -> bytes | None:
        nonlocal count
        if name not in ("content.xml", "styles.xml"):
            return None
        part = box.part(name)
        count += translate_elements(_paragraphs(part.tree.getroot(), name == "styles.xml"),
                                    lambda p: OdfParagraph(p, translatable), translate_paragraphs)
        return part.serialize()

    with removed_on_error(dst), open_zip(src, "odt", "content.xml") as box:
        box.write(dst, translated)
    return count

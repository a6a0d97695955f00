"""Word .docx: every paragraph translated by sentence across its runs (nmt.translation.documents.inline,
nmt.translation.documents.office_ooxml).

Parts: the body (tables, nested tables and text boxes included: every w:p), headers, footers, footnotes, endnotes
and comments (translated: they are text a reader sees; their anchors in the body stay where they are). Each part is
edited as XML, so footnotes and comments, which python-docx has no API for, are reached; every other part, and every
byte of a text part outside the rebuilt paragraphs, is kept. Tracked changes: the text is translated as it reads
with the changes accepted, an insertion or a move (w:ins, w:moveTo) around the target words aligned to it, a
deletion (w:del, w:moveFrom) kept as it was. Smart tags, custom XML, content controls (w:sdt), bidi embeddings and
overrides (w:dir, w:bdo) and fields' displayed results (w:fldSimple; a complex field's runs between separate and
end) are text inside their container; a field's instruction is kept. Math (m:oMath) is an atom, and so is inline
code: a run in a character style of code (CODE_STYLES). SmartArt text (word/diagrams/: its data and the drawing Word
shows) and chart titles (word/charts/: c:rich) are translated; a chart's category and series names are its embedded
workbook's cached cells (c:strCache), kept: Word would write the workbook's values back over them."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from nmt.translation.documents.inline import Paragraph, Piece
from nmt.translation.documents.office_ooxml import Dialect, Parts, translate_package
from nmt.translation.documents.ooxml_marks import REVISIONS
from nmt.translation.documents.pptx import A

# Character styles of inline code (style ids, lower case): pandoc's, Word's HTML ones, LibreOffice's "Source Text"
CODE_STYLES = frozenset({"verbatimchar", "htmlcode", "htmlkeyboard", "htmlsample", "htmlvariable", "htmltypewriter",
                         "sourcetext", "inlinecode", "codechar"})
W = Dialect("http://schemas.openxmlformats.org/wordprocessingml/2006/main",
            wrappers=frozenset({"hyperlink", "ins", "moveTo", "smartTag", "customXml", "sdt", "fldSimple",
                                 "dir", "bdo"}),  # w:dir, w:bdo: Word 2010's bidi embedding, override
            props=frozenset({"smartTagPr", "customXmlPr", "sdtPr", "sdtEndPr", "fldData"}), fields=True,
            preserve_space=True, dropped=frozenset({"proofErr"}),
            not_formatting=frozenset({"lang", "noProof"}),  # and every w:rsid* attribute
            language="lang", revisions=REVISIONS, code_styles=CODE_STYLES)
PARTS = re.compile(r"word/(document|header\d*|footer\d*|footnotes|endnotes|comments)\.xml")
# The main part's relationships to the other parts of PARTS (found so wherever they are: nmt.translation.documents.opc)
NOTES = frozenset({"header", "footer", "footnotes", "endnotes", "comments"})
# SmartArt (its data and the drawing Word shows) and chart titles hold DrawingML paragraphs (a:p)
DRAWINGML = re.compile(r"word/(diagrams/(data|drawing)\d+|charts/chart\d+)\.xml")


def translate(src: Path, dst: Path, translate_paragraphs: Callable[[list[Paragraph]], list[list[Piece]]],
              languages: tuple[str, str] | None = None) -> int:
    """`src` translated into `dst`; the number of paragraphs translated. `languages`: the model's (source, target),
    for the language of translated runs (nmt.translation.documents.ooxml_marks)."""
    rules = [Parts(PARTS, W, main=True, related=NOTES), Parts(DRAWINGML, A)]
    return translate_package(src, dst, "docx", "word/document.xml", rules, translate_paragraphs, languages)

"""PowerPoint .pptx: the text of every shape on every slide (groups, tables, placeholders) and of the slides' notes,
translated by sentence across its runs (nmt.translation.documents.inline, nmt.translation.documents.office_ooxml,
DrawingML's a:p / a:r / a:rPr; a link is run property a:hlinkClick, so it moves with its run's rPr). Layouts and masters
(their prompt texts are not shown in the show) are kept. SmartArt (ppt/diagrams/: its data and the drawing PowerPoint
shows), chart titles (c:rich) and comments (legacy p:text, modern a:p) are translated; a chart's category and series
names are its embedded workbook's cached cells (c:strCache), kept: PowerPoint would write the workbook's values back
over them. Runs split on what is not formatting (lang, altLang, smtClean, err, dirty) are one run for the alignment.
Fields (slide numbers, dates) and line breaks are atoms. Parts edited as XML (python-pptx would re-serialize every
part it loaded); the rest copied."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from nmt.translation.documents.inline import Paragraph, Piece
from nmt.translation.documents.office_ooxml import Dialect, Parts, translate_package

A = Dialect("http://schemas.openxmlformats.org/drawingml/2006/main", keep_last=frozenset({"endParaRPr"}),
            not_formatting=frozenset({"lang", "altLang", "smtClean", "smtId", "err", "dirty", "noProof"}))
PARTS = re.compile(r"ppt/(slides/slide|notesSlides/notesSlide|diagrams/data|diagrams/drawing|charts/chart)\d+\.xml"
                   r"|ppt/comments/modernComment_[^/]*\.xml")
COMMENTS = re.compile(r"ppt/comments/comment\d+\.xml")  # legacy comments: p:cm/p:text, plain text
P_TEXT = "{http://schemas.openxmlformats.org/presentationml/2006/main}text"


def translate(src: Path, dst: Path, translate_paragraphs: Callable[[list[Paragraph]], list[list[Piece]]],
              languages: tuple[str, str] | None = None) -> int:
    """`src` translated into `dst`; the number of paragraphs translated. `languages`: the model's (source, target),
    for the language of translated runs (a:rPr/@lang, nmt.translation.documents.ooxml_marks)."""
    rules = [Parts(PARTS, A), Parts(COMMENTS, A, plain=P_TEXT)]
    return translate_package(src, dst, "pptx", "ppt/presentation.xml", rules, translate_paragraphs, languages)

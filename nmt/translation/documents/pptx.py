"""PowerPoint .pptx: the text of every shape on every slide (groups, tables, placeholders) and of the slides' notes,
translated by sentence across its runs (nmt.translation.documents.inline, nmt.translation.documents.office_ooxml,
DrawingML's a:p / a:r / a:rPr; a link is run property a:hlinkClick, so it moves with its run's rPr). Layouts and masters
(their prompt texts are not shown in the show), charts, SmartArt and comments are kept as they are. Runs split on
what is not formatting (lang, altLang, smtClean, err, dirty) are one run for the alignment. Fields (slide numbers,
dates) and line breaks are atoms. Parts edited as XML (python-pptx would re-serialize every part it loaded); the rest
copied."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from nmt.translation.documents.inline import Paragraph, Piece
from nmt.translation.documents.office_ooxml import Dialect, translate_package

A = Dialect("http://schemas.openxmlformats.org/drawingml/2006/main", keep_last=frozenset({"endParaRPr"}),
            not_formatting=frozenset({"lang", "altLang", "smtClean", "smtId", "err", "dirty", "noProof"}))
PARTS = re.compile(r"ppt/(slides/slide|notesSlides/notesSlide)\d+\.xml")


def translate(src: Path, dst: Path, translate_paragraphs: Callable[[list[Paragraph]], list[list[Piece]]]) -> int:
    """`src` translated into `dst`; the number of paragraphs translated."""
    return translate_package(src, dst, "pptx", "ppt/presentation.xml", PARTS, A, translate_paragraphs)

"""The document tests' fake translator (each sentence's words reversed and uppercased, word i aligned to word
n-1-i, so a formatted word must move with its word) and comparing a zip container's members before and after."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

from lxml import etree

from nmt.translation.documents import docx as docx_format
from nmt.translation.documents.inline import Aligned, Paragraph, Piece

W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
DOCX_TEXT = re.compile(docx_format.PARTS.pattern)


def reverse_upper(paragraphs: list[Paragraph]) -> list[list[Piece]]:
    """Each sentence's words reversed and uppercased, word i aligned to word n-1-i."""
    out = []
    for p in paragraphs:
        translations = []
        for text in p.texts:
            words = text.split()
            n = len(words)
            translations.append(Aligned.from_pairs(" ".join(w.upper() for w in reversed(words)), n,
                                                   [(i, n - 1 - i) for i in range(n)]))
        out.append(p.render(translations))
    return out


def members(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as z:
        return {name: z.read(name) for name in z.namelist()}


def skeleton(data: bytes, paragraph: str, keep: tuple[str, ...]) -> bytes:
    """The XML with each paragraph's content reduced to its `keep` children (properties): what must not change."""
    root = etree.fromstring(data)
    for p in list(root.iter(*paragraph.split("|"))):
        p.text = None
        for child in list(p):
            if child.tag not in keep:
                p.remove(child)
    return etree.tostring(root)


def assert_only_text_changed(src: Path, dst: Path, text_parts: re.Pattern[str], paragraph: str,
                             keep: tuple[str, ...]) -> None:
    a, b = members(src), members(dst)
    assert list(a) == list(b)
    for name in a:
        if text_parts.fullmatch(name):
            assert skeleton(a[name], paragraph, keep) == skeleton(b[name], paragraph, keep), name
        else:
            assert a[name] == b[name], name

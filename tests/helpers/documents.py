"""The document tests' fake translators (`reverse_upper`: each sentence's words reversed and uppercased, word i aligned
to word n-1-i, so a formatted word must move with its word; `upper`: in order), Word paragraphs built as Word writes
them (`word_run`, `docx_with`), comparing a zip container's members before and after, and the CPU time a piece of
work takes (`cpu`: the bounded-work tests)."""

from __future__ import annotations

import re
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

from lxml import etree

from nmt.translation.documents import docx as docx_format
from nmt.translation.documents.inline import Aligned, Paragraph, Piece

W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
DOCX_TEXT = re.compile(docx_format.PARTS.pattern)


def cpu(work: Callable[[], object]) -> tuple[object, float]:
    """`work()`'s result and the CPU seconds it took in this thread, where it runs: not the process's, which counts
    what other threads of a test worker do meanwhile."""
    start = time.thread_time()
    result = work()
    return result, time.thread_time() - start


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


def upper(paragraphs: list[Paragraph]) -> list[list[Piece]]:
    """Each sentence's words uppercased in their order, word i aligned to word i."""
    out = []
    for p in paragraphs:
        translations = []
        for text in p.texts:
            n = len(text.split())
            translations.append(Aligned.from_pairs(text.upper(), n, [(i, i) for i in range(n)]))
        out.append(p.render(translations))
    return out


WORD_NAMESPACES = (f'xmlns:w="{W[1:-1]}" xmlns:m="http://schemas.openxmlformats.org/officeDocument/2006/math" '
                   'xmlns:mc="http://schemas.openxmlformats.org/markup-compatibility/2006"')


def word_run(text: str, rpr: str = "") -> str:
    """A w:r as Word writes it: a revision id, its properties, xml:space on a w:t with edge spaces."""
    space = ' xml:space="preserve"' if text != text.strip() else ""
    return f'<w:r w:rsidR="00A1B2C3">{f"<w:rPr>{rpr}</w:rPr>" if rpr else ""}<w:t{space}>{text}</w:t></w:r>'


def docx_with(path: Path, *bodies: str) -> Path:
    """A docx made by python-docx at `path`, one paragraph per body (the paragraph's inner XML) after a plain one."""
    import docx
    from docx.oxml import parse_xml

    d = docx.Document()
    d.add_paragraph("a plain paragraph")
    body = d.element.body
    for inner in bodies:
        body.insert(len(body) - 1, parse_xml(f'<w:p {WORD_NAMESPACES} w:rsidR="00A1B2C3">{inner}</w:p>'))
    d.save(path)
    return path


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

"""Golden outputs of document translation: every format `nmt translate` reads (txt as paragraphs, md, html, srt,
vtt, docx, pptx, odt, epub) translated with the demo model (the rules: tests/golden.py).

The inputs are committed, tests/fixtures/golden/documents/doc.* (made by tests/fixtures/make_golden_documents.py), so
the outputs do not follow the libraries that build such documents; the outputs are doc.de.*, and doc.glossary.de.md is
the Markdown document translated with tests/fixtures/golden/demo-glossary.tsv.

Text formats are compared byte for byte. The zip-based ones (docx, pptx, odt, epub) are compared member by member:
the list of members in order, each member's bytes and its entry's settings (date, compression, attributes, flags,
extra field, comment). The container itself is byte-deterministic too (the same input translated twice gives the
same bytes: every entry is copied from the input's, dates included), but its compressed streams are zlib's output,
not nmt's, and another zlib (zlib-ng, a later version) may compress the same members to other bytes.

    NMT_UPDATE_GOLDEN=1 python3 -m pytest tests/test_golden_documents.py     # accept a deliberate change
"""

from __future__ import annotations

import io
import zipfile

import pytest

from tests.helpers.golden import DEMO, GOLDEN, check, check_text, translate

DOCUMENTS = GOLDEN / "documents"
TEXT = ("txt", "md", "html", "srt", "vtt")
ZIPPED = ("docx", "pptx", "odt", "epub")
# what each format needs beyond --input and --output: a .txt file is read line by line unless --format txt
OPTIONS = {"txt": ["--format", "txt"]}
ENTRY = ("date_time", "compress_type", "external_attr", "create_system", "create_version", "extract_version",
         "flag_bits", "extra", "comment")


def entries(data: bytes) -> list[tuple]:
    """(name, settings, bytes) of every member of the zip `data`, in order."""
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return [(i.filename, tuple(getattr(i, k) for k in ENTRY), z.read(i.filename)) for i in z.infolist()]


def same_members(got: bytes, want: bytes) -> str | None:
    """None when the two zips hold the same members in the same order, with the same settings and bytes."""
    g, w = entries(got), entries(want)
    if [e[0] for e in g] != [e[0] for e in w]:
        return f"members {[e[0] for e in g]}, golden has {[e[0] for e in w]}"
    for (name, g_settings, g_data), (_, w_settings, w_data) in zip(g, w, strict=True):
        if g_settings != w_settings:
            diff = {k: (a, b) for k, a, b in zip(ENTRY, g_settings, w_settings, strict=True) if a != b}
            return f"{name}: entry settings differ (got, golden): {diff}"
        if g_data != w_data:
            where = next((i for i, (a, b) in enumerate(zip(g_data, w_data, strict=False)) if a != b),
                         min(len(g_data), len(w_data)))
            return (f"{name}: bytes differ at {where}:\n  got:    {g_data[where - 60:where + 60]!r}\n"
                    f"  golden: {w_data[where - 60:where + 60]!r}")
    return None


@pytest.mark.parametrize("fmt", TEXT + ZIPPED)
def test_document_translation_matches_golden(fmt, tmp_path):
    source = DOCUMENTS / f"doc.{fmt}"
    got = translate(DEMO, source, tmp_path / f"doc.de.{fmt}", OPTIONS.get(fmt, []))
    golden = DOCUMENTS / f"doc.de.{fmt}"
    if fmt in TEXT:
        check_text(golden, got)
    else:
        check(golden, got, same_members)


def test_document_with_a_glossary_matches_golden(tmp_path):
    got = translate(DEMO, DOCUMENTS / "doc.md", tmp_path / "doc.glossary.de.md",
                    ["--glossary", str(GOLDEN / "demo-glossary.tsv")])
    check_text(DOCUMENTS / "doc.glossary.de.md", got)

"""bench/real_checks.py's rules, which bench/real_documents.py's figures for issue 46 rest on: glued atom sides,
letter words, why an Office run is still marked with the source language, what a zip may change, and the
paragraphs read from Markdown and HTML. Tiny documents built here; no model."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
real_checks = pytest.importorskip("real_checks")
M = real_checks.MARK


@pytest.mark.parametrize(("source", "output", "glued"), [
    ("see " + M + " and", "siehe" + M + "und", 2),  # both separators lost
    (M + ", " + M, M + M, 1),  # two atoms with text between them now touch
    ("EPUB 3.0." + M + ").", "billige" + M + ") x", 0),  # it touched "3.0." in the source: it may touch its word
    ("endnote." + M, "Flasche" + M, 0),
    ("a " + M + " b " + M, "x " + M + " y " + M, 0),
])
def test_glued_atoms_count_lost_separators(source: str, output: str, glued: int) -> None:
    assert len(real_checks.glued_atoms(source, output)) == glued


def test_letter_words_leave_atoms_paths_and_numbers_out() -> None:
    assert real_checks.words(f"Use {M} or /usr/bin, 3.14, x86 and a y.") == 3  # "Use", "or", "and"
    assert real_checks.words("The red car.") == 3
    assert real_checks.prose(f"The  {M}\ncar") == "The car"


def _docx(tmp_path: Path, body: str) -> Path:
    w = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
    path = tmp_path / "x.docx"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("word/document.xml", f'<w:document xmlns:w="{w}"><w:body>{body}</w:body></w:document>')
    return path


def test_marked_runs_say_why(tmp_path: Path) -> None:
    en = '<w:rPr><w:lang w:val="en-US"/></w:rPr>'
    body = (f"<w:p><w:r>{en}<w:t>The house</w:t></w:r><w:r>{en}<w:t> 42 </w:t></w:r>"
            f"<w:r>{en}<w:instrText> REF x </w:instrText></w:r>"
            f"<w:del><w:r>{en}<w:delText>old words</w:delText></w:r></w:del>"
            f'<w:r><w:rPr><w:rStyle w:val="VerbatimChar"/><w:lang w:val="en-US"/></w:rPr><w:t>ls -l</w:t></w:r></w:p>'
            f"<w:p><w:pPr>{en}</w:pPr></w:p>")
    whys = [why for why, _, _ in real_checks.marked_runs(_docx(tmp_path, body), "en")]
    assert whys == ["other", "no letter", "field instruction", "deletion", "kept atom", "paragraph mark"]


def test_a_run_the_model_gave_back_unchanged_is_no_defect(tmp_path: Path) -> None:
    # POI's shapes.pptx "C1", pandoc's 9358.docx table cell "C": the model copied them, so nmt wrote the source
    en = '<w:rPr><w:lang w:val="en-US"/></w:rPr>'
    path = _docx(tmp_path, f"<w:p><w:r>{en}<w:t>C4</w:t></w:r></w:p><w:p><w:r>{en}<w:t>The house</w:t></w:r></w:p>")
    whys = [why for why, _, _ in real_checks.marked_runs(path, "en", frozenset({"C4"}))]
    assert whys == ["copied by the model", "other"]
    assert [why for why, _, _ in real_checks.marked_runs(path, "en")] == ["other", "other"]


def test_a_move_origin_is_not_text_to_translate(tmp_path: Path) -> None:
    body = "<w:p><w:r><w:t>Kept here.</w:t></w:r><w:moveFrom><w:r><w:t>Moved away words</w:t></w:r></w:moveFrom></w:p>"
    assert real_checks.paragraphs(_docx(tmp_path, body), "docx") == ["Kept here."]


def test_zip_changes_allow_only_text_parts(tmp_path: Path) -> None:
    def build(name: str, document: bytes, styles: bytes, date: tuple[int, ...]) -> Path:
        path = tmp_path / name
        with zipfile.ZipFile(path, "w") as z:
            z.writestr(zipfile.ZipInfo("word/document.xml", date), document)
            z.writestr(zipfile.ZipInfo("word/styles.xml", date), styles)
        return path

    source = build("a.docx", b"<a/>", b"<s/>", (2020, 1, 1, 0, 0, 0))
    assert real_checks.zip_changes(source, build("b.docx", b"<b/>", b"<s/>", (2020, 1, 1, 0, 0, 0)), "docx") == {
        "order": [], "bytes": [], "info": [], "text": ["word/document.xml"]}
    changed = real_checks.zip_changes(source, build("c.docx", b"<a/>", b"<t/>", (2021, 1, 1, 0, 0, 0)), "docx")
    assert changed["bytes"] == ["word/styles.xml"] and len(changed["info"]) == 2


def test_markdown_paragraphs_skip_front_matter_and_mark_atoms(tmp_path: Path) -> None:
    path = tmp_path / "x.md"
    path.write_text("---\ntitle: A book about cars\n---\n\nRun `ls` and see <https://x.org> now.\n", "utf-8")
    assert real_checks.paragraphs(path, "md") == [f"Run {M} and see {M} now."]


def test_html_paragraphs_by_block_with_kept_elements_as_marks(tmp_path: Path) -> None:
    path = tmp_path / "x.html"
    path.write_text("<html><head><title>The title</title><style>p {}</style></head><body><p>Type <code>ls</code> "
                    "<b>now</b>.</p><pre>kept</pre><div>Two<br>lines</div></body></html>", "utf-8")
    assert [p for p in real_checks.paragraphs(path, "html") if p.strip()] == [
        "The title", f"Type {M} now.", "Two", "lines"]

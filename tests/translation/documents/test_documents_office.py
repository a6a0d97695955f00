"""Office documents (docx, pptx, odt) translated across inline formatting: built by the real libraries, read
back by them; a fake translator reverses and uppercases the words (alignment i -> n-1-i), so a bold word must move
with its word; every part but the text-bearing ones byte-identical, and those equal but for the text."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import pytest
from lxml import etree

from nmt.errors import NmtError
from nmt.translation.documents import docx as docx_format
from nmt.translation.documents import odt as odt_format
from nmt.translation.documents import pptx as pptx_format
from nmt.translation.documents import safezip
from tests.helpers.documents import DOCX_TEXT, W, assert_only_text_changed, members, reverse_upper
from tests.helpers.paths import DEMO_MODEL

docx = pytest.importorskip("docx")
pptx = pytest.importorskip("pptx")
A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"


def run_texts(data: bytes, run: str, t: str) -> list[tuple[str, bytes]]:
    """(text, rPr bytes) of every text run."""
    root = etree.fromstring(data)
    out = []
    for r in root.iter(run):
        rpr = r.find(run.replace("}r", "}rPr"))
        out += [(x.text or "", b"" if rpr is None else etree.tostring(rpr)) for x in r.findall(t)]
    return out


# --- docx ---------------------------------------------------------------------------------------------------------

def add_hyperlink(paragraph, url: str, text: str) -> None:
    from docx.opc.constants import RELATIONSHIP_TYPE
    from docx.oxml import parse_xml

    rid = paragraph.part.relate_to(url, RELATIONSHIP_TYPE.HYPERLINK, is_external=True)
    paragraph._p.append(parse_xml(
        f'<w:hyperlink xmlns:w="{W[1:-1]}" xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/'
        f'relationships" r:id="{rid}"><w:r><w:rPr><w:u w:val="single"/></w:rPr><w:t>{text}</w:t></w:r></w:hyperlink>'))


@pytest.fixture
def docx_file(tmp_path: Path) -> Path:
    d = docx.Document()
    p = d.add_paragraph("The ")
    p.add_run("red").bold = True
    p.add_run(" car is fast. It is ")
    italic = p.add_run("very")
    italic.italic = True
    p.add_run(" old.")
    d.add_comment(italic, text="check this claim", author="nmt")
    link = d.add_paragraph("Read the ")
    add_hyperlink(link, "https://example.com", "full report")
    link.add_run(" today.")
    table = d.add_table(rows=1, cols=2)
    table.cell(0, 0).text = "left cell"
    inner = table.cell(0, 1).add_table(rows=1, cols=1)
    inner.cell(0, 0).paragraphs[0].add_run("nested ")
    inner.cell(0, 0).paragraphs[0].add_run("bold").bold = True
    inner.cell(0, 0).paragraphs[0].add_run(" text")
    section = d.sections[0]
    section.header.paragraphs[0].text = "page header"
    section.footer.paragraphs[0].text = "page footer"
    d.add_paragraph("2024 - 42")  # nothing to translate
    path = tmp_path / "in.docx"
    d.save(path)
    return path


def test_docx_round_trip(docx_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.docx"
    assert docx_format.translate(docx_file, out, reverse_upper) == 7
    d = docx.Document(out)
    texts = [p.text for p in d.paragraphs]
    assert texts[0] == "FAST. IS CAR RED THE OLD. VERY IS IT"
    assert [r.text for r in d.paragraphs[0].runs if r.bold] == ["RED"]
    assert [r.text for r in d.paragraphs[0].runs if r.italic] == ["VERY"]
    assert texts[2] == "2024 - 42"
    assert d.sections[0].header.paragraphs[0].text == "HEADER PAGE"
    assert d.sections[0].footer.paragraphs[0].text == "FOOTER PAGE"
    assert d.tables[0].cell(0, 0).text == "CELL LEFT"
    nested = d.tables[0].cell(0, 1).tables[0].cell(0, 0).paragraphs[0]
    assert nested.text == "TEXT BOLD NESTED" and [r.text for r in nested.runs if r.bold] == ["BOLD"]
    assert [c.text for c in d.comments] == ["CLAIM THIS CHECK"]
    assert_only_text_changed(docx_file, out, DOCX_TEXT, f"{W}p", (f"{W}pPr",))


def test_docx_link_moves_with_its_words(docx_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.docx"
    docx_format.translate(docx_file, out, reverse_upper)
    body = etree.fromstring(members(out)["word/document.xml"])
    p = list(body.iter(f"{W}p"))[1]
    assert "".join(p.itertext()) == "TODAY. REPORT FULL THE READ"
    link = p.find(f"{W}hyperlink")
    assert link is not None and link.get("{http://schemas.openxmlformats.org/officeDocument/2006/relationships}id")
    assert "".join(link.itertext()) == "REPORT FULL"
    assert link.find(f"{W}r/{W}rPr/{W}u") is not None  # the link's run keeps its own properties


def test_docx_every_run_keeps_a_source_rpr(docx_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.docx"
    docx_format.translate(docx_file, out, reverse_upper)
    before, after = members(docx_file), members(out)
    for name in after:
        if DOCX_TEXT.fullmatch(name):
            old = {rpr for _, rpr in run_texts(before[name], f"{W}r", f"{W}t")}
            new = run_texts(after[name], f"{W}r", f"{W}t")
            assert {rpr for _, rpr in new} <= old, name
            assert not any(c.islower() for text, _ in new for c in text), name


def test_docx_identity_translation_is_byte_exact(docx_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.docx"
    docx_format.translate(docx_file, out, lambda ps: [p.render(list(p.texts)) for p in ps])
    assert members(out) == members(docx_file)


# --- pptx ---------------------------------------------------------------------------------------------------------

@pytest.fixture
def pptx_file(tmp_path: Path) -> Path:
    from pptx.util import Inches

    prs = pptx.Presentation()
    slide = prs.slides.add_slide(prs.slide_layouts[1])
    slide.shapes.title.text = "quarterly results"
    body = slide.placeholders[1].text_frame.paragraphs[0]
    for text, bold in (("the ", False), ("red", True), (" car wins", False)):
        run = body.add_run()
        run.text, run.font.bold = text, bold
    link = slide.placeholders[1].text_frame.add_paragraph().add_run()
    link.text = "see website"
    link.hyperlink.address = "https://example.com"
    group = slide.shapes.add_group_shape()
    group.shapes.add_textbox(Inches(1), Inches(1), Inches(2), Inches(1)).text_frame.text = "grouped words"
    table = slide.shapes.add_table(1, 2, Inches(1), Inches(3), Inches(4), Inches(1)).table
    table.cell(0, 0).text = "first cell"
    table.cell(0, 1).text = "second cell"
    slide.notes_slide.notes_text_frame.text = "speaker notes here"
    path = tmp_path / "in.pptx"
    prs.save(path)
    return path


PPTX_TEXT = re.compile(pptx_format.PARTS.pattern)


def test_pptx_round_trip(pptx_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.pptx"
    assert pptx_format.translate(pptx_file, out, reverse_upper) == 7
    slide = pptx.Presentation(out).slides[0]
    assert slide.shapes.title.text == "RESULTS QUARTERLY"
    frame = slide.placeholders[1].text_frame
    assert frame.paragraphs[0].text == "WINS CAR RED THE"
    assert [r.text for r in frame.paragraphs[0].runs if r.font.bold] == ["RED"]
    link = frame.paragraphs[1].runs
    assert [r.text for r in link] == ["WEBSITE SEE"] and link[0].hyperlink.address == "https://example.com"
    group = next(s for s in slide.shapes if s.shape_type == 6)  # MSO_SHAPE_TYPE.GROUP
    assert group.shapes[0].text_frame.text == "WORDS GROUPED"
    table = next(s for s in slide.shapes if s.has_table).table
    assert [table.cell(0, k).text for k in range(2)] == ["CELL FIRST", "CELL SECOND"]
    assert slide.notes_slide.notes_text_frame.text == "HERE NOTES SPEAKER"
    assert_only_text_changed(pptx_file, out, PPTX_TEXT, f"{A}p", (f"{A}pPr", f"{A}endParaRPr"))


# --- bad input ----------------------------------------------------------------------------------------------------

def _zip(path: Path, entries: dict[str, bytes], compression: int = zipfile.ZIP_DEFLATED) -> Path:
    with zipfile.ZipFile(path, "w", compression) as z:
        for name, data in entries.items():
            z.writestr(name, data)
    return path


def _refused(src: Path, tmp_path: Path, pattern: str) -> None:
    out = tmp_path / "refused.docx"
    with pytest.raises(NmtError, match=pattern) as e:
        docx_format.translate(src, out, reverse_upper)
    assert "\n" not in str(e.value)
    assert not out.exists()


def test_corrupt_docx(docx_file: Path, tmp_path: Path) -> None:
    data = docx_file.read_bytes()
    bad = tmp_path / "bad.docx"
    bad.write_bytes(data[:len(data) // 2])
    _refused(bad, tmp_path, "corrupt docx")


def test_corrupt_member(tmp_path: Path) -> None:
    bad = _zip(tmp_path / "bad.docx", {"word/document.xml": b"<w:document><unclosed>"})
    _refused(bad, tmp_path, "corrupt docx")


def test_encrypted_office_file(tmp_path: Path) -> None:
    ole = tmp_path / "secret.docx"
    ole.write_bytes(bytes.fromhex("d0cf11e0a1b11ae1") + bytes(504))
    _refused(ole, tmp_path, "encrypted")


def test_zip_with_encryption_flag(docx_file: Path, tmp_path: Path) -> None:
    data = bytearray(docx_file.read_bytes())
    for magic, offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):  # general purpose flag bit 0, every header
        for m in re.finditer(re.escape(magic), bytes(data)):
            data[m.start() + offset] |= 1
    locked = tmp_path / "locked.docx"
    locked.write_bytes(bytes(data))
    _refused(locked, tmp_path, "encrypted")


def test_wrong_extension(tmp_path: Path) -> None:
    png = tmp_path / "picture.docx"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(100))
    _refused(png, tmp_path, "wrong extension")
    other = _zip(tmp_path / "other.docx", {"readme.txt": b"hello"})
    _refused(other, tmp_path, "no word/document.xml")


def test_zip_bomb_ratio(tmp_path: Path) -> None:
    bomb = _zip(tmp_path / "bomb.docx", {"word/document.xml": b"<a/>", "word/media/x.bin": bytes(50 * 2**20)})
    _refused(bomb, tmp_path, "zip bomb")


def test_zip_bomb_members_and_total(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(safezip, "MAX_MEMBERS", 5)
    many = _zip(tmp_path / "many.docx", {f"word/{k}.xml": b"<a/>" for k in range(6)})
    _refused(many, tmp_path, "members")
    monkeypatch.setattr(safezip, "MAX_MEMBERS", 10_000)
    monkeypatch.setattr(safezip, "MAX_TOTAL", 1000)
    big = _zip(tmp_path / "big.docx", {"word/document.xml": b"<a>" + b"x" * 2000 + b"</a>"}, zipfile.ZIP_STORED)
    _refused(big, tmp_path, "zip bomb")


def test_lying_header_is_caught(tmp_path: Path) -> None:
    """A member that inflates past the size its headers declare is refused as it is read."""
    _zip(tmp_path / "x.zip", {"word/document.xml": b"<a>" + b"y" * 5000 + b"</a>"})
    data = bytearray((tmp_path / "x.zip").read_bytes())
    for magic, offset in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):  # uncompressed size -> 10
        for m in re.finditer(re.escape(magic), bytes(data)):
            data[m.start() + offset:m.start() + offset + 4] = (10).to_bytes(4, "little")
    liar = tmp_path / "liar.docx"
    liar.write_bytes(bytes(data))
    _refused(liar, tmp_path, "zip bomb|corrupt")


# --- odt ----------------------------------------------------------------------------------------------------------

odf = pytest.importorskip("odf")
TXT = "{urn:oasis:names:tc:opendocument:xmlns:text:1.0}"


@pytest.fixture
def odt_file(tmp_path: Path) -> Path:
    from odf.opendocument import OpenDocumentText
    from odf.style import Footer, Header, MasterPage, PageLayout, Style, TextProperties
    from odf.table import Table, TableCell, TableColumn, TableRow
    from odf.text import A as Link
    from odf.text import H, Note, NoteBody, NoteCitation, P, Span

    doc = OpenDocumentText()
    bold = Style(name="Bold", family="text")
    bold.addElement(TextProperties(fontweight="bold"))
    doc.automaticstyles.addElement(bold)
    layout = PageLayout(name="Layout")
    doc.automaticstyles.addElement(layout)
    master = MasterPage(name="Standard", pagelayoutname=layout)
    header, footer = Header(), Footer()
    header.addElement(P(text="page header"))
    footer.addElement(P(text="page footer"))
    master.addElement(header)
    master.addElement(footer)
    doc.masterstyles.addElement(master)
    doc.text.addElement(H(outlinelevel=1, text="annual report"))
    p = P(text="the ")
    outer = Span(stylename=bold, text="big ")
    outer.addElement(Link(href="https://example.com", text="red"))
    p.addElement(outer)
    p.addText(" car")
    note = Note(id="ftn1", noteclass="footnote")
    note.addElement(NoteCitation(text="1"))
    body = NoteBody()
    body.addElement(P(text="a footnote text"))
    note.addElement(body)
    p.addElement(note)
    p.addText(" is fast.")
    doc.text.addElement(p)
    table = Table(name="T")
    table.addElement(TableColumn())
    row = TableRow()
    cell = TableCell()
    cell.addElement(P(text="cell words"))
    row.addElement(cell)
    table.addElement(row)
    doc.text.addElement(table)
    path = tmp_path / "in.odt"
    doc.save(str(path))
    return path


def odt_paragraphs(path: Path, name: str = "content.xml") -> list[etree._Element]:
    return list(etree.fromstring(members(path)[name]).iter(f"{TXT}p", f"{TXT}h"))


def test_odt_round_trip(odt_file: Path, tmp_path: Path) -> None:
    from odf import teletype
    from odf.opendocument import load
    from odf.text import P

    out = tmp_path / "out.odt"
    assert odt_format.translate(odt_file, out, reverse_upper) == 6
    texts = [teletype.extractText(p) for p in load(str(out)).getElementsByType(P)]  # opens in odfpy
    assert "WORDS CELL" in texts and not any(c.islower() for text in texts for c in text)
    content = odt_paragraphs(out)
    assert "".join(content[0].itertext()) == "REPORT ANNUAL"
    p = content[1]
    span = p.find(f"{TXT}span")
    link = span.find(f"{TXT}a")
    assert "".join(link.itertext()) == "RED" and link.get("{http://www.w3.org/1999/xlink}href") == "https://example.com"
    assert "".join(span.itertext()).split() == ["RED", "BIG"]  # the bold span holds its words, the link inside
    assert "".join(content[2].itertext()) == "TEXT FOOTNOTE A"  # the note's paragraph, inside the note
    assert p.find(f"{TXT}note") is not None
    styles = ["".join(x.itertext()) for x in odt_paragraphs(out, "styles.xml")]
    assert styles == ["HEADER PAGE", "FOOTER PAGE"]
    assert_only_text_changed(odt_file, out, re.compile("content.xml|styles.xml"), f"{TXT}p|{TXT}h", ())


# --- end to end, the demo model -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def demo_translate():
    from nmt.translation.documents.paragraphs import translate_paragraphs
    from nmt.translation.translator import Translator

    translator = Translator.load(DEMO_MODEL)
    return lambda paragraphs: translate_paragraphs(translator, paragraphs)


@pytest.mark.parametrize("fmt, fixture", [(docx_format, "docx_file"), (pptx_format, "pptx_file"),
                                          (odt_format, "odt_file")])
def test_demo_model_end_to_end(fmt, fixture: str, demo_translate, request: pytest.FixtureRequest,
                               tmp_path: Path) -> None:
    src: Path = request.getfixturevalue(fixture)
    out = tmp_path / f"out{src.suffix}"
    assert fmt.translate(src, out, demo_translate) > 0
    before, after = members(src), members(out)
    assert list(before) == list(after)
    changed = [name for name in before if before[name] != after[name]]
    assert changed and all(fmt is odt_format or fmt.PARTS.fullmatch(name) for name in changed)
    assert all(name in ("content.xml", "styles.xml") for name in changed) or fmt is not odt_format
    opener = {docx_format: docx.Document, pptx_format: pptx.Presentation,
              odt_format: lambda path: __import__("odf.opendocument").opendocument.load(str(path))}[fmt]
    assert opener(out) is not None  # opens in its library

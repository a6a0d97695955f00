"""Writes tests/data/golden/documents/doc.*: the input documents of tests/test_golden_documents.py, one per format
`nmt translate` reads (txt, md, html, srt, vtt, docx, pptx, odt, epub), in the demo model's words (numbers, dates,
colours, things) so that its translations mean something.

The text formats are written as they are below; the zip-based ones are built by their libraries (python-docx,
python-pptx, odfpy, ebooklib; the builders of tests/test_documents_office.py and tests/test_documents_epub.py), then
rewritten member by member, in order and with the same compression, under one fixed date, so that the same library
versions give the same bytes. The files are committed: the golden outputs translate these exact bytes, whatever
the libraries do later. Remaking them means regenerating the golden outputs (NMT_UPDATE_GOLDEN=1).

    python -m tests.data.make_golden_documents      # from the repository root (a second)
"""

from __future__ import annotations

import tempfile
import zipfile
from pathlib import Path

OUT = Path(__file__).resolve().parent / "golden" / "documents"
DATE = (2024, 1, 1, 0, 0, 0)

TEXT = {
    "txt": "\ufeffthe red car\r\n\r\n  three red cars\r\n  the small boat\r\n\r\n- the twenty-sixth of December\r\n"
           "- 42\r\n",
    "md": """---
title: the red car
---

# three **red** cars

I see the **small** boat.

[the *red* car](https://example.com/the-red-car "the red car")

> the twenty-sixth of *December*
> eighteen forty-three

- the red car `the red car`
- three red cars ![the red car](car.png)

| the red car | three red cars |
|---|---|
| the twenty-sixth of December | 42 |

```python
print("the red car")
```

<div class="note">the red car</div>
""",
    "html": """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>three red cars</title>
<script>var s = "the red car";</script><style>b { color: red }</style></head>
<body><h1>the <b>red</b> car</h1><p><i>three</i> red cars</p><p><a href="/the-red-car">the red car</a></p>
<p>I see the <em>small</em> boat &amp; the big cat.</p>
<pre>the red car</pre><!-- the red car --></body></html>
""",
    "srt": """1
00:00:01,000 --> 00:00:04,000
the <b>red</b> car

2
00:00:02,500 --> 00:00:05,000 X1:100 X2:200
<i>three</i> red cars
the small boat

3
00:00:06,000 --> 00:00:07,000
42
""",
    "vtt": """WEBVTT - the red car

NOTE the red car

STYLE
::cue(b) { color: red }

intro
00:01.000 --> 00:04.000 align:start position:10%
<v Bob>the <b>red</b> car

00:02.500 --> 00:05.000
- three red cars
- <i>the</i> small boat
""",
}


def docx_document(path: Path) -> None:
    import docx
    from docx.opc.constants import RELATIONSHIP_TYPE
    from docx.oxml import parse_xml

    w = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
    r = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
    d = docx.Document()
    d.add_heading("three red cars", level=1)
    p = d.add_paragraph("I see the ")
    p.add_run("small").bold = True
    p.add_run(" boat. A blue apple is in the ")
    italic = p.add_run("garden")
    italic.italic = True
    p.add_run(".")
    comment = d.add_comment(italic, text="the red car", author="nmt")
    comment._comment_elm.set(f"{{{w}}}date", "2024-01-01T00:00:00Z")  # not the time it was made
    link = d.add_paragraph("We bought ")
    rid = link.part.relate_to("https://example.com", RELATIONSHIP_TYPE.HYPERLINK, is_external=True)
    link._p.append(parse_xml(f'<w:hyperlink xmlns:w="{w}" xmlns:r="{r}" r:id="{rid}"><w:r><w:rPr><w:u w:val="single"/>'
                             f'</w:rPr><w:t>five big cups</w:t></w:r></w:hyperlink>'))
    link.add_run(" for nine euros.")
    table = d.add_table(rows=1, cols=2)
    table.cell(0, 0).text = "the twenty-sixth of December"
    inner = table.cell(0, 1).add_table(rows=1, cols=1)
    inner.cell(0, 0).paragraphs[0].add_run("three ")
    inner.cell(0, 0).paragraphs[0].add_run("white").bold = True
    inner.cell(0, 0).paragraphs[0].add_run(" cats")
    section = d.sections[0]
    section.header.paragraphs[0].text = "the red car"
    section.footer.paragraphs[0].text = "one hundred pages"
    d.add_paragraph("2024 - 42")
    d.save(path)


def pptx_document(path: Path) -> None:
    import pptx
    from pptx.util import Inches

    prs = pptx.Presentation()
    slide = prs.slides.add_slide(prs.slide_layouts[1])
    slide.shapes.title.text = "three red cars"
    body = slide.placeholders[1].text_frame.paragraphs[0]
    for text, bold in (("I see the ", False), ("small", True), (" boat.", False)):
        run = body.add_run()
        run.text, run.font.bold = text, bold
    link = slide.placeholders[1].text_frame.add_paragraph().add_run()
    link.text = "the twenty-sixth of December"
    link.hyperlink.address = "https://example.com"
    group = slide.shapes.add_group_shape()
    group.shapes.add_textbox(Inches(1), Inches(1), Inches(2), Inches(1)).text_frame.text = "a blue apple"
    table = slide.shapes.add_table(1, 2, Inches(1), Inches(3), Inches(4), Inches(1)).table
    table.cell(0, 0).text = "eighteen euros"
    table.cell(0, 1).text = "twelve white mountains"
    slide.notes_slide.notes_text_frame.text = "We bought five big cups for nine euros."
    prs.save(path)


def odt_document(path: Path) -> None:
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
    header.addElement(P(text="the red car"))
    footer.addElement(P(text="one hundred pages"))
    master.addElement(header)
    master.addElement(footer)
    doc.masterstyles.addElement(master)
    doc.text.addElement(H(outlinelevel=1, text="three red cars"))
    p = P(text="I see the ")
    outer = Span(stylename=bold, text="small ")
    outer.addElement(Link(href="https://example.com", text="red"))
    p.addElement(outer)
    p.addText(" boat")
    note = Note(id="ftn1", noteclass="footnote")
    note.addElement(NoteCitation(text="1"))
    body = NoteBody()
    body.addElement(P(text="the twenty-sixth of December"))
    note.addElement(body)
    p.addElement(note)
    p.addText(" in the garden.")
    doc.text.addElement(p)
    table = Table(name="T")
    table.addElement(TableColumn())
    row = TableRow()
    cell = TableCell()
    cell.addElement(P(text="eighteen euros"))
    row.addElement(cell)
    table.addElement(row)
    doc.text.addElement(table)
    doc.save(str(path))


def epub_document(path: Path) -> None:
    import datetime

    from ebooklib import epub

    png = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000") + bytes(40)
    b = epub.EpubBook()
    b.set_identifier("nmt-golden-book")
    b.set_title("the red car")
    b.set_language("en")
    b.add_author("Jane Doe")
    b.add_metadata("DC", "description", "three red cars")
    css = epub.EpubItem(uid="style", file_name="style/main.css", media_type="text/css", content=b"p { color: red; }")
    image = epub.EpubItem(uid="cover", file_name="images/car.png", media_type="image/png", content=png)
    one = epub.EpubHtml(title="three red cars", file_name="one.xhtml", lang="en")
    one.content = ('<h1>three red cars</h1><p>I see the <b>small</b> boat and <i>a <a href="#x">blue</a></i> '
                   'apple.</p><p>the red car<br/>the twenty-sixth of December &amp; 42.</p>')
    two = epub.EpubHtml(title="the small boat", file_name="two.xhtml", lang="en")
    two.content = '<h2>the small boat</h2><p>A blue <img src="images/car.png" alt="car"/> cat is in the garden.</p>'
    for item in (css, image, one, two):
        b.add_item(item)
    one.add_item(css)
    b.toc = [epub.Link("one.xhtml", "three red cars", "one"), epub.Link("two.xhtml", "the small boat", "two")]
    b.add_item(epub.EpubNcx())
    b.add_item(epub.EpubNav())
    b.spine = ["nav", one, two]
    epub.write_epub(str(path), b, {"mtime": datetime.datetime(*DATE)})  # not the time it was made


def fixed_dates(src: Path, dst: Path) -> None:
    """`src` rewritten into `dst`: the same members in the same order and compression, dated DATE."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            entry = zipfile.ZipInfo(info.filename, DATE)
            entry.compress_type, entry.external_attr = info.compress_type, 0o644 << 16
            zout.writestr(entry, zin.read(info.filename))


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    written = []
    for fmt, text in TEXT.items():
        (OUT / f"doc.{fmt}").write_bytes(text.encode("utf-8"))
        written.append(f"doc.{fmt}")
    with tempfile.TemporaryDirectory() as tmp:
        for fmt, build in (("docx", docx_document), ("pptx", pptx_document), ("odt", odt_document),
                           ("epub", epub_document)):
            built = Path(tmp) / f"doc.{fmt}"
            build(built)
            fixed_dates(built, OUT / built.name)
            written.append(built.name)
    print(f"wrote {', '.join(written)} in {OUT}")


if __name__ == "__main__":
    main()

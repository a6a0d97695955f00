"""The sample documents of docs/document_pictures.py: one small English document per format, built with the format's
own library (python-docx, python-pptx, odfpy, ebooklib; md, html, srt and vtt as text), in the demo model's domain,
with bold, italic, underline, links or styled spans on some words. Deterministic: fixed zip dates and metadata."""

from __future__ import annotations

import datetime
import zipfile
from collections.abc import Callable
from html import escape as esc
from pathlib import Path

EPOCH = (1980, 1, 1, 0, 0, 0)  # every zip entry's date, so that the samples are byte-identical run to run
WHEN = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)
LINK = "https://example.org/"


# --- the sample documents --------------------------------------------------------------------------------------

MD = f"""# The small boat

I see the **red** car. The *blue* boat is in the garden.

The [small boat]({LINK}boat) is in the garden.

- I see a *fast* bicycle.
- I see **blue** windows.

```
I see the red car.
```
"""

HTML = f"""<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8"><title>The red car</title></head>
<body>
<h1>The red car</h1>
<p>I see the <b>red</b> car.</p>
<p>The <a href="{LINK}boat">small boat</a> is in the garden.</p>
<p>The library is open from one o'clock to <em>eight o'clock</em>.</p>
<p>I see a big <mark>yellow</mark> house.</p>
</body>
</html>
"""

SRT = """1
00:00:01,000 --> 00:00:03,500
I see the <b>red</b> car.

2
00:00:04,000 --> 00:00:06,000
The <i>blue</i> boat
is in the garden.

3
00:00:06,500 --> 00:00:09,000
The library is open from one o'clock to <u>eight o'clock</u>.
"""

VTT = """WEBVTT - demo

intro
00:00:01.000 --> 00:00:03.500 align:start
<v Anna>I see a <b>fast</b> bicycle.

00:00:04.000 --> 00:00:06.000
This fast flower is behind the <i>door</i>.
"""


def pin_zip(path: Path) -> None:
    """Rewrite the zip at `path` with every entry dated EPOCH (order, names, compression and data kept)."""
    with zipfile.ZipFile(path) as z:
        entries = [(info, z.read(info)) for info in z.infolist()]
    with zipfile.ZipFile(path, "w") as z:
        for info, data in entries:
            pinned = zipfile.ZipInfo(info.filename, EPOCH)
            pinned.compress_type, pinned.external_attr = info.compress_type, info.external_attr
            z.writestr(pinned, data)


def add_hyperlink(paragraph, url: str, text: str) -> None:
    """A w:hyperlink run (underlined, as Word writes one) at the end of a python-docx paragraph."""
    from docx.opc.constants import RELATIONSHIP_TYPE
    from docx.oxml import parse_xml
    from docx.oxml.ns import nsdecls

    rid = paragraph.part.relate_to(url, RELATIONSHIP_TYPE.HYPERLINK, is_external=True)
    paragraph._p.append(parse_xml(
        f'<w:hyperlink {nsdecls("w", "r")} r:id="{rid}"><w:r><w:rPr><w:rStyle w:val="Hyperlink"/>'
        f'<w:color w:val="0563C1"/><w:u w:val="single"/></w:rPr><w:t>{esc(text)}</w:t></w:r></w:hyperlink>'))


def runs(paragraph, *parts: tuple[str, str]) -> None:
    """Add python-docx runs: (text, flags) with flags among "b", "i", "u"."""
    for text, flags in parts:
        run = paragraph.add_run(text)
        run.bold, run.italic, run.underline = ("b" in flags) or None, ("i" in flags) or None, ("u" in flags) or None


def make_docx(path: Path) -> None:
    import docx

    d = docx.Document()
    d.add_heading("The small boat", level=1)
    runs(d.add_paragraph(), ("I see the ", ""), ("red", "b"), (" car.", ""))
    link = d.add_paragraph("The ")
    add_hyperlink(link, LINK + "boat", "small boat")
    link.add_run(" is in the garden.")
    table = d.add_table(rows=1, cols=2)
    table.style = "Table Grid"
    runs(table.cell(0, 0).paragraphs[0], ("I see a ", ""), ("fast", "i"), (" bicycle.", ""))
    runs(table.cell(0, 1).paragraphs[0], ("This fast flower is behind the ", ""), ("door", "u"), (".", ""))
    d.core_properties.created = d.core_properties.modified = WHEN.replace(tzinfo=None)
    d.save(path)
    pin_zip(path)


def make_pptx(path: Path) -> None:
    import pptx

    prs = pptx.Presentation()
    slide = prs.slides.add_slide(prs.slide_layouts[1])  # title and content
    slide.shapes.title.text = "The red car"
    body = slide.placeholders[1].text_frame
    lines = [[("I see the small ", ""), ("red", "b"), (" boat.", "")],
             [("The library is open from one o'clock to ", ""), ("eight o'clock", "i"), (".", "")],
             [("I see the ", ""), ("red house", "link"), (".", "")]]
    for n, parts in enumerate(lines):
        paragraph = body.paragraphs[0] if n == 0 else body.add_paragraph()
        for text, flags in parts:
            run = paragraph.add_run()
            run.text = text
            run.font.bold, run.font.italic = (flags == "b") or None, (flags == "i") or None
            if flags == "link":
                run.hyperlink.address = LINK + "house"
    notes = slide.notes_slide.notes_text_frame.paragraphs[0]
    for text, italic in (("I see ", None), ("blue", True), (" windows.", None)):
        run = notes.add_run()
        run.text, run.font.italic = text, italic
    prs.core_properties.created = prs.core_properties.modified = WHEN.replace(tzinfo=None)
    prs.core_properties.last_modified_by, prs.core_properties.revision = "nmt", 1
    prs.save(path)
    pin_zip(path)


def make_odt(path: Path) -> None:
    from odf.opendocument import OpenDocumentText
    from odf.style import Style, TextProperties
    from odf.text import A, H, P, Span

    doc = OpenDocumentText()
    styles = {}
    for name, props in (("Strong", {"fontweight": "bold"}), ("Emphasis", {"fontstyle": "italic", "color": "#1f5fa8"}),
                        ("Marker", {"backgroundcolor": "#ffe066"})):
        style = Style(name=name, family="text")
        style.addElement(TextProperties(**props))
        doc.automaticstyles.addElement(style)
        styles[name] = style
    doc.text.addElement(H(outlinelevel=1, text="A small ball"))
    for before, style, words, after in (("I see the ", "Strong", "red", " car."),
                                        ("This fast flower is behind the ", "Emphasis", "door", "."),
                                        ("I see a big ", "Marker", "yellow", " house.")):
        p = P(text=before)
        p.addElement(Span(stylename=styles[style], text=words))
        p.addText(after)
        doc.text.addElement(p)
    p = P(text="The ")
    p.addElement(A(href=LINK + "boat", text="small boat"))
    p.addText(" is in the garden.")
    doc.text.addElement(p)
    doc.save(str(path))
    pin_zip(path)


def make_epub(path: Path) -> None:
    from ebooklib import epub

    book = epub.EpubBook()
    book.set_identifier("nmt-document-pictures")
    book.set_title("The red car")
    book.set_language("en")
    one = epub.EpubHtml(title="The small boat", file_name="one.xhtml", lang="en")
    one.content = ("<h1>The small boat</h1><p>I see the <b>red</b> car.</p>"
                   "<p>The <em>blue</em> boat is in the garden.</p>")
    two = epub.EpubHtml(title="A small ball", file_name="two.xhtml", lang="en")
    two.content = (f'<h1>A small ball</h1><p>A small <i>ball</i> is here.</p>'
                   f'<p>I see the <a href="{LINK}">red house</a>.</p>')
    book.add_item(one)
    book.add_item(two)
    book.toc = [epub.Link("one.xhtml", "The small boat", "one"), epub.Link("two.xhtml", "A small ball", "two")]
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = ["nav", one, two]
    epub.write_epub(str(path), book, {"mtime": WHEN})
    pin_zip(path)


def write_text(text: str) -> Callable[[Path], None]:
    return lambda path: path.write_text(text, encoding="utf-8")

"""EPUB books translated keeping the format (nmt.translation.documents.epub): books built by ebooklib (EPUB 3) or by
hand (an EPUB 2 with an NCX, XHTML with self-closing tags), read back by ebooklib and lxml. A fake translator reverses
and uppercases the words (alignment i -> n-1-i), so every translated text is uppercase and inline tags must move with
their words; every member but the text-bearing ones byte-identical, in order, with its zip entry's settings."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import pytest
from lxml import etree

from nmt.errors import NmtError
from nmt.translation.documents import epub as epub_format
from nmt.translation.documents.inline import Paragraph, Piece
from tests.helpers.cli import run_cli
from tests.helpers.documents import reverse_upper
from tests.helpers.paths import DEMO_MODEL

ebooklib = pytest.importorskip("ebooklib")
from ebooklib import epub  # noqa: E402

CHECKPOINT = DEMO_MODEL
XHTML = "{http://www.w3.org/1999/xhtml}"
NCX = "{http://www.daisy.org/z3986/2005/ncx/}"
PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000") + bytes(40)
TAG = re.compile(r"<[^>]*>")
ONE = ('<h1>The first chapter</h1><p>The <b>red</b> car and <i>a <a href="#x">link</a></i>.</p>'
       '<p>Line one<br/>line two &amp; more.</p>')


def identity(paragraphs: list[Paragraph]) -> list[list[Piece]]:
    return [p.render(list(p.texts)) for p in paragraphs]


def members(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as z:
        return {name: z.read(name) for name in z.namelist()}


def entries(path: Path) -> list[tuple[str, int, tuple[int, ...]]]:
    with zipfile.ZipFile(path) as z:
        return [(i.filename, i.compress_type, i.date_time) for i in z.infolist()]


def body_text(data: bytes) -> str:
    body = etree.fromstring(data).find(f"{XHTML}body")
    return " ".join("".join(body.itertext()).split())


def make_book(path: Path, title: str = "The red car", first: str = ONE) -> Path:
    """An EPUB 3 by ebooklib: two chapters (`first`, and one with an image), CSS, a PNG, a nav and an NCX."""
    b = epub.EpubBook()
    b.set_identifier("nmt-test-book")
    b.set_title(title)
    b.set_language("en")
    b.add_author("Jane Doe")
    b.add_metadata("DC", "description", "A short book about cars.")
    css = epub.EpubItem(uid="style", file_name="style/main.css", media_type="text/css", content=b"p { color: red; }")
    image = epub.EpubItem(uid="cover", file_name="images/car.png", media_type="image/png", content=PNG)
    one = epub.EpubHtml(title="First chapter", file_name="one.xhtml", lang="en")
    one.content = first
    two = epub.EpubHtml(title="Second chapter", file_name="two.xhtml", lang="en")
    two.content = '<h2>Another heading</h2><p>A blue <img src="images/car.png" alt="car"/> truck drives.</p>'
    for item in (css, image, one, two):
        b.add_item(item)
    one.add_item(css)
    b.toc = [epub.Link("one.xhtml", "First chapter", "one"), epub.Link("two.xhtml", "Second chapter", "two")]
    b.add_item(epub.EpubNcx())
    b.add_item(epub.EpubNav())
    b.spine = ["nav", one, two]
    epub.write_epub(str(path), b)
    return path


@pytest.fixture
def book(tmp_path: Path) -> Path:
    return make_book(tmp_path / "book.epub")


def test_ebooklib_book_translated_tags_on_their_words_rest_byte_identical(book: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.epub"
    # one: title, h1, 2 paragraphs; two: title, h2, 1; nav: title, h2, 2 links; ncx: docTitle, 2 labels; opf: 2
    assert epub_format.translate(book, out, reverse_upper) == 17
    before, after = members(book), members(out)
    assert entries(out) == entries(book)  # order, names, dates, compression
    assert next(iter(after)) == "mimetype" and entries(out)[0][1] == zipfile.ZIP_STORED
    changed = {name for name in before if before[name] != after[name]}
    assert changed == {"EPUB/content.opf", "EPUB/one.xhtml", "EPUB/two.xhtml", "EPUB/nav.xhtml", "EPUB/toc.ncx"}
    for name in changed - {"EPUB/content.opf", "EPUB/toc.ncx"}:
        etree.fromstring(after[name])  # well-formed XML
        assert sorted(TAG.findall(after[name].decode())) == sorted(TAG.findall(before[name].decode())), name
        assert not re.search("[a-z]", body_text(after[name])), body_text(after[name])  # all text translated

    read = epub.read_epub(str(out))  # opens in ebooklib
    assert read.get_metadata("DC", "title")[0][0] == "CAR RED THE"
    assert read.get_metadata("DC", "description")[0][0] == "CARS. ABOUT BOOK SHORT A"
    assert read.get_metadata("DC", "creator")[0][0] == "Jane Doe"  # authors are not translated
    assert read.get_item_with_href("style/main.css").get_content() == b"p { color: red; }"
    assert read.get_item_with_href("images/car.png").get_content() == PNG

    one = etree.fromstring(after["EPUB/one.xhtml"])
    assert one.findtext(f"{XHTML}head/{XHTML}title") == "CHAPTER FIRST"
    p = one.find(f"{XHTML}body/{XHTML}p")
    assert p.findtext(f"{XHTML}b") == "RED"
    link = p.find(f"{XHTML}i/{XHTML}a")
    assert link.text == "LINK" and link.get("href") == "#x"
    assert "".join(p.itertext()).split() == ["LINK.", "A", "AND", "CAR", "RED", "THE"]
    assert b"<br/>" in after["EPUB/one.xhtml"] and "&amp;" in after["EPUB/one.xhtml"].decode()
    two = etree.fromstring(after["EPUB/two.xhtml"])
    assert two.find(f".//{XHTML}p/{XHTML}img").get("src") == "images/car.png"  # an inline atom, kept
    nav = etree.fromstring(after["EPUB/nav.xhtml"])
    assert [a.text for a in nav.iter(f"{XHTML}a")] == ["CHAPTER FIRST", "CHAPTER SECOND"]
    opf_outside = [re.sub(rb"<dc:(title|description)>[^<]*<", b"", data)
                   for data in (before["EPUB/content.opf"], after["EPUB/content.opf"])]
    assert opf_outside[0] == opf_outside[1]  # the OPF byte-identical but for the two texts


def test_identity_translation_is_byte_exact(book: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.epub"
    assert epub_format.translate(book, out, identity) == 17
    assert members(out) == members(book) and entries(out) == entries(book)


CONTAINER = b"""<?xml version="1.0"?>
<container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">
  <rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/></rootfiles>
</container>"""
OPF = b"""<?xml version="1.0" encoding="UTF-8"?>
<package xmlns="http://www.idpf.org/2007/opf" version="2.0" unique-identifier="uid">
  <metadata xmlns:dc="http://purl.org/dc/elements/1.1/" xmlns:opf="http://www.idpf.org/2007/opf">
    <dc:title>A small book</dc:title><dc:identifier id="uid">urn:uuid:1234</dc:identifier>
    <dc:language>en</dc:language><dc:creator opf:role="aut">John Smith</dc:creator>
    <dc:description>&lt;p&gt;Some &lt;b&gt;html&lt;/b&gt; here&lt;/p&gt;</dc:description>
  </metadata>
  <manifest>
    <item id="ncx" href="toc.ncx" media-type="application/x-dtbncx+xml"/>
    <item id="ch1" href="Text/chapter%201.xhtml" media-type="application/xhtml+xml"/>
  </manifest>
  <spine toc="ncx"><itemref idref="ch1"/></spine>
</package>"""
NCX_XML = b"""<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE ncx PUBLIC "-//NISO//DTD ncx 2005-1//EN" "http://www.daisy.org/z3986/2005/ncx-2005-1.dtd">
<ncx xmlns="http://www.daisy.org/z3986/2005/ncx/" version="2005-1">
  <head><meta name="dtb:uid" content="urn:uuid:1234"/></head>
  <docTitle><text>A small book</text></docTitle>
  <docAuthor><text>John Smith</text></docAuthor>
  <navMap>
    <navPoint id="n1" playOrder="1"><navLabel><text>The first chapter</text></navLabel>
      <content src="Text/chapter%201.xhtml"/>
      <navPoint id="n2" playOrder="2"><navLabel><text>A green house</text></navLabel>
        <content src="Text/chapter%201.xhtml#s2"/></navPoint>
    </navPoint>
  </navMap>
  <pageList><pageTarget id="p5" type="normal" value="5"><navLabel><text>v</text></navLabel>
    <content src="Text/chapter%201.xhtml#p5"/></pageTarget></pageList>
</ncx>"""
CHAPTER = """\ufeff<?xml version="1.0" encoding="utf-8"?>\r
<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.1//EN" "http://www.w3.org/TR/xhtml11/DTD/xhtml11.dtd">\r
<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops">\r
<head><title>The first chapter</title><link rel="stylesheet" href="../s.css" type="text/css"/>\r
<script type="text/javascript" src="../x.js"/></head>\r
<body><h1 id="s1">The first chapter</h1>\r
<p class="c"><em>Some <span epub:type="pagebreak" id="p5" title="5"/> old words</em> stay here.<br/>A new line\r
  follows <code/> this one.</p>\r
<p><span class="notranslate">keep me</span> but translate me.</p>\r
<svg xmlns="http://www.w3.org/2000/svg"><text>an image text</text></svg>\r
</body></html>\r
""".encode()


def hand_epub(path: Path, extra: dict[str, bytes] | None = None, drop: str = "", **replace: bytes) -> Path:
    """An EPUB 2 by hand: mimetype stored first, then container, OPF, NCX and one chapter (`replace` by key)."""
    parts = {"mimetype": b"application/epub+zip", "META-INF/container.xml": CONTAINER, "OEBPS/content.opf": OPF,
             "OEBPS/toc.ncx": NCX_XML, "OEBPS/Text/chapter 1.xhtml": CHAPTER, "OEBPS/s.css": b"em { x: y }",
             **(extra or {})}
    for key, data in replace.items():
        parts[{"container": "META-INF/container.xml", "opf": "OEBPS/content.opf", "chapter":
               "OEBPS/Text/chapter 1.xhtml"}[key]] = data
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in parts.items():
            if name != drop:
                z.writestr(name, data, zipfile.ZIP_STORED if name == "mimetype" else zipfile.ZIP_DEFLATED)
    return path


def test_epub2_ncx_labels_and_xhtml_specifics(tmp_path: Path) -> None:
    src, out = hand_epub(tmp_path / "two.epub"), tmp_path / "out.epub"
    # chapter: title, h1, the first <p> in two (<br/> ends a paragraph), the second (the svg text is kept: a drawing's
    # labels are placed at coordinates); ncx: docTitle and two navLabels (not docAuthor, nor the page list); opf:
    # dc:title (the description holds escaped HTML)
    assert epub_format.translate(src, out, reverse_upper) == 9
    before, after = members(src), members(out)
    ncx = etree.fromstring(after["OEBPS/toc.ncx"])
    assert [t.text for t in ncx.iter(f"{NCX}text")] == ["BOOK SMALL A", "John Smith", "CHAPTER FIRST THE",
                                                        "HOUSE GREEN A", "v"]
    assert TAG.findall(after["OEBPS/toc.ncx"].decode()) == TAG.findall(NCX_XML.decode())
    assert b"<dc:title>BOOK SMALL A</dc:title>" in after["OEBPS/content.opf"]
    assert after["OEBPS/content.opf"].replace(b"BOOK SMALL A", b"A small book") == OPF  # escaped HTML kept
    chapter = after["OEBPS/Text/chapter 1.xhtml"]
    # BOM and CRLFs kept, but the one inside a translated sentence (its whitespace is the translation's)
    assert chapter.startswith(CHAPTER[:60]) and chapter.count(b"\r\n") == CHAPTER.count(b"\r\n") - 1
    assert b"\n" not in chapter.replace(b"\r\n", b"")
    root = etree.fromstring(chapter.removeprefix("\ufeff".encode()))  # well-formed
    assert root.findtext(f"{XHTML}head/{XHTML}title") == "CHAPTER FIRST THE"
    p = root.find(f"{XHTML}body/{XHTML}p")
    em = p.find(f"{XHTML}em")
    assert em.find(f"{XHTML}span").get("id") == "p5" and "".join(em.itertext()).split() == ["WORDS", "OLD", "SOME"]
    assert "FOLLOWS" in "".join(p.itertext()) and "ONE. THIS" in "".join(p.itertext())  # after <code/>, translated
    assert b'<span class="notranslate">keep me</span> ME. TRANSLATE BUT' in chapter
    assert b"<text>an image text</text>" in chapter
    assert sorted(TAG.findall(chapter.decode())) == sorted(TAG.findall(CHAPTER.decode()))
    changed = [name for name in before if before[name] != after[name]]
    assert changed == ["OEBPS/content.opf", "OEBPS/toc.ncx", "OEBPS/Text/chapter 1.xhtml"]  # not mimetype, css...
    assert entries(out) == entries(src)


FONT_ENCRYPTION = b"""<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container"
  xmlns:enc="http://www.w3.org/2001/04/xmlenc#"><enc:EncryptedData>
  <enc:EncryptionMethod Algorithm="%s"/>
  <enc:CipherData><enc:CipherReference URI="%s"/></enc:CipherData></enc:EncryptedData></encryption>"""


def test_font_obfuscation_is_not_drm(tmp_path: Path) -> None:
    encryption = FONT_ENCRYPTION % (b"http://www.idpf.org/2008/embedding", b"OEBPS/font.otf")
    src = hand_epub(tmp_path / "fonts.epub", {"META-INF/encryption.xml": encryption, "OEBPS/font.otf": b"\x01\x02"})
    out = tmp_path / "out.epub"
    assert epub_format.translate(src, out, reverse_upper) == 9
    assert members(out)["OEBPS/font.otf"] == b"\x01\x02"
    assert members(out)["META-INF/encryption.xml"] == encryption


def refused(src: Path, tmp_path: Path, pattern: str) -> None:
    out = tmp_path / "refused.epub"
    with pytest.raises(NmtError, match=pattern) as e:
        epub_format.translate(src, out, reverse_upper)
    assert "\n" not in str(e.value)
    assert not out.exists()


def test_bad_books_refused_in_one_line(tmp_path: Path) -> None:
    aes = FONT_ENCRYPTION % (b"http://www.w3.org/2001/04/xmlenc#aes128-cbc", b"OEBPS/Text/chapter%201.xhtml")
    refused(hand_epub(tmp_path / "drm.epub", {"META-INF/encryption.xml": aes}), tmp_path, "DRM-encrypted EPUB")
    refused(hand_epub(tmp_path / "adobe.epub", {"META-INF/rights.xml": b"<rights/>"}), tmp_path, "DRM-protected")
    refused(hand_epub(tmp_path / "nocontainer.epub", drop="META-INF/container.xml"), tmp_path,
            "no META-INF/container.xml")
    refused(hand_epub(tmp_path / "norootfile.epub", container=b"<container><rootfiles/></container>"), tmp_path,
            "not an EPUB: META-INF/container.xml names no package")
    refused(hand_epub(tmp_path / "noopf.epub", drop="OEBPS/content.opf"), tmp_path,
            "not an EPUB: its package OEBPS/content.opf .* is missing")
    refused(hand_epub(tmp_path / "notopf.epub", opf=b"<html/>"), tmp_path, "not an EPUB: .* not an OPF package")
    refused(hand_epub(tmp_path / "badxml.epub", opf=b"<package><unclosed>"), tmp_path, "corrupt EPUB")
    refused(hand_epub(tmp_path / "latin1.epub", chapter=CHAPTER.replace(b"first", "f\xefrst".encode("latin-1"))),
            tmp_path, "not UTF-8")
    data = hand_epub(tmp_path / "whole.epub").read_bytes()
    (tmp_path / "cut.epub").write_bytes(data[:len(data) // 2])
    refused(tmp_path / "cut.epub", tmp_path, "corrupt EPUB")
    # zip bombs are SafeZip's (tests/translation/documents/test_documents_office.py); one through the EPUB path
    refused(hand_epub(tmp_path / "bomb.epub", {"OEBPS/zeros.png": bytes(50 * 2**20)}), tmp_path, "zip bomb")


def test_cli_translates_an_epub_with_the_demo_model(tmp_path: Path) -> None:
    src = make_book(tmp_path / "demo.epub", "the red car", "<h1>three red cars</h1><p>the <b>red</b> car</p>")
    out = tmp_path / "demo-de.epub"
    result = run_cli("translate", "--checkpoint", CHECKPOINT, "-i", src, "-o", out)
    assert result.exit_code == 0, result.stderr
    read = epub.read_epub(str(out))
    assert read.get_metadata("DC", "title")[0][0] == "das rote Auto"
    text = read.get_item_with_href("one.xhtml").get_content().decode()
    assert "<h1>drei rote Autos</h1>" in text and "<p>das <b>rote</b> Auto</p>" in text
    assert members(out)["EPUB/style/main.css"] == members(src)["EPUB/style/main.css"]

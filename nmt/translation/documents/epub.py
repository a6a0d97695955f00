"""EPUB e-books (2 and 3): the text readers see translated by sentence across its inline formatting; every other
byte of the book as it was.

Translated: each manifest item of media type application/xhtml+xml (the content documents, and EPUB 3's navigation
document: its chapter titles are what a reader's table of contents shows), through the HTML path
(nmt.translation.documents.html, as XHTML: the <?xml?> declaration, namespaces, "<br/>" and every other tag kept byte
for byte, only the text between them written anew, escaped, so the document stays well-formed XML); the EPUB 2 NCX
(application/x-dtbncx+xml): the <text> of each navLabel and of the docTitle, each a paragraph of its own (page
list labels are numbers and stay); in the OPF package, the book's dc:title and dc:description (a description
holding escaped HTML stays as it is). Not translated: CSS, images, fonts, the mimetype, container.xml, and the rest
of the OPF (identifiers, authors, manifest, spine, and the language: dc:language and the documents' lang attributes
still name the source's), copied byte-identical with their zip entries' order, names, dates and compression
(mimetype first and stored stays so: nmt.translation.documents.safezip). Members are read, translated and written one at
a time (a member's paragraphs go to the model in one call), so memory follows the largest member, not the book.

Worked on the zip with SafeZip and on each member's source text (the HTML parser's slices), not through ebooklib
(the tests build and read books with it): ebooklib re-serializes the OPF, the NCX and every document on save;
here a member whose text did not change comes back byte for byte. Members are UTF-8 (EPUB 3 requires it; anything
else is refused in one line). Refused in one line: a DRM-protected book (META-INF/rights.xml, or encryption.xml
naming any algorithm but font obfuscation: the text is unreadable; obfuscated fonts alone are copied as they are,
their key, the unique identifier, unchanged), a missing or invalid container.xml or OPF, and whatever SafeZip
refuses (corrupt or encrypted zips, zip bombs)."""

from __future__ import annotations

import html
import posixpath
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote

from nmt import workbudget
from nmt.translation.documents.html import HtmlDoc, parse_html
from nmt.translation.documents.html_inline import HtmlParagraph, text_tokens
from nmt.translation.documents.html_source import source_slices
from nmt.translation.documents.safezip import SafeZip, open_zip, removed_on_error
from nmt.translation.documents.txt import TranslateParagraphs

CONTAINER = "META-INF/container.xml"
OPF_NS = "{http://www.idpf.org/2007/opf}"
CONTAINER_NS = "{urn:oasis:names:tc:opendocument:xmlns:container}"
ENC_NS = "{http://www.w3.org/2001/04/xmlenc#}"
XHTML, NCX = "application/xhtml+xml", "application/x-dtbncx+xml"
# IDPF and Adobe font obfuscation: fonts mangled with the book's identifier, not DRM (the text is readable)
FONT_OBFUSCATION = frozenset({"http://www.idpf.org/2008/embedding", "http://ns.adobe.com/pdf/enc#RC"})
BOM = "\ufeff"

Stack = list[str]  # the local names of the open elements, outermost first


def translate(src: Path, dst: Path, translate_paragraphs: TranslateParagraphs) -> int:
    """`src` translated into `dst`, one member at a time as the output is written; the number of paragraphs
    translated."""
    count = 0

    def translated(name: str) -> bytes | None:
        nonlocal count
        if name not in kinds:
            return None
        source = box.read(name)
        workbudget.current().charge("xml_bytes", len(source))
        doc = _parse(box, name, source, kinds[name])
        paragraphs = doc.paragraphs()
        count += len(paragraphs)
        return _encode(doc.write(translate_paragraphs(paragraphs) if paragraphs else []), source)

    with removed_on_error(dst), open_zip(src, "EPUB", CONTAINER) as box:
        _refuse_drm(box)
        opf = _package_path(box)
        kinds = dict([(opf, "opf"), *_text_items(box, opf)])
        box.write(dst, translated)
    return count


def _refuse_drm(box: SafeZip) -> None:
    """A DRM-protected book: one line saying why it cannot be translated."""
    if "META-INF/rights.xml" in box.names():
        raise box.error("DRM-protected EPUB (META-INF/rights.xml): its text is encrypted, so it cannot be translated")
    if "META-INF/encryption.xml" in box.names():
        methods = box.xml("META-INF/encryption.xml").getroot().iter(f"{ENC_NS}EncryptionMethod")
        if any(m.get("Algorithm") not in FONT_OBFUSCATION for m in methods):
            raise box.error("DRM-encrypted EPUB (META-INF/encryption.xml): its content is encrypted, so it cannot "
                            "be translated")


def _package_path(box: SafeZip) -> str:
    """The OPF package's member name, from container.xml's first rootfile: the default rendition, which every reading
    system opens; another rendition (the IDPF sample WCAG.epub's pre-translated braille) is kept as it is."""
    root = box.xml(CONTAINER).getroot()
    rootfile = next(root.iter(f"{CONTAINER_NS}rootfile"), None)
    path = rootfile.get("full-path") if rootfile is not None else None
    if not path:
        raise box.error("not an EPUB: META-INF/container.xml names no package (rootfile full-path)")
    if path not in box.names():
        raise box.error(f"not an EPUB: its package {path} (named by META-INF/container.xml) is missing")
    return path


def _text_items(box: SafeZip, opf: str) -> list[tuple[str, str]]:
    """(member, "xhtml" or "ncx") of the manifest's items that hold text, in manifest order; missing ones skipped."""
    root = box.xml(opf).getroot()
    manifest = root.find(f"{OPF_NS}manifest")
    if _local(root.tag) != "package" or manifest is None:
        raise box.error(f"not an EPUB: {opf} is not an OPF package with a manifest")
    kinds = {XHTML: "xhtml", NCX: "ncx"}
    items = []
    for item in manifest.iter(f"{OPF_NS}item"):
        name = posixpath.normpath(posixpath.join(posixpath.dirname(opf), unquote(item.get("href", ""))))
        if item.get("media-type") in kinds and name in box.names() and name != opf:
            items.append((name, kinds[item.get("media-type", "")]))
    return list(dict.fromkeys(items))


def _local(tag: object) -> str:
    """An element's local name: "a" of "{ns}a" or of "dc:a"."""
    return str(tag).rsplit("}", 1)[-1].rsplit(":", 1)[-1]


def _parse(box: SafeZip, name: str, data: bytes, kind: str) -> HtmlDoc:
    """A member's text cut into paragraphs to translate and the markup around them."""
    try:
        text = data.decode("utf-8").removeprefix(BOM)
    except UnicodeDecodeError as e:
        raise box.error(f"{name} is not UTF-8 (byte at offset {e.start}): EPUB text documents must be") from None
    if kind == "xhtml":
        return parse_html(text, xml=True)
    return _labels(text, _ncx_label if kind == "ncx" else _opf_title)


def _ncx_label(stack: Stack, text: str) -> bool:
    return stack[-2:] in (["navlabel", "text"], ["doctitle", "text"]) and "pagelist" not in stack


def _opf_title(stack: Stack, text: str) -> bool:
    return (stack[-2:] in (["metadata", "title"], ["metadata", "description"], ["dc-metadata", "title"],
                           ["dc-metadata", "description"]) and "<" not in html.unescape(text))


def _labels(text: str, wanted: Callable[[Stack, str], bool]) -> HtmlDoc:
    """An XML member whose wanted text nodes are each a paragraph (`wanted(open elements, raw text)`), the rest of
    its bytes markup kept as they are."""
    doc, stack = HtmlDoc(texts=[]), []
    for raw, kind, tag in source_slices(text, xml=True):
        name = _local(tag)
        if kind == "start":
            stack.append(name)
        elif kind == "end" and name in stack:
            del stack[len(stack) - 1 - stack[::-1].index(name):]
        if kind == "text" and wanted(stack, raw):
            paragraph = HtmlParagraph(text_tokens(raw))
            doc.texts.extend(paragraph.texts)
            doc.parts.append(paragraph)
        else:
            doc.parts.append(raw)
    return doc


def _encode(text: str, original: bytes) -> bytes:
    """The member's bytes: UTF-8, with the BOM it had."""
    return ((BOM if original.startswith(BOM.encode()) else "") + text).encode("utf-8")

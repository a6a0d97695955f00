"""Property: a random document of any format (small: random bytes, random text, random XML in the parts of a zip
container, random inline markup in valid skeletons) translated with a fast fake translator either succeeds or is
refused with one NmtError line; nothing else escapes (no ValueError, KeyError, lxml error, traceback)."""

from __future__ import annotations

import io
import tempfile
import zipfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nmt import workbudget
from nmt.errors import NmtError
from nmt.translation.documents import format_module
from tests.helpers.documents import reverse_upper

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
A = "http://schemas.openxmlformats.org/drawingml/2006/main"
TEXT = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
OFFICE = "urn:oasis:names:tc:opendocument:xmlns:office:1.0"
WORDS = st.sampled_from(["red", "car", " ", "two ", "Bikes.", "1?", "&amp;", "é", "&lt;", "\t", "中文", "a b"])
TEXTS = st.lists(WORDS, max_size=6).map("".join)


ATTRIBUTES = ' w:id="1" text:style-name="s"'


def markup(tags: list[str]) -> st.SearchStrategy[str]:
    """Well-formed XML fragments of `tags` (attributes, comments, PIs, entity references included)."""
    leaf = st.one_of(TEXTS, st.just("<!-- c -->"), st.just("<?pi x?>"), st.just("&e;"),
                     st.sampled_from(tags).map(lambda t: f"<{t}/>"))

    def element(children: st.SearchStrategy[list[str]]) -> st.SearchStrategy[str]:
        return st.tuples(st.sampled_from(tags), children, st.booleans()).map(
            lambda x: f"<{x[0]}{ATTRIBUTES if x[2] else ''}>{''.join(x[1])}</{x[0]}>")

    return st.recursive(leaf, lambda c: element(st.lists(c, max_size=4)), max_leaves=20)


OOXML_TAGS = ["w:p", "w:r", "w:t", "w:rPr", "w:b", "w:hyperlink", "w:fldChar", "w:tab", "w:bookmarkStart",
              "w:bookmarkEnd", "w:commentRangeStart", "w:ins", "a:p", "a:r", "a:t", "a:rPr", "a:br", "x"]
ODF_TAGS = ["text:p", "text:h", "text:span", "text:a", "text:s", "text:note", "text:note-body", "x"]
DOCTYPE = '<!DOCTYPE d [<!ENTITY e "zz">]>'


def zipped(members: dict[str, str | bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buffer.getvalue()


def ooxml(fmt: str, inner: str) -> bytes:
    ns = f'xmlns:w="{W}" xmlns:a="{A}" xmlns:text="{TEXT}"'
    main = {"docx": "word/document.xml", "pptx": "ppt/presentation.xml"}[fmt]
    part = {"docx": "word/document.xml", "pptx": "ppt/slides/slide1.xml"}[fmt]
    members = {"[Content_Types].xml": "<Types/>", main: f"<x {ns}/>"}
    p = "w" if fmt == "docx" else "a"  # random markup inside a paragraph that has a run of text
    inner = f"<{p}:p><{p}:r><{p}:t>two red cars</{p}:t></{p}:r>{inner}</{p}:p>{inner}"
    members[part] = f'<?xml version="1.0"?>{DOCTYPE}<w:document {ns}><w:body>{inner}</w:body></w:document>'
    return zipped(members)


def odt(inner: str) -> bytes:
    ns = f'xmlns:office="{OFFICE}" xmlns:text="{TEXT}" xmlns:w="{W}"'
    return zipped({"mimetype": "application/vnd.oasis.opendocument.text",
                   "content.xml": f"{DOCTYPE}<office:document-content {ns}><office:body><text:p>two red {inner} "
                                  f"cars</text:p>{inner}</office:body>"
                                  "</office:document-content>"})


def epub(inner: str) -> bytes:
    container = ('<container xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles><rootfile '
                 'full-path="OEBPS/content.opf"/></rootfiles></container>')
    opf = ('<package xmlns="http://www.idpf.org/2007/opf"><metadata><title>A red car</title></metadata><manifest>'
           '<item href="c.xhtml" media-type="application/xhtml+xml"/></manifest></package>')
    xhtml = f'<html xmlns="http://www.w3.org/1999/xhtml"><body><p>two red {inner} cars</p>{inner}</body></html>'
    return zipped({"mimetype": "application/epub+zip", "META-INF/container.xml": container,
                   "OEBPS/content.opf": opf, "OEBPS/c.xhtml": xhtml})


HTML_TAGS = ["p", "b", "i", "a", "span", "br", "div", "ruby", "script", "x:y"]
TEXT_FORMATS = {"txt": st.text(max_size=200),
                "md": st.lists(st.sampled_from(["# ", "- ", "**", "`", "```\n", "[a](b)", "\n", "> ", "1. "])
                               | TEXTS, max_size=15).map("".join),
                "html": markup(HTML_TAGS),
                "srt": st.lists(st.sampled_from(["1\n", "00:00:01,000 --> 00:00:02,000\n", "\n", "<i>", "</i>"])
                                | TEXTS, max_size=15).map("".join),
                "vtt": st.lists(st.sampled_from(["WEBVTT\n\n", "00:01.000 --> 00:02.000\n", "\n", "<b>", "NOTE "])
                                | TEXTS, max_size=15).map(lambda parts: "WEBVTT\n\n" + "".join(parts))}
DOCUMENTS = st.one_of(
    *[st.tuples(st.just(fmt), s.map(lambda t: t.encode("utf-8"))) for fmt, s in TEXT_FORMATS.items()],
    st.tuples(st.sampled_from(["docx", "pptx"]), markup(OOXML_TAGS)).map(lambda x: (x[0], ooxml(*x))),
    markup(ODF_TAGS).map(lambda m: ("odt", odt(m))),
    markup(HTML_TAGS).map(lambda m: ("epub", epub(m))),
    st.tuples(st.sampled_from(["docx", "pptx", "odt", "epub"]), st.binary(max_size=300)).map(
        lambda x: (x[0], b"PK\x03\x04" + x[1] if x[1][:1] == b"P" else x[1])),
    st.tuples(st.sampled_from(list(TEXT_FORMATS)), st.binary(max_size=200)),
    st.tuples(st.sampled_from(["docx", "odt"]), TEXTS).map(  # text that is not XML in a part
        lambda x: (x[0], zipped({"word/document.xml" if x[0] == "docx" else "content.xml": x[1]}))),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(DOCUMENTS)
def test_random_documents_translate_or_are_refused_in_one_line(document: tuple[str, bytes]) -> None:
    fmt, data = document
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / f"in.{fmt}", Path(tmp) / f"out.{fmt}"
        src.write_bytes(data)
        try:
            with workbudget.bounded(workbudget.WorkBudget(src.name)):
                format_module(fmt).translate(src, dst, reverse_upper)
        except NmtError as e:
            assert "\n" not in str(e)
            return
        assert dst.exists()

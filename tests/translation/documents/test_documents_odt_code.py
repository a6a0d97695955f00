"""ODT inline code by automatic style (issue 46): LibreOffice writes inline code it imports (a .docx run in Courier
New, an HTML page's monospace span) as a span in an automatic style (T1, T3...) whose text properties name a
monospaced font, or which derives from Source Text; such spans are kept as written, their neighbours translated with
their spaces. The fixtures are written as `soffice --headless --convert-to odt` writes them (LibreOffice 7): font-face
declarations with or without `style:font-pitch`, automatic styles in content.xml, named styles in styles.xml."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import pytest
from lxml import etree

from nmt.translation.documents import odt as odt_format
from nmt.translation.documents.codefont import monospaced
from nmt.translation.documents.odt_styles import StyleTable
from tests.helpers.documents import upper

NS = ('xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
      'xmlns:style="urn:oasis:names:tc:opendocument:xmlns:style:1.0" '
      'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" '
      'xmlns:fo="urn:oasis:names:tc:opendocument:xmlns:xsl-fo-compatible:1.0" '
      'xmlns:svg="urn:oasis:names:tc:opendocument:xmlns:svg-compatible:1.0"')
# As LibreOffice declares fonts: fixed pitch for a monospaced font it knows (from HTML), none for a family named in
# CSS, "variable" for every font imported from a .docx, Courier New included.
FONTS = ('<office:font-face-decls>'
         '<style:font-face style:name="Liberation Mono" svg:font-family="&apos;Liberation Mono&apos;" '
         'style:font-family-generic="modern" style:font-pitch="fixed"/>'
         '<style:font-face style:name="DejaVu Sans Mono" svg:font-family="&apos;DejaVu Sans Mono&apos;"/>'
         '<style:font-face style:name="Courier New" svg:font-family="&apos;Courier New&apos;" '
         'style:font-family-generic="roman" style:font-pitch="variable"/>'
         '<style:font-face style:name="Terminus" svg:font-family="Terminus" style:font-pitch="fixed"/>'
         '<style:font-face style:name="ＭＳ ゴシック" svg:font-family="&apos;ＭＳ ゴシック&apos;" '
         'style:font-family-generic="modern" style:font-pitch="fixed"/>'
         '<style:font-face style:name="Arial" svg:font-family="Arial" style:font-pitch="variable"/>'
         '</office:font-face-decls>')


def text_style(name: str, properties: str = "", parent: str = "") -> str:
    """An automatic or named character style as LibreOffice writes it."""
    parent = f' style:parent-style-name="{parent}"' if parent else ""
    props = f"<style:text-properties {properties}/>" if properties else ""
    return f'<style:style style:name="{name}" style:family="text"{parent}>{props}</style:style>'


AUTOMATIC = (text_style("T1", 'style:font-name="Liberation Mono"')
             + text_style("T2", 'style:font-name="Courier New"')
             + text_style("T3", 'style:font-name="DejaVu Sans Mono" fo:font-weight="bold"')
             + text_style("T4", 'fo:font-weight="bold"', parent="Source_20_Text")
             + text_style("T5", 'style:font-name="Arial"')
             + text_style("T6", 'fo:font-style="italic"', parent="Code_20_Char")
             + text_style("T7", 'style:font-name="Terminus"')
             + text_style("T8", 'style:font-name="ＭＳ ゴシック"')
             + text_style("T9", 'fo:font-family="&apos;Courier New&apos;, monospace"'))


def span(style: str, text: str) -> str:
    return f'<text:span text:style-name="{style}">{text}</text:span>'


def content_xml(body: str) -> str:
    """content.xml with FONTS and AUTOMATIC, `body` its text."""
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<office:document-content {NS} office:version="1.3">{FONTS}'
            f'<office:automatic-styles>{AUTOMATIC}</office:automatic-styles><office:body><office:text>{body}'
            '</office:text></office:body></office:document-content>')


def odt(path: Path, body: str, styles_first: bool = False, header: str = "") -> Path:
    """An .odt: content_xml(body), styles.xml with a named "Code Char" style in Consolas (its font declared there
    only) and a master page whose header is `header`."""
    content = content_xml(body)
    styles = (f'<?xml version="1.0" encoding="UTF-8"?>\n<office:document-styles {NS} office:version="1.3">'
              '<office:font-face-decls><style:font-face style:name="Consolas" svg:font-family="Consolas" '
              'style:font-pitch="variable"/></office:font-face-decls><office:styles>'
              + text_style("Source_20_Text", 'style:font-name="Liberation Mono"')
              + text_style("Code_20_Char", 'style:font-name="Consolas"') + '</office:styles><office:automatic-styles>'
              + text_style("T1", 'style:font-name="Consolas"') + '</office:automatic-styles>'
              '<office:master-styles><style:master-page style:name="Standard"><style:header>'
              f'{header}</style:header></style:master-page></office:master-styles></office:document-styles>')
    members = [("content.xml", content), ("styles.xml", styles)]
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("mimetype", "application/vnd.oasis.opendocument.text", zipfile.ZIP_STORED)
        for name, data in members[::-1] if styles_first else members:
            z.writestr(name, data)
    return path


def translated(tmp_path: Path, body: str, styles_first: bool = False, header: str = "") -> tuple[str, str]:
    """content.xml's and styles.xml's text after translating with `upper` (words in order, uppercased)."""
    out = tmp_path / "out.odt"
    odt_format.translate(odt(tmp_path / "in.odt", body, styles_first, header), out, upper)
    with zipfile.ZipFile(out) as z:
        return z.read("content.xml").decode(), z.read("styles.xml").decode()


def paragraphs(xml: str) -> list[str]:
    return re.findall(r"<text:p>(.*?)</text:p>", xml)


def test_a_span_in_an_automatic_style_with_a_monospaced_font_is_kept(tmp_path: Path) -> None:
    body = (f"<text:p>Run {span('T1', 'make test')} before you push.</text:p>"  # Liberation Mono, fixed pitch
            f"<text:p>Then type {span('T2', 'git push')} and {span('T3', 'ls -l')} here.</text:p>"  # no pitch known
            f"<text:p>Open {span('T9', 'settings.ini')} in the {span('T5', 'blue')} window.</text:p>")  # fo:font-family
    content, _ = translated(tmp_path, body)
    assert paragraphs(content) == [
        f"RUN {span('T1', 'make test')} BEFORE YOU PUSH.",
        f"THEN TYPE {span('T2', 'git push')} AND {span('T3', 'ls -l')} HERE.",
        f"OPEN {span('T9', 'settings.ini')} IN THE {span('T5', 'BLUE')} WINDOW."]  # Arial is no code font


def test_a_style_deriving_from_source_text_or_a_named_code_font_style_is_code(tmp_path: Path) -> None:
    # T4: Source Text made bold (its parent named for code); T6: a user's "Code Char" style in Consolas (declared in
    # styles.xml only) made italic. Either member order: pandoc writes content.xml first, LibreOffice styles.xml.
    body = f"<text:p>Call {span('T4', 'main()')} or {span('T6', 'exit(1)')} to stop.</text:p>"
    for styles_first in (False, True):
        content, _ = translated(tmp_path, body, styles_first)
        assert paragraphs(content) == [f"CALL {span('T4', 'main()')} OR {span('T6', 'exit(1)')} TO STOP."]


def test_a_fixed_pitch_declaration_is_code_but_a_cjk_font_is_prose(tmp_path: Path) -> None:
    body = f"<text:p>Press {span('T7', 'F10 key')} and read {span('T8', 'this note')} now.</text:p>"
    content, _ = translated(tmp_path, body)
    assert paragraphs(content) == [f"PRESS {span('T7', 'F10 key')} AND READ {span('T8', 'THIS NOTE')} NOW."]


def test_a_paragraph_all_in_a_monospaced_font_is_prose(tmp_path: Path) -> None:
    # a screenplay in Courier: no prose around the span, so the font says nothing; a span named for code is code
    body = (f"<text:p>{span('T2', 'The car stops.')} <text:s/></text:p>"
            f"<text:p>{span('Source_20_Text', 'make test')}</text:p>")
    content, _ = translated(tmp_path, body)
    assert paragraphs(content) == [f"{span('T2', 'THE CAR STOPS.')} <text:s/>",
                                   span("Source_20_Text", "make test")]


def test_a_header_uses_the_automatic_styles_of_styles_xml(tmp_path: Path) -> None:
    # styles.xml's own T1 (Consolas) is not content.xml's T1: each part's automatic styles are its own
    header = f"<text:p>Version {span('T1', 'v2.1-rc')} of the guide</text:p>"
    _, styles = translated(tmp_path, "<text:p>Body text here.</text:p>", header=header)
    assert f"VERSION {span('T1', 'v2.1-rc')} OF THE GUIDE" in styles


def test_code_spans_are_what_the_paragraph_keeps() -> None:
    # bench/office_fixtures.py counts code runs with OdfParagraph.code_spans: the spans it keeps, nothing else
    root = etree.fromstring(content_xml("").encode())
    p = etree.fromstring(f'<text:p {NS}>Use {span("T2", "cp")} and {span("Source_20_Text", "mv")} in '
                         f'{span("T5", "Arial")} text.</text:p>')
    spans = odt_format.OdfParagraph(p, code=StyleTable.read(root).code()).code_spans()
    assert ["".join(s.itertext()) for s in spans] == ["cp", "mv"]


@pytest.mark.parametrize("names, pitch, code", [
    (("Liberation Mono",), None, True), (("Courier New1", "'Courier New'"), "variable", True),
    (("DejaVu Sans Mono",), None, True), (("Consolas",), None, True), (("Lucida Console",), None, True),
    (("Source Code Pro",), None, True), (("monospace",), None, True), (("Terminus",), "fixed", True),
    (("Liberation Mono1", "'Liberation Mono'"), None, True),  # LibreOffice's renamed duplicate declaration
    (("Arial",), None, False), (("Monotype Corsiva",), None, False), (("Code2000",), None, False),
    (("Liberation Serif",), "variable", False), (("MS Gothic",), "fixed", False), (("ＭＳ 明朝",), "fixed", False),
    (("Noto Sans Mono CJK JP",), "fixed", False)])
def test_which_font_is_a_code_font(names: tuple[str, ...], pitch: str | None, code: bool) -> None:
    assert monospaced(*names, pitch=pitch) is code

"""What HTML and EPUB documents keep as atoms (issue 46): MathML, SVG, code, kbd, var, samp and translate="no" are
never sent to the model and stay in their sentence as written, with the punctuation written against them; adjacent
atoms stay apart; <ruby> keeps its base text in the sentence and its annotations as written. Built the way pandoc
(EPUB 3 with MathML), MathJax and Japanese authoring tools write them."""

from __future__ import annotations

import zipfile
from pathlib import Path

from lxml import etree

from nmt.translation.documents import epub as epub_format
from nmt.translation.documents.html import parse_html
from tests.helpers.documents import reverse_upper

MATHML = "http://www.w3.org/1998/Math/MathML"
XHTML = "http://www.w3.org/1999/xhtml"


def translated(fragment: str, xml: bool = False) -> str:
    doc = parse_html(fragment, xml)
    paragraphs = doc.paragraphs()
    return doc.write(reverse_upper(paragraphs) if paragraphs else [])


def test_mathml_is_an_atom_in_its_sentence() -> None:
    # pandoc's EPUB writer puts inline TeX as MathML among the words, each token (<mi>, <mo>, <mn>) an element.
    fragment = ('<p>The value <math xmlns="http://www.w3.org/1998/Math/MathML"><mi>x</mi><mo>=</mo><mn>2</mn>'
                '</math> is small.</p>')
    doc = parse_html(fragment)
    assert doc.texts == ["The value is small."]  # one sentence, no "x" sent
    out = translated(fragment)
    assert '<mi>x</mi><mo>=</mo><mn>2</mn>' in out and out.count("<math") == 1
    assert "SMALL. IS VALUE" in out


def test_display_math_and_prefixed_mathml_are_kept() -> None:
    block = ('<section><p>Sum:</p>\n<math display="block"><munderover><mo>&#x2211;<!-- ∑ --></mo><mi>n</mi>'
             '</munderover><mi>z</mi></math>\n<p>End of it.</p></section>')
    assert parse_html(block, xml=True).texts == ["Sum:", "End of it."]
    prefixed = '<p>A <m:math xmlns:m="http://www.w3.org/1998/Math/MathML"><m:mi>x</m:mi></m:math> b.</p>'
    assert parse_html(prefixed, xml=True).texts == ["A b."]


def test_svg_text_kbd_var_samp_and_translate_no_are_atoms() -> None:
    fragment = ('<p>A <svg width="10"><text x="1">label</text></svg> icon, <var>n</var> items, '
                '<samp>error</samp> shown, <span translate="no">Acme Inc</span> name.</p>')
    assert parse_html(fragment).texts == ["A icon, items, shown, name."]
    out = translated(fragment)
    for kept in ('<svg width="10"><text x="1">label</text></svg>', "<var>n</var>", "<samp>error</samp>",
                 '<span translate="no">Acme Inc</span>'):
        assert kept in out


def test_adjacent_atoms_stay_apart_with_their_separators() -> None:
    # pandoc doc/getting-started's "`Applications`, then `Utilities`" as HTML, and a keyboard shortcut.
    out = translated("<p>Open <code>Applications</code>, <code>Utilities</code> now.</p>")
    assert "<code>Applications</code>, <code>Utilities</code>" in out
    out = translated("<p>Press <kbd>Ctrl</kbd>+<kbd>C</kbd> to copy.</p>")
    assert "<kbd>Ctrl</kbd>+<kbd>C</kbd>" in out and "COPY." in out
    out = translated("<p>Use <code>a</code> <code>b</code> here.</p>")
    assert "<code>a</code> <code>b</code>" in out


def test_punctuation_written_against_an_atom_stays_with_it() -> None:
    doc = parse_html("<p>See (<code>https://x.org</code>) and '<code>main</code>', then go.</p>")
    assert doc.texts == ["See and then go."]
    out = translated("<p>See (<code>https://x.org</code>) and '<code>main</code>', then go.</p>")
    assert "(<code>https://x.org</code>)" in out and "'<code>main</code>'," in out
    # A sentence end after an atom stays in the text: it still splits the sentences.
    assert parse_html("<p>Run <code>x</code>. Then stop.</p>").texts == ["Run .", "Then stop."]


def test_ruby_base_text_stays_in_the_sentence() -> None:
    fragment = "<p>私は<ruby>漢<rp>(</rp><rt>kan</rt><rp>)</rp>字<rp>(</rp><rt>ji</rt><rp>)</rp></ruby>が好きです。</p>"
    assert parse_html(fragment).texts == ["私は漢字が好きです。"]  # not "私は", "漢", "kan", ...
    out = translated("<p>The <ruby>red<rp>(</rp><rt>rot</rt><rp>)</rp></ruby> car.</p>")
    assert "<rt>rot</rt>" in out and "RED" in out and "CAR. " in out  # annotation kept, base translated


def test_pandoc_style_epub_math_comes_back_as_written(tmp_path: Path) -> None:
    chapter = (f'<?xml version="1.0" encoding="UTF-8"?>\n<html xmlns="{XHTML}"><head><title>Math</title></head><body>'
               f'<p>Let <math xmlns="{MATHML}" display="inline"><semantics><mrow><mi>x</mi><mo>+</mo><mi>z</mi>'
               '</mrow><annotation encoding="application/x-tex">x+z</annotation></semantics></math> be the sum, '
               '<code>f</code>, <code>g</code>.</p></body></html>')
    opf = ('<?xml version="1.0" encoding="UTF-8"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0" '
           'unique-identifier="id"><metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:identifier id="id">x'
           '</dc:identifier><dc:title>T</dc:title><dc:language>en</dc:language></metadata><manifest>'
           '<item id="c" href="ch.xhtml" media-type="application/xhtml+xml" properties="mathml"/></manifest>'
           '<spine><itemref idref="c"/></spine></package>')
    container = ('<?xml version="1.0"?><container version="1.0" '
                 'xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles>'
                 '<rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/>'
                 '</rootfiles></container>')
    src = tmp_path / "math.epub"
    with zipfile.ZipFile(src, "w") as z:
        z.writestr("mimetype", "application/epub+zip", zipfile.ZIP_STORED)
        z.writestr("META-INF/container.xml", container)
        z.writestr("OEBPS/content.opf", opf)
        z.writestr("OEBPS/ch.xhtml", chapter)
    epub_format.translate(src, tmp_path / "out.epub", reverse_upper)
    with zipfile.ZipFile(tmp_path / "out.epub") as z:
        out = etree.fromstring(z.read("OEBPS/ch.xhtml"))
    assert [el.text for el in out.iter(f"{{{MATHML}}}mi")] == ["x", "z"]
    assert out.find(f".//{{{MATHML}}}annotation").text == "x+z"
    text = "".join(out.find(f".//{{{XHTML}}}p").itertext())
    assert "SUM," in text and "THE BE LET" in text and "f, g" in text  # the atoms apart, as written
